/**
 * One control plane for a fleet, on one PostgreSQL schema and one Redis (a key prefix of this run, behind a
 * TCP proxy the test cuts): two admin instances (`agent-trust serve`), A with its own gateway (the
 * appliance's, SERVICE_UPSTREAM_URL) and B without one, and two gateway-only processes (`agent-trust
 * gateway`), C reporting to A and D reporting to B with their registry keys. What must hold:
 *
 * - every decision, made through A's gateway, C or D, is listed by both A and B within 2 s, with its
 *   gateway_id;
 * - an SSE stream opened on A receives the decisions made through D (which reports to B), and a stream
 *   resumes on B with the Last-Event-ID A sent;
 * - with Redis away every gateway keeps serving, C drops and counts what overflows its queue (on its
 *   /metrics), both admin instances say they are degraded (the readiness body) and answer 503, and no
 *   process exits; once Redis is back, every gateway's reporting resumes, the loss shows as a gap naming C,
 *   and no event is listed twice;
 * - `GET /v1/gateways` on either instance lists the three gateways, and C turns stale once stopped.
 *
 * PGlite is a single-process database, so the file is skipped with SERVICE_TEST_DB=pglite.
 */
import t from 'tap'
import { randomBytes } from 'node:crypto'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { Redis } from 'ioredis'
import { generateApiKeySecret } from '../../src/core/api-key.js'
import { SseReader, type SseEvent } from '../../src/core/sse.js'
import { bootstrap, BOOTSTRAP_KEY_FILE } from '../../src/admin/services/credentials.js'
import { loadOrCreateKeyFile } from '../../src/authority/key-ring.js'
import { adminCall, agentWithBadge, exitSafeTeardown, SLOW_START, startService, type RunningService } from '../helpers/appliance.js'
import { BACKEND, createTestDatabase } from '../helpers/database.js'
import { startUpstream } from '../helpers/upstream-server.js'
import { startTcpProxy } from '../helpers/tcp-proxy.js'

t.setTimeout(300_000)

const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379'
const ISSUER = 'http://registry.test'

async function until<T>(ms: number, fn: () => Promise<T | undefined>): Promise<T | undefined> {
  const deadline = Date.now() + ms
  for (;;) {
    const value = await fn()
    if (value !== undefined || Date.now() > deadline) return value
    await new Promise((r) => setTimeout(r, 50))
  }
}

async function openStream(url: string, key: string, headers: Record<string, string> = {}): Promise<{ next: (match: (e: SseEvent) => boolean, ms: number) => Promise<SseEvent | undefined>; close: () => void }> {
  const abort = new AbortController()
  const res = await fetch(`${url}/v1/gateway/decisions/stream`, { headers: { authorization: `Bearer ${key}`, ...headers }, signal: abort.signal })
  if (res.status !== 200) throw new Error(`stream answered ${res.status}`)
  const events: SseEvent[] = []
  const reader = new SseReader(1 << 20)
  void (async () => {
    try {
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) reader.push(chunk, (e) => { if (e.event !== undefined) events.push(e) })
    } catch {
      // aborted
    }
  })()
  let read = 0
  return {
    close: () => abort.abort(),
    async next(match, ms) {
      const deadline = Date.now() + ms
      while (Date.now() < deadline) {
        while (read < events.length) {
          const e = events[read++] as SseEvent
          if (match(e)) return e
        }
        await new Promise((r) => setTimeout(r, 20))
      }
      return undefined
    },
  }
}

