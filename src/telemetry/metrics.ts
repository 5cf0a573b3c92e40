import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client'
import { BatchedHistogram } from './batched-histogram.js'

// Labels are bounded: route patterns (never raw paths), methods, status classes, error codes; never DIDs,
// ids or tokens (docs/wire-contract.md §12).
export interface Metrics {
  readonly registry: Registry
  readonly adminRequests: Counter<'method' | 'route' | 'status_class'>
  readonly adminLatency: Histogram<'method' | 'route'>
  /** Gateway events the decision-log export sent to its sink, or dropped (docs/console.md, "Export"). */
  readonly decisionLogEvents: Counter<'outcome'>
  readonly gateway: GatewayMetrics
}

/** The gateway's metrics (docs/wire-contract.md §12). Every label value comes from a fixed set. */
export interface GatewayMetrics {
  /** Requests by decision (ALLOW, DENY, ALLOW_OBSERVE, NONE before a decision), mode, status class, error code. */
  readonly requests: Counter<'decision' | 'mode' | 'status_class' | 'error_code'>
  /** Observed once per request: a {@link BatchedHistogram} rather than prom-client's (its docs say why). */
  readonly requestDuration: BatchedHistogram
  /** PDP round trips by PDP kind (embedded, http, opa), observed on every decision-cache miss: batched like requestDuration. */
  readonly pdpDuration: BatchedHistogram
  readonly pdpUnavailable: Counter<'pdp' | 'reason'>
  /** Age of the embedded bundle in seconds; set by a collect callback the gateway installs. */
  readonly bundleAge: Gauge<never>
  readonly bundleStale: Gauge<never>
  readonly cacheLookups: Counter<'cache' | 'result'>
  readonly breakglassOverrides: Counter<'result'>
  readonly cacheEntries: Gauge<'cache'>
  /** MCP messages by method (MCP's own names, else `other`), decision, and tool when the operator lists it. */
  readonly mcpMessages: Counter<'method' | 'decision' | 'tool'>
  readonly a2aCalls: Counter<'operation' | 'version' | 'decision'>
  /** Checks proxies asked (docs/ext-authz.md), by proxy, route protocol, decision and status class of the answer. */
  readonly checks: Counter<'proxy' | 'protocol' | 'decision' | 'status_class'>
  /** Decision events lost before the control plane stored them (the queue overflowed, or a report was refused). */
  readonly eventsDropped: Counter<never>
  /** Rate-limited requests counted by SERVICE_RATE_LIMIT_REDIS_FALLBACK because Redis could not answer, by behaviour. */
  readonly rateLimitFallback: Counter<'behaviour'>
  /** With REDIS_URL: 1 while rate limits are counted in Redis, 0 while the fallback counts them; set at scrape time. */
  readonly rateLimitRedisShared: Gauge<never>
  /** Gateway-only: 1 while the registry's watch stream is up, 0 while the snapshot is kept fresh by polling alone. */
  readonly snapshotPushConnected: Gauge<never>
  /** Snapshot parts refreshed because the watch stream named them (jwks, revocations, bundle). */
  readonly snapshotPushedRefreshes: Counter<'part'>
  /** Run at scrape time: the gateway hands over its plain-number counts. Returns an unregister function. */
  beforeCollect(hook: () => void): () => void
}

/** The process's metrics, in `registry` when given (a gateway primary's, which adds its workers' at scrape time). */
export function createMetrics(registry: Registry = new Registry()): Metrics {
  collectDefaultMetrics({ register: registry, prefix: 'service_' })
  return {
    registry,
    adminRequests: new Counter({
      name: 'service_admin_requests_total',
      help: 'Admin plane requests by route pattern and status class',
      labelNames: ['method', 'route', 'status_class'],
      registers: [registry],
    }),
    adminLatency: new Histogram({
      name: 'service_admin_request_duration_seconds',
      help: 'Admin plane request latency',
      labelNames: ['method', 'route'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5],
      registers: [registry],
    }),
    decisionLogEvents: new Counter({
      name: 'service_decision_log_events_total',
      help: 'Gateway decision events the decision-log export sent to its sink or dropped',
      labelNames: ['outcome'],
      registers: [registry],
    }),
    gateway: createGatewayMetrics(registry),
  }
}

