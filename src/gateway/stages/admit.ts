// What the request is, decided once before any other stage reads it (docs/gateway-request-handling.md).
import type { GatewayContext } from '../context.js'
import { canonicalTarget, lowerCasePath } from '../ingress/canonical-target.js'
import { hasUnderscoreHeader, inspectRequestHead } from '../ingress/framing.js'
import { METADATA_METHODS, sendResourceMetadata, type ResourceMetadataTable, type ResourceServer } from '../ingress/resource-metadata.js'
import { ANSWERED, AT, GO_ON, resume, type Step } from '../pipeline.js'
import type { RequestScope } from '../request-scope.js'
import type { GatewaySnapshot } from '../snapshot/snapshot.js'
import { transactionId } from '../txn-id.js'
import { enterPublicCard, isPublicCardRequest } from './a2a-card.js'
import { refuseMcpUnread } from './mcp.js'
import { refuse } from './refuse.js'

export function admit(ctx: GatewayContext, scope: RequestScope): Step {
  const holder = ctx.holder
  if (!holder.ready) return refuse(ctx, scope, 'GATEWAY_NOT_READY')
  scope.snapshot = holder.current
  const req = scope.req
  scope.method = req.method ?? 'GET'

  // A check's headers come from the proxy's message, not from llhttp: their characters are checked here.
  const framing = inspectRequestHead(req, scope, scope.check === null)
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
  // Protected-resource metadata is public and no route's: it is answered before any route is matched.
  const metadata = ctx.resourceMetadata
  if (metadata !== null) {
    const server = metadata.find(scope.path)
    if (server !== undefined) return answerMetadata(ctx, scope, metadata, server)
  }
  const route = ctx.routes.match(scope.path)
  if (route === null) return refuse(ctx, scope, 'ROUTE_NOT_FOUND')
  const target = route.value
  scope.route = target
  // A prefix ending in "/" keeps that "/" in the relative path.
  scope.routePrefixLength = route.prefix.endsWith('/') ? route.prefix.length - 1 : route.prefix.length
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
  // Against DNS rebinding, before the badge or the body: the upstream's own check never sees the client's Host.
  if (target.protocol === 'mcp') {
    const refusal = ctx.mcpHostCheck.check(req, ctx.isTrustedPeer(req.socket.remoteAddress))
    if (refusal !== null) return refuseMcpUnread(ctx, scope, refusal)
  }
  // A2A clients fetch the public card anonymously (the 1.x SDK sends no credentials for it).
  if (target.protocol === 'a2a' && isPublicCardRequest(scope)) {
    if (scope.check === null) return enterPublicCard(ctx, scope)
    // Through a proxy the agent itself serves its public card: no badge, no decision, nothing to countersign.
    resume(ctx, scope, AT.last)
    return ANSWERED
  }
  return GO_ON
}

/** The metadata document, logged and counted as any gateway-made answer (no route, no badge, no decision). */
function answerMetadata(ctx: GatewayContext, scope: RequestScope, metadata: ResourceMetadataTable, server: ResourceServer): Step {
  if (scope.method !== 'GET' && scope.method !== 'HEAD') return refuse(ctx, scope, 'METHOD_NOT_ALLOWED', { allow: METADATA_METHODS })
  scope.status = sendResourceMetadata(scope.res, metadata.document(server, (scope.snapshot as GatewaySnapshot).issuer))
  ctx.telemetry.finish(scope)
  return ANSWERED
}
