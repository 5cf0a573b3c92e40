/**
 * Numbered, forward-only SQL migrations (`migrations/NNN_name.sql`), applied in one transaction under an
 * advisory lock so that several instances starting together apply each migration exactly once.
 */
import { readdirSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { projectPath } from '../core/paths.js'
import type { Database } from './database.js'

export interface Migration {
  readonly version: number
  readonly name: string
  readonly sql: string
}

const MIGRATION_FILE = /^(\d{3})_([a-z0-9_]+)\.sql$/
// Arbitrary constant shared by every instance of this service: the key of the migration advisory lock.
const MIGRATION_LOCK_KEY = 7_405_113_229

export function loadMigrations(dir = projectPath('src', 'db', 'migrations')): Migration[] {
  const migrations = readdirSync(dir)
    .map((file) => ({ file, match: MIGRATION_FILE.exec(file) }))
    .filter((entry): entry is { file: string; match: RegExpExecArray } => entry.match !== null)
    .map(({ file, match }) => ({
      version: Number(match[1]),
      name: match[2] as string,
      sql: readFileSync(path.join(dir, file), 'utf8'),
    }))
    .sort((a, b) => a.version - b.version)
  migrations.forEach((m, i) => {
    if (m.version !== i + 1) throw new Error(`migration numbering has a gap or duplicate at ${m.version}_${m.name}`)
  })
  return migrations
}

/** Applies pending migrations; returns the versions applied by this call. */
export async function migrate(db: Database, migrations = loadMigrations()): Promise<number[]> {
  return db.transaction(async (tx) => {
    await tx.query('SELECT pg_advisory_xact_lock($1)', [MIGRATION_LOCK_KEY])
    await tx.exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
      version integer PRIMARY KEY,
      name text NOT NULL,
      applied_at timestamptz NOT NULL DEFAULT now()
    )`)
    const rows = await tx.query<{ version: number }>('SELECT version FROM schema_migrations')
    const applied = new Set(rows.map((r) => Number(r.version)))
    const done: number[] = []
    for (const migration of migrations) {
      if (applied.has(migration.version)) continue
      await tx.exec(migration.sql)
      await tx.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [migration.version, migration.name])
      done.push(migration.version)
    }
    return done
  })
}
