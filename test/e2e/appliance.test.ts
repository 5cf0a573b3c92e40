/**
 * Runs the `agent-trust` command as a user would: a child process, real sockets, the embedded database in
 * a data directory (and real PostgreSQL), SIGTERM, restart.
 */
import t from 'tap'
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { generateApiKeySecret } from '../../src/core/api-key.js'
import { projectPath } from '../../src/core/paths.js'
import { createTestDatabase } from '../helpers/database.js'

const CLI = projectPath('dist', 'src', 'cli', 'index.js')

interface Running {
  child: ChildProcess
  url: string
  stdout: () => string
  exit: Promise<number | null>
}

function baseEnv(extra: Record<string, string>): NodeJS.ProcessEnv {
  // Only what the service needs: the test runner's own variables must not leak into the appliance.
  return { PATH: process.env.PATH, HOME: process.env.HOME, PORT: '0', SERVICE_HOST: '127.0.0.1', SERVICE_LOG_LEVEL: 'info', ...extra }
}

async function startService(env: Record<string, string>): Promise<Running> {
  const child = spawn(process.execPath, [CLI, 'serve'], { env: baseEnv(env), stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  child.stdout?.on('data', (chunk) => { out += String(chunk) })
  child.stderr?.on('data', (chunk) => { out += String(chunk) })
  const exit = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)))
  // Generous: CI runs two suites at once, each starting appliances, on a 2-core machine.
  const deadline = Date.now() + 90_000
  for (;;) {
    const match = /"url":"(http:\/\/127\.0\.0\.1:\d+)".*"msg":"admin plane listening"/.exec(out)
    if (match !== null) return { child, url: match[1] as string, stdout: () => out, exit }
    if (child.exitCode !== null || Date.now() > deadline) {
      // A child left running would hold the test file open until tap's timeout.
      child.kill('SIGKILL')
      throw new Error(`agent-trust serve did not start:\n${out}`)
    }
    await new Promise((r) => setTimeout(r, 50))
  }
}

