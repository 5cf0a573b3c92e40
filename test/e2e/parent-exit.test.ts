/**
 * `agent-trust serve` and `agent-trust gateway` stop when the process that started them ends, so that
 * killing what a user started (`npx agent-trust gateway`, a script) never leaves a server holding its
 * ports. Real parents are killed while the child serves: npx (which runs the command under `sh -c`)
 * with SIGTERM and with SIGKILL, and a node parent that forwards nothing, with SIGKILL; the child then
 * shuts down as on SIGTERM (its log says why, it exits 0, its ports are free). With
 * SERVICE_STOP_WITH_PARENT=false the child outlives its parent.
 */
import t, { type Test } from 'tap'
import { spawn, type ChildProcess } from 'node:child_process'
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, readlinkSync, realpathSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { adminCall, CLI, startService } from '../helpers/appliance.js'
import { startUpstream } from '../helpers/upstream-server.js'
import { waitFor } from '../helpers/hostile-http.js'
import { descendants, portAccepts, running } from '../helpers/processes.js'

t.setTimeout(240_000)

// The repository whose build is under test: npx finds its `agent-trust` bin from there.
const ROOT = path.resolve(path.dirname(CLI), '..', '..', '..')
if (!existsSync(path.join(ROOT, 'package.json'))) throw new Error(`no package.json above ${CLI}`)
const dir = mkdtempSync(path.join(tmpdir(), 'svc-parent-exit-'))
t.teardown(() => rmSync(dir, { recursive: true, force: true }))

const registry = await startService(t, {})
const org = await adminCall(registry.adminUrl, registry.operatorKey, 'POST', '/v1/orgs', { name: 'parent-exit-org' })
if (org.status !== 201) throw new Error(`org creation failed: ${org.status}`)
const orgKey = org.body.data.apiKey.key as string
const upstream = await startUpstream(t)

const BASE_ENV = {
  PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? dir, PORT: '0', SERVICE_GATEWAY_PORT: '0', SERVICE_HOST: '127.0.0.1',
  SERVICE_LOG_LEVEL: 'info', CA_ISSUER_URL: 'http://registry.test', SERVICE_UPSTREAM_URL: upstream.url, SERVICE_DATA_DIR: dir,
  // npm must not look for its own updates from a test.
  npm_config_update_notifier: 'false',
}
const GATEWAY_ENV = { ...BASE_ENV, SERVICE_REGISTRY_URL: registry.adminUrl, SERVICE_REGISTRY_KEY: orgKey }
const SERVE_ENV = { ...BASE_ENV, DATABASE_URL: 'memory://' }

function urlAccepts(url: string): Promise<boolean> {
  const { hostname, port } = new URL(url)
  return portAccepts(Number(port), hostname)
}

interface Started {
  parent: ChildProcess
  /** The pid of the node process that serves (the CLI itself). */
  server: number
  log: () => string
  urls: string[]
}

/**
 * Starts `parent` (its output goes to `logFile`, which the server inherits, so the server can still log
 * once the parent is gone) and waits until the server below it listens.
 */
