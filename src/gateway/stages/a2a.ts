/**
 * A2A stage (docs/a2a.md): every request on an A2A route is one A2A call, decided once as its operation
 * (core/a2a-methods.ts) whatever the version or binding. A body is read whole and strict before the decision
 * and forwarded byte for byte as read; the answer, event streams included, flows through unbuffered.
 */
import { a2aBindingOf, classifyA2a, type A2aCall } from '../../core/a2a-methods.js'
import { readJsonRpc } from '../../core/json-rpc.js'
import { parseStrictJson, StrictJsonError, type JsonValue } from '../../core/strict-json.js'
import type { EnforcementResult } from '../../core/enforcement.js'
import { A2aExchange } from '../a2a/exchange.js'
import type { DecisionQuestion } from '../decision-question.js'
import { ExtendedCardFilter } from '../a2a/extended-card-filter.js'
import type { GatewayContext } from '../context.js'
import { lowerCasePath } from '../ingress/canonical-target.js'
import { isIdentityCoding, jsonMediaType } from '../ingress/media-type.js'
import { INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR } from '../json-rpc-refusal.js'
import { NO_HEADERS, type RequestScope } from '../request-scope.js'
import { readWholeBody, refuseUnread } from './body.js'
import { cardAsServed, MAX_PUBLIC_CARD_BYTES } from './a2a-card.js'
import { AT, RESUMES, resume, type Step } from '../pipeline.js'
import { decideQuestion } from './decide.js'
import { refuseOutcome } from './enforce.js'
import { fail, refuse } from './refuse.js'

/** The members of a JSON-RPC 2.0 request. */
const ENVELOPE_MEMBERS: ReadonlySet<string> = new Set(['jsonrpc', 'id', 'method', 'params'])

/** An extended card is one caller's: no shared cache may keep it or serve it to another (docs/a2a.md, "Extended cards"). */
const EXTENDED_CARD_HEADERS: readonly string[] = Object.freeze(['cache-control', 'private, no-store', 'vary', 'Authorization'])

export function enterA2a(ctx: GatewayContext, scope: RequestScope): Step {
  const path = scope.path.slice(scope.routePrefixLength) || '/'
  const exchange = new A2aExchange(a2aBindingOf(scope.operationMethod, path))
  scope.a2a = exchange
  const req = scope.req
  const headers = req.headers
  const hasBody = headers['transfer-encoding'] !== undefined || (headers['content-length'] !== undefined && headers['content-length'] !== '0')
  if (exchange.binding !== 'jsonrpc' && !hasBody) {
    classified(ctx, scope, exchange, path, undefined)
    return RESUMES
  }

  // JSON-RPC is application/json only (the SDKs refuse application/a2a+json there); REST takes either, and
  // a chunked REST body without a type is read to see whether it is empty.
  const declared = headers['content-type']
  const type = jsonMediaType(declared)
  const typeOk = exchange.binding === 'jsonrpc' ? type === 'json' : type !== null || declared === undefined
  if (!typeOk || !isIdentityCoding(headers['content-encoding'])) return refuseUnread(ctx, scope, 'A2A_CONTENT_TYPE_UNSUPPORTED')
  return readWholeBody(ctx, scope, 'A2A_BODY_TOO_LARGE', (body) => bodyRead(ctx, scope, exchange, path, body))
}

function bodyRead(ctx: GatewayContext, scope: RequestScope, exchange: A2aExchange, path: string, body: Buffer): Step | void {
  // The stream is spent: what was read is what goes on.
  scope.body = body
  if (exchange.binding !== 'jsonrpc') {
    if (body.length === 0) return classified(ctx, scope, exchange, path, undefined)
    if (scope.req.headers['content-type'] === undefined) return refuse(ctx, scope, 'A2A_CONTENT_TYPE_UNSUPPORTED')
  }
  let value: JsonValue
  try {
    value = parseStrictJson(body)
  } catch (error) {
    if (!(error instanceof StrictJsonError)) throw error
    return refuseInvalid(ctx, scope, exchange, PARSE_ERROR, error.message)
  }
  if (exchange.binding !== 'jsonrpc') {
    if (typeof value !== 'object' || value === null || Array.isArray(value)) return refuseInvalid(ctx, scope, exchange, INVALID_REQUEST, 'a REST body must be a JSON object')
    return classified(ctx, scope, exchange, path, value)
  }
  if (Array.isArray(value)) return refuseInvalid(ctx, scope, exchange, INVALID_REQUEST, 'A2A has no JSON-RPC batches')
  const read = readJsonRpc(value)
  if ('problem' in read) return refuseInvalid(ctx, scope, exchange, INVALID_REQUEST, read.detail)
  const message = read.messages[0]!
  if (message.kind !== 'request') return refuseInvalid(ctx, scope, exchange, INVALID_REQUEST, 'an A2A JSON-RPC message is a request with an id')
  // A member beside the envelope's (a REST body's `message`, say) makes the body two requests at once.
  for (const name in value as Record<string, unknown>) {
    if (!ENVELOPE_MEMBERS.has(name)) return refuseInvalid(ctx, scope, exchange, INVALID_REQUEST, `a JSON-RPC request has no member "${name.slice(0, 64)}"`)
  }
  exchange.answerIds = [message.id]
  classified(ctx, scope, exchange, path, value)
}

