/**
 * MCP stage (docs/mcp.md): on an MCP route a POST body is read whole, checked as JSON-RPC, and each message
 * decided on its own; only a body whose every message is allowed reaches the upstream, byte for byte as read
 * unless a resource URI had to be put in its canonical form.
 * GET (the server's event stream) and DELETE (the end of a session) are decided as operations of their own.
 */
import type { Transform } from 'node:stream'
import { jsonRpcIdKey, readJsonRpc, type JsonRpcId } from '../../core/json-rpc.js'
import { MCP_TOOL_CALL_OPERATION } from '../../core/policy/evaluate.js'
import type { EnforcementResult } from '../../core/enforcement.js'
import type { GatewayErrorCode } from '../../core/gateway-errors.js'
import { canonicalResourceUri, canonicalUriTemplate } from '../../core/resource-uri.js'
import { parseStrictJson, StrictJsonError, type JsonValue } from '../../core/strict-json.js'
import type { PdpAnswer } from '../pdp/pdp.js'
import { DecisionCache } from '../decision-cache.js'
import type { GatewayContext } from '../context.js'
import { McpExchange } from '../mcp/exchange.js'
import { batchesAllowed, headersMatchBody, readMcpHeaders } from '../mcp/headers.js'
import { createListFilter, type ListFilterOptions } from '../mcp/list-filter.js'
import { describeMessage, MAX_ADDRESSED_CHARS, SESSION_END, STREAM_OPEN, type ListKind, type McpMessageInfo } from '../mcp/methods.js'
import { INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR } from '../mcp/refusal.js'
import { requestSessionId, sessionSubject, SessionWatch } from '../mcp/sessions.js'
import { isIdentityCoding } from '../ingress/media-type.js'
import { STRIP, type RequestScope } from '../request-scope.js'
import type { ResponseFilter } from '../upstream/upstream.js'
import type { VerifiedBadge } from '../identity/badge.js'
import { readWholeBody, refuseUnread } from './body.js'
import { refuseRewrittenBody } from '../check/check.js'
import { AT, ANSWERED, GO_ON, resume, type Step } from '../pipeline.js'
import { askPdp, decideQuestion } from './decide.js'
import { refuseOutcome } from './enforce.js'
import { fail, refuse } from './refuse.js'

export function enterMcp(ctx: GatewayContext, scope: RequestScope): Step {
  if (scope.method === 'POST') return readBody(ctx, scope)
  const sessionId = requestSessionId(scope.req)
  if (sessionId === null) return refuseMcpUnread(ctx, scope, 'MCP_HEADER_MISMATCH')
  if (sessionRefused(ctx, scope, sessionId)) return ANSWERED
  switch (scope.method) {
    case 'GET':
      scope.question = STREAM_OPEN
      // The server's stream may replay answers to list requests of earlier POSTs (resumption).
      filterLists(ctx, scope, null)
      break
    case 'HEAD':
      scope.question = STREAM_OPEN
      break
    case 'DELETE':
      scope.question = SESSION_END
      // The binding ends with the session: only once the upstream has ended it too.
      if (sessionId !== undefined) scope.responseFilter = new SessionWatch(ctx.mcpSessions, { end: sessionId })
      break
  }
  return GO_ON
}

/**
 * A session is its subject's: another badge's use of it, or of a session the gateway does not know, is
 * refused before any body is read (docs/mcp.md, "Sessions"). True when it was.
 */
function sessionRefused(ctx: GatewayContext, scope: RequestScope, sessionId: string | undefined): boolean {
  if (sessionId === undefined) return false
  const refusal = ctx.mcpSessions.check(sessionId, sessionSubject(scope.badge as VerifiedBadge))
  if (refusal === null) return false
  // A check never sees the answer that opens a session, so only a session known to be another's is refused.
  if (refusal === 'MCP_SESSION_UNKNOWN' && scope.check !== null) return false
  refuseMcpUnread(ctx, scope, refusal)
  return true
}

/** A refusal on an MCP route before its body is read, answered in JSON-RPC (id null) as the SDK's own are. */
export function refuseMcpUnread(ctx: GatewayContext, scope: RequestScope, code: GatewayErrorCode): typeof ANSWERED {
  scope.mcp ??= new McpExchange()
  return refuseUnread(ctx, scope, code)
}

function readBody(ctx: GatewayContext, scope: RequestScope): Step {
  const exchange = new McpExchange()
  scope.mcp = exchange
  const problem = readMcpHeaders(scope.req.rawHeaders, exchange)
  if (problem !== null) return refuseUnread(ctx, scope, problem)
  if (sessionRefused(ctx, scope, exchange.sessionId)) return ANSWERED
  return readWholeBody(ctx, scope, 'MCP_BODY_TOO_LARGE', (body) => bodyRead(ctx, scope, exchange, body))
}

