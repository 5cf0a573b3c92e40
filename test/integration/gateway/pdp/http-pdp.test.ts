/**
 * The remote PDP client (docs/api.md §2.12, §8; docs/wire-contract.md §8, §13) against a real PDP on 127.0.0.1: the
 * request as sent (body, path, headers), the service and OPA shapes, validation of every answer member
 * (anything malformed is UNAVAILABLE with its reason), the time-out and what happens to a late answer,
 * refused connections, connection reuse and retry, concurrency, and close() with a request in flight,
 * and a property over random answers (any JSON, any bytes, any status and content type).
 */
import t from 'tap'
import fc from 'fast-check'
import { randomUUID } from 'node:crypto'
import { createServer, type Server } from 'node:http'
import type { AddressInfo, Socket } from 'node:net'
import type { PdpRequest } from '../../../../src/core/policy/types.js'
import { createHttpPdp, MAX_PDP_RESPONSE_BYTES, type HttpPdpOptions } from '../../../../src/gateway/pdp/http-pdp.js'
import type { PdpAnswer, PolicyDecisionPoint } from '../../../../src/gateway/pdp/pdp.js'
import { isValidDecisionId, PDP_UNAVAILABLE_REASONS } from '../../../../src/gateway/pdp/pdp-answer.js'
import type { GatewaySnapshot } from '../../../../src/gateway/snapshot/snapshot.js'
import { sleep } from '../../../helpers/expect.js'
import { startPdpServer, type PdpBehaviour } from '../../../helpers/pdp-server.js'
import { propertyRuns } from '../../../helpers/property-runs.js'

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

// The remote PDPs never read the snapshot; the contract still passes one.
const SNAPSHOT = { version: 1, issuer: 'http://registry.test', keys: new Map(), keysVersion: 'k', revoked: new Set(), bundle: null } as unknown as GatewaySnapshot

function pdpRequest(overrides: Partial<PdpRequest['context']> = {}): PdpRequest {
  return {
    pip_version: 'service.pip.v1',
    subject: { did: 'did:web:agents.example.com:alice', badge_jti: randomUUID(), ial: 'IAL-1', trust_level: 'DV' },
    action: { operation: 'GET /v1/things', capability_class: 'data.read' },
    resource: { identifier: '/v1/things' },
    context: { txn_id: randomUUID(), enforcement_mode: 'EM-GUARD', leaf_capability: 'data.read.things', delegation_depth: 2, ...overrides },
    environment: { workspace: randomUUID(), pep_id: 'pep-7', time: new Date().toISOString() },
  }
}

/** The part of a tap test these helpers use. */
interface Tap {
  teardown(fn: () => unknown): void
}

function makePdp(t: Tap, options: Partial<HttpPdpOptions> & { endpoint: string }): PolicyDecisionPoint {
  const pdp = createHttpPdp({ protocol: 'service', timeoutMs: 2000, pepId: 'pep-7', ...options })
  t.teardown(() => pdp.close())
  return pdp
}

async function decide(pdp: PolicyDecisionPoint, request: PdpRequest = pdpRequest()): Promise<PdpAnswer> {
  return pdp.decide(request, SNAPSHOT)
}

function reasonOf(answer: PdpAnswer): string | undefined {
  return answer.outcome === 'UNAVAILABLE' ? answer.reason : undefined
}

/** A free port with nothing listening on it. */
async function refusedUrl(): Promise<string> {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  await new Promise<void>((resolve) => server.close(() => resolve()))
  return `http://127.0.0.1:${port}/decide`
}