async function api(url: string, key: string, method: string, urlPath: string, body?: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`${url}${urlPath}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  })
  const text = await res.text()
  return { status: res.status, body: text === '' ? undefined : JSON.parse(text) }
}

t.test('embedded database: first start, bootstrap key, SIGTERM, restart keeps everything', async (t) => {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'svc-e2e-'))
  const first = await startService({ SERVICE_DATA_DIR: dataDir })
  t.teardown(() => { first.child.kill('SIGKILL') })

  const keyFile = path.join(dataDir, 'bootstrap-api-key')
  const key = readFileSync(keyFile, 'utf8').trim()
  t.match(key, /^sk_[A-Za-z0-9_-]{43}$/)
  t.equal(statSync(keyFile).mode & 0o777, 0o600, 'the key file is owner-only')
  t.match(first.stdout(), `API key (shown once): ${key}`, 'the key is printed once on first start')
  t.match(first.stdout(), keyFile, 'and where it is stored')

  const ready = await fetch(`${first.url}/readyz`)
  t.equal(ready.status, 200)
  const agent = await api(first.url, key, 'POST', '/v1/agents', { name: 'persisted-agent', domain: 'persist.example.com' })
  t.equal(agent.status, 201)
  const apiKey = await api(first.url, key, 'POST', '/v1/keys', { name: 'ci key' })
  t.equal(apiKey.status, 201)

  first.child.kill('SIGTERM')
  t.equal(await first.exit, 0, 'SIGTERM exits 0')

  const second = await startService({ SERVICE_DATA_DIR: dataDir })
  t.teardown(() => { second.child.kill('SIGKILL') })
  t.notMatch(second.stdout(), 'shown once', 'no new bootstrap key on restart')
  const read = await api(second.url, key, 'GET', `/v1/agents/${agent.body.data.id}`)
  t.equal(read.status, 200, 'the agent survived the restart')
  t.equal(read.body.data.name, 'persisted-agent')
  const withNewKey = await api(second.url, apiKey.body.data.key, 'GET', '/v1/agents')
  t.equal(withNewKey.status, 200, 'the API key survived the restart')
  t.equal(withNewKey.body.data.length, 1)
  second.child.kill('SIGTERM')
  t.equal(await second.exit, 0)

  const migrate = spawnSync(process.execPath, [CLI, 'migrate'], { env: baseEnv({ SERVICE_DATA_DIR: dataDir }), encoding: 'utf8' })
  t.equal(migrate.status, 0)
  t.match(migrate.stdout, 'database is up to date')
})

t.test('real PostgreSQL with SERVICE_BOOTSTRAP_API_KEY', { skip: process.env.SERVICE_TEST_DB === 'pglite' ? 'postgres run only' : false }, async (t) => {
  const database = await createTestDatabase(t, { migrate: false })
  const key = generateApiKeySecret()
  const env = { DATABASE_URL: database.url as string, SERVICE_BOOTSTRAP_API_KEY: key, SERVICE_DATA_DIR: mkdtempSync(path.join(tmpdir(), 'svc-e2e-')) }
  const service = await startService(env)
  t.teardown(() => { service.child.kill('SIGKILL') })
  t.notMatch(service.stdout(), 'shown once', 'a configured key is never printed')
  t.notMatch(service.stdout(), key, 'nor logged')
  const created = await api(service.url, key, 'POST', '/v1/agents', { name: 'pg-agent' })
  t.equal(created.status, 201)
  const rows = await database.db.query<{ name: string }>('SELECT name FROM agents')
  t.same(rows.map((r) => r.name), ['pg-agent'], 'the service wrote to the configured schema')
  service.child.kill('SIGTERM')
  t.equal(await service.exit, 0)

  // A second start with the same key is idempotent: still one key with that secret.
  const again = await startService(env)
  t.teardown(() => { again.child.kill('SIGKILL') })
  const keys = await database.db.query<{ n: number }>('SELECT count(*)::int AS n FROM api_keys')
  t.equal(Number(keys[0]?.n), 1)
  again.child.kill('SIGTERM')
  t.equal(await again.exit, 0)
})

t.test('a corrupt authority key file stops start-up with a message naming the file', async (t) => {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'svc-e2e-'))
  const keyFile = path.join(dataDir, 'ca-keys.json')
  writeFileSync(keyFile, '{"keys": [', { mode: 0o600 })
  const run = spawnSync(process.execPath, [CLI, 'serve'], { env: baseEnv({ SERVICE_DATA_DIR: dataDir, CA_KEY_PATH: keyFile }), encoding: 'utf8', timeout: 30_000 })
  t.equal(run.status, 1, 'exits non-zero')
  t.match(run.stderr, keyFile, 'names the file')
  t.match(run.stderr, 'not valid JSON')
  t.notMatch(run.stderr, /\n\s+at /, 'no stack trace')
  t.equal(readFileSync(keyFile, 'utf8'), '{"keys": [', 'the file is not replaced')
})

t.test('service keys rotate adds a signer and keeps the old key published', async (t) => {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'svc-e2e-'))
  const env = baseEnv({ SERVICE_DATA_DIR: dataDir })
  const rotate = spawnSync(process.execPath, [CLI, 'keys', 'rotate'], { env, encoding: 'utf8' })
  t.equal(rotate.status, 0, rotate.stderr)
  const doc = JSON.parse(readFileSync(path.join(dataDir, 'ca-keys.json'), 'utf8'))
  t.equal(doc.keys.length, 2)
  t.match(rotate.stdout, doc.signing_kid)
  const old = doc.keys.find((k: { kid: string }) => k.kid !== doc.signing_kid).kid
  const signer = spawnSync(process.execPath, [CLI, 'keys', 'retire', doc.signing_kid], { env, encoding: 'utf8' })
  t.equal(signer.status, 1)
  t.match(signer.stderr, 'signing key')
  const retire = spawnSync(process.execPath, [CLI, 'keys', 'retire', old], { env, encoding: 'utf8' })
  t.equal(retire.status, 0, retire.stderr)
  t.equal(JSON.parse(readFileSync(path.join(dataDir, 'ca-keys.json'), 'utf8')).keys.length, 1)
})

t.test('check-config reports every problem and exits 2', async (t) => {
  const bad = spawnSync(process.execPath, [CLI, 'check-config'], {
    env: baseEnv({ PORT: 'x', SERVICE_ENFORCEMENT_MODE: 'EM-NONE', DATABASE_URL: 'mysql://nope' }),
    encoding: 'utf8',
  })
  t.equal(bad.status, 2)
  t.match(bad.stderr, 'PORT')
  t.match(bad.stderr, 'SERVICE_ENFORCEMENT_MODE')
  t.match(bad.stderr, 'DATABASE_URL')
  const good = spawnSync(process.execPath, [CLI, 'check-config'], { env: baseEnv({ DATABASE_URL: 'memory://' }), encoding: 'utf8' })
  t.equal(good.status, 0)
  t.match(good.stdout, 'configuration is valid')
  const usage = spawnSync(process.execPath, [CLI, 'frobnicate'], { env: baseEnv({ DATABASE_URL: 'memory://' }), encoding: 'utf8' })
  t.equal(usage.status, 2)
  t.match(usage.stderr, 'unknown command')
})
