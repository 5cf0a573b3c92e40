/**
 * Gateway routes as OAuth protected resources (docs/mcp.md, "Authorization"), through the runtime users
 * start (configuration, routes file, embedded or HTTP PDP) and real sockets, with badges signed here: the
 * RFC 9728 metadata at its well-known paths, the 401 challenges naming it, the RFC 8707 audience check, and
 * the 403 insufficient_scope challenge of a trust-level denial, and where each of them must not appear.
 */
import t, { type Test } from 'tap'
import { generateKeyPairSync, type KeyObject } from 'node:crypto'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { Writable } from 'node:stream'
import { request as httpRequest } from 'undici'
import { loadConfig } from '../../../src/config/index.js'
import { buildBadgeClaims, signBadge } from '../../../src/core/badge.js'
import { signSelfSignedBadge } from '../../../src/core/self-signed-badge.js'
import type { TrustLevel } from '../../../src/core/trust-level.js'
import { startGatewayRuntime, type GatewayRuntime } from '../../../src/gateway/runtime.js'
import type { SnapshotContent } from '../../../src/gateway/snapshot/snapshot.js'
import { createLogger } from '../../../src/telemetry/logger.js'
import { createMetrics } from '../../../src/telemetry/metrics.js'
import { startPdpServer } from '../../helpers/pdp-server.js'
import { startUpstream, type UpstreamServer } from '../../helpers/upstream-server.js'

const ISSUER = 'https://registry.test'
const PUBLIC = 'https://gw.example.com'
const WORKSPACE = '6f1c2a4e-0d7b-4c3e-9a57-1b2c3d4e5f60'
const READER = 'did:web:agents.example.com:reader'
const WELL_KNOWN = '/.well-known/oauth-protected-resource'
const key = generateKeyPairSync('ed25519')

let jtis = 0
// The key the agent proved at the token endpoint (or by proof of possession): its badges are bound to it.
const AGENT_KEY_X = generateKeyPairSync('ed25519').publicKey.export({ format: 'jwk' }).x as string
const CNF = { kid: `${READER}#key-1`, jwk: { kty: 'OKP' as const, crv: 'Ed25519' as const, x: AGENT_KEY_X } }

function badge(options: { level?: TrustLevel; audience?: string[]; expired?: boolean; keyBound?: boolean } = {}): string {
  const now = Math.floor(Date.now() / 1000)
  const expiresAt = options.expired === true ? now - 3600 : now + 3600
  return signBadge(buildBadgeClaims({
    jti: `jti-rs-${++jtis}`, issuer: ISSUER, subject: READER, issuedAt: now - 7200, expiresAt, ial: options.keyBound === false ? '0' : '1',
    level: options.level ?? '2', domain: 'agents.example.com', ...(options.audience === undefined ? {} : { audience: options.audience }),
    ...(options.keyBound === false ? {} : { cnf: CNF }),
  }), { kid: 'k1', privateKey: key.privateKey as KeyObject })
}

function selfSigned(): string {
  const now = Math.floor(Date.now() / 1000)
  return signSelfSignedBadge(generateKeyPairSync('ed25519').privateKey, { jti: `jti-ss-${++jtis}`, issuedAt: now - 10, expiresAt: now + 600 }).token
}

// Gold paths and the pay tool want OV (a DV caller can ask the authority for more); registered-only ones
// want REG (above a self-signed badge, which no authority raises); delete_* is for nobody.
const POLICY = {
  min_trust_level: null, allowed_dids: null, denied_dids: [], rate_limits: [], capability_classes: [],
  operations: [
    { pattern: 'GET /rs/gold/**', min_trust_level: 'OV' },
    { pattern: 'GET /api/gold/**', min_trust_level: 'OV' },
    { pattern: 'GET /rs/registered/**', min_trust_level: 'REG' },
  ],
  mcp_tools: [{ tool: 'pay', min_trust_level: 'OV' }, { tool: 'register', min_trust_level: 'REG' }, { tool: 'delete_*', allowed_dids: [] }],
}