/** A hand-written server for answers the helper cannot produce (streams); closed in teardown. */
async function rawServer(t: Tap, handler: Parameters<typeof createServer>[1]): Promise<string> {
  const server: Server = createServer(handler)
  const sockets = new Set<Socket>()
  server.on('connection', (socket: Socket) => {
    sockets.add(socket)
    socket.on('close', () => sockets.delete(socket))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => {
    server.close(() => resolve())
    for (const socket of sockets) socket.destroy()
  }))
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/decide`
}

t.test('service protocol: the request as sent', async (t) => {
  const server = await startPdpServer(t)
  const pdp = makePdp(t, { endpoint: `${server.url}?tenant=a&x=1`, pepId: 'gateway-eu-1' })
  t.equal(pdp.kind, 'http', 'kind')
  const request = pdpRequest()
  const answer = await decide(pdp, request)
  t.equal(answer.outcome, 'ALLOW', 'answered')

  t.equal(server.requests.length, 1, 'one request')
  const seen = server.requests[0]!
  t.equal(seen.method, 'POST', 'POST')
  t.equal(seen.path, '/decide?tenant=a&x=1', 'endpoint path and query used exactly')
  t.equal(seen.headers['content-type'], 'application/json', 'content-type')
  t.equal(seen.headers.accept, 'application/json', 'accept')
  t.equal(seen.headers['x-service-pep-id'], 'gateway-eu-1', 'PEP id header')
  t.equal(seen.body.pip_version, 'service.pip.v1', 'pip_version')
  t.equal(seen.body.subject.did, request.subject.did, 'subject.did')
  t.equal(seen.body.subject.badge_jti, request.subject.badge_jti, 'subject.badge_jti')
  t.equal(seen.body.subject.ial, 'IAL-1', 'subject.ial')
  t.equal(seen.body.subject.trust_level, 'DV', 'subject.trust_level as the code')
  t.equal(seen.body.action.operation, 'GET /v1/things', 'action.operation')
  t.equal(seen.body.action.capability_class, 'data.read', 'action.capability_class')
  t.equal(seen.body.resource.identifier, '/v1/things', 'resource.identifier')
  t.equal(seen.body.context.txn_id, request.context.txn_id, 'context.txn_id')
  t.equal(seen.body.context.enforcement_mode, 'EM-GUARD', 'context.enforcement_mode')
  t.equal(seen.body.context.leaf_capability, 'data.read.things', 'context.leaf_capability')
  t.equal(seen.body.context.delegation_depth, 2, 'context.delegation_depth')
  t.equal(seen.body.environment.workspace, request.environment.workspace, 'environment.workspace')
  t.equal(seen.body.environment.pep_id, 'pep-7', 'environment.pep_id')
  t.equal(seen.body.environment.time, request.environment.time, 'environment.time')
  t.same(seen.body, JSON.parse(JSON.stringify(request)), 'nothing added or dropped')
})

t.test('service protocol: null capability_class, no chain members, no PEP id header', async (t) => {
  const server = await startPdpServer(t)
  const pdp = makePdp(t, { endpoint: server.url, pepId: null })
  const request = pdpRequest()
  request.action.capability_class = null
  delete request.context.leaf_capability
  delete request.context.delegation_depth
  t.equal((await decide(pdp, request)).outcome, 'ALLOW', 'answered')
  const seen = server.requests[0]!
  t.equal(seen.path, '/decide', 'path')
  t.notOk('x-service-pep-id' in seen.headers, 'no X-Service-PEP-ID without a PEP id')
  t.equal(seen.body.action.capability_class, null, 'capability_class null is sent as null')
  t.notOk('leaf_capability' in seen.body.context, 'no leaf_capability')
  t.notOk('delegation_depth' in seen.body.context, 'no delegation_depth')
})

t.test('service protocol: ALLOW and DENY answers', async (t) => {
  const server = await startPdpServer(t)
  const pdp = makePdp(t, { endpoint: server.url })

  const obligations = [{ type: 'rate_limit.apply', params: { rpm: 30, key: 'did:web:a' } }, { type: 'log.enhanced', params: { level: 'debug' } }]
  server.respond({ decision: 'ALLOW', decision_id: 'dec-1', obligations, ttl: 60, reason: 'allowed' })
  t.same(await decide(pdp), { outcome: 'ALLOW', decisionId: 'dec-1', obligations, ttl: 60, reason: 'allowed' }, 'ALLOW with obligations and ttl')

  server.respond({ decision: 'DENY', decision_id: 'dec-2', reason: 'denied_did' })
  const deny = await decide(pdp)
  t.same(deny, { outcome: 'DENY', decisionId: 'dec-2', obligations: [], ttl: 0, reason: 'denied_did' }, 'DENY: absent obligations are [], absent ttl is 0')

  server.respond({ decision: 'ALLOW', decision_id: 'dec-3' })
  const bare = await decide(pdp)
  t.same(bare, { outcome: 'ALLOW', decisionId: 'dec-3', obligations: [], ttl: 0 }, 'bare ALLOW')
  t.notOk('reason' in bare, 'no reason member when the PDP gave none')

  server.respond({ status: 200, body: JSON.stringify({ decision: 'ALLOW', decision_id: 'dec-4', obligations: null, ttl: null, reason: null }) })
  t.same(await decide(pdp), { outcome: 'ALLOW', decisionId: 'dec-4', obligations: [], ttl: 0 }, 'null optional members count as absent')

  server.respond({ decision: 'ALLOW', decision_id: 'dec-5', ttl: 86_400 })
  const capped = await decide(pdp)
  t.equal(capped.outcome === 'ALLOW' ? capped.ttl : -1, 3600, 'ttl capped at one hour')

  server.respond({ decision: 'ALLOW', decision_id: 'dec-6', obligations: [{ type: 'log.enhanced' }, { type: 'custom.x', params: {}, extra: 'dropped' }] })
  const trimmed = await decide(pdp)
  t.same(trimmed.outcome === 'ALLOW' ? trimmed.obligations : null, [{ type: 'log.enhanced' }, { type: 'custom.x', params: {} }], 'obligations without params, extra members dropped')

  server.respond({ status: 200, body: '{"decision":"ALLOW","decision_id":"dec-7"}', headers: { 'content-type': 'application/json; charset=utf-8' } })
  t.equal((await decide(pdp)).outcome, 'ALLOW', 'content-type parameters accepted')

  server.respond({ decision: 'ALLOW' })
  const fresh = await decide(pdp)
  t.match(fresh.outcome === 'ALLOW' ? fresh.decisionId : '', UUID, 'the PDP\'s own decision_id is used')
})

t.test('opa protocol: path, input wrapping and result shape', async (t) => {
  const server = await startPdpServer(t)
  for (const [label, endpoint] of [['base', server.baseUrl], ['base/', `${server.baseUrl}/`], ['base//', `${server.baseUrl}//`]] as const) {
    const pdp = makePdp(t, { endpoint, protocol: 'opa' })
    t.equal(pdp.kind, 'opa', `${label}: kind`)
    const before = server.requests.length
    server.respond({ decision: 'DENY', decision_id: 'opa-log-1', reason: 'trust_level_below_minimum', obligations: [], ttl: 0 })
    const request = pdpRequest()
    const answer = await decide(pdp, request)
    t.same(answer, { outcome: 'DENY', decisionId: 'opa-log-1', obligations: [], ttl: 0, reason: 'trust_level_below_minimum' }, `${label}: result read`)
    const seen = server.requests[before]!
    t.equal(seen.path, '/v1/data/service/policy', `${label}: data API path without a doubled slash`)
    t.same(Object.keys(seen.body), ['input'], `${label}: only input is posted`)
    t.same(seen.body.input, JSON.parse(JSON.stringify(request)), `${label}: input is the PDP request`)
    t.equal(seen.headers['x-service-pep-id'], 'pep-7', `${label}: PEP id header`)
  }

  const prefixed = makePdp(t, { endpoint: `${server.baseUrl}/opa/`, protocol: 'opa' })
  server.respond({ decision: 'ALLOW', obligations: [{ type: 'rate_limit.apply', params: { rpm: 5, key: 'k' } }], ttl: 60, reason: 'allowed' })
  const allow = await decide(prefixed)
  t.equal(server.requests.at(-1)!.path, '/opa/v1/data/service/policy', 'a base path prefix is kept')
  t.equal(allow.outcome, 'ALLOW', 'ALLOW')
  if (allow.outcome === 'ALLOW') {
    t.same(allow.obligations, [{ type: 'rate_limit.apply', params: { rpm: 5, key: 'k' } }], 'obligations from result')
    t.equal(allow.ttl, 60, 'ttl from result')
    t.match(allow.decisionId, UUID, 'top-level decision_id used')
  }
})

