/**
 * The gateway's HTTP server: each request runs the stages of pipeline.ts, any of them ending it through
 * stages/refuse (docs/architecture.md, "The path of a proxied request").
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { createCheckService, type CheckService } from './check/service.js'
import { clearCachesOnSwap, GatewayContext, type GatewayDeps } from './context.js'
import type { DecisionCache } from './decision-cache.js'
import { clientErrorHandler, connectHandler, STRICT_PARSER } from './ingress/framing.js'
import { RequestScope } from './request-scope.js'
import type { BadgeVerifier } from './identity/badge.js'
import { AT, resume } from './pipeline.js'
import { fail } from './stages/refuse.js'

export type { CardAuthority, GatewayDeps, RouteTarget } from './context.js'

export interface Gateway {
  readonly server: Server
  readonly badges: BadgeVerifier
  readonly decisions: DecisionCache
  /** The check services proxies ask (docs/ext-authz.md); null when no SERVICE_CHECK_*_PORT is set. Its owner listens and closes. */
  readonly check: CheckService | null
  flushLog(): void
  /** The server itself is closed by its owner. */
  dispose(): void
}

export function createGateway(deps: GatewayDeps): Gateway {
  const ctx = new GatewayContext(deps)
  const { telemetry, tracer, config } = ctx
  clearCachesOnSwap(ctx)
  const stopReporting = telemetry.reportOnCollect(ctx.badges, ctx.decisions)
  const stopBundleAge = telemetry.watchBundleAge(ctx.holder, ctx.pdp, ctx.staleAfterMs, ctx.now)

  function handle(req: IncomingMessage, res: ServerResponse): void {
    const started = performance.now()
    const scope = new RequestScope(req, res, started, ctx.now(), tracer === null ? null : tracer.startSpan('gateway.request'), config.enforcementMode)
    try {
      resume(ctx, scope, AT.admit)
    } catch (error) {
      fail(ctx, scope, error)
    }
  }

  // STRICT_PARSER: llhttp's header checks hold whatever the process flags say (framing.ts relies on it).
  // maxHeaderSize: node's 16 KiB default is too small for the delegation headers of a deep chain.
  const server = createServer({ keepAlive: true, maxHeaderSize: config.maxHeadBytes, ...STRICT_PARSER }, handle)
  server.on('clientError', clientErrorHandler)
  server.on('connect', connectHandler)
  return {
    server,
    badges: ctx.badges,
    decisions: ctx.decisions,
    check: createCheckService(ctx),
    flushLog() {
      telemetry.flush()
    },
    dispose() {
      stopBundleAge()
      telemetry.flush()
      stopReporting()
    },
  }
}
