/**
 * The gateway (policy enforcement point): a bare `node:http` server whose handler runs the stages of
 * docs/architecture.md in order — badge → chain → break-glass → decide → enforce → forward — and
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
import { effectiveMode, enforce } from '../core/enforcement.js'
import type { VerifiedChain } from '../core/envelope.js'
import type { PdpRequest } from '../core/policy/types.js'
import type { Logger } from '../telemetry/logger.js'
import { isoTimeAt, jsonValue, RequestLogWriter } from '../telemetry/request-log.js'
import type { GatewayMetrics } from '../telemetry/metrics.js'
import { BadgeVerifier, extractBadge, type VerifiedBadge } from './badge-stage.js'
import { ChainStage, type DidKeySource } from './chain-stage.js'
import { DecisionCache } from './decision-cache.js'
import { ObligationHandlers, RateLimiter, type AppliedRateLimit, type EnhancedLogContext } from './obligations.js'
import type { PdpAnswer, PolicyDecisionPoint } from './pdp/pdp.js'
import { sendGatewayError, type RefusalDetails } from './respond.js'
import type { GatewaySnapshot, SnapshotHolder } from './snapshot/snapshot.js'
import { transactionId } from './txn-id.js'
import { canonicalTarget, lowerCasePath, type CanonicalParts } from './ingress/canonical-target.js'
import { clientErrorHandler, connectHandler, hasUnderscoreHeader, inspectRequestHead, STRICT_PARSER, type GatewayHeaders } from './upstream/framing.js'
import type { RouteTable, UnderscoreHeaders } from './upstream/routes.js'
import type { ForwardOptions, ForwardResult, Upstream } from './upstream/upstream.js'

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

/**
 * Headers removed from the client request before forwarding: the identity headers the gateway sets
 * (a client copy must never reach the upstream) and the break-glass token (docs/wire-contract.md §9, §13).
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

/** The answer when the bundle is stale in EM-STRICT: the PDP is not asked (docs/api.md §8). */
const STALE_IN_STRICT: PdpAnswer = Object.freeze({ outcome: 'UNAVAILABLE', reason: 'bundle_stale' })

const STATUS_CLASS = ['1xx', '1xx', '2xx', '3xx', '4xx', '5xx'] as const
const NO_HEADERS: readonly string[] = Object.freeze([])

function rateLimitHeaderList(limit: AppliedRateLimit): string[] {
  return [
    'x-ratelimit-limit', String(limit.limit),
    'x-ratelimit-remaining', String(limit.remaining),
    'x-ratelimit-reset', String(limit.reset),
  ]
}

/**
 * One request in flight: its inputs, what the stages found, and everything the finishing step (log
 * line, metrics, span) needs. One object per request, created with every field so V8 keeps a single
 * shape; it is also the forward options and the context of the upstream's completion callback, so the
 * path through the stages allocates no closures, promises or option objects of its own.
 */
class Exchange implements GatewayHeaders, ForwardOptions, CanonicalParts {
  // --- inputs ---
  readonly req: IncomingMessage
  readonly res: ServerResponse
  readonly started: number
  readonly nowMs: number
  readonly span: Span | null
  /** The request id's counter: the id itself ({@link requestId}) is only formatted when a line needs it. */
  readonly sequence: number
  // --- the gateway's request headers (inspectRequestHead) ---
  authorization: string | undefined = undefined
  badgeHeader: string | undefined = undefined
  txnHeader: string | undefined = undefined
  authority: string | undefined = undefined
  authorityChain: string | undefined = undefined
  badgeMap: string | undefined = undefined
  breakglass: string | undefined = undefined
  // --- what the stages found ---
  snapshot: GatewaySnapshot | null = null
  route: RouteTarget | null = null
  /** The canonical path (canonical-target.ts): every stage reads it, the upstream receives it. */
  path = '/'
  /** `''` or `?` and the query as sent. */
  query = ''
  method = 'GET'
  /** The method policy and break-glass see: HEAD is governed by the rules for GET (RFC 9110 §9.3.2). */
  operationMethod = 'GET'
  badge: VerifiedBadge | null = null
  chain: VerifiedChain | null = null
  // --- forward options (ForwardOptions) ---
  /** The canonical path and query: the resource the decision is about, and what is forwarded. */
  target = '/'
  headersWithUnderscores: UnderscoreHeaders = 'drop'
  add: readonly string[] = NO_HEADERS
  readonly strip: ReadonlySet<string> = STRIP
  trustedPeer = false
  /** X-RateLimit-* of an applied rate_limit.apply obligation, on the answer either way (docs/wire-contract.md §3). */
  responseHeaders: readonly string[] | undefined = undefined
  txnId: string | undefined = undefined
  // --- the record: log line, metrics, span ---
  mode: EnforcementMode
  decision: 'ALLOW' | 'DENY' | 'ALLOW_OBSERVE' | undefined = undefined
  decisionId: string | undefined = undefined
  /** The gateway-made response's code (`BADGE_EXPIRED`, `POLICY_DENIED`, `UPSTREAM_TIMEOUT`…). */
  errorCode: string | undefined = undefined
  /** `service.policy.error_code`: `PDP_UNAVAILABLE` when the PDP could not answer (docs/api.md §6). */
  policyErrorCode: string | undefined = undefined
  /** The PDP's `reason` for a DENY (validated in pdp-answer.ts), logged in every mode. */
  policyReason: string | undefined = undefined
  override = false
  overrideJti: string | undefined = undefined
  bundleStale = false
  bundleAgeMs: number | undefined = undefined
  status = 0
  obligationsLogged: string[] | undefined = undefined
  /** A chain failure that EM-OBSERVE let through (logged, docs/wire-contract.md §10). */
  chainError: string | undefined = undefined
  delegationDepth: number | undefined = undefined
  /** Set once the log line and metrics are written: a second finish would be a bug. */
  finished = false

