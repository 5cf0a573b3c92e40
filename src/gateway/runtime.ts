// Assembles a gateway from configuration for the appliance and `agent-trust gateway`; main.ts listens.
import { readFile } from 'node:fs/promises'
import type { Tracer } from '@opentelemetry/api'
import type { Config } from '../config/index.js'
import { loadBreakglassPublicKey } from '../core/breakglass.js'
import type { DecisionFeed, OverrideLog } from '../telemetry/decision-feed.js'
import type { ReportedRoute } from '../telemetry/decision-shipper.js'
import type { Logger } from '../telemetry/logger.js'
import type { GatewayMetrics } from '../telemetry/metrics.js'
import { createEmbeddedPdp } from './pdp/embedded-pdp.js'
import { createHttpPdp } from './pdp/http-pdp.js'
import type { PolicyDecisionPoint } from './pdp/pdp.js'
import type { CardAuthority } from './context.js'
import type { DidKeySource } from './identity/chain.js'
import { createGateway, type Gateway, type RouteTarget } from './server.js'
import { SnapshotHolder, type SnapshotSource } from './snapshot/snapshot.js'
import { defaultResource } from '../core/protected-resource.js'
import { resourceServer } from './ingress/resource-metadata.js'
import { loadRoutesFile, metadataPathProblem, RouteTable, type RouteDefinition } from './ingress/routes.js'
import { Upstream } from './upstream/upstream.js'
import { retainTickObjectShape } from '../http/tick-object-shape.js'
import type { RedisLink } from '../net/redis-link.js'
import { gatewayRateLimits } from './rate-limits.js'

export interface GatewayRuntime {
  readonly gateway: Gateway
  readonly holder: SnapshotHolder
  readonly pdp: PolicyDecisionPoint | null
  /** Every route with the mode it enforces (its own, else the default) and its protocol, as heartbeats describe them. */
  readonly routes: readonly ReportedRoute[]
  /** With REDIS_URL: whether rate limits are counted in Redis now (false while the fallback counts); else null. */
  readonly rateLimitsShared: (() => boolean) | null
  /** Stops the source and closes upstream and PDP pools (after the server stopped accepting). */
  close(): Promise<void>
}

/** Thrown for configuration the gateway cannot start with (bad routes file, unreadable key file). */
export class GatewayStartError extends Error {
  readonly code = 'GATEWAY_START_FAILED'
  override readonly name = 'GatewayStartError'
}

async function routeDefinitions(config: Config['gateway']): Promise<RouteDefinition[]> {
  if (config.routesFile !== null) return loadRoutesFile(config.routesFile, config.publicUrl)
  if (config.upstreamUrl !== null) {
    return [{
      prefix: '/', upstream: config.upstreamUrl, mode: null,
      caseInsensitive: config.upstreamCaseInsensitive, caseSensitive: config.upstreamCaseSensitive, headersWithUnderscores: config.headersWithUnderscores,
      hideDenyReason: config.hideDenyReason, protocol: config.upstreamProtocol, resourceServer: upstreamResourceServer(config),
      requireCardSignature: false, cardSigner: null,
    }]
  }
  throw new GatewayStartError('the gateway needs SERVICE_UPSTREAM_URL or SERVICE_ROUTES_FILE')
}

/** The SERVICE_UPSTREAM_URL route as a resource server, checked as a routes file's route is. */
function upstreamResourceServer(config: Config['gateway']): RouteDefinition['resourceServer'] {
  if (!config.upstreamResourceServer) return null
  // The configuration refuses a production start without a public URL for this route.
  const resource = config.upstreamResource ?? defaultResource(config.publicUrl as string, '/')
  const problem = metadataPathProblem(resource)
  if (problem !== null) throw new GatewayStartError(`SERVICE_UPSTREAM_RESOURCE: ${problem}`)
  return { resource, requireAudience: config.upstreamRequireAudience }
}

