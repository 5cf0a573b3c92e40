/**
 * How any stage ends a request with a gateway-made answer: the one response writer, the transaction
 * and decision headers, and the request's telemetry.
 */
import { gatewayError, type GatewayErrorCode } from '../../core/gateway-errors.js'
import type { GatewayContext } from '../context.js'
import { sendMcpRefusal } from '../mcp/refusal.js'
import type { RequestScope } from '../request-scope.js'
import { sendGatewayError, type RefusalDetails } from '../respond.js'

/** Answers with the gateway-made error `code` (its status from the catalogue) and finishes the request. */
export function refuse(ctx: GatewayContext, scope: RequestScope, code: GatewayErrorCode, headers?: Record<string, string>, details?: RefusalDetails): void {
  scope.errorCode = code
  const extra: Record<string, string> = { ...headers }
  if (scope.txnId !== undefined) extra['x-service-txn'] = scope.txnId
  if (scope.decisionId !== undefined) extra['x-service-decision-id'] = scope.decisionId
  const mcp = scope.mcp
  if (scope.route?.protocol === 'mcp' && gatewayError(code).status === 401) {
    // The MCP authorization spec's signal that a bearer token is wanted (RFC 6750 §3).
    extra['www-authenticate'] = code === 'BADGE_MISSING' ? 'Bearer' : 'Bearer error="invalid_token"'
  }
  if (mcp !== null) {
    const refusalDetails = details ?? (scope.decisionId === undefined ? undefined : { decision_id: scope.decisionId })
    scope.status = sendMcpRefusal(scope.res, {
      code,
      ids: mcp.answerIds,
      rpcCode: mcp.rpcCode,
      batch: mcp.batch,
      details: refusalDetails,
      retryAfterSeconds: code === 'rate_limit_exceeded' ? Math.max(1, scope.retryAfterSeconds) : undefined,
    }, extra)
  } else {
    scope.status = sendGatewayError(scope.res, code, extra, details)
  }
  ctx.telemetry.finish(scope)
}

/** A bug, never an expected outcome: fail closed, log the fact without internals in the response. */
export function fail(ctx: GatewayContext, scope: RequestScope, error: unknown): void {
  ctx.logger.error({ err: error, request_id: scope.requestId }, 'gateway request failed')
  if (scope.finished) return
  refuse(ctx, scope, 'GATEWAY_ERROR')
}
