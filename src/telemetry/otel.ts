/**
 * OpenTelemetry tracing (docs/wire-contract.md §12): on only when the standard `OTEL_*` variables ask for it,
 * exported by the SDK's own reading of those variables (endpoint, protocol, headers, service name).
 * The gateway creates one span per proxied request by hand; no auto-instrumentation is loaded, so
 * the hot path pays nothing when tracing is off. Loaded with a dynamic import only when
 * `config.gateway.tracing` is set, so the SDK is not even parsed otherwise.
 */
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
