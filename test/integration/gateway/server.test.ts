/**
 * createGateway in-process (docs/architecture.md: badge → decide → enforce → forward) with everything around
 * it under the test's control: a SnapshotHolder filled by hand, a route table to a recording upstream,
 * a fake PDP whose answers (sync, async, throwing) the test sets, real metrics and a logger writing into
 * an array. Covered: readiness, routing, the cache invalidation rules (decision cache on a bundle
 * revision change, badge cache on a key-set change), staleness per mode, error containment, trusted
 * proxies, the request log line and the metrics text.
 */
import t, { type Test } from 'tap'
import { generateKeyPairSync, type KeyObject } from 'node:crypto'
import type { AddressInfo } from 'node:net'
import { Writable } from 'node:stream'
import { loadConfig } from '../../../src/config/index.js'
import { buildBadgeClaims, signBadge } from '../../../src/core/badge.js'
import type { PdpRequest } from '../../../src/core/policy/types.js'
import type { PdpAnswer, PolicyDecisionPoint } from '../../../src/gateway/pdp/pdp.js'
import { createGateway, type Gateway, type RouteTarget } from '../../../src/gateway/server.js'
import { SnapshotHolder, type GatewayBundle, type SnapshotContent } from '../../../src/gateway/snapshot/snapshot.js'
import { RouteTable } from '../../../src/gateway/ingress/routes.js'
import { Upstream } from '../../../src/gateway/upstream/upstream.js'
import { createLogger } from '../../../src/telemetry/logger.js'
import { createMetrics } from '../../../src/telemetry/metrics.js'
import { rawExchange } from '../../helpers/hostile-http.js'
import { startUpstream } from '../../helpers/upstream-server.js'

const ISSUER = 'https://registry.test'
const SUBJECT = 'did:web:agents.example.com:alpha'
const STALE_AFTER_MS = 10_000

// Run directly with node, tap's default 30 s budget is too short for start-up on a busy machine.
t.setTimeout(120_000)
const upstream = await startUpstream(t)
const pool = new Upstream(upstream.url, { timeoutMs: 5_000 })
t.teardown(() => pool.close())
const routes = new RouteTable<RouteTarget>([
  { prefix: '/api', value: { upstream: pool, mode: null } },
  { prefix: '/strict', value: { upstream: pool, mode: 'EM-STRICT' } },
  { prefix: '/quiet', value: { upstream: pool, mode: null, hideDenyReason: true } },
  { prefix: '/observe', value: { upstream: pool, mode: 'EM-OBSERVE' } },
])

// ---------------------------------------------------------------------------------------------------
// Keys and badges

const k1 = generateKeyPairSync('ed25519')
const k2 = generateKeyPairSync('ed25519')
let jtiSequence = 0
function badge(key: { kid: string; privateKey: KeyObject } = { kid: 'k1', privateKey: k1.privateKey }): { token: string; jti: string } {
  const jti = `jti-${++jtiSequence}`
  const now = Math.floor(Date.now() / 1000)
  const claims = buildBadgeClaims({
    jti, issuer: ISSUER, subject: SUBJECT, issuedAt: now - 10, expiresAt: now + 3600, ial: '1', level: '2', domain: 'agents.example.com',
  })
  return { token: signBadge(claims, key), jti }
}

// ---------------------------------------------------------------------------------------------------
// The fake PDP: `answer` decides what decide() does; every call is recorded.

type Answerer = (request: PdpRequest) => PdpAnswer | Promise<PdpAnswer>
let decisionSequence = 0
const allow = (): PdpAnswer => ({ outcome: 'ALLOW', decisionId: `dec-${++decisionSequence}`, obligations: [], ttl: 60 })
const pdpCalls: PdpRequest[] = []
let answer: Answerer = allow
const pdp: PolicyDecisionPoint = {
  kind: 'embedded',
  decide(request) {
    pdpCalls.push(request)
    return answer(request)
  },
  async close() {},
}

// ---------------------------------------------------------------------------------------------------
// Logger into an array, metrics, config, holder, gateway

