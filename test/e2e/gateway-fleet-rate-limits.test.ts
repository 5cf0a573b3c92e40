/**
 * Issue 33's rate-limit acceptance: three gateway-only processes (`agent-trust gateway`, embedded PDP,
 * EM-DELEGATE) share one Redis, a private redis-server this test owns, and an org policy gives one DID 60
 * rpm. What must hold:
 *
 * - 150 requests spread over the three as fast as they go: at least 60 and at most 60 + 60 × W / 60 s are
 *   allowed fleet-wide, W the seconds the burst took (the token bucket's bound; docs/operations.md, "Rate
 *   limits across the fleet"), not 3 × 60;
 * - Redis stopped: each process says so in its readiness (degraded) and metrics, and counts as configured:
 *   two with SERVICE_RATE_LIMIT_REDIS_FALLBACK=local allow on their own buckets, one with `deny` answers 429;
 * - Redis started again on the same port: every process shares the count again without a restart;
 * - the appliance's own gateway, on the same Redis, counts in the same bucket.
 *
 * The admin plane (one `agent-trust serve`) runs on PostgreSQL or, with SERVICE_TEST_DB=pglite, PGlite: the
 * gateway-only processes do not touch the database.
 */
import t, { type Test } from 'tap'
import { randomBytes } from 'node:crypto'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { generateApiKeySecret } from '../../src/core/api-key.js'
import { adminCall, agentWithBadge, exitSafeTeardown, SLOW_START, startService, type RunningService } from '../helpers/appliance.js'
import { startPrivateRedis } from '../helpers/private-redis.js'
import { startUpstream } from '../helpers/upstream-server.js'
import { prepareWorkspace } from '../helpers/workspace.js'

t.setTimeout(300_000)

const RPM = 60
const BURST = 150
const REDIS_PORT = 42202
const ISSUER = 'http://registry.test'

async function until<T>(ms: number, fn: () => Promise<T | undefined>): Promise<T | undefined> {
  const deadline = Date.now() + ms
  for (;;) {
    const value = await fn()
    if (value !== undefined || Date.now() > deadline) return value
    await new Promise((r) => setTimeout(r, 50))
  }
}

const teardown = exitSafeTeardown(t)
const dataDir = mkdtempSync(path.join(tmpdir(), 'svc-e2e-fleet-rl-'))
const operatorKey = generateApiKeySecret()
const { orgId, databaseEnv } = await prepareWorkspace(t, dataDir, operatorKey)
const redis = await startPrivateRedis(teardown, REDIS_PORT)
const upstream = await startUpstream(t)
const prefix = `test-fleet-rl-${randomBytes(4).toString('hex')}:`
// The appliance runs a gateway of its own on the same Redis and prefix: it counts in the fleet's bucket too.
const admin = await startService(teardown, {
  ...databaseEnv, SERVICE_DATA_DIR: dataDir, SERVICE_BOOTSTRAP_API_KEY: operatorKey, CA_ISSUER_URL: ISSUER, SERVICE_RATE_LIMIT_PER_MINUTE: '100000',
  SERVICE_UPSTREAM_URL: upstream.url, SERVICE_EMBEDDED_PDP: 'true', SERVICE_WORKSPACE: orgId, SERVICE_ENFORCEMENT_MODE: 'EM-DELEGATE',
  REDIS_URL: redis.url, SERVICE_RATE_LIMIT_REDIS_PREFIX: prefix,
}, SLOW_START)
const agent = await agentWithBadge(admin.adminUrl, operatorKey, 'fleet-limited')

const proposed = await adminCall(admin.adminUrl, operatorKey, 'POST', `/v1/orgs/${orgId}/policy/org`, {
  yaml_content: ['version: "1"', 'rate_limits:', `  - did: "${agent.did}"`, `    rpm: ${RPM}`, ''].join('\n'),
})
if (proposed.status !== 201) throw new Error(`propose failed: ${proposed.status} ${JSON.stringify(proposed.body)}`)
const approved = await adminCall(admin.adminUrl, operatorKey, 'POST', `/v1/orgs/${orgId}/policy/proposals/${proposed.body.id}/approve`)
if (approved.status !== 200) throw new Error(`approve failed: ${approved.status} ${JSON.stringify(approved.body)}`)

const fallbacks = ['local', 'local', 'deny'] as const
const gateways = await Promise.all(fallbacks.map(async (fallback, i) => {
  const key = (await adminCall(admin.adminUrl, operatorKey, 'POST', '/v1/keys', { name: `fleet-rl-${i}` })).body.data.key as string
  return startService(teardown, {
    SERVICE_REGISTRY_URL: admin.adminUrl,
    SERVICE_REGISTRY_KEY: key,
    SERVICE_UPSTREAM_URL: upstream.url,
    CA_ISSUER_URL: ISSUER,
    SERVICE_EMBEDDED_PDP: 'true',
    SERVICE_WORKSPACE: orgId,
    SERVICE_ENFORCEMENT_MODE: 'EM-DELEGATE',
    REDIS_URL: redis.url,
    SERVICE_RATE_LIMIT_REDIS_PREFIX: prefix,
    SERVICE_RATE_LIMIT_REDIS_FALLBACK: fallback,
    SERVICE_PEP_ID: `gw-rl-${i}`,
  }, { command: 'gateway', ...SLOW_START })
})) as RunningService[]

