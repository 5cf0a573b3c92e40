/**
 * Redis is optional at every moment (the rate limiter's shared counters): the appliance starts with
 * Redis unreachable, counts locally meanwhile, warns once, reports Redis as degraded on /readyz while
 * staying ready, and shares its counters again once Redis returns, all without a restart. The real
 * Redis sits behind a TCP proxy that the test cuts and restores; the server itself is never touched.
 */
import t from 'tap'
import { mkdtempSync } from 'node:fs'
import { createServer, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { Writable } from 'node:stream'
import { generateApiKeySecret } from '../../../src/core/api-key.js'
import { loadConfig } from '../../../src/config/index.js'
import { startAppliance, type Appliance } from '../../../src/main.js'
import { createLogger } from '../../../src/telemetry/logger.js'
import { createTestDatabase } from '../../helpers/database.js'
import { startTcpProxy } from '../../helpers/tcp-proxy.js'

const REDIS = new URL(process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379')
const LIMIT = 5

interface Running {
  appliance: Appliance
  key: string
  lines: () => Record<string, unknown>[]
}

interface Teardown {
  teardown(fn: () => unknown): void
}

async function start(t: Teardown, redisPort: number): Promise<Running> {
  const database = await createTestDatabase(t)
  const key = generateApiKeySecret()
  const config = loadConfig({
    DATABASE_URL: database.url ?? 'memory://',
    SERVICE_DATA_DIR: mkdtempSync(path.join(tmpdir(), 'svc-redis-')),
    PORT: '0',
    SERVICE_HOST: '127.0.0.1',
    SERVICE_BOOTSTRAP_API_KEY: key,
    SERVICE_RATE_LIMIT_PER_MINUTE: String(LIMIT),
    REDIS_URL: `redis://127.0.0.1:${redisPort}`,
  })
  const text: string[] = []
  const sink = new Writable({ write(chunk, _encoding, done) { text.push(String(chunk)); done() } })
  const appliance = await startAppliance(config, { logger: createLogger('debug', sink) })
  t.teardown(() => appliance.close())
  const lines = (): Record<string, unknown>[] => text.join('').split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Record<string, unknown>)
  return { appliance, key, lines }
}

async function get(running: Running, urlPath: string): Promise<{ status: number; body: any; headers: Headers; ms: number }> {
  const began = performance.now()
  const res = await fetch(`${running.appliance.adminUrl}${urlPath}`, { headers: { authorization: `Bearer ${running.key}` } })
  const body = await res.json().catch(() => null)
  return { status: res.status, body, headers: res.headers, ms: performance.now() - began }
}

async function waitFor(ms: number, check: () => Promise<boolean>): Promise<boolean> {
  const deadline = Date.now() + ms
  while (Date.now() < deadline) {
    if (await check()) return true
    await new Promise((r) => setTimeout(r, 50))
  }
  return check()
}

const warnings = (running: Running): number => running.lines().filter((l) => l.msg === 'redis unavailable; rate-limit counters are local to this instance until it returns').length

t.test('Redis unreachable at start, then back, then gone again', async (t) => {
  const proxy = await startTcpProxy(t, { host: REDIS.hostname, port: Number(REDIS.port || 6379) })
  await proxy.cut()
  const running = await start(t, proxy.port)
  t.pass('the appliance started with Redis unreachable')

  const ready = await get(running, '/readyz')
  t.equal(ready.status, 200, 'ready: the service works without Redis')
  t.equal(ready.body.degraded?.redis?.code, 'redis_unavailable', 'Redis reported as degraded')

  const statuses: number[] = []
  let slowest = 0
  for (let i = 0; i < LIMIT + 1; i++) {
    const res = await get(running, '/v1/agents')
    statuses.push(res.status)
    slowest = Math.max(slowest, res.ms)
  }
  t.same(statuses, [200, 200, 200, 200, 200, 429], 'the limit still holds, counted locally')
  t.ok(slowest < 1000, `no request waits for Redis (slowest ${slowest.toFixed(0)} ms)`)
  // Reconnection attempts run every few hundred ms; each failure must not add a warning.
  await new Promise((r) => setTimeout(r, 1500))
  t.equal(warnings(running), 1, 'one warning for the outage, not one per retry or request')
  t.ok(running.lines().some((l) => l.msg === 'redis still unavailable'), 'the retries are logged at debug level')

  await proxy.restore()
  t.ok(await waitFor(10_000, async () => (await get(running, '/readyz')).body.degraded?.redis === undefined), 'Redis no longer degraded after it returns')
  t.ok(running.lines().some((l) => l.msg === 'redis connection restored; rate-limit counters are shared again'), 'the recovery is logged')
  const shared = await get(running, '/v1/agents')
  t.equal(shared.status, 200, 'counted in Redis now (a fresh shared window, not the exhausted local one)')
  t.equal(shared.headers.get('x-ratelimit-remaining'), String(LIMIT - 1))

  await proxy.cut()
  const during = await get(running, '/v1/agents')
  t.ok(during.status === 200 || during.status === 429, `a request during the second outage is answered (${during.status})`)
  t.ok(during.ms < 1000, 'without waiting for Redis')
  t.ok(await waitFor(5000, async () => (await get(running, '/readyz')).body.degraded?.redis?.code === 'redis_unavailable'), 'degraded again')
  t.equal((await get(running, '/readyz')).status, 200, 'and still ready')
  t.equal(warnings(running), 2, 'one more warning for the second outage')
})

t.test('a Redis that accepts connections but never answers: requests are not held', async (t) => {
  const sockets = new Set<Socket>()
  const silent = createServer((socket) => { sockets.add(socket) })
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => {
    for (const socket of sockets) socket.destroy()
    silent.close(() => resolve())
  }))
  const address = silent.address()
  const running = await start(t, typeof address === 'object' && address !== null ? address.port : 0)
  const res = await get(running, '/v1/agents')
  t.equal(res.status, 200)
  t.ok(res.ms < 1000, `answered without waiting (${res.ms.toFixed(0)} ms)`)
  const ready = await get(running, '/readyz')
  t.equal(ready.status, 200)
  t.equal(ready.body.degraded?.redis?.code, 'redis_unavailable', 'a Redis that is not ready is degraded')
})
