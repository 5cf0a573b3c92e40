// Tracing (docs/wire-contract.md §12): imported only when configured, spans made by hand and no
// auto-instrumentation, so the hot path pays nothing when tracing is off.
import { trace, type Tracer } from '@opentelemetry/api'
import { NodeSDK } from '@opentelemetry/sdk-node'

export interface Tracing {
  readonly tracer: Tracer
  shutdown(): Promise<void>
}

/** Starts the SDK (traces only: metrics go to Prometheus, logs to pino). */
export function startTracing(serviceName = 'service-gateway'): Tracing {
  const sdk = new NodeSDK({
    serviceName,
    instrumentations: [],
    // Metrics and logs have their own pipelines here; without these the SDK would try to export both.
    metricReaders: [],
    logRecordProcessors: [],
  })
  sdk.start()
  return {
    tracer: trace.getTracer('service.gateway'),
    shutdown: () => sdk.shutdown(),
  }
}
