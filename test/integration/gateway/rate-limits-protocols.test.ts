/**
 * A rate limit counted in Redis on every path that decides (docs/wire-contract.md §8): two gateways in this
 * process, each with its own Redis connection, share one DID's budget across a plain HTTP route, an MCP
 * route (a batch decides each message, each taking a token) and an A2A route; the X-RateLimit-* headers
 * and Retry-After come from Redis's answer; a request without a rate-limit obligation is decided without
 * waiting for Redis.
 */
import t from 'tap'
import { generateKeyPairSync, randomBytes } from 'node:crypto'
import { Writable } from 'node:stream'
import { Redis } from 'ioredis'
import { connectRedis } from '../../../src/net/redis-link.js'
import { RedisRateLimits } from '../../../src/gateway/rate-limits.js'
import { createLogger } from '../../../src/telemetry/logger.js'
import { authorityBadge, CALLER_DID, startProtocolGateway, type ProtocolGateway } from '../../helpers/protocol-gateway.js'
import { startUpstream } from '../../helpers/upstream-server.js'

t.setTimeout(60_000)

const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379'
const prefix = `test-ratelimit-protocols-${randomBytes(4).toString('hex')}:`
const quiet = createLogger('silent', new Writable({ write(_c, _e, done) { done() } }))
const key = generateKeyPairSync('ed25519')
const OTHER_DID = 'did:web:agents.example.com:unlimited'

const admin = new Redis(REDIS_URL)
t.teardown(async () => {
  const keys = await admin.keys(`${prefix}*`)
  if (keys.length > 0) await admin.del(...keys)
  await admin.quit()
})

const upstream = await startUpstream(t)
const POLICY = {
  min_trust_level: null, allowed_dids: null, denied_dids: [], operations: [], mcp_tools: [], capability_classes: [],
  rate_limits: [{ did: CALLER_DID, rpm: 4 }],
}

async function gateway(): Promise<ProtocolGateway> {
  const link = connectRedis(REDIS_URL, quiet)
  t.teardown(() => link.close())
  const deadline = Date.now() + 5_000
  while (link.state() !== 'ready' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20))
  return startProtocolGateway(t, {
    upstreamUrl: upstream.url, authorityKey: key.publicKey, policy: POLICY,
    env: { SERVICE_UPSTREAM_PROTOCOL: 'http' },
    routes: (pool) => [
      { prefix: '/mcp', value: { upstream: pool, mode: null, protocol: 'mcp' } },
      { prefix: '/a2a', value: { upstream: pool, mode: null, protocol: 'a2a' } },
      { prefix: '/', value: { upstream: pool, mode: null } },
    ],
    deps: { rateLimits: new RedisRateLimits({ link, prefix, fallback: 'deny' }) },
  })
}

const [one, two] = [await gateway(), await gateway()] as [ProtocolGateway, ProtocolGateway]
const caller = authorityBadge(key.privateKey, '2')

async function redisSeconds(): Promise<number> {
  return Number((await admin.time())[0])
}

t.test('one budget of 4 across two gateways and three protocols, with Redis\'s numbers in the headers', async (t) => {
  const before = await redisSeconds()
  const http = await fetch(`${one.url}/plain/x`, { headers: { authorization: `Bearer ${caller}` } })
  await http.arrayBuffer()
  t.equal(http.status, 200, 'HTTP on the first gateway: allowed')
  t.equal(http.headers.get('x-ratelimit-limit'), '4')
  t.equal(http.headers.get('x-ratelimit-remaining'), '3', 'remaining as Redis counted it')
  const reset = Number(http.headers.get('x-ratelimit-reset'))
  t.ok(reset >= before && reset <= before + 2, `reset in Unix seconds of Redis's clock (${reset}, Redis said ${before})`)

  const batch = JSON.stringify([
    { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'search', arguments: {} } },
    { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'search', arguments: {} } },
  ])
  const mcp = await fetch(`${two.url}/mcp`, {
    method: 'POST', headers: { authorization: `Bearer ${caller}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, body: batch,
  })
  await mcp.arrayBuffer()
  t.equal(mcp.status, 200, 'an MCP batch of two on the second gateway: both messages allowed')
  t.equal(mcp.headers.get('x-ratelimit-remaining'), '1', 'each message took a token from the shared bucket')

  const a2aCall = (id: number): Promise<Response> => fetch(`${one.url}/a2a`, {
    method: 'POST', headers: { authorization: `Bearer ${caller}`, 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id, method: 'tasks/get', params: { id: 'task-1' } }),
  })
  const a2a = await a2aCall(1)
  await a2a.arrayBuffer()
  t.equal(a2a.status, 200, 'A2A on the first gateway: the last token')
  t.equal(a2a.headers.get('x-ratelimit-remaining'), '0')
  const reached = upstream.requests.length

  const refused = await a2aCall(2)
  const body = await refused.json() as Record<string, unknown>
  // A decision's refusal of a JSON-RPC call is a JSON-RPC error on HTTP 200 (docs/a2a.md, docs/mcp.md).
  t.equal(refused.status, 200)
  t.match(body, { error: { data: { error: 'rate_limit_exceeded' } } }, 'the fifth request in the fleet is refused (EM-STRICT)')
  t.equal(refused.headers.get('x-ratelimit-remaining'), '0')
  const retryAfter = Number(refused.headers.get('retry-after'))
  t.ok(retryAfter >= 14 && retryAfter <= 15, `Retry-After: 15 s for a token at 4 rpm, less what refilled (${retryAfter})`)
  const limitedReset = Number(refused.headers.get('x-ratelimit-reset'))
  t.ok(limitedReset >= before + 14 && limitedReset <= before + 17, `the reset is when the next token comes (${limitedReset})`)

  const batchRefused = await fetch(`${two.url}/mcp`, {
    method: 'POST', headers: { authorization: `Bearer ${caller}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, body: batch,
  })
  const batchBody = await batchRefused.json() as unknown
  t.match(batchBody, [{ id: 1, error: { data: { error: 'rate_limit_exceeded' } } }, { id: 2, error: { data: { error: 'rate_limit_exceeded' } } }], 'an MCP batch over the limit is refused whole')
  t.ok(Number(batchRefused.headers.get('retry-after')) >= 1, 'with Retry-After')
  t.equal(upstream.requests.length, reached, 'nothing over the limit reached the upstream')
})

t.test('a request without a rate-limit obligation is decided without waiting for Redis', async (t) => {
  // A second connection that is never ready: were Redis asked, the answer would be 429 (fallback deny).
  const down = connectRedis('redis://127.0.0.1:1', quiet)
  t.teardown(() => down.close())
  const gatewayDown = await startProtocolGateway(t, {
    upstreamUrl: upstream.url, authorityKey: key.publicKey, policy: POLICY,
    routes: (pool) => [{ prefix: '/', value: { upstream: pool, mode: null } }],
    deps: { rateLimits: new RedisRateLimits({ link: down, prefix, fallback: 'deny' }) },
  })
  const res = await fetch(`${gatewayDown.url}/free`, { headers: { authorization: `Bearer ${authorityBadge(key.privateKey, '2', OTHER_DID)}` } })
  await res.arrayBuffer()
  t.equal(res.status, 200, 'a DID without a limit passes')
  t.equal(res.headers.get('x-ratelimit-limit'), null, 'with no rate-limit headers')
  const limited = await fetch(`${gatewayDown.url}/free`, { headers: { authorization: `Bearer ${caller}` } })
  await limited.arrayBuffer()
  t.equal(limited.status, 429, 'the limited DID meets the deny fallback')
  t.equal(limited.headers.get('retry-after'), '2')
})
