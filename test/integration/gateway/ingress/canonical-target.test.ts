/**
 * The gateway decides on the request the upstream sees: createGateway in process with the real
 * embedded PDP, a policy that denies `* /admin/**` and `GET /secret` in EM-STRICT, and a recording
 * upstream. Every spelling an outside review used to reach the protected paths, headers that read as
 * the gateway's identity headers to CGI-style upstreams, break-glass scope, and a property over random
 * targets: what is forwarded is exactly what was decided, and no spelling of a denied path gets through.
 */
import t, { type Test } from 'tap'
import fc from 'fast-check'
import { generateKeyPairSync } from 'node:crypto'
import type { AddressInfo } from 'node:net'
import { Writable } from 'node:stream'
import { loadConfig } from '../../../../src/config/index.js'
import { buildBadgeClaims, signBadge } from '../../../../src/core/badge.js'
import { signBreakglassToken } from '../../../../src/core/breakglass.js'
import type { ResolvedPolicy } from '../../../../src/core/policy/types.js'
import { canonicalTarget, lowerCasePath } from '../../../../src/gateway/ingress/canonical-target.js'
import { createEmbeddedPdp } from '../../../../src/gateway/pdp/embedded-pdp.js'
import { createGateway, type Gateway, type RouteTarget } from '../../../../src/gateway/server.js'
import { SnapshotHolder } from '../../../../src/gateway/snapshot/snapshot.js'
import { RouteTable, type UnderscoreHeaders } from '../../../../src/gateway/ingress/routes.js'
import { Upstream } from '../../../../src/gateway/upstream/upstream.js'
import { createLogger } from '../../../../src/telemetry/logger.js'
import { createMetrics } from '../../../../src/telemetry/metrics.js'
import { rawExchange, rawRequest, type RawReply } from '../../../helpers/hostile-http.js'
import { propertyRuns } from '../../../helpers/property-runs.js'
import { startUpstream } from '../../../helpers/upstream-server.js'

const ISSUER = 'https://registry.test'
const SUBJECT = 'did:web:agents.example.com:alpha'
t.setTimeout(240_000)

const upstream = await startUpstream(t)
const pool = new Upstream(upstream.url, { timeoutMs: 5_000 })
t.teardown(() => pool.close())

const signing = generateKeyPairSync('ed25519')
const breakglass = generateKeyPairSync('ed25519')
const now = Math.floor(Date.now() / 1000)
const token = signBadge(buildBadgeClaims({
  jti: 'jti-canonical', issuer: ISSUER, subject: SUBJECT, issuedAt: now - 10, expiresAt: now + 3600, ial: '1', level: '2', domain: 'agents.example.com',
}), { kid: 'k1', privateKey: signing.privateKey })

const policy: ResolvedPolicy = {
  min_trust_level: null,
  allowed_dids: null,
  denied_dids: [],
  rate_limits: [],
  operations: [
    { pattern: '* /admin/**', allowed_dids: [] },
    { pattern: 'GET /secret', allowed_dids: [] },
    { pattern: '* /private/*', allowed_dids: [] },
  ],
  mcp_tools: [],
  capability_classes: [],
}
const holder = new SnapshotHolder()
holder.swap({
  issuer: ISSUER, keys: new Map([['k1', signing.publicKey]]), keysVersion: 'k1', revoked: new Set(),
  bundle: { revision: 'rev-1', data: { config: policy }, confirmedAt: Date.now() },
})

const logLines: string[] = []
const logger = createLogger('info', new Writable({
  write(chunk, _encoding, callback) {
    for (const line of String(chunk).split('\n')) if (line !== '') logLines.push(line)
    callback()
  },
}))
const config = loadConfig({ DATABASE_URL: 'memory://', CA_ISSUER_URL: ISSUER, SERVICE_UPSTREAM_URL: upstream.url, SERVICE_ENFORCEMENT_MODE: 'EM-STRICT' }).gateway
const metrics = createMetrics()

async function gatewayFor(route: Partial<RouteTarget>, extraRoutes: { prefix: string; value: RouteTarget }[] = []): Promise<string> {
  const value: RouteTarget = { upstream: pool, mode: null, ...route }
  const routes = new RouteTable<RouteTarget>([{ prefix: '/', value, caseInsensitive: value.caseInsensitive === true }, ...extraRoutes])
  const gateway: Gateway = createGateway({
    config, holder, pdp: createEmbeddedPdp(), routes, breakglassKey: breakglass.publicKey, logger, metrics: metrics.gateway,
  })
  await new Promise<void>((resolve) => gateway.server.listen(0, '127.0.0.1', resolve))
  t.teardown(async () => {
    gateway.dispose()
    gateway.server.closeAllConnections()
    await new Promise<void>((resolve) => gateway.server.close(() => resolve()))
  })
  return `http://127.0.0.1:${(gateway.server.address() as AddressInfo).port}`
}

