/**
 * Composition root: config → logger → database (+ migrations, bootstrap) → admin plane → listen →
 * shutdown. The only module that listens on sockets and installs signal handlers.
 */
import type { FastifyInstance } from 'fastify'
import { describeUnknownVariable, type Config, type RateLimitFallback } from './config/index.js'
import { openDatabase, type Database, type DatabaseTarget } from './db/database.js'
import { migrate } from './db/migrate.js'
import { buildAdminApp } from './admin/app.js'
import { AuditChainer } from './authority/audit-chainer.js'
import { KeyRing } from './authority/key-ring.js'
import { startChallengeCleanup } from './authority/pop-challenges.js'
import { bootstrap, bootstrapKeyFile, type BootstrapOutcome } from './admin/services/credentials.js'
import { closeGuardedFetch } from './net/guarded-fetch.js'
import { createLogger, type Logger } from './telemetry/logger.js'
import { createMetrics, type Metrics } from './telemetry/metrics.js'
import { DecisionFeed, OverrideLog, type GatewayStatus, type GatewayView } from './telemetry/decision-feed.js'
import type { Tracing } from './telemetry/otel.js'
import { loadPolicyModule } from './bundles/builder.js'
import { BundleCache } from './bundles/cache.js'
import { createApplianceSnapshot, type ApplianceSnapshot } from './appliance/snapshot-source.js'
import { connectRedis, type RedisLink } from './net/redis-link.js'
import type { ReadinessNote, ReadinessReport } from './http/readiness.js'
import { startGatewayRuntime, type GatewayRuntime } from './gateway/runtime.js'
import { createRemoteSource, type RemoteSourceOptions } from './gateway/snapshot/remote-source.js'
import { GatewayWatchHub } from './admin/services/gateway-watch.js'
import { createOpsServer } from './gateway/ops-server.js'
import { applyServerLimits, serverLimits } from './http/server-limits.js'
import { NODE_FLAGS, startedWith } from './node-flags.js'
import type { SnapshotHolder } from './gateway/snapshot/snapshot.js'
import { registryDidHostOf } from './core/did.js'
import type { Server } from 'node:http'
import { readFileSync } from 'node:fs'
import { randomBytes } from 'node:crypto'
import { DidResolver, registryDidResolver } from './authority/did-resolver.js'
import { DecisionShipper, generatedGatewayId, ReportRejected, type GatewayReport, type ReportedStatus } from './telemetry/decision-shipper.js'
import { MemoryDecisionStore, RedisDecisionStore, type DecisionStore } from './admin/services/decision-store.js'
import { ingestReport } from './admin/services/gateway-reports.js'
import { DecisionLogExporter } from './admin/services/decision-log-export.js'
import { BadgeOrgs } from './admin/services/badge-orgs.js'
import { isServiceError } from './core/errors.js'
import { createReportSender } from './gateway/report-sender.js'
import type { CardAuthority } from './gateway/context.js'
import type { CredentialResolver } from './admin/plugins/auth.js'
import { WorkerCredentials } from './admin/services/worker-credentials.js'
import { startWorkerPool, WorkerStartError, type WorkerPool, type WorkersReadiness } from './cluster/primary.js'
import { ClusterRegistry, withWorkers, workerExitsCounter } from './cluster/aggregate.js'
import { WORKER_CARD_SIGNING_VARIABLE, WORKER_GATEWAY_ID_VARIABLE } from './cluster/messages.js'
import type { WorkerGateway } from './cluster/worker.js'
import { fileURLToPath } from 'node:url'
import { VERSION } from './version.js'

export interface Appliance {
  readonly admin: FastifyInstance
  readonly db: Database
  /** `http://host:port` of the admin plane as bound (the port is real even when configured as 0). */
  readonly adminUrl: string
  /** `http://host:port` of the gateway, or null when no upstream is configured. */
  readonly gatewayUrl: string | null
  readonly gateway: GatewayRuntime | null
  readonly bootstrap: BootstrapOutcome
  /** Readiness off, stop accepting, let in-flight requests finish within the grace period, close pools. */
  close(): Promise<void>
}

export function databaseTarget(config: Config): DatabaseTarget {
  return config.database.kind === 'postgres'
    ? { kind: 'postgres', url: config.database.url }
    : { kind: 'pglite', dataDir: config.database.dataDir }
}

/**
 * A start-up failure the operator fixes in the environment (a port in use, a database that does not
 * answer): the message names the setting and the address, and the CLI prints it as one line.
 */
export class StartupError extends Error {
  readonly code = 'STARTUP_FAILED'
  override readonly name = 'StartupError'
}

/** `host:port` as it is written in a URL (IPv6 in brackets). */
function hostPort(host: string, port: number | string): string {
  return `${host.includes(':') ? `[${host}]` : host}:${port}`
}

