/**
 * The gateway (policy enforcement point): a bare `node:http` server whose handler runs the stages of
 * architecture.md in order — badge → chain → break-glass → decide → enforce → forward — and
 * writes exactly one log line, the metrics and an optional span per request. Fastify stays off this
 * path (it halves proxy throughput, measured in bench/gateway.ts). Everything per request is read from
 * one snapshot taken at the start; nothing here waits on the database.
 *
 * `createGateway` builds an unstarted server; main.ts listens and owns shutdown.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { KeyObject } from 'node:crypto'
import type { Span, Tracer } from '@opentelemetry/api'
import ipaddr from 'ipaddr.js'
import type { Config, EnforcementMode } from '../config/index.js'
import { verifyBreakglassToken } from '../core/breakglass.js'
import { effectiveMode, enforce, type EnforcementResult } from '../core/enforcement.js'
import type { VerifiedChain } from '../core/envelope.js'
import type { PdpRequest } from '../core/policy/types.js'
import type { Logger } from '../telemetry/logger.js'
import { RequestLogWriter, type FieldValue } from '../telemetry/request-log.js'
import type { GatewayMetrics } from '../telemetry/metrics.js'
import { BadgeVerifier, extractBadge } from './badge-stage.js'
import { ChainStage, type DidKeySource } from './chain-stage.js'
import { DecisionCache } from './decision-cache.js'
import { ObligationHandlers, RateLimiter, type AppliedRateLimit, type EnhancedLogContext } from './obligations.js'
import type { PdpAnswer, PolicyDecisionPoint } from './pdp/pdp.js'
import { sendGatewayError } from './respond.js'
import type { GatewaySnapshot, SnapshotHolder } from './snapshot/snapshot.js'
import { transactionId } from './txn-id.js'
import { clientErrorHandler, framingProblem } from './upstream/framing.js'
import type { RouteTable } from './upstream/routes.js'
import type { Upstream } from './upstream/upstream.js'

/** Where a route prefix forwards, and the mode it enforces when the routes file names one. */
export interface RouteTarget {
  readonly upstream: Upstream
  readonly mode: EnforcementMode | null
}

export interface GatewayDeps {
  readonly config: Config['gateway']
  readonly holder: SnapshotHolder
  /** Null: badge-only mode (no embedded PDP and no endpoint configured). */
  readonly pdp: PolicyDecisionPoint | null
  readonly routes: RouteTable<RouteTarget>
  readonly breakglassKey: KeyObject | null
  readonly logger: Logger
  readonly metrics: GatewayMetrics
  readonly tracer?: Tracer | null
  /** did:web key resolution for delegation envelopes; null: only did:key issuers can be verified. */
  readonly didWeb?: DidKeySource | null
  readonly now?: () => number
}

export interface Gateway {
  readonly server: Server
  readonly badges: BadgeVerifier
  readonly decisions: DecisionCache
  /** Stops the gateway's timers and writes out queued log lines; the server itself is closed by the owner. */
  dispose(): void
}

/**
 * Headers removed from the client request before forwarding: the identity headers the gateway sets
 * (a client copy must never reach the upstream) and the break-glass token (protocol.md §9, §13).
 * Badge and envelope headers are forwarded unchanged so the upstream may verify them itself.
 */
const STRIP = new Set([
  'x-service-subject',
  'x-service-issuer',
  'x-service-trust-level',
  'x-service-badge-jti',
  'x-service-txn',
  'x-service-breakglass',
])

const STATUS_CLASS = ['1xx', '1xx', '2xx', '3xx', '4xx', '5xx'] as const
const NO_HEADERS: readonly string[] = Object.freeze([])

function rateLimitHeaderList(limit: AppliedRateLimit): string[] {
  return [
    'x-ratelimit-limit', String(limit.limit),
    'x-ratelimit-remaining', String(limit.remaining),
    'x-ratelimit-reset', String(limit.reset),
  ]
}