interface Answer {
  status: number
  headers: Headers
  body: string
}

async function call(gateway: RunningService, requestPath: string): Promise<Answer> {
  const res = await fetch(`${gateway.gatewayUrl}${requestPath}`, { headers: { authorization: `Bearer ${agent.token}` } })
  return { status: res.status, headers: res.headers, body: await res.text() }
}

/** `count` requests round-robin over the gateways, 15 at a time; the answers per gateway and the seconds taken. */
async function burst(count: number, label: string): Promise<{ statuses: number[][]; seconds: number }> {
  const statuses: number[][] = gateways.map(() => [])
  let next = 0
  const began = performance.now()
  await Promise.all(Array.from({ length: 15 }, async () => {
    while (next < count) {
      const i = next++
      const answer = await call(gateways[i % 3] as RunningService, `/${label}/${i}`)
      ;(statuses[i % 3] as number[]).push(answer.status)
    }
  }))
  return { statuses, seconds: (performance.now() - began) / 1000 }
}

async function readiness(gateway: RunningService): Promise<{ status: number; body: any }> {
  const res = await fetch(`${gateway.adminUrl}/readyz`)
  return { status: res.status, body: await res.json() }
}

async function metric(gateway: RunningService, pattern: RegExp): Promise<number> {
  const text = await (await fetch(`${gateway.adminUrl}/metrics`)).text()
  return Number(pattern.exec(text)?.[1] ?? 0)
}

const FALLBACK_LOCAL = /^service_gateway_rate_limit_fallback_total\{behaviour="local"\} (\d+)$/m
const FALLBACK_DENY = /^service_gateway_rate_limit_fallback_total\{behaviour="deny"\} (\d+)$/m
const SHARED = /^service_gateway_rate_limit_redis_shared (\d+)$/m

/** Allowed answers of a burst, checked against the bound; every answer is 200 or 429. */
function checkBurst(t: Test, result: { statuses: number[][]; seconds: number }, what: string, atLeast = RPM): number {
  const all = result.statuses.flat()
  t.equal(all.length, BURST)
  t.ok(all.every((s) => s === 200 || s === 429), `${what}: every answer is 200 or 429`)
  const allowed = all.filter((s) => s === 200).length
  const bound = RPM + (RPM * result.seconds) / 60
  t.ok(allowed <= bound, `${what}: ${allowed} allowed in ${result.seconds.toFixed(2)} s, within rpm + rpm × W / 60 = ${bound.toFixed(1)} (not ${3 * RPM})`)
  t.ok(allowed >= atLeast, `${what}: at least the ${atLeast} tokens the bucket held allowed (${allowed})`)
  t.ok(result.statuses.every((s) => s.includes(429)), `${what}: each gateway refused some`)
  return allowed
}

t.test('three gateways, one Redis: 60 rpm for the fleet, not 3 × 60', async (t) => {
  // Each process connects to Redis in the background: the burst starts once all three count there.
  for (const [i, gateway] of gateways.entries()) {
    t.ok(await until(10_000, async () => (await metric(gateway, SHARED)) === 1 ? true : undefined), `gateway ${i} counts in Redis`)
  }
  const first = await call(gateways[0] as RunningService, '/warm')
  t.equal(first.status, 200)
  t.equal(first.headers.get('x-ratelimit-limit'), String(RPM), 'the policy\'s limit is in force')
  t.equal(first.headers.get('x-ratelimit-remaining'), String(RPM - 1))
  const result = await burst(BURST, 'burst')
  // The bucket refills a token a second, so the burst may leave a fraction that becomes one token at once:
  // of two questions asked at once, at most one finds it; the other must find the bucket empty.
  const ownAnswers: Response[] = []
  for (let i = 0; i < 2; i++) {
    const answer = await fetch(`${admin.gatewayUrl}/appliance-over`, { headers: { authorization: `Bearer ${agent.token}` } })
    await answer.arrayBuffer()
    ownAnswers.push(answer)
  }
  const own = ownAnswers.find((answer) => answer.status !== 200) ?? (ownAnswers[1] as Response)
  const refused = await call(gateways[1] as RunningService, '/over')
  // The warm-up took one token of the bucket the burst starts from.
  const allowed = checkBurst(t, result, 'the burst', RPM - 1)
  t.comment(`burst 1: ${allowed} of ${BURST} allowed in ${result.seconds.toFixed(2)} s; per gateway ${result.statuses.map((s) => s.filter((x) => x === 200).length).join(', ')}`)
  for (const [i, gateway] of gateways.entries()) {
    t.equal(await metric(gateway, FALLBACK_LOCAL) + await metric(gateway, FALLBACK_DENY), 0, `gateway ${i}: no request fell back, every one was counted in Redis`)
    t.equal(await metric(gateway, SHARED), 1, 'the gauge says shared')
  }
  t.equal(own.status, 429, 'the appliance\'s own gateway finds the same bucket empty')
  t.equal(own.headers.get('x-ratelimit-limit'), String(RPM))
  t.equal(refused.status, 429)
  t.match(JSON.parse(refused.body), { error: 'rate_limit_exceeded' })
  t.ok(Number(refused.headers.get('retry-after')) >= 1, 'with Retry-After')
  t.equal(refused.headers.get('x-ratelimit-remaining'), '0')
})