t.test('opa protocol: decision_id generated without decision logging', async (t) => {
  const server = await startPdpServer(t)
  const pdp = makePdp(t, { endpoint: server.baseUrl, protocol: 'opa' })
  server.respond({ decision: 'ALLOW', decision_id: null, reason: 'allowed', ttl: 60 })
  const first = await decide(pdp)
  const second = await decide(pdp)
  t.equal(first.outcome, 'ALLOW', 'a result without decision_id is still a decision')
  const ids = [first, second].map((a) => (a.outcome === 'ALLOW' ? a.decisionId : ''))
  for (const id of ids) t.match(id, /^opa:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/, 'opa: + UUID')
  t.not(ids[0], ids[1], 'a fresh id per decision')

  const service = makePdp(t, { endpoint: server.url })
  t.equal(reasonOf(await decide(service)), 'missing_decision_id', 'the service protocol does not make one up')
})

t.test('opa protocol: malformed answers', async (t) => {
  const server = await startPdpServer(t)
  const pdp = makePdp(t, { endpoint: server.baseUrl, protocol: 'opa' })
  const cases: [string, PdpBehaviour, string][] = [
    ['undefined policy ({})', { status: 200, body: '{}' }, 'missing_result'],
    ['result not an object', { status: 200, body: '{"result":"ALLOW","decision_id":"x"}' }, 'missing_result'],
    ['service shape on the OPA path', { status: 200, body: '{"decision":"ALLOW","decision_id":"x"}' }, 'missing_result'],
    ['bad decision inside result', { status: 200, body: '{"result":{"decision":"allow"},"decision_id":"x"}' }, 'invalid_decision'],
    ['decision_id not a string', { status: 200, body: '{"result":{"decision":"ALLOW"},"decision_id":7}' }, 'invalid_decision_id'],
    ['bad ttl inside result', { status: 200, body: '{"result":{"decision":"ALLOW","ttl":-5},"decision_id":"x"}' }, 'invalid_ttl'],
    ['OPA error', { status: 500, body: '{"code":"internal_error","message":"eval_conflict_error"}' }, 'status_5xx'],
    ['decision_id with CR LF', { status: 200, body: '{"result":{"decision":"ALLOW"},"decision_id":"a\\r\\nx-evil: 1"}' }, 'invalid_decision_id'],
    ['decision_id not Latin-1', { status: 200, body: JSON.stringify({ result: { decision: 'DENY' }, decision_id: 'é€' }) }, 'invalid_decision_id'],
  ]
  for (const [label, behaviour, reason] of cases) {
    server.respond(behaviour)
    const answer = await decide(pdp)
    t.same(answer, { outcome: 'UNAVAILABLE', reason }, `${label} → ${reason}`)
  }
})

