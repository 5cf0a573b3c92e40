/**
 * One SQL dialect, two back ends: PostgreSQL through `pg`, or PGlite (PostgreSQL compiled to WASM) so
 * that `npm start` needs nothing installed. Repositories take a `Queryable` as their first argument, so
 * the same function runs on the pool or inside a transaction.
 */
import pg from 'pg'
import { PGlite } from '@electric-sql/pglite'
import { mkdirSync } from 'node:fs'

export interface QueryOptions {
  /**
   * Prepare the statement under this name on each connection (parsed and planned once, not per call):
   * for hot statements only. PGlite has one connection and ignores it.
   */
  readonly name?: string
}

export interface Queryable {
  /** Runs one parameterized statement and returns its rows. */
  query<T = Record<string, unknown>>(text: string, params?: readonly unknown[], options?: QueryOptions): Promise<T[]>
  /** Runs a script of several statements without parameters (migrations only). */
  exec(script: string): Promise<void>
}

export interface Database extends Queryable {
  readonly kind: 'postgres' | 'pglite'
  /** Runs `work` in one transaction: committed when it resolves, rolled back when it throws. */
  transaction<T>(work: (tx: Queryable) => Promise<T>): Promise<T>
  /** Subscribes to NOTIFY on `channel`; resolves to an unsubscribe function. */
  listen(channel: string, onNotify: (payload: string) => void): Promise<() => Promise<void>>
  /** Cheap liveness probe for /readyz. */
  ping(): Promise<void>
  close(): Promise<void>
}

export type DatabaseTarget =
  | { readonly kind: 'postgres'; readonly url: string; readonly searchPath?: string; readonly poolSize?: number }
  | { readonly kind: 'pglite'; readonly dataDir: string | null }

export async function openDatabase(target: DatabaseTarget): Promise<Database> {
  return target.kind === 'postgres' ? openPostgres(target) : openPglite(target.dataDir)
}

const CHANNEL = /^[a-z_][a-z0-9_]{0,62}$/

function assertChannel(channel: string): void {
  // LISTEN cannot take a bind parameter, so the name is checked against a strict identifier pattern.
  if (!CHANNEL.test(channel)) throw new Error(`invalid notification channel name: ${channel}`)
}

function openPostgres(target: Extract<DatabaseTarget, { kind: 'postgres' }>): Database {
  const options: pg.PoolConfig = {
    connectionString: target.url,
    max: target.poolSize ?? 10,
    connectionTimeoutMillis: 5_000,
    idleTimeoutMillis: 30_000,
    // Keep a dead server from hanging requests forever; protocol-level cancellation follows.
    statement_timeout: 15_000,
    application_name: 'agent-trust-service',
  }
  if (target.searchPath !== undefined) {
    if (!/^[a-z_][a-z0-9_]*$/.test(target.searchPath)) throw new Error('invalid search path')
    options.options = `-c search_path=${target.searchPath}`
  }
  const pool = new pg.Pool(options)
  // An idle client losing its connection must not crash the process; the next query reconnects.
  pool.on('error', () => {})
  let listener: pg.Client | null = null
  const handlers = new Map<string, Set<(payload: string) => void>>()

  const run = async <T>(client: pg.Pool | pg.PoolClient, text: string, params?: readonly unknown[], options?: QueryOptions): Promise<T[]> => {
    const values = params as unknown[] | undefined
    const result = options?.name === undefined
      ? await client.query(text, values)
      : await client.query({ name: options.name, text, ...(values === undefined ? {} : { values }) })
    return result.rows as T[]
  }

  return {
    kind: 'postgres',
    query: (text, params, options) => run(pool, text, params, options),
    exec: async (script) => {
      await pool.query(script)
    },
    async transaction(work) {
      const client = await pool.connect()
      try {
        await client.query('BEGIN')
        const tx: Queryable = {
          query: (text, params, options) => run(client, text, params, options),
          exec: async (script) => {
            await client.query(script)
          },
        }
        const result = await work(tx)
        await client.query('COMMIT')
        return result
      } catch (error) {
        await client.query('ROLLBACK').catch(() => {})
        throw error
      } finally {
        client.release()
      }
    },
    async listen(channel, onNotify) {
      assertChannel(channel)
      if (listener === null) {
        listener = new pg.Client(options)
        listener.on('error', () => {})
        listener.on('notification', (msg) => {
          for (const handler of handlers.get(msg.channel) ?? []) handler(msg.payload ?? '')
        })
        await listener.connect()
      }
      let set = handlers.get(channel)
      if (set === undefined) {
        set = new Set()
        handlers.set(channel, set)
        await listener.query(`LISTEN ${channel}`)
      }
      set.add(onNotify)
      return async () => {
        set.delete(onNotify)
      }
    },
    async ping() {
      await pool.query('SELECT 1')
    },
    async close() {
      if (listener !== null) await listener.end().catch(() => {})
      await pool.end()
    },
  }
}

async function openPglite(dataDir: string | null): Promise<Database> {
  if (dataDir !== null) mkdirSync(dataDir, { recursive: true, mode: 0o700 })
  const db = dataDir === null ? await PGlite.create() : await PGlite.create(dataDir)

  const asQueryable = (q: Pick<PGlite, 'query' | 'exec'>): Queryable => ({
    query: async <T>(text: string, params?: readonly unknown[]) => {
      const result = await q.query<T>(text, params as unknown[] | undefined)
      return result.rows
    },
    exec: async (script) => {
      await q.exec(script)
    },
  })
  const base = asQueryable(db)

  return {
    kind: 'pglite',
    ...base,
    // PGlite has a single connection: its transaction() holds a mutex, so transactions serialize.
    transaction: (work) => db.transaction((tx) => work(asQueryable(tx))),
    async listen(channel, onNotify) {
      assertChannel(channel)
      const unsubscribe = await db.listen(channel, onNotify)
      return async () => {
        await unsubscribe()
      }
    },
    async ping() {
      await db.query('SELECT 1')
    },
    async close() {
      await db.close()
    },
  }
}

/** PostgreSQL SQLSTATE of a failed statement, on both back ends. */
export function sqlState(error: unknown): string | undefined {
  if (typeof error === 'object' && error !== null && 'code' in error) {
    const code = (error as { code: unknown }).code
    return typeof code === 'string' ? code : undefined
  }
  return undefined
}

export const UNIQUE_VIOLATION = '23505'
export const FOREIGN_KEY_VIOLATION = '23503'