function bodyRead(ctx: GatewayContext, scope: RequestScope, exchange: McpExchange, body: Buffer): Step | void {
  exchange.body = body
  let value
  try {
    value = parseStrictJson(body)
  } catch (error) {
    if (!(error instanceof StrictJsonError)) throw error
    return refuseMessage(ctx, scope, exchange, PARSE_ERROR, error.message)
  }
  const read = readJsonRpc(value)
  if ('problem' in read) return refuseMessage(ctx, scope, exchange, INVALID_REQUEST, read.detail)
  exchange.batch = read.batch
  if (read.batch && !batchesAllowed(exchange)) return refuse(ctx, scope, 'MCP_BATCH_NOT_ALLOWED')
  const messages: McpMessageInfo[] = []
  let requestIds: Set<string> | undefined
  let rewritten = false
  for (const message of read.messages) {
    const info = describeMessage(message)
    if (typeof info === 'string') {
      if (message.kind === 'request') exchange.answerIds = [message.id]
      return refuseMessage(ctx, scope, exchange, INVALID_PARAMS, info)
    }
    // An initialize opens a session, so it stands alone (MCP 2025-03-26, "Batching").
    if (read.batch && info.method === 'initialize') return refuseMessage(ctx, scope, exchange, INVALID_REQUEST, 'initialize in a batch')
    // Answers are matched to requests by id alone (the server's routing, the client's, the list filter's): two requests with one id have no single answer each.
    if (read.batch && message.kind === 'request') {
      const key = jsonRpcIdKey(message.id)
      if ((requestIds ??= new Set()).has(key)) return refuseMessage(ctx, scope, exchange, INVALID_REQUEST, `request id ${JSON.stringify(message.id)} repeated in a batch`)
      requestIds.add(key)
    }
    if (info.rewritten === true) rewritten = true
    messages.push(info)
  }
  exchange.messages = messages
  if (!headersMatchBody(exchange, messages, read.batch)) {
    exchange.answerIds = exchange.requestIds()
    return refuse(ctx, scope, 'MCP_HEADER_MISMATCH')
  }
  if (rewritten && scope.check !== null) {
    const refused = refuseRewrittenBody(ctx, scope)
    if (refused !== null) return refused
  }
  scope.question = messages[0] ?? null
  scope.body = rewritten ? canonicalBody(value, messages) : body
  exchange.body = scope.body
  filterLists(ctx, scope, exchange)
  // The client's Content-Length counts the body it sent; the pool sets the rewritten one's.
  if (rewritten) scope.strip = scope.strip === STRIP_FOR_LISTS ? STRIP_FOR_REWRITTEN : STRIP_REWRITTEN_ONLY
  if (messages.length === 1 && messages[0]!.method === 'initialize') {
    // The watch binds the session the answer opens to this subject, then hands the answer to the list filter.
    scope.responseFilter = new SessionWatch(ctx.mcpSessions, { bindTo: sessionSubject(scope.badge as VerifiedBadge) }, scope.responseFilter)
  }
  if (scope.override || ctx.pdp === null) {
    if (!scope.override) scope.decision = 'ALLOW'
    return resume(ctx, scope, AT.last)
  }
  decideMessages(ctx, scope, exchange)
}

/**
 * The body again with every resource URI in its canonical form, so the upstream resolves exactly what was
 * decided; the strict reader refused duplicate members, so writing the parsed value back loses no reading.
 */
function canonicalBody(value: JsonValue, messages: readonly McpMessageInfo[]): Buffer {
  for (const info of messages) {
    if (info.rewritten !== true || info.message === null || info.message.kind === 'response') continue
    ;(info.message.params as Record<string, JsonValue>)['uri'] = info.addressed as string
  }
  return Buffer.from(JSON.stringify(value), 'utf8')
}

/**
 * Every answer the route relays (a POST's, the GET stream's) goes through the list filter when a policy can
 * hide items: which ids were list requests is not known on a resumed stream, so the filter goes by shape.
 */
function filterLists(ctx: GatewayContext, scope: RequestScope, exchange: McpExchange | null): void {
  if (ctx.pdp === null || scope.override) return
  scope.responseFilter = new McpListFilter(ctx, scope, exchange)
  // The filter reads the answer, so it must come uncompressed.
  scope.strip = STRIP_FOR_LISTS
}

function refuseMessage(ctx: GatewayContext, scope: RequestScope, exchange: McpExchange, rpcCode: number, detail: string): Step {
  exchange.rpcCode = rpcCode
  ctx.logger.warn({ request_id: scope.requestId, reason: detail }, 'gateway refused MCP body')
  return refuse(ctx, scope, 'MCP_MESSAGE_INVALID')
}

/** Decides the messages in order, synchronously until a remote PDP or a Redis-counted rate limit makes one wait; the first refusal ends it. */
function decideMessages(ctx: GatewayContext, scope: RequestScope, exchange: McpExchange): void {
  const messages = exchange.messages
  while (exchange.next < messages.length) {
    const question = messages[exchange.next]!
    scope.question = question
    const outcome = decideQuestion(ctx, scope, question)
    if (outcome instanceof Promise) {
      outcome.then((settled) => {
        if (messageDecided(ctx, scope, exchange, settled)) decideMessages(ctx, scope, exchange)
      }).catch((error: unknown) => fail(ctx, scope, error))
      return
    }
    if (!messageDecided(ctx, scope, exchange, outcome)) return
  }
  resume(ctx, scope, AT.last)
}

