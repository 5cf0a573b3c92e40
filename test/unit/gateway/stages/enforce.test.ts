/**
 * The enforce stage without sockets. The mode matrix is one table: every enforcement mode against
 * every PDP outcome (ALLOW, DENY, UNAVAILABLE, and an ALLOW from a stale bundle), with and without a
 * break-glass override, run from the break-glass stage through decide and enforce with the embedded
 * PDP on a bundle in memory. Then obligations (rate limits, unknown types) and the denial's body.
 */
import t from 'tap'
import { generateKeyPairSync, randomUUID } from 'node:crypto'
import type { EnforcementMode } from '../../../../src/core/enforcement-mode.js'
import { signBreakglassToken } from '../../../../src/core/breakglass.js'
import type { SnapshotContent } from '../../../../src/gateway/snapshot/snapshot.js'
import { AT, resume } from '../../../../src/gateway/pipeline.js'
import { applyAnswer, enforceOutcome } from '../../../../src/gateway/stages/enforce.js'
import { bundle, content, NOW_MS, policy, recordingPdp, STAGE_TXN, STALE_AFTER_MS, stageWorld, SUBJECT, type StageWorldOptions } from '../../../helpers/gateway-stage.js'

const operatorKey = generateKeyPairSync('ed25519')
const MODE_ROUTES: StageWorldOptions['routes'] = [
  { prefix: '/observe', target: { mode: 'EM-OBSERVE' } },
  { prefix: '/guard', target: { mode: 'EM-GUARD' } },
  { prefix: '/delegate', target: { mode: 'EM-DELEGATE' } },
  { prefix: '/strict', target: { mode: 'EM-STRICT' } },
  { prefix: '/quiet', target: { mode: 'EM-GUARD', hideDenyReason: true } },
]
const PATH: Record<EnforcementMode, string> = { 'EM-OBSERVE': '/observe/x', 'EM-GUARD': '/guard/x', 'EM-DELEGATE': '/delegate/x', 'EM-STRICT': '/strict/x' }

type Outcome = 'ALLOW' | 'DENY' | 'UNAVAILABLE' | 'stale bundle'
const SNAPSHOT: Record<Outcome, () => SnapshotContent> = {
  ALLOW: () => content(),
  DENY: () => content({ bundle: bundle(policy({ denied_dids: [SUBJECT] })) }),
  UNAVAILABLE: () => content({ bundle: null }),
  'stale bundle': () => content({ bundle: bundle(policy(), STALE_AFTER_MS + 1) }),
}

/** What a cell expects: forwarded with a decision, or refused with a status and code. */
type Expected =
  | { forward: true; decision: 'ALLOW' | 'ALLOW_OBSERVE'; policyErrorCode?: 'PDP_UNAVAILABLE' }
  | { forward: false; status: number; code: string; policyErrorCode?: 'PDP_UNAVAILABLE' }

const FORWARD = { forward: true, decision: 'ALLOW' } as const
const OBSERVED = { forward: true, decision: 'ALLOW_OBSERVE' } as const
const DENIED = { forward: false, status: 403, code: 'POLICY_DENIED' } as const
const UNAVAILABLE = { forward: false, status: 503, code: 'PDP_UNAVAILABLE', policyErrorCode: 'PDP_UNAVAILABLE' } as const

/** The mode table without an override; with a valid override every cell is forwarded as ALLOW. */
const MATRIX: [EnforcementMode, Outcome, Expected][] = [
  ['EM-OBSERVE', 'ALLOW', FORWARD],
  ['EM-OBSERVE', 'DENY', OBSERVED],
  ['EM-OBSERVE', 'UNAVAILABLE', { ...OBSERVED, policyErrorCode: 'PDP_UNAVAILABLE' }],
  ['EM-OBSERVE', 'stale bundle', FORWARD],
  ['EM-GUARD', 'ALLOW', FORWARD],
  ['EM-GUARD', 'DENY', DENIED],
  ['EM-GUARD', 'UNAVAILABLE', UNAVAILABLE],
  ['EM-GUARD', 'stale bundle', FORWARD],
  ['EM-DELEGATE', 'ALLOW', FORWARD],
  ['EM-DELEGATE', 'DENY', DENIED],
  ['EM-DELEGATE', 'UNAVAILABLE', UNAVAILABLE],
  ['EM-DELEGATE', 'stale bundle', FORWARD],
  ['EM-STRICT', 'ALLOW', FORWARD],
  ['EM-STRICT', 'DENY', DENIED],
  ['EM-STRICT', 'UNAVAILABLE', UNAVAILABLE],
  ['EM-STRICT', 'stale bundle', { forward: false, status: 403, code: 'BUNDLE_STALE' }],
]

function overrideToken(jti: string): string {
  const now = Math.floor(NOW_MS / 1000)
  return signBreakglassToken({ jti, iat: now - 5, exp: now + 600, iss: 'ops', sub: 'oncall@example.com', reason: 'incident', scope: { methods: ['GET'], routes: ['*'] } }, operatorKey.privateKey)
}

