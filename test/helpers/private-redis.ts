/**
 * A private redis-server, a child of the test on a fixed port, for what must not happen to the shared one:
 * stopping it, pausing it (SIGSTOP: connections stay open and commands time out), SCRIPT FLUSH. Nothing is
 * saved to disk. The process is killed on teardown whatever the test did.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { portAccepts } from './processes.js'

export interface PrivateRedis {
  readonly port: number
  readonly url: string
  /** Starts the server (again) on the same port, empty; resolves once it accepts connections. */
  start(): Promise<void>
  /** SIGKILL, as a crashed server; resolves once the port refuses connections. */
  stop(): Promise<void>
  /** SIGSTOP: the server holds its connections and answers nothing until resume(). */
  pause(): void
  resume(): void
}

interface Teardown {
  teardown(fn: () => unknown): void
}

async function until(ms: number, check: () => Promise<boolean>): Promise<boolean> {
  const deadline = Date.now() + ms
  while (Date.now() < deadline) {
    if (await check()) return true
    await new Promise((r) => setTimeout(r, 25))
  }
  return false
}

export async function startPrivateRedis(t: Teardown, port: number): Promise<PrivateRedis> {
  let child: ChildProcess | null = null
  const kill = (): void => {
    if (child !== null && child.exitCode === null && child.signalCode === null) {
      child.kill('SIGCONT')
      child.kill('SIGKILL')
    }
  }
  t.teardown(kill)
  process.on('exit', kill)
  const redis: PrivateRedis = {
    port,
    url: `redis://127.0.0.1:${port}`,
    async start() {
      if (await portAccepts(port)) throw new Error(`port ${port} is already taken: the private Redis cannot start`)
      child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--daemonize', 'no'], { stdio: 'ignore' })
      if (!(await until(10_000, () => portAccepts(port)))) throw new Error(`redis-server on ${port} did not start`)
    },
    async stop() {
      const exited = child === null || child.exitCode !== null ? Promise.resolve() : new Promise<void>((resolve) => child?.once('exit', () => resolve()))
      kill()
      await exited
      await until(5_000, async () => !(await portAccepts(port)))
    },
    pause() {
      child?.kill('SIGSTOP')
    },
    resume() {
      child?.kill('SIGCONT')
    },
  }
  await redis.start()
  return redis
}
