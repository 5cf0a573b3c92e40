/**
 * How any stage ends a request with a gateway-made answer: the one response writer, the transaction
 * and decision headers, and the request's telemetry.
 */
import { gatewayError, type GatewayErrorCode } from '../../core/gateway-errors.js'
import { TRUST_RANK } from '../../core/trust-level.js'
import type { GatewayContext } from '../context.js'
import type { ResourceServer } from '../ingress/resource-metadata.js'
import { sendJsonRpcRefusal } from '../json-rpc-refusal.js'
import { ANSWERED } from '../pipeline.js'
import type { RequestScope } from '../request-scope.js'
import { sendGatewayError, type RefusalDetails } from '../respond.js'

/** Answers with the gateway-made error `code` (its status from the catalogue) and finishes the request. */
export function refuse(ctx: GatewayContext, scope: RequestScope, code: GatewayErrorCode, headers?: Record<string, string>, details?: RefusalDetails): typeof ANSWERED {
  scope.errorCode = code
  if (scope.check !== null) scope.check.errorCode = code
  const extra: Record<string, string> = { ...headers }
  if (scope.txnId !== undefined) extra['x-service-txn'] = scope.txnId
  if (scope.decisionId !== undefined) extra['x-service-decision-id'] = scope.decisionId
  const route = scope.route
  let keepStatus = false
  if (route !== null) {
    const server = route.resourceServer
    if (gatewayError(code).status === 401) {
      if (server !== undefined) extra['www-authenticate'] = code === 'BADGE_MISSING' ? server.challenge : server.invalidTokenChallenge
      // The MCP authorization spec's and A2A's signal that a bearer token is wanted (RFC 6750 §3).
      else if (route.protocol === 'mcp' || route.protocol === 'a2a') extra['www-authenticate'] = code === 'BADGE_MISSING' ? 'Bearer' : 'Bearer error="invalid_token"'
    } else if (code === 'POLICY_DENIED' && server !== undefined) {
      const challenge = insufficientScope(scope, server)
      if (challenge !== undefined) {
        extra['www-authenticate'] = challenge
        // An OAuth client reads the challenge only on a 403, so an MCP answer keeps that status.
        keepStatus = true
      }
    }
  }
  // Each protocol's refusals are JSON-RPC answers with its own codes, except on A2A's REST binding.
  const rpc = scope.mcp ?? scope.a2a
  if (rpc !== null && rpc.answersInJsonRpc()) {
    const refusalDetails = details ?? (scope.decisionId === undefined ? undefined : { decision_id: scope.decisionId })
    scope.status = sendJsonRpcRefusal(scope.res, {
      code,
      ids: rpc.answerIds,
      rpcCode: rpc.rpcCode,
      batch: rpc.batch,
      details: refusalDetails,
      retryAfterSeconds: code === 'rate_limit_exceeded' ? Math.max(1, scope.retryAfterSeconds) : undefined,
      keepStatus,
    }, rpc.codes, extra)
  } else {
    scope.status = sendGatewayError(scope.res, code, extra, details)
  }
  ctx.telemetry.finish(scope)
  return ANSWERED
}

/**
 * The insufficient_scope challenge of a denial (RFC 6750 §3.1), or undefined: only when the policy denied
 * for the trust level and named the level it wanted, above that of an authority's key-bound badge (its
 * holder has the key the token endpoint asks for; a self-signed badge no authority raises, and the holder
 * of an API-key badge would only lose the JSON-RPC answer), and, on an MCP body, for a single message
 * (one HTTP status cannot speak for a batch's several answers).
 */
export function insufficientScope(scope: RequestScope, server: ResourceServer): string | undefined {
  const required = scope.requiredTrustLevel
  const badge = scope.badge
  if (required === undefined || badge === null || badge.selfSigned || badge.claims.cnf === undefined) return undefined
  if (scope.policyReason === undefined || !scope.policyReason.endsWith('trust_level_below_minimum')) return undefined
  if (scope.mcp !== null && scope.mcp.batch) return undefined
  const need = TRUST_RANK.get(required) as number
  return (TRUST_RANK.get(badge.trustCode) as number) < need ? server.scopeChallenges[need] : undefined
}

/** A bug, never an expected outcome: fail closed, log the fact without internals in the response. */
export function fail(ctx: GatewayContext, scope: RequestScope, error: unknown): void {
  ctx.logger.error({ err: error, request_id: scope.requestId }, 'gateway request failed')
  if (scope.finished) return
  refuse(ctx, scope, 'GATEWAY_ERROR')
}
