import { Counter, Histogram, Registry, collectDefaultMetrics } from 'prom-client'

/**
 * The one Prometheus registry of a process. Labels are bounded: route patterns (never raw paths),
 * methods, status classes and error codes; never DIDs, ids or tokens (protocol.md §12).
 */
export interface Metrics {
  readonly registry: Registry
  readonly adminRequests: Counter<'method' | 'route' | 'status_class'>
  readonly adminLatency: Histogram<'method' | 'route'>
}

export function createMetrics(): Metrics {
  const registry = new Registry()
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
  }
}