async function startUnder(t: Test, command: 'serve' | 'gateway', parent: ChildProcess, logFile: string): Promise<Started> {
  t.teardown(() => {
    if (parent.exitCode === null && parent.signalCode === null) parent.kill('SIGKILL')
  })
  const log = (): string => (existsSync(logFile) ? readFileSync(logFile, 'utf8') : '')
  const listening = command === 'serve' ? /"url":"(http:[^"]+)"[^\n]*"msg":"admin plane listening"/ : /"url":"(http:[^"]+)"[^\n]*"msg":"gateway operations listener up"/
  const up = await waitFor(() => listening.test(log()) && /"msg":"gateway listening"/.test(log()), 120_000, 100)
  if (!up) throw new Error(`agent-trust ${command} did not start:\n${log()}`)
  // The one node process below the parent (npx's is a shell, then node; the bin may run by any path).
  const node = realpathSync(process.execPath)
  const server = descendants(parent.pid as number).find((pid) => {
    try {
      return readlinkSync(`/proc/${pid}/exe`) === node
    } catch {
      return false
    }
  })
  if (server === undefined) throw new Error('the server process was not found below its parent')
  t.teardown(() => {
    if (running(server)) process.kill(server, 'SIGKILL')
  })
  const urls = [...log().matchAll(/"url":"(http:[^"]+)"[^\n]*"msg":"(?:admin plane listening|gateway operations listener up|gateway listening)"/g)].map((match) => match[1] as string)
  return { parent, server, log, urls }
}

/** `npx agent-trust <command>` run from the repository, as the README runs it. */
async function underNpx(t: Test, command: 'serve' | 'gateway', env: NodeJS.ProcessEnv, name: string): Promise<Started> {
  const logFile = path.join(dir, `${name}.log`)
  const fd = openSync(logFile, 'w')
  const parent = spawn('npx', ['agent-trust', command], { cwd: ROOT, env, stdio: ['ignore', fd, fd] })
  closeSync(fd)
  return startUnder(t, command, parent, logFile)
}

/** A node parent that starts the command and then does nothing: it passes no signal on. */
async function underNode(t: Test, command: 'serve' | 'gateway', env: NodeJS.ProcessEnv, name: string): Promise<Started> {
  const logFile = path.join(dir, `${name}.log`)
  const script = `
    const { spawn } = require('node:child_process')
    const { openSync } = require('node:fs')
    const fd = openSync(${JSON.stringify(logFile)}, 'w')
    spawn(process.execPath, [${JSON.stringify(CLI)}, ${JSON.stringify(command)}], { stdio: ['ignore', fd, fd] })
    setInterval(() => {}, 1000)
  `
  const parent = spawn(process.execPath, ['-e', script], { env, stdio: 'ignore' })
  return startUnder(t, command, parent, logFile)
}

async function expectStopped(t: Test, started: Started): Promise<void> {
  for (const url of started.urls) t.ok(await urlAccepts(url), `${url} serves before the parent is killed`)
  t.ok(await waitFor(() => !running(started.server), 15_000, 100), 'the server stops within seconds of its parent')
  t.match(started.log(), /"parent_pid":\d+[^\n]*"msg":"parent process exited; shutting down"/, 'its log says why')
  t.match(started.log(), /"code":0[^\n]*"msg":"stopped"/, 'a clean shutdown, exit code 0')
  for (const url of started.urls) t.notOk(await urlAccepts(url), `${url} is free again`)
}

t.test('npx agent-trust gateway, npx killed with SIGTERM: the gateway stops', async (t) => {
  const started = await underNpx(t, 'gateway', GATEWAY_ENV, 'npx-term')
  t.not(started.server, started.parent.pid, 'npx runs the command in a process of its own')
  started.parent.kill('SIGTERM')
  await expectStopped(t, started)
})

t.test('npx agent-trust gateway, npx killed with SIGKILL: the gateway stops, though the shell between them is alive', async (t) => {
  const started = await underNpx(t, 'gateway', GATEWAY_ENV, 'npx-kill')
  const stat = readFileSync(`/proc/${started.server}/stat`, 'utf8')
  const shell = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1])
  t.not(shell, started.parent.pid, 'a shell stands between npx and the server')
  started.parent.kill('SIGKILL')
  await expectStopped(t, started)
})

t.test('agent-trust serve under a node parent killed with SIGKILL: the appliance and its gateway stop', async (t) => {
  const started = await underNode(t, 'serve', SERVE_ENV, 'node-kill')
  t.equal(started.urls.length, 2, 'the admin plane and the gateway')
  started.parent.kill('SIGKILL')
  await expectStopped(t, started)
})

t.test('SERVICE_STOP_WITH_PARENT=false: the gateway outlives its parent', async (t) => {
  const started = await underNode(t, 'gateway', { ...GATEWAY_ENV, SERVICE_STOP_WITH_PARENT: 'false' }, 'node-keep')
  started.parent.kill('SIGKILL')
  await new Promise((resolve) => setTimeout(resolve, 3000))
  t.ok(running(started.server), 'still running three checks later')
  for (const url of started.urls) t.ok(await urlAccepts(url), `${url} still serves`)
  t.notMatch(started.log(), /parent process exited/)
  process.kill(started.server, 'SIGTERM')
  t.ok(await waitFor(() => !running(started.server), 15_000, 100), 'SIGTERM still stops it')
})