const logLines: string[] = []
const sink = new Writable({
  write(chunk, _encoding, callback) {
    // One write may carry several lines (the request log batches them).
    for (const line of String(chunk).split('\n')) if (line !== '') logLines.push(line)
    callback()
  },
})
const logger = createLogger('info', sink)
const entries = (): Record<string, unknown>[] => logLines.map((line) => JSON.parse(line) as Record<string, unknown>)
const requestLines = (): Record<string, unknown>[] => entries().filter((e) => e.msg === 'gateway request')

const baseEnv = {
  DATABASE_URL: 'memory://',
  CA_ISSUER_URL: ISSUER,
  SERVICE_UPSTREAM_URL: upstream.url,
  SERVICE_ENFORCEMENT_MODE: 'EM-GUARD',
  SERVICE_BUNDLE_STALENESS_THRESHOLD: `${STALE_AFTER_MS / 1000}s`,
}
const config = loadConfig({ ...baseEnv, SERVICE_TRUSTED_PROXIES: '127.0.0.1' }).gateway
const metrics = createMetrics()
const holder = new SnapshotHolder()

async function listen(gateway: Gateway): Promise<string> {
  await new Promise<void>((resolve) => gateway.server.listen(0, '127.0.0.1', resolve))
  t.teardown(async () => {
    gateway.dispose()
    gateway.server.closeAllConnections()
    await new Promise<void>((resolve) => gateway.server.close(() => resolve()))
  })
  return `http://127.0.0.1:${(gateway.server.address() as AddressInfo).port}`
}

const gateway = createGateway({ config, holder, pdp, routes, breakglassKey: null, logger, metrics: metrics.gateway })
const url = await listen(gateway)

// ---------------------------------------------------------------------------------------------------
// Snapshot helpers

const KEYS_1 = new Map([['k1', k1.publicKey]])
let revisionSequence = 0
const bundle = (over: Partial<GatewayBundle> = {}): GatewayBundle => ({ revision: `rev-${++revisionSequence}`, data: {}, confirmedAt: Date.now(), ...over })
function content(over: Partial<SnapshotContent> = {}): SnapshotContent {
  return { issuer: ISSUER, keys: KEYS_1, keysVersion: 'k1', revoked: new Set(), bundle: bundle(), ...over }
}

// ---------------------------------------------------------------------------------------------------
// Requests

interface Answer {
  status: number
  headers: Headers
  body: any
  text: string
}

async function call(path: string, options: { token?: string; headers?: Record<string, string>; base?: string } = {}): Promise<Answer> {
  const headers: Record<string, string> = { ...options.headers }
  if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`
  const response = await fetch(`${options.base ?? url}${path}`, { headers })
  const text = await response.text()
  let body: unknown
  try {
    body = JSON.parse(text)
  } catch {
    body = undefined
  }
  return { status: response.status, headers: response.headers, body, text }
}

/** Waits for the log line of the request whose index (0-based count of request lines) is `index`. */
async function lineAt(index: number, timeoutMs = 5000): Promise<Record<string, unknown>> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const lines = requestLines()
    if (lines.length > index) return lines[index]!
    if (Date.now() > deadline) throw new Error(`no log line #${index} (have ${lines.length})`)
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
}

/** Sends a request and returns the response with its log line. */
async function traced(path: string, options: Parameters<typeof call>[1] = {}): Promise<Answer & { line: Record<string, unknown> }> {
  // Lines of earlier requests may still be queued (the writer batches for a few ms): out with them first.
  gateway.flushLog()
  const index = requestLines().length
  const res = await call(path, options)
  return { ...res, line: await lineAt(index) }
}

async function counter(name: 'cacheLookups', labels: Record<string, string>): Promise<number> {
  const { values } = await metrics.gateway[name].get()
  return values.find((v) => Object.entries(labels).every(([k, val]) => (v.labels as Record<string, unknown>)[k] === val))?.value ?? 0
}

const isGatewayError = (t: Test, res: Answer, status: number, code: string, details: Record<string, string> = {}): void => {
  t.equal(res.status, status, `status ${status}`)
  t.strictSame(res.body, { error: code, message: res.body?.message, ...details }, `body {error: ${code}, message${Object.keys(details).map((k) => `, ${k}`).join('')}}`)
  t.type(res.body?.message, 'string')
  t.equal(res.headers.get('x-service-gateway'), 'error', 'marked as gateway-made')
}

// ---------------------------------------------------------------------------------------------------

