/**
 * The decide stage without sockets: badge-only mode, the PDP request it builds, the decision cache,
 * a stale bundle, and a PDP that fails.
 */
import t from 'tap'
import type { RequestScope } from '../../../../src/gateway/request-scope.js'
import { AT, resume } from '../../../../src/gateway/pipeline.js'
import { bundle, CALLER, content, finished, NOW_MS, policy, recordingPdp, STAGE_TXN, STALE_AFTER_MS, stageWorld, SUBJECT } from '../../../helpers/gateway-stage.js'

const WORKSPACE = '0190f5c6-1c2b-7d3e-8f4a-5b6c7d8e9f00'

t.test('badge-only mode: the verified badge is the whole decision', async (t) => {
  const world = stageWorld({ pdp: null })
  const { scope } = world.verified('GET', '/api/x')
  resume(world.ctx, scope, AT.decide)
  t.equal(scope.decision, 'ALLOW')
  t.equal(scope.decisionId, undefined)
  t.equal(world.upstream.forwards.length, 1)
})

t.test('the PDP request, then the decision cache', async (t) => {
  const pdp = recordingPdp()
  const world = stageWorld({ pdp, env: { SERVICE_WORKSPACE: WORKSPACE, SERVICE_PEP_ID: 'pep-1' }, routes: [{ prefix: '/files', target: { mode: null, caseInsensitive: true } }] })
  const first = world.verified('GET', '/api/x?q=1')
  resume(world.ctx, first.scope, AT.decide)
  t.equal(pdp.calls.length, 1)
  t.match(pdp.calls[0], {
    pip_version: 'service.pip.v1',
    subject: { did: SUBJECT, badge_jti: CALLER.jti, ial: '1', trust_level: 'DV' },
    action: { operation: 'GET /api/x', capability_class: null },
    resource: { identifier: '/api/x?q=1' },
    context: { txn_id: STAGE_TXN, enforcement_mode: 'EM-GUARD' },
    environment: { workspace: WORKSPACE, pep_id: 'pep-1', time: new Date(NOW_MS).toISOString() },
  })
  t.notOk('case_insensitive' in (pdp.calls[0]?.resource ?? {}), 'a case-sensitive route says nothing about case')

  const again = world.verified('GET', '/api/x?q=1')
  resume(world.ctx, again.scope, AT.decide)
  t.equal(pdp.calls.length, 1, 'the same request is answered from the cache')
  t.equal(again.scope.decisionId, first.scope.decisionId, 'with the cached decision')
  t.equal(world.ctx.telemetry.decisionHits, 1)
  t.equal(world.ctx.telemetry.decisionMisses, 1)

  const files = world.verified('GET', '/files/x')
  resume(world.ctx, files.scope, AT.decide)
  t.strictSame(pdp.calls[1]?.resource, { identifier: '/files/x', case_insensitive: true }, 'a case-insensitive route says so')
  t.equal(world.upstream.forwards.length, 3)
})

t.test('a stale bundle is annotated; in EM-STRICT it is refused without asking the PDP', async (t) => {
  const pdp = recordingPdp()
  const stale = content({ bundle: bundle(policy(), STALE_AFTER_MS + 5_000) })
  const world = stageWorld({ pdp, content: stale, routes: [{ prefix: '/strict', target: { mode: 'EM-STRICT' } }] })
  const guarded = world.verified('GET', '/api/x')
  resume(world.ctx, guarded.scope, AT.decide)
  t.equal(world.upstream.forwards.length, 1, 'EM-GUARD forwards')
  t.match(world.requestLines().at(-1), { 'staleness.bundle_stale': true, 'staleness.bundle_age_ms': STALE_AFTER_MS + 5_000 })

  const strict = world.verified('GET', '/strict/x')
  resume(world.ctx, strict.scope, AT.decide)
  t.equal(strict.res.statusCode, 403)
  t.equal(strict.res.json.error, 'BUNDLE_STALE')
  t.equal(pdp.calls.length, 1, 'only the EM-GUARD request asked the PDP')
})

t.test('a PDP that cannot answer is counted; one whose promise rejects fails closed with 500', async (t) => {
  const world = stageWorld({ content: content({ bundle: null }) })
  const { scope, res } = world.verified('GET', '/api/x')
  resume(world.ctx, scope, AT.decide)
  t.equal(res.statusCode, 503, 'no bundle: the embedded PDP is unavailable')
  t.equal(res.json.error, 'PDP_UNAVAILABLE')
  const unavailable = await world.metrics.gateway.pdpUnavailable.get()
  t.match(unavailable.values, [{ labels: { pdp: 'embedded', reason: 'no_bundle' }, value: 1 }])

  const broken = stageWorld({ pdp: { kind: 'http', decide: () => Promise.reject(new Error('boom')), close: async () => {} } })
  const failing = broken.verified('GET', '/api/x')
  resume(broken.ctx, failing.scope as RequestScope, AT.decide)
  await finished(failing.scope)
  t.equal(failing.res.statusCode, 500)
  t.strictSame(failing.res.json, { error: 'GATEWAY_ERROR', message: 'The gateway failed to handle the request.' })
  t.ok(broken.logs().some((line) => line.msg === 'gateway request failed'), 'the failure is logged')
})
