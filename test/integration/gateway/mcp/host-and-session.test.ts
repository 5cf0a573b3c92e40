/**
 * An MCP route checks Host and Origin itself (DNS rebinding: the gateway sends the upstream its own Host, so
 * the server's check never sees the client's), and a session belongs to the subject whose initialize
 * opened it. The example MCP server (the real SDK) is the upstream and the SDK's Client the caller; every
 * refusal is the gateway's, and nothing reaches the upstream for it (docs/mcp.md, "Host and Origin",
 * "Sessions").
 */
import t, { type Test } from 'tap'
import { generateKeyPairSync, type KeyObject } from 'node:crypto'
import { request as httpRequest } from 'undici'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { buildBadgeClaims, signBadge } from '../../../../src/core/badge.js'
import { GATEWAY_ISSUER, startProtocolGateway } from '../../../helpers/protocol-gateway.js'
import { startMcpUpstream, type McpUpstream, type McpUpstreamMode } from '../../../helpers/mcp-upstream.js'

t.setTimeout(180_000)

const ALICE = 'did:web:agents.example.com:alice'
const BOB = 'did:web:agents.example.com:bob'
const key = generateKeyPairSync('ed25519')
const ALLOW_ALL = { min_trust_level: null, allowed_dids: null, denied_dids: [], rate_limits: [], operations: [], capability_classes: [], mcp_tools: [] }

let badges = 0
function badgeFor(subject: string): string {
  const now = Math.floor(Date.now() / 1000)
  return signBadge(buildBadgeClaims({
    jti: `jti-${subject}-${++badges}`, issuer: GATEWAY_ISSUER, subject, issuedAt: now - 10, expiresAt: now + 3600, ial: '1', level: '2', domain: 'agents.example.com',
  }), { kid: 'k1', privateKey: key.privateKey as KeyObject })
}

async function harness(t: Test, mode: McpUpstreamMode, env: Record<string, string> = {}): Promise<{ url: string; port: string; upstream: McpUpstream }> {
  const upstream = await startMcpUpstream(t, mode)
  const gateway = await startProtocolGateway(t, {
    upstreamUrl: upstream.url, authorityKey: key.publicKey, policy: ALLOW_ALL, env,
    routes: (pool) => [{ prefix: '/mcp', value: { upstream: pool, mode: null, protocol: 'mcp' } }],
  })
  return { url: gateway.url, port: new URL(gateway.url).port, upstream }
}

const INITIALIZE = JSON.stringify({
  jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'rebinding', version: '1' } },
})

async function send(url: string, method: string, headers: Record<string, string>, body?: string): Promise<{ status: number; json: unknown; headers: Record<string, unknown> }> {
  const res = await httpRequest(`${url}/mcp`, {
    method: method as 'POST', body,
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
  })
  const text = await res.body.text()
  let json: unknown = text
  try {
    json = JSON.parse(text)
  } catch {
    // an SSE answer or an empty one stays text
  }
  return { status: res.statusCode, json, headers: res.headers }
}