t.test('the mode matrix: mode × PDP outcome × override', async (t) => {
  for (const [mode, outcome, expected] of MATRIX) {
    for (const override of [false, true]) {
      const label = `${mode}, ${outcome}${override ? ', override' : ''}`
      const pdp = recordingPdp()
      const world = stageWorld({ pdp, content: SNAPSHOT[outcome](), breakglassKey: operatorKey.publicKey, routes: MODE_ROUTES })
      const jti = randomUUID()
      const { scope, res } = world.verified('GET', PATH[mode], override ? [['x-service-breakglass', overrideToken(jti)]] : [])
      resume(world.ctx, scope, AT.breakglass)
      const line = world.requestLines().at(-1)
      if (override) {
        t.equal(world.upstream.forwards.length, 1, `${label}: forwarded`)
        t.equal(pdp.calls.length, 0, `${label}: the PDP is not asked`)
        t.match(line, { status: 200, 'service.policy.decision': 'ALLOW', 'service.policy.decision_id': `breakglass:${jti}`, 'service.policy.override': true }, `${label}: logged as the override`)
        continue
      }
      t.equal(line?.['service.policy.error_code'], expected.policyErrorCode, `${label}: service.policy.error_code`)
      t.equal(line?.['staleness.bundle_stale'], outcome === 'stale bundle' ? true : undefined, `${label}: staleness annotated`)
      if (expected.forward) {
        t.equal(world.upstream.forwards.length, 1, `${label}: forwarded`)
        t.equal(line?.['service.policy.decision'], expected.decision, `${label}: decision ${expected.decision}`)
        t.equal(res.statusCode, 0, `${label}: the gateway wrote nothing itself`)
      } else {
        t.equal(world.upstream.forwards.length, 0, `${label}: not forwarded`)
        t.equal(res.statusCode, expected.status, `${label}: ${expected.status}`)
        t.equal(res.json.error, expected.code, `${label}: ${expected.code}`)
        t.equal(line?.['service.policy.decision'], 'DENY', `${label}: decision DENY`)
        t.equal(line?.error_code, expected.code, `${label}: error_code logged`)
        t.equal(res.headers['x-service-txn'], STAGE_TXN, `${label}: the transaction id is on the refusal`)
      }
    }
  }
})

t.test('rate_limit.apply: 429 with Retry-After where obligations are enforced, logged where not', async (t) => {
  const limited = content({ bundle: bundle(policy({ rate_limits: [{ did: SUBJECT, rpm: 1 }] })) })
  const world = stageWorld({ content: limited, routes: MODE_ROUTES })
  const first = world.verified('GET', '/delegate/x')
  resume(world.ctx, first.scope, AT.breakglass)
  t.strictSame(world.upstream.forwards.at(-1)?.responseHeaders, ['x-ratelimit-limit', '1', 'x-ratelimit-remaining', '0', 'x-ratelimit-reset', String(Math.ceil(NOW_MS / 1000))], 'the first is forwarded with the limit headers')
  const second = world.verified('GET', '/delegate/x')
  resume(world.ctx, second.scope, AT.breakglass)
  t.equal(second.res.statusCode, 429)
  t.equal(second.res.json.error, 'rate_limit_exceeded')
  t.equal(second.res.headers['retry-after'], '60', 'Retry-After: the time until a token is back')
  t.equal(second.res.headers['x-ratelimit-limit'], '1')
  t.equal(second.res.headers['x-ratelimit-remaining'], '0')

  const guarded = world.verified('GET', '/guard/x')
  resume(world.ctx, guarded.scope, AT.breakglass)
  t.equal(world.upstream.forwards.length, 2, 'EM-GUARD forwards over the limit')
  t.strictSame(world.requestLines().at(-1)?.obligations_not_met, ['rate_limit.apply'], 'and logs the unmet obligation')
})

t.test('an obligation without a handler: 403 OBLIGATION_FAILED in EM-STRICT, logged in EM-DELEGATE', async (t) => {
  const world = stageWorld({ routes: MODE_ROUTES })
  const answer = { outcome: 'ALLOW', decisionId: 'dec-1', obligations: [{ type: 'x.custom' }], ttl: 0 } as const
  const strict = world.verified('GET', '/strict/x')
  enforceOutcome(world.ctx, strict.scope, await applyAnswer(world.ctx, strict.scope, { ...answer, obligations: [...answer.obligations] }))
  t.equal(strict.res.statusCode, 403)
  t.equal(strict.res.json.error, 'OBLIGATION_FAILED')
  t.equal(strict.res.headers['x-service-decision-id'], 'dec-1', 'the refusal names its decision')
  const delegated = world.verified('GET', '/delegate/x')
  enforceOutcome(world.ctx, delegated.scope, await applyAnswer(world.ctx, delegated.scope, { ...answer, obligations: [...answer.obligations] }))
  t.equal(world.upstream.forwards.length, 1)
  t.strictSame(world.requestLines().at(-1)?.obligations_not_met, ['x.custom'])
})

t.test('a denial carries its decision id and reason, unless the route hides the reason', async (t) => {
  const world = stageWorld({ routes: MODE_ROUTES })
  const deny = { outcome: 'DENY', decisionId: 'dec-9', obligations: [], ttl: 0, reason: 'denied_did' } as const
  const shown = world.verified('GET', '/guard/x')
  enforceOutcome(world.ctx, shown.scope, await applyAnswer(world.ctx, shown.scope, { ...deny, obligations: [] }))
  t.strictSame(shown.res.json, { error: 'POLICY_DENIED', message: 'The policy denies this request.', decision_id: 'dec-9', reason: 'denied_did' })
  t.equal(shown.res.headers['x-service-decision-id'], 'dec-9')
  const hidden = world.verified('GET', '/quiet/x')
  enforceOutcome(world.ctx, hidden.scope, await applyAnswer(world.ctx, hidden.scope, { ...deny, obligations: [] }))
  t.strictSame(hidden.res.json, { error: 'POLICY_DENIED', message: 'The policy denies this request.', decision_id: 'dec-9' })
  t.match(world.requestLines().at(-1), { 'service.policy.reason': 'denied_did', operation: 'GET /quiet/x' }, 'the log line keeps the reason')
})
