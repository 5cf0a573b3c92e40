/**
 * Micro-benchmark of a rate-limited request's obligation step (src/gateway/rate-limits.ts): what counting
 * `rate_limit.apply` in Redis adds to a request, against the per-process bucket.
 *
 *   node dist/bench/rate-limits.js [iterations]   (default 20000; REDIS_URL, default redis://127.0.0.1:6379)
 *
 * Reports, per obligation run (one DID limit and one per-tool limit, as an MCP tools/call with both has):
 * - local: ObligationHandlers over this process's buckets (synchronous);
 * - redis, one at a time: the wall time of each run, so the round trip a rate-limited request waits
 *   (p50, p99), and the gateway process's CPU per run;
 * - redis, 64 in flight: runs per second through one connection, as a busy gateway sends them.
 * Keys live under a fresh prefix and are deleted at the end.
 */
import { randomBytes } from 'node:crypto'
import { performance } from 'node:perf_hooks'
import { Writable } from 'node:stream'
import { ObligationHandlers } from '../src/gateway/obligations.js'
import type { PdpObligation } from '../src/core/enforcement.js'
import { LocalRateLimits, RedisRateLimits } from '../src/gateway/rate-limits.js'
import { connectRedis } from '../src/net/redis-link.js'
import { createLogger } from '../src/telemetry/logger.js'

const ITERATIONS = Number(process.argv[2] ?? process.env.BENCH_ITERATIONS ?? 20_000)
const REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379'
const prefix = `bench-ratelimit-${randomBytes(4).toString('hex')}:`
const quiet = createLogger('silent', new Writable({ write(_c, _e, done) { done() } }))

// A budget no run exhausts, so every run takes the allowed path.
const obligations: PdpObligation[] = [
  { type: 'rate_limit.apply', params: { rpm: 1e9 } },
  { type: 'rate_limit.apply', params: { rpm: 1e9, key: 'did:web:bench.example:agent tool search' } },
]
const context = (): Record<string, unknown> => ({})

function percentile(sorted: Float64Array, p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))] as number
}

const local = new ObligationHandlers(new LocalRateLimits(), () => {})
for (let i = 0; i < 1000; i++) local.run(obligations, 'did:web:bench.example:agent', Date.now(), context)
let began = performance.now()
for (let i = 0; i < ITERATIONS; i++) local.run(obligations, 'did:web:bench.example:agent', Date.now(), context)
const localUs = ((performance.now() - began) * 1000) / ITERATIONS

const link = connectRedis(REDIS_URL, quiet)
const deadline = Date.now() + 5_000
while (link.state() !== 'ready' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20))
if (link.state() !== 'ready') throw new Error(`no Redis at ${REDIS_URL}`)
let fallbacks = 0
const shared = new ObligationHandlers(new RedisRateLimits({ link, prefix, fallback: 'local', onFallback: () => fallbacks++ }), () => {})
for (let i = 0; i < 1000; i++) await shared.run(obligations, 'did:web:bench.example:agent', Date.now(), context)

const latencies = new Float64Array(ITERATIONS)
const cpuBefore = process.cpuUsage()
began = performance.now()
for (let i = 0; i < ITERATIONS; i++) {
  const start = performance.now()
  await shared.run(obligations, 'did:web:bench.example:agent', Date.now(), context)
  latencies[i] = (performance.now() - start) * 1000
}
const sequentialMs = performance.now() - began
const cpu = process.cpuUsage(cpuBefore)
latencies.sort()

const IN_FLIGHT = 64
let next = 0
began = performance.now()
await Promise.all(Array.from({ length: IN_FLIGHT }, async () => {
  while (next++ < ITERATIONS) await shared.run(obligations, 'did:web:bench.example:agent', Date.now(), context)
}))
const concurrentMs = performance.now() - began

const keys = await link.client.keys(`${prefix}*`)
if (keys.length > 0) await link.client.del(...keys)
await link.close()

const out = {
  iterations: ITERATIONS,
  redis: REDIS_URL.replace(/\/\/[^@]*@/, '//'),
  local_us_per_run: Number(localUs.toFixed(2)),
  redis_sequential: {
    p50_us: Math.round(percentile(latencies, 0.5)),
    p99_us: Math.round(percentile(latencies, 0.99)),
    mean_us: Math.round((sequentialMs * 1000) / ITERATIONS),
    gateway_cpu_us_per_run: Number(((cpu.user + cpu.system) / ITERATIONS).toFixed(1)),
  },
  redis_64_in_flight_runs_per_s: Math.round(ITERATIONS / (concurrentMs / 1000)),
  fallbacks,
}
process.stdout.write(`${JSON.stringify(out, null, 2)}\n`)