t.test('Host and Origin on an MCP route, checked before the badge, the body and the upstream', async (t) => {
  const h = await harness(t, { stateless: true, json: true })
  const auth = { authorization: `Bearer ${badgeFor(ALICE)}` }
  const refused: [string, string, Record<string, string>, string][] = [
    ['a rebound name with its origin (the conformance scenario)', 'POST', { ...auth, host: 'evil.example.com', origin: 'http://evil.example.com' }, 'MCP_HOST_NOT_ALLOWED'],
    ['a rebound name on the gateway\'s port', 'POST', { ...auth, host: `evil.example.com:${h.port}` }, 'MCP_HOST_NOT_ALLOWED'],
    ['a loopback-looking name', 'POST', { ...auth, host: `localhost.evil.example.com:${h.port}` }, 'MCP_HOST_NOT_ALLOWED'],
    ['userinfo in Host', 'POST', { ...auth, host: 'evil.example.com@localhost' }, 'MCP_HOST_NOT_ALLOWED'],
    ['a loopback Host with a foreign Origin', 'POST', { ...auth, host: `localhost:${h.port}`, origin: 'http://evil.example.com' }, 'MCP_ORIGIN_NOT_ALLOWED'],
    ['Origin null (a sandboxed page)', 'POST', { ...auth, origin: 'null' }, 'MCP_ORIGIN_NOT_ALLOWED'],
    ['no badge either: the Host comes first', 'POST', { host: 'evil.example.com' }, 'MCP_HOST_NOT_ALLOWED'],
    ['the GET stream', 'GET', { ...auth, host: 'evil.example.com' }, 'MCP_HOST_NOT_ALLOWED'],
    ['the DELETE of a session', 'DELETE', { ...auth, host: 'evil.example.com', 'mcp-session-id': 'x' }, 'MCP_HOST_NOT_ALLOWED'],
    ['an X-Forwarded-Host from a peer that is not a trusted proxy does not help', 'POST', { ...auth, host: 'evil.example.com', 'x-forwarded-host': 'localhost' }, 'MCP_HOST_NOT_ALLOWED'],
  ]
  for (const [name, method, headers, code] of refused) {
    const before = h.upstream.reached.length
    const answer = await send(h.url, method, headers, method === 'POST' ? INITIALIZE : undefined)
    t.equal(answer.status, 403, `${name}: 403`)
    t.match(answer.json, { jsonrpc: '2.0', id: null, error: { code: -32000, data: { error: code } } }, `${name}: a JSON-RPC error naming ${code}`)
    t.equal(answer.headers['x-service-gateway'], 'error')
    t.equal(h.upstream.reached.length, before, `${name}: nothing reached the upstream`)
  }
  for (const [name, headers] of [
    ['127.0.0.1 and no Origin (not a browser)', { ...auth }],
    ['localhost with a loopback Origin', { ...auth, host: `localhost:${h.port}`, origin: `http://localhost:${h.port}` }],
    ['[::1] on another port', { ...auth, host: '[::1]:1234', origin: 'https://127.0.0.1' }],
    ['the default public URL\'s host', { ...auth, host: 'localhost:8000', origin: 'http://localhost:8000' }],
    ['an untrusted peer\'s X-Forwarded-Host is not read', { ...auth, 'x-forwarded-host': 'evil.example.com' }],
  ] as const) {
    const answer = await send(h.url, 'POST', headers, INITIALIZE)
    t.equal(answer.status, 200, `${name}: passes`)
    t.match(answer.json, { id: 1, result: { protocolVersion: String } })
  }
})

t.test('behind a trusted proxy every X-Forwarded-Host and Forwarded host counts too; configured lists replace the default', async (t) => {
  const proxied = await harness(t, { stateless: true, json: true }, { SERVICE_TRUSTED_PROXIES: '127.0.0.1' })
  const auth = { authorization: `Bearer ${badgeFor(ALICE)}` }
  for (const [name, headers] of [
    ['X-Forwarded-Host', { 'x-forwarded-host': 'evil.example.com' }],
    ['the second of two X-Forwarded-Host values', { 'x-forwarded-host': 'localhost, evil.example.com' }],
    ['Forwarded: host=', { forwarded: 'for=192.0.2.1;host="evil.example.com";proto=http' }],
  ] as const) {
    const answer = await send(proxied.url, 'POST', { ...auth, ...headers }, INITIALIZE)
    t.equal(answer.status, 403, `${name}: 403`)
    t.match(answer.json, { error: { data: { error: 'MCP_HOST_NOT_ALLOWED' } } })
  }
  t.equal((await send(proxied.url, 'POST', { ...auth, 'x-forwarded-host': 'localhost:8443' }, INITIALIZE)).status, 200, 'a loopback X-Forwarded-Host passes')

  const configured = await harness(t, { stateless: true, json: true }, {
    SERVICE_MCP_ALLOWED_HOSTS: 'mcp.example.com', SERVICE_MCP_ALLOWED_ORIGINS: 'https://app.example.com', SERVICE_GATEWAY_PUBLIC_URL: 'https://gw.example.com',
  })
  t.equal((await send(configured.url, 'POST', { ...auth, host: 'mcp.example.com', origin: 'https://app.example.com' }, INITIALIZE)).status, 200, 'a configured host and origin pass')
  t.equal((await send(configured.url, 'POST', { ...auth }, INITIALIZE)).status, 403, 'loopback is not added to a configured list')
  t.equal((await send(configured.url, 'POST', { ...auth, host: 'gw.example.com' }, INITIALIZE)).status, 403, 'nor is the public URL')
  t.equal((await send(configured.url, 'POST', { ...auth, host: 'mcp.example.com', origin: 'https://gw.example.com' }, INITIALIZE)).status, 403, 'an origin not listed')
})

function connectTransport(url: string, token: string, sessionId?: string): StreamableHTTPClientTransport {
  return new StreamableHTTPClientTransport(new URL(`${url}/mcp`), { sessionId, requestInit: { headers: { authorization: `Bearer ${token}` } } })
}

async function statusOf(promise: Promise<unknown>): Promise<number | string> {
  return promise.then(() => 'resolved', (error: unknown) => (error as { code?: number }).code ?? String(error))
}

