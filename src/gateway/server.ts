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
import type { Tracer } from '@opentelemetry/api'
import ipaddr from 'ipaddr.js'
import type { Config, EnforcementMode } from '../config/index.js'
import { verifyBreakglassToken } from '../core/breakglass.js'
import { effectiveMode, enforce } from '../core/enforcement.js'
import type { VerifiedChain } from '../core/envelope.js'
import type { PdpRequest } from '../core/policy/types.js'
import type { Logger } from '../telemetry/logger.js'
import { isoTimeAt } from '../telemetry/request-log.js'
import type { GatewayMetrics } from '../telemetry/metrics.js'
import { BadgeVerifier, extractBadge, type VerifiedBadge } from './badge-stage.js'
import { ChainStage, type DidKeySource } from './chain-stage.js'
import { DecisionCache } from './decision-cache.js'
import { ObligationHandlers, RateLimiter, type AppliedRateLimit, type EnhancedLogContext } from './obligations.js'
import type { PdpAnswer, PolicyDecisionPoint } from './pdp/pdp.js'
import { sendGatewayError, type RefusalDetails } from './respond.js'
import type { GatewaySnapshot, SnapshotHolder } from './snapshot/snapshot.js'
import { transactionId } from './txn-id.js'
import { canonicalTarget, lowerCasePath } from './ingress/canonical-target.js'
import { clientErrorHandler, connectHandler, hasUnderscoreHeader, inspectRequestHead, STRICT_PARSER } from './ingress/framing.js'
import type { RouteTable, UnderscoreHeaders } from './ingress/routes.js'
import { NO_HEADERS, RequestScope } from './request-scope.js'
import { RequestTelemetry } from './request-telemetry.js'
import type { ForwardResult, Upstream } from './upstream/upstream.js'

/** Where a route prefix forwards, and how: its mode (when the routes file names one), path case, `_` headers. */
export interface RouteTarget {
  readonly upstream: Upstream
  readonly mode: EnforcementMode | null
  /** The upstream ignores the case of paths: the canonical path is lower-cased on this route. */
  readonly caseInsensitive?: boolean
  readonly headersWithUnderscores?: UnderscoreHeaders
  /** 403 `POLICY_DENIED` bodies leave out the PDP's reason (the log line keeps it). */
  readonly hideDenyReason?: boolean
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
  /** Writes out queued request log lines now (they are batched for a few milliseconds under load). */
  flushLog(): void
  /** Stops the gateway's timers and writes out queued log lines; the server itself is closed by the owner. */
  dispose(): void
}

/** The answer when the bundle is stale in EM-STRICT: the PDP is not asked (spec §8). */
const STALE_IN_STRICT: PdpAnswer = Object.freeze({ outcome: 'UNAVAILABLE', reason: 'bundle_stale' })