function content(issuer = ISSUER): SnapshotContent {
  return {
    issuer, keys: new Map([['k1', key.publicKey]]), keysVersion: 'k1', revoked: new Set(),
    bundle: { revision: 'r1', data: { config: POLICY }, confirmedAt: Date.now() },
  }
}

interface Harness {
  readonly url: string
  readonly runtime: GatewayRuntime
  readonly upstream: UpstreamServer
  readonly logLines: Record<string, unknown>[]
}

/** A gateway as `agent-trust gateway` starts it from `env`, on a snapshot set here; `routes` become its routes file. */
async function start(t: Test, upstream: UpstreamServer, env: Record<string, string>, routes?: unknown[]): Promise<Harness> {
  const settings: Record<string, string> = {
    DATABASE_URL: 'memory://', SERVICE_ENFORCEMENT_MODE: 'EM-GUARD', SERVICE_EMBEDDED_PDP: 'true', SERVICE_WORKSPACE: WORKSPACE,
    SERVICE_ACCEPT_SELF_SIGNED: 'true', ...env,
  }
  if (routes !== undefined) {
    const dir = await mkdtemp(path.join(tmpdir(), 'rs-routes-'))
    t.teardown(() => rm(dir, { recursive: true, force: true }))
    settings.SERVICE_ROUTES_FILE = path.join(dir, 'routes.json')
    await writeFile(settings.SERVICE_ROUTES_FILE, JSON.stringify({ routes }))
  }
  const logLines: Record<string, unknown>[] = []
  const sink = new Writable({
    write(chunk, _encoding, callback) {
      for (const line of String(chunk).split('\n')) if (line !== '') logLines.push(JSON.parse(line) as Record<string, unknown>)
      callback()
    },
  })
  const runtime = await startGatewayRuntime(loadConfig(settings).gateway, {
    source: { async start(holder) { holder.swap(content()) }, async close() {} },
    logger: createLogger('info', sink), metrics: createMetrics().gateway,
  })
  const server = runtime.gateway.server
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(async () => {
    server.closeAllConnections()
    await new Promise<void>((resolve) => server.close(() => resolve()))
    await runtime.close()
  })
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, runtime, upstream, logLines }
}

interface Answer {
  readonly status: number
  readonly headers: Record<string, string | string[] | undefined>
  readonly text: string
  json(): any
}

async function send(h: Harness, method: string, target: string, headers: Record<string, string> = {}, body?: string): Promise<Answer> {
  const res = await httpRequest(h.url + target, { method: method as 'GET', headers, ...(body === undefined ? {} : { body }) })
  const text = await res.body.text()
  return { status: res.statusCode, headers: res.headers, text, json: () => JSON.parse(text) }
}

const call = (id: number, name: string): Record<string, unknown> => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: {} } })

function mcp(h: Harness, target: string, token: string | null, message: unknown, headers: Record<string, string> = {}): Promise<Answer> {
  return send(h, 'POST', target, {
    'content-type': 'application/json', accept: 'application/json, text/event-stream',
    ...(token === null ? {} : { authorization: `Bearer ${token}` }), ...headers,
  }, JSON.stringify(message))
}

const get = (h: Harness, target: string, token: string | null): Promise<Answer> =>
  send(h, 'GET', target, token === null ? {} : { authorization: `Bearer ${token}` })

const ROUTES = (upstream: string): unknown[] => [
  { prefix: '/', upstream },
  { prefix: '/mcp', upstream, protocol: 'mcp' },
  { prefix: '/tools', upstream, protocol: 'mcp', resourceServer: false },
  { prefix: '/other', upstream, protocol: 'mcp', resource: 'https://api.example.com/other-tools' },
  { prefix: '/rs', upstream, resourceServer: true },
  { prefix: '/strict', upstream, resourceServer: true, requireAudience: true },
  { prefix: '/api', upstream },
]

const CHALLENGE_MCP = `Bearer resource_metadata="${PUBLIC}${WELL_KNOWN}/mcp"`
const INVALID_MCP = `Bearer error="invalid_token", resource_metadata="${PUBLIC}${WELL_KNOWN}/mcp"`