function createGatewayMetrics(registry: Registry): GatewayMetrics {
  const registers = [registry]
  const hooks = new Set<() => void>()
  // Every metric fed by a hook runs all hooks: whichever the registry serialises first sees fresh values.
  const collect = (): void => {
    for (const hook of hooks) hook()
  }
  return {
    requests: new Counter({
      name: 'service_gateway_requests_total',
      help: 'Gateway requests by decision, enforcement mode, status class and error code',
      labelNames: ['decision', 'mode', 'status_class', 'error_code'],
      registers,
      collect,
    }),
    requestDuration: new BatchedHistogram({
      name: 'service_gateway_request_duration_seconds',
      help: 'Gateway request latency until the response head (gateway-made) or the upstream answer finished',
      buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10],
      registers,
    }),
    pdpDuration: new BatchedHistogram({
      name: 'service_pdp_request_duration_seconds',
      help: 'Policy decision latency by PDP kind (cache hits excluded)',
      labelNames: ['pdp'],
      buckets: [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1],
      registers,
    }),
    pdpUnavailable: new Counter({
      name: 'service_pdp_unavailable_total',
      help: 'Decisions that found the PDP unavailable, by PDP kind and reason',
      labelNames: ['pdp', 'reason'],
      registers,
    }),
    bundleAge: new Gauge({
      name: 'service_bundle_age_seconds',
      help: 'Age of the embedded policy bundle (time since it was last confirmed current)',
      // Summed over gateway workers an age means nothing: the oldest worker's is the one that matters.
      aggregator: 'max',
      registers,
    }),
    bundleStale: new Gauge({
      name: 'service_bundle_stale',
      help: '1 when the embedded bundle is older than SERVICE_BUNDLE_STALENESS_THRESHOLD',
      aggregator: 'max',
      registers,
    }),
    cacheLookups: new Counter({
      name: 'service_gateway_cache_lookups_total',
      help: 'Verified-badge and decision cache lookups by cache and result',
      labelNames: ['cache', 'result'],
      registers,
      collect,
    }),
    breakglassOverrides: new Counter({
      name: 'service_breakglass_total',
      help: 'Break-glass tokens presented, by result (accepted or the rejection reason)',
      labelNames: ['result'],
      registers,
    }),
    cacheEntries: new Gauge({
      name: 'service_gateway_cache_entries',
      help: 'Entries held by the gateway caches (badge, decision); each is bounded',
      labelNames: ['cache'],
      registers,
      collect,
    }),
    mcpMessages: new Counter({
      name: 'service_gateway_mcp_messages_total',
      help: 'MCP messages decided on MCP routes, by method, decision and (for tools in SERVICE_MCP_METRIC_TOOLS) tool',
      labelNames: ['method', 'decision', 'tool'],
      registers,
    }),
    a2aCalls: new Counter({
      name: 'service_gateway_a2a_calls_total',
      help: 'A2A calls decided on A2A routes, by operation (docs/a2a.md), protocol version and decision',
      labelNames: ['operation', 'version', 'decision'],
      registers,
    }),
    checks: new Counter({
      name: 'service_gateway_checks_total',
      help: 'Checks Envoy, nginx or Traefik asked the check service (docs/ext-authz.md), by proxy, route protocol, decision and status class of the answer',
      labelNames: ['proxy', 'protocol', 'decision', 'status_class'],
      registers,
    }),
    eventsDropped: new Counter({
      name: 'service_gateway_events_dropped_total',
      help: 'Decision events the gateway lost before the control plane stored them: its queue overflowed while reports failed, or a report was refused',
      registers,
    }),
    rateLimitFallback: new Counter({
      name: 'service_gateway_rate_limit_fallback_total',
      help: 'Rate-limited requests counted by SERVICE_RATE_LIMIT_REDIS_FALLBACK (local, deny, allow) because Redis could not answer',
      labelNames: ['behaviour'],
      registers,
    }),
    rateLimitRedisShared: new Gauge({
      name: 'service_gateway_rate_limit_redis_shared',
      help: 'With REDIS_URL: 1 while rate limits are counted in Redis across the fleet, 0 while the fallback counts them',
      registers,
      collect,
    }),
    snapshotPushConnected: new Gauge({
      name: 'service_gateway_snapshot_push_connected',
      help: 'Gateway-only process: 1 while the registry watch stream is up, 0 while the snapshot is kept fresh by polling only',
      registers,
    }),
    snapshotPushedRefreshes: new Counter({
      name: 'service_gateway_snapshot_pushed_refreshes_total',
      help: 'Snapshot parts refreshed because the registry watch stream announced a change, by part (jwks, revocations, bundle)',
      labelNames: ['part'],
      registers,
    }),
    beforeCollect(hook) {
      hooks.add(hook)
      return () => hooks.delete(hook)
    },
  }
}