function rateLimitHeaderList(limit: AppliedRateLimit): string[] {
  return [
    'x-ratelimit-limit', String(limit.limit),
    'x-ratelimit-remaining', String(limit.remaining),
    'x-ratelimit-reset', String(limit.reset),
  ]
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
    onLookup: (hit) => {
      if (hit) telemetry.badgeHits++
      else telemetry.badgeMisses++
    },
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
  const telemetry = new RequestTelemetry(logger, metrics, pdpKind)
  const unhook = telemetry.reportOnCollect(badges, decisions)

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

  const stopBundleAge = telemetry.watchBundleAge(holder, pdp, staleAfterMs, now)

  /** Answers with a gateway-made error and finishes the request. */
  function refuse(ex: RequestScope, status: number, code: string, headers?: Record<string, string>, details?: RefusalDetails): void {
    ex.status = status
    ex.errorCode = code
    const extra: Record<string, string> = { ...headers }
    if (ex.txnId !== undefined) extra['x-service-txn'] = ex.txnId
    if (ex.decisionId !== undefined) extra['x-service-decision-id'] = ex.decisionId
    sendGatewayError(ex.res, status, code, extra, details)
    telemetry.finish(ex)
  }

  /** A bug, never an expected outcome: fail closed, log the fact without internals in the response. */
  function fail(ex: RequestScope, error: unknown): void {
    logger.error({ err: error, request_id: ex.requestId }, 'gateway request failed')
    if (ex.finished) return
    refuse(ex, 500, 'GATEWAY_ERROR')
  }

  // --- the stages -----------------------------------------------------------------------------------
  //
  // Each stage runs synchronously and calls the next; only the chain stage (did:web resolution) and a
  // remote PDP can wait, and only they continue through a promise. A request that needs neither (the
  // common case: a cached badge and the embedded PDP or the decision cache) runs from the request event
  // to the upstream dispatch in one synchronous call, without the promise and microtask hops of an
  // async function per stage (measured: ~4 µs of the gateway's per-request CPU went to them).

  function handle(req: IncomingMessage, res: ServerResponse): void {
    const started = performance.now()
    const ex = new RequestScope(req, res, started, now(), tracer === null ? null : tracer.startSpan('gateway.request'), config.enforcementMode)
    try {
      admit(ex)
    } catch (error) {
      fail(ex, error)
    }
  }

  /** Readiness, framing, route, transaction id and the badge (protocol.md §9, §13). */
  function admit(ex: RequestScope): void {
    if (!holder.ready) return refuse(ex, 503, 'GATEWAY_NOT_READY')
    ex.snapshot = holder.current
    const req = ex.req
    ex.method = req.method ?? 'GET'

    const framing = inspectRequestHead(req, ex, true)
    if (framing !== null) {
      logger.warn({ request_id: ex.requestId, reason: framing }, 'gateway refused request framing')
      ex.res.shouldKeepAlive = false
      return refuse(ex, 400, 'REQUEST_MALFORMED')
    }

    // One canonical target, computed before anything reads it, is decided on and forwarded.
    const rawTarget = req.url ?? '/'
    const targetProblem = canonicalTarget(rawTarget, ex)
    if (targetProblem !== null) {
      // `OPTIONS *` is well-formed but names no path, so no route can serve it.
      if (rawTarget === '*' && ex.method === 'OPTIONS') return refuse(ex, 404, 'ROUTE_NOT_FOUND')
      logger.warn({ request_id: ex.requestId, reason: targetProblem }, 'gateway refused request target')
      return refuse(ex, 400, 'REQUEST_MALFORMED')
    }
    const route = routes.match(ex.path)
    if (route === null) return refuse(ex, 404, 'ROUTE_NOT_FOUND')
    const target = route.value
    ex.route = target
    if (target.caseInsensitive === true) ex.path = lowerCasePath(ex.path)
    ex.target = ex.query === '' ? ex.path : ex.path + ex.query
    ex.operationMethod = ex.method === 'HEAD' ? 'GET' : ex.method
    if (target.headersWithUnderscores !== undefined) {
      ex.headersWithUnderscores = target.headersWithUnderscores
      if (target.headersWithUnderscores === 'reject' && hasUnderscoreHeader(req.rawHeaders)) {
        logger.warn({ request_id: ex.requestId, reason: 'header name with "_"' }, 'gateway refused request headers')
        return refuse(ex, 400, 'REQUEST_MALFORMED')
      }
    }
    ex.mode = target.mode ?? config.enforcementMode
    ex.txnId = transactionId(ex.txnHeader, ex.nowMs)

    // Badge stage: a missing or invalid badge is 401 in every mode, EM-OBSERVE included (protocol.md §13).
    const token = extractBadge(ex.authorization, ex.badgeHeader)
    if (token === 'missing') return refuse(ex, 401, 'BADGE_MISSING')
    if (token === 'conflict') return refuse(ex, 401, 'BADGE_CONFLICT')
    const badge = badges.verify(token, ex.snapshot, Math.floor(ex.nowMs / 1000))
    if (typeof badge === 'string') return refuse(ex, 401, badge)
    ex.badge = badge
    ex.add = badge.identityHeaders

    // Chain stage: envelopes are verified before anything else is decided (protocol.md §10).
    if (ex.authority === undefined && ex.authorityChain === undefined) return authorize(ex)
    chains.verify(
      { authority: ex.authority, chain: ex.authorityChain, badgeMap: ex.badgeMap },
      { did: badge.claims.sub, jti: badge.claims.jti },
      ex.snapshot,
      Math.floor(ex.nowMs / 1000),
    ).then((result) => chainVerified(ex, result)).catch((error: unknown) => fail(ex, error))
  }

  function chainVerified(ex: RequestScope, result: Awaited<ReturnType<ChainStage['verify']>>): void {
    if (result !== null && !result.ok) {
      // The configured mode decides: an invalid chain cannot raise it. EM-OBSERVE logs and proceeds.
      if (ex.mode !== 'EM-OBSERVE') return refuse(ex, result.status, result.code)
      ex.chainError = result.code
      logger.warn({ request_id: ex.requestId, code: result.code, envelope: result.index, detail: result.detail }, 'delegation chain refused (EM-OBSERVE: request proceeds)')
    } else if (result !== null) {
      ex.chain = result
      ex.delegationDepth = result.depth
      ex.mode = effectiveMode(ex.mode, result.modeMinimums)
    }
    authorize(ex)
  }

  /** Break-glass, then the PDP (through the decision cache), or the badge alone in badge-only mode. */
  function authorize(ex: RequestScope): void {
    // Break-glass stage: a valid, in-scope override skips the PDP; anything else is logged and ignored.
    if (ex.breakglass !== undefined) breakglassStage(ex, ex.breakglass)
    if (ex.override) return forward(ex)
    // Badge-only mode: the verified badge is the whole decision.
    if (pdp === null) {
      ex.decision = 'ALLOW'
      return forward(ex)
    }
    const snapshot = ex.snapshot as GatewaySnapshot
    const badge = ex.badge as VerifiedBadge
    const chain = ex.chain
    let stale = false
    if (pdp.kind === 'embedded' && snapshot.bundle !== null) {
      const age = ex.nowMs - snapshot.bundle.confirmedAt
      stale = age > staleAfterMs
      if (stale) {
        ex.bundleStale = true
        ex.bundleAgeMs = age
      }
    }
    // Nothing a stale bundle decides can be trusted in EM-STRICT; the mode table refuses first.
    if (stale && ex.mode === 'EM-STRICT') return decided(ex, STALE_IN_STRICT)

    const leafId = chain === null ? '' : chain.leaf.envelope_id
    const key = DecisionCache.key(badge.decisionSubject, ex.operationMethod, ex.target, ex.mode, leafId)
    const cached = decisions.get(key, ex.nowMs)
    if (cached !== undefined) {
      telemetry.decisionHits++
      return decided(ex, cached)
    }
    telemetry.decisionMisses++
    // A cached decision must not outlive the badge or the leaf envelope it was made for.
    const notAfterMs = chain === null ? badge.expiresAt * 1000 : Math.min(badge.expiresAt, chain.leaf.expires_at) * 1000
    const asked = performance.now()
    const answer = pdp.decide(pdpRequest(ex, ex.operationMethod + ' ' + ex.path, badge, chain), snapshot)
    if (answer instanceof Promise) {
      answer.then((settled) => {
        pdpAnswered(ex, settled, key, notAfterMs, asked)
        decided(ex, settled)
      }).catch((error: unknown) => fail(ex, error))
      return
    }
    pdpAnswered(ex, answer, key, notAfterMs, asked)
    decided(ex, answer)
  }

  function pdpAnswered(ex: RequestScope, answer: PdpAnswer, key: string, notAfterMs: number, asked: number): void {
    telemetry.pdpDuration.observe((performance.now() - asked) / 1000)
    if (answer.outcome === 'UNAVAILABLE') metrics.pdpUnavailable.labels(pdpKind, answer.reason).inc()
    else decisions.set(key, answer, ex.nowMs, notAfterMs)
  }

  /** The PDP request of spec §2.12 (built only on a decision-cache miss). */
  function pdpRequest(ex: RequestScope, operation: string, badge: VerifiedBadge, chain: VerifiedChain | null): PdpRequest {
    const time = isoTimeAt(ex.nowMs)
    return {
      pip_version: 'service.pip.v1',
      subject: { did: badge.claims.sub, badge_jti: badge.claims.jti, ial: badge.claims.ial, trust_level: badge.trustCode },
      action: { operation, capability_class: null },
      resource: ex.route?.caseInsensitive === true ? { identifier: ex.target, case_insensitive: true } : { identifier: ex.target },
      context: chain === null
        ? { txn_id: ex.txnId as string, enforcement_mode: ex.mode }
        : {
          txn_id: ex.txnId as string,
          enforcement_mode: ex.mode,
          leaf_capability: chain.leaf.capability_class,
          delegation_depth: chain.depth,
          leaf_constraints: chain.leaf.constraints,
          parent_constraints: chain.depth > 1 ? (chain.envelopes[chain.depth - 2]?.constraints ?? null) : null,
        },
      environment: config.workspace === null
        ? { pep_id: pepId, time }
        : { workspace: config.workspace, pep_id: pepId, time },
    }
  }

  function breakglassStage(ex: RequestScope, token: string): void {
    if (deps.breakglassKey === null) {
      metrics.breakglassOverrides.labels('not_configured').inc()
      logger.warn({ request_id: ex.requestId }, 'break-glass token ignored: no break-glass key configured')
      return
    }
    const verdict = verifyBreakglassToken(token, {
      publicKey: deps.breakglassKey,
      now: Math.floor(ex.nowMs / 1000),
      method: ex.operationMethod,
      path: ex.path,
      caseInsensitive: ex.route?.caseInsensitive === true,
    })
    if (!verdict.ok) {
      metrics.breakglassOverrides.labels(verdict.reason).inc()
      logger.warn({ request_id: ex.requestId, reason: verdict.reason }, 'break-glass token ignored')
      return
    }
    metrics.breakglassOverrides.labels('accepted').inc()
    ex.override = true
    ex.overrideJti = verdict.claims.jti
    ex.decision = 'ALLOW'
    ex.decisionId = `breakglass:${verdict.claims.jti}`
    logger.warn(
      { request_id: ex.requestId, override_jti: verdict.claims.jti, operator: verdict.claims.sub, reason: verdict.claims.reason },
      'break-glass override accepted',
    )
  }

  /** Obligations and the mode table (spec §8), then forward or refuse. */
  function decided(ex: RequestScope, answer: PdpAnswer): void {
    const mode = ex.mode
    let obligationResults
    let retryAfter = 0
    let rateLimit: AppliedRateLimit | null = null
    if (answer.outcome === 'ALLOW' && answer.obligations.length > 0) {
      const decisionId = answer.decisionId
      // Only a verified badge reaches a decision.
      const { sub: did, jti } = (ex.badge as VerifiedBadge).claims
      const run = obligations.run(answer.obligations, did, ex.nowMs, (): EnhancedLogContext => ({
        request_id: ex.requestId, txn_id: ex.txnId, agent_did: did, badge_jti: jti,
        method: ex.method, path: ex.path, mode, 'service.policy.decision_id': decisionId,
        headers: Object.keys(ex.req.headers),
      }))
      obligationResults = run.results
      retryAfter = run.retryAfterSeconds
      rateLimit = run.rateLimit
    }
    const outcome = enforce({ mode, pdp: answer, bundleStale: ex.bundleStale, obligationResults })
    ex.decision = outcome.decision
    ex.decisionId = outcome.decisionId
    ex.policyErrorCode = outcome.errorCode
    if (answer.outcome === 'DENY') ex.policyReason = answer.reason
    if (outcome.logOnly.length > 0) ex.obligationsLogged = outcome.logOnly
    if (rateLimit !== null) ex.responseHeaders = rateLimitHeaderList(rateLimit)
    if (outcome.forward) return forward(ex)
    const status = outcome.status as number
    const extra: Record<string, string> = {}
    const limits = ex.responseHeaders ?? NO_HEADERS
    for (let i = 0; i < limits.length; i += 2) extra[limits[i] as string] = limits[i + 1] as string
    if (status === 429) extra['retry-after'] = String(Math.max(1, retryAfter))
    // A denial tells the caller which decision to ask about and, unless the route hides it, why.
    const details = outcome.code === 'POLICY_DENIED'
      ? { decision_id: ex.decisionId, reason: ex.route?.hideDenyReason === true ? undefined : ex.policyReason }
      : undefined
    refuse(ex, status, outcome.code as string, extra, details)
  }

  /** Forward stage: the upstream answers the client directly; forwarded() finishes the request. */
  function forward(ex: RequestScope): void {
    ex.trustedPeer = isTrustedPeer(ex.req.socket.remoteAddress)
    ;(ex.route as RouteTarget).upstream.forwardTo(ex.req, ex.res, ex, ex, forwarded)
  }

  function forwarded(ex: RequestScope, result: ForwardResult): void {
    try {
      if (result.ok) {
        ex.status = result.status
        telemetry.finish(ex)
      } else {
        refuse(ex, result.code === 'UPSTREAM_TIMEOUT' ? 504 : 502, result.code)
      }
    } catch (error) {
      fail(ex, error)
    }
  }

  // STRICT_PARSER: llhttp's header checks hold whatever the process flags say (framing.ts relies on it).
  // maxHeaderSize: node's 16 KiB default is too small for the delegation headers of a deep chain.
  const server = createServer({ keepAlive: true, maxHeaderSize: config.maxHeadBytes, ...STRICT_PARSER }, handle)
  server.on('clientError', clientErrorHandler)
  server.on('connect', connectHandler)
  return {
    server,
    badges,
    decisions,
    flushLog() {
      telemetry.flush()
    },
    dispose() {
      stopBundleAge()
      telemetry.flush()
      unhook()
    },
  }
}