t.test('protected-resource metadata: served before route matching, for resource servers only', async (t) => {
  const upstream = await startUpstream(t)
  const h = await start(t, upstream, { SERVICE_GATEWAY_PUBLIC_URL: `${PUBLIC}/` }, ROUTES(upstream.url))

  for (const [route, resource] of [['mcp', `${PUBLIC}/mcp`], ['rs', `${PUBLIC}/rs`], ['strict', `${PUBLIC}/strict`], ['other-tools', 'https://api.example.com/other-tools']]) {
    const answer = await get(h, `${WELL_KNOWN}/${route}`, null)
    t.equal(answer.status, 200, `${route}: no badge needed`)
    t.strictSame(answer.json(), { resource, authorization_servers: [ISSUER], bearer_methods_supported: ['header'] }, `${route}: the RFC 9728 members, resource as the route's`)
    t.equal(answer.headers['content-type'], 'application/json')
    t.equal(answer.headers['access-control-allow-origin'], '*', 'readable from any origin')
    t.equal(answer.headers['x-service-gateway'], 'metadata', 'marked as the gateway\'s own answer')
  }
  const head = await send(h, 'HEAD', `${WELL_KNOWN}/mcp`)
  t.equal(head.status, 200)
  t.equal(head.text, '', 'HEAD: no body')
  t.equal(Number(head.headers['content-length']), (await get(h, `${WELL_KNOWN}/mcp`, null)).text.length, 'HEAD: the length GET would send')
  t.equal((await get(h, `${WELL_KNOWN}/mcp?x=1`, null)).status, 200, 'a query does not change the document')
  t.equal((await get(h, `${WELL_KNOWN}/%6Dcp`, null)).json().resource, `${PUBLIC}/mcp`, 'the path is matched in canonical form')

  h.runtime.holder.swap(content('https://registry-2.test'))
  t.strictSame((await get(h, `${WELL_KNOWN}/mcp`, null)).json().authorization_servers, ['https://registry-2.test'], 'the issuer of the current snapshot')
  h.runtime.holder.swap(content())
  t.equal(upstream.requests.length, 0, 'the upstream saw none of these')

  for (const method of ['POST', 'PUT', 'DELETE', 'OPTIONS', 'PATCH']) {
    const refused = await send(h, method, `${WELL_KNOWN}/mcp`)
    t.equal(refused.status, 405, `${method}: 405`)
    t.equal(refused.headers.allow, 'GET, HEAD', `${method}: Allow`)
    t.match(refused.json(), { error: 'METHOD_NOT_ALLOWED' })
  }
  t.equal(upstream.requests.length, 0, 'nor these')

  // Not the metadata of a resource server: the path is routed as it was before (here to the "/" route).
  const token = badge()
  for (const target of [`${WELL_KNOWN}/api`, `${WELL_KNOWN}/tools`, WELL_KNOWN, `${WELL_KNOWN}/mcp/`, `${WELL_KNOWN}/MCP`, `${WELL_KNOWN}/mcp/x`]) {
    t.equal((await get(h, target, null)).status, 401, `${target}: the "/" route wants a badge`)
    const passed = await get(h, target, token)
    t.equal(passed.status, 200, `${target}: forwarded`)
    t.equal(upstream.requests.at(-1)?.url, target, `${target}: the upstream received it`)
  }

  h.runtime.gateway.flushLog()
  const lines = h.logLines.filter((line) => line.msg === 'gateway request')
  t.ok(lines.some((line) => line.status === 200 && line.method === 'GET' && line.error_code === undefined && line['service.policy.decision'] === undefined), 'a metadata answer has its log line')
  t.ok(lines.some((line) => line.status === 405 && line.error_code === 'METHOD_NOT_ALLOWED'), 'and so has a refused method')
})