const sensitive = await gatewayFor({ caseSensitive: true })
const undeclared = await gatewayFor({})
const insensitive = await gatewayFor({ caseInsensitive: true })
const allowUnderscores = await gatewayFor({ headersWithUnderscores: 'allow' })
const rejectUnderscores = await gatewayFor({ headersWithUnderscores: 'reject' as UnderscoreHeaders })

const bearer = { authorization: `Bearer ${token}` }

async function send(base: string, method: string, path: string, headers: Record<string, string> | [string, string][] = bearer): Promise<RawReply & { forwarded: string | null }> {
  const before = upstream.requests.length
  const reply = await rawRequest(base, method, path, { headers })
  const seen = upstream.requests.slice(before)
  return { ...reply, forwarded: seen.length === 0 ? null : seen[0]!.url }
}

/** Writes `head` on a fresh socket and returns everything received until the server closes it. */
async function rawText(base: string, head: string): Promise<string> {
  const exchange = await rawExchange(base, head)
  await exchange.status
  if (!exchange.socket.destroyed) await new Promise((resolve) => exchange.socket.once('close', resolve))
  return exchange.received()
}

function refusedWith(t: Test, reply: RawReply & { forwarded: string | null }, status: number, code: string, label: string): void {
  t.equal(reply.status, status, `${label}: ${status}`)
  // A HEAD answer has no body: the gateway's mark says who answered.
  if (label.startsWith('HEAD')) t.equal(reply.headers['x-service-gateway'], 'error', `${label}: gateway-made`)
  else t.equal(reply.body?.error, code, `${label}: ${code}`)
  t.equal(reply.forwarded, null, `${label}: nothing reached the upstream`)
}

t.test('the review\'s spellings of denied paths are denied or refused, and reach no upstream', async (t) => {
  const denied = ['/admin/x', '/public/../admin/x', '/./admin/x', '/public/%2e%2e/admin/x', '/%61dmin/x', '/%73ecret', '//admin//x', '/secret?x=1', '/a/%2E%2E/admin']
  for (const path of denied) refusedWith(t, await send(sensitive, 'GET', path), 403, 'POLICY_DENIED', path)
  const malformed = ['/public/%2e%2e%2fadmin/x', '/admin;x', '/ops/..;/admin/x', '/ops#/../admin/x', '/public/..\\admin/x', '/%2561dmin/x', '/a%zz', '/admin%2fx', '/admin%00']
  for (const path of malformed) refusedWith(t, await send(sensitive, 'GET', path), 400, 'REQUEST_MALFORMED', path)
})

t.test('HEAD is governed by the rules for GET', async (t) => {
  refusedWith(t, await send(sensitive, 'HEAD', '/secret'), 403, 'POLICY_DENIED', 'HEAD /secret')
  const allowed = await send(sensitive, 'HEAD', '/public')
  t.equal(allowed.status, 200, 'HEAD of an allowed path is forwarded')
})

t.test('a case-insensitive route lower-cases the path for the decision and the upstream', async (t) => {
  for (const path of ['/Admin/x', '/ADMIN/X', '/%41dmin/x', '/SeCrEt']) refusedWith(t, await send(insensitive, 'GET', path), 403, 'POLICY_DENIED', path)
  const allowed = await send(insensitive, 'GET', '/Public/Report?Q=A')
  t.equal(allowed.status, 200)
  t.equal(allowed.forwarded, '/public/report?Q=A', 'forwarded lower-cased (the query as sent)')
  // On a route declared case-sensitive `/Admin` is another resource than `/admin`: the upstream sees exactly it.
  const other = await send(sensitive, 'GET', '/Admin/x')
  t.equal(other.forwarded, '/Admin/x')
  // Undeclared, the upstream may ignore case: the stricter decision, and the path as sent when it allows.
  refusedWith(t, await send(undeclared, 'GET', '/Admin/x'), 403, 'POLICY_DENIED', 'undeclared /Admin/x')
  t.equal((await send(undeclared, 'GET', '/Public/Report')).forwarded, '/Public/Report')
})