/** Everything the finishing step (log line, metrics, span) needs; one object per request. */
interface RequestRecord {
  requestId: string
  txnId: string | undefined
  did: string | undefined
  jti: string | undefined
  mode: EnforcementMode
  decision: 'ALLOW' | 'DENY' | 'ALLOW_OBSERVE' | undefined
  decisionId: string | undefined
  /** The gateway-made response's code (`BADGE_EXPIRED`, `POLICY_DENIED`, `UPSTREAM_TIMEOUT`…). */
  errorCode: string | undefined
  /** `service.policy.error_code`: `PDP_UNAVAILABLE` when the PDP could not answer (spec §6). */
  policyErrorCode: string | undefined
  override: boolean
  overrideJti: string | undefined
  bundleStale: boolean
  bundleAgeMs: number | undefined
  status: number
  obligationsLogged: string[] | undefined
  /** A chain failure that EM-OBSERVE let through (logged, protocol.md §10). */
  chainError: string | undefined
  delegationDepth: number | undefined
}

function statusClass(status: number): string {
  return STATUS_CLASS[Math.floor(status / 100)] ?? '5xx'
}

/** Whether the peer may set X-Forwarded-* for us: exact addresses and CIDR ranges of SERVICE_TRUSTED_PROXIES. */
function trustedPeerCheck(entries: readonly string[]): (address: string | undefined) => boolean {
  if (entries.length === 0) return () => false
  const ranges: [ipaddr.IPv4 | ipaddr.IPv6, number][] = []
  for (const entry of entries) {
    try {
      ranges.push(entry.includes('/') ? ipaddr.parseCIDR(entry) : [ipaddr.parse(entry), ipaddr.parse(entry).kind() === 'ipv4' ? 32 : 128])
    } catch {
      // config validation already reported it; an unparsable entry trusts nobody
    }
  }
  const seen = new Map<string, boolean>()
  return (address) => {
    if (address === undefined) return false
    let trusted = seen.get(address)
    if (trusted === undefined) {
      let parsed: ipaddr.IPv4 | ipaddr.IPv6
      try {
        parsed = ipaddr.process(address)
      } catch {
        return false
      }
      trusted = ranges.some(([range, bits]) => parsed.kind() === range.kind() && parsed.match(range, bits))
      if (seen.size < 10_000) seen.set(address, trusted)
    }
    return trusted
  }
}