t.test('the root form: a resource server on "/" (SERVICE_UPSTREAM_URL, MCP)', async (t) => {
  const upstream = await startUpstream(t)
  const h = await start(t, upstream, { SERVICE_UPSTREAM_URL: upstream.url, SERVICE_UPSTREAM_PROTOCOL: 'mcp', SERVICE_GATEWAY_PUBLIC_URL: PUBLIC })
  const answer = await get(h, WELL_KNOWN, null)
  t.equal(answer.status, 200)
  t.strictSame(answer.json(), { resource: PUBLIC, authorization_servers: [ISSUER], bearer_methods_supported: ['header'] }, 'the resource is the public URL itself')
  const unauthorized = await mcp(h, '/', null, call(1, 'search'))
  t.equal(unauthorized.headers['www-authenticate'], `Bearer resource_metadata="${PUBLIC}${WELL_KNOWN}"`)
  t.equal((await mcp(h, '/', badge({ audience: [PUBLIC] }), call(2, 'search'))).status, 200, 'a badge for the public URL passes')
  t.equal((await mcp(h, '/', badge({ audience: [`${PUBLIC}/`] }), call(3, 'search'))).status, 401, 'the audience is compared exactly')
  t.equal(upstream.requests.length, 1)
})

t.test('SERVICE_UPSTREAM_* variables: an HTTP resource server with its own resource that requires an audience', async (t) => {
  const upstream = await startUpstream(t)
  const resource = 'https://api.example.com/v1'
  const h = await start(t, upstream, {
    SERVICE_UPSTREAM_URL: upstream.url, SERVICE_UPSTREAM_RESOURCE_SERVER: 'true', SERVICE_UPSTREAM_RESOURCE: resource, SERVICE_UPSTREAM_REQUIRE_AUDIENCE: 'true',
  })
  t.equal((await get(h, `${WELL_KNOWN}/v1`, null)).json().resource, resource, 'the metadata path follows the resource\'s path')
  const refused = await get(h, '/anything', badge())
  t.equal(refused.status, 401, 'a badge without aud is refused')
  t.equal(refused.headers['www-authenticate'], `Bearer error="invalid_token", resource_metadata="https://api.example.com${WELL_KNOWN}/v1"`)
  t.equal((await get(h, '/anything', badge({ audience: [resource] }))).status, 200)
})

t.test('401 challenges name the metadata on resource-server routes only', async (t) => {
  const upstream = await startUpstream(t)
  const h = await start(t, upstream, { SERVICE_GATEWAY_PUBLIC_URL: PUBLIC }, ROUTES(upstream.url))
  const missing = await mcp(h, '/mcp', null, call(1, 'search'))
  t.equal(missing.status, 401)
  t.equal(missing.headers['www-authenticate'], CHALLENGE_MCP, 'no badge: resource_metadata alone')
  t.match(missing.json(), { error: 'BADGE_MISSING' })
  for (const [label, token] of [['garbage', 'not-a-badge'], ['expired', badge({ expired: true })]]) {
    const invalid = await mcp(h, '/mcp', token, call(1, 'search'))
    t.equal(invalid.status, 401)
    t.equal(invalid.headers['www-authenticate'], INVALID_MCP, `${label}: error="invalid_token" first, then resource_metadata`)
  }
  t.equal((await get(h, '/rs/x', null)).headers['www-authenticate'], `Bearer resource_metadata="${PUBLIC}${WELL_KNOWN}/rs"`, 'an HTTP resource server too')
  t.equal((await get(h, '/other', null)).headers['www-authenticate'], `Bearer resource_metadata="https://api.example.com${WELL_KNOWN}/other-tools"`, 'built on the route\'s own resource')
  t.equal((await mcp(h, '/tools', null, call(1, 'search'))).headers['www-authenticate'], 'Bearer', 'an MCP route that is no resource server: as before')
  t.equal((await mcp(h, '/tools', 'not-a-badge', call(1, 'search'))).headers['www-authenticate'], 'Bearer error="invalid_token"')
  t.equal((await get(h, '/api/x', null)).headers['www-authenticate'], undefined, 'a plain HTTP route: none')
  t.equal(upstream.requests.length, 0)
})

