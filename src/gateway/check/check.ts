/**
 * The check service's side of the pipeline (docs/ext-authz.md): a check runs the gateway's own stages on the
 * request the proxy will forward, and only the last stage differs, answering the proxy instead of forwarding.
 */
import type { GatewayContext } from '../context.js'
import { a2aBindingOf } from '../../core/a2a-methods.js'
import { ANSWERED, AT, GO_ON, RESUMES, resume, type Step } from '../pipeline.js'
import { RequestScope } from '../request-scope.js'
import { refuseMcpUnread } from '../stages/mcp.js'
import { fail, refuse } from '../stages/refuse.js'
import { CheckExchange, headersToRemove, type CheckInput, type CheckVerdict } from './exchange.js'

/** Runs the pipeline for one check; settles with the verdict, never rejects. */
export function runCheck(ctx: GatewayContext, input: CheckInput): Promise<CheckVerdict> {
  return new Promise((resolve) => {
    const exchange = new CheckExchange(input, resolve)
    const started = performance.now()
    const span = ctx.tracer === null ? null : ctx.tracer.startSpan('gateway.check')
    const scope = new RequestScope(exchange.req, exchange.res, started, ctx.now(), span, ctx.config.enforcementMode)
    scope.check = exchange
    try {
      resume(ctx, scope, AT.admit)
    } catch (error) {
      fail(ctx, scope, error)
    }
  })
}

/** The last stage of a check: the allow, with the headers the gateway would have set and stripped. */
export function answerCheck(ctx: GatewayContext, scope: RequestScope): void {
  const set = [...scope.add]
  if (scope.txnId !== undefined) set.push('x-service-txn', scope.txnId)
  if (scope.decisionId !== undefined) set.push('x-service-decision-id', scope.decisionId)
  scope.status = 200
  ctx.telemetry.finish(scope)
  ;(scope.check as CheckExchange).settle({ allowed: true, set, remove: headersToRemove(set), responseHeaders: scope.responseHeaders ?? [] })
}

/** An A2A or MCP request whose decision reads its body: MCP's POST, A2A's JSON-RPC and its REST calls with a body. */
function needsBody(scope: RequestScope, protocol: 'mcp' | 'a2a'): boolean {
  if (protocol === 'mcp') return scope.method === 'POST'
  const method = scope.operationMethod
  if (method === 'POST' || method === 'PUT' || method === 'PATCH') return true
  return a2aBindingOf(method, scope.path.slice(scope.routePrefixLength) || '/') === 'jsonrpc'
}

/**
 * Before a protocol route reads a check's body: without the whole body its messages cannot be decided, so
 * the enforcing modes refuse and say why; EM-OBSERVE, which forwards what it cannot decide, lets it through.
 */
export function checkBodyGate(ctx: GatewayContext, scope: RequestScope, protocol: 'mcp' | 'a2a'): Step {
  const check = scope.check as CheckExchange
  if (check.bodyWhole || !needsBody(scope, protocol)) return GO_ON
  const reason = check.bodySent ? 'the proxy sent part of the body only' : 'the proxy sent no body'
  if (scope.mode !== 'EM-OBSERVE') {
    ctx.logger.warn({ request_id: scope.requestId, reason, proxy: check.proxy }, 'check refused: the decision needs the request body')
    return protocol === 'mcp' ? refuseMcpUnread(ctx, scope, 'CHECK_BODY_MISSING') : refuse(ctx, scope, 'CHECK_BODY_MISSING')
  }
  ctx.logger.warn({ request_id: scope.requestId, reason, proxy: check.proxy }, 'check not decided: the request body is needed (EM-OBSERVE: allowed)')
  scope.decision = 'ALLOW_OBSERVE'
  scope.policyReason = 'check_body_missing'
  resume(ctx, scope, AT.last)
  return RESUMES
}

/** A body the gateway would forward rewritten cannot go through a proxy as it was decided. */
export function refuseRewrittenBody(ctx: GatewayContext, scope: RequestScope): typeof ANSWERED | null {
  if (scope.mode === 'EM-OBSERVE') return null
  return refuse(ctx, scope, 'CHECK_BODY_NOT_CANONICAL')
}