  constructor(req: IncomingMessage, res: ServerResponse, started: number, nowMs: number, span: Span | null, sequence: number, mode: EnforcementMode) {
    this.req = req
    this.res = res
    this.started = started
    this.nowMs = nowMs
    this.span = span
    this.sequence = sequence
    this.mode = mode
  }

  /** `gw-<pid>-<start time>-<counter>` (pid and start time in base 36): unique per process, cheap to make. */
  get requestId(): string {
    return REQUEST_ID_PREFIX + this.sequence
  }
}

const REQUEST_ID_PREFIX = `gw-${process.pid.toString(36)}-${Date.now().toString(36)}-`
/** The request log line's first field up to the id's counter. */
const REQUEST_ID_KEY = `,"request_id":"${REQUEST_ID_PREFIX}`
/** Shared by every gateway of the process, so request ids stay unique within it. */
let requestSequence = 0

function statusClass(status: number): string {
  return STATUS_CLASS[Math.floor(status / 100)] ?? '5xx'
}

const DECISIONS = [undefined, 'ALLOW', 'DENY', 'ALLOW_OBSERVE'] as const
const MODES: readonly EnforcementMode[] = ['EM-OBSERVE', 'EM-GUARD', 'EM-DELEGATE', 'EM-STRICT']

/** Pending counts of one label combination of service_gateway_requests_total. */
interface RequestCount {
  readonly labels: readonly [string, string, string, string]
  pending: number
}

/**
 * service_gateway_requests_total counted in plain numbers per label combination, drained into
 * prom-client at scrape time. A request without an error code (the common case) finds its counter by
 * an integer key, without building a string.
 */
class RequestCounts {
  readonly #byNumber = new Map<number, RequestCount>()
  readonly #byString = new Map<string, RequestCount>()

  count(decision: (typeof DECISIONS)[number], mode: EnforcementMode, status: number, errorCode: string | undefined): void {
    let entry: RequestCount | undefined
    if (errorCode === undefined) {
      const key = ((DECISIONS.indexOf(decision) * 4 + MODES.indexOf(mode)) * 1000) + status
      entry = this.#byNumber.get(key)
      if (entry === undefined) {
        entry = { labels: [decision ?? 'NONE', mode, statusClass(status), ''], pending: 0 }
        this.#byNumber.set(key, entry)
      }
    } else {
      const key = `${decision ?? 'NONE'}|${mode}|${status}|${errorCode}`
      entry = this.#byString.get(key)
      if (entry === undefined) {
        entry = { labels: [decision ?? 'NONE', mode, statusClass(status), errorCode], pending: 0 }
        this.#byString.set(key, entry)
      }
    }
    entry.pending++
  }