t.test('Redis stopped: degraded, counted by the metric, and each gateway counts as configured', async (t) => {
  await redis.stop()
  for (const [i, gateway] of gateways.entries()) {
    const degraded = await until(10_000, async () => {
      const ready = await readiness(gateway)
      return ready.body.degraded?.redis !== undefined ? ready : undefined
    })
    t.match(degraded, { status: 200, body: { status: 'ready', degraded: { redis: { code: 'redis_unavailable' } } } }, `gateway ${i} stays ready and says Redis is degraded`)
  }
  t.match((await readiness(gateways[2] as RunningService)).body.degraded.redis.message, /refuses rate-limited requests/, 'the note says what the fallback does')
  for (const i of [0, 1]) {
    const local = []
    for (let n = 0; n < 5; n++) local.push((await call(gateways[i] as RunningService, `/down-${i}-${n}`)).status)
    t.strictSame(local, [200, 200, 200, 200, 200], `gateway ${i} (local): its own bucket of ${RPM} allows again`)
    t.ok(await metric(gateways[i] as RunningService, FALLBACK_LOCAL) >= 5, 'each counted by service_gateway_rate_limit_fallback_total{behaviour="local"}')
    t.equal(await metric(gateways[i] as RunningService, SHARED), 0, 'the gauge says not shared')
  }
  const denied = await call(gateways[2] as RunningService, '/down-deny')
  t.equal(denied.status, 429, 'gateway 2 (deny): over the limit while Redis is away')
  t.match(JSON.parse(denied.body), { error: 'rate_limit_exceeded' })
  t.equal(denied.headers.get('retry-after'), '2')
  t.equal(await metric(gateways[2] as RunningService, FALLBACK_DENY), 1, 'counted by service_gateway_rate_limit_fallback_total{behaviour="deny"}')
  for (const [i, gateway] of gateways.entries()) {
    const warned = (): Record<string, unknown>[] => gateway.logLines().filter((l) => l.level === 40 && typeof l.msg === 'string' && l.msg.startsWith('redis unavailable'))
    await until(5_000, async () => (warned().length > 0 ? true : undefined))
    const warnings = warned()
    t.equal(warnings.length, 1, 'one warning for the outage')
    t.equal(warnings[0]?.gateway_rate_limit_fallback, fallbacks[i], 'naming what the gateway does meanwhile')
    t.equal(gateway.child.exitCode, null, 'the process keeps running')
  }
})

t.test('Redis back on the same port: shared counting resumes without a restart', async (t) => {
  await redis.start()
  for (const [i, gateway] of gateways.entries()) {
    const back = await until(15_000, async () => {
      const ready = await readiness(gateway)
      return ready.body.degraded?.redis === undefined ? ready : undefined
    })
    t.match(back, { status: 200, body: { status: 'ready', degraded: {} } }, `gateway ${i} is no longer degraded`)
    // Log lines are written asynchronously: the line may follow the readiness by a moment.
    const restored = await until(5_000, async () => gateway.logLines().find((l) => l.msg === 'redis connection restored; rate-limit counters are shared again'))
    t.match(restored, { gateway_rate_limit_fallback: fallbacks[i] }, 'the recovery is logged')
  }
  // The restarted server is empty: the fleet's bucket is full again, and shared.
  const result = await burst(BURST, 'after')
  const allowed = checkBurst(t, result, 'the burst after the restart')
  t.comment(`burst 2: ${allowed} of ${BURST} allowed in ${result.seconds.toFixed(2)} s; per gateway ${result.statuses.map((s) => s.filter((x) => x === 200).length).join(', ')}`)
  for (const gateway of gateways) t.equal(await metric(gateway, SHARED), 1, 'shared again')
  t.equal(await metric(gateways[2] as RunningService, FALLBACK_DENY), 1, 'the deny gateway fell back no more')
})

t.test('the gateways stop cleanly', async (t) => {
  for (const gateway of gateways) t.equal(await gateway.stop(), 0)
  t.equal(await admin.stop(), 0)
})