if (BACKEND === 'pglite') {
  t.test('a gateway fleet on one control plane', { skip: 'SERVICE_TEST_DB=pglite: an embedded PGlite database cannot be shared between processes' }, () => {})
} else {
  const teardown = exitSafeTeardown(t)
  const operatorKey = generateApiKeySecret()
  const dir = mkdtempSync(path.join(tmpdir(), 'svc-e2e-fleet-'))
  const prefix = `test-fleet-${randomBytes(4).toString('hex')}:`
  t.teardown(async () => {
    const redis = new Redis(REDIS_URL)
    const keys = await redis.keys(`${prefix}*`)
    if (keys.length > 0) await redis.del(...keys)
    await redis.quit()
  })
  const database = await createTestDatabase(t)
  await bootstrap(database.db, { configuredKey: operatorKey, keyFile: path.join(dir, BOOTSTRAP_KEY_FILE) })
  const caKeyPath = path.join(dir, 'ca-keys.json')
  await loadOrCreateKeyFile(caKeyPath)
  const upstream = await startUpstream(t)
  const redisTarget = new URL(REDIS_URL)
  const proxy = await startTcpProxy(t, { host: redisTarget.hostname, port: Number(redisTarget.port || 6379) })
  const shared = {
    DATABASE_URL: database.url as string,
    REDIS_URL: `redis://127.0.0.1:${proxy.port}`,
    SERVICE_DECISIONS_REDIS_PREFIX: prefix,
    SERVICE_BOOTSTRAP_API_KEY: operatorKey,
    CA_KEY_PATH: caKeyPath,
    CA_ISSUER_URL: ISSUER,
    SERVICE_ENFORCEMENT_MODE: 'EM-GUARD',
    SERVICE_RATE_LIMIT_PER_MINUTE: '100000',
    SERVICE_GATEWAY_HEARTBEAT_INTERVAL: '300ms',
  }
  const [a, b] = await Promise.all([
    startService(teardown, { ...shared, SERVICE_UPSTREAM_URL: upstream.url, SERVICE_PEP_ID: 'gw-e2e-a' }, SLOW_START),
    startService(teardown, shared, SLOW_START),
  ]) as [RunningService, RunningService]
  const gatewayOnly = (key: string, registryUrl: string, env: Record<string, string>): Promise<RunningService> =>
    startService(teardown, {
      SERVICE_REGISTRY_URL: registryUrl,
      SERVICE_REGISTRY_KEY: key,
      SERVICE_UPSTREAM_URL: upstream.url,
      CA_ISSUER_URL: ISSUER,
      SERVICE_ENFORCEMENT_MODE: 'EM-GUARD',
      SERVICE_GATEWAY_HEARTBEAT_INTERVAL: '300ms',
      ...env,
    }, { command: 'gateway', ...SLOW_START })
  const keyC = (await adminCall(a.adminUrl, operatorKey, 'POST', '/v1/keys', { name: 'gateway-c' })).body.data.key as string
  const keyD = (await adminCall(a.adminUrl, operatorKey, 'POST', '/v1/keys', { name: 'gateway-d' })).body.data.key as string
  const [c, d] = await Promise.all([
    // A small queue, so that an outage overflows it within a few requests.
    gatewayOnly(keyC, a.adminUrl, { SERVICE_CONSOLE_DECISIONS_BUFFER: '5' }),
    gatewayOnly(keyD, b.adminUrl, { SERVICE_PEP_ID: 'gw-e2e-d' }),
  ])
  const agent = await agentWithBadge(a.adminUrl, operatorKey, 'fleet-agent')
  const orgId = (await adminCall(a.adminUrl, operatorKey, 'GET', '/v1/me')).body.data.org_id as string
  const cId = c.logLines().find((line) => line.msg === 'gateway id')?.gateway_id as string
  const gateways: [name: string, url: string, id: string][] = [
    ['A\'s own gateway', a.gatewayUrl as string, 'gw-e2e-a'], ['C', c.gatewayUrl as string, cId], ['D', d.gatewayUrl as string, 'gw-e2e-d'],
  ]

  const through = async (gatewayUrl: string, requestPath: string): Promise<number> => {
    const res = await fetch(`${gatewayUrl}${requestPath}`, { headers: { authorization: `Bearer ${agent.token}` } })
    await res.arrayBuffer()
    return res.status
  }
  const all = async (url: string): Promise<any[] | undefined> => {
    const res = await adminCall(url, operatorKey, 'GET', '/v1/gateway/decisions?limit=1000')
    return res.status === 200 ? res.body.data as any[] : undefined
  }
  const listed = async (url: string, requestPath: string): Promise<any> => (await all(url))?.find((e) => e.path === requestPath)
  const onBoth = (requestPath: string, ms: number) => Promise.all([until(ms, () => listed(a.adminUrl, requestPath)), until(ms, () => listed(b.adminUrl, requestPath))])
  const heartbeatAfter = (url: string, id: string, since: number) => async () => {
    const res = await adminCall(url, operatorKey, 'GET', '/v1/gateways')
    const entry = res.status === 200 ? (res.body.data as any[]).find((g) => g.gateway_id === id) : undefined
    return entry !== undefined && Date.parse(entry.last_heartbeat) >= since ? entry : undefined
  }

  t.test('every gateway\'s decision: on both admin instances within 2 s, with its gateway_id', async (t) => {
    t.equal(b.gatewayUrl, null, 'B is an admin instance only')
    t.match(cId, /^gw-[0-9a-f]{12}$/, 'C generated and logged its id')
    t.match(d.logLines().find((line) => line.msg === 'gateway id'), { gateway_id: 'gw-e2e-d' }, 'D logged the id it was given')
    for (const [name, url, id] of gateways) {
      const requestPath = `/fleet/through-${id}`
      const sent = Date.now()
      t.equal(await through(url, requestPath), 200, `${name} serves`)
      const [onA, onB] = await onBoth(requestPath, 2000)
      const took = Date.now() - sent
      t.match(onA, { gateway_id: id, decision: 'ALLOW', org_id: orgId, agent_did: agent.did }, `A lists ${name}'s decision, attributed to the badge's organization`)
      t.same(onB, onA, `B lists the same event, with the same seq (${took} ms)`)
    }
  })

  t.test('an SSE stream on A receives the decisions made through D, which reports to B; a stream resumes on B', async (t) => {
    const stream = await openStream(a.adminUrl, operatorKey)
    t.teardown(() => stream.close())
    t.equal(await through(d.gatewayUrl as string, '/fleet/streamed-d'), 200)
    const streamed = await stream.next((e) => e.event === 'decision' && JSON.parse(e.data ?? '{}').path === '/fleet/streamed-d', 3000)
    t.ok(streamed, 'A\'s stream receives it')
    t.match(JSON.parse(streamed?.data ?? '{}'), { gateway_id: 'gw-e2e-d', decision: 'ALLOW' })
    const onA = await until(2000, () => listed(a.adminUrl, '/fleet/streamed-d'))
    t.equal(streamed?.id, String(onA?.seq), 'the stream id is the store\'s number')

    const resumed = await openStream(b.adminUrl, operatorKey, { 'last-event-id': String(Number(streamed?.id) - 1) })
    t.teardown(() => resumed.close())
    const first = await resumed.next((e) => e.event === 'decision', 3000)
    t.equal(first?.id, streamed?.id, 'B resumes after the id A sent')
  })

  t.test('Redis away: the gateways keep serving, C counts its drops, both instances are degraded and 503, nothing exits; back, every gateway reports again', async (t) => {
    const dropped = async (): Promise<number> => {
      const text = await (await fetch(`${c.adminUrl}/metrics`)).text()
      return Number(/^service_gateway_events_dropped_total (\d+)/m.exec(text)?.[1] ?? 'NaN')
    }
    t.equal(await dropped(), 0, 'nothing dropped so far')
    await proxy.cut()
    for (const [name, instance] of [['A', a], ['B', b]] as const) {
      const degraded = await until(5000, async () => {
        const ready = await fetch(`${instance.adminUrl}/readyz`)
        const body = await ready.json() as { status: string; degraded?: Record<string, unknown> }
        return ready.status === 200 && body.degraded?.redis !== undefined ? body : undefined
      })
      t.match(degraded, { status: 'ready', degraded: { redis: { code: 'redis_unavailable' } } }, `${name} stays ready and says Redis is degraded`)
      t.match(await adminCall(instance.adminUrl, operatorKey, 'GET', '/v1/gateway/decisions'), { status: 503, body: { error: 'decision_store_unavailable' } }, `${name}'s reads are 503 with a clear code`)
    }
    for (let i = 0; i < 12; i++) t.equal(await through(c.gatewayUrl as string, `/fleet/outage-${i}`), 200, `C serves request ${i} during the outage`)
    t.equal(await through(a.gatewayUrl as string, '/fleet/outage-a'), 200, 'A\'s own gateway serves during the outage')
    t.equal(await through(d.gatewayUrl as string, '/fleet/outage-d'), 200, 'D serves during the outage')
    const counted = await until(10_000, async () => ((await dropped()) >= 7 ? true : undefined))
    t.ok(counted, `what overflowed C's queue of 5 is counted on C's /metrics (${await dropped()})`)
    t.match(await (await fetch(`${a.adminUrl}/metrics`)).text(), /^service_gateway_events_dropped_total \d+$/m, 'an appliance\'s own gateway counts on its admin plane\'s /metrics')
    for (const [name, service] of [['A', a], ['B', b], ['C', c], ['D', d]] as const) {
      t.equal((await fetch(`${service.adminUrl}/healthz`)).status, 200, `${name} answers its health check`)
      t.equal(service.child.exitCode, null, `${name} did not exit`)
    }

    await proxy.restore()
    const restoredAt = Date.now()
    // No request meanwhile: C's queue still holds the newest five, which its next retry delivers.
    const back = await until(30_000, heartbeatAfter(b.adminUrl, cId, restoredAt))
    t.ok(back, 'C reports again once Redis is back, without a restart')
    t.ok(back?.events_dropped >= 7, `the loss is on C's entry (${back?.events_dropped})`)
    for (const id of ['gw-e2e-a', 'gw-e2e-d']) t.ok(await until(30_000, heartbeatAfter(a.adminUrl, id, restoredAt)), `${id} reports again`)
    const kept = await until(10_000, async () => {
      const events = await all(b.adminUrl)
      return events !== undefined && ['/fleet/outage-11', '/fleet/outage-a', '/fleet/outage-d'].every((p) => events.some((e) => e.path === p)) ? events : undefined
    })
    t.ok(kept, 'the events the gateways kept during the outage arrived')
    t.notOk(kept?.some((e) => e.path === '/fleet/outage-0'), 'the oldest of C\'s overflowed')
    const replay = await openStream(b.adminUrl, operatorKey, { 'last-event-id': '0' })
    t.teardown(() => replay.close())
    const gap = await replay.next((e) => e.event === 'gap' && JSON.parse(e.data ?? '{}').gateway_id === cId, 3000)
    t.ok(gap, 'the stream shows the gap, naming C')
    t.ok(JSON.parse(gap?.data ?? '{}').dropped >= 7)
    replay.close()
    for (const [name, url, id] of gateways) {
      const requestPath = `/fleet/after-outage-${id}`
      t.equal(await through(url, requestPath), 200)
      const [onA, onB] = await onBoth(requestPath, 2000)
      t.match(onA, { gateway_id: id }, `${name}'s new decisions reach A within 2 s`)
      t.match(onB, { gateway_id: id }, 'and B')
    }
    const everything = (await all(a.adminUrl)) ?? []
    const keys = everything.map((e) => `${e.gateway_id} ${e.request_id}`)
    t.equal(new Set(keys).size, keys.length, `no event is listed twice (${keys.length} events)`)
  })

  t.test('GET /v1/gateways lists the fleet on both instances; a stopped gateway turns stale', async (t) => {
    for (const instance of [a, b]) {
      const fleet = await until(5000, async () => {
        const res = await adminCall(instance.adminUrl, operatorKey, 'GET', '/v1/gateways')
        const ids = res.status === 200 ? (res.body.data as any[]).map((g) => g.gateway_id) : []
        return gateways.every(([, , id]) => ids.includes(id)) ? res.body.data as any[] : undefined
      })
      t.ok(fleet, 'all three gateways report')
      t.match(fleet?.find((g) => g.gateway_id === cId), { stale: false, pdp: 'none', default_mode: 'EM-GUARD', heartbeat_interval_ms: 300, routes: [{ prefix: '/', mode: 'EM-GUARD', protocol: 'http' }] })
      t.equal(fleet?.length, 3, 'an admin instance without a gateway reports none')
    }
    t.equal(await c.stop(), 0, 'C stops cleanly')
    const stale = await until(5000, async () => {
      const res = await adminCall(a.adminUrl, operatorKey, 'GET', '/v1/gateways')
      const entry = (res.body.data as any[]).find((g) => g.gateway_id === cId)
      return entry?.stale === true ? entry : undefined
    })
    t.ok(stale, 'three missed heartbeats later C is stale')
    const others = (await adminCall(b.adminUrl, operatorKey, 'GET', '/v1/gateways')).body.data as any[]
    t.equal(others.find((g) => g.gateway_id === cId)?.stale, true, 'on B too')
    t.equal(others.find((g) => g.gateway_id === 'gw-e2e-a')?.stale, false, 'A\'s own gateway is not')
    t.equal(others.find((g) => g.gateway_id === 'gw-e2e-d')?.stale, false, 'nor D')
  })
}
