// A finished request's log line, counts and span; counts are plain numbers handed to prom-client at scrape
// time (docs/performance.md, "Hot-path choices").
import type { Attributes, Span } from '@opentelemetry/api'
import { ENFORCEMENT_MODES, type EnforcementMode } from '../core/enforcement-mode.js'
import { gatewayError, type GatewayErrorCode } from '../core/gateway-errors.js'
import type { HistogramSeries } from '../telemetry/batched-histogram.js'
import type { DecisionFeed } from '../telemetry/decision-feed.js'
import type { Logger } from '../telemetry/logger.js'
import type { GatewayMetrics } from '../telemetry/metrics.js'
import { jsonValue, RequestLogWriter } from '../telemetry/request-log.js'
import type { DecisionCache } from './decision-cache.js'
import type { A2aCall } from '../core/a2a-methods.js'
import type { McpMessageInfo } from './mcp/methods.js'
import type { PolicyDecisionPoint } from './pdp/pdp.js'
import { authorityBadgeJti, REQUEST_ID_PREFIX, type RequestDecision, type RequestScope } from './request-scope.js'
import type { SnapshotHolder } from './snapshot/snapshot.js'
import type { BadgeVerifier } from './identity/badge.js'

const STATUS_CLASS = ['1xx', '1xx', '2xx', '3xx', '4xx', '5xx'] as const
const DECISIONS: readonly RequestDecision[] = [undefined, 'ALLOW', 'DENY', 'ALLOW_OBSERVE']

const REQUEST_ID_KEY = `,"request_id":"${REQUEST_ID_PREFIX}`

function statusClass(status: number): string {
  return STATUS_CLASS[Math.floor(status / 100)] ?? '5xx'
}

interface RequestCount {
  readonly labels: readonly [string, string, string, string]
  pending: number
}

/** A request without an error code (the common case) finds its counter by an integer key, building no string. */
export class RequestCounts {
  readonly #byNumber = new Map<number, RequestCount>()
  readonly #byString = new Map<string, RequestCount>()

