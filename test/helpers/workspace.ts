/**
 * A workspace known before the appliance starts, for suites whose gateway needs SERVICE_WORKSPACE: the
 * database migrated and bootstrapped as the appliance would do it (with the same operator key), the
 * `default` org's id read, and the environment that points the appliance at that database. On PostgreSQL
 * that is a fresh schema; with SERVICE_TEST_DB=pglite the embedded database on disk in `dataDir`.
 */
import type { Test } from 'tap'
import path from 'node:path'
import { bootstrap, BOOTSTRAP_KEY_FILE } from '../../src/admin/services/credentials.js'
import { openDatabase, type Database } from '../../src/db/database.js'
import { migrate } from '../../src/db/migrate.js'
import { BACKEND, createTestDatabase } from './database.js'

async function defaultOrgId(db: Database, dataDir: string, operatorKey: string): Promise<string> {
  await bootstrap(db, { configuredKey: operatorKey, keyFile: path.join(dataDir, BOOTSTRAP_KEY_FILE) })
  const rows = await db.query<{ id: string }>("SELECT id FROM organizations WHERE name = 'default'")
  const id = rows[0]?.id
  if (id === undefined) throw new Error('bootstrap created no default org')
  return String(id)
}

export async function prepareWorkspace(t: Test, dataDir: string, operatorKey: string): Promise<{ orgId: string; databaseEnv: Record<string, string> }> {
  if (BACKEND === 'postgres') {
    const database = await createTestDatabase(t)
    return { orgId: await defaultOrgId(database.db, dataDir, operatorKey), databaseEnv: { DATABASE_URL: database.url as string } }
  }
  const db = await openDatabase({ kind: 'pglite', dataDir: path.join(dataDir, 'pgdata') })
  await migrate(db)
  const orgId = await defaultOrgId(db, dataDir, operatorKey)
  await db.close()
  // DATABASE_URL left unset (undefined is dropped from the child's environment) means the embedded
  // database on disk under SERVICE_DATA_DIR, which survives this process closing it.
  return { orgId, databaseEnv: { DATABASE_URL: undefined as unknown as string } }
}
