import t from 'tap'
import { Counter, Gauge } from 'prom-client'
import { ClusterRegistry, withWorkers } from '../../../src/cluster/aggregate.js'
import type { WorkerMetrics } from '../../../src/cluster/messages.js'
import { createMetrics } from '../../../src/telemetry/metrics.js'

/** A worker's metrics as it answers the primary: the gateway's registry, with some requests and a bundle age. */
async function workerMetrics(requests: number, bundleAge: number): Promise<WorkerMetrics> {
  const metrics = createMetrics()
  metrics.gateway.requests.inc({ decision: 'ALLOW', mode: 'EM-GUARD', status_class: '2xx', error_code: '' }, requests)
  metrics.gateway.bundleAge.set(bundleAge)
  metrics.gateway.cacheEntries.set({ cache: 'badge' }, requests)
  return metrics.registry.getMetricsAsJSON() as Promise<WorkerMetrics>
}

function value(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `))
  return line === undefined ? undefined : Number(line.slice(series.length + 1))
}

t.test('the primary\'s scrape: counters summed, the stalest bundle, per-worker requests, its own metrics kept', async (t) => {
  const registry = new ClusterRegistry()
  const own = new Counter({ name: 'service_admin_requests_total', help: 'h', registers: [registry] })
  own.inc(3)
  new Gauge({ name: 'service_bundle_age_seconds', help: 'h', registers: [registry], aggregator: 'max' })
  const workers = new Map([[1, await workerMetrics(5, 12)], [2, await workerMetrics(7, 40)]])
  registry.collectWorkersFrom(async () => workers)
  const text = await registry.metrics()
  t.equal(value(text, 'service_gateway_requests_total{decision="ALLOW",mode="EM-GUARD",status_class="2xx",error_code=""}'), 12, 'requests summed')
  t.equal(value(text, 'service_bundle_age_seconds'), 40, 'bundle age: the oldest worker\'s')
  t.equal(value(text, 'service_gateway_cache_entries{cache="badge"}'), 12, 'cache entries summed')
  t.equal(value(text, 'service_gateway_worker_requests_total{worker="1"}'), 5)
  t.equal(value(text, 'service_gateway_worker_requests_total{worker="2"}'), 7)
  t.equal(value(text, 'service_admin_requests_total'), 3, 'the primary\'s own metric is there')
  t.notOk(/service_process_start_time_seconds/.test(text), 'start times are left out, not summed')
})

t.test('without answering workers the scrape is the primary\'s own', async (t) => {
  const registry = new ClusterRegistry()
  new Counter({ name: 'service_admin_requests_total', help: 'h', registers: [registry] }).inc()
  const text = await registry.metrics()
  t.equal(value(text, 'service_admin_requests_total'), 1)
  t.notOk(/worker_requests/.test(text))
})

t.test('readiness: ready with one worker of two, degraded saying so; not ready with none, with the worker\'s reason', async (t) => {
  const own = { ready: true, checks: { accepting: true }, reasons: {}, degraded: {} }
  const list = [{ worker: 1, pid: 10, ready: true }, { worker: 2, pid: 11, ready: false }]
  const one = withWorkers(own, { total: 2, ready: 1, workers: list, reports: new Map() })
  t.match(one, { ready: true, checks: { gateway: true }, degraded: { gateway_workers: { code: 'gateway_workers_degraded', message: '1 of 2 gateway workers ready' } }, workers: { total: 2, ready: 1, list } })
  const reports = new Map([[1, { ready: false, checks: { gateway: false }, reasons: { gateway: { code: 'no_snapshot', message: 'the gateway has not loaded its first snapshot' } } }]])
  const none = withWorkers(own, { total: 2, ready: 0, workers: list.map((w) => ({ ...w, ready: false })), reports })
  t.match(none, { ready: false, checks: { gateway: false }, reasons: { gateway: { code: 'no_ready_worker', message: '0 of 2 gateway workers ready: the gateway has not loaded its first snapshot' } } })
  t.match(withWorkers({ ...own, ready: false }, { total: 1, ready: 1, workers: [], reports: new Map() }), { ready: false }, 'the primary\'s own state still counts')
})