t.test('service protocol: every malformed answer is UNAVAILABLE with its reason', async (t) => {
  const server = await startPdpServer(t)
  const pdp = makePdp(t, { endpoint: server.url })
  const ok = { decision: 'ALLOW', decision_id: 'd' }
  const json = (body: unknown): PdpBehaviour => ({ status: 200, body: JSON.stringify(body) })
  const cases: [string, PdpBehaviour, string][] = [
    ['503', { status: 503, body: '{"error":"busy"}' }, 'status_5xx'],
    ['500 without body', { status: 500 }, 'status_5xx'],
    ['204', { status: 204 }, 'status_2xx'],
    ['302', { status: 302, headers: { location: 'http://elsewhere.test/' } }, 'status_3xx'],
    ['404', { status: 404 }, 'status_4xx'],
    ['201 with a valid decision', { status: 201, body: JSON.stringify(ok) }, 'status_2xx'],
    ['text/plain', { status: 200, body: JSON.stringify(ok), headers: { 'content-type': 'text/plain' } }, 'invalid_content_type'],
    ['text/json lookalike', { status: 200, body: JSON.stringify(ok), headers: { 'content-type': 'text/html; a=application/json' } }, 'invalid_content_type'],
    ['not JSON', { status: 200, body: 'ALLOW' }, 'invalid_json'],
    ['empty body', { status: 200, body: '' }, 'invalid_json'],
    ['truncated JSON', { status: 200, body: '{"decision":"ALLOW","decision_id":"d"' }, 'invalid_json'],
    ['array', json([ok]), 'not_an_object'],
    ['null', json(null), 'not_an_object'],
    ['string', json('ALLOW'), 'not_an_object'],
    ['no decision', json({ decision_id: 'd' }), 'invalid_decision'],
    ['lower-case decision', json({ decision: 'allow', decision_id: 'd' }), 'invalid_decision'],
    ['decision PERMIT', json({ decision: 'PERMIT', decision_id: 'd' }), 'invalid_decision'],
    ['decision true', json({ decision: true, decision_id: 'd' }), 'invalid_decision'],
    ['no decision_id', json({ decision: 'ALLOW' }), 'missing_decision_id'],
    ['empty decision_id', json({ decision: 'DENY', decision_id: '' }), 'missing_decision_id'],
    ['numeric decision_id', json({ decision: 'ALLOW', decision_id: 42 }), 'invalid_decision_id'],
    ['overlong decision_id', json({ decision: 'ALLOW', decision_id: 'x'.repeat(257) }), 'invalid_decision_id'],
    ['decision_id with CR LF', json({ decision: 'ALLOW', decision_id: 'd\r\nx-evil: 1' }), 'invalid_decision_id'],
    ['decision_id with LF', json({ decision: 'DENY', decision_id: 'd\n' }), 'invalid_decision_id'],
    ['decision_id not Latin-1', json({ decision: 'ALLOW', decision_id: 'é€' }), 'invalid_decision_id'],
    ['decision_id with U+2028', json({ decision: 'ALLOW', decision_id: 'd\u2028' }), 'invalid_decision_id'],
    ['decision_id with a space', json({ decision: 'ALLOW', decision_id: 'dec 1' }), 'invalid_decision_id'],
    ['reason with CR LF', json({ ...ok, reason: 'a\r\nb' }), 'invalid_reason'],
    ['reason too long', json({ ...ok, reason: 'r'.repeat(513) }), 'invalid_reason'],
    ['17 obligations', json({ ...ok, obligations: Array.from({ length: 17 }, () => ({ type: 'log.enhanced' })) }), 'invalid_obligations'],
    ['obligation type with CR LF', json({ ...ok, obligations: [{ type: 'log.enhanced\r\n' }] }), 'invalid_obligations'],
    ['obligation params too deep', json({ ...ok, obligations: [{ type: 'x', params: { a: { b: { c: { d: {} } } } } }] }), 'invalid_obligations'],
    ['obligations object', json({ ...ok, obligations: { type: 'log.enhanced' } }), 'invalid_obligations'],
    ['obligations string', json({ ...ok, obligations: 'log.enhanced' }), 'invalid_obligations'],
    ['obligation without type', json({ ...ok, obligations: [{ params: {} }] }), 'invalid_obligations'],
    ['obligation with empty type', json({ ...ok, obligations: [{ type: '' }] }), 'invalid_obligations'],
    ['obligation with numeric type', json({ ...ok, obligations: [{ type: 1 }] }), 'invalid_obligations'],
    ['obligation not an object', json({ ...ok, obligations: ['log.enhanced'] }), 'invalid_obligations'],
    ['obligation params array', json({ ...ok, obligations: [{ type: 'x', params: [1] }] }), 'invalid_obligations'],
    ['obligation params string', json({ ...ok, obligations: [{ type: 'x', params: 'rpm=5' }] }), 'invalid_obligations'],
    ['one bad obligation among good ones', json({ ...ok, obligations: [{ type: 'log.enhanced' }, null] }), 'invalid_obligations'],
    ['negative ttl', json({ ...ok, ttl: -1 }), 'invalid_ttl'],
    ['fractional ttl', json({ ...ok, ttl: 1.5 }), 'invalid_ttl'],
    ['string ttl', json({ ...ok, ttl: '60' }), 'invalid_ttl'],
    ['huge ttl', { status: 200, body: '{"decision":"ALLOW","decision_id":"d","ttl":1e300}' }, 'invalid_ttl'],
    ['numeric reason', json({ ...ok, reason: 5 }), 'invalid_reason'],
    ['too large (content-length)', json({ ...ok, pad: 'x'.repeat(MAX_PDP_RESPONSE_BYTES) }), 'too_large'],
  ]
  for (const [label, behaviour, reason] of cases) {
    server.respond(behaviour)
    const answer = await decide(pdp)
    t.same(answer, { outcome: 'UNAVAILABLE', reason }, `${label} → ${reason}`)
  }

  // the connection is still usable after all of them
  server.respond({ decision: 'ALLOW', decision_id: 'after' })
  t.same(await decide(pdp), { outcome: 'ALLOW', decisionId: 'after', obligations: [], ttl: 0 }, 'a good answer after the bad ones')

  // just under the cap is fine
  const padding = MAX_PDP_RESPONSE_BYTES - JSON.stringify({ ...ok, pad: '' }).length
  server.respond(json({ ...ok, pad: 'x'.repeat(padding) }))
  t.equal((await decide(pdp)).outcome, 'ALLOW', 'an answer of exactly 64 KiB is read')
})