/** The configured database in words, with the variable that sets it and never a password. */
function describeDatabase(config: Config): string {
  if (config.database.kind === 'pglite') {
    return config.database.dataDir === null
      ? 'the in-memory embedded database (DATABASE_URL=memory://)'
      : `the embedded database in ${config.database.dataDir} (SERVICE_DATA_DIR)`
  }
  const url = new URL(config.database.url)
  const host = url.hostname === '' ? (url.searchParams.get('host') ?? 'localhost') : decodeURIComponent(url.hostname).replace(/^\[|\]$/g, '')
  const port = url.port === '' ? (url.searchParams.get('port') ?? '5432') : url.port
  const database = decodeURIComponent(url.pathname.replace(/^\//, ''))
  return `PostgreSQL at ${hostPort(host, port)}${database === '' ? '' : `, database "${database}"`} (DATABASE_URL)`
}

/** Why a database connection failed, in words (PostgreSQL's messages name no password). */
function connectionProblem(error: unknown): string {
  const code = (error as { code?: unknown } | null)?.code
  switch (code) {
    case 'ECONNREFUSED': return 'connection refused (is it running, and listening on that address?)'
    case 'ENOTFOUND':
    case 'EAI_AGAIN': return 'the host name does not resolve'
    case 'ETIMEDOUT':
    case 'EHOSTUNREACH':
    case 'ENETUNREACH': return 'the host does not answer'
    case 'EACCES': return 'permission denied'
    default: return error instanceof Error ? error.message : String(error)
  }
}

/** Opens the configured database and checks that it answers; a failure is a StartupError naming it. */
export async function openReachableDatabase(config: Config): Promise<Database> {
  let db: Database | null = null
  try {
    db = await openDatabase(databaseTarget(config))
    await db.ping()
    return db
  } catch (error) {
    await db?.close().catch(() => {})
    throw new StartupError(`cannot connect to ${describeDatabase(config)}: ${connectionProblem(error)}`, { cause: error })
  }
}

/** Opens the configured database and applies pending migrations. */
export async function openMigratedDatabase(config: Config): Promise<Database> {
  const db = await openReachableDatabase(config)
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
    // docs/wire-contract.md §2: the generated key is printed once (outside the structured log) and kept in a 0600 file.
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

/** Starts OpenTelemetry tracing when the OTEL_* variables ask for it (loaded only then). */
async function startTracing(config: Config, logger: Logger): Promise<Tracing | null> {
  if (!config.gateway.tracing) return null
  const { startTracing: start } = await import('./telemetry/otel.js')
  const tracing = start()
  logger.info('OpenTelemetry tracing started')
  return tracing
}

function boundUrl(server: Server, host: string, fallbackPort: number): string {
  const address = server.address()
  const port = typeof address === 'object' && address !== null ? address.port : fallbackPort
  return `http://${host === '0.0.0.0' ? '127.0.0.1' : host}:${port}`
}

/** A listening socket of this process and the variable that sets its port. */
interface Listener {
  readonly name: string
  readonly variable: 'PORT' | 'SERVICE_GATEWAY_PORT'
  readonly port: number
  readonly host: string
}

/** Runs `bind`; a socket that cannot be bound is a StartupError naming the listener and its variables. */
async function bindListener(listener: Listener, bind: () => Promise<unknown>): Promise<void> {
  try {
    await bind()
  } catch (error) {
    const code = (error as { code?: unknown } | null)?.code
    const reason = code === 'EADDRINUSE'
      ? 'the address is already in use (another process listens there)'
      : code === 'EACCES'
        ? 'permission denied (ports below 1024 need privileges)'
        : code === 'EADDRNOTAVAIL'
          ? 'the address is not one of this machine\'s'
          : null
    if (reason === null) throw error
    const address = hostPort(listener.host, listener.port)
    throw new StartupError(`${listener.name} cannot listen on ${address} (${listener.variable}=${listener.port}, SERVICE_HOST=${listener.host}): ${reason}`, { cause: error })
  }
}

function listen(server: Server, listener: Listener): Promise<void> {
  return bindListener(listener, () => new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(listener.port, listener.host, () => {
      server.off('error', reject)
      resolve()
    })
  }))
}

/**
 * Stops a node:http server: no new connections, idle keep-alive sockets closed, in-flight requests
 * given until `deadline`, then every remaining connection cut.
 */
async function closeServer(server: Server, deadline: Promise<'timeout'>): Promise<void> {
  if (!server.listening) return
  const closed = new Promise<'closed'>((resolve) => server.close(() => resolve('closed')))
  server.closeIdleConnections()
  if ((await Promise.race([closed, deadline])) === 'timeout') {
    server.closeAllConnections()
    await closed
  }
}

const NO_SNAPSHOT: ReadinessNote = { code: 'no_snapshot', message: 'the gateway has not loaded its first snapshot' }
const NO_BUNDLE_YET: ReadinessNote = { code: 'no_bundle', message: 'the embedded PDP has no bundle yet' }
const SHUTTING_DOWN: ReadinessNote = { code: 'shutting_down', message: 'the process is shutting down' }

/**
 * Whether the gateway has what it needs to serve (a snapshot and, for the embedded PDP, a bundle),
 * and if not, why.
 */
function gatewayReady(config: Config, runtime: GatewayRuntime | null, bundleProblem: ReadinessNote | null): ReadinessNote | null {
  if (runtime === null) return null
  if (!runtime.holder.ready) return NO_SNAPSHOT
  if (!config.gateway.embeddedPdp || runtime.holder.current.bundle !== null) return null
  return bundleProblem ?? NO_BUNDLE_YET
}

/** A typo in a variable name silently leaves a feature off: say so at start, with the likely name. */
function logUnknownVariables(config: Config, logger: Logger): void {
  for (const unknown of config.unknownVariables) {
    logger.warn({ variable: unknown.name.slice(0, 100), suggestion: unknown.suggestion, detail: describeUnknownVariable(unknown) }, 'unknown configuration variable ignored')
  }
}

const RATE_LIMITS_WHILE_DOWN: Readonly<Record<RateLimitFallback, string>> = {
  local: 'the gateway counts rate limits in this process',
  deny: 'the gateway refuses rate-limited requests as over their limit',
  allow: 'the gateway lets rate-limited requests through uncounted',
}

/** The readiness note while Redis cannot answer: what is not shared meanwhile (docs/operations-failure-modes.md, "Redis"). */
function redisDegraded(config: Config, adminPlane: boolean): ReadinessNote {
  const gateway = config.gateway.enabled ? `; ${RATE_LIMITS_WHILE_DOWN[config.gateway.rateLimitRedisFallback]} (SERVICE_RATE_LIMIT_REDIS_FALLBACK)` : ''
  const admin = adminPlane ? '; admin rate-limit counters are local to this instance and the shared decision store answers 503' : ''
  return { code: 'redis_unavailable', message: `Redis is unreachable${admin}${gateway} until it returns` }
}

/** What the Redis link's two outage lines add: how this process's gateway counts rate limits meanwhile. */
function redisLogFields(config: Config): Record<string, unknown> {
  return config.gateway.enabled ? { gateway_rate_limit_fallback: config.gateway.rateLimitRedisFallback } : {}
}

/** Whether Redis is down for this process: its link, or the gateway's last rate-limit command. */
function redisDown(redis: RedisLink | null, runtime: GatewayRuntime | null): boolean {
  return redis !== null && (redis.state() !== 'ready' || runtime?.rateLimitsShared?.() === false)
}

/** This process's gateway id: SERVICE_PEP_ID, else one made now (docs/console.md, "Gateways"). */
export function gatewayIdOf(config: Config): string {
  return config.gateway.pepId ?? generatedGatewayId(randomBytes)
}

/** What a gateway's heartbeat says of it (docs/api.md, "Gateway reports"). */
export function reportedStatus(config: Config, runtime: GatewayRuntime, now: number): ReportedStatus {
  const bundle = runtime.holder.ready ? runtime.holder.current.bundle : null
  return {
    routes: runtime.routes,
    pdp: runtime.pdp?.kind ?? 'none',
    workspace: config.gateway.workspace,
    bundle_revision: bundle?.revision ?? null,
    snapshot_age_ms: bundle === null ? null : Math.max(0, Math.round(now - bundle.confirmedAt)),
    default_mode: config.gateway.enforcementMode,
    heartbeat_interval_ms: config.gateway.heartbeatIntervalMs,
  }
}

/**
 * The shipper of a gateway's decisions, the appliance's own or a gateway-only process's: they differ only
 * in how a report is sent (in process, or over HTTP to the registry) and whether a turn's records go at once.
 */
function startShipper(
  config: Config, logger: Logger, metrics: Metrics, decisions: DecisionFeed, gatewayId: string, runtime: GatewayRuntime,
  send: (report: GatewayReport) => Promise<void>, eager: boolean,
): DecisionShipper {
  const log = shipperLog(logger)
  const shipper = new DecisionShipper({
    feed: decisions,
    gatewayId,
    version: VERSION,
    status: () => reportedStatus(config, runtime, Date.now()),
    heartbeatMs: config.gateway.heartbeatIntervalMs,
    eager,
    send: async (report) => {
      await send(report)
      log.delivered()
    },
    onDropped: (count) => metrics.gateway.eventsDropped.inc(count),
    onError: log.onError,
  })
  shipper.start()
  return shipper
}

/** A shipper's failures in two log lines per outage: the first failure, and the recovery. */
function shipperLog(logger: Logger): { onError: (error: unknown, retryInMs: number | null) => void; delivered: () => void } {
  let failing = false
  return {
    onError(error, retryInMs) {
      if (retryInMs === null) {
        logger.warn({ err: error }, 'decision report refused; its events are dropped')
        return
      }
      if (failing) return logger.debug({ err: error, retryInMs }, 'decision report still failing')
      failing = true
      logger.warn({ err: error, retryInMs }, 'decision report failed; retrying while the queue keeps the events')
    },
    delivered() {
      if (!failing) return
      failing = false
      logger.info('decision reports delivered again')
    },
  }
}

async function startGatewayServer(
  config: Config, runtime: GatewayRuntime, logger: Logger,
): Promise<string> {
  applyServerLimits(runtime.gateway.server, serverLimits(config, 'gateway'))
  await listen(runtime.gateway.server, { name: 'the gateway', variable: 'SERVICE_GATEWAY_PORT', port: config.gateway.port, host: config.host })
  const url = boundUrl(runtime.gateway.server, config.host, config.gateway.port)
  logger.info({ url, pdp: runtime.pdp?.kind ?? 'none', mode: config.gateway.enforcementMode }, 'gateway listening')
  await runtime.gateway.check?.listen(config.host)
  const missingFlags = NODE_FLAGS.filter((flag) => !startedWith(flag))
  if (missingFlags.length > 0) {
    logger.warn({ missing: missingFlags }, 'node was started without the flags the gateway is tuned for (src/node-flags.ts, docs/performance.md); its tail latency under load suffers')
  }
  return url
}

/** What `GET /v1/gateway/status` reports of a running gateway: the snapshot's bundle and the configured default mode. */
function gatewayStatus(config: Config, runtime: GatewayRuntime, now: number): GatewayStatus {
  const bundle = runtime.holder.ready ? runtime.holder.current.bundle : null
  const ageMs = bundle === null ? null : Math.max(0, now - bundle.confirmedAt)
  return {
    bundleRevision: bundle?.revision ?? null,
    bundleAgeSeconds: ageMs === null ? null : Math.floor(ageMs / 1000),
    // Staleness only governs the embedded PDP's bundle (docs/wire-contract.md §8).
    stale: ageMs !== null && runtime.pdp?.kind === 'embedded' && ageMs > config.gateway.bundleStalenessThresholdMs,
    mode: config.gateway.enforcementMode,
    routeModes: [...new Set(runtime.routes.map((route) => route.mode))],
    pdp: runtime.pdp?.kind ?? 'none',
    ready: runtime.holder.ready,
    workspace: config.gateway.workspace,
  }
}

/** The appliance before anything listens: the admin plane and, with an upstream, the gateway's snapshot source. */
export interface ApplianceParts {
  /** The admin plane, built and not listening. */
  readonly admin: FastifyInstance
  /** The per-org bundles `/v1/bundles` serves and the gateway's snapshot is fed from. */
  readonly bundles: BundleCache
  readonly metrics: Metrics
  /** The shared rate-limit counters' connection, or null without REDIS_URL; it connects in the background. */
  readonly redis: RedisLink | null
  readonly bootstrap: BootstrapOutcome
  /** The gateway's snapshot source (not started), or null when no upstream is configured. */
  readonly snapshot: ApplianceSnapshot | null
  /** The gateway's decision ring (shipped into the decision store) and break-glass log. */
  readonly feed: { readonly decisions: DecisionFeed; readonly overrides: OverrideLog }
  /** Where every gateway's reported decisions and heartbeats are kept: Redis with REDIS_URL, else this process. */
  readonly store: DecisionStore
  /** The id of this process's gateway in its reports. */
  readonly gatewayId: string
  /** `/readyz` and `/v1/gateway/status` follow the gateway from now on, and its decisions are shipped into the store. */
  attachGateway(runtime: GatewayRuntime): void
  /** Stops shipping this process's gateway's decisions after a last flush within `graceMs`. */
  stopShipping(graceMs: number): Promise<void>
  /** `/readyz` answers `shutting_down` from now on. */
  beginShutdown(): void
  /** Stops what composing started (the challenge sweep, Redis); the admin plane, database and key ring stay the caller's. */
  close(): Promise<void>
}

/** What {@link composeAppliance} is given: opened resources it uses but does not close. */
export interface ApplianceResources {
  readonly db: Database
  readonly keyRing: KeyRing
  readonly logger: Logger
  /** The bundle cache; by default one built from the configuration. */
  readonly bundles?: BundleCache
  /** The metrics; by default a registry of this process's own (a gateway primary's adds its workers'). */
  readonly metrics?: Metrics
  /** Credentials the admin plane accepts besides its API keys and sessions (the gateway workers'). */
  readonly credentialResolvers?: readonly CredentialResolver[]
  /** The gateway workers' state, folded into `/readyz` (SERVICE_GATEWAY_WORKERS above 1). */
  readonly gatewayWorkers?: () => Promise<WorkersReadiness>
}

/**
 * Wires the appliance on an open, migrated database and an open key ring, as `startAppliance` runs it
 * and as the tests build it: the key file watch, bootstrap, Redis, metrics, the bundle cache shared by
 * `/v1/bundles` and the gateway's snapshot source, readiness, the admin plane and the PoP challenge sweep.
 */
export async function composeAppliance(config: Config, resources: ApplianceResources): Promise<ApplianceParts> {
  const { db, keyRing, logger } = resources
  // `agent-trust keys rotate` / `retire` edit the file from another process: pick the change up.
  keyRing.watch(2_000, (error) => logger.error({ err: error }, 'authority key file reload failed; keeping the last good keys'))
  const outcome = await bootstrap(db, { configuredKey: config.bootstrapApiKey, keyFile: bootstrapKeyFile(config.dataDir, config.database) })
  // Not awaited: Redis is optional at every moment, start-up included (see net/redis-link.ts).
  const redis = config.redisUrl === null ? null : connectRedis(config.redisUrl, logger, redisLogFields(config))
  let stopChallengeCleanup: (() => void) | null = null
  let auditChainer: AuditChainer | null = null
  let stopListening: (() => Promise<void>) | null = null
  try {
    const metrics = resources.metrics ?? createMetrics()
    let closing = false
    let runtime: GatewayRuntime | null = null
    const bundles = resources.bundles ?? new BundleCache({
      db, registryDidHost: config.registryDidHost, policyModule: loadPolicyModule(), pollIntervalMs: config.gateway.bundlePollIntervalMs,
    })
    const snapshot = config.gateway.enabled ? createApplianceSnapshot({ config, db, keyRing, bundles, logger }) : null
    const listening = await listenForChanges(config, db, keyRing, bundles, logger)
    stopListening = listening.close
    const readiness = async (): Promise<ReadinessReport> => {
      const database = await db.ping().then(() => true, () => false)
      const gatewayProblem = gatewayReady(config, runtime, snapshot?.bundleProblem() ?? null)
      const checks = { database, authorityKey: keyRing.current.signing !== undefined, gateway: gatewayProblem === null, accepting: !closing }
      const reasons: Record<string, ReadinessNote> = {}
      if (!database) reasons.database = { code: 'database_unavailable', message: 'the database does not answer' }
      if (gatewayProblem !== null) reasons.gateway = gatewayProblem
      if (closing) reasons.accepting = SHUTTING_DOWN
      const degraded: Record<string, ReadinessNote> = {}
      if (redisDown(redis, runtime)) degraded.redis = redisDegraded(config, true)
      const report = { ready: database && checks.authorityKey && checks.gateway && !closing, checks, reasons, degraded }
      return resources.gatewayWorkers === undefined ? report : withWorkers(report, await resources.gatewayWorkers())
    }

    // Made whether or not a gateway runs here: without one the admin plane answers empty feeds saying so.
    const feed = { decisions: new DecisionFeed(config.console.decisionsBuffer), overrides: new OverrideLog() }
    const gatewayView: GatewayView = {
      ...feed,
      status: () => (runtime === null ? null : gatewayStatus(config, runtime, Date.now())),
    }
    const store: DecisionStore = redis === null
      ? new MemoryDecisionStore(config.console.decisionsBuffer)
      : new RedisDecisionStore({ redis: redis.client, ready: () => redis.state() === 'ready', prefix: config.console.redisPrefix, capacity: config.console.decisionsBuffer })
    const gatewayId = gatewayIdOf(config)
    const orgs = new BadgeOrgs(db)
    const sink = config.console.decisionLog
    const exporter = sink === null ? null : new DecisionLogExporter({
      url: sink.url, authorization: sink.authorization, version: VERSION, logger,
      count: (outcome, events) => metrics.decisionLogEvents.labels(outcome).inc(events),
    })
    let shipper: DecisionShipper | null = null
    // Chains the audit trail here and in every other admin instance (they take turns on the head row's lock).
    auditChainer = config.audit.enabled ? new AuditChainer({
      db, keyRing, issuer: config.issuerUrl,
      checkpointRecords: config.audit.checkpointRecords, checkpointIntervalMs: config.audit.checkpointIntervalMs,
      onError: (error) => logger.error({ err: error }, 'audit chainer: run failed; the records stay pending for the next run'),
    }) : null
    await auditChainer?.start()
    const chainer = auditChainer
    const reportAudit = chainer === null ? null : { db, allowSample: config.audit.allowSample, committed: () => chainer.soon() }
    const admin = await buildAdminApp({
      config, db, logger, metrics, redis: redis?.client ?? null, keyRing, readiness, bundles, gateway: gatewayView, decisionStore: store,
      decisionLogExporter: exporter,
      ...(resources.credentialResolvers === undefined ? {} : { credentialResolvers: resources.credentialResolvers }),
      drainLocalDecisions: () => shipper?.flush() ?? Promise.resolve(),
      ...(snapshot === null ? {} : { localGatewayId: gatewayId }),
      watch: listening.watch,
      auditChainer: chainer,
    })
    applyServerLimits(admin.server, serverLimits(config, 'admin'))
    // Expired PoP challenges are swept every minute (docs/api.md §3.2); the sweep keeps an hour of history so
    // a late proof still hears `challenge_expired` rather than `challenge_not_found`.
    const stopCleanup = startChallengeCleanup(db, 60_000, (error) => logger.warn({ err: error }, 'challenge cleanup failed'))
    stopChallengeCleanup = stopCleanup
    return {
      admin,
      bundles,
      metrics,
      redis,
      bootstrap: outcome,
      snapshot,
      feed,
      store,
      gatewayId,
      attachGateway(gateway) {
        runtime = gateway
        // The appliance's own gateway reports like any other, through the same ingest minus HTTP, as the operator.
        shipper = startShipper(config, logger, metrics, feed.decisions, gatewayId, gateway, async (report) => {
          try {
            await ingestReport({ store, orgs, exporter, audit: reportAudit }, report, { orgId: '', operator: true }, Date.now())
          } catch (error) {
            if (isServiceError(error) && error.status === 400) throw new ReportRejected(error.message)
            throw error
          }
        }, true)
      },
      async stopShipping(graceMs) {
        await shipper?.stop(graceMs)
      },
      beginShutdown() {
        closing = true
      },
      async close() {
        stopCleanup()
        await shipper?.stop(0)
        await chainer?.stop()
        await exporter?.close()
        await store.close()
        await listening.close()
        await redis?.close()
      },
    }
  } catch (error) {
    stopChallengeCleanup?.()
    await auditChainer?.stop().catch(() => {})
    await stopListening?.()
    await redis?.close()
    throw error
  }
}

/**
 * The change notices the composition owns: the bundle cache's policy LISTEN and the watch hub that pushes
 * notices to gateway-only processes. Awaited before the admin plane serves, so that no approval slips
 * past a cached bundle; a LISTEN that fails leaves bundles uncached and the watch endpoint refusing (503).
 */
async function listenForChanges(
  config: Config, db: Database, keyRing: KeyRing, bundles: BundleCache, logger: Logger,
): Promise<{ watch: GatewayWatchHub; close: () => Promise<void> }> {
  const unlisten = await bundles.listen(db).catch((error: unknown) => {
    // Without NOTIFY the poll interval alone bounds staleness, and nothing is cached.
    logger.error({ err: error }, 'bundle cache: LISTEN failed; bundles are rebuilt on every request')
    return null
  })
  const watch = new GatewayWatchHub({
    db, bundles, keyRing, logger, maxStreams: config.gateway.watchStreamsMax, heartbeatMs: config.gateway.watchHeartbeatMs,
  })
  await watch.start(unlisten !== null)
  return {
    watch,
    async close() {
      await watch.close()
      await unlisten?.()
    },
  }
}

export async function startAppliance(config: Config, options: { logger?: Logger } = {}): Promise<Appliance> {
  const logger = options.logger ?? createLogger(config.logLevel)
  logUnknownVariables(config, logger)
  // The key file first: an unusable one stops start-up at once, before the database is opened.
  const keyRing = await KeyRing.open(config.caKeyPath)
  logger.info({ file: config.caKeyPath, kid: keyRing.current.signing.kid }, 'authority key ring loaded')
  let db: Database
  try {
    db = await openMigratedDatabase(config)
  } catch (error) {
    keyRing.close()
    throw error
  }
  let parts: ApplianceParts | null = null
  // With SERVICE_GATEWAY_WORKERS above 1 the gateway runs in worker processes against this admin plane.
  const workers = config.gateway.enabled && config.gateway.workers > 1 ? applianceGatewayWorkers(config) : null
  let pool: WorkerPool | null = null
  try {
    parts = await composeAppliance(workers?.adminConfig ?? config, { db, keyRing, logger, ...workers?.resources })
    const { admin, snapshot, metrics, feed } = parts
    announceBootstrap(parts.bootstrap, logger)
    await bindListener(
      { name: 'the admin plane', variable: 'PORT', port: config.port, host: config.host },
      () => admin.listen({ port: config.port, host: config.host }),
    )
    const address = admin.server.address()
    const port = typeof address === 'object' && address !== null ? address.port : config.port
    const adminUrl = `http://${config.host === '0.0.0.0' ? '127.0.0.1' : config.host}:${port}`
    logger.info({ url: adminUrl, database: config.database.kind }, 'admin plane listening')

    let gatewayUrl: string | null = null
    let tracing: Tracing | null = null
    let runtime: GatewayRuntime | null = null
    let closeAppliance: () => Promise<void> = async () => {}
    if (workers !== null) {
      pool = await workers.start(adminUrl, logger, (message) => stopAfterCrashLoop(() => closeAppliance(), logger, message))
      gatewayUrl = pool.gatewayUrl
    } else if (snapshot !== null) {
      tracing = await startTracing(config, logger)
      runtime = await startGatewayRuntime(config.gateway, {
        source: snapshot.source,
        logger,
        metrics: metrics.gateway,
        tracer: tracing?.tracer ?? null,
        didWeb: new DidResolver({ db, registryDidHost: config.registryDidHost, allowHosts: config.didWebAllowHosts }),
        // Inside the appliance the gateway countersigns the public agent cards it rewrites (docs/a2a.md).
        cardAuthority: { signingKey: () => keyRing.current.signing },
        feed,
        redis: parts.redis,
      })
      parts.attachGateway(runtime)
      logger.info({ gateway_id: parts.gatewayId }, 'gateway id')
      gatewayUrl = await startGatewayServer(config, runtime, logger)
    }
    const gatewayRuntime = runtime
    const composed = parts
    const gatewayWorkers = pool

    const appliance: Appliance = {
      admin,
      db,
      adminUrl,
      gatewayUrl,
      gateway: gatewayRuntime,
      bootstrap: composed.bootstrap,
      // Once: a crash loop of the gateway workers may have started it before a signal does.
      close: once(async () => {
        composed.beginShutdown()
        // The workers first: their last reports reach this admin plane, which still serves.
        await gatewayWorkers?.close()
        workers?.credentials.forget()
        const deadline = new Promise<'timeout'>((resolve) => setTimeout(() => resolve('timeout'), config.shutdownGraceMs).unref())
        const closed = Promise.all([
          admin.close(),
          gatewayRuntime === null ? undefined : closeServer(gatewayRuntime.gateway.server, deadline),
        ]).then(() => 'closed' as const)
        if ((await Promise.race([closed, deadline])) === 'timeout') {
          logger.warn({ graceMs: config.shutdownGraceMs }, 'grace period over; closing remaining connections')
          admin.server.closeAllConnections()
          await closed
        }
        await gatewayRuntime?.close()
        // The last decisions reach the store before it closes (bounded: the grace period is spent by now at worst).
        await composed.stopShipping(Math.min(config.shutdownGraceMs, 2_000))
        await tracing?.shutdown().catch(() => {})
        keyRing.close()
        await composed.close()
        await closeGuardedFetch()
        await db.close()
      }),
    }
    closeAppliance = appliance.close
    return appliance
  } catch (error) {
    await pool?.close()
    keyRing.close()
    await parts?.close()
    await db.close().catch(() => {})
    throw error
  }
}

const PUSH_DOWN: ReadinessNote = {
  code: 'push_stream_down',
  message: 'the registry watch stream is down; the snapshot is kept fresh by polling (revocations every second, the rest every SERVICE_BUNDLE_POLL_INTERVAL) until it reconnects',
}

/** The remote source's watch stream, logged once per change of state and counted in the metrics. */
function pushOptions(watch: boolean, logger: Logger, metrics: Metrics): Pick<RemoteSourceOptions, 'watch' | 'onWatch' | 'onPushed'> {
  if (!watch) return { watch: false }
  let state: 'unknown' | 'up' | 'down' = 'unknown'
  return {
    watch: true,
    onWatch: (up, error) => {
      metrics.gateway.snapshotPushConnected.set(up ? 1 : 0)
      if (up) logger.info({ previous: state }, 'registry watch stream up; polling slowed to SERVICE_BUNDLE_POLL_INTERVAL')
      else if (state !== 'down') logger.warn({ err: error }, 'registry watch stream down; polling the registry until it reconnects')
      else logger.debug({ err: error }, 'registry watch stream still down')
      state = up ? 'up' : 'down'
    },
    onPushed: (part) => metrics.gateway.snapshotPushedRefreshes.labels(part).inc(),
  }
}

/** A running gateway-only process (`agent-trust gateway`): no database, snapshot pulled from the registry. */
export interface GatewayProcess {
  readonly gatewayUrl: string
  /** `/healthz`, `/readyz`, `/metrics` on PORT; null in a gateway worker, whose primary serves them. */
  readonly opsUrl: string | null
  readonly runtime: GatewayRuntime
  /** What `/readyz` reports of it. */
  readiness(): ReadinessReport
  readonly metrics: Metrics
  /** The id its reports name (SERVICE_PEP_ID, or the one it generated). */
  readonly gatewayId: string
  /** Reports its decisions and heartbeats to SERVICE_REGISTRY_URL. */
  readonly shipper: DecisionShipper
  close(): Promise<void>
}

/** How a gateway worker's process differs from `agent-trust gateway` (see {@link startGatewayWorker}). */
export interface GatewayOnlyOptions {
  readonly logger?: Logger
  readonly metrics?: Metrics
  /** false in a worker: its primary serves `/healthz`, `/readyz` and `/metrics` on PORT. */
  readonly opsListener?: boolean
  /** The id its reports name; by default {@link gatewayIdOf}. */
  readonly gatewayId?: string
  /** Countersigns rewritten public agent cards (the appliance's workers, with the authority key file). */
  readonly cardAuthority?: CardAuthority
}

/** What `agent-trust gateway` cannot run without; thrown at start, in the primary too. */
function requireGatewayOnlyConfig(config: Config): { registryUrl: string; registryKey: string } {
  const { registryUrl, registryKey, enabled } = config.gateway
  if (registryUrl === null || registryKey === null) {
    throw new Error('agent-trust gateway needs SERVICE_REGISTRY_URL and SERVICE_REGISTRY_KEY')
  }
  if (!enabled) throw new Error('agent-trust gateway needs SERVICE_UPSTREAM_URL or SERVICE_ROUTES_FILE')
  return { registryUrl, registryKey }
}

export async function startGatewayOnly(config: Config, options: GatewayOnlyOptions = {}): Promise<GatewayProcess> {
  const logger = options.logger ?? createLogger(config.logLevel)
  if (options.opsListener !== false) logUnknownVariables(config, logger)
  const gatewayConfig = { ...config.gateway, ...requireGatewayOnlyConfig(config) }
  const metrics = options.metrics ?? createMetrics()
  const tracing = await startTracing(config, logger)
  const gatewayId = options.gatewayId ?? gatewayIdOf(config)
  logger.info({ gateway_id: gatewayId }, 'gateway id')
  // The gateway records into its ring; the shipper reports it to the registry (docs/console.md, "Live decisions").
  const feed = { decisions: new DecisionFeed(config.console.decisionsBuffer), overrides: new OverrideLog() }
  let closing = false
  // Not awaited, as in the appliance: rate limits fall back until it answers (see net/redis-link.ts).
  const redis = config.redisUrl === null ? null : connectRedis(config.redisUrl, logger, redisLogFields(config))
  // Envelopes are only verified for requests, so after the first snapshot: the holder is there by then.
  let holder: SnapshotHolder | null = null
  const trustedIssuer = (): string => (holder as SnapshotHolder).current.issuer
  const source = createRemoteSource({
    registryUrl: gatewayConfig.registryUrl,
    registryKey: gatewayConfig.registryKey,
    configuredIssuer: gatewayConfig.configuredIssuer,
    workspace: gatewayConfig.embeddedPdp ? gatewayConfig.workspace : null,
    pollIntervalMs: gatewayConfig.bundlePollIntervalMs,
    onError: (what, error) => logger.warn({ err: error, what }, 'registry sync failed; keeping the last good snapshot'),
    onRefresh: (what, changed) => {
      if (what === 'issuer' && changed) logger.warn({ issuer: trustedIssuer() }, 'the registry names another badge issuer; badges must now carry it')
    },
    ...pushOptions(gatewayConfig.watch, logger, metrics),
  })
  const runtime = await startGatewayRuntime(gatewayConfig, {
    source,
    logger,
    metrics: metrics.gateway,
    tracer: tracing?.tracer ?? null,
    didWeb: registryDidResolver({
      registryUrl: gatewayConfig.registryUrl,
      registryDidHost: () => registryDidHostOf(trustedIssuer()),
      allowHosts: config.didWebAllowHosts,
    }),
    ...(options.cardAuthority === undefined ? {} : { cardAuthority: options.cardAuthority }),
    feed,
    redis,
  }).catch(async (error: unknown) => {
    await redis?.close()
    await tracing?.shutdown().catch(() => {})
    throw error
  })
  holder = runtime.holder
  logger.info({ issuer: trustedIssuer(), registry: gatewayConfig.registryUrl }, 'trusting the badge issuer the registry names')
  const readiness = (): ReadinessReport => {
    // The remote source refuses to start without a first bundle, so no BundleStatus is needed here.
    const gatewayProblem = gatewayReady(config, runtime, null)
    const reasons: Record<string, ReadinessNote> = {}
    if (gatewayProblem !== null) reasons.gateway = gatewayProblem
    if (closing) reasons.accepting = SHUTTING_DOWN
    const degraded: Record<string, ReadinessNote> = {}
    if (redisDown(redis, runtime)) degraded.redis = redisDegraded(config, false)
    if (source.watching && !source.pushUp) degraded.push = PUSH_DOWN
    return { ready: gatewayProblem === null && !closing, checks: { gateway: gatewayProblem === null, accepting: !closing }, reasons, degraded }
  }
  const ops = options.opsListener === false ? null : createOpsServer({ registry: metrics.registry, ready: readiness })
  let opsUrl: string | null = null
  if (ops !== null) {
    try {
      applyServerLimits(ops, serverLimits(config, 'ops'))
      await listen(ops, { name: 'the operations listener', variable: 'PORT', port: config.port, host: config.host })
    } catch (error) {
      await runtime.close()
      await redis?.close()
      throw error
    }
    opsUrl = boundUrl(ops, config.host, config.port)
    logger.info({ url: opsUrl, registry: gatewayConfig.registryUrl }, 'gateway operations listener up')
  }
  const gatewayUrl = await startGatewayServer(config, runtime, logger)
  const sender = createReportSender({ registryUrl: gatewayConfig.registryUrl, registryKey: gatewayConfig.registryKey })
  const shipper = startShipper(config, logger, metrics, feed.decisions, gatewayId, runtime, (report) => sender.send(report), false)
  return {
    gatewayUrl,
    opsUrl,
    runtime,
    readiness,
    metrics,
    gatewayId,
    shipper,
    async close() {
      closing = true
      const started = Date.now()
      const deadline = new Promise<'timeout'>((resolve) => setTimeout(() => resolve('timeout'), config.shutdownGraceMs).unref())
      await closeServer(runtime.gateway.server, deadline)
      if (ops !== null) await closeServer(ops, deadline)
      await runtime.close()
      // One last report of what the gateway decided, within what is left of the grace period.
      await shipper.stop(Math.max(0, Math.min(config.shutdownGraceMs - (Date.now() - started), 5_000)))
      await sender.close()
      await redis?.close()
      await tracing?.shutdown().catch(() => {})
    },
  }
}

// ---- SERVICE_GATEWAY_WORKERS above 1: a primary and node:cluster workers (docs/operations.md, "Gateway workers") ----

/** The script each gateway worker runs. */
const WORKER_SCRIPT = fileURLToPath(new URL('./cli/gateway-worker.js', import.meta.url))

/** `fn` run once; later calls share the first call's promise (a signal during a crash-loop stop, say). */
function once(fn: () => Promise<void>): () => Promise<void> {
  let running: Promise<void> | null = null
  return () => (running ??= fn())
}

/** The primary's answer to a crash loop: the same shutdown as SIGTERM, then exit code 1. */
function stopAfterCrashLoop(close: () => Promise<void>, logger: Logger, message: string): void {
  process.stderr.write(`agent-trust: ${message}\n`)
  close().catch((error: unknown) => logger.error({ err: error }, 'shutdown failed')).finally(() => exitAfterFlush(logger, 1))
}

/** The workers' state before they are forked: none ready yet. */
function noWorkersYet(total: number): WorkersReadiness {
  return { total, ready: 0, workers: [], reports: new Map() }
}

/** The id worker `index` reports under: one row per worker on the Gateways page, each with its own run. */
function workerGatewayId(base: string, index: number): string {
  return `${base}:w${index}`
}

/**
 * The appliance's gateway as workers: the admin plane stays in the primary (the embedded database is one
 * process's), which composes without a gateway of its own; each worker is a gateway-only process against
 * the admin plane on loopback, with a registry credential that lives in the primary's memory only.
 */
function applianceGatewayWorkers(config: Config) {
  const credentials = new WorkerCredentials(config.gateway.workspace)
  const registry = new ClusterRegistry()
  const exits = workerExitsCounter(registry)
  const base = gatewayIdOf(config)
  let pool: WorkerPool | null = null
  return {
    credentials,
    adminConfig: Object.freeze({ ...config, gateway: Object.freeze({ ...config.gateway, enabled: false }) }) as Config,
    resources: {
      metrics: createMetrics(registry),
      credentialResolvers: [credentials.resolver],
      gatewayWorkers: () => pool?.readiness() ?? Promise.resolve(noWorkersYet(config.gateway.workers)),
    },
    async start(adminUrl: string, logger: Logger, onCrashLoop: (message: string) => void): Promise<WorkerPool> {
      try {
        pool = await startWorkerPool({
          count: config.gateway.workers,
          exec: WORKER_SCRIPT,
          env: (index) => ({
            SERVICE_REGISTRY_URL: adminUrl,
            SERVICE_REGISTRY_KEY: credentials.issue(index),
            [WORKER_GATEWAY_ID_VARIABLE]: workerGatewayId(base, index),
            [WORKER_CARD_SIGNING_VARIABLE]: '1',
          }),
          logger,
          shutdownGraceMs: config.shutdownGraceMs,
          onUnplannedExit: () => exits.inc(),
          onCrashLoop,
        })
      } catch (error) {
        throw error instanceof WorkerStartError ? new StartupError(error.message, { cause: error }) : error
      }
      const started = pool
      registry.collectWorkersFrom(() => started.metrics())
      logger.info({ url: started.gatewayUrl, workers: started.count, gateway_id: `${base}:w1…w${started.count}` }, 'gateway workers serving')
      return started
    },
  }
}

/** `agent-trust gateway` with SERVICE_GATEWAY_WORKERS above 1: the operations listener here, the gateway in the workers. */
export interface GatewayPrimary {
  readonly gatewayUrl: string
  readonly opsUrl: string
  close(): Promise<void>
}

export async function startGatewayPrimary(config: Config, options: { logger?: Logger } = {}): Promise<GatewayPrimary> {
  const logger = options.logger ?? createLogger(config.logLevel)
  logUnknownVariables(config, logger)
  const { registryUrl } = requireGatewayOnlyConfig(config)
  const total = config.gateway.workers
  const registry = new ClusterRegistry()
  const exits = workerExitsCounter(registry)
  const base = gatewayIdOf(config)
  let closing = false
  let pool: WorkerPool | null = null
  const ops = createOpsServer({
    registry,
    ready: async () => {
      const own: ReadinessReport = { ready: !closing, checks: { accepting: !closing }, reasons: closing ? { accepting: SHUTTING_DOWN } : {} }
      return withWorkers(own, pool === null ? noWorkersYet(total) : await pool.readiness())
    },
  })
  applyServerLimits(ops, serverLimits(config, 'ops'))
  await listen(ops, { name: 'the operations listener', variable: 'PORT', port: config.port, host: config.host })
  const opsUrl = boundUrl(ops, config.host, config.port)
  logger.info({ url: opsUrl, registry: registryUrl, workers: total }, 'gateway operations listener up')
  const now = new Promise<'timeout'>((resolve) => resolve('timeout'))
  let close: () => Promise<void> = async () => {}
  try {
    pool = await startWorkerPool({
      count: total,
      exec: WORKER_SCRIPT,
      env: (index) => ({ [WORKER_GATEWAY_ID_VARIABLE]: workerGatewayId(base, index) }),
      logger,
      shutdownGraceMs: config.shutdownGraceMs,
      onUnplannedExit: () => exits.inc(),
      onCrashLoop: (message) => stopAfterCrashLoop(() => close(), logger, message),
    })
  } catch (error) {
    await closeServer(ops, now)
    throw error instanceof WorkerStartError ? new StartupError(error.message, { cause: error }) : error
  }
  const started = pool
  registry.collectWorkersFrom(() => started.metrics())
  logger.info({ url: started.gatewayUrl, workers: total, gateway_id: `${base}:w1…w${total}` }, 'gateway workers serving')
  close = once(async () => {
    closing = true
    await started.close()
    await closeServer(ops, now)
  })
  return { gatewayUrl: started.gatewayUrl, opsUrl, close: () => close() }
}

/**
 * What a gateway worker runs (src/cli/gateway-worker.ts): a gateway-only process without an operations
 * listener, reporting under the id its primary gave it; in the appliance it countersigns agent cards with
 * the authority key file, opened read-only here and re-read when `agent-trust keys rotate` changes it.
 */
export async function startGatewayWorker(config: Config, options: { logger: Logger; gatewayId: string | null; cardSigning: boolean }): Promise<WorkerGateway> {
  const { logger } = options
  const keyRing = options.cardSigning ? await KeyRing.open(config.caKeyPath) : null
  keyRing?.watch(2_000, (error) => logger.error({ err: error }, 'authority key file reload failed; keeping the last good keys'))
  try {
    const running = await startGatewayOnly(config, {
      logger,
      opsListener: false,
      ...(options.gatewayId === null ? {} : { gatewayId: options.gatewayId }),
      ...(keyRing === null ? {} : { cardAuthority: { signingKey: () => keyRing.current.signing } }),
    })
    return {
      gatewayUrl: running.gatewayUrl,
      readiness: () => running.readiness(),
      registry: running.metrics.registry,
      async close() {
        await running.close()
        keyRing?.close()
      },
    }
  } catch (error) {
    keyRing?.close()
    throw error
  }
}

/** `agent-trust gateway`: one process, or with SERVICE_GATEWAY_WORKERS above 1 a primary and its workers. */
export function startGatewayCommand(config: Config, options: { logger?: Logger } = {}): Promise<{ close(): Promise<void> }> {
  return config.gateway.workers > 1 ? startGatewayPrimary(config, options) : startGatewayOnly(config, options)
}

/** Exits once the buffered log destination has been written out. */
function exitAfterFlush(logger: Logger, code: number): void {
  logger.info({ code }, 'stopped')
  logger.flush((error) => {
    if (error !== undefined && error !== null) process.stderr.write('log flush failed\n')
    process.exit(code)
  })
}

/**
 * SIGTERM/SIGINT: one owner, fixed order; exit 0 once everything is closed. A repeated signal during
 * the drain is logged and ignored: the requests still in flight have already reached the upstream, so
 * cutting them would lose answers to work that was done. Only the grace period's end (or SIGKILL) stops
 * the drain early. With `stopWithParent`, the end of the process that started this one
 * ({@link watchParent}) starts the same shutdown.
 */
export function installSignalHandlers(appliance: { close(): Promise<void> }, logger: Logger, options: { stopWithParent?: boolean } = {}): void {
  let stopping = false
  const shutDown = (fields: Record<string, unknown>, message: string): void => {
    stopping = true
    logger.info(fields, message)
    appliance.close().then(
      () => exitAfterFlush(logger, 0),
      (error: unknown) => {
        logger.error({ err: error }, 'shutdown failed')
        exitAfterFlush(logger, 1)
      },
    )
  }
  const stop = (signal: string): void => {
    if (stopping) {
      logger.warn({ signal }, 'already shutting down; signal ignored (in-flight requests keep their grace period; SIGKILL stops at once)')
      return
    }
    shutDown({ signal }, 'shutting down')
  }
  // `on`, not `once`: with no handler left, a second signal would kill the process mid-drain.
  process.on('SIGTERM', () => stop('SIGTERM'))
  process.on('SIGINT', () => stop('SIGINT'))
  if (options.stopWithParent === true) {
    watchParent((parentPid) => {
      if (!stopping) shutDown({ parent_pid: parentPid }, 'parent process exited; shutting down')
    })
  }
}

/** How often a server looks whether the process that started it is still there. */
const PARENT_CHECK_MS = 1000

/** Shells that run a command as a child and wait for it: npm and npx run theirs with `sh -c`. */
const WAITING_SHELLS = new Set(['sh', 'dash', 'bash', 'ash', 'zsh', 'ksh', 'mksh'])

/** The command name and parent of a process, from /proc (Linux); null when it is gone or there is no /proc. */
function processStat(pid: number): { name: string; ppid: number } | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    // The name (field 2) is in parentheses and may hold spaces and parentheses; the fields after it do not.
    const close = stat.lastIndexOf(')')
    return { name: stat.slice(stat.indexOf('(') + 1, close), ppid: Number(stat.slice(close + 2).split(' ')[1]) }
  } catch {
    return null
  }
}

