// Redis is an optimisation, not a dependency: docs/operations-failure-modes.md, "Redis".
import { Redis } from 'ioredis'
import type { Logger } from '../telemetry/logger.js'

export type RedisState = 'connecting' | 'ready' | 'unavailable'

export interface RedisLink {
  readonly client: Redis
  state(): RedisState
  close(): Promise<void>
}

// Short: a stalled Redis adds it to an admin request's latency before that request counts locally.
export const REDIS_COMMAND_TIMEOUT_MS = 500
export const REDIS_MAX_RETRY_DELAY_MS = 2_000

/**
 * Returns at once and connects in the background; an outage writes two log lines however long it lasts,
 * each with `fields` (what the process does meanwhile).
 */
export function connectRedis(url: string, logger: Logger, fields: Readonly<Record<string, unknown>> = {}): RedisLink {
  const client = new Redis(url, {
    lazyConnect: true,
    // No queue while disconnected: a command fails at once instead of waiting for the reconnection.
    enableOfflineQueue: false,
    // A command caught by a dropped connection is not replayed; the caller has already moved on.
    maxRetriesPerRequest: 0,
    commandTimeout: REDIS_COMMAND_TIMEOUT_MS,
    connectTimeout: 2_000,
    retryStrategy: (attempt) => Math.min(attempt * 100, REDIS_MAX_RETRY_DELAY_MS),
  })
  let state: RedisState = 'connecting'
  let closing = false
  const lost = (error: unknown): void => {
    if (closing) return
    if (state === 'unavailable') {
      logger.debug({ err: error }, 'redis still unavailable')
      return
    }
    state = 'unavailable'
    logger.warn({ ...fields, err: error }, 'redis unavailable; rate-limit counters are local to this instance until it returns')
  }
  client.on('ready', () => {
    if (state === 'unavailable') logger.info(fields, 'redis connection restored; rate-limit counters are shared again')
    else logger.info(fields, 'redis connected; rate-limit counters are shared')
    state = 'ready'
  })
  client.on('error', (error: Error) => lost(error))
  // A server that closes the connection without an error (restart, idle kill) is an outage too.
  client.on('close', () => {
    if (state === 'ready') lost(new Error('connection closed'))
  })
  // ioredis keeps retrying after a failed first connect; the rejection itself is already an 'error'.
  client.connect().catch(() => {})
  return {
    client,
    state: () => state,
    async close() {
      closing = true
      if (client.status === 'ready') await client.quit().catch(() => client.disconnect())
      else client.disconnect()
    },
  }
}