t.test('the audience (RFC 8707): checked on resource servers against the cached badge, ignored elsewhere', async (t) => {
  const upstream = await startUpstream(t)
  const h = await start(t, upstream, { SERVICE_GATEWAY_PUBLIC_URL: PUBLIC }, ROUTES(upstream.url))
  const elsewhere = badge({ audience: ['https://elsewhere.example.com/mcp'] })

  // Verified (and cached) on a route that ignores the audience first, then refused where it counts.
  t.equal((await get(h, '/api/x', elsewhere)).status, 200, 'a plain HTTP route ignores aud')
  t.equal((await mcp(h, '/tools', elsewhere, call(1, 'search'))).status, 200, 'so does an MCP route that is no resource server')
  const before = upstream.requests.length
  for (const [target, challenge] of [['/mcp', INVALID_MCP], ['/rs/x', `Bearer error="invalid_token", resource_metadata="${PUBLIC}${WELL_KNOWN}/rs"`]]) {
    const refused = target === '/mcp' ? await mcp(h, target, elsewhere, call(2, 'search')) : await get(h, target, elsewhere)
    t.equal(refused.status, 401, `${target}: refused`)
    t.match(refused.text, /BADGE_AUDIENCE_MISMATCH/, `${target}: BADGE_AUDIENCE_MISMATCH`)
    t.equal(refused.headers['www-authenticate'], challenge, `${target}: an invalid token`)
  }
  t.equal((await mcp(h, '/mcp', badge({ audience: [`${PUBLIC}/rs`] }), call(3, 'search'))).status, 401, 'another route\'s resource is another audience')
  t.equal(upstream.requests.length, before, 'the upstream was never reached for them')

  t.equal((await mcp(h, '/mcp', badge({ audience: ['https://elsewhere.example.com', `${PUBLIC}/mcp`] }), call(4, 'search'))).status, 200, 'an audience that contains the resource')
  t.equal((await mcp(h, '/mcp', badge(), call(5, 'search'))).status, 200, 'no audience: accepted')
  t.equal((await get(h, '/rs/x', badge({ audience: [`${PUBLIC}/rs`] }))).status, 200)
  t.equal((await mcp(h, '/other', badge({ audience: ['https://api.example.com/other-tools'] }), call(6, 'search'))).status, 200, 'a resource of the route\'s own')

  const empty = await get(h, '/strict/x', badge())
  t.equal(empty.status, 401, 'requireAudience: no audience is refused')
  t.match(empty.json(), { error: 'BADGE_AUDIENCE_MISMATCH' })
  t.equal((await get(h, '/strict/x', badge({ audience: [`${PUBLIC}/strict`] }))).status, 200, 'requireAudience: the resource passes')
  t.equal(upstream.requests.length, before + 5)

  h.runtime.gateway.flushLog()
  t.match(h.logLines.find((line) => line.error_code === 'BADGE_AUDIENCE_MISMATCH'), { status: 401, agent_did: READER }, 'logged with the badge\'s subject')
})