t.test('503 GATEWAY_NOT_READY before the first swap', async (t) => {
  const { token } = badge()
  const res = await traced('/api/x', { token })
  isGatewayError(t, res, 503, 'GATEWAY_NOT_READY')
  t.equal(pdpCalls.length, 0, 'no decision')
  t.equal(upstream.requests.length, 0, 'nothing forwarded')
  t.match(res.line, { status: 503, error_code: 'GATEWAY_NOT_READY' })
  holder.swap(content())
  const ready = await call('/api/x', { token })
  t.equal(ready.status, 200, 'serves once a snapshot is in')
})

t.test('404 ROUTE_NOT_FOUND for a path no route covers', async (t) => {
  const before = { pdp: pdpCalls.length, upstream: upstream.requests.length }
  const { token } = badge()
  for (const path of ['/nope', '/apix', '/', '/strictly']) {
    const res = await traced(path, { token })
    isGatewayError(t, res, 404, 'ROUTE_NOT_FOUND')
    t.match(res.line, { status: 404, error_code: 'ROUTE_NOT_FOUND' })
  }
  t.equal(pdpCalls.length, before.pdp, 'no decision')
  t.equal(upstream.requests.length, before.upstream, 'nothing forwarded')
})

t.test('ALLOW in EM-GUARD: forwarded with identity headers, one log line with the decision', async (t) => {
  holder.swap(content())
  const { token, jti } = badge()
  const calls = pdpCalls.length
  const res = await traced('/api/items?q=1', { token, headers: { 'x-service-txn': 'txn-allow-1', 'x-service-subject': 'did:web:forged' } })
  t.equal(res.status, 200)
  t.equal(res.headers.get('x-service-txn'), 'txn-allow-1', 'the client txn id comes back')
  t.equal(pdpCalls.length, calls + 1, 'one decision')
  t.match(pdpCalls.at(-1), {
    subject: { did: SUBJECT, badge_jti: jti, trust_level: 'DV' },
    action: { operation: 'GET /api/items' },
    resource: { identifier: '/api/items?q=1' },
    context: { txn_id: 'txn-allow-1', enforcement_mode: 'EM-GUARD' },
  })
  const seen = upstream.requests.at(-1)!
  t.equal(seen.url, '/api/items?q=1')
  t.equal(seen.headers['x-service-subject'], SUBJECT, 'the verified subject, not the client copy')
  t.equal(seen.headers['x-service-badge-jti'], jti)
  t.equal(seen.headers['x-service-trust-level'], '2')
  t.equal(seen.headers['x-service-issuer'], ISSUER)
  t.equal(seen.headers['x-service-txn'], 'txn-allow-1')
  t.match(res.line, {
    txn_id: 'txn-allow-1', agent_did: SUBJECT, badge_jti: jti, method: 'GET', status: 200, mode: 'EM-GUARD',
    'service.policy.decision': 'ALLOW', 'service.policy.override': false,
  })
  t.match(res.line['service.policy.decision_id'], /^dec-\d+$/)
  t.not(res.line['staleness.bundle_stale'], true, 'a fresh bundle is not annotated as stale')
  t.notOk('error_code' in res.line, 'no error code on a forwarded request')
  t.type(res.line.latency_ms, 'number')
})

t.test('an async PDP answer works like a sync one; DENY and UNAVAILABLE are refused', async (t) => {
  holder.swap(content())
  answer = async () => allow()
  t.equal((await call('/api/async', { token: badge().token })).status, 200, 'async ALLOW forwarded')
  answer = () => ({ outcome: 'DENY', decisionId: 'dec-deny', obligations: [], ttl: 0 })
  const denied = await traced('/api/deny', { token: badge().token })
  isGatewayError(t, denied, 403, 'POLICY_DENIED', { decision_id: 'dec-deny' })
  t.equal(denied.headers.get('x-service-decision-id'), 'dec-deny')
  t.match(denied.line, { 'service.policy.decision': 'DENY', 'service.policy.decision_id': 'dec-deny', error_code: 'POLICY_DENIED', operation: 'GET /api/deny' })
  t.notOk('service.policy.reason' in denied.line, 'no reason logged when the PDP gave none')
  answer = async () => ({ outcome: 'UNAVAILABLE', reason: 'timeout' })
  const unavailable = await traced('/api/unavailable', { token: badge().token })
  isGatewayError(t, unavailable, 503, 'PDP_UNAVAILABLE')
  t.equal(unavailable.headers.get('x-service-decision-id'), null, 'no decision was made')
  t.match(unavailable.line, { 'service.policy.error_code': 'PDP_UNAVAILABLE', error_code: 'PDP_UNAVAILABLE' })
  answer = allow
})

