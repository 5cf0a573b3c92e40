/**
 * How any stage ends a request with a gateway-made answer: the one response writer, the transaction
 * and decision headers, and the request's telemetry.
 */
import type { GatewayErrorCode } from '../../core/gateway-errors.js'
import type { GatewayContext } from '../context.js'
import type { RequestScope } from '../request-scope.js'
import { sendGatewayError, type RefusalDetails } from '../respond.js'

/** Answers with the gateway-made error `code` (its status from the catalogue) and finishes the request. */
export function refuse(ctx: GatewayContext, scope: RequestScope, code: GatewayErrorCode, headers?: Record<string, string>, details?: RefusalDetails): void {
  scope.errorCode = code
  const extra: Record<string, string> = { ...headers }
  if (scope.txnId !== undefined) extra['x-service-txn'] = scope.txnId
  if (scope.decisionId !== undefined) extra['x-service-decision-id'] = scope.decisionId
  scope.status = sendGatewayError(scope.res, code, extra, details)
  ctx.telemetry.finish(scope)
}

/** A bug, never an expected outcome: fail closed, log the fact without internals in the response. */
export function fail(ctx: GatewayContext, scope: RequestScope, error: unknown): void {
  ctx.logger.error({ err: error, request_id: scope.requestId }, 'gateway request failed')
  if (scope.finished) return
  refuse(ctx, scope, 'GATEWAY_ERROR')
}
