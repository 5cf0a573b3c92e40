/**
 * A check through the gateway's own stages, without sockets (src/gateway/check/): the allow's header
 * mutations, refusals as the gateway writes them, the body rule of protocol routes, the CheckRequest reader
 * and the SERVICE_CHECK_* configuration.
 */
import t from 'tap'
import { ConfigError, loadConfig } from '../../../../src/config/index.js'
import { runCheck } from '../../../../src/gateway/check/check.js'
import type { CheckInput } from '../../../../src/gateway/check/exchange.js'
import { checkInputOf, checkResponseOf } from '../../../../src/gateway/check/grpc.js'
import { CALLER, stageWorld, SUBJECT } from '../../../helpers/gateway-stage.js'

const input = (over: Partial<CheckInput> = {}): CheckInput => ({
  proxy: 'envoy-grpc', method: 'GET', target: '/api/x', host: '127.0.0.1', rawHeaders: ['authorization', `Bearer ${CALLER.token}`],
  body: null, partialBody: false, remoteAddress: '127.0.0.1', ...over,
})

t.test('an allow: the identity to set, the client copies to remove, nothing forwarded', async (t) => {
  const world = stageWorld()
  const verdict = await runCheck(world.ctx, input({ rawHeaders: ['authorization', `Bearer ${CALLER.token}`, 'x-service-subject', 'did:web:forged'] }))
  t.ok(verdict.allowed, 'allowed')
  if (!verdict.allowed) return
  const set = Object.fromEntries(Array.from({ length: verdict.set.length / 2 }, (_, i) => [verdict.set[2 * i], verdict.set[2 * i + 1]]))
  t.equal(set['x-service-subject'], SUBJECT, 'the verified subject is set')
  t.equal(set['x-service-badge-jti'], CALLER.jti, 'and the badge jti')
  t.ok(set['x-service-txn'], 'and a transaction id')
  t.ok(verdict.remove.includes('x-service-breakglass'), 'the break-glass header is removed')
  t.notOk(verdict.remove.includes('x-service-subject'), 'a header that is set is not also removed')
  t.equal(world.upstream.forwards.length, 0, 'a check never forwards')
  t.match(world.requestLines().at(-1), { check_proxy: 'envoy-grpc', status: 200 }, 'logged as a request, naming the proxy')
})

t.test('refusals are the gateway\'s answer: status, headers and body', async (t) => {
  const world = stageWorld()
  const missing = await runCheck(world.ctx, input({ rawHeaders: [] }))
  t.match(missing, { allowed: false, status: 401, code: 'BADGE_MISSING' })
  if (missing.allowed) return
  t.match(JSON.parse(missing.body), { error: 'BADGE_MISSING' }, 'the documented body')
  t.ok(missing.headers.includes('x-service-gateway'), 'the gateway-made marker travels with it')
  t.notOk(missing.headers.includes('content-length'), 'framing headers are the proxy\'s')
  const bad = await runCheck(world.ctx, input({ rawHeaders: ['authorization', 'Bearer a', 'authorization', 'Bearer b'] }))
  t.match(bad, { allowed: false, status: 400, code: 'REQUEST_MALFORMED' }, 'two Authorization headers: the framing check runs on a check too')
  const ctl = await runCheck(world.ctx, input({ rawHeaders: ['authorization', `Bearer ${CALLER.token}\r\nx: y`] }))
  t.match(ctl, { allowed: false, code: 'REQUEST_MALFORMED' }, 'a CR LF in a value from the proxy\'s message is refused')
  const response = checkResponseOf(missing) as any
  t.equal(response.status.code, 16, 'gRPC: UNAUTHENTICATED')
  t.equal(response.denied_response.status.code, 401, 'with the HTTP status')
})

t.test('MCP routes: the whole body or, in the enforcing modes, CHECK_BODY_MISSING', async (t) => {
  const world = stageWorld({ routes: [{ prefix: '/mcp', target: { mode: 'EM-GUARD', protocol: 'mcp' } }, { prefix: '/seen', target: { mode: 'EM-OBSERVE', protocol: 'mcp' } }] })
  const headers = ['authorization', `Bearer ${CALLER.token}`, 'content-type', 'application/json', 'accept', 'application/json, text/event-stream']
  const body = Buffer.from(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'x', arguments: {} } }))
  const none = await runCheck(world.ctx, input({ method: 'POST', target: '/mcp', rawHeaders: headers }))
  t.match(none, { allowed: false, status: 403, code: 'CHECK_BODY_MISSING' }, 'no body')
  const partial = await runCheck(world.ctx, input({ method: 'POST', target: '/mcp', rawHeaders: headers, body, partialBody: true }))
  t.match(partial, { allowed: false, code: 'CHECK_BODY_MISSING' }, 'a part of the body')
  const short = await runCheck(world.ctx, input({ method: 'POST', target: '/mcp', rawHeaders: [...headers, 'content-length', String(body.length + 5)], body }))
  t.match(short, { allowed: false, code: 'CHECK_BODY_MISSING' }, 'fewer bytes than the Content-Length')
  const whole = await runCheck(world.ctx, input({ method: 'POST', target: '/mcp', rawHeaders: headers, body }))
  t.ok(whole.allowed, 'the whole body is decided per message (no policy: allowed)')
  const observed = await runCheck(world.ctx, input({ method: 'POST', target: '/seen', rawHeaders: headers }))
  t.ok(observed.allowed, 'EM-OBSERVE lets the undecided request through')
  t.match(world.requestLines().at(-1), { 'service.policy.decision': 'ALLOW_OBSERVE', 'service.policy.reason': 'check_body_missing' }, 'and says why')
})

