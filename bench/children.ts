/**
 * Child processes of the benchmarks (upstream, floor forwarder, appliances): started, tracked, and
 * stopped with SIGTERM (then SIGKILL after 30 s), so no run leaves a process behind.
 */
import { spawn, type ChildProcess } from 'node:child_process'

export interface Child {
  readonly process: ChildProcess
  readonly exited: Promise<number | null>
  stop(): Promise<number | null>
}

export function track(child: ChildProcess): Child {
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
  return {
    process: child,
    exited,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM')
      const timer = setTimeout(() => child.kill('SIGKILL'), 30_000)
      const code = await exited
      clearTimeout(timer)
      return code
    },
  }
}

/** Every child started through this module, for the final clean-up. */
export const children = new Set<Child>()

/** Spawns a node process that prints a `{"msg": <msg>, "url": …}` line on stdout; resolves with that url. */
export async function spawnWithUrl(args: string[], env: NodeJS.ProcessEnv, msg: string): Promise<{ child: Child; url: string }> {
  const proc = spawn(process.execPath, args, { env, stdio: ['ignore', 'pipe', 'inherit'] })
  const child = track(proc)
  children.add(child)
  const url = await new Promise<string>((resolve, reject) => {
    let out = ''
    const timer = setTimeout(() => reject(new Error(`${args.join(' ')} did not start within 30 s`)), 30_000)
    proc.stdout?.on('data', (chunk: Buffer) => {
      out += chunk.toString()
      const line = out.split('\n').find((l) => l.includes(`"${msg}"`))
      if (line !== undefined) {
        clearTimeout(timer)
        // Nothing else is printed; keep the pipe drained anyway.
        proc.stdout?.removeAllListeners('data')
        proc.stdout?.resume()
        resolve((JSON.parse(line) as { url: string }).url)
      }
    })
    proc.once('exit', (code) => reject(new Error(`${args.join(' ')} exited with ${String(code)}`)))
  })
  return { child, url }
}

/**
 * Runs a benchmark's main function: on failure prints `<name> failed: <message>` (the message only, no
 * stack), stops every child still running and sets exit code 1.
 */
export function runMain(name: string, main: () => Promise<void>): void {
  main().catch(async (error: unknown) => {
    process.stderr.write(`${name} failed: ${error instanceof Error ? error.message : String(error)}\n`)
    for (const child of children) await child.stop().catch(() => {})
    process.exitCode = 1
  })
}
