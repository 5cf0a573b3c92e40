/**
 * A gateway listening on loopback in front of protocol routes (MCP, A2A), for the tests that drive it with
 * the real SDKs: a snapshot of one authority key and one policy, the embedded PDP (or the test's), EM-STRICT
 * unless the environment says otherwise, a request log the test reads and the metrics.
 */
import type { Test } from 'tap'
import { randomUUID, type KeyObject } from 'node:crypto'
import type { AddressInfo } from 'node:net'
import { loadConfig } from '../../src/config/index.js'
import { buildBadgeClaims, signBadge } from '../../src/core/badge.js'
import type { TrustLevel } from '../../src/core/trust-level.js'
import { RouteTable } from '../../src/gateway/ingress/routes.js'
import { createEmbeddedPdp } from '../../src/gateway/pdp/embedded-pdp.js'
import type { PolicyDecisionPoint } from '../../src/gateway/pdp/pdp.js'
import { createGateway, type GatewayDeps, type RouteTarget } from '../../src/gateway/server.js'
import { SnapshotHolder } from '../../src/gateway/snapshot/snapshot.js'
import { Upstream, type UpstreamOptions } from '../../src/gateway/upstream/upstream.js'
import { createLogger } from '../../src/telemetry/logger.js'
import { createMetrics } from '../../src/telemetry/metrics.js'
import { jsonLineSink } from './recording-proxy.js'

export const GATEWAY_ISSUER = 'https://registry.test'
export const GATEWAY_WORKSPACE = '6f1c2a4e-0d7b-4c3e-9a57-1b2c3d4e5f60'
/** The caller the protocol tests' policies name. */
export const CALLER_DID = 'did:web:agents.example.com:caller'

/** A badge of the gateway's authority (key `k1`) at `level`, valid for an hour, with a fresh jti. */
export function authorityBadge(privateKey: KeyObject, level: TrustLevel, subject = CALLER_DID): string {
  const now = Math.floor(Date.now() / 1000)
  return signBadge(buildBadgeClaims({
    jti: `jti-${level}-${randomUUID()}`, issuer: GATEWAY_ISSUER, subject, issuedAt: now - 10, expiresAt: now + 3600, ial: '1', level, domain: 'agents.example.com',
  }), { kid: 'k1', privateKey })
}

export interface ProtocolGatewayOptions {
  readonly upstreamUrl: string
  /** The authority key `k1` the snapshot trusts. */
  readonly authorityKey: KeyObject
  readonly policy: Record<string, unknown>
  /** The routes, each forwarding to the one upstream pool. */
  readonly routes: (pool: Upstream) => readonly { prefix: string; value: RouteTarget }[]
  /** Environment over the defaults (SERVICE_* variables). */
  readonly env?: Record<string, string>
  readonly pdp?: PolicyDecisionPoint
  /** More of the gateway's dependencies (the card authority, did:web resolution, where rate limits are counted). */
  readonly deps?: Partial<Pick<GatewayDeps, 'cardAuthority' | 'didWeb' | 'rateLimits'>>
  /** The gateway's public URL is its own address, known once it listens. */
  readonly ownPublicUrl?: boolean
  /** The upstream pool's time limits; default a 10 s time-out and no stream idle limit. */
  readonly upstream?: UpstreamOptions
}

export interface ProtocolGateway {
  readonly url: string
  readonly holder: SnapshotHolder
  /** The request log so far, written out first (lines are batched for a few milliseconds). */
  logLines(): Record<string, unknown>[]
  metricsText(): Promise<string>
}

export async function startProtocolGateway(t: Test, options: ProtocolGatewayOptions): Promise<ProtocolGateway> {
  const holder = new SnapshotHolder()
  holder.swap({
    issuer: GATEWAY_ISSUER, keys: new Map([['k1', options.authorityKey]]), keysVersion: 'k1', revoked: new Set(),
    bundle: { revision: 'r1', data: { config: options.policy }, confirmedAt: Date.now() },
  })
  const pool = new Upstream(options.upstreamUrl, options.upstream ?? { timeoutMs: 10_000 })
  t.teardown(() => pool.close())
  const lines: Record<string, unknown>[] = []
  const loaded = loadConfig({
    DATABASE_URL: 'memory://', CA_ISSUER_URL: GATEWAY_ISSUER, SERVICE_UPSTREAM_URL: options.upstreamUrl, SERVICE_ENFORCEMENT_MODE: 'EM-STRICT',
    SERVICE_EMBEDDED_PDP: 'true', SERVICE_WORKSPACE: GATEWAY_WORKSPACE, ...options.env,
  }).gateway
  const config = { ...loaded } as { -readonly [K in keyof typeof loaded]: (typeof loaded)[K] }
  const metrics = createMetrics()
  const gateway = createGateway({
    config, holder, pdp: options.pdp ?? createEmbeddedPdp(), breakglassKey: null, logger: createLogger('info', jsonLineSink(lines)), metrics: metrics.gateway,
    routes: new RouteTable<RouteTarget>([...options.routes(pool)]), ...options.deps,
  })
  await new Promise<void>((resolve) => gateway.server.listen(0, '127.0.0.1', resolve))
  t.teardown(async () => {
    gateway.dispose()
    gateway.server.closeAllConnections()
    await new Promise<void>((resolve) => gateway.server.close(() => resolve()))
  })
  const url = `http://127.0.0.1:${(gateway.server.address() as AddressInfo).port}`
  if (options.ownPublicUrl === true) config.publicUrl = url
  return {
    url,
    holder,
    logLines: () => {
      gateway.flushLog()
      return lines
    },
    metricsText: () => metrics.registry.metrics(),
  }
}
