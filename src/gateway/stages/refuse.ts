/**
 * How any stage ends a request with a gateway-made answer: the one response writer, the transaction
 * and decision headers, and the request's telemetry.
 */
import type { GatewayContext } from '../context.js'
import type { RequestScope } from '../request-scope.js'
import { sendGatewayError, type RefusalDetails } from '../respond.js'

/** Answers with a gateway-made error and finishes the request. */
export function refuse(ctx: GatewayContext, scope: RequestScope, status: number, code: string, headers?: Record<string, string>, details?: RefusalDetails): void {
  scope.status = status
  scope.errorCode = code
  const extra: Record<string, string> = { ...headers }
  if (scope.txnId !== undefined) extra['x-service-txn'] = scope.txnId
  if (scope.decisionId !== undefined) extra['x-service-decision-id'] = scope.decisionId
  sendGatewayError(scope.res, status, code, extra, details)
  ctx.telemetry.finish(scope)
}

/** A bug, never an expected outcome: fail closed, log the fact without internals in the response. */
export function fail(ctx: GatewayContext, scope: RequestScope, error: unknown): void {
  ctx.logger.error({ err: error, request_id: scope.requestId }, 'gateway request failed')
  if (scope.finished) return
  refuse(ctx, scope, 500, 'GATEWAY_ERROR')
}
