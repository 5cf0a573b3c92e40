// What the request is, decided once before any other stage reads it (docs/gateway-request-handling.md).
import type { GatewayContext } from '../context.js'
import { canonicalTarget, lowerCasePath } from '../ingress/canonical-target.js'
import { hasUnderscoreHeader, inspectRequestHead } from '../ingress/framing.js'
import type { RequestScope } from '../request-scope.js'
import { transactionId } from '../txn-id.js'
import { checkBadge } from './badge.js'
import { refuse } from './refuse.js'

export function admit(ctx: GatewayContext, scope: RequestScope): void {
  const holder = ctx.holder
  if (!holder.ready) return refuse(ctx, scope, 'GATEWAY_NOT_READY')
  scope.snapshot = holder.current
  const req = scope.req
  scope.method = req.method ?? 'GET'

  const framing = inspectRequestHead(req, scope, true)
  if (framing !== null) {
    ctx.logger.warn({ request_id: scope.requestId, reason: framing }, 'gateway refused request framing')
    scope.res.shouldKeepAlive = false
    return refuse(ctx, scope, 'REQUEST_MALFORMED')
  }

  // One canonical target, computed before anything reads it, is decided on and forwarded.
  const rawTarget = req.url ?? '/'
  const targetProblem = canonicalTarget(rawTarget, scope)
  if (targetProblem !== null) {
    // `OPTIONS *` is well-formed but names no path, so no route can serve it.
    if (rawTarget === '*' && scope.method === 'OPTIONS') return refuse(ctx, scope, 'ROUTE_NOT_FOUND')
    ctx.logger.warn({ request_id: scope.requestId, reason: targetProblem }, 'gateway refused request target')
    return refuse(ctx, scope, 'REQUEST_MALFORMED')
  }
  const route = ctx.routes.match(scope.path)
  if (route === null) return refuse(ctx, scope, 'ROUTE_NOT_FOUND')
  const target = route.value
  scope.route = target
  if (target.caseInsensitive === true) scope.path = lowerCasePath(scope.path)
  scope.target = scope.query === '' ? scope.path : scope.path + scope.query
  scope.operationMethod = scope.method === 'HEAD' ? 'GET' : scope.method
  if (target.headersWithUnderscores !== undefined) {
    scope.headersWithUnderscores = target.headersWithUnderscores
    if (target.headersWithUnderscores === 'reject' && hasUnderscoreHeader(req.rawHeaders)) {
      ctx.logger.warn({ request_id: scope.requestId, reason: 'header name with "_"' }, 'gateway refused request headers')
      return refuse(ctx, scope, 'REQUEST_MALFORMED')
    }
  }
  scope.mode = target.mode ?? ctx.config.enforcementMode
  scope.txnId = transactionId(scope.txnHeader, scope.nowMs)
  checkBadge(ctx, scope)
}