t.test('the CheckRequest reader', async (t) => {
  const read = checkInputOf({
    attributes: { request: { http: { method: 'POST', path: '/mcp?x=1', host: 'h', headers: { ':authority': 'h', ':path': '/mcp', authorization: 'Bearer t', 'x-envoy-auth-partial-body': 'true' }, raw_body: Buffer.from('{}') } } },
  }, '10.0.0.1')
  t.match(read, { proxy: 'envoy-grpc', method: 'POST', target: '/mcp?x=1', host: 'h', rawHeaders: ['authorization', 'Bearer t'], partialBody: true, remoteAddress: '10.0.0.1' }, 'pseudo-headers and the partial-body flag are not request headers')
  const listed = checkInputOf({ attributes: { request: { http: { method: 'GET', path: '/', header_map: { headers: [{ key: 'authorization', raw_value: Buffer.from('a') }, { key: 'authorization', raw_value: Buffer.from('b') }] } } } } }, undefined)
  t.match(listed, { rawHeaders: ['authorization', 'a', 'authorization', 'b'] }, 'header_map keeps repeated headers apart')
  t.type(checkInputOf({}, undefined), 'string', 'no attributes.request.http: unreadable')
  t.type(checkInputOf({ attributes: { request: { http: { method: 'G ET', path: '/' } } } }, undefined), 'string', 'a method that is no token: unreadable')
})

t.test('SERVICE_CHECK_*: closed defaults, and misconfigurations stop start-up', async (t) => {
  const base = { DATABASE_URL: 'memory://', SERVICE_UPSTREAM_URL: 'http://127.0.0.1:9' }
  const check = loadConfig(base).gateway.check
  t.same(check, { grpcPort: null, httpPort: null, httpProxies: [], envoyPathPrefix: '/envoy', peers: ['127.0.0.1', '::1'] }, 'off, loopback peers only')
  t.throws(() => loadConfig({ ...base, SERVICE_CHECK_HTTP_PORT: '9192' }), ConfigError, 'an HTTP port without the proxies it serves')
  t.throws(() => loadConfig({ ...base, SERVICE_CHECK_HTTP_PORT: '9192', SERVICE_CHECK_HTTP_PROXIES: 'haproxy' }), ConfigError, 'an unknown proxy')
  t.throws(() => loadConfig({ ...base, SERVICE_CHECK_HTTP_PROXIES: 'nginx' }), ConfigError, 'proxies without the HTTP port')
  t.throws(() => loadConfig({ ...base, SERVICE_CHECK_GRPC_PORT: '9191', SERVICE_CHECK_PEERS: 'everyone' }), ConfigError, 'a peer that is no address')
  t.throws(() => loadConfig({ DATABASE_URL: 'memory://', SERVICE_CHECK_GRPC_PORT: '9191' }), ConfigError, 'a check service without the gateway')
  t.throws(() => loadConfig({ ...base, SERVICE_CHECK_GRPC_PORT: '9191', SERVICE_GATEWAY_WORKERS: '2' }), ConfigError, 'with gateway workers')
  t.throws(() => loadConfig({ ...base, SERVICE_CHECK_ENVOY_PATH_PREFIX: 'envoy/' }), ConfigError, 'a prefix that is no path')
  t.same(loadConfig({ ...base, SERVICE_CHECK_HTTP_PORT: '0', SERVICE_CHECK_HTTP_PROXIES: 'nginx,traefik', SERVICE_CHECK_PEERS: '10.0.0.0/8' }).gateway.check.httpProxies, ['nginx', 'traefik'])
})

t.test('A2A routes: a JSON-RPC call needs its body, a REST read does not, the public card needs no badge', async (t) => {
  const world = stageWorld({ routes: [{ prefix: '/agent', target: { mode: 'EM-GUARD', protocol: 'a2a' } }] })
  const headers = ['authorization', `Bearer ${CALLER.token}`, 'content-type', 'application/json']
  const rpc = await runCheck(world.ctx, input({ method: 'POST', target: '/agent', rawHeaders: headers }))
  t.match(rpc, { allowed: false, code: 'CHECK_BODY_MISSING' }, 'a JSON-RPC POST without its body')
  const body = Buffer.from(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tasks/get', params: { id: 'task-1' } }))
  const decided = await runCheck(world.ctx, input({ method: 'POST', target: '/agent', rawHeaders: headers, body }))
  t.ok(decided.allowed, 'with it, decided as its operation')
  const read = await runCheck(world.ctx, input({ method: 'GET', target: '/agent/v1/tasks/task-1', rawHeaders: ['authorization', `Bearer ${CALLER.token}`] }))
  t.ok(read.allowed, 'a REST read has no body to wait for')
  const card = await runCheck(world.ctx, input({ method: 'GET', target: '/agent/.well-known/agent-card.json', rawHeaders: [] }))
  t.ok(card.allowed, 'the public card: anonymous, served by the agent itself')
  t.equal(world.upstream.forwards.length, 0, 'and nothing fetched or forwarded')
})
