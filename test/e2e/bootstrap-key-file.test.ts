/**
 * One bootstrap key file per database: a data directory first used with the embedded database and then
 * pointed at PostgreSQL keeps the embedded database's key file untouched, and PostgreSQL's generated
 * key goes to a file of its own. Through the CLI, as an operator would switch.
 */
import t, { type Test } from 'tap'
import { randomBytes } from 'node:crypto'
import { mkdtempSync, readFileSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import pg from 'pg'
import { bootstrapKeyFile } from '../../src/admin/services/credentials.js'
import { adminCall, startService } from '../helpers/appliance.js'
import { TEST_DATABASE_URL } from '../helpers/database.js'

t.setTimeout(240_000)

/** A new, empty PostgreSQL database on the test server, dropped in teardown; its URL. */
async function freshPostgresDatabase(t: Test): Promise<string> {
  const name = `i19cli_boot_${randomBytes(5).toString('hex')}`
  const admin = new pg.Client({ connectionString: TEST_DATABASE_URL })
  await admin.connect()
  await admin.query(`CREATE DATABASE ${name}`)
  await admin.end()
  t.teardown(async () => {
    const cleanup = new pg.Client({ connectionString: TEST_DATABASE_URL })
    await cleanup.connect()
    await cleanup.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`)
    await cleanup.end()
  })
  const url = new URL(TEST_DATABASE_URL)
  url.pathname = `/${name}`
  return url.toString()
}

/** The key and file a first start printed (no SERVICE_BOOTSTRAP_API_KEY: the key is generated). */
function printedKey(output: string): { key: string; file: string } {
  const key = /API key \(shown once\): (sk_[A-Za-z0-9_-]+)/.exec(output)?.[1]
  const file = /It is also stored in (\S+) \(mode 0600\)/.exec(output)?.[1]
  if (key === undefined || file === undefined) throw new Error(`no generated key printed:\n${output}`)
  return { key, file }
}

// Unset (empty counts as unset): the embedded database in SERVICE_DATA_DIR, and a generated key.
const GENERATED_KEY = { SERVICE_BOOTSTRAP_API_KEY: '' }

t.test('switching a data directory from the embedded database to PostgreSQL keeps the first key file', async (t) => {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'svc-e2e-bootkey-'))
  const embeddedFile = path.join(dataDir, 'bootstrap-api-key')

  const embedded = await startService(t, { ...GENERATED_KEY, DATABASE_URL: '', SERVICE_DATA_DIR: dataDir })
  const first = printedKey(embedded.output())
  t.equal(first.file, embeddedFile, 'the embedded database keeps the documented bootstrap-api-key')
  t.equal(readFileSync(embeddedFile, 'utf8').trim(), first.key)
  const before = { text: readFileSync(embeddedFile, 'utf8'), mtimeMs: statSync(embeddedFile).mtimeMs }
  t.equal(await embedded.stop(), 0)

  const databaseUrl = await freshPostgresDatabase(t)
  const postgres = await startService(t, { ...GENERATED_KEY, DATABASE_URL: databaseUrl, SERVICE_DATA_DIR: dataDir })
  const second = printedKey(postgres.output())
  t.not(second.key, first.key, 'PostgreSQL got a key of its own')
  t.not(second.file, embeddedFile, 'in a file of its own')
  t.equal(path.dirname(second.file), dataDir, 'in the same data directory')
  t.match(path.basename(second.file), /^bootstrap-api-key\.postgres-[0-9a-f]{12}$/)
  t.equal(readFileSync(second.file, 'utf8').trim(), second.key, 'which holds the printed key')
  t.equal(statSync(second.file).mode & 0o777, 0o600, 'owner-only')
  t.equal(readFileSync(embeddedFile, 'utf8'), before.text, 'the embedded database\'s key file is unchanged')
  t.equal(statSync(embeddedFile).mtimeMs, before.mtimeMs, 'and was not rewritten')
  t.equal((await adminCall(postgres.adminUrl, second.key, 'GET', '/v1/agents')).status, 200, 'the new file\'s key works on PostgreSQL')
  t.equal(await postgres.stop(), 0)

  const again = await startService(t, { ...GENERATED_KEY, DATABASE_URL: '', SERVICE_DATA_DIR: dataDir })
  t.notMatch(again.output(), 'shown once', 'back on the embedded database: no new key')
  t.equal((await adminCall(again.adminUrl, readFileSync(embeddedFile, 'utf8').trim(), 'GET', '/v1/agents')).status, 200, 'and its key file still opens it')
  t.equal(await again.stop(), 0)
})

t.test('the file name follows the database, never its password', async (t) => {
  const dir = '/var/lib/service'
  const file = (url: string): string => bootstrapKeyFile(dir, { kind: 'postgres', url })
  const base = file('postgres://svc:first-password@db.example:5432/service')
  t.equal(file('postgresql://svc:another-password@DB.example/service'), base, 'another password, scheme spelling, host case or the default port: the same database')
  t.equal(file('postgres://svc@db.example/service?password=x'), base, 'a password in the query is left out too')
  t.not(file('postgres://svc@db.example/other'), base, 'another database')
  t.not(file('postgres://svc@db.example:5433/service'), base, 'another port')
  t.not(file('postgres://svc@db.example/service?options=-c%20search_path%3Dother'), base, 'another schema')
  t.notMatch(base, 'first-password')
  t.equal(bootstrapKeyFile(dir, { kind: 'pglite', dataDir: `${dir}/pgdata` }), `${dir}/bootstrap-api-key`)
  t.equal(bootstrapKeyFile(dir, { kind: 'pglite', dataDir: null }), `${dir}/bootstrap-api-key.memory`, 'the throw-away database has its own')
})