t.test('an endless chunked body is cut off at 64 KiB', async (t) => {
  let written = 0
  let closed = false
  const url = await rawServer(t, (req, res) => {
    req.resume()
    res.writeHead(200, { 'content-type': 'application/json' })
    res.write('{"decision":"ALLOW","decision_id":"d","pad":"')
    const chunk = 'x'.repeat(16 * 1024)
    const pump = (): void => {
      if (res.destroyed) return
      // write while the socket takes it, then wait for drain; never ends
      while (res.write(chunk)) written += chunk.length
      written += chunk.length
      res.once('drain', pump)
    }
    res.on('close', () => {
      closed = true
    })
    pump()
  })
  const pdp = makePdp(t, { endpoint: url, timeoutMs: 5000 })
  const started = Date.now()
  const answer = await decide(pdp)
  t.same(answer, { outcome: 'UNAVAILABLE', reason: 'too_large' }, 'too_large')
  t.ok(Date.now() - started < 4000, 'cut off without waiting for the time-out')
  await sleep(100)
  t.ok(closed, 'the connection was dropped')
  t.ok(written < 10 * 1024 * 1024, 'the server was stopped long before it wrote much')
})

t.test('a PDP slower than the time-out', async (t) => {
  const server = await startPdpServer(t)
  const pdp = makePdp(t, { endpoint: server.url, timeoutMs: 100 })

  server.respond({ delayMs: 2000, then: { decision: 'ALLOW' } })
  let started = Date.now()
  t.same(await decide(pdp), { outcome: 'UNAVAILABLE', reason: 'timeout' }, 'slow answer → timeout')
  t.ok(Date.now() - started < 1500, 'answered well before the PDP would have')

  server.respond({ hang: true })
  started = Date.now()
  t.same(await decide(pdp), { outcome: 'UNAVAILABLE', reason: 'timeout' }, 'no answer → timeout')
  t.ok(Date.now() - started < 1500, 'answered well before the PDP would have')
})