t.test('a denial says why: decision_id and reason in the body, reason and operation in the log line', async (t) => {
  holder.swap(content())
  const deny = (reason: string) => () => ({ outcome: 'DENY' as const, decisionId: 'dec-why', obligations: [], ttl: 0, reason })
  answer = deny('operation_denied_did')
  const denied = await traced('/api/why?token=secret-query', { token: badge().token })
  isGatewayError(t, denied, 403, 'POLICY_DENIED', { decision_id: 'dec-why', reason: 'operation_denied_did' })
  t.equal(denied.headers.get('x-service-decision-id'), 'dec-why', 'the decision id header stays')
  t.match(denied.line, {
    'service.policy.decision': 'DENY', 'service.policy.decision_id': 'dec-why', error_code: 'POLICY_DENIED',
    'service.policy.reason': 'operation_denied_did', operation: 'GET /api/why',
  })
  t.notMatch(JSON.stringify(denied.line), /secret-query/, 'the operation carries no query')

  answer = deny('not "today" – ask <ops> \\ \u2028 later')
  const freeText = await traced('/api/free', { token: badge().token })
  t.equal(freeText.body?.reason, 'not "today" – ask <ops> \\ \u2028 later', 'free text survives as JSON in the body')
  t.equal(freeText.line['service.policy.reason'], 'not "today" – ask <ops> \\ \u2028 later', 'and in the log line')

  answer = deny('operation_denied_did')
  const hidden = await traced('/quiet/why', { token: badge().token })
  isGatewayError(t, hidden, 403, 'POLICY_DENIED', { decision_id: 'dec-why' })
  t.match(hidden.line, { 'service.policy.reason': 'operation_denied_did', operation: 'GET /quiet/why' }, 'a hidden reason is still logged')

  const observed = await traced('/observe/why', { token: badge().token })
  t.equal(observed.status, 200, 'EM-OBSERVE forwards the denied request')
  t.match(observed.line, { 'service.policy.decision': 'ALLOW_OBSERVE', 'service.policy.reason': 'operation_denied_did', operation: 'GET /observe/why' }, 'and logs why it would have been refused')

  answer = allow
  const allowed = await traced('/api/why', { token: badge().token })
  t.equal(allowed.status, 200)
  t.notOk('operation' in allowed.line || 'service.policy.reason' in allowed.line, 'an allowed request has neither field')
})

t.test('decision cache: hit on repeat, kept across a swap with the same revision, cleared on a new revision', async (t) => {
  holder.swap(content())
  const { token } = badge()
  const calls = pdpCalls.length
  const hitsBefore = await counter('cacheLookups', { cache: 'decision', result: 'hit' })
  const first = await traced('/api/cached', { token })
  const second = await traced('/api/cached', { token })
  t.equal(first.status, 200)
  t.equal(second.status, 200)
  t.equal(pdpCalls.length, calls + 1, 'the second request was answered from the cache')
  t.equal(second.line['service.policy.decision_id'], first.line['service.policy.decision_id'], 'with the cached decision id')
  t.equal(await counter('cacheLookups', { cache: 'decision', result: 'hit' }), hitsBefore + 1, 'one decision cache hit counted')

  // A swap that keeps the revision (an unrelated revocation) keeps the cached decisions.
  holder.update((current) => ({ revoked: new Set([...current.revoked, 'unrelated-jti']) }))
  await call('/api/cached', { token })
  t.equal(pdpCalls.length, calls + 1, 'same revision: still cached')

  // A new bundle revision: the next request is decided again.
  holder.update(() => ({ bundle: bundle() }))
  await call('/api/cached', { token })
  t.equal(pdpCalls.length, calls + 2, 'new revision: decided again')
  await call('/api/cached', { token })
  t.equal(pdpCalls.length, calls + 2, 'and cached again afterwards')

  // DENY is not cached: each request asks.
  answer = () => ({ outcome: 'DENY', decisionId: 'dec-deny-2', obligations: [], ttl: 60 })
  const denyToken = badge().token
  await call('/api/denied', { token: denyToken })
  await call('/api/denied', { token: denyToken })
  t.equal(pdpCalls.length, calls + 4, 'DENY asked twice')
  answer = allow
})

