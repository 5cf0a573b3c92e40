/**
 * Builds the admin plane (control plane) as an unstarted Fastify instance. Only `main.ts` listens;
 * tests and benchmarks build the same object (docs/architecture.md "build, don't start").
 */
import Fastify, { LogController, type FastifyInstance, type FastifyReply, type FastifyRequest, type FastifyServerOptions } from 'fastify'
import type { Redis } from 'ioredis'
import { randomUUID } from 'node:crypto'
import type { KeyRing } from '../authority/key-ring.js'
import type { Config } from '../config/index.js'
import { ERRORS, ServiceError } from '../core/errors.js'
import { findUnsafeText } from '../core/safe-text.js'
import type { Database } from '../db/database.js'
import { DecisionFeed, OverrideLog, type GatewayView } from '../telemetry/decision-feed.js'
import type { Logger } from '../telemetry/logger.js'
import type { Metrics } from '../telemetry/metrics.js'
import { bodyAjv, textInputAjv } from './body-validation.js'
import { registerAuth, type CredentialResolver } from './plugins/auth.js'
import { registerErrorHandling } from './plugins/errors.js'
import { registerRateLimit } from './plugins/rate-limit.js'
import { requestLogLevel } from './plugins/request-log.js'
import { registerSwagger } from './plugins/swagger.js'
import { VERSION } from '../version.js'
import { agentCardRoutes } from './routes/agent-cards.js'
import { agentRoutes } from './routes/agents.js'
import { badgeRoutes } from './routes/badges.js'
import { popRoutes } from './routes/pop.js'
import { oauthRoutes } from './routes/oauth.js'
import { tokenAudienceRoutes } from './routes/token-audiences.js'
import { trustRoutes } from './routes/trust.js'
import { policyRoutes } from './routes/policies.js'
import { identityRoutes } from './routes/identity.js'
import { bundleRoutes } from './routes/bundles.js'
import { consoleRoutes } from './routes/console.js'
import { createSessionResolver } from './services/sessions.js'
import { DidResolver } from '../authority/did-resolver.js'
import { agentDidWebPrefix } from '../core/did.js'
import { IssuanceBatcher } from '../authority/issuance-batcher.js'
import { healthRoutes, type ReadinessReport } from './routes/health.js'
import { keyRoutes } from './routes/keys.js'
import { gatewayFeedRoutes } from './routes/gateway-feed.js'
import { gatewayWatchRoutes } from './routes/gateway-watch.js'
import { GatewayWatchHub } from './services/gateway-watch.js'
import { consolePageRoutes } from './routes/console-pages.js'
import { ConsoleSessions } from './services/console-sessions.js'
import { ApiKeyAuthenticator } from './services/credentials.js'
import { API_KEY_CHANNEL } from '../core/notify-channels.js'
import { loadPolicyModule } from '../bundles/builder.js'
import { BundleCache } from '../bundles/cache.js'
import type { DecisionLogExporter } from './services/decision-log-export.js'
import { MemoryDecisionStore, type DecisionStore } from './services/decision-store.js'
import { registerRequestDatabase } from './plugins/audit.js'
import { auditRoutes } from './routes/audit.js'
import type { AuditChainer } from '../authority/audit-chainer.js'
import type { ReportAudit } from './services/gateway-reports.js'

/** docs/wire-contract.md §3: bodies over 1 MiB get 413. */
export const BODY_LIMIT_BYTES = 1024 * 1024

export interface AdminDeps {
  readonly config: Config
  readonly db: Database
  readonly logger: Logger
  readonly metrics: Metrics
  readonly redis: Redis | null
  readonly keyRing: KeyRing
  readonly readiness: () => Promise<ReadinessReport>
  /** Extra credential resolvers, tried before API keys and session tokens (they must answer from memory). */
  readonly credentialResolvers?: readonly CredentialResolver[]
  /** The org bundles, when the process shares them with its gateway; else the admin plane keeps its own. */
  readonly bundles?: BundleCache
  /** This process's gateway as the console reads it; by default none (the feeds stay empty and say so). */
  readonly gateway?: GatewayView
  /** Where reported decisions and heartbeats are kept; by default this process's memory. */
  readonly decisionStore?: DecisionStore
  /** The decision-log export of stored decisions (SERVICE_DECISION_LOG_URL), if configured. */
  readonly decisionLogExporter?: DecisionLogExporter | null
  /** Ships this process's own gateway's pending decisions into the store (see gateway-feed.ts). */
  readonly drainLocalDecisions?: () => Promise<void>
  /** The gateway id of this process's own gateway. */
  readonly localGatewayId?: string
  /** The push stream's hub, started by the composition; without one the watch endpoint answers 503. */
  readonly watch?: GatewayWatchHub
  /** Chains the audit trail's pending records (started by the composition); asked to run after each audited write. */
  readonly auditChainer?: AuditChainer | null
}

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,64}$/