t.test('a body that stalls half-way times out', async (t) => {
  const url = await rawServer(t, (req, res) => {
    req.resume()
    res.writeHead(200, { 'content-type': 'application/json' })
    res.write('{"decision":"ALLOW",')
  })
  const pdp = makePdp(t, { endpoint: url, timeoutMs: 150 })
  const started = Date.now()
  t.same(await decide(pdp), { outcome: 'UNAVAILABLE', reason: 'timeout' }, 'timeout while reading the body')
  t.ok(Date.now() - started < 1500, 'promptly')
})

t.test('a late answer is never used', async (t) => {
  const server = await startPdpServer(t)
  const pdp = makePdp(t, { endpoint: server.url, timeoutMs: 100, connections: 1 })
  let count = 0
  server.respond({
    fn: () => {
      count++
      return count === 1
        ? { delayMs: 300, then: { decision: 'DENY', decision_id: 'late', reason: 'late' } }
        : { decision: 'ALLOW', decision_id: `fresh-${count}` }
    },
  })
  const late = await decide(pdp)
  t.same(late, { outcome: 'UNAVAILABLE', reason: 'timeout' }, 'the first decision timed out')
  // with one connection, the next decision would sit behind the late answer if the socket were reused
  const next = await decide(pdp)
  t.same(next, { outcome: 'ALLOW', decisionId: 'fresh-2', obligations: [], ttl: 0 }, 'the next decision gets its own answer')
  await sleep(400)
  t.same(late, { outcome: 'UNAVAILABLE', reason: 'timeout' }, 'the late answer changed nothing')
  t.same(await decide(pdp), { outcome: 'ALLOW', decisionId: 'fresh-3', obligations: [], ttl: 0 }, 'later decisions are not confused by it')
  t.equal(server.requests.length, 3, 'each decision was one request')
})

t.test('time-out while queued behind a full pool', async (t) => {
  const server = await startPdpServer(t)
  server.respond({ hang: true })
  const pdp = makePdp(t, { endpoint: server.url, timeoutMs: 150, connections: 1 })
  const started = Date.now()
  const answers = await Promise.all([decide(pdp), decide(pdp), decide(pdp)])
  for (const answer of answers) t.same(answer, { outcome: 'UNAVAILABLE', reason: 'timeout' }, 'timeout')
  t.ok(Date.now() - started < 1500, 'queued decisions also answer at their own deadline')
})