t.test('insufficient_scope: a trust-level denial on a resource server is a 403 challenge for the level', async (t) => {
  const upstream = await startUpstream(t)
  const h = await start(t, upstream, { SERVICE_GATEWAY_PUBLIC_URL: PUBLIC }, ROUTES(upstream.url))
  const dv = badge()

  const onMcp = await mcp(h, '/mcp', dv, call(7, 'pay'))
  t.equal(onMcp.status, 403, 'MCP: 403 instead of 200')
  t.equal(onMcp.headers['www-authenticate'], `Bearer error="insufficient_scope", scope="trust:OV", resource_metadata="${PUBLIC}${WELL_KNOWN}/mcp"`)
  const plainMcp = await mcp(h, '/tools', dv, call(7, 'pay'))
  t.equal(plainMcp.status, 200, 'the same denial on an MCP route that is no resource server: 200 as before')
  t.equal(plainMcp.headers['www-authenticate'], undefined)
  const body = onMcp.json()
  t.match(body, { jsonrpc: '2.0', id: 7, error: { code: -32030, data: { error: 'POLICY_DENIED', reason: 'mcp_tool_trust_level_below_minimum', decision_id: /\S/ } } })
  t.strictSame({ ...body, error: { ...body.error, data: { ...body.error.data, decision_id: '' } } },
    { ...plainMcp.json(), error: { ...plainMcp.json().error, data: { ...plainMcp.json().error.data, decision_id: '' } } }, 'the JSON-RPC error body is unchanged')

  const onHttp = await get(h, '/rs/gold/report', dv)
  t.equal(onHttp.status, 403)
  t.equal(onHttp.headers['www-authenticate'], `Bearer error="insufficient_scope", scope="trust:OV", resource_metadata="${PUBLIC}${WELL_KNOWN}/rs"`)
  t.match(onHttp.json(), { error: 'POLICY_DENIED', reason: 'operation_trust_level_below_minimum' })
  t.equal((await get(h, '/rs/gold/report', badge({ level: '3' }))).status, 200, 'at the level asked for, allowed')
  const reg = await get(h, '/rs/gold/report', badge({ level: '1' }))
  t.equal(reg.headers['www-authenticate'], `Bearer error="insufficient_scope", scope="trust:OV", resource_metadata="${PUBLIC}${WELL_KNOWN}/rs"`, 'the level the policy wants, whatever the caller has')
  t.equal(upstream.requests.length, 1, 'only the allowed request reached the upstream')

  const none: [string, Promise<Answer>, number][] = [
    ['a plain HTTP route', get(h, '/api/gold/report', dv), 403],
    ['a batch', mcp(h, '/mcp', dv, [call(8, 'pay'), call(9, 'search')], { 'mcp-protocol-version': '2025-03-26' }), 200],
    ['a denial that is not for the trust level', mcp(h, '/mcp', dv, call(10, 'delete_file')), 200],
    ['a self-signed badge (HTTP)', get(h, '/rs/registered/x', selfSigned()), 403],
    ['a self-signed badge (MCP)', mcp(h, '/mcp', selfSigned(), call(11, 'register')), 200],
    ['an API-key badge, bound to no key (HTTP)', get(h, '/rs/gold/report', badge({ keyBound: false })), 403],
    ['an API-key badge, bound to no key (MCP)', mcp(h, '/mcp', badge({ keyBound: false }), call(12, 'pay')), 200],
  ]
  for (const [label, answer, status] of none) {
    const { headers, status: got, text } = await answer
    t.equal(got, status, `${label}: ${status} as before`)
    t.equal(headers['www-authenticate'], undefined, `${label}: no challenge`)
    t.match(text, /POLICY_DENIED/, `${label}: a denial`)
  }
})

t.test('required_trust_level from an external PDP: a trust code makes the challenge, anything else an invalid answer', async (t) => {
  const upstream = await startUpstream(t)
  const pdp = await startPdpServer(t)
  const h = await start(t, upstream, { SERVICE_GATEWAY_PUBLIC_URL: PUBLIC, SERVICE_EMBEDDED_PDP: 'false', SERVICE_PDP_ENDPOINT: pdp.url }, ROUTES(upstream.url))
  const answer = (required: unknown): void => pdp.respond({
    status: 200, body: JSON.stringify({ decision: 'DENY', decision_id: `d-${++jtis}`, reason: 'operation_trust_level_below_minimum', required_trust_level: required }),
  })
  answer('EV')
  const denied = await get(h, '/rs/x', badge())
  t.equal(denied.status, 403)
  t.equal(denied.headers['www-authenticate'], `Bearer error="insufficient_scope", scope="trust:EV", resource_metadata="${PUBLIC}${WELL_KNOWN}/rs"`)
  t.equal((await get(h, '/rs/x', badge({ level: '4' }))).headers['www-authenticate'], undefined, 'a caller already at the level: a plain denial')
  answer('OV", scope="admin')
  const injected = await get(h, '/rs/x', badge())
  t.equal(injected.status, 503, 'a value that is not a trust code makes the answer unusable')
  t.match(injected.json(), { error: 'PDP_UNAVAILABLE' })
  t.equal(injected.headers['www-authenticate'], undefined)
  pdp.respond({ status: 200, body: JSON.stringify({ decision: 'DENY', decision_id: 'd-x', reason: 'operation_trust_level_below_minimum' }) })
  t.equal((await get(h, '/rs/x', badge())).headers['www-authenticate'], undefined, 'no level named: no challenge')
  t.equal(upstream.requests.length, 0)
})
