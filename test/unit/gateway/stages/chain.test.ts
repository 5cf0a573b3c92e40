/**
 * The chain stage without sockets: a request without envelope headers goes straight on; a refused
 * chain answers its ENVELOPE_* code except in EM-OBSERVE, which logs it and proceeds; a verified chain
 * raises the mode its envelopes ask for and reaches the PDP request.
 */
import t from 'tap'
import { generateKeyPairSync } from 'node:crypto'
import { didKeyOf, mintRootEnvelope, chainHeaders } from '../../../../src/sdk/index.js'
import { AT, resume } from '../../../../src/gateway/pipeline.js'
import { authorityBadge, CALLER, finished, NOW_MS, recordingPdp, stageWorld, SUBJECT } from '../../../helpers/gateway-stage.js'

t.test('no envelope headers: the request goes on at once', async (t) => {
  const world = stageWorld()
  const { scope } = world.verified('GET', '/api/x')
  resume(world.ctx, scope, AT.chain)
  t.ok(scope.finished, 'finished synchronously')
  t.equal(world.upstream.forwards.length, 1)
  t.equal(scope.chain, null)
})

t.test('a malformed chain: 400 ENVELOPE_MALFORMED, or logged and forwarded in EM-OBSERVE', async (t) => {
  const world = stageWorld({ routes: [{ prefix: '/observe', target: { mode: 'EM-OBSERVE' } }] })
  const refused = world.verified('GET', '/api/x', [['x-service-authority', 'not-an-envelope']])
  resume(world.ctx, refused.scope, AT.chain)
  await finished(refused.scope)
  t.equal(refused.res.statusCode, 400)
  t.equal(refused.res.json.error, 'ENVELOPE_MALFORMED')
  t.equal(world.upstream.forwards.length, 0)

  const observed = world.verified('GET', '/observe/x', [['x-service-authority', 'not-an-envelope']])
  resume(world.ctx, observed.scope, AT.chain)
  await finished(observed.scope)
  t.equal(world.upstream.forwards.length, 1, 'EM-OBSERVE forwards')
  t.match(world.requestLines().at(-1), { chain_error: 'ENVELOPE_MALFORMED', status: 200 })
  t.ok(world.logs().some((line) => line.msg === 'delegation chain refused (EM-OBSERVE: request proceeds)'))
})

t.test('a verified chain raises the mode and reaches the PDP request', async (t) => {
  const pdp = recordingPdp()
  const world = stageWorld({ pdp })
  const issuerKey = generateKeyPairSync('ed25519')
  const issuerDid = didKeyOf(issuerKey.publicKey)
  const issuerBadge = authorityBadge(issuerDid)
  const root = mintRootEnvelope({
    issuer: { did: issuerDid, privateKey: issuerKey.privateKey, badgeJti: issuerBadge.jti },
    subject: { did: SUBJECT, badgeJti: CALLER.jti },
    capabilityClass: 'payments.refund',
    depthRemaining: 0,
    ttlSeconds: 600,
    enforcementModeMin: 'EM-STRICT',
    now: Math.floor(NOW_MS / 1000),
  })
  const headers = Object.entries(chainHeaders([root.jws], { [issuerDid]: issuerBadge.token })) as [string, string][]
  const { scope } = world.verified('GET', '/api/x', headers)
  resume(world.ctx, scope, AT.chain)
  await finished(scope)
  t.equal(scope.chain?.depth, 1, 'the chain is on the scope')
  t.equal(scope.mode, 'EM-STRICT', 'the envelope raised EM-GUARD to EM-STRICT')
  t.equal(world.upstream.forwards.length, 1)
  t.match(pdp.calls[0]?.context, { enforcement_mode: 'EM-STRICT', leaf_capability: 'payments.refund', delegation_depth: 1 })
})
