/**
 * Forward stage: the request goes to its route's upstream, which answers the client directly;
 * {@link forwarded} finishes the request, or answers 502/504 when nothing reached the client.
 */
import type { GatewayContext, RouteTarget } from '../context.js'
import type { RequestScope } from '../request-scope.js'
import type { ForwardResult } from '../upstream/upstream.js'
import { fail, refuse } from './refuse.js'

export function forward(ctx: GatewayContext, scope: RequestScope): void {
  scope.trustedPeer = ctx.isTrustedPeer(scope.req.socket.remoteAddress)
  ;(scope.route as RouteTarget).upstream.forwardTo(scope.req, scope.res, scope, scope, ctx.forwarded)
}

/** The upstream's completion, through {@link GatewayContext.forwarded}. */
export function forwarded(ctx: GatewayContext, scope: RequestScope, result: ForwardResult): void {
  try {
    if (result.ok) {
      scope.status = result.status
      ctx.telemetry.finish(scope)
    } else {
      refuse(ctx, scope, result.code)
    }
  } catch (error) {
    fail(ctx, scope, error)
  }
}