  drainInto(counter: GatewayMetrics['requests']): void {
    for (const map of [this.#byNumber, this.#byString]) {
      for (const entry of map.values()) {
        if (entry.pending === 0) continue
        counter.labels(...entry.labels).inc(entry.pending)
        entry.pending = 0
      }
    }
  }
}

/**
 * The log line's mode, decision and override fields, serialised once per combination (the line is
 * built per request: see writeLine).
 */
const MODE_FIELDS: readonly (readonly (readonly string[])[])[] = MODES.map((mode) => DECISIONS.map((decision) => [false, true].map((override) =>
  `,"mode":"${mode}"` + (decision === undefined ? '' : `,"service.policy.decision":"${decision}"`) + `,"service.policy.override":${override}`)))

function modeFields(mode: EnforcementMode, decision: (typeof DECISIONS)[number], override: boolean): string {
  return MODE_FIELDS[MODES.indexOf(mode)]![DECISIONS.indexOf(decision)]![override ? 1 : 0]!
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
      if (hit) lookups.badgeHit++
      else lookups.badgeMiss++
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
  // The per-request line has only fields set here (never a header or token): see request-log.ts.
  const requestLog = new RequestLogWriter(logger)

  // Per-request counts are kept in plain numbers and handed to prom-client when /metrics is scraped
  // (metrics.beforeCollect): a labelled prom-client inc costs ~250 ns, and a request makes several.
  const lookups = { badgeHit: 0, badgeMiss: 0, decisionHit: 0, decisionMiss: 0 }
  const pdpDuration = metrics.pdpDuration.labels(pdpKind)
  const requestCounts = new RequestCounts()
  const unhook = metrics.beforeCollect(() => {
    requestCounts.drainInto(metrics.requests)
    const { badgeHit, badgeMiss, decisionHit, decisionMiss } = lookups
    if (badgeHit > 0) metrics.cacheLookups.labels('badge', 'hit').inc(badgeHit)
    if (badgeMiss > 0) metrics.cacheLookups.labels('badge', 'miss').inc(badgeMiss)
    if (decisionHit > 0) metrics.cacheLookups.labels('decision', 'hit').inc(decisionHit)
    if (decisionMiss > 0) metrics.cacheLookups.labels('decision', 'miss').inc(decisionMiss)
    lookups.badgeHit = lookups.badgeMiss = lookups.decisionHit = lookups.decisionMiss = 0
    metrics.cacheEntries.labels('badge').set(badges.size)
    metrics.cacheEntries.labels('decision').set(decisions.size)
  })
  const countRequest = (ex: Exchange): void => requestCounts.count(ex.decision, ex.mode, ex.status, ex.errorCode)

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

  const lineEnding = RequestLogWriter.ending('gateway request')

  // --- finishing: metrics, the one log line, the span -------------------------------------------------

  function finish(ex: Exchange): void {
    if (ex.finished) return
    ex.finished = true
    const latencyMs = performance.now() - ex.started
    countRequest(ex)
    metrics.requestDuration.observe(latencyMs / 1000)
    if (requestLog.enabled) writeLine(ex, latencyMs)
    if (ex.span !== null) finishSpan(ex, ex.span)
  }

  /**
   * The request's log line, serialised field by field (request-log.ts says why). Only strings that
   * can carry arbitrary text are escaped (jsonValue); the others cannot need it: transaction ids are
   * generated or checked against a safe pattern, methods come from node's fixed list, codes, modes and
   * decisions are constants of this code base, and the badge's fields were serialised when it was
   * verified. Each avoided escape and concatenation counts: the line is a tenth of the gateway's work.
   */
  function writeLine(ex: Exchange, latencyMs: number): void {
    let line = REQUEST_ID_KEY + ex.sequence + (ex.txnId === undefined ? '"' : '","txn_id":"' + ex.txnId + '"')
    if (ex.badge !== null) line += ex.badge.logFields
    line += ',"method":"' + ex.method + '","status":' + ex.status + modeFields(ex.mode, ex.decision, ex.override)
    if (ex.decisionId !== undefined) line += ',"service.policy.decision_id":' + jsonValue(ex.decisionId)
    // A request that was not simply allowed says what was asked and, when the PDP gave one, why not.
    if (ex.decision === 'DENY' || ex.decision === 'ALLOW_OBSERVE') {
      line += ',"operation":' + jsonValue(ex.operationMethod + ' ' + ex.path)
      if (ex.policyReason !== undefined) line += ',"service.policy.reason":' + jsonValue(ex.policyReason)
    }
    if (ex.policyErrorCode !== undefined) line += ',"service.policy.error_code":' + jsonValue(ex.policyErrorCode)
    if (ex.errorCode !== undefined) line += ',"error_code":' + jsonValue(ex.errorCode)
    line += ',"latency_ms":' + jsonValue(Math.round(latencyMs * 1000) / 1000)
    if (ex.overrideJti !== undefined) line += ',"override_jti":' + jsonValue(ex.overrideJti)
    if (ex.bundleStale) line += ',"staleness.bundle_stale":true,"staleness.bundle_age_ms":' + jsonValue(ex.bundleAgeMs ?? null)
    if (ex.obligationsLogged !== undefined) line += ',"obligations_not_met":' + jsonValue(ex.obligationsLogged)
    if (ex.delegationDepth !== undefined) line += ',"delegation_depth":' + ex.delegationDepth
    if (ex.chainError !== undefined) line += ',"chain_error":' + jsonValue(ex.chainError)
    requestLog.writeFragment(line, lineEnding)
  }

  function finishSpan(ex: Exchange, span: Span): void {
    span.setAttributes({
      'http.request.method': ex.method,
      'http.response.status_code': ex.status,
      'service.policy.decision': ex.decision ?? '',
      'service.policy.decision_id': ex.decisionId ?? '',
      'service.policy.error_code': ex.policyErrorCode ?? '',
      'service.error_code': ex.errorCode ?? '',
      'service.policy.override': ex.override,
      'service.enforcement_mode': ex.mode,
      'staleness.bundle_stale': ex.bundleStale,
      ...(ex.bundleStale && ex.bundleAgeMs !== undefined ? { 'staleness.bundle_age_ms': ex.bundleAgeMs } : {}),
    })
    span.end()
  }

  /** Answers with a gateway-made error and finishes the request. */
  function refuse(ex: Exchange, status: number, code: string, headers?: Record<string, string>, details?: RefusalDetails): void {
    ex.status = status
    ex.errorCode = code
    const extra: Record<string, string> = { ...headers }
    if (ex.txnId !== undefined) extra['x-service-txn'] = ex.txnId
    if (ex.decisionId !== undefined) extra['x-service-decision-id'] = ex.decisionId
    sendGatewayError(ex.res, status, code, extra, details)
    finish(ex)
  }

  /** A bug, never an expected outcome: fail closed, log the fact without internals in the response. */
  function fail(ex: Exchange, error: unknown): void {
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
    const ex = new Exchange(
      req, res, started, now(),
      tracer === null ? null : tracer.startSpan('gateway.request'),
      ++requestSequence,
      config.enforcementMode,
    )
    try {
      admit(ex)
    } catch (error) {
      fail(ex, error)
    }
  }

  /** Readiness, framing, route, transaction id and the badge (docs/wire-contract.md §9, §13). */
  function admit(ex: Exchange): void {
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

    // Badge stage: a missing or invalid badge is 401 in every mode, EM-OBSERVE included (docs/wire-contract.md §13).
    const token = extractBadge(ex.authorization, ex.badgeHeader)
    if (token === 'missing') return refuse(ex, 401, 'BADGE_MISSING')
    if (token === 'conflict') return refuse(ex, 401, 'BADGE_CONFLICT')
    const badge = badges.verify(token, ex.snapshot, Math.floor(ex.nowMs / 1000))
    if (typeof badge === 'string') return refuse(ex, 401, badge)
    ex.badge = badge
    ex.add = badge.identityHeaders

    // Chain stage: envelopes are verified before anything else is decided (docs/wire-contract.md §10).
    if (ex.authority === undefined && ex.authorityChain === undefined) return authorize(ex)
    chains.verify(
      { authority: ex.authority, chain: ex.authorityChain, badgeMap: ex.badgeMap },
      { did: badge.claims.sub, jti: badge.claims.jti },
      ex.snapshot,
      Math.floor(ex.nowMs / 1000),
    ).then((result) => chainVerified(ex, result)).catch((error: unknown) => fail(ex, error))
  }

  function chainVerified(ex: Exchange, result: Awaited<ReturnType<ChainStage['verify']>>): void {
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
  function authorize(ex: Exchange): void {
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
      lookups.decisionHit++
      return decided(ex, cached)
    }
    lookups.decisionMiss++
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

  function pdpAnswered(ex: Exchange, answer: PdpAnswer, key: string, notAfterMs: number, asked: number): void {
    pdpDuration.observe((performance.now() - asked) / 1000)
    if (answer.outcome === 'UNAVAILABLE') metrics.pdpUnavailable.labels(pdpKind, answer.reason).inc()
    else decisions.set(key, answer, ex.nowMs, notAfterMs)
  }

  /** The PDP request of docs/api.md §2.12 (built only on a decision-cache miss). */
  function pdpRequest(ex: Exchange, operation: string, badge: VerifiedBadge, chain: VerifiedChain | null): PdpRequest {
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

  function breakglassStage(ex: Exchange, token: string): void {
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

  /** Obligations and the mode table (docs/api.md §8), then forward or refuse. */
  function decided(ex: Exchange, answer: PdpAnswer): void {
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
  function forward(ex: Exchange): void {
    ex.trustedPeer = isTrustedPeer(ex.req.socket.remoteAddress)
    ;(ex.route as RouteTarget).upstream.forwardTo(ex.req, ex.res, ex, ex, forwarded)
  }

  function forwarded(ex: Exchange, result: ForwardResult): void {
    try {
      if (result.ok) {
        ex.status = result.status
        finish(ex)
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
      requestLog.flush()
    },
    dispose() {
      clearInterval(ageTimer)
      requestLog.flush()
      unhook()
    },
  }
}
