/**
 * Break-glass stage: a valid, in-scope override skips the PDP and is forwarded;
 * anything else about the token is logged and ignored, and the request is decided as usual.
 */
import { verifyBreakglassToken } from '../../core/breakglass.js'
import type { GatewayContext } from '../context.js'
import { authorityBadgeJti, type RequestScope } from '../request-scope.js'
import { GO_ON, type Step } from '../pipeline.js'

export function checkBreakglass(ctx: GatewayContext, scope: RequestScope): Step {
  if (scope.breakglass !== undefined) acceptOverride(ctx, scope, scope.breakglass)
  return GO_ON
}

/** Marks the request overridden when `token` is a valid override for it; counts and logs the outcome either way. */
function acceptOverride(ctx: GatewayContext, scope: RequestScope, token: string): void {
  const { logger, metrics } = ctx
  if (ctx.breakglassKey === null) {
    metrics.breakglassOverrides.labels('not_configured').inc()
    logger.warn({ request_id: scope.requestId }, 'break-glass token ignored: no break-glass key configured')
    return
  }
  const verdict = verifyBreakglassToken(token, {
    publicKey: ctx.breakglassKey,
    now: Math.floor(scope.nowMs / 1000),
    method: scope.operationMethod,
    path: scope.path,
    caseInsensitive: scope.route?.caseInsensitive === true,
  })
  if (!verdict.ok) {
    metrics.breakglassOverrides.labels(verdict.reason).inc()
    logger.warn({ request_id: scope.requestId, reason: verdict.reason }, 'break-glass token ignored')
    return
  }
  metrics.breakglassOverrides.labels('accepted').inc()
  scope.override = true
  scope.overrideJti = verdict.claims.jti
  scope.decision = 'ALLOW'
  scope.decisionId = `breakglass:${verdict.claims.jti}`
  ctx.overrides?.record({
    timeMs: scope.nowMs, jti: verdict.claims.jti, operator: verdict.claims.sub, reason: verdict.claims.reason,
    agentDid: scope.badge?.claims.sub, badgeJti: authorityBadgeJti(scope), method: scope.operationMethod, path: scope.path,
  })
  logger.warn(
    { request_id: scope.requestId, override_jti: verdict.claims.jti, operator: verdict.claims.sub, reason: verdict.claims.reason },
    'break-glass override accepted',
  )
}
