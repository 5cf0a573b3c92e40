// Badge stage: the caller's badge, verified through the gateway's cache (identity/badge.ts).
import type { GatewayContext, RouteTarget } from '../context.js'
import { extractBadge, meantFor } from '../identity/badge.js'
import { GO_ON, type Step } from '../pipeline.js'
import type { RequestScope } from '../request-scope.js'
import type { GatewaySnapshot } from '../snapshot/snapshot.js'
import { refuse } from './refuse.js'

/** A missing or invalid badge is 401 in every mode, EM-OBSERVE included (docs/wire-contract.md §13). */
export function checkBadge(ctx: GatewayContext, scope: RequestScope): Step {
  const token = extractBadge(scope.authorization, scope.badgeHeader)
  if (token === 'missing') return refuse(ctx, scope, 'BADGE_MISSING')
  if (token === 'conflict') return refuse(ctx, scope, 'BADGE_CONFLICT')
  const badge = ctx.badges.verify(token, scope.snapshot as GatewaySnapshot, Math.floor(scope.nowMs / 1000))
  if (typeof badge === 'string') return refuse(ctx, scope, badge)
  scope.badge = badge
  const server = (scope.route as RouteTarget).resourceServer
  if (server !== undefined && !meantFor(badge.audience, server)) return refuse(ctx, scope, 'BADGE_AUDIENCE_MISMATCH')
  scope.add = badge.identityHeaders
  return GO_ON
}