/**
 * Calls `onGone` (once, with its pid) when the process that started this one has exited. Nothing else
 * would stop a server then: a parent killed with SIGKILL forwards nothing, and npx runs its command under
 * `sh -c`, whose shell dies of the SIGTERM npx passes on without passing it further. The kernel hands
 * an orphan to init or a subreaper, so `process.ppid` changes; under a waiting shell, the shell's own
 * parent is watched as well (from /proc), since a shell outlives a parent killed with SIGKILL. A process
 * started by init (or PID 1 itself, as in a container) has nothing to watch. The check is a system call
 * (and one small /proc read) per PARENT_CHECK_MS on an unreferenced timer, far from any request.
 */
export function watchParent(onGone: (pid: number) => void, intervalMs = PARENT_CHECK_MS): () => void {
  const parent = process.ppid
  if (parent <= 1) return () => {}
  const stat = processStat(parent)
  const grandparent = stat !== null && WAITING_SHELLS.has(stat.name) && stat.ppid > 1 ? stat.ppid : null
  const timer = setInterval(() => {
    let gone: number | null = null
    if (process.ppid !== parent) gone = parent
    else if (grandparent !== null && processStat(parent)?.ppid !== grandparent) gone = grandparent
    if (gone === null) return
    clearInterval(timer)
    onGone(gone)
  }, intervalMs)
  timer.unref()
  return () => clearInterval(timer)
}
