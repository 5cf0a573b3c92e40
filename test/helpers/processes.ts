/** The process tree as Linux's /proc shows it, for the tests that check what a signal leaves running. */
import { readdirSync, readFileSync } from 'node:fs'
import { connect } from 'node:net'

/** The fields of /proc/<pid>/stat after the command name, which may itself hold spaces and parentheses. */
function statFields(pid: number | string): string[] {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ')
}

/** The processes below `pid`, from /proc. */
export function descendants(pid: number): number[] {
  const parents = new Map<number, number>()
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue
    try {
      parents.set(Number(name), Number(statFields(name)[1]))
    } catch {
      // The process ended while the list was read.
    }
  }
  const found: number[] = []
  const queue = [pid]
  while (queue.length > 0) {
    const parent = queue.shift() as number
    for (const [child, ppid] of parents) {
      if (ppid === parent) {
        found.push(child)
        queue.push(child)
      }
    }
  }
  return found
}

/** Whether the process runs (a zombie waiting to be reaped has ended). */
export function running(pid: number): boolean {
  try {
    return statFields(pid)[0] !== 'Z'
  } catch {
    return false
  }
}

/** Whether something accepts TCP connections on the port (a server still listening). */
export function portAccepts(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ port, host })
    socket.once('connect', () => { socket.destroy(); resolve(true) })
    socket.once('error', () => resolve(false))
  })
}
