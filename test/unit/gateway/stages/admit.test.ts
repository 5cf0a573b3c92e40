/**
 * The admit stage without sockets: readiness, framing, the canonical target, the route and its rules,
 * and the transaction id, each refusal in the gateway's error shape before any later stage runs.
 */
import t from 'tap'
import { AT, resume } from '../../../../src/gateway/pipeline.js'
import { authorityBadge, stageWorld } from '../../../helpers/gateway-stage.js'

const badge = authorityBadge()
const bearer = ['authorization', `Bearer ${badge.token}`] as const

t.test('before the first snapshot: 503 GATEWAY_NOT_READY, nothing forwarded', async (t) => {
  const world = stageWorld({ content: null })
  const { scope, res } = world.scope('GET', '/api/x', [bearer])
  resume(world.ctx, scope, AT.admit)
  t.equal(res.statusCode, 503)
  t.strictSame(res.json, { error: 'GATEWAY_NOT_READY', message: 'The gateway has not loaded its first snapshot yet.' })
  t.equal(res.headers['x-service-gateway'], 'error')
  t.equal(world.upstream.forwards.length, 0)
  t.match(world.requestLines(), [{ status: 503, error_code: 'GATEWAY_NOT_READY' }])
})

t.test('ambiguous framing: 400 REQUEST_MALFORMED, the connection is not kept', async (t) => {
  const world = stageWorld()
  const { scope, res } = world.scope('GET', '/api/x', [['Host', 'a'], ['Host', 'b'], bearer])
  resume(world.ctx, scope, AT.admit)
  t.equal(res.statusCode, 400)
  t.equal(res.json.error, 'REQUEST_MALFORMED')
  t.equal(res.shouldKeepAlive, false, 'the connection closes after the answer')
  t.ok(world.logs().some((line) => line.msg === 'gateway refused request framing' && line.reason === 'more than one host header'))
  t.equal(world.upstream.forwards.length, 0)
})

t.test('request targets: refused, unrouted, or canonicalised before any stage reads them', async (t) => {
  const world = stageWorld({ routes: [{ prefix: '/files', target: { mode: null, caseInsensitive: true } }] })
  const cases: [string, string, number | 'forwarded', string | undefined][] = [
    ['GET', '/api/a%2Fb', 400, 'REQUEST_MALFORMED'],
    ['OPTIONS', '*', 404, 'ROUTE_NOT_FOUND'],
    ['GET', '/elsewhere', 404, 'ROUTE_NOT_FOUND'],
    ['GET', '/api/./x/../%61b?q=1', 'forwarded', '/api/ab?q=1'],
    ['GET', '/Files/Report.PDF', 'forwarded', '/files/report.pdf'],
  ]
  for (const [method, url, expected, detail] of cases) {
    const before = world.upstream.forwards.length
    const { scope, res } = world.scope(method, url, [bearer])
    resume(world.ctx, scope, AT.admit)
    if (expected === 'forwarded') {
      t.equal(world.upstream.forwards.length, before + 1, `${method} ${url}: forwarded`)
      t.equal(world.upstream.forwards.at(-1)?.target, detail, `${method} ${url}: the canonical target goes upstream`)
    } else {
      t.equal(res.statusCode, expected, `${method} ${url}: ${expected}`)
      t.equal(res.json.error, detail, `${method} ${url}: ${detail}`)
      t.equal(world.upstream.forwards.length, before, `${method} ${url}: nothing forwarded`)
    }
  }
})

t.test('a route that rejects header names with "_" refuses them; the default drops them upstream', async (t) => {
  const world = stageWorld({ routes: [{ prefix: '/cgi', target: { mode: null, headersWithUnderscores: 'reject' } }] })
  const rejected = world.scope('GET', '/cgi/run', [bearer, ['X_Custom', '1']])
  resume(world.ctx, rejected.scope, AT.admit)
  t.equal(rejected.res.statusCode, 400)
  t.equal(rejected.res.json.error, 'REQUEST_MALFORMED')
  const plain = world.scope('GET', '/cgi/run', [bearer])
  resume(world.ctx, plain.scope, AT.admit)
  t.equal(world.upstream.forwards.at(-1)?.headersWithUnderscores, 'reject', 'the route rule reaches the forwarder')
})

t.test('route mode, HEAD as GET, and the transaction id', async (t) => {
  const world = stageWorld({ routes: [{ prefix: '/strict', target: { mode: 'EM-STRICT' } }] })
  const txn = '0190f5c6-1c2b-7d3e-8f4a-5b6c7d8e9f00'
  const { scope } = world.scope('HEAD', '/strict/x', [bearer, ['X-Service-Txn', txn]])
  resume(world.ctx, scope, AT.admit)
  t.equal(scope.mode, 'EM-STRICT', 'the route names the mode')
  t.equal(scope.operationMethod, 'GET', 'HEAD is decided as GET')
  t.equal(scope.method, 'HEAD', 'and logged as HEAD')
  t.equal(scope.txnId, txn, 'a well-formed transaction id is kept')
  const other = world.scope('GET', '/api/x', [bearer])
  resume(world.ctx, other.scope, AT.admit)
  t.equal(other.scope.mode, 'EM-GUARD', 'other routes keep SERVICE_ENFORCEMENT_MODE')
  t.match(other.scope.txnId, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-/, 'a UUIDv7 is made when none is sent')
})