  count(decision: RequestDecision, mode: EnforcementMode, status: number, errorCode: GatewayErrorCode | undefined): void {
    let entry: RequestCount | undefined
    if (errorCode === undefined) {
      const key = ((DECISIONS.indexOf(decision) * 4 + ENFORCEMENT_MODES.indexOf(mode)) * 1000) + status
      entry = this.#byNumber.get(key)
      if (entry === undefined) {
        entry = { labels: [decision ?? 'NONE', mode, statusClass(status), ''], pending: 0 }
        this.#byNumber.set(key, entry)
      }
    } else {
      const key = `${decision ?? 'NONE'}|${mode}|${status}|${errorCode}`
      entry = this.#byString.get(key)
      if (entry === undefined) {
        entry = { labels: [decision ?? 'NONE', mode, statusClass(status), gatewayError(errorCode).metricLabel], pending: 0 }
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

/** Serialised once per combination rather than per request. */
const MODE_FIELDS: readonly (readonly (readonly string[])[])[] = ENFORCEMENT_MODES.map((mode) => DECISIONS.map((decision) => [false, true].map((override) =>
  `,"mode":"${mode}"` + (decision === undefined ? '' : `,"service.policy.decision":"${decision}"`) + `,"service.policy.override":${override}`)))

function modeFields(mode: EnforcementMode, decision: RequestDecision, override: boolean): string {
  return MODE_FIELDS[ENFORCEMENT_MODES.indexOf(mode)]![DECISIONS.indexOf(decision)]![override ? 1 : 0]!
}

/**
 * Every string that can carry arbitrary text is escaped (jsonValue); the others cannot need it: transaction ids
 * are generated or checked against a safe pattern, methods come from node's fixed list, codes, modes and
 * decisions are constants here, and the badge's fields were serialised when it was verified.
 */
export function requestLogFields(scope: RequestScope, latencyMs: number): string {
  let line = REQUEST_ID_KEY + scope.sequence + (scope.txnId === undefined ? '"' : '","txn_id":"' + scope.txnId + '"')
  if (scope.badge !== null) line += scope.badge.logFields
  line += ',"method":"' + scope.method + '","status":' + scope.status + modeFields(scope.mode, scope.decision, scope.override)
  if (scope.decisionId !== undefined) line += ',"service.policy.decision_id":' + jsonValue(scope.decisionId)
  // A request that was not simply allowed says what was asked and, when the PDP gave one, why not.
  if (scope.decision === 'DENY' || scope.decision === 'ALLOW_OBSERVE') {
    line += ',"operation":' + jsonValue(scope.operationMethod + ' ' + scope.path)
    if (scope.policyReason !== undefined) line += ',"service.policy.reason":' + jsonValue(scope.policyReason)
  }
  if (scope.policyErrorCode !== undefined) line += ',"service.policy.error_code":' + jsonValue(scope.policyErrorCode)
  if (scope.errorCode !== undefined) line += ',"error_code":' + jsonValue(scope.errorCode)
  line += ',"latency_ms":' + jsonValue(Math.round(latencyMs * 1000) / 1000)
  if (scope.overrideJti !== undefined) line += ',"override_jti":' + jsonValue(scope.overrideJti)
  if (scope.bundleStale) line += ',"staleness.bundle_stale":true,"staleness.bundle_age_ms":' + jsonValue(scope.bundleAgeMs ?? null)
  if (scope.obligationsLogged !== undefined) line += ',"obligations_not_met":' + jsonValue(scope.obligationsLogged)
  if (scope.delegationDepth !== undefined) line += ',"delegation_depth":' + scope.delegationDepth
  if (scope.chainError !== undefined) line += ',"chain_error":' + jsonValue(scope.chainError)
  if (scope.check !== null) line += ',"check_proxy":"' + scope.check.proxy + '"'
  if (scope.question !== null || scope.mcp !== null) line += mcpLogFields(scope)
  else if (scope.a2a?.call != null) line += a2aLogFields(scope.a2a.call, scope.a2a.answerIds[0])
  return line
}

/** The A2A call in OpenTelemetry-style names; the task id only here, never a metric label. */
function a2aLogFields(call: A2aCall, requestId: string | number | undefined): string {
  let line = ',"a2a.method.name":' + jsonValue(call.method) + ',"a2a.protocol.version":"' + call.version + '","a2a.operation":"' + call.operation + '"'
  if (call.taskId !== undefined) line += ',"a2a.task.id":' + jsonValue(call.taskId)
  if (call.contextId !== undefined) line += ',"a2a.context.id":' + jsonValue(call.contextId)
  if (call.skill !== undefined) line += ',"a2a.skill":' + jsonValue(call.skill)
  if (requestId !== undefined) line += ',"jsonrpc.request.id":' + jsonValue(String(requestId))
  return line
}

/** The OpenTelemetry names of MCP's semantic conventions; the arguments of a call are never logged. */
function mcpLogFields(scope: RequestScope): string {
  const question = scope.question
  const message = question?.message ?? null
  let line = ''
  if (message !== null) line += ',"mcp.method.name":' + jsonValue(question!.method)
  if (question?.tool !== undefined) line += ',"gen_ai.tool.name":' + jsonValue(question.tool)
  const sessionId = mcpSessionId(scope)
  if (sessionId !== undefined) line += ',"mcp.session.id":' + jsonValue(sessionId)
  if (message !== null && message.kind !== 'notification' && message.id !== null) line += ',"jsonrpc.request.id":' + jsonValue(String(message.id))
  if (scope.mcp?.batch === true) line += ',"mcp.batch_size":' + scope.mcp.messages.length
  const removed = scope.mcp?.listFilter?.removed
  if (removed !== undefined) {
    const total = removed.tools + removed.prompts + removed.resources + removed.resourceTemplates
    // Every answer goes through the filter; the count is news only for a list request or when it hid something.
    if (total > 0 || scope.mcp!.messages.some((info) => info.list !== null)) line += ',"mcp.list.removed":' + total
  }
  return line
}

function mcpSessionId(scope: RequestScope): string | undefined {
  if (scope.mcp !== null) return scope.mcp.sessionId
  const value = scope.req.headers['mcp-session-id']
  return typeof value === 'string' ? value : undefined
}

function finishSpan(scope: RequestScope, span: Span): void {
  span.setAttributes({
    'http.request.method': scope.method,
    'http.response.status_code': scope.status,
    'service.policy.decision': scope.decision ?? '',
    'service.policy.decision_id': scope.decisionId ?? '',
    'service.policy.error_code': scope.policyErrorCode ?? '',
    'service.error_code': scope.errorCode ?? '',
    'service.policy.override': scope.override,
    'service.enforcement_mode': scope.mode,
    'staleness.bundle_stale': scope.bundleStale,
    ...(scope.bundleStale && scope.bundleAgeMs !== undefined ? { 'staleness.bundle_age_ms': scope.bundleAgeMs } : {}),
    ...(scope.question === null ? {} : mcpSpanAttributes(scope)),
    ...(scope.a2a?.call == null ? {} : a2aSpanAttributes(scope.a2a.call)),
  })
  span.end()
}

function mcpSpanAttributes(scope: RequestScope): Attributes {
  const question = scope.question!
  const message = question.message
  const attributes: Attributes = {}
  if (message !== null) attributes['mcp.method.name'] = question.method
  if (question.tool !== undefined) attributes['gen_ai.tool.name'] = question.tool
  const sessionId = mcpSessionId(scope)
  if (sessionId !== undefined) attributes['mcp.session.id'] = sessionId
  if (message !== null && message.kind !== 'notification' && message.id !== null) attributes['jsonrpc.request.id'] = String(message.id)
  return attributes
}

function a2aSpanAttributes(call: A2aCall): Attributes {
  return { 'a2a.method.name': call.method, 'a2a.protocol.version': call.version, 'a2a.operation': call.operation }
}

/**
 * Which requests the decision feed keeps (docs/console.md, "Live decisions"): every request that reached a
 * decision (a PDP's, the badge's in badge-only mode, or a break-glass override), and every request the gateway
 * refused after the badge was verified (a refused chain, an unavailable PDP, a stale bundle in EM-STRICT, a
 * framing or body refusal). A request without a verified badge names no agent, so no organization could
 * see it: it is counted and logged only.
 */
export function feedsDecisions(scope: RequestScope): boolean {
  return scope.decision !== undefined || (scope.badge !== null && scope.errorCode !== undefined)
}

/**
 * Paths longer than this are kept as a copy of their start, and such a request's PDP request is not kept: a
 * record holds its strings for as long as it is in the buffer, so a caller sending heads of
 * SERVICE_GATEWAY_MAX_HEAD_BYTES must not make the buffer hold that much per event.
 */
export const FEED_MAX_PATH = 2048

/** A flat copy (a slice would keep the whole head alive); only for the rare over-long path. */
function shortPath(path: string): string {
  return Buffer.from(path.slice(0, FEED_MAX_PATH), 'latin1').toString('latin1') + '…'
}

/** The one object a finished request adds to the feed: references to what the scope already holds. */
function recordOf(scope: RequestScope): Parameters<DecisionFeed['record']>[0] {
  const question = scope.question
  const long = scope.path.length > FEED_MAX_PATH
  const keepRequest = !long && (scope.decision === 'DENY' || scope.decision === 'ALLOW_OBSERVE')
  return {
    seq: 0,
    timeMs: scope.nowMs,
    requestIdPrefix: REQUEST_ID_PREFIX,
    requestSeq: scope.sequence,
    txnId: scope.txnId,
    agentDid: scope.badge?.claims.sub,
    badgeJti: authorityBadgeJti(scope),
    method: scope.method,
    path: long ? shortPath(scope.path) : scope.path,
    operationMethod: scope.operationMethod,
    mcpMethod: question === null || question.message === null ? undefined : question.method,
    tool: question?.tool,
    a2aOperation: scope.a2a?.call?.operation,
    decision: scope.decision,
    reason: scope.policyReason,
    decisionId: scope.decisionId,
    mode: scope.mode,
    obligations: scope.obligations,
    obligationsNotMet: scope.obligationsLogged,
    overrideJti: scope.overrideJti,
    status: scope.status,
    protocol: scope.route?.protocol ?? 'http',
    proxy: scope.check?.proxy,
    errorCode: scope.errorCode,
    pdpRequest: keepRequest ? scope.pdpRequest : null,
  }
}

/** The request telemetry of one gateway: the log writer, the pending counts and the PDP timer. */
export class RequestTelemetry {
  // The per-request line has only fields set by the stages (never a header or token): see request-log.ts.
  readonly #requestLog: RequestLogWriter
  readonly #lineEnding = RequestLogWriter.ending('gateway request')
  readonly #counts = new RequestCounts()
  readonly #metrics: GatewayMetrics
  /** Observes the time the PDP took on a decision-cache miss. */
  readonly pdpDuration: HistogramSeries
  badgeHits = 0
  badgeMisses = 0
  decisionHits = 0
  decisionMisses = 0

  readonly #countedTools: ReadonlySet<string>
  readonly #feed: DecisionFeed | null

  constructor(logger: Logger, metrics: GatewayMetrics, pdpKind: string, countedTools: readonly string[] = [], feed: DecisionFeed | null = null) {
    this.#requestLog = new RequestLogWriter(logger)
    this.#feed = feed
    this.#metrics = metrics
    this.pdpDuration = metrics.pdpDuration.labels(pdpKind)
    this.#countedTools = new Set(countedTools)
  }

  /** One decided MCP message; the tool is a label value only when the operator listed it, so labels stay bounded. */
  countMcpMessage(question: McpMessageInfo, decision: string): void {
    const tool = question.tool !== undefined && this.#countedTools.has(question.tool) ? question.tool : ''
    this.#metrics.mcpMessages.labels(question.methodLabel, decision, tool).inc()
  }

  /** One decided A2A call; every label comes from a fixed table, so the series stay bounded. */
  countA2aCall(call: A2aCall, decision: string): void {
    this.#metrics.a2aCalls.labels(call.operation, call.version, decision).inc()
  }

  /** Writes the request's log line, metrics and span; a request is finished once. */
  finish(scope: RequestScope): void {
    if (scope.finished) return
    scope.finished = true
    const latencyMs = performance.now() - scope.started
    this.#counts.count(scope.decision, scope.mode, scope.status, scope.errorCode)
    this.#metrics.requestDuration.observe(latencyMs / 1000)
    if (this.#requestLog.enabled) this.#requestLog.writeFragment(requestLogFields(scope, latencyMs), this.#lineEnding)
    if (scope.span !== null) finishSpan(scope, scope.span)
    // One object, no serialisation: subscribers are woken later and format what they read (decision-feed.ts).
    if (this.#feed !== null && feedsDecisions(scope)) this.#feed.record(recordOf(scope))
    if (scope.check !== null) this.#metrics.checks.labels(scope.check.proxy, scope.route?.protocol ?? 'http', scope.decision ?? 'NONE', statusClass(scope.status)).inc()
  }

  /** Writes out queued request log lines now (they are batched for a few milliseconds under load). */
  flush(): void {
    this.#requestLog.flush()
  }

  /** Hands the pending counts and cache sizes to prom-client whenever metrics are collected; returns the unhook. */
  reportOnCollect(badges: BadgeVerifier, decisions: DecisionCache): () => void {
    const metrics = this.#metrics
    return metrics.beforeCollect(() => {
      this.#counts.drainInto(metrics.requests)
      if (this.badgeHits > 0) metrics.cacheLookups.labels('badge', 'hit').inc(this.badgeHits)
      if (this.badgeMisses > 0) metrics.cacheLookups.labels('badge', 'miss').inc(this.badgeMisses)
      if (this.decisionHits > 0) metrics.cacheLookups.labels('decision', 'hit').inc(this.decisionHits)
      if (this.decisionMisses > 0) metrics.cacheLookups.labels('decision', 'miss').inc(this.decisionMisses)
      this.badgeHits = this.badgeMisses = this.decisionHits = this.decisionMisses = 0
      metrics.cacheEntries.labels('badge').set(badges.size)
      metrics.cacheEntries.labels('decision').set(decisions.size)
    })
  }

  /** Updates the bundle age gauges every second while an embedded PDP decides; returns the stop function. */
  watchBundleAge(holder: SnapshotHolder, pdp: PolicyDecisionPoint | null, staleAfterMs: number, now: () => number): () => void {
    const metrics = this.#metrics
    metrics.bundleAge.reset()
    const timer = setInterval(() => {
      if (!holder.ready || pdp?.kind !== 'embedded') return
      const bundle = holder.current.bundle
      if (bundle === null) return
      const age = now() - bundle.confirmedAt
      metrics.bundleAge.set(age / 1000)
      metrics.bundleStale.set(age > staleAfterMs ? 1 : 0)
    }, 1000)
    timer.unref()
    return () => clearInterval(timer)
  }
}