t.test('badge cache: cleared when keysVersion changes; a removed key stops verifying', async (t) => {
  holder.swap(content())
  const { token } = badge()
  const hits = (): Promise<number> => counter('cacheLookups', { cache: 'badge', result: 'hit' })
  const misses = (): Promise<number> => counter('cacheLookups', { cache: 'badge', result: 'miss' })
  const m0 = await misses()
  await call('/api/b', { token })
  const h0 = await hits()
  await call('/api/b', { token })
  t.equal(await hits(), h0 + 1, 'second request hit the badge cache')
  t.equal(await misses(), m0 + 1)

  // keysVersion A → B → A with the same keys: an entry still tagged A would hit if the cache had been
  // kept; the gateway clears it on the change, so the lookup misses.
  holder.update(() => ({ keysVersion: 'k1-reloaded' }))
  holder.update(() => ({ keysVersion: 'k1' }))
  const h1 = await hits()
  const m1 = await misses()
  t.equal((await call('/api/b', { token })).status, 200)
  t.equal(await hits(), h1, 'no hit after the key set changed')
  t.equal(await misses(), m1 + 1, 'verified again')

  // A key set without k1: the badge signed by k1 is refused; one signed by k2 passes.
  holder.update(() => ({ keys: new Map([['k2', k2.publicKey]]), keysVersion: 'k2' }))
  const refused = await traced('/api/b', { token })
  isGatewayError(t, refused, 401, 'BADGE_SIGNATURE_INVALID')
  t.match(refused.line, { status: 401, error_code: 'BADGE_SIGNATURE_INVALID' })
  t.equal((await call('/api/b', { token: badge({ kid: 'k2', privateKey: k2.privateKey }).token })).status, 200, 'a k2 badge verifies')
  holder.swap(content())
})

t.test('a cached badge is refused once the snapshot trusts another issuer (same keys)', async (t) => {
  holder.swap(content())
  const { token } = badge()
  t.equal((await call('/api/iss', { token })).status, 200, 'verified and cached under the first issuer')
  holder.update(() => ({ issuer: 'https://other-registry.test' }))
  const refused = await traced('/api/iss', { token })
  isGatewayError(t, refused, 401, 'BADGE_ISSUER_UNTRUSTED')
  holder.update(() => ({ issuer: ISSUER }))
  t.equal((await call('/api/iss', { token })).status, 200, 'accepted again once the issuer is back')
})

t.test('a revocation in a new snapshot refuses a badge verified before', async (t) => {
  holder.swap(content())
  const { token, jti } = badge()
  t.equal((await call('/api/r', { token })).status, 200)
  holder.update((current) => ({ revoked: new Set([...current.revoked, jti]) }))
  const res = await traced('/api/r', { token })
  isGatewayError(t, res, 401, 'BADGE_REVOKED')
})

t.test('EM-STRICT with a stale bundle: 403 BUNDLE_STALE without asking the PDP', async (t) => {
  holder.swap(content({ bundle: bundle({ confirmedAt: Date.now() - 3_600_000 }) }))
  const calls = pdpCalls.length
  const forwarded = upstream.requests.length
  const res = await traced('/strict/x', { token: badge().token })
  isGatewayError(t, res, 403, 'BUNDLE_STALE')
  t.equal(pdpCalls.length, calls, 'the PDP was not called')
  t.equal(upstream.requests.length, forwarded, 'nothing forwarded')
  t.equal(res.headers.get('x-service-decision-id'), null)
  t.match(res.line, { mode: 'EM-STRICT', 'service.policy.decision': 'DENY', error_code: 'BUNDLE_STALE', 'staleness.bundle_stale': true })
  t.ok((res.line['staleness.bundle_age_ms'] as number) >= 3_600_000, 'bundle age logged')

  holder.swap(content())
  t.equal((await call('/strict/x', { token: badge().token })).status, 200, 'a fresh bundle in EM-STRICT is decided normally')
  t.equal(pdpCalls.length, calls + 1)
})

