/**
 * The fleet's rate limits in Redis (src/gateway/rate-limits.ts): the Lua token bucket's refill math on
 * Redis's clock, its TTL, keys of any characters, several limits in one round trip, and several clients
 * sharing one budget, on the shared Redis under a prefix of this run. On a private redis-server (port
 * 42201): each fallback while Redis is unreachable, a stalled Redis (command time-out), SCRIPT FLUSH and a
 * restart answered without a new limiter.
 */
import t from 'tap'
import { createHash, randomBytes } from 'node:crypto'
import { Writable } from 'node:stream'
import { Redis } from 'ioredis'
import { connectRedis, type RedisLink } from '../../../src/net/redis-link.js'
import { bucketKey, DENY_WAIT_MS, gatewayRateLimits, RedisRateLimits, TAKE_TOKENS_LUA, type TokenGrant, type TokenGrants, type TokenRequest } from '../../../src/gateway/rate-limits.js'
import type { RateLimitFallback } from '../../../src/config/index.js'
import { createMetrics } from '../../../src/telemetry/metrics.js'
import { createLogger } from '../../../src/telemetry/logger.js'
import { startPrivateRedis } from '../../helpers/private-redis.js'

t.setTimeout(120_000)

const SHARED_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379'
const PRIVATE_PORT = 42201
const prefix = `test-ratelimit-${randomBytes(4).toString('hex')}:`

const admin = new Redis(SHARED_URL)
t.teardown(async () => {
  const keys = await admin.keys(`${prefix}*`)
  if (keys.length > 0) await admin.del(...keys)
  await admin.quit()
})

const quiet = createLogger('silent', new Writable({ write(_c, _e, done) { done() } }))

async function until(ms: number, check: () => boolean | Promise<boolean>): Promise<boolean> {
  const deadline = Date.now() + ms
  while (Date.now() < deadline) {
    if (await check()) return true
    await new Promise((r) => setTimeout(r, 20))
  }
  return false
}

async function link(t: { teardown(fn: () => unknown): void }, url: string): Promise<RedisLink> {
  const connected = connectRedis(url, quiet)
  t.teardown(() => connected.close())
  await until(5_000, () => connected.state() === 'ready')
  return connected
}

function limiter(redis: RedisLink, fallback: RateLimitFallback = 'local', fallbacks: RateLimitFallback[] = [], keyPrefix = prefix): RedisRateLimits {
  return new RedisRateLimits({ link: redis, prefix: keyPrefix, fallback, onFallback: (b) => fallbacks.push(b) })
}

async function take(limits: RedisRateLimits, requests: TokenRequest[]): Promise<TokenGrants> {
  return limits.take(requests, Date.now())
}

async function one(limits: RedisRateLimits, key: string, rpm: number): Promise<TokenGrant> {
  const [grant] = await take(limits, [{ key, rpm }])
  if (grant === null || grant === undefined) throw new Error('no grant')
  return grant
}

/** Redis's clock in ms. */
async function redisNow(): Promise<number> {
  const [seconds, micros] = await admin.time()
  return Number(seconds) * 1000 + Number(micros) / 1000
}

t.test('a burst of rpm on Redis\'s clock, then a refusal naming the wait; the headers\' numbers come from Redis', async (t) => {
  const shared = await link(t, SHARED_URL)
  const limits = limiter(shared)
  const key = `did:web:burst-${randomBytes(3).toString('hex')}`
  const remaining: number[] = []
  for (let i = 0; i < 10; i++) {
    const grant = await one(limits, key, 10)
    t.equal(grant.wait, 0, `take ${i + 1} of 10 is allowed`)
    remaining.push(grant.remaining)
  }
  t.strictSame(remaining, [9, 8, 7, 6, 5, 4, 3, 2, 1, 0], 'whole tokens left after each take')
  const before = await redisNow()
  const refused = await one(limits, key, 10)
  const after = await redisNow()
  t.ok(refused.wait > 5_000 && refused.wait <= 6_000, `the 11th waits for the next token, 6 s at 10 rpm less what refilled meanwhile (${refused.wait} ms)`)
  t.equal(refused.remaining, 0)
  t.ok(refused.atMs >= Math.floor(before) - 1 && refused.atMs <= after + 1, 'atMs is Redis\'s time')
})