t.test('a session follows its subject: another badge\'s use is refused and reaches nothing', async (t) => {
  const h = await harness(t, { stateless: false, json: true })
  const alice = new Client({ name: 'alice', version: '1.0.0' })
  const aliceTransport = connectTransport(h.url, badgeFor(ALICE))
  await alice.connect(aliceTransport)
  t.teardown(() => alice.close())
  const session = aliceTransport.sessionId as string
  t.match(session, /^[0-9a-f-]{36}$/, 'alice has a session')
  t.ok((await alice.listTools()).tools.length > 0, 'and uses it')

  // Bob holds a valid badge and has learnt alice's session id.
  const bob = connectTransport(h.url, badgeFor(BOB), session)
  await bob.start()
  t.teardown(() => bob.close())
  bob.setProtocolVersion(aliceTransport.protocolVersion as string)
  const before = h.upstream.reached.length
  t.equal(await statusOf(bob.send({ jsonrpc: '2.0', id: 99, method: 'tools/call', params: { name: 'search', arguments: { query: 'x' } } })), 403, 'bob\'s call in alice\'s session is 403')
  t.equal(await statusOf(bob.send({ jsonrpc: '2.0', method: 'notifications/initialized' })), 403, 'so is a notification')
  t.equal(await statusOf(bob.terminateSession()), 403, 'bob cannot end alice\'s session')
  const get = await send(h.url, 'GET', { authorization: `Bearer ${badgeFor(BOB)}`, 'mcp-session-id': session, accept: 'text/event-stream' })
  t.equal(get.status, 403, 'nor open its stream')
  t.match(get.json, { id: null, error: { code: -32000, data: { error: 'MCP_SESSION_FORBIDDEN' } } })
  for (const [method, body] of [
    ['POST', JSON.stringify({ jsonrpc: '2.0', id: 'srv-1', result: {} })], ['POST', INITIALIZE], ['HEAD', undefined], ['PUT', undefined], ['OPTIONS', undefined],
  ] as const) {
    const answer = await send(h.url, method, { authorization: `Bearer ${badgeFor(BOB)}`, 'mcp-session-id': session, 'mcp-protocol-version': '2025-06-18' }, body)
    t.equal(answer.status, 403, `bob's ${method}${body === undefined ? '' : ` of ${body.slice(0, 40)}`} in alice's session is 403`)
  }
  t.equal(h.upstream.reached.length, before, 'nothing of bob\'s reached the upstream')

  // A renewed badge of the same subject keeps the session: a session outlives a badge.
  const renewed = await send(h.url, 'POST', { authorization: `Bearer ${badgeFor(ALICE)}`, 'mcp-session-id': session, 'mcp-protocol-version': aliceTransport.protocolVersion as string },
    JSON.stringify({ jsonrpc: '2.0', id: 5, method: 'tools/list' }))
  t.equal(renewed.status, 200, 'alice with a renewed badge still uses her session')
  t.ok((await alice.listTools()).tools.length > 0, 'and alice\'s own client still works')

  const unknown = await send(h.url, 'POST', { authorization: `Bearer ${badgeFor(ALICE)}`, 'mcp-session-id': 'not-a-session' }, JSON.stringify({ jsonrpc: '2.0', id: 6, method: 'tools/list' }))
  t.equal(unknown.status, 404, 'a session the gateway does not know is 404, so the client starts a new one')
  t.match(unknown.json, { id: null, error: { code: -32001, data: { error: 'MCP_SESSION_UNKNOWN' } } })
  const twice = await send(h.url, 'GET', { authorization: `Bearer ${badgeFor(ALICE)}`, 'mcp-session-id': session, 'Mcp-Session-Id': session })
  t.equal(twice.status, 400, 'two session ids are refused')

  const reachedBeforeEnd = h.upstream.reached.length
  await aliceTransport.terminateSession()
  t.equal(h.upstream.reached.length, reachedBeforeEnd + 1, 'alice ends her session upstream')
  const after = await send(h.url, 'POST', { authorization: `Bearer ${badgeFor(ALICE)}`, 'mcp-session-id': session }, JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/list' }))
  t.equal(after.status, 404, 'the ended session is unknown to the gateway')
  t.equal(h.upstream.reached.length, reachedBeforeEnd + 1, 'and nothing more reached the upstream')

  // A new session of bob's own works as any.
  const own = new Client({ name: 'bob', version: '1.0.0' })
  await own.connect(connectTransport(h.url, badgeFor(BOB)))
  t.teardown(() => own.close())
  t.ok((await own.listTools()).tools.length > 0, 'bob\'s own session works')
})