t.test('EM-GUARD with a stale bundle: decided, forwarded, and annotated in the log', async (t) => {
  const confirmedAt = Date.now() - 60_000
  holder.swap(content({ bundle: bundle({ confirmedAt }) }))
  const calls = pdpCalls.length
  const res = await traced('/api/stale', { token: badge().token })
  t.equal(res.status, 200, 'forwarded')
  t.equal(pdpCalls.length, calls + 1, 'the PDP decided')
  t.match(res.line, { mode: 'EM-GUARD', 'service.policy.decision': 'ALLOW', 'staleness.bundle_stale': true })
  const age = res.line['staleness.bundle_age_ms'] as number
  t.ok(age >= 60_000 && age < 60_000 + 30_000, `bundle_age_ms is the bundle's age (${age})`)
  holder.swap(content())
})

t.test('a PDP that throws: 500 GATEWAY_ERROR, no internals in the body', async (t) => {
  holder.swap(content())
  for (const [label, thrower] of [
    ['sync throw', () => { throw new Error('secret internal detail /srv/app/pdp.js') }],
    ['async rejection', async () => { throw new Error('secret internal detail /srv/app/pdp.js') }],
  ] as [string, Answerer][]) {
    answer = thrower
    const res = await traced('/api/boom', { token: badge().token })
    isGatewayError(t, res, 500, 'GATEWAY_ERROR')
    t.notMatch(res.text, /secret internal detail|\/srv\/app|at .*:\d+:\d+|stack/, `${label}: nothing of the error in the body`)
    t.match(res.line, { status: 500, error_code: 'GATEWAY_ERROR' })
    const failure = entries().filter((e) => e.msg === 'gateway request failed').at(-1)
    t.ok(failure, `${label}: the failure is logged`)
    t.notOk(JSON.stringify(failure).includes('    at '), 'without a stack trace')
  }
  answer = allow
  t.equal((await call('/api/after', { token: badge().token })).status, 200, 'the gateway keeps serving')
})

t.test('badge stage refusals happen before the PDP', async (t) => {
  holder.swap(content())
  const calls = pdpCalls.length
  isGatewayError(t, await call('/api/x'), 401, 'BADGE_MISSING')
  isGatewayError(t, await call('/api/x', { token: badge().token, headers: { 'x-service-badge': badge().token } }), 401, 'BADGE_CONFLICT')
  isGatewayError(t, await call('/api/x', { token: 'not.a.badge' }), 401, 'BADGE_MALFORMED')
  t.equal(pdpCalls.length, calls)
})

t.test('X-Forwarded-For: appended for a trusted peer, replaced otherwise', async (t) => {
  holder.swap(content())
  await call('/api/xff', { token: badge().token, headers: { 'x-forwarded-for': '203.0.113.7' } })
  t.equal(upstream.requests.at(-1)!.headers['x-forwarded-for'], '203.0.113.7, 127.0.0.1', '127.0.0.1 is in SERVICE_TRUSTED_PROXIES')

  // The same pipeline without trusted proxies: the client's value is dropped.
  const untrusted = createGateway({ config: loadConfig(baseEnv).gateway, holder, pdp, routes, breakglassKey: null, logger, metrics: createMetrics().gateway })
  const untrustedUrl = await listen(untrusted)
  await call('/api/xff', { base: untrustedUrl, token: badge().token, headers: { 'x-forwarded-for': '203.0.113.7' } })
  t.equal(upstream.requests.at(-1)!.headers['x-forwarded-for'], '127.0.0.1', 'untrusted peer: only the real peer')
})