function createPdp(config: Config['gateway']): PolicyDecisionPoint | null {
  if (config.embeddedPdp) return createEmbeddedPdp()
  if (config.pdpEndpoint !== null) {
    return createHttpPdp({ endpoint: config.pdpEndpoint, protocol: config.pdpProtocol, timeoutMs: config.pdpTimeoutMs, pepId: config.pepId })
  }
  return null
}

export async function startGatewayRuntime(
  config: Config['gateway'],
  deps: {
    source: SnapshotSource; logger: Logger; metrics: GatewayMetrics; tracer?: Tracer | null; didWeb?: DidKeySource | null; cardAuthority?: CardAuthority | null
    feed?: { readonly decisions: DecisionFeed; readonly overrides: OverrideLog } | null
    /** With REDIS_URL: the link the fleet's rate limits are counted over; null or absent: in this process. */
    redis?: RedisLink | null
  },
): Promise<GatewayRuntime> {
  const definitions = await routeDefinitions(config)
  // Every proxied request queues nextTick entries; keep their hidden classes alive (see the module).
  retainTickObjectShape()
  let breakglassKey = null
  if (config.breakglassPublicKeyPath !== null) {
    try {
      breakglassKey = loadBreakglassPublicKey(await readFile(config.breakglassPublicKeyPath, 'utf8'))
    } catch (error) {
      throw new GatewayStartError(`SERVICE_BREAKGLASS_PUBLIC_KEY (${config.breakglassPublicKeyPath}): ${(error as Error).message}`, { cause: error })
    }
  }
  // One pool per distinct upstream origin+path, shared by the routes that name it.
  const upstreams = new Map<string, Upstream>()
  const table = new RouteTable<RouteTarget>(definitions.map((definition) => {
    let upstream = upstreams.get(definition.upstream)
    if (upstream === undefined) {
      upstream = new Upstream(definition.upstream, { timeoutMs: config.upstreamTimeoutMs, streamIdleMs: config.upstreamStreamIdleMs })
      upstreams.set(definition.upstream, upstream)
    }
    const { prefix, mode, caseInsensitive, caseSensitive, headersWithUnderscores, hideDenyReason, protocol, requireCardSignature, cardSigner } = definition
    const server = definition.resourceServer
    // Every target has every member, so the stages read targets of one shape.
    const target: RouteTarget = {
      upstream, mode, caseInsensitive, caseSensitive, headersWithUnderscores, hideDenyReason, protocol, requireCardSignature, cardSigner: cardSigner ?? undefined,
      resourceServer: server === null ? undefined : resourceServer(server.resource, server.requireAudience),
    }
    return { prefix, caseInsensitive, value: target }
  }))
  const pdp = createPdp(config)
  const holder = new SnapshotHolder()
  const rateLimits = gatewayRateLimits(deps.redis ?? null, config, deps.metrics)
  const gateway = createGateway({
    config, holder, pdp, routes: table, breakglassKey, logger: deps.logger, metrics: deps.metrics, tracer: deps.tracer ?? null, didWeb: deps.didWeb ?? null,
    cardAuthority: deps.cardAuthority ?? null, feed: deps.feed ?? null, rateLimits: rateLimits.limits,
  })
  const closeAll = async (): Promise<void> => {
    await gateway.check?.close()
    gateway.dispose()
    rateLimits.stop()
    await deps.source.close().catch(() => {})
    await Promise.all([...upstreams.values()].map((u) => u.close().catch(() => {})))
    await pdp?.close().catch(() => {})
  }
  try {
    await deps.source.start(holder)
  } catch (error) {
    await closeAll()
    throw error
  }
  deps.logger.info(
    { routes: definitions.length, pdp: pdp?.kind ?? 'none', mode: config.enforcementMode, breakglass: breakglassKey !== null },
    'gateway snapshot loaded',
  )
  const routes = definitions.map((definition) => ({ prefix: definition.prefix, mode: definition.mode ?? config.enforcementMode, protocol: definition.protocol }))
  return { gateway, holder, pdp, routes, rateLimitsShared: rateLimits.shared, close: closeAll }
}
