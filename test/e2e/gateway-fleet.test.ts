/**
 * One control plane for a fleet: two appliances (`agent-trust serve`, A and B, each with its own gateway)
 * on one PostgreSQL schema and one Redis (a key prefix of this run), and a gateway-only process
 * (`agent-trust gateway`, C) reporting to A with its registry key. What must hold:
 *
 * - a decision made through C is listed by both A and B within 2 s, with C's gateway_id, and an SSE
 *   stream opened on A receives it; a decision through A's own gateway is listed by B too;
 * - a stream resumes on B with the Last-Event-ID A sent;
 * - with Redis away (a TCP proxy in front of it, cut) C keeps serving, drops and counts what overflows
 *   its queue, A says it is degraded and answers 503; once Redis is back, reporting resumes and the loss
 *   shows as a gap naming C;
 * - `GET /v1/gateways` on either instance lists all three gateways, and C turns stale once stopped.
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
    SERVICE_UPSTREAM_URL: upstream.url,
    SERVICE_ENFORCEMENT_MODE: 'EM-GUARD',
    SERVICE_RATE_LIMIT_PER_MINUTE: '100000',
  }
  const [a, b] = await Promise.all([
    startService(teardown, { ...shared, SERVICE_PEP_ID: 'gw-e2e-a' }, SLOW_START),
    startService(teardown, { ...shared, SERVICE_PEP_ID: 'gw-e2e-b' }, SLOW_START),
  ]) as [RunningService, RunningService]
  const registryKey = await adminCall(a.adminUrl, operatorKey, 'POST', '/v1/keys', { name: 'gateway-c' })
  const c = await startService(teardown, {
    SERVICE_REGISTRY_URL: a.adminUrl,
    SERVICE_REGISTRY_KEY: registryKey.body.data.key as string,
    SERVICE_UPSTREAM_URL: upstream.url,
    CA_ISSUER_URL: ISSUER,
    SERVICE_ENFORCEMENT_MODE: 'EM-GUARD',
    SERVICE_GATEWAY_HEARTBEAT_INTERVAL: '300ms',
    // A small queue, so that an outage overflows it within a few requests.
    SERVICE_CONSOLE_DECISIONS_BUFFER: '5',
  }, { command: 'gateway', ...SLOW_START })
  const agent = await agentWithBadge(a.adminUrl, operatorKey, 'fleet-agent')
  const orgId = (await adminCall(a.adminUrl, operatorKey, 'GET', '/v1/me')).body.data.org_id as string

  const listed = async (url: string, requestPath: string): Promise<any> => {
    const res = await adminCall(url, operatorKey, 'GET', '/v1/gateway/decisions?limit=1000')
    return res.status === 200 ? (res.body.data as any[]).find((e) => e.path === requestPath) : undefined
  }

  t.test('a gateway-only process\'s decision: on both instances within 2 s, with its gateway_id, and on A\'s stream', async (t) => {
    t.match(c.logLines().find((line) => line.msg === 'gateway id'), { gateway_id: /^gw-[0-9a-f]{12}$/ }, 'C generated and logged its id')
    const cId = c.logLines().find((line) => line.msg === 'gateway id')?.gateway_id as string
    const stream = await openStream(a.adminUrl, operatorKey)
    t.teardown(() => stream.close())
    const sent = Date.now()
    const res = await fetch(`${c.gatewayUrl}/fleet/through-c`, { headers: { authorization: `Bearer ${agent.token}` } })
    await res.arrayBuffer()
    t.equal(res.status, 200)
    const [onA, onB] = await Promise.all([
      until(2000, () => listed(a.adminUrl, '/fleet/through-c')),
      until(2000, () => listed(b.adminUrl, '/fleet/through-c')),
    ])
    t.ok(Date.now() - sent < 2500, `listed within ${Date.now() - sent} ms`)
    t.match(onA, { gateway_id: cId, decision: 'ALLOW', org_id: orgId, agent_did: agent.did }, 'A lists it, attributed to the badge\'s organization')
    t.same(onB, onA, 'B lists the same event, with the same seq')
    const streamed = await stream.next((e) => e.event === 'decision' && JSON.parse(e.data ?? '{}').path === '/fleet/through-c', 3000)
    t.ok(streamed, 'A\'s stream receives it')
    t.equal(streamed?.id, String(onA.seq), 'the stream id is the store\'s number')

    const resumed = await openStream(b.adminUrl, operatorKey, { 'last-event-id': String(Number(streamed?.id) - 1) })
    t.teardown(() => resumed.close())
    const first = await resumed.next((e) => e.event === 'decision', 3000)
    t.equal(first?.id, streamed?.id, 'B resumes after the id A sent')
  })

  t.test('the appliances\' own gateways report too, through the same store', async (t) => {
    const res = await fetch(`${a.gatewayUrl}/fleet/through-a`, { headers: { authorization: `Bearer ${agent.token}` } })
    await res.arrayBuffer()
    const onB = await until(2000, () => listed(b.adminUrl, '/fleet/through-a'))
    t.match(onB, { gateway_id: 'gw-e2e-a', org_id: orgId })
  })

  t.test('Redis away: C keeps serving and counts its drops, A is degraded and 503; back, reporting resumes with a gap', async (t) => {
    const cId = c.logLines().find((line) => line.msg === 'gateway id')?.gateway_id as string
    const dropped = async (): Promise<number> => {
      const text = await (await fetch(`${c.adminUrl}/metrics`)).text()
      return Number(/^service_gateway_events_dropped_total (\d+)/m.exec(text)?.[1] ?? 'NaN')
    }
    t.equal(await dropped(), 0, 'nothing dropped so far')
    await proxy.cut()
    const degraded = await until(5000, async () => {
      const ready = await fetch(`${a.adminUrl}/readyz`)
      const body = await ready.json() as { status: string; degraded: Record<string, unknown> }
      return ready.status === 200 && body.degraded.redis !== undefined ? body : undefined
    })
    t.ok(degraded, 'A stays ready and says Redis is degraded')
    const read = await adminCall(a.adminUrl, operatorKey, 'GET', '/v1/gateway/decisions')
    t.match(read, { status: 503, body: { error: 'decision_store_unavailable' } }, 'reads are 503 with a clear code')
    for (let i = 0; i < 12; i++) {
      const res = await fetch(`${c.gatewayUrl}/fleet/outage-${i}`, { headers: { authorization: `Bearer ${agent.token}` } })
      await res.arrayBuffer()
      t.equal(res.status, 200, `C serves request ${i} during the outage`)
    }
    const counted = await until(10_000, async () => ((await dropped()) >= 7 ? true : undefined))
    t.ok(counted, `what overflowed C's queue of 5 is counted (${await dropped()})`)
    t.equal((await fetch(`${a.adminUrl}/healthz`)).status, 200, 'A did not crash')

    await proxy.restore()
    const restoredAt = Date.now()
    // No request meanwhile: C's queue still holds the newest five, which its next retry delivers.
    const back = await until(30_000, async () => {
      const res = await adminCall(b.adminUrl, operatorKey, 'GET', '/v1/gateways')
      const entry = res.status === 200 ? (res.body.data as any[]).find((g) => g.gateway_id === cId) : undefined
      return entry !== undefined && Date.parse(entry.last_heartbeat) >= restoredAt ? entry : undefined
    })
    t.ok(back, 'C reports again once Redis is back, without a restart')
    t.ok(back?.events_dropped >= 7, `the loss is on C's entry (${back?.events_dropped})`)
    const kept = (await adminCall(b.adminUrl, operatorKey, 'GET', '/v1/gateway/decisions?limit=1000')).body.data as any[]
    t.ok(kept.some((e) => e.path === '/fleet/outage-11'), 'the newest events the queue kept arrived')
    const replay = await openStream(b.adminUrl, operatorKey, { 'last-event-id': '0' })
    t.teardown(() => replay.close())
    const gap = await replay.next((e) => e.event === 'gap' && JSON.parse(e.data ?? '{}').gateway_id === cId, 3000)
    t.ok(gap, 'the stream shows the gap, naming C')
    t.ok(JSON.parse(gap?.data ?? '{}').dropped >= 7)
    replay.close()
    const res = await fetch(`${c.gatewayUrl}/fleet/after-outage`, { headers: { authorization: `Bearer ${agent.token}` } })
    await res.arrayBuffer()
    t.match(await until(2000, () => listed(b.adminUrl, '/fleet/after-outage')), { gateway_id: cId }, 'and new decisions flow within 2 s')
    t.notOk(kept.some((e) => e.path === '/fleet/outage-0'), 'the oldest overflowed')
  })

  t.test('GET /v1/gateways lists the fleet on both instances; a stopped gateway turns stale', async (t) => {
    const cId = c.logLines().find((line) => line.msg === 'gateway id')?.gateway_id as string
    const fleet = await until(5000, async () => {
      const res = await adminCall(b.adminUrl, operatorKey, 'GET', '/v1/gateways')
      const ids = (res.body.data as any[]).map((g) => g.gateway_id)
      return ['gw-e2e-a', 'gw-e2e-b', cId].every((id) => ids.includes(id)) ? res.body.data as any[] : undefined
    })
    t.ok(fleet, 'all three report')
    t.match(fleet?.find((g) => g.gateway_id === cId), { stale: false, pdp: 'none', default_mode: 'EM-GUARD', heartbeat_interval_ms: 300, routes: [{ prefix: '/', mode: 'EM-GUARD', protocol: 'http' }] })
    t.equal(await c.stop(), 0, 'C stops cleanly')
    const stale = await until(5000, async () => {
      const res = await adminCall(a.adminUrl, operatorKey, 'GET', '/v1/gateways')
      const entry = (res.body.data as any[]).find((g) => g.gateway_id === cId)
      return entry?.stale === true ? entry : undefined
    })
    t.ok(stale, 'three missed heartbeats later C is stale')
    const others = (await adminCall(a.adminUrl, operatorKey, 'GET', '/v1/gateways')).body.data as any[]
    t.equal(others.find((g) => g.gateway_id === 'gw-e2e-b')?.stale, false, 'B\'s own gateway is not')
  })
}