t.test('connection refused', async (t) => {
  const pdp = makePdp(t, { endpoint: await refusedUrl(), timeoutMs: 3000 })
  const started = Date.now()
  t.same(await decide(pdp), { outcome: 'UNAVAILABLE', reason: 'connect_failed' }, 'connect_failed')
  t.ok(Date.now() - started < 2500, 'without waiting for the time-out')
  t.same(await decide(pdp), { outcome: 'UNAVAILABLE', reason: 'connect_failed' }, 'again on the next call')
})

t.test('keep-alive: sequential decisions reuse connections', async (t) => {
  const server = await startPdpServer(t)
  const pdp = makePdp(t, { endpoint: server.url })
  for (let i = 0; i < 10; i++) t.equal((await decide(pdp)).outcome, 'ALLOW', `decision ${i + 1}`)
  // undici may open a second socket when the next request is sent in the same tick as the previous
  // answer completes, but never one per request
  const ports = new Set(server.requests.map((r) => r.remotePort))
  t.ok(ports.size <= 2, `ten decisions over ${ports.size} socket(s)`)
  t.equal(server.requests.filter((r) => r.headers.connection === 'close').length, 0, 'no Connection: close')
})

t.test('a reset connection is retried once', async (t) => {
  const server = await startPdpServer(t)
  const pdp = makePdp(t, { endpoint: server.url })
  let count = 0
  server.respond({ fn: () => (++count === 1 ? { reset: true } : { decision: 'ALLOW', decision_id: 'second' }) })
  t.same(await decide(pdp), { outcome: 'ALLOW', decisionId: 'second', obligations: [], ttl: 0 }, 'answered by the retry')
  t.equal(server.requests.length, 2, 'two attempts')

  server.respond({ reset: true })
  const before = server.requests.length
  t.same(await decide(pdp), { outcome: 'UNAVAILABLE', reason: 'connection_lost' }, 'a PDP that keeps resetting is unavailable')
  t.equal(server.requests.length - before, 2, 'only one retry')
})

t.test('concurrency: 50 parallel decisions all answered, each with its own answer', async (t) => {
  const server = await startPdpServer(t)
  server.respond({ fn: (body) => ({ delayMs: 20, then: { decision: 'ALLOW', decision_id: `id-${body.context.txn_id}` } }) })
  for (const [label, connections] of [['default pool', undefined], ['4 connections', 4]] as const) {
    const pdp = makePdp(t, { endpoint: server.url, ...(connections === undefined ? {} : { connections }) })
    const requests = Array.from({ length: 50 }, () => pdpRequest())
    const answers = await Promise.all(requests.map((request) => decide(pdp, request)))
    const matched = answers.filter((answer, i) => answer.outcome === 'ALLOW' && answer.decisionId === `id-${requests[i]!.context.txn_id}`)
    t.equal(matched.length, 50, `${label}: every decision got its own answer`)
    if (connections !== undefined) {
      const recent = server.requests.slice(-50)
      t.ok(new Set(recent.map((r) => r.remotePort)).size <= connections, `${label}: at most ${connections} sockets`)
    }
  }
})

t.test('close() with a hanging request in flight', async (t) => {
  const server = await startPdpServer(t)
  server.respond({ hang: true })
  const pdp = createHttpPdp({ endpoint: server.url, protocol: 'service', timeoutMs: 600, pepId: null })
  const pending = decide(pdp)
  while (server.requests.length === 0) await sleep(5)
  const started = Date.now()
  await pdp.close()
  t.ok(Date.now() - started < 3000, 'close() resolves')
  t.same(await pending, { outcome: 'UNAVAILABLE', reason: 'timeout' }, 'the decision in flight answers UNAVAILABLE')
  t.same(await decide(pdp), { outcome: 'UNAVAILABLE', reason: 'closed' }, 'decisions after close are UNAVAILABLE')
  t.equal(server.requests.length, 1, 'and never reach the PDP')
  await pdp.close()
  t.pass('close() twice is harmless')
})

t.test('close() of an idle client', async (t) => {
  const server = await startPdpServer(t)
  const pdp = createHttpPdp({ endpoint: server.baseUrl, protocol: 'opa', timeoutMs: 500, pepId: 'p' })
  t.equal((await decide(pdp)).outcome, 'ALLOW', 'used once')
  const started = Date.now()
  await pdp.close()
  t.ok(Date.now() - started < 400, 'an idle pool closes at once')
  t.same(await decide(pdp), { outcome: 'UNAVAILABLE', reason: 'closed' }, 'closed')
})