t.test('refill: tokens + elapsed × rpm / 60 s, capped at rpm, from the stored state', async (t) => {
  const shared = await link(t, SHARED_URL)
  const limits = limiter(shared)
  const cases: [name: string, rpm: number, tokens: number, agoMs: number, wait: [number, number], remaining: number][] = [
    ['empty, 30 s ago at 60 rpm: 30 tokens', 60, 0, 30_000, [0, 0], 29],
    ['empty, 10 min ago: capped at rpm', 60, 0, 600_000, [0, 0], 59],
    ['half a token, refilled by 15 s at 2 rpm: one', 2, 0.5, 15_000, [0, 0], 0],
    ['empty, 15 s ago at 2 rpm: half a token, 15 s to wait', 2, 0, 15_000, [14_000, 15_000], 0],
    ['0.25 tokens now at 1 rpm: 45 s to wait', 1, 0.25, 0, [44_000, 45_000], 0],
  ]
  for (const [name, rpm, tokens, agoMs, [low, high], remaining] of cases) {
    const key = `refill-${randomBytes(4).toString('hex')}`
    await admin.hset(bucketKey(prefix, key), 't', String(tokens), 'a', String(await redisNow() - agoMs))
    const grant = await one(limits, key, rpm)
    t.ok(grant.wait >= low && grant.wait <= high, `${name}: wait ${grant.wait} in [${low}, ${high}]`)
    t.equal(grant.remaining, remaining, `${name}: ${remaining} left`)
  }
  const key = `cap-${randomBytes(4).toString('hex')}`
  await admin.hset(bucketKey(prefix, key), 't', '0', 'a', String(await redisNow() - 1_000_000_000))
  t.equal((await one(limits, key, 1e-300)).wait, 86_400_000, 'a vanishing rpm names a wait capped at a day')
})

t.test('every bucket expires 60 s after its last use, when it would be full again anyway', async (t) => {
  const shared = await link(t, SHARED_URL)
  const limits = limiter(shared)
  const key = 'did:web:ttl'
  await one(limits, key, 600)
  const ttl = await admin.pttl(bucketKey(prefix, key))
  t.ok(ttl > 55_000 && ttl <= 60_000, `PTTL ${ttl} ms`)
  t.strictSame(Object.keys(await admin.hgetall(bucketKey(prefix, key))).sort(), ['a', 't'], 'one hash: tokens and the time of the last refill')
})

t.test('keys of any characters and length: one hashed key each, none colliding, none outside the prefix', async (t) => {
  const shared = await link(t, SHARED_URL)
  const limits = limiter(shared)
  const odd = ['did:web:a b', 'line\nbreak', '{hashtag}', '*', 'é∂😀', 'x'.repeat(10_000), `${prefix}nested`, '\u0000nul', 'did:web:a%20b']
  for (const key of odd) t.equal((await one(limits, key, 1)).wait, 0, `${JSON.stringify(key.slice(0, 20))} takes its own first token`)
  for (const key of odd) t.ok((await one(limits, key, 1)).wait > 0, `${JSON.stringify(key.slice(0, 20))}: its second is refused`)
  const keys = await admin.keys(`${prefix}*`)
  const these = odd.map((key) => bucketKey(prefix, key))
  t.ok(these.every((k) => keys.includes(k)), 'each is stored under its own key')
  t.equal(new Set(these).size, odd.length, 'no two keys collide')
  t.ok(these.every((k) => k.length === prefix.length + 43 && /^[A-Za-z0-9_-]+$/.test(k.slice(prefix.length))), 'the prefix and 43 base64url characters')
})

t.test('several limits in one round trip, each counted on its own', async (t) => {
  const shared = await link(t, SHARED_URL)
  const limits = limiter(shared)
  const did = `did:web:pair-${randomBytes(3).toString('hex')}`
  const tool = `${did} tool search`
  const first = await take(limits, [{ key: did, rpm: 5 }, { key: tool, rpm: 1 }])
  t.match(first, [{ wait: 0, remaining: 4 }, { wait: 0, remaining: 0 }])
  const second = await take(limits, [{ key: did, rpm: 5 }, { key: tool, rpm: 1 }])
  t.match(second, [{ wait: 0, remaining: 3 }, { remaining: 0 }], 'the DID\'s token is taken though the tool\'s is refused, as the local limiter does')
  t.ok((second[1] as TokenGrant).wait > 0)
})

t.test('three clients share one budget: rpm in all, not 3 × rpm', async (t) => {
  const clients = await Promise.all([link(t, SHARED_URL), link(t, SHARED_URL), link(t, SHARED_URL)])
  const fleet = clients.map((c) => limiter(c))
  const key = `did:web:fleet-${randomBytes(3).toString('hex')}`
  const grants = await Promise.all(Array.from({ length: 150 }, (_, i) => one(fleet[i % 3] as RedisRateLimits, key, 60)))
  const allowed = grants.filter((g) => g.wait === 0).length
  // 60 at once, plus at most one per second refilled while the 150 takes ran.
  t.ok(allowed >= 60 && allowed <= 62, `${allowed} of 150 allowed`)
})

