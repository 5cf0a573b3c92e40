/**
 * The break-glass stage without sockets: a valid, in-scope override is forwarded without asking the
 * PDP; a token without a configured key, or out of scope, is counted, logged and ignored.
 */
import t from 'tap'
import { generateKeyPairSync, randomUUID } from 'node:crypto'
import { signBreakglassToken } from '../../../../src/core/breakglass.js'
import { AT, resume } from '../../../../src/gateway/pipeline.js'
import { DecisionFeed, OverrideLog } from '../../../../src/telemetry/decision-feed.js'
import { bundle, CALLER, content, NOW_MS, policy, recordingPdp, stageWorld, SUBJECT, type StageWorld } from '../../../helpers/gateway-stage.js'

const operatorKey = generateKeyPairSync('ed25519')
const denyAll = content({ bundle: bundle(policy({ denied_dids: [SUBJECT] })) })

function token(routes: string[], jti = randomUUID()): string {
  const now = Math.floor(NOW_MS / 1000)
  return signBreakglassToken({ jti, iat: now - 5, exp: now + 600, iss: 'ops', sub: 'oncall@example.com', reason: 'incident', scope: { methods: ['GET'], routes } }, operatorKey.privateKey)
}

async function overrideCount(world: StageWorld, result: string): Promise<number> {
  const metric = await world.metrics.gateway.breakglassOverrides.get()
  return metric.values.find((v) => v.labels.result === result)?.value ?? 0
}

t.test('a valid, in-scope override skips the PDP and is forwarded', async (t) => {
  const pdp = recordingPdp()
  const world = stageWorld({ pdp, content: denyAll, breakglassKey: operatorKey.publicKey })
  const jti = randomUUID()
  const { scope } = world.verified('GET', '/api/x', [['x-service-breakglass', token(['/api'], jti)]])
  resume(world.ctx, scope, AT.breakglass)
  t.equal(pdp.calls.length, 0, 'the PDP is not asked')
  t.equal(world.upstream.forwards.length, 1, 'forwarded although the policy denies')
  t.match(world.requestLines().at(-1), { 'service.policy.decision': 'ALLOW', 'service.policy.decision_id': `breakglass:${jti}`, 'service.policy.override': true, override_jti: jti })
  t.equal(await overrideCount(world, 'accepted'), 1)
})

t.test('a token out of scope, or without a configured key, is ignored: the policy decides', async (t) => {
  const keyed = stageWorld({ content: denyAll, breakglassKey: operatorKey.publicKey })
  const outOfScope = keyed.verified('GET', '/api/x', [['x-service-breakglass', token(['/other'])]])
  resume(keyed.ctx, outOfScope.scope, AT.breakglass)
  t.equal(outOfScope.res.statusCode, 403, 'out of scope: the DENY stands')
  t.equal(outOfScope.res.json.error, 'POLICY_DENIED')
  t.ok(keyed.logs().some((line) => line.msg === 'break-glass token ignored'), 'logged')
  t.equal(await overrideCount(keyed, 'accepted'), 0)

  const keyless = stageWorld({ content: denyAll })
  const unconfigured = keyless.verified('GET', '/api/x', [['x-service-breakglass', token(['/api'])]])
  resume(keyless.ctx, unconfigured.scope, AT.breakglass)
  t.equal(unconfigured.res.statusCode, 403, 'no key: the DENY stands')
  t.equal(await overrideCount(keyless, 'not_configured'), 1)
  t.equal(keyless.upstream.forwards.length + keyed.upstream.forwards.length, 0, 'nothing forwarded')
})

t.test('an accepted override is kept for GET /v1/breakglass/uses; an ignored token is not', async (t) => {
  const feed = { decisions: new DecisionFeed(10), overrides: new OverrideLog() }
  const world = stageWorld({ content: denyAll, breakglassKey: operatorKey.publicKey, feed })
  const jti = randomUUID()
  const accepted = token(['/api'], jti)
  resume(world.ctx, world.verified('GET', '/api/x?q=1', [['x-service-breakglass', accepted]]).scope, AT.breakglass)
  resume(world.ctx, world.verified('GET', '/api/y', [['x-service-breakglass', token(['/other'])]]).scope, AT.breakglass)
  t.same(feed.overrides.latest(10), [{ timeMs: NOW_MS, jti, operator: 'oncall@example.com', reason: 'incident', agentDid: SUBJECT, badgeJti: CALLER.jti, method: 'GET', path: '/api/x' }])
  t.notMatch(JSON.stringify(feed.overrides.latest(10)), accepted, 'never the token')
})
