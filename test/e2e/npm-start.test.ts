/**
 * The README's start command, `npm start`, stops on one SIGTERM sent to the npm process: npm passes the
 * signal on, the appliance shuts down cleanly, every process of the start exits within seconds and the
 * port is free again. (npm runs the script with `sh -c`; a shell that forks instead of replacing itself
 * dies of the signal and leaves the appliance running, orphaned.)
 *
 * It runs in a copy of the repository, as a fresh clone would: `prestart` rebuilds, and rebuilding the
 * tree the other test files are running from could let them load a half-written module.
 */
import t from 'tap'
import { spawn } from 'node:child_process'
import { cpSync, existsSync, mkdtempSync, rmSync, symlinkSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { closedPort } from '../helpers/appliance.js'
import { waitFor } from '../helpers/hostile-http.js'
import { descendants, portAccepts, running } from '../helpers/processes.js'

t.setTimeout(240_000)

const ROOT = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..')

function copyOfRepository(): string {
  const copy = mkdtempSync(path.join(tmpdir(), 'svc-npm-start-'))
  for (const entry of ['package.json', 'package-lock.json', 'tsconfig.json', 'src', 'test', 'bench', 'console', 'scripts', 'schemas', 'policies', 'dist']) {
    cpSync(path.join(ROOT, entry), path.join(copy, entry), { recursive: true })
  }
  symlinkSync(path.join(ROOT, 'node_modules'), path.join(copy, 'node_modules'))
  return copy
}

t.test('npm start: one SIGTERM to npm stops everything and frees the port', async (t) => {
  const copy = copyOfRepository()
  const dataDir = mkdtempSync(path.join(tmpdir(), 'svc-npm-start-data-'))
  t.teardown(() => {
    rmSync(copy, { recursive: true, force: true })
    rmSync(dataDir, { recursive: true, force: true })
  })
  const port = await closedPort()
  // The README's defaults: the embedded database in SERVICE_DATA_DIR, no DATABASE_URL.
  const npm = spawn('npm', ['start'], {
    cwd: copy,
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      npm_config_update_notifier: 'false',
      PORT: String(port),
      SERVICE_GATEWAY_PORT: '0',
      SERVICE_HOST: '127.0.0.1',
      SERVICE_DATA_DIR: dataDir,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
    // Its own process group, so that teardown can end whatever a failed test leaves behind.
    detached: true,
  })
  const npmPid = npm.pid as number
  let out = ''
  npm.stdout.on('data', (chunk) => { out += String(chunk) })
  npm.stderr.on('data', (chunk) => { out += String(chunk) })
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => npm.on('exit', (code, signal) => resolve({ code, signal })))
  t.teardown(() => {
    try {
      process.kill(-npmPid, 'SIGKILL')
    } catch {
      // Nothing left.
    }
  })

  const ready = await waitFor(async () => {
    if (npm.exitCode !== null) return true
    const res = await fetch(`http://127.0.0.1:${port}/readyz`).catch(() => null)
    return res?.status === 200
  }, 180_000, 100)
  t.ok(ready && npm.exitCode === null, `npm start serves /readyz on PORT ${port}`)
  if (!ready || npm.exitCode !== null) {
    t.comment(out)
    return
  }
  t.ok(existsSync(path.join(dataDir, 'pgdata')), 'on the embedded database in the data directory')
  const processes = descendants(npmPid)
  t.ok(processes.length > 0, `npm started ${processes.length} process(es)`)

  process.kill(npmPid, 'SIGTERM')
  const npmExit = await Promise.race([exited, new Promise<null>((r) => setTimeout(() => r(null), 10_000))])
  t.ok(npmExit !== null, `npm exits within 10 s of one SIGTERM (${JSON.stringify(npmExit)})`)
  t.ok(await waitFor(() => processes.every((pid) => !running(pid)), 10_000, 100), 'and so does every process it started')
  t.notOk(await portAccepts(port), 'the port is free')
  t.match(out, /"signal":"SIGTERM","msg":"shutting down"/, 'the appliance shut down on the SIGTERM (cleanly, not killed)')
  t.match(out, /"code":0,"msg":"stopped"/, 'and stopped with exit code 0')
})
