/**
 * Infrastructure problems at start-up, through the CLI as an operator runs it: a port that is taken
 * names the listener, its variable and the address; a PostgreSQL that refuses the connection is named
 * with its address (never the password) and DATABASE_URL. Each exits non-zero with one line on stderr
 * and no stack trace.
 */
import t, { type Test } from 'tap'
import { spawn } from 'node:child_process'
import { mkdtempSync } from 'node:fs'
import { createServer, type Server } from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { CLI, closedPort, startService } from '../helpers/appliance.js'
import { startUpstream } from '../helpers/upstream-server.js'

t.setTimeout(180_000)

interface Exit { code: number | null; stdout: string; stderr: string }

/** Runs `agent-trust <args>` with only `env` (plus PATH) until it exits by itself. */
function runToExit(args: string[], env: Record<string, string>): Promise<Exit> {
  const child = spawn(process.execPath, [CLI, ...args], {
    env: { PATH: process.env.PATH, SERVICE_HOST: '127.0.0.1', SERVICE_DATA_DIR: mkdtempSync(path.join(tmpdir(), 'svc-startup-')), ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (chunk) => { stdout += String(chunk) })
  child.stderr.on('data', (chunk) => { stderr += String(chunk) })
  const timer = setTimeout(() => child.kill('SIGKILL'), 120_000)
  return new Promise((resolve) => child.on('exit', (code) => {
    clearTimeout(timer)
    resolve({ code, stdout, stderr })
  }))
}

/** A port something else already listens on, for the duration of the test file. */
async function takenPort(t: Test): Promise<number> {
  const server: Server = createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  const address = server.address()
  return typeof address === 'object' && address !== null ? address.port : 0
}

function oneClearLine(t: Test, run: Exit, label: string): void {
  t.ok(run.code !== 0 && run.code !== null, `${label}: exits non-zero by itself (${String(run.code)})`)
  t.equal(run.stderr.trim().split('\n').length, 1, `${label}: one line on stderr`)
  t.match(run.stderr, /^agent-trust: /, `${label}: from the command`)
  t.notMatch(`${run.stdout}${run.stderr}`, /\n\s+at /, `${label}: no stack trace`)
}

t.test('the admin plane\'s port is taken: the message names the admin plane, PORT and the address', async (t) => {
  const port = await takenPort(t)
  const run = await runToExit(['serve'], { DATABASE_URL: 'memory://', PORT: String(port) })
  oneClearLine(t, run, 'admin plane')
  t.match(run.stderr, `the admin plane cannot listen on 127.0.0.1:${port} (PORT=${port}, SERVICE_HOST=127.0.0.1): the address is already in use`)
})

t.test('the gateway\'s port is taken: the message names the gateway and SERVICE_GATEWAY_PORT', async (t) => {
  const port = await takenPort(t)
  const upstream = await startUpstream(t)
  const run = await runToExit(['serve'], { DATABASE_URL: 'memory://', PORT: '0', SERVICE_GATEWAY_PORT: String(port), SERVICE_UPSTREAM_URL: upstream.url })
  oneClearLine(t, run, 'gateway')
  t.match(run.stderr, `the gateway cannot listen on 127.0.0.1:${port} (SERVICE_GATEWAY_PORT=${port}, SERVICE_HOST=127.0.0.1): the address is already in use`)
})

t.test('a gateway-only process whose PORT is taken names its operations listener', async (t) => {
  const port = await takenPort(t)
  const upstream = await startUpstream(t)
  const registry = await startService(t, {})
  const run = await runToExit(['gateway'], {
    PORT: String(port),
    SERVICE_GATEWAY_PORT: '0',
    SERVICE_REGISTRY_URL: registry.adminUrl,
    SERVICE_REGISTRY_KEY: registry.operatorKey,
    SERVICE_UPSTREAM_URL: upstream.url,
  })
  oneClearLine(t, run, 'operations listener')
  t.match(run.stderr, `the operations listener cannot listen on 127.0.0.1:${port} (PORT=${port}, SERVICE_HOST=127.0.0.1): the address is already in use`)
  t.notMatch(`${run.stdout}${run.stderr}`, registry.operatorKey, 'the registry key is not printed')
  await registry.stop()
})

t.test('PostgreSQL refuses the connection: the message names PostgreSQL, its address and DATABASE_URL, never the password', async (t) => {
  const port = await closedPort()
  const url = `postgres://postgres:pw-i19cli-secret@127.0.0.1:${port}/i19cli_refused`
  for (const command of ['serve', 'migrate', 'bootstrap']) {
    const run = await runToExit([command], { DATABASE_URL: url, PORT: '0' })
    oneClearLine(t, run, command)
    t.match(run.stderr, `cannot connect to PostgreSQL at 127.0.0.1:${port}, database "i19cli_refused" (DATABASE_URL): connection refused`, `${command}: names the database`)
    t.notMatch(`${run.stdout}${run.stderr}`, 'pw-i19cli-secret', `${command}: the password is not printed`)
    t.notMatch(run.stdout, 'listening', `${command}: nothing listened`)
  }
})