/** True when the message may go on; otherwise the whole body has been refused. */
function messageDecided(ctx: GatewayContext, scope: RequestScope, exchange: McpExchange, outcome: EnforcementResult): boolean {
  const question = scope.question as McpMessageInfo
  exchange.next++
  ctx.telemetry.countMcpMessage(question, outcome.decision)
  if (outcome.forward) return true
  const message = question.message
  exchange.answerIds = exchange.batch ? exchange.requestIds() : message?.kind === 'request' ? [message.id] : NO_IDS
  refuseOutcome(ctx, scope, outcome)
  return false
}

const NO_IDS: readonly JsonRpcId[] = Object.freeze([])
const STRIP_FOR_LISTS: ReadonlySet<string> = new Set([...STRIP, 'accept-encoding'])
const STRIP_FOR_REWRITTEN: ReadonlySet<string> = new Set([...STRIP_FOR_LISTS, 'content-length'])
const STRIP_REWRITTEN_ONLY: ReadonlySet<string> = new Set([...STRIP, 'content-length'])

/** The largest list answer (or SSE event) read to be filtered; a larger one is replaced by an error. */
const LIST_ANSWER_MAX_BYTES = 16 * 1024 * 1024

const LIST_ITEM_OPERATION: Readonly<Record<ListKind, string>> = {
  tools: MCP_TOOL_CALL_OPERATION,
  prompts: 'mcp.prompt.get',
  resources: 'mcp.resource.read',
  resourceTemplates: 'mcp.resource.read',
}

/** What a list item would be asked as, were the client to use it. */
function itemQuestion(kind: ListKind, name: string): McpMessageInfo {
  return {
    message: null, method: kind, methodLabel: kind, operation: LIST_ITEM_OPERATION[kind], tool: kind === 'tools' ? name : undefined,
    addressed: name, list: null,
  }
}

/**
 * A list answer shows an item only when using it would be allowed: the same decision as a call, obligations
 * aside (listing spends no rate-limit token); EM-OBSERVE shows everything, as it forwards everything.
 */
class McpListFilter implements ResponseFilter {
  constructor(
    private readonly ctx: GatewayContext,
    private readonly scope: RequestScope,
    private readonly exchange: McpExchange | null,
  ) {}

  filterFor(status: number, contentType: string | undefined, contentEncoding: string | undefined): Transform | null {
    if (status !== 200) return null
    // Anything but an event stream is read as JSON: a list must not slip through under another media type.
    const type = (contentType ?? '').split(';', 1)[0]!.trim().toLowerCase()
    const mediaType = type === 'text/event-stream' ? 'sse' : 'json'
    const encoded = contentEncoding !== undefined && !isIdentityCoding(contentEncoding)
    const cache = mediaType === 'json' && !encoded ? this.#cache() : undefined
    const filter = createListFilter({ mediaType, encoded, allowed: (kind, name) => this.#allowed(kind, name), maxBytes: LIST_ANSWER_MAX_BYTES, ...(cache === undefined ? {} : { cache }) })
    if (this.exchange !== null) this.exchange.listFilter = filter
    return filter
  }

  #allowed(kind: ListKind, listed: string): boolean | Promise<boolean> {
    // A resource is decided as its read would be: on the canonical URI, and hidden when it has none.
    const name = kind === 'resources' ? canonicalResourceUri(listed) : kind === 'resourceTemplates' ? canonicalUriTemplate(listed) ?? listed : listed
    if (name === null || name.length > MAX_ADDRESSED_CHARS) return false
    if (this.ctx.pdp === null || this.scope.override) return true
    const answer = askPdp(this.ctx, this.scope, itemQuestion(kind, name), true)
    return answer instanceof Promise ? answer.then((settled) => this.#visible(settled)) : this.#visible(answer)
  }

  /**
   * Where the filtered answer may be kept: with the embedded PDP on a fresh bundle the item verdicts are a
   * function of the revision and the decision cache's key parts, which the context names (a stale bundle
   * is decided afresh, as askPdp marks it).
   */
  #cache(): ListFilterOptions['cache'] {
    const { ctx, scope } = this
    const bundle = scope.snapshot?.bundle ?? null
    if (ctx.pdp?.kind !== 'embedded' || scope.override || bundle === null || scope.nowMs - bundle.confirmedAt > ctx.staleAfterMs) return undefined
    const badge = scope.badge as VerifiedBadge
    const chain = scope.chain
    const context = bundle.revision + '\u0000' + DecisionCache.key(badge.decisionSubject, scope.operationMethod, scope.target, scope.mode, chain === null ? '' : chain.leaf.envelope_id)
    const notAfterMs = (chain === null ? badge.expiresAt : Math.min(badge.expiresAt, chain.leaf.expires_at)) * 1000
    return { store: ctx.listAnswers, context, nowMs: scope.nowMs, notAfterMs }
  }

  #visible(answer: PdpAnswer): boolean {
    return answer.outcome === 'ALLOW' || this.scope.mode === 'EM-OBSERVE'
  }
}