t.test('request head: read up to SERVICE_GATEWAY_MAX_HEAD_BYTES, larger is 431 REQUEST_HEADER_FIELDS_TOO_LARGE', async (t) => {
  holder.swap(content())
  const token = badge().token
  t.equal(config.maxHeadBytes, 64 * 1024, 'the default is 64 KiB')
  /** A GET whose head is `size` bytes (request line and headers), sent as it is on a socket of its own. */
  const headOf = (base: string, size: number): string => {
    const start = `GET /api/head HTTP/1.1\r\nHost: ${new URL(base).host}\r\nAuthorization: Bearer ${token}\r\nConnection: close\r\nX-Filler: `
    return `${start}${'f'.repeat(size - start.length - 4)}\r\n\r\n`
  }
  const answer = async (base: string, size: number): Promise<{ status: number | null; text: string }> => {
    const exchange = await rawExchange(base, headOf(base, size))
    const status = await exchange.status
    await new Promise<void>((resolve) => { if (exchange.socket.closed) resolve(); else exchange.socket.once('close', () => resolve()) })
    return { status, text: exchange.received() }
  }
  const before = upstream.requests.length
  t.equal((await answer(url, 60_000)).status, 200, 'a 60,000-byte head (over node\'s 16 KiB default) is read and forwarded')
  t.equal(upstream.requests.length, before + 1, 'it reached the upstream')
  const over = await answer(url, 70_000)
  t.equal(over.status, 431, 'a 70,000-byte head: 431')
  t.strictSame(JSON.parse(over.text.slice(over.text.indexOf('\r\n\r\n') + 4)), {
    error: 'REQUEST_HEADER_FIELDS_TOO_LARGE',
    message: 'The request line and headers together exceed the size the gateway accepts.',
  }, 'in the gateway error shape')
  t.match(over.text, /\r\nX-Service-Gateway: error\r\n/i, 'marked as gateway-made')
  t.equal(upstream.requests.length, before + 1, 'nothing more reached the upstream')

  // A smaller configured limit (with a chain depth whose headers fit in it) is the one applied.
  const small = loadConfig({ ...baseEnv, SERVICE_GATEWAY_MAX_HEAD_BYTES: '20000', SERVICE_MAX_CHAIN_DEPTH: '3' }).gateway
  const smallGateway = createGateway({ config: small, holder, pdp, routes, breakglassKey: null, logger, metrics: createMetrics().gateway })
  const smallUrl = await listen(smallGateway)
  t.equal((await answer(smallUrl, 18_000)).status, 200, 'under the configured 20,000 bytes: forwarded')
  t.equal((await answer(smallUrl, 22_000)).status, 431, 'over it: 431')
})

t.test('metrics text', async (t) => {
  holder.swap(content())
  const { token } = badge()
  await call('/api/m', { token })
  await call('/api/m', { token })
  const text = await metrics.registry.metrics()
  t.match(text, /service_gateway_requests_total\{decision="ALLOW",mode="EM-GUARD",status_class="2xx",error_code=""\} [1-9]\d*/)
  t.match(text, /service_gateway_requests_total\{decision="NONE",mode="EM-GUARD",status_class="5xx",error_code="GATEWAY_NOT_READY"\} 1/)
  t.match(text, /service_gateway_requests_total\{decision="DENY",mode="EM-STRICT",status_class="4xx",error_code="BUNDLE_STALE"\} 1/)
  t.match(text, /service_gateway_cache_lookups_total\{cache="badge",result="hit"\} [1-9]/)
  t.match(text, /service_gateway_cache_lookups_total\{cache="badge",result="miss"\} [1-9]/)
  t.match(text, /service_gateway_cache_lookups_total\{cache="decision",result="hit"\} [1-9]/)
  t.match(text, /service_gateway_cache_lookups_total\{cache="decision",result="miss"\} [1-9]/)
  t.match(text, /service_pdp_unavailable_total\{pdp="embedded",reason="timeout"\} 1/)
  const entries = (cache: string): number => Number(new RegExp(`service_gateway_cache_entries\\{cache="${cache}"\\} (\\d+)`).exec(text)?.[1] ?? NaN)
  t.equal(entries('badge'), gateway.badges.size, 'badge cache entries as the cache reports them')
  t.ok(entries('badge') >= 1, 'the badge just used is cached')
  t.equal(entries('decision'), gateway.decisions.size, 'decision cache entries as the cache reports them')
  // Counted between scrapes: the next scrape adds exactly the requests finished since.
  const allowed = (body: string): number => Number(/service_gateway_requests_total\{decision="ALLOW",mode="EM-GUARD",status_class="2xx",error_code=""\} (\d+)/.exec(body)?.[1])
  await call('/api/m', { token })
  await call('/api/m', { token })
  t.equal(allowed(await metrics.registry.metrics()), allowed(text) + 2, 'two more requests, two more counted')
  t.notMatch(text, new RegExp(SUBJECT.replace(/[.:]/g, '\\$&')), 'no DIDs in labels')
})