t.test('a trailing slash: forwarded as sent, governed by the rules for the path without it', async (t) => {
  // Rule `GET /secret` (exact) against both spellings; rule `* /private/*` (one segment) against both.
  refusedWith(t, await send(sensitive, 'GET', '/secret'), 403, 'POLICY_DENIED', '/secret')
  refusedWith(t, await send(sensitive, 'GET', '/secret/'), 403, 'POLICY_DENIED', '/secret/')
  refusedWith(t, await send(sensitive, 'GET', '/secret/.'), 403, 'POLICY_DENIED', '/secret/.')
  refusedWith(t, await send(sensitive, 'GET', '/private/x'), 403, 'POLICY_DENIED', '/private/x')
  refusedWith(t, await send(sensitive, 'GET', '/private/x/'), 403, 'POLICY_DENIED', '/private/x/')
  refusedWith(t, await send(sensitive, 'GET', '/private/'), 403, 'POLICY_DENIED', '/private/ (the empty segment)')
  const open = await send(sensitive, 'GET', '/secrets/')
  t.equal(open.status, 200, '/secrets/ is another path')
  t.equal(open.forwarded, '/secrets/', 'the trailing slash reaches the upstream')
})

t.test('the upstream receives the canonical target, never the spelling', async (t) => {
  const cases: [string, string][] = [
    ['/public/./a//b/../c', '/public/a/c'],
    ['/%70ublic/%7e', '/public/~'],
    ['/public/a|b', '/public/a%7Cb'],
    ['/public/%c3%a9?q=%41', '/public/%C3%A9?q=%41'],
  ]
  for (const [raw, expected] of cases) {
    const reply = await send(sensitive, 'GET', raw)
    t.equal(reply.status, 200, raw)
    t.equal(reply.forwarded, expected, `${raw} is forwarded as ${expected}`)
  }
})

t.test('non-origin-form targets: absolute-form refused, CONNECT 405, OPTIONS * has no route', async (t) => {
  const host = new URL(sensitive).host
  const absolute = await rawText(sensitive, `GET http://${host}/public/x HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer ${token}\r\nConnection: close\r\n\r\n`)
  t.match(absolute, /^HTTP\/1\.1 400 /, 'absolute-form is 400')
  t.match(absolute, /REQUEST_MALFORMED/)
  const connect = await rawText(sensitive, `CONNECT ${host} HTTP/1.1\r\nHost: ${host}\r\n\r\n`)
  t.match(connect, /^HTTP\/1\.1 405 /, 'CONNECT is 405')
  t.match(connect, /METHOD_NOT_ALLOWED/)
  const before = upstream.requests.length
  const asterisk = await rawText(sensitive, `OPTIONS * HTTP/1.1\r\nHost: ${host}\r\nAuthorization: Bearer ${token}\r\nConnection: close\r\n\r\n`)
  t.match(asterisk, /^HTTP\/1\.1 404 /, 'OPTIONS * is 404')
  t.equal(upstream.requests.length, before, 'nothing forwarded')
})

t.test('break-glass scope is judged on the canonical path', async (t) => {
  const iat = Math.floor(Date.now() / 1000)
  const override = signBreakglassToken({
    jti: 'bg-canonical', iat, exp: iat + 600, iss: 'test', sub: 'oncall', reason: 'canonical test', scope: { methods: ['GET'], routes: ['/ops'] },
  }, breakglass.privateKey)
  const withOverride = { ...bearer, 'x-service-breakglass': override }
  const inScope = await send(sensitive, 'GET', '/ops/status', withOverride)
  t.equal(inScope.status, 200, 'in scope: forwarded')
  refusedWith(t, await send(sensitive, 'GET', '/ops/../admin/x', withOverride), 403, 'POLICY_DENIED', '/ops/../admin/x is /admin/x: out of scope')
  refusedWith(t, await send(sensitive, 'GET', '/ops/..;/admin/x', withOverride), 400, 'REQUEST_MALFORMED', '/ops/..;/admin/x')
  refusedWith(t, await send(sensitive, 'GET', '/ops#/../admin/x', withOverride), 400, 'REQUEST_MALFORMED', '/ops#/../admin/x')
  const head = await send(sensitive, 'HEAD', '/ops/status', withOverride)
  t.equal(head.status, 200, 'a GET scope covers HEAD')
})