export function createGateway(deps: GatewayDeps): Gateway {
  const { config, holder, pdp, routes, logger, metrics } = deps
  const now = deps.now ?? Date.now
  const tracer = deps.tracer ?? null
  const badges = new BadgeVerifier({
    acceptSelfSigned: config.acceptSelfSigned,
    onLookup: (hit) => (hit ? badgeHit : badgeMiss).inc(),
  })
  const decisions = new DecisionCache()
  const chains = new ChainStage({
    maxDepth: config.maxChainDepth,
    orgTrustBoundary: config.orgTrustBoundary,
    didWeb: deps.didWeb ?? null,
    badges,
  })
  const obligations = new ObligationHandlers(new RateLimiter(), (level, context) => {
    ;(logger as unknown as Record<string, (obj: unknown, msg: string) => void>)[level]?.(context, 'gateway enhanced request log')
  })
  const isTrustedPeer = trustedPeerCheck(config.trustedProxies)
  const pepId = config.pepId ?? ''
  const pdpKind = pdp?.kind ?? 'none'
  const staleAfterMs = config.bundleStalenessThresholdMs
  // The per-request line has only fields set here (never a header or token): see request-log.ts.
  const requestLog = new RequestLogWriter(logger)

  // Label children resolved once: prom-client's label lookup builds a key per call otherwise.
  const badgeHit = metrics.cacheLookups.labels('badge', 'hit')
  const badgeMiss = metrics.cacheLookups.labels('badge', 'miss')
  const decisionHit = metrics.cacheLookups.labels('decision', 'hit')
  const decisionMiss = metrics.cacheLookups.labels('decision', 'miss')
  const pdpDuration = metrics.pdpDuration.labels(pdpKind)
  const requestChildren = new Map<string, ReturnType<typeof metrics.requests.labels>>()
  const countRequest = (record: RequestRecord): void => {
    const decision = record.decision ?? 'NONE'
    const code = record.errorCode ?? ''
    const key = `${decision}|${record.mode}|${record.status}|${code}`
    let child = requestChildren.get(key)
    if (child === undefined) {
      child = metrics.requests.labels(decision, record.mode, statusClass(record.status), code)
      requestChildren.set(key, child)
    }
    child.inc()
  }

  // Caches derived from an older snapshot: verified badges depend on the key set, embedded decisions
  // on the bundle revision.
  let keysVersion: string | null = null
  let bundleRevision: string | null = null
  holder.onSwap((snapshot) => {
    if (keysVersion !== null && snapshot.keysVersion !== keysVersion) badges.clear()
    keysVersion = snapshot.keysVersion
    const revision = snapshot.bundle?.revision ?? null
    if (revision !== bundleRevision) decisions.clear()
    bundleRevision = revision
  })

  const bundleAgeMs = (snapshot: GatewaySnapshot, nowMs: number): number | undefined =>
    snapshot.bundle === null ? undefined : nowMs - snapshot.bundle.confirmedAt
  metrics.bundleAge.reset()
  const collectBundleAge = (): void => {
    if (!holder.ready || pdp?.kind !== 'embedded') return
    const age = bundleAgeMs(holder.current, now())
    if (age === undefined) return
    metrics.bundleAge.set(age / 1000)
    metrics.bundleStale.set(age > staleAfterMs ? 1 : 0)
  }
  const ageTimer = setInterval(collectBundleAge, 1000)
  ageTimer.unref()

  let sequence = 0
  const requestPrefix = `gw-${process.pid.toString(36)}-${Date.now().toString(36)}-`

  function finish(record: RequestRecord, method: string | undefined, started: number, span: Span | null): void {
    const latencyMs = performance.now() - started
    countRequest(record)
    metrics.requestDuration.observe(latencyMs / 1000)
    if (!requestLog.enabled) return finishSpan(record, method, span)
    const line: Record<string, FieldValue> = {
      request_id: record.requestId,
      txn_id: record.txnId,
      agent_did: record.did,
      badge_jti: record.jti,
      method,
      status: record.status,
      mode: record.mode,
      'service.policy.decision': record.decision,
      'service.policy.decision_id': record.decisionId,
      'service.policy.error_code': record.policyErrorCode,
      'service.policy.override': record.override,
      error_code: record.errorCode,
      latency_ms: Math.round(latencyMs * 1000) / 1000,
    }
    if (record.overrideJti !== undefined) line.override_jti = record.overrideJti
    if (record.bundleStale) {
      line['staleness.bundle_stale'] = true
      line['staleness.bundle_age_ms'] = record.bundleAgeMs
    }
    if (record.obligationsLogged !== undefined) line.obligations_not_met = record.obligationsLogged
    if (record.delegationDepth !== undefined) line.delegation_depth = record.delegationDepth
    if (record.chainError !== undefined) line.chain_error = record.chainError
    requestLog.write(line, 'gateway request')
    finishSpan(record, method, span)
  }

  function finishSpan(record: RequestRecord, method: string | undefined, span: Span | null): void {
    if (span !== null) {
      span.setAttributes({
        'http.request.method': method ?? '',
        'http.response.status_code': record.status,
        'service.policy.decision': record.decision ?? '',
        'service.policy.decision_id': record.decisionId ?? '',
        'service.policy.error_code': record.policyErrorCode ?? '',
        'service.error_code': record.errorCode ?? '',
        'service.policy.override': record.override,
        'service.enforcement_mode': record.mode,
        'staleness.bundle_stale': record.bundleStale,
        ...(record.bundleStale && record.bundleAgeMs !== undefined ? { 'staleness.bundle_age_ms': record.bundleAgeMs } : {}),
      })
      span.end()
    }
  }

  function refuse(res: ServerResponse, record: RequestRecord, status: number, code: string, headers?: Record<string, string>): void {
    record.status = status
    record.errorCode = code
    const extra: Record<string, string> = { ...headers }
    if (record.txnId !== undefined) extra['x-service-txn'] = record.txnId
    if (record.decisionId !== undefined) extra['x-service-decision-id'] = record.decisionId
    sendGatewayError(res, status, code, extra)
  }

  /** The PDP's answer through the decision cache; `build` makes the PDP request only on a miss. */
  async function decide(
    key: string, build: () => PdpRequest, notAfterMs: number, snapshot: GatewaySnapshot, nowMs: number,
  ): Promise<PdpAnswer> {
    const cached = decisions.get(key, nowMs)
    if (cached !== undefined) {
      decisionHit.inc()
      return cached
    }
    decisionMiss.inc()
    const decisionPoint = pdp as PolicyDecisionPoint
    const started = performance.now()
    const pending = decisionPoint.decide(build(), snapshot)
    const answer = pending instanceof Promise ? await pending : pending
    pdpDuration.observe((performance.now() - started) / 1000)
    if (answer.outcome === 'UNAVAILABLE') metrics.pdpUnavailable.labels(pdpKind, answer.reason).inc()
    else decisions.set(key, answer, nowMs, notAfterMs)
    return answer
  }

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const started = performance.now()
    const nowMs = now()
    const span = tracer === null ? null : tracer.startSpan('gateway.request')
    const record: RequestRecord = {
      requestId: requestPrefix + (++sequence).toString(36),
      txnId: undefined,
      did: undefined,
      jti: undefined,
      mode: config.enforcementMode,
      decision: undefined,
      decisionId: undefined,
      errorCode: undefined,
      policyErrorCode: undefined,
      override: false,
      overrideJti: undefined,
      bundleStale: false,
      bundleAgeMs: undefined,
      status: 0,
      obligationsLogged: undefined,
      chainError: undefined,
      delegationDepth: undefined,
    }
    try {
      await stages(req, res, record, nowMs)
    } catch (error) {
      // A bug, never an expected outcome: fail closed, log the fact without internals in the response.
      logger.error({ err: error, request_id: record.requestId }, 'gateway request failed')
      refuse(res, record, 500, 'GATEWAY_ERROR')
    }
    finish(record, req.method, started, span)
  }

  async function stages(req: IncomingMessage, res: ServerResponse, record: RequestRecord, nowMs: number): Promise<void> {
    if (!holder.ready) return refuse(res, record, 503, 'GATEWAY_NOT_READY')
    const snapshot = holder.current
    const headers = req.headers

    const framing = framingProblem(req)
    if (framing !== null) {
      logger.warn({ request_id: record.requestId, reason: framing }, 'gateway refused request framing')
      res.shouldKeepAlive = false
      return refuse(res, record, 400, 'REQUEST_MALFORMED')
    }

    const url = req.url ?? '/'
    const query = url.indexOf('?')
    const path = query === -1 ? url : url.slice(0, query)
    const route = routes.match(path)
    if (route === null) return refuse(res, record, 404, 'ROUTE_NOT_FOUND')
    const target = route.value
    record.mode = target.mode ?? config.enforcementMode
    record.txnId = transactionId(headers['x-service-txn'] as string | undefined, nowMs)

    // Badge stage: a missing or invalid badge is 401 in every mode, EM-OBSERVE included (protocol.md §13).
    const token = extractBadge(headers.authorization, headers['x-service-badge'] as string | undefined)
    if (token === 'missing') return refuse(res, record, 401, 'BADGE_MISSING')
    if (token === 'conflict') return refuse(res, record, 401, 'BADGE_CONFLICT')
    const badge = badges.verify(token, snapshot, Math.floor(nowMs / 1000))
    if (typeof badge === 'string') return refuse(res, record, 401, badge)
    record.did = badge.claims.sub
    record.jti = badge.claims.jti

    const method = req.method ?? 'GET'
    let outcome: EnforcementResult | null = null

    // Chain stage: envelopes are verified before anything else is decided (protocol.md §10).
    let chain: VerifiedChain | null = null
    const authority = headers['x-service-authority']
    const chainHeader = headers['x-service-authority-chain']
    if (authority !== undefined || chainHeader !== undefined) {
      const result = await chains.verify(
        { authority: authority as string | undefined, chain: chainHeader as string | undefined, badgeMap: headers['x-service-badge-map'] as string | undefined },
        { did: badge.claims.sub, jti: badge.claims.jti },
        snapshot,
        Math.floor(nowMs / 1000),
      )
      if (result !== null && !result.ok) {
        // The configured mode decides: an invalid chain cannot raise it. EM-OBSERVE logs and proceeds.
        if (record.mode !== 'EM-OBSERVE') return refuse(res, record, result.status, result.code)
        record.chainError = result.code
        logger.warn({ request_id: record.requestId, code: result.code, envelope: result.index, detail: result.detail }, 'delegation chain refused (EM-OBSERVE: request proceeds)')
      } else if (result !== null) {
        chain = result
        record.delegationDepth = result.depth
        record.mode = effectiveMode(record.mode, result.modeMinimums)
      }
    }
    // X-RateLimit-* of an applied rate_limit.apply obligation, on the answer either way (protocol.md §3).
    let rateLimitHeaders: readonly string[] = NO_HEADERS

    // Break-glass stage: a valid, in-scope override skips the PDP; anything else is logged and ignored.
    const breakglass = headers['x-service-breakglass']
    if (typeof breakglass === 'string') {
      if (deps.breakglassKey === null) {
        metrics.breakglassOverrides.labels('not_configured').inc()
        logger.warn({ request_id: record.requestId }, 'break-glass token ignored: no break-glass key configured')
      } else {
        const verdict = verifyBreakglassToken(breakglass, { publicKey: deps.breakglassKey, now: Math.floor(nowMs / 1000), method, path })
        if (verdict.ok) {
          metrics.breakglassOverrides.labels('accepted').inc()
          record.override = true
          record.overrideJti = verdict.claims.jti
          record.decision = 'ALLOW'
          record.decisionId = `breakglass:${verdict.claims.jti}`
          logger.warn(
            { request_id: record.requestId, override_jti: verdict.claims.jti, operator: verdict.claims.sub, reason: verdict.claims.reason },
            'break-glass override accepted',
          )
        } else {
          metrics.breakglassOverrides.labels(verdict.reason).inc()
          logger.warn({ request_id: record.requestId, reason: verdict.reason }, 'break-glass token ignored')
        }
      }
    }

    if (!record.override) {
      if (pdp === null) {
        // Badge-only mode: the verified badge is the whole decision.
        record.decision = 'ALLOW'
      } else {
        const mode = record.mode
        let stale = false
        if (pdp.kind === 'embedded' && snapshot.bundle !== null) {
          const age = nowMs - snapshot.bundle.confirmedAt
          stale = age > staleAfterMs
          if (stale) {
            record.bundleStale = true
            record.bundleAgeMs = age
          }
        }
        let answer: PdpAnswer
        if (stale && mode === 'EM-STRICT') {
          // Nothing a stale bundle decides can be trusted here; the mode table refuses first.
          answer = { outcome: 'UNAVAILABLE', reason: 'bundle_stale' }
        } else {
          const operation = `${method} ${path}`
          const txnId = record.txnId
          const build = (): PdpRequest => ({
            pip_version: 'service.pip.v1',
            subject: { did: badge.claims.sub, badge_jti: badge.claims.jti, ial: badge.claims.ial, trust_level: badge.trustCode },
            action: { operation, capability_class: null },
            resource: { identifier: url },
            context: chain === null
              ? { txn_id: txnId, enforcement_mode: mode }
              : {
                txn_id: txnId,
                enforcement_mode: mode,
                leaf_capability: chain.leaf.capability_class,
                delegation_depth: chain.depth,
                leaf_constraints: chain.leaf.constraints,
                parent_constraints: chain.depth > 1 ? (chain.envelopes[chain.depth - 2]?.constraints ?? null) : null,
              },
            environment: config.workspace === null
              ? { pep_id: pepId, time: new Date(nowMs).toISOString() }
              : { workspace: config.workspace, pep_id: pepId, time: new Date(nowMs).toISOString() },
          })
          const leafId = chain === null ? '' : chain.leaf.envelope_id
          const key = DecisionCache.key(badge.claims.sub, badge.claims.jti, operation, url, mode, leafId)
          // A cached decision must not outlive the badge or the leaf envelope it was made for.
          const notAfterMs = chain === null ? badge.expiresAt * 1000 : Math.min(badge.expiresAt, chain.leaf.expires_at) * 1000
          answer = await decide(key, build, notAfterMs, snapshot, nowMs)
        }
        let obligationResults
        let retryAfter = 0
        let rateLimit: AppliedRateLimit | null = null
        if (answer.outcome === 'ALLOW' && answer.obligations.length > 0) {
          const decisionId = answer.decisionId
          const run = obligations.run(answer.obligations, badge.claims.sub, nowMs, (): EnhancedLogContext => ({
            request_id: record.requestId, txn_id: record.txnId, agent_did: badge.claims.sub, badge_jti: badge.claims.jti,
            method, path, mode, 'service.policy.decision_id': decisionId,
            headers: Object.keys(headers),
          }))
          obligationResults = run.results
          retryAfter = run.retryAfterSeconds
          rateLimit = run.rateLimit
        }
        outcome = enforce({ mode, pdp: answer, bundleStale: stale, obligationResults })
        record.decision = outcome.decision
        record.decisionId = outcome.decisionId
        record.policyErrorCode = outcome.errorCode
        if (outcome.logOnly.length > 0) record.obligationsLogged = outcome.logOnly
        if (rateLimit !== null) rateLimitHeaders = rateLimitHeaderList(rateLimit)
        if (!outcome.forward) {
          const status = outcome.status as number
          const extra: Record<string, string> = {}
          for (let i = 0; i < rateLimitHeaders.length; i += 2) extra[rateLimitHeaders[i] as string] = rateLimitHeaders[i + 1] as string
          if (status === 429) extra['retry-after'] = String(Math.max(1, retryAfter))
          return refuse(res, record, status, outcome.code as string, extra)
        }
      }
    }

    // Forward stage.
    const add = [...badge.identityHeaders, 'x-service-txn', record.txnId]
    const result = await target.upstream.forward(req, res, {
      add,
      strip: STRIP,
      trustedPeer: isTrustedPeer(req.socket.remoteAddress),
      responseHeaders: rateLimitHeaders.length === 0 ? ['x-service-txn', record.txnId] : ['x-service-txn', record.txnId, ...rateLimitHeaders],
    })
    if (result.ok) {
      record.status = result.status
    } else {
      const status = result.code === 'UPSTREAM_TIMEOUT' ? 504 : 502
      refuse(res, record, status, result.code)
    }
  }

  const server = createServer({ keepAlive: true }, (req, res) => {
    void handle(req, res)
  })
  server.on('clientError', clientErrorHandler)
  return {
    server,
    badges,
    decisions,
    dispose() {
      clearInterval(ageTimer)
      requestLog.flush()
    },
  }
}
