/**
 * A fresh database per test file: a new schema on the real PostgreSQL (TEST_DATABASE_URL, default the
 * local `test` database), or an in-memory PGlite when SERVICE_TEST_DB=pglite. Migrated, and dropped in
 * teardown. The same tests run on both back ends.
 */
import { randomBytes } from 'node:crypto'
import pg from 'pg'
import { openDatabase, type Database } from '../../src/db/database.js'
import { migrate } from '../../src/db/migrate.js'

export const TEST_DATABASE_URL = process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test'
export const BACKEND: 'postgres' | 'pglite' = process.env.SERVICE_TEST_DB === 'pglite' ? 'pglite' : 'postgres'

interface Teardown {
  teardown(fn: () => unknown): void
}

export interface TestDatabase {
  readonly db: Database
  /** postgres only: the schema, for building a DATABASE_URL that points at it. */
  readonly schema: string | null
  /** A connection string that reaches this database from another process (postgres only). */
  readonly url: string | null
}

export async function createTestDatabase(t: Teardown, options: { migrate?: boolean } = {}): Promise<TestDatabase> {
  if (BACKEND === 'pglite') {
    const db = await openDatabase({ kind: 'pglite', dataDir: null })
    if (options.migrate !== false) await migrate(db)
    t.teardown(() => db.close())
    return { db, schema: null, url: null }
  }
  const schema = `t_${randomBytes(6).toString('hex')}`
  const admin = new pg.Client({ connectionString: TEST_DATABASE_URL })
  await admin.connect()
  await admin.query(`CREATE SCHEMA ${schema}`)
  await admin.end()
  const db = await openDatabase({ kind: 'postgres', url: TEST_DATABASE_URL, searchPath: schema, poolSize: 5 })
  if (options.migrate !== false) await migrate(db)
  t.teardown(async () => {
    await db.close()
    const cleanup = new pg.Client({ connectionString: TEST_DATABASE_URL })
    await cleanup.connect()
    await cleanup.query(`DROP SCHEMA ${schema} CASCADE`)
    await cleanup.end()
  })
  const url = new URL(TEST_DATABASE_URL)
  url.searchParams.set('options', `-c search_path=${schema}`)
  return { db, schema, url: url.toString() }
}