t.test('headers that read as the gateway\'s own to a CGI-style upstream never pass', async (t) => {
  const spoofed: [string, string][] = [
    ['authorization', `Bearer ${token}`],
    ['X_Service_Subject', 'did:web:evil'],
    ['X-Service-Trust_Level', '4'],
    ['X_Service_Issuer', 'https://evil'],
    ['X_Service_Badge_JTI', 'forged'],
    ['X_Forwarded_For', '10.0.0.1'],
    ['Content_Length', '5'],
    ['Some_Header', 'kept only where allowed'],
  ]
  const names = (headers: Record<string, unknown>): string[] => Object.keys(headers).filter((n) => n.includes('_'))
  const before = upstream.requests.length
  t.equal((await rawRequest(sensitive, 'GET', '/public/h', { headers: spoofed })).status, 200)
  const dropped = upstream.requests[before]!
  t.same(names(dropped.headers), [], 'default: every header name with "_" is dropped')
  t.equal(dropped.headers['x-service-subject'], SUBJECT, 'the verified identity is what the upstream sees')
  t.equal(dropped.headers['x-service-trust-level'], '2')

  t.equal((await rawRequest(allowUnderscores, 'GET', '/public/h', { headers: spoofed })).status, 200)
  const allowed = upstream.requests[before + 1]!
  t.same(names(allowed.headers), ['some_header'], 'allow: only names that are not a spelling of a gateway header pass')

  const rejected = await rawRequest(rejectUnderscores, 'GET', '/public/h', { headers: spoofed })
  t.equal(rejected.status, 400)
  t.equal(rejected.body?.error, 'REQUEST_MALFORMED')
  t.equal(upstream.requests.length, before + 2, 'reject: nothing forwarded')
})

// ---------------------------------------------------------------------------------------------------
// Property: random targets from the characters that make paths ambiguous.

/** How a lenient server may read a target: one decoding pass, `\` as `/`, path parameters and fragments cut, dots resolved. */
function lenientReading(raw: string, lowerCase: boolean): string {
  let path = raw.split('?')[0]!.split('#')[0]!
  path = path.replace(/%([0-9A-Fa-f]{2})/g, (_m, hex: string) => String.fromCharCode(parseInt(hex, 16))).replaceAll('\\', '/')
  path = path.split('/').map((segment) => segment.split(';')[0]!).join('/')
  const out: string[] = []
  const segments = path.split('/')
  for (const segment of segments) {
    if (segment === '..') out.pop()
    else if (segment !== '.' && segment !== '') out.push(segment)
  }
  const last = segments[segments.length - 1]
  const trailingSlash = out.length > 0 && (last === '' || last === '.' || last === '..')
  const result = '/' + out.join('/') + (trailingSlash ? '/' : '')
  return lowerCase ? result.toLowerCase() : result
}
const isProtected = (path: string): boolean =>
  path === '/admin' || path.startsWith('/admin/') || path === '/secret' || path === '/secret/' || /^\/private\/[^/]*\/?$/.test(path)

const PIECES = ['/', '.', '%', ';', '#', '\\', 'a', 'A', 'admin', 'Admin', 'secret', 'private', '/secret/', '/private/', '%2e', '%2E', '%2f', '%5c', '%3b', '%61', '%41', '%25', '..', '//']
const target = fc.array(fc.constantFrom(...PIECES), { maxLength: 12 }).map((parts) => '/' + parts.join(''))

for (const [label, base, lowerCase] of [['case-sensitive', sensitive, false], ['case-insensitive', insensitive, true]] as const) {
  t.test(`property (${label}): the forwarded target is the decided one, and no spelling of a denied path is forwarded`, async (t) => {
    await fc.assert(fc.asyncProperty(target, async (raw) => {
      const reply = await send(base, 'GET', raw)
      if (reply.forwarded === null) return [400, 403].includes(reply.status) && typeof reply.body?.error === 'string'
      const canonical = { path: '', query: '' }
      if (canonicalTarget(raw, canonical) !== null) return false
      const decided = lowerCase ? lowerCasePath(canonical.path) + canonical.query : canonical.path + canonical.query
      if (reply.forwarded !== decided) return false
      if (isProtected(lenientReading(raw, lowerCase)) || isProtected(lenientReading(reply.forwarded, lowerCase))) return false
      // The forwarded request, sent again, is decided and forwarded the same way.
      const again = await send(base, 'GET', reply.forwarded)
      return again.status === reply.status && again.forwarded === reply.forwarded
    }), propertyRuns(150))
    t.pass()
  })
}
