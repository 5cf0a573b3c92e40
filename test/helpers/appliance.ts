/**
 * Runs the `agent-trust` command as a child process, as a user would (`serve` for the appliance,
 * `gateway` for a gateway-only process), and waits until its listeners are up. Shared by the
 * end-to-end suites; everything is killed in teardown.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { createServer as createNetServer } from 'node:net'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { generateApiKeySecret } from '../../src/core/api-key.js'
import { CLI } from './compiled.js'

export { CLI }

export interface RunningService {
  readonly child: ChildProcess
  /** Admin plane (serve) or operations listener (gateway). */
  readonly adminUrl: string
  /** Gateway listener, or null when no upstream was configured. */
  readonly gatewayUrl: string | null
  /** The bootstrap operator key (serve only). */
  readonly operatorKey: string
  readonly dataDir: string
  /** Everything the process wrote to stdout and stderr so far. */
  output(): string
  /** Parsed JSON log lines so far. */
  logLines(): Record<string, unknown>[]
  /** SIGTERM, then the exit code. */
  stop(): Promise<number | null>
  readonly exited: Promise<number | null>
}

interface Teardown {
  teardown(fn: () => unknown): void
}

/**
 * Starts `agent-trust <command>` with only the given environment (plus PATH/HOME). Defaults: loopback,
 * ports 0, a fresh data directory, a throw-away embedded database, a known operator key, and
 * `CA_ISSUER_URL=http://registry.test` so badges carry a stable issuer.
 */
export async function startService(
  t: Teardown, env: Record<string, string>, options: { command?: 'serve' | 'gateway'; timeoutMs?: number } = {},
): Promise<RunningService> {
  const command = options.command ?? 'serve'
  const dataDir = env.SERVICE_DATA_DIR ?? mkdtempSync(path.join(tmpdir(), 'svc-e2e-'))
  const operatorKey = env.SERVICE_BOOTSTRAP_API_KEY ?? generateApiKeySecret()
  const fullEnv: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    PORT: '0',
    SERVICE_GATEWAY_PORT: '0',
    SERVICE_HOST: '127.0.0.1',
    SERVICE_LOG_LEVEL: 'info',
    DATABASE_URL: 'memory://',
    CA_ISSUER_URL: 'http://registry.test',
    SERVICE_DATA_DIR: dataDir,
    ...(command === 'serve' ? { SERVICE_BOOTSTRAP_API_KEY: operatorKey } : {}),
    ...env,
  }
  const child = spawn(process.execPath, [CLI, command], { env: fullEnv, stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  child.stdout?.on('data', (chunk) => { out += String(chunk) })
  child.stderr?.on('data', (chunk) => { out += String(chunk) })
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)))
  t.teardown(() => { if (child.exitCode === null) child.kill('SIGKILL') })
  const wantsGateway = fullEnv.SERVICE_UPSTREAM_URL !== undefined || fullEnv.SERVICE_ROUTES_FILE !== undefined
  const adminMessage = command === 'serve' ? 'admin plane listening' : 'gateway operations listener up'
  const deadline = Date.now() + (options.timeoutMs ?? 90_000)
  for (;;) {
    const admin = new RegExp(`"url":"(http://[^"]+)"[^\\n]*"msg":"${adminMessage}"`).exec(out)
    const gateway = /"url":"(http:\/\/[^"]+)"[^\n]*"msg":"gateway listening"/.exec(out)
    if (admin !== null && (!wantsGateway || gateway !== null)) {
      const logLines = (): Record<string, unknown>[] => out.split('\n').filter((l) => l.startsWith('{')).map((l) => {
        try {
          return JSON.parse(l) as Record<string, unknown>
        } catch {
          return {}
        }
      })
      return {
        child,
        adminUrl: admin[1] as string,
        gatewayUrl: gateway === null ? null : (gateway[1] as string),
        operatorKey,
        dataDir,
        output: () => out,
        logLines,
        exited,
        async stop() {
          if (child.exitCode === null) child.kill('SIGTERM')
          return exited
        },
      }
    }
    if (child.exitCode !== null || Date.now() > deadline) throw new Error(`agent-trust ${command} did not start:\n${out}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

/**
 * A teardown registrar that also runs its functions when the test process exits early (a failed
 * start-up throws at top level, and tap would then leave already started appliance processes running).
 * startService's teardown kills its child synchronously, so running it from an exit handler is enough.
 */
export function exitSafeTeardown(t: Teardown): Teardown {
  const killers: (() => unknown)[] = []
  process.on('exit', () => { for (const kill of killers) kill() })
  return { teardown(fn: () => unknown): void { killers.push(fn); t.teardown(fn) } }
}

/** Start-up deadline for suites that start several appliances at once on a busy 2-core machine. */
export const SLOW_START = { timeoutMs: 120_000 }

/** A free TCP port with nothing listening on it any more (for "upstream unreachable" cases). */
export async function closedPort(): Promise<number> {
  const server = createNetServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const address = server.address()
  const port = typeof address === 'object' && address !== null ? address.port : 0
  await new Promise<void>((resolve) => server.close(() => resolve()))
  return port
}

/** JSON call to the admin plane with an API key; returns status and parsed body. */
export async function adminCall(
  url: string, key: string, method: string, urlPath: string, body?: unknown,
): Promise<{ status: number; body: any }> {
  const res = await fetch(`${url}${urlPath}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  })
  const text = await res.text()
  let parsed: unknown
  try {
    parsed = text === '' ? undefined : JSON.parse(text)
  } catch {
    parsed = text
  }
  return { status: res.status, body: parsed }
}

/** Registers an agent in the key's org and issues it an IAL-0 badge; returns the agent and token. */
export async function agentWithBadge(
  url: string, key: string, name: string, options: { ttl?: number } = {},
): Promise<{ id: string; did: string; token: string; jti: string }> {
  const created = await adminCall(url, key, 'POST', '/v1/agents', { name, domain: 'example.com' })
  if (created.status !== 201) throw new Error(`agent create failed: ${created.status} ${JSON.stringify(created.body)}`)
  const id = created.body.data.id as string
  const issued = await adminCall(url, key, 'POST', `/v1/agents/${id}/badge`, { domain: 'example.com', ...(options.ttl === undefined ? {} : { ttl: options.ttl }) })
  if (issued.status !== 200) throw new Error(`badge issue failed: ${issued.status} ${JSON.stringify(issued.body)}`)
  return { id, did: issued.body.data.subject as string, token: issued.body.data.token as string, jti: issued.body.data.jti as string }
}