t.test('configuration errors are reported at construction', async (t) => {
  const base = { protocol: 'service', timeoutMs: 500, pepId: null } as const
  t.throws(() => createHttpPdp({ ...base, endpoint: 'not a url' }), /absolute URL/, 'relative or garbage endpoint')
  t.throws(() => createHttpPdp({ ...base, endpoint: 'ftp://pdp.test/decide' }), /http or https/, 'non-http scheme')
  t.throws(() => createHttpPdp({ ...base, endpoint: 'http://user:pw@pdp.test/decide' }), /credentials/, 'credentials in the URL')
  t.throws(() => createHttpPdp({ ...base, endpoint: 'http://pdp.test/', timeoutMs: 0 }), /timeout/, 'zero time-out')
  t.throws(() => createHttpPdp({ ...base, endpoint: 'http://pdp.test/', connections: 0 }), /connections/, 'zero connections')
  t.throws(() => createHttpPdp({ ...base, endpoint: 'http://pdp.test/', pepId: 'a\r\nx-evil: 1' }), /header/, 'header injection in the PEP id')
})

t.test('an unserializable request is UNAVAILABLE, not a throw', async (t) => {
  const server = await startPdpServer(t)
  const pdp = makePdp(t, { endpoint: server.url })
  const request = pdpRequest() as PdpRequest & { loop?: unknown }
  request.loop = request
  t.same(await decide(pdp, request), { outcome: 'UNAVAILABLE', reason: 'invalid_request' }, 'invalid_request')
  t.equal(server.requests.length, 0, 'nothing sent')
})

t.test('property: random PDP answers (any JSON, any bytes, any status and type) are a valid answer or UNAVAILABLE', async (t) => {
  let current: { status: number; type: string | null; body: Buffer } = { status: 200, type: 'application/json', body: Buffer.from('{}') }
  const url = await rawServer(t, (req, res) => {
    req.resume()
    const headers: Record<string, string> = {}
    if (current.type !== null) headers['content-type'] = current.type
    res.writeHead(current.status, headers)
    res.end(current.body)
  })
  const service = makePdp(t, { endpoint: url })
  const opa = makePdp(t, { endpoint: url.replace(/\/decide$/, ''), protocol: 'opa' })
  const valid = { decision: 'ALLOW', decision_id: 'dec-1', reason: 'allowed', ttl: 60, obligations: [{ type: 'rate_limit.apply', params: { rpm: 5, key: 'k' } }] }
  const hostile = fc.oneof(fc.jsonValue(), fc.string({ unit: 'binary', maxLength: 64 }), fc.constantFrom('\r\n', 'é€', '\u2028', '', 'x'.repeat(300), -1, 1e300))
  const body = fc.oneof(
    fc.jsonValue().map((value) => Buffer.from(JSON.stringify(value) ?? 'null')),
    fc.tuple(fc.constantFrom('decision', 'decision_id', 'reason', 'ttl', 'obligations'), hostile, fc.boolean())
      .map(([key, value, wrap]) => {
        const document = { ...valid, [key]: value }
        return Buffer.from(JSON.stringify(wrap ? { result: document, decision_id: document.decision_id } : document))
      }),
    fc.uint8Array({ maxLength: 256 }).map((bytes) => Buffer.from(bytes)),
  )
  const status = fc.oneof(fc.constant(200), fc.integer({ min: 200, max: 599 }))
  const type = fc.constantFrom('application/json', 'application/json; charset=utf-8', 'application/problem+json', 'text/plain', 'text/html', '', null)
  const reasons = new Set<string>(PDP_UNAVAILABLE_REASONS)
  await fc.assert(
    fc.asyncProperty(status, type, body, fc.boolean(), async (s, ty, b, useOpa) => {
      current = { status: s, type: ty, body: b }
      const answer = await decide(useOpa ? opa : service)
      if (answer.outcome === 'UNAVAILABLE') {
        if (!reasons.has(answer.reason)) throw new Error(`reason outside the label set: ${answer.reason}`)
        return
      }
      if (answer.outcome !== 'ALLOW' && answer.outcome !== 'DENY') throw new Error('outcome')
      if (!isValidDecisionId(answer.decisionId)) throw new Error(`decision id ${JSON.stringify(answer.decisionId)}`)
      if (!Number.isSafeInteger(answer.ttl) || answer.ttl < 0 || answer.ttl > 3600) throw new Error('ttl')
    }),
    propertyRuns(150),
  )
  t.pass('held')
})
