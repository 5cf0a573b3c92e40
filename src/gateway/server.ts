/**
 * The gateway (policy enforcement point): a bare `node:http` server whose handler runs the stages in
 * order and writes exactly one log line, the metrics and an optional span per request. Fastify stays
 * off this path (it costs proxy throughput: docs/performance.md). Everything per request is
 * read from one snapshot taken at the start; nothing here waits on the database.
 *
 * The path of a request, one module per stage, each a function of the gateway context and the scope:
 *
 * 1. stages/admit.ts       readiness, framing, canonical target, route, transaction id (ingress/)
 * 2. stages/badge.ts       the caller's badge
 * 3. stages/chain.ts       delegation envelopes, when the request carries them
 * 4. stages/breakglass.ts  an operator's override skips the PDP
 * 5. stages/decide.ts      decision cache, else the PDP
 * 6. stages/enforce.ts     obligations and the mode table: forward or refuse
 * 7. stages/forward.ts     the upstream answers the client (upstream/)
 *
 * Any stage may end the request through stages/refuse.ts; request-telemetry.ts writes what a finished
 * request leaves behind. Each stage runs synchronously and calls the next; only the chain stage
 * (did:web resolution) and a remote PDP can wait, and only they continue through a promise. A request
 * that needs neither (the common case: a cached badge and the embedded PDP or the decision cache) runs
 * from the request event to the upstream dispatch in one synchronous call, without the promise and
 * microtask hops of an async function per stage.
 *
 * `createGateway` builds an unstarted server; main.ts listens and owns shutdown.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { clearCachesOnSwap, GatewayContext, type GatewayDeps } from './context.js'
import type { DecisionCache } from './decision-cache.js'
import { clientErrorHandler, connectHandler, STRICT_PARSER } from './ingress/framing.js'
import { RequestScope } from './request-scope.js'
import { admit } from './stages/admit.js'
import type { BadgeVerifier } from './stages/badge.js'
import { fail } from './stages/refuse.js'

export type { GatewayDeps, RouteTarget } from './context.js'

export interface Gateway {
  readonly server: Server
  readonly badges: BadgeVerifier
  readonly decisions: DecisionCache
  /** Writes out queued request log lines now (they are batched for a few milliseconds under load). */
  flushLog(): void
  /** Stops the gateway's timers and writes out queued log lines; the server itself is closed by the owner. */
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
      admit(ctx, scope)
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
