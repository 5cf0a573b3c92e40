/**
 * The forward stage without sockets: the trusted-peer flag handed to the upstream, and how a forward's
 * end finishes the request (the upstream's status, or 502/504 when nothing reached the client).
 */
import t from 'tap'
import { forward } from '../../../../src/gateway/stages/forward.js'
import { FakeRequest, STAGE_TXN, stageWorld } from '../../../helpers/gateway-stage.js'

t.test('X-Forwarded-* are trusted only from a peer in SERVICE_TRUSTED_PROXIES', async (t) => {
  const world = stageWorld({ env: { SERVICE_TRUSTED_PROXIES: '192.0.2.0/24' } })
  const { scope } = world.admitted('GET', '/api/x')
  forward(world.ctx, scope)
  t.equal(world.upstream.forwards.at(-1)?.trustedPeer, true, '192.0.2.7 is in the range')

  const other = world.admitted('GET', '/api/x')
  ;(other.scope.req as unknown as FakeRequest).socket.remoteAddress = '198.51.100.1'
  forward(world.ctx, other.scope)
  t.equal(world.upstream.forwards.at(-1)?.trustedPeer, false, 'another address is not')
  t.equal(world.upstream.forwards.at(-1)?.txnId, STAGE_TXN, 'the transaction id goes upstream')
})

t.test('the end of a forward finishes the request', async (t) => {
  const world = stageWorld()
  const cases = [
    [{ ok: true, status: 201 }, 201, undefined, 0],
    [{ ok: true, status: 499 }, 499, undefined, 0],
    [{ ok: false, code: 'UPSTREAM_UNAVAILABLE' }, 502, 'UPSTREAM_UNAVAILABLE', 502],
    [{ ok: false, code: 'UPSTREAM_TIMEOUT' }, 504, 'UPSTREAM_TIMEOUT', 504],
  ] as const
  for (const [result, status, code, written] of cases) {
    world.upstream.result = result
    const { scope, res } = world.admitted('GET', '/api/x')
    forward(world.ctx, scope)
    t.ok(scope.finished, `${status}: finished`)
    t.equal(res.statusCode, written, `${status}: ${written === 0 ? 'the upstream answered the client' : 'a gateway-made answer'}`)
    if (code !== undefined) t.equal(res.json.error, code)
    t.match(world.requestLines().at(-1), { status, error_code: code })
  }
})