t.test('Redis unreachable: each fallback, synchronous, counted once per request', async (t) => {
  const down = connectRedis('redis://127.0.0.1:1', quiet)
  t.teardown(() => down.close())
  const requests = [{ key: 'did:web:down', rpm: 1 }, { key: 'did:web:down tool', rpm: 5 }]
  const counted: RateLimitFallback[] = []
  const local = limiter(down, 'local', counted)
  const first = local.take(requests, 1_000_000)
  t.notOk(first instanceof Promise, 'no command is sent, so nothing waits')
  t.strictSame(first, [{ wait: 0, remaining: 0, atMs: 1_000_000 }, { wait: 0, remaining: 4, atMs: 1_000_000 }], 'local: this process\'s buckets')
  t.equal((local.take(requests, 1_000_000) as TokenGrants)[0]?.wait, 60_000, 'local: and their limits')
  const deny = limiter(down, 'deny', counted)
  t.strictSame(deny.take(requests, 5_000), [{ wait: DENY_WAIT_MS, remaining: 0, atMs: 5_000 }, { wait: DENY_WAIT_MS, remaining: 0, atMs: 5_000 }], 'deny: every limit over, retry after the reconnection delay')
  const allow = limiter(down, 'allow', counted)
  t.strictSame(allow.take(requests, 5_000), [null, null], 'allow: through, uncounted')
  t.strictSame(counted, ['local', 'local', 'deny', 'allow'], 'one fallback per request, not per limit')
  t.equal(local.shared(), false)

  const metrics = createMetrics()
  const gateway = gatewayRateLimits(down, { rateLimitRedisPrefix: prefix, rateLimitRedisFallback: 'deny' }, metrics.gateway)
  t.teardown(gateway.stop)
  gateway.limits.take(requests, 0)
  const text = await metrics.registry.metrics()
  t.match(text, /^service_gateway_rate_limit_fallback_total\{behaviour="deny"\} 1$/m, 'the fallback counter')
  t.match(text, /^service_gateway_rate_limit_redis_shared 0$/m, 'the gauge says the limits are not shared')
})

t.test('a private Redis: stalled, flushed, restarted; the limiter follows without being rebuilt', async (t) => {
  const server = await startPrivateRedis(t, PRIVATE_PORT)
  const direct = new Redis(server.url, { maxRetriesPerRequest: 0, lazyConnect: true })
  t.teardown(() => direct.disconnect())
  const redis = await link(t, server.url)
  const counted: RateLimitFallback[] = []
  const metrics = createMetrics()
  // 6 rpm refills 0.1 token a second: the whole test stays within one token's refill, so the counts are exact.
  const limits = limiter(redis, 'local', counted, 'private:')
  t.equal((await one(limits, 'k', 6)).remaining, 5, 'counted in the private Redis')
  t.equal(await redis.client.pttl(bucketKey('private:', 'k')) > 0, true)

  await direct.connect()
  await direct.script('FLUSH')
  t.strictSame(await direct.script('EXISTS', createHash('sha1').update(TAKE_TOKENS_LUA).digest('hex')), [0], 'the script is gone')
  t.equal((await one(limits, 'k', 6)).remaining, 4, 'after SCRIPT FLUSH (NOSCRIPT) the script is sent again and the count goes on')
  t.strictSame(counted, [], 'no fallback so far')

  // SIGSTOP: the connection stays up and the command times out.
  server.pause()
  const began = Date.now()
  const stalled = await one(limits, 'k', 6)
  const took = Date.now() - began
  server.resume()
  t.strictSame(counted, ['local'], 'a timed-out command falls back')
  t.equal(stalled.remaining, 5, 'to this process\'s own bucket')
  t.ok(took >= 400 && took < 5_000, `after the command time-out (${took} ms)`)
  t.equal(limits.shared(), false, 'and the next requests skip Redis for a moment')
  const skipped = limits.take([{ key: 'k', rpm: 6 }], Date.now())
  t.notOk(skipped instanceof Promise, 'without waiting')
  t.ok(await until(3_000, () => limits.shared()), 'then Redis is tried again')
  // Redis ran the timed-out take once it woke: it cost a token and granted none.
  t.equal((await one(limits, 'k', 6)).remaining, 2, 'shared counting resumed where Redis left it')

  await server.stop()
  t.ok(await until(5_000, () => redis.state() === 'unavailable'), 'the link sees the server gone')
  const gateway = gatewayRateLimits(redis, { rateLimitRedisPrefix: 'private:', rateLimitRedisFallback: 'local' }, metrics.gateway)
  t.teardown(gateway.stop)
  t.match(await metrics.registry.metrics(), /^service_gateway_rate_limit_redis_shared 0$/m)
  await server.start()
  t.ok(await until(10_000, () => redis.state() === 'ready'), 'the link reconnects by itself')
  const fresh = await one(limits, 'k', 6)
  t.equal(fresh.remaining, 5, 'the restarted (empty) Redis counts anew: the script was loaded on the new connection')
  t.match(await metrics.registry.metrics(), /^service_gateway_rate_limit_redis_shared 1$/m, 'the gauge is back to 1')
})
