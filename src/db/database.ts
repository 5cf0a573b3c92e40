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
  /**
   * Subscribes to a NOTIFY channel. `onResync` runs after the LISTEN connection was lost and restored:
   * notifications sent in between are gone, so the subscriber must re-read what it caches.
   */
  listen(channel: string, onNotify: (payload: string) => void, onResync?: () => void): Promise<() => Promise<void>>
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
  let reconnectTimer: NodeJS.Timeout | null = null
  let closed = false
  const handlers = new Map<string, Set<(payload: string) => void>>()
  const resyncs = new Set<() => void>()

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
      // pg emits 'error' on a checked-out client whose connection dies (even mid-query); unhandled, that
      // would crash the process. The failing query rejects anyway; the broken client is discarded below.
      let broken: Error | undefined
      const onError = (error: Error): void => {
        broken = error
      }
      client.on('error', onError)
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
        if (broken === undefined) await client.query('ROLLBACK').catch(() => {})
        throw error
      } finally {
        client.off('error', onError)
        client.release(broken)
      }
    },
    async listen(channel, onNotify, onResync) {
      assertChannel(channel)
      if (listener === null) listener = await connectListener()
      let set = handlers.get(channel)
      if (set === undefined) {
        set = new Set()
        handlers.set(channel, set)
        await listener.query(`LISTEN ${channel}`)
      }
      set.add(onNotify)
      if (onResync !== undefined) resyncs.add(onResync)
      return async () => {
        set.delete(onNotify)
        if (onResync !== undefined) resyncs.delete(onResync)
      }
    },
    async ping() {
      await pool.query('SELECT 1')
    },
    async close() {
      closed = true
      if (reconnectTimer !== null) clearTimeout(reconnectTimer)
      if (listener !== null) await listener.end().catch(() => {})
      await pool.end()
    },
  }

  /**
   * The LISTEN connection. When it dies (database restart, network cut) it is replaced (retried every 1-2 s:
   * a cheap connect attempt), and every channel is listened to again: without this, notifications would stop for good after
   * the first outage and only the back-up polls would carry changes.
   */
  async function connectListener(): Promise<pg.Client> {
    const client = new pg.Client(options)
    client.on('notification', (msg) => {
      for (const handler of handlers.get(msg.channel) ?? []) handler(msg.payload ?? '')
    })
    let lost = false
    const onLost = (): void => {
      if (lost) return
      lost = true
      if (listener === client) listener = null
      scheduleReconnect(1_000)
    }
    client.on('error', onLost)
    client.on('end', onLost)
    await client.connect()
    return client
  }

  function scheduleReconnect(delayMs: number): void {
    if (closed || reconnectTimer !== null || handlers.size === 0) return
    reconnectTimer = setTimeout(() => {
      reconnectTimer = null
      if (closed || listener !== null) return
      connectListener()
        .then(async (client) => {
          if (closed) {
            await client.end().catch(() => {})
            return
          }
          listener = client
          for (const channel of handlers.keys()) await client.query(`LISTEN ${channel}`)
          for (const resync of resyncs) resync()
        })
        .catch(() => {
          listener = null
          scheduleReconnect(Math.min(delayMs * 2, 2_000))
        })
    }, delayMs)
    reconnectTimer.unref()
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
    // PGlite runs in this process: its notifications cannot be lost, so there is never a resync.
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