function refuseInvalid(ctx: GatewayContext, scope: RequestScope, exchange: A2aExchange, rpcCode: number, detail: string): Step {
  exchange.rpcCode = rpcCode
  ctx.logger.warn({ request_id: scope.requestId, reason: detail }, 'gateway refused A2A body')
  return refuse(ctx, scope, 'A2A_MESSAGE_INVALID')
}

function classified(ctx: GatewayContext, scope: RequestScope, exchange: A2aExchange, path: string, body: JsonValue | undefined): Step | void {
  const version = scope.req.headers['a2a-version']
  const call = classifyA2a({ httpMethod: scope.operationMethod, path, versionHeader: typeof version === 'string' ? version : undefined, body })
  exchange.call = call
  if (call.problem !== undefined) return refuseInvalid(ctx, scope, exchange, INVALID_PARAMS, call.problem)
  const other = underLongerRoute(ctx, scope)
  if (other !== null) {
    const alike = classifyA2a({ httpMethod: scope.operationMethod, path: other, versionHeader: typeof version === 'string' ? version : undefined, body })
    if (alike.problem !== undefined || alike.operation !== call.operation || alike.taskId !== call.taskId || alike.contextId !== call.contextId) {
      return refuseInvalid(ctx, scope, exchange, INVALID_REQUEST, `the path is ${call.operation} under its route and ${alike.operation} under a longer A2A route spelt in another case`)
    }
  }
  // What the gateway cannot name it cannot decide: only EM-OBSERVE asks about it and forwards it.
  if (call.operation === 'a2a.method.other' && scope.mode !== 'EM-OBSERVE' && !scope.override) {
    ctx.logger.warn({ request_id: scope.requestId, reason: `no A2A operation: ${scope.operationMethod} ${call.method.slice(0, 64)}` }, 'gateway refused A2A request')
    return refuse(ctx, scope, 'A2A_OPERATION_UNKNOWN')
  }
  const question: DecisionQuestion = { operation: call.operation, addressed: call.taskId ?? call.contextId, tool: undefined, skill: call.skill }
  exchange.question = question
  // A DENY about an extended card is enforced in every mode: EM-OBSERVE would hand it to anyone with a badge.
  if (call.extendedCard && scope.mode === 'EM-OBSERVE') scope.mode = 'EM-GUARD'
  if (scope.override || ctx.pdp === null) {
    if (!scope.override) scope.decision = 'ALLOW'
    return allowed(ctx, scope, call)
  }
  const outcome = decideQuestion(ctx, scope, question)
  if (outcome instanceof Promise) {
    outcome.then((settled) => decided(ctx, scope, call, settled)).catch((error: unknown) => fail(ctx, scope, error))
    return
  }
  decided(ctx, scope, call, outcome)
}

/**
 * The path relative to a longer A2A route whose prefix this path spells in another case, or null. An upstream
 * that ignores case (Express's default, so the SDKs') mounts that route's interface under this spelling too, and
 * reads the rest of the path from there: `/agent/REST/tasks/extendedAgentCard` is the extended card there.
 */
function underLongerRoute(ctx: GatewayContext, scope: RequestScope): string | null {
  let lowered: string | null = null
  for (const entry of ctx.routes.entries) {
    const prefix = entry.prefix.endsWith('/') ? entry.prefix.slice(0, -1) : entry.prefix
    if (prefix.length <= scope.routePrefixLength) break
    if (entry.value.protocol !== 'a2a') continue
    lowered ??= lowerCasePath(scope.path)
    if (!lowered.startsWith(lowerCasePath(prefix))) continue
    if (lowered.length === prefix.length || lowered.charCodeAt(prefix.length) === 0x2f) return scope.path.slice(prefix.length) || '/'
  }
  return null
}

function decided(ctx: GatewayContext, scope: RequestScope, call: A2aCall, outcome: EnforcementResult): void {
  ctx.telemetry.countA2aCall(call, outcome.decision)
  if (!outcome.forward) {
    refuseOutcome(ctx, scope, outcome)
    return
  }
  allowed(ctx, scope, call)
}

function allowed(ctx: GatewayContext, scope: RequestScope, call: A2aCall): void {
  if (call.extendedCard) {
    scope.responseHeaders = [...(scope.responseHeaders ?? NO_HEADERS), ...EXTENDED_CARD_HEADERS]
    // A HEAD answer has no card to move.
    if (scope.req.method !== 'HEAD') scope.responseFilter = new ExtendedCardFilter((card) => cardAsServed(ctx, scope, card), call.binding, MAX_PUBLIC_CARD_BYTES)
  }
  resume(ctx, scope, AT.last)
}
