/**
 * What a gateway primary serves for its workers: `/metrics` as one exposition (prom-client's cluster
 * aggregation: counters and histograms summed, each metric's own aggregator for gauges), plus the
 * requests of each worker under a `worker` label; `/readyz` ready while at least one worker is.
 */
import { AggregatorRegistry, Counter, Registry, type MetricObjectWithValues, type MetricValue } from 'prom-client'
import type { ReadinessNote, ReadinessReport } from '../http/readiness.js'
import type { WorkerMetrics } from './messages.js'
import type { WorkersReadiness } from './primary.js'

/** The gateway's request counter, whose per-worker totals the primary adds under a `worker` label. */
const REQUESTS_METRIC = 'service_gateway_requests_total'
const PER_WORKER_METRIC = 'service_gateway_worker_requests_total'

/** One worker's total of the request counter, as a series of the per-worker metric. */
function perWorkerRequests(byWorker: ReadonlyMap<number, WorkerMetrics>): MetricObjectWithValues<MetricValue<string>> {
  const values: MetricValue<string>[] = []
  for (const [worker, metrics] of byWorker) {
    const requests = metrics.find((metric) => metric.name === REQUESTS_METRIC)
    const total = requests === undefined ? 0 : requests.values.reduce((sum, value) => sum + value.value, 0)
    values.push({ labels: { worker: String(worker) }, value: total })
  }
  const help = 'Gateway requests by gateway worker (SERVICE_GATEWAY_WORKERS); their sum is service_gateway_requests_total'
  // The shape getMetricsAsJSON() answers, which is all aggregate() reads.
  return { name: PER_WORKER_METRIC, help, type: 'counter', aggregator: 'sum', values } as unknown as MetricObjectWithValues<MetricValue<string>>
}

/**
 * A registry whose scrape adds the workers' metrics to its own: the primary's own (the admin plane's in the
 * appliance, process metrics included) and every answering worker's are aggregated as one.
 */
export class ClusterRegistry extends Registry {
  #workers: () => Promise<ReadonlyMap<number, WorkerMetrics>> = async () => new Map()

  /** Where the workers' metrics come from (set once the workers are forked). */
  collectWorkersFrom(source: () => Promise<ReadonlyMap<number, WorkerMetrics>>): void {
    this.#workers = source
  }

  override async metrics(): Promise<string> {
    const [own, byWorker] = await Promise.all([this.getMetricsAsJSON(), this.#workers()])
    const sets = [own as WorkerMetrics, ...byWorker.values()]
    if (byWorker.size > 0) sets.push([perWorkerRequests(byWorker)])
    return AggregatorRegistry.aggregate(sets).metrics()
  }
}

/** The primary's own metric: workers that exited without being asked to (each is restarted, or ends a crash loop). */
export function workerExitsCounter(registry: Registry): Counter {
  return new Counter({
    name: 'service_gateway_worker_exits_total',
    help: 'Gateway workers that exited without being asked to (SERVICE_GATEWAY_WORKERS); each is restarted unless they crash-loop',
    registers: [registry],
  })
}

/** `k of N` in words, for readiness notes. */
function counted(workers: WorkersReadiness): string {
  return `${workers.ready} of ${workers.total} gateway workers ready`
}

/**
 * A readiness report with the workers' state folded in: the gateway check holds while at least one worker
 * is ready (the others are listed as degraded); with none, the first worker's own reason is given.
 */
export function withWorkers(report: ReadinessReport, workers: WorkersReadiness): ReadinessReport {
  const reasons: Record<string, ReadinessNote> = { ...report.reasons }
  const degraded: Record<string, ReadinessNote> = { ...report.degraded }
  if (workers.ready === 0) {
    const first = [...workers.reports.values()].map((r) => r.reasons?.gateway).find((note) => note !== undefined)
    reasons.gateway = { code: 'no_ready_worker', message: `${counted(workers)}${first === undefined ? '' : `: ${first.message}`}` }
  } else if (workers.ready < workers.total) {
    degraded.gateway_workers = { code: 'gateway_workers_degraded', message: counted(workers) }
  }
  const gateway = workers.ready > 0
  return {
    ...report,
    ready: report.ready && gateway,
    checks: { ...report.checks, gateway },
    reasons,
    degraded,
    workers: { total: workers.total, ready: workers.ready, list: workers.workers },
  }
}