export async function buildAdminApp(deps: AdminDeps): Promise<FastifyInstance> {
  const { config, db, metrics } = deps
  const options: FastifyServerOptions = {
    loggerInstance: deps.logger,
    bodyLimit: BODY_LIMIT_BYTES,
    // JSON with __proto__ or constructor.prototype keys is refused outright (prototype pollution).
    onProtoPoisoning: 'error',
    onConstructorPoisoning: 'error',
    genReqId: (request) => {
      const incoming = request.headers['x-request-id']
      return typeof incoming === 'string' && REQUEST_ID.test(incoming) ? incoming : randomUUID()
    },
    requestIdHeader: false,
    // One line per request (written in onResponse below) instead of Fastify's two.
    logController: new LogController({ disableRequestLogging: true }),
    trustProxy: false,
    return503OnClosing: true,
    forceCloseConnections: 'idle',
    routerOptions: { maxParamLength: 600 },
    // Errors Fastify raises before routing (an undecodable URL, an over-long path parameter) get the
    // same {error, message} shape as every other error, without echoing the URL back.
    frameworkErrors: (error, _request, reply) => {
      const tooLong = (error as { code?: string }).code === 'FST_ERR_MAX_PARAM_LENGTH'
      const code = tooLong ? 'invalid_id' : 'invalid_request'
      // The reply is untyped here (no route schema applies before routing).
      const raw = reply as unknown as { code(status: number): { type(t: string): { send(body: string): void } } }
      raw.code(400).type('application/json; charset=utf-8').send(JSON.stringify({ error: code, message: ERRORS[code].message }))
    },
  }
  const app = Fastify(options)

  // Bodies exactly as sent, path and query text parsed into the declared types (body-validation.ts).
  const compilers = { body: bodyAjv(), other: textInputAjv() }
  app.setValidatorCompiler(({ schema, httpPart }) => {
    const validate = httpPart === 'body' ? compilers.body.compile(schema) : compilers.other.compile(schema)
    const checkText = httpPart === 'body' || httpPart === 'querystring' || httpPart === 'params'
    const validateAll = (data: unknown): boolean => {
      // A request without a body (a bare POST on an action route) is checked as an empty object: routes
      // whose fields are all optional accept it, and required fields are still reported by name.
      const input = httpPart === 'body' && (data === undefined || data === null) ? {} : data
      const ok = validate(input)
      validateAll.errors = validate.errors
      if (!ok || !checkText) return ok
      // Every string a request carries is checked once here, so none can reach SQL with a NUL or half a
      // surrogate pair whatever the route does with it (fields marked x-verbatim excepted).
      const unsafe = findUnsafeText(input, schema)
      if (unsafe === null) return true
      validateAll.errors = [{
        keyword: unsafe.reason === 'too_deep' ? 'maxDepth' : 'safeText',
        instancePath: unsafe.path === '/' ? '' : unsafe.path,
        schemaPath: '#',
        params: {},
        message: unsafe.reason === 'too_deep' ? 'must not nest deeper than 64 levels' : 'must not contain U+0000 or an unpaired UTF-16 surrogate',
      }] as typeof validate.errors
      return false
    }
    validateAll.errors = null as typeof validate.errors
    return validateAll
  })

  // An empty body with a JSON content type (common from HTTP clients on action routes) is no body.
  const parseJson = app.getDefaultJsonParser('error', 'error')
  app.removeContentTypeParser(['application/json', 'text/plain'])
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    const text = body as string
    if (text.trim() === '') return done(null, undefined)
    parseJson(request, text, (error, value) => {
      // Fastify reports prototype poisoning as plain invalid JSON; name the real reason for the client.
      if (error !== null && /"(__proto__|constructor)"\s*:/.test(text)) {
        return done(new ServiceError('invalid_request', 'The body contains a forbidden key (__proto__ or constructor.prototype).'), undefined)
      }
      done(error, value)
    })
  })

  app.addHook('onRequest', async (request, reply) => {
    void reply.header('x-request-id', request.id)
  })
  registerErrorHandling(app)
  await registerSwagger(app, { version: VERSION, host: new URL(config.issuerUrl).host })
  const limits = await registerRateLimit(app, { perMinute: config.rateLimitPerMinute, redis: deps.redis })
  const auditing = config.audit.enabled
  const chainSoon = (): void => deps.auditChainer?.soon()
  const reportAudit: ReportAudit | null = auditing ? { db, allowSample: config.audit.allowSample, committed: chainSoon } : null
  const apiKeys = new ApiKeyAuthenticator(db, { log: deps.logger })
  const unlisten = await db.listen(API_KEY_CHANNEL, (keyId) => apiKeys.evict(keyId), () => apiKeys.clear())
  app.addHook('onClose', async () => unlisten())
  const sessions = createSessionResolver(config, db)
  const apiKeyResolver: CredentialResolver = (credential) => apiKeys.authenticate(credential)
  // The extra resolvers answer from memory (the gateway workers' credentials): asked first, they save a query.
  const resolvers = [...(deps.credentialResolvers ?? []), apiKeyResolver, ...(sessions === null ? [] : [sessions])]
  const consoleSessions = new ConsoleSessions(db, apiKeys, { idleMs: config.console.sessionIdleMs, maxMs: config.console.sessionMaxMs })
  const countFailure = (request: FastifyRequest, reply: FastifyReply): Promise<void> => limits.countFailedAuthentication(request, reply)
  const publicOrigin = new URL(config.issuerUrl).origin
  registerAuth(app, resolvers, countFailure, { sessions: consoleSessions, publicOrigin })
  // Handlers work through request.db: on an audited route, each pending record joins its write's transaction.
  registerRequestDatabase(app, db, auditing
    ? { db, committed: chainSoon, onError: (error) => deps.logger.error({ err: error }, 'audit record of a refused request not stored') }
    : null)

  app.addHook('onResponse', async (request, reply) => {
    const route = request.routeOptions.url ?? 'unmatched'
    const statusClass = `${Math.floor(reply.statusCode / 100)}xx`
    metrics.adminRequests.inc({ method: request.method, route, status_class: statusClass })
    metrics.adminLatency.observe({ method: request.method, route }, reply.elapsedTime / 1000)
    // The route pattern, never the raw URL: paths may carry DIDs, and query strings cursors.
    const level = requestLogLevel(request.routeOptions.config, reply.statusCode)
    request.log[level]({ method: request.method, route, status: reply.statusCode, ms: Math.round(reply.elapsedTime * 10) / 10 }, 'request completed')
  })

  const registry = { db, registryDidHost: config.registryDidHost }
  healthRoutes(app, { readiness: deps.readiness, registry: metrics.registry })
  agentRoutes(app, registry)
  keyRoutes(app, db, apiKeys)
  auditRoutes(app, { db })
  consoleRoutes(app, {
    db, sessions: consoleSessions, apiKeyResolver, resolvers, production: config.environment === 'production', publicOrigin, countFailedSignIn: countFailure,
  })
  const resolver = new DidResolver({ db, registryDidHost: config.registryDidHost, allowHosts: config.didWebAllowHosts })
  const authority = {
    db,
    keyRing: deps.keyRing,
    issuer: config.issuerUrl,
    registryDidHost: config.registryDidHost,
    // The batcher writes its batch's pending records in the batch's own statement (issuance-batcher.ts).
    issuance: new IssuanceBatcher(db, agentDidWebPrefix(config.registryDidHost), chainSoon),
  }
  agentCardRoutes(app, { resolver, didWebAllowHosts: config.didWebAllowHosts, registry, keyRing: deps.keyRing, issuer: config.issuerUrl })
  badgeRoutes(app, authority)
  popRoutes(app, { ...authority, resolver })
  await oauthRoutes(app, { ...authority, resolver })
  tokenAudienceRoutes(app, db)
  trustRoutes(app, { db, dnsServers: config.dnsServers, registryDidHost: config.registryDidHost })
  policyRoutes(app, { db, registryDidHost: config.registryDidHost })
  identityRoutes(app, { db, webhookSecret: config.auth.webhookSecret, apiKeys })
  const bundles = deps.bundles ?? new BundleCache({
    db, registryDidHost: config.registryDidHost, policyModule: loadPolicyModule(), pollIntervalMs: config.gateway.bundlePollIntervalMs,
  })
  bundleRoutes(app, { db, registryDidHost: config.registryDidHost, cache: bundles })
  gatewayFeedRoutes(app, {
    db,
    gateway: deps.gateway ?? { decisions: new DecisionFeed(1), overrides: new OverrideLog(1), status: () => null },
    keyRing: deps.keyRing,
    logger: deps.logger,
    streamsMax: config.console.streamsMax,
    streamsPerOrg: config.console.streamsPerOrg,
    heartbeatMs: config.console.heartbeatMs,
    bundles,
    store: deps.decisionStore ?? new MemoryDecisionStore(config.console.decisionsBuffer),
    exporter: deps.decisionLogExporter ?? null,
    audit: reportAudit,
    bundleStalenessMs: config.gateway.bundleStalenessThresholdMs,
    ...(deps.drainLocalDecisions === undefined ? {} : { drainLocal: deps.drainLocalDecisions }),
    ...(deps.localGatewayId === undefined ? {} : { localGatewayId: deps.localGatewayId }),
  })
  gatewayWatchRoutes(app, deps.watch ?? new GatewayWatchHub({
    db, bundles, keyRing: deps.keyRing, logger: deps.logger, maxStreams: config.gateway.watchStreamsMax, heartbeatMs: config.gateway.watchHeartbeatMs,
  }))
  consolePageRoutes(app)
  return app
}
