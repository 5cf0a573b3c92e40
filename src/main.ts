/**
 * Composition root: config → logger → database (+ migrations, bootstrap) → admin plane → listen →
 * shutdown. The only module that listens on sockets and installs signal handlers.
 */
import type { FastifyInstance } from 'fastify'
import { Redis } from 'ioredis'
import type { Config } from './config/index.js'
import { openDatabase, type Database, type DatabaseTarget } from './db/database.js'
import { migrate } from './db/migrate.js'
import { buildAdminApp } from './admin/app.js'
import { KeyRing } from './authority/key-ring.js'
import { startChallengeCleanup } from './authority/pop-challenges.js'
import { bootstrap, type BootstrapOutcome } from './admin/services/credentials.js'
import { closeGuardedFetch } from './net/guarded-fetch.js'
import { createLogger, type Logger } from './telemetry/logger.js'
import { createMetrics } from './telemetry/metrics.js'

export interface Appliance {
  readonly admin: FastifyInstance
  readonly db: Database
  /** `http://host:port` of the admin plane as bound (the port is real even when configured as 0). */
  readonly adminUrl: string
  readonly bootstrap: BootstrapOutcome
  /** Readiness off, stop accepting, let in-flight requests finish within the grace period, close pools. */
  close(): Promise<void>
}

export function databaseTarget(config: Config): DatabaseTarget {
  return config.database.kind === 'postgres'
    ? { kind: 'postgres', url: config.database.url }
    : { kind: 'pglite', dataDir: config.database.dataDir }
}

/** Opens the configured database and applies pending migrations. */
export async function openMigratedDatabase(config: Config): Promise<Database> {
  const db = await openDatabase(databaseTarget(config))
  try {
    await migrate(db)
  } catch (error) {
    await db.close().catch(() => {})
    throw error
  }
  return db
}

function announceBootstrap(outcome: BootstrapOutcome, logger: Logger): void {
  if (outcome.kind === 'generated-key') {
    // protocol.md §2: the generated key is printed once (outside the structured log) and kept in a 0600 file.
    process.stdout.write(
      `\n  First start: created organization "default" with an operator API key.\n` +
      `  API key (shown once): ${outcome.key}\n` +
      `  It is also stored in ${outcome.file} (mode 0600).\n\n`,
    )
    logger.info({ file: outcome.file }, 'bootstrap operator key created')
  } else if (outcome.kind === 'configured-key') {
    logger.info({ created: outcome.created }, 'bootstrap key from SERVICE_BOOTSTRAP_API_KEY ensured')
  }
}

export async function startAppliance(config: Config, options: { logger?: Logger } = {}): Promise<Appliance> {
  const logger = options.logger ?? createLogger(config.logLevel)
  const db = await openMigratedDatabase(config)
  let redis: Redis | null = null
  let keyRing: KeyRing | null = null
  try {
    keyRing = await KeyRing.open(config.caKeyPath)
    logger.info({ file: config.caKeyPath, kid: keyRing.current.signing.kid }, 'authority key ring loaded')
    // `service keys rotate` / `retire` edit the file from another process: pick the change up.
    keyRing.watch(2_000, (error) => logger.error({ err: error }, 'authority key file reload failed; keeping the last good keys'))
    const ring = keyRing
    const outcome = await bootstrap(db, { configuredKey: config.bootstrapApiKey, dataDir: config.dataDir })
    announceBootstrap(outcome, logger)

    if (config.redisUrl !== null) {
      // Fail fast instead of queueing: the rate limiter skips on error rather than stalling requests.
      redis = new Redis(config.redisUrl, { maxRetriesPerRequest: 1, enableOfflineQueue: false, lazyConnect: true })
      redis.on('error', (error: Error) => logger.warn({ err: error }, 'redis error'))
      await redis.connect()
    }

    const metrics = createMetrics()
    let closing = false
    const readiness = async (): Promise<{ ready: boolean; checks: Record<string, boolean> }> => {
      const database = await db.ping().then(() => true, () => false)
      const checks = { database, authorityKey: ring.current.signing !== undefined, accepting: !closing }
      return { ready: database && checks.authorityKey && !closing, checks }
    }

    const admin = await buildAdminApp({ config, db, logger, metrics, redis, keyRing: ring, readiness })
    // Expired PoP challenges are swept every minute (spec §3.2); the sweep keeps an hour of history so
    // a late proof still hears `challenge_expired` rather than `challenge_not_found`.
    const stopChallengeCleanup = startChallengeCleanup(db, 60_000, (error) => logger.warn({ err: error }, 'challenge cleanup failed'))
    await admin.listen({ port: config.port, host: config.host })
    const address = admin.server.address()
    const port = typeof address === 'object' && address !== null ? address.port : config.port
    const adminUrl = `http://${config.host === '0.0.0.0' ? '127.0.0.1' : config.host}:${port}`
    logger.info({ url: adminUrl, database: config.database.kind }, 'admin plane listening')

    return {
      admin,
      db,
      adminUrl,
      bootstrap: outcome,
      async close() {
        closing = true
        const deadline = new Promise<'timeout'>((resolve) => setTimeout(() => resolve('timeout'), config.shutdownGraceMs).unref())
        const closed = admin.close().then(() => 'closed' as const)
        if ((await Promise.race([closed, deadline])) === 'timeout') {
          logger.warn({ graceMs: config.shutdownGraceMs }, 'grace period over; closing remaining connections')
          admin.server.closeAllConnections()
          await closed
        }
        ring.close()
        stopChallengeCleanup()
        await closeGuardedFetch()
        if (redis !== null) await redis.quit().catch(() => {})
        await db.close()
      },
    }
  } catch (error) {
    keyRing?.close()
    if (redis !== null) redis.disconnect()
    await db.close().catch(() => {})
    throw error
  }
}

/** Exits once the buffered log destination has been written out. */
function exitAfterFlush(logger: Logger, code: number): void {
  logger.info({ code }, 'stopped')
  logger.flush((error) => {
    if (error !== undefined && error !== null) process.stderr.write('log flush failed\n')
    process.exit(code)
  })
}

/** SIGTERM/SIGINT: one owner, fixed order (protocol.md §1); exit 0 once everything is closed. */
export function installSignalHandlers(appliance: Appliance, logger: Logger): void {
  let stopping = false
  const stop = (signal: string): void => {
    if (stopping) return
    stopping = true
    logger.info({ signal }, 'shutting down')
    appliance.close().then(
      () => exitAfterFlush(logger, 0),
      (error: unknown) => {
        logger.error({ err: error }, 'shutdown failed')
        exitAfterFlush(logger, 1)
      },
    )
  }
  process.once('SIGTERM', () => stop('SIGTERM'))
  process.once('SIGINT', () => stop('SIGINT'))
}
