import t from 'tap'
import { MODE_STRICTNESS, type EnforcementMode } from '../../../src/core/enforcement-mode.js'
import {
  ENFORCEMENT_RESPONSES,
  effectiveMode,
  enforce,
  type EnforcementInput,
  type ObligationResult,
  type PdpObligation,
} from '../../../src/core/enforcement.js'

type Pdp = 'ALLOW' | 'DENY' | 'UNAVAILABLE'
type Obl = 'none' | 'met' | 'rl' | 'unk'
type Fresh = 'fresh' | 'stale'

// The obligation column of the table: what the PDP asked for and what the gateway's handlers reported.
const OBLIGATIONS: Record<Obl, { obligations: PdpObligation[]; results?: ObligationResult[] }> = {
  none: { obligations: [] },
  met: {
    obligations: [{ type: 'rate_limit.apply', params: { rpm: 60, key: 'did' } }, { type: 'log.enhanced', params: { level: 'debug' } }],
    results: [{ status: 'known', met: true }, { status: 'known', met: true }],
  },
  rl: { obligations: [{ type: 'rate_limit.apply', params: { rpm: 1, key: 'did' } }], results: [{ status: 'known', met: false, overLimit: true }] },
  unk: { obligations: [{ type: 'x.custom' }], results: [{ status: 'unknown' }] },
}

function input(mode: EnforcementMode, pdp: Pdp, obl: Obl, fresh: Fresh): EnforcementInput {
  const { obligations, results } = OBLIGATIONS[obl]
  return {
    mode,
    pdp: pdp === 'UNAVAILABLE' ? { outcome: 'UNAVAILABLE' } : { outcome: pdp, decisionId: 'dec-1', obligations },
    bundleStale: fresh === 'stale',
    ...(results === undefined ? {} : { obligationResults: results }),
  }
}

const RL = 'rate_limit.apply'
const X = 'x.custom'
const D = 'dec-1'
const U = 'PDP_UNAVAILABLE'
const _ = undefined

// Every cell, expected result written out by hand:
// mode, PDP, obligations, bundle | forward, status, code, decision, decisionId, errorCode, obligationFailures, logOnly
type Row = [EnforcementMode, Pdp, Obl, Fresh, boolean, number | undefined, string | undefined, string, string | undefined, string | undefined, string[], string[]]
const TABLE: Row[] = [
  ['EM-OBSERVE', 'ALLOW', 'none', 'fresh', true, _, _, 'ALLOW', D, _, [], []],
  ['EM-OBSERVE', 'ALLOW', 'none', 'stale', true, _, _, 'ALLOW', D, _, [], []],
  ['EM-OBSERVE', 'ALLOW', 'met', 'fresh', true, _, _, 'ALLOW', D, _, [], []],
  ['EM-OBSERVE', 'ALLOW', 'met', 'stale', true, _, _, 'ALLOW', D, _, [], []],
  ['EM-OBSERVE', 'ALLOW', 'rl', 'fresh', true, _, _, 'ALLOW', D, _, [], [RL]],
  ['EM-OBSERVE', 'ALLOW', 'rl', 'stale', true, _, _, 'ALLOW', D, _, [], [RL]],
  ['EM-OBSERVE', 'ALLOW', 'unk', 'fresh', true, _, _, 'ALLOW', D, _, [], [X]],
  ['EM-OBSERVE', 'ALLOW', 'unk', 'stale', true, _, _, 'ALLOW', D, _, [], [X]],
  ['EM-OBSERVE', 'DENY', 'none', 'fresh', true, _, _, 'ALLOW_OBSERVE', D, _, [], []],
  ['EM-OBSERVE', 'DENY', 'none', 'stale', true, _, _, 'ALLOW_OBSERVE', D, _, [], []],
  ['EM-OBSERVE', 'DENY', 'met', 'fresh', true, _, _, 'ALLOW_OBSERVE', D, _, [], []],
  ['EM-OBSERVE', 'DENY', 'met', 'stale', true, _, _, 'ALLOW_OBSERVE', D, _, [], []],
  ['EM-OBSERVE', 'DENY', 'rl', 'fresh', true, _, _, 'ALLOW_OBSERVE', D, _, [], []],
  ['EM-OBSERVE', 'DENY', 'rl', 'stale', true, _, _, 'ALLOW_OBSERVE', D, _, [], []],
  ['EM-OBSERVE', 'DENY', 'unk', 'fresh', true, _, _, 'ALLOW_OBSERVE', D, _, [], []],
  ['EM-OBSERVE', 'DENY', 'unk', 'stale', true, _, _, 'ALLOW_OBSERVE', D, _, [], []],
  ['EM-OBSERVE', 'UNAVAILABLE', 'none', 'fresh', true, _, _, 'ALLOW_OBSERVE', _, U, [], []],
  ['EM-OBSERVE', 'UNAVAILABLE', 'none', 'stale', true, _, _, 'ALLOW_OBSERVE', _, U, [], []],
  ['EM-OBSERVE', 'UNAVAILABLE', 'met', 'fresh', true, _, _, 'ALLOW_OBSERVE', _, U, [], []],
  ['EM-OBSERVE', 'UNAVAILABLE', 'met', 'stale', true, _, _, 'ALLOW_OBSERVE', _, U, [], []],
  ['EM-OBSERVE', 'UNAVAILABLE', 'rl', 'fresh', true, _, _, 'ALLOW_OBSERVE', _, U, [], []],
  ['EM-OBSERVE', 'UNAVAILABLE', 'rl', 'stale', true, _, _, 'ALLOW_OBSERVE', _, U, [], []],
  ['EM-OBSERVE', 'UNAVAILABLE', 'unk', 'fresh', true, _, _, 'ALLOW_OBSERVE', _, U, [], []],
  ['EM-OBSERVE', 'UNAVAILABLE', 'unk', 'stale', true, _, _, 'ALLOW_OBSERVE', _, U, [], []],

  ['EM-GUARD', 'ALLOW', 'none', 'fresh', true, _, _, 'ALLOW', D, _, [], []],
  ['EM-GUARD', 'ALLOW', 'none', 'stale', true, _, _, 'ALLOW', D, _, [], []],
  ['EM-GUARD', 'ALLOW', 'met', 'fresh', true, _, _, 'ALLOW', D, _, [], []],
  ['EM-GUARD', 'ALLOW', 'met', 'stale', true, _, _, 'ALLOW', D, _, [], []],
  ['EM-GUARD', 'ALLOW', 'rl', 'fresh', true, _, _, 'ALLOW', D, _, [], [RL]],
  ['EM-GUARD', 'ALLOW', 'rl', 'stale', true, _, _, 'ALLOW', D, _, [], [RL]],
  ['EM-GUARD', 'ALLOW', 'unk', 'fresh', true, _, _, 'ALLOW', D, _, [], [X]],
  ['EM-GUARD', 'ALLOW', 'unk', 'stale', true, _, _, 'ALLOW', D, _, [], [X]],
  ['EM-GUARD', 'DENY', 'none', 'fresh', false, 403, 'POLICY_DENIED', 'DENY', D, _, [], []],
  ['EM-GUARD', 'DENY', 'none', 'stale', false, 403, 'POLICY_DENIED', 'DENY', D, _, [], []],
  ['EM-GUARD', 'DENY', 'met', 'fresh', false, 403, 'POLICY_DENIED', 'DENY', D, _, [], []],
  ['EM-GUARD', 'DENY', 'met', 'stale', false, 403, 'POLICY_DENIED', 'DENY', D, _, [], []],
  ['EM-GUARD', 'DENY', 'rl', 'fresh', false, 403, 'POLICY_DENIED', 'DENY', D, _, [], []],
  ['EM-GUARD', 'DENY', 'rl', 'stale', false, 403, 'POLICY_DENIED', 'DENY', D, _, [], []],
  ['EM-GUARD', 'DENY', 'unk', 'fresh', false, 403, 'POLICY_DENIED', 'DENY', D, _, [], []],
  ['EM-GUARD', 'DENY', 'unk', 'stale', false, 403, 'POLICY_DENIED', 'DENY', D, _, [], []],
  ['EM-GUARD', 'UNAVAILABLE', 'none', 'fresh', false, 503, 'PDP_UNAVAILABLE', 'DENY', _, U, [], []],
  ['EM-GUARD', 'UNAVAILABLE', 'none', 'stale', false, 503, 'PDP_UNAVAILABLE', 'DENY', _, U, [], []],
  ['EM-GUARD', 'UNAVAILABLE', 'met', 'fresh', false, 503, 'PDP_UNAVAILABLE', 'DENY', _, U, [], []],
  ['EM-GUARD', 'UNAVAILABLE', 'met', 'stale', false, 503, 'PDP_UNAVAILABLE', 'DENY', _, U, [], []],
  ['EM-GUARD', 'UNAVAILABLE', 'rl', 'fresh', false, 503, 'PDP_UNAVAILABLE', 'DENY', _, U, [], []],
  ['EM-GUARD', 'UNAVAILABLE', 'rl', 'stale', false, 503, 'PDP_UNAVAILABLE', 'DENY', _, U, [], []],
  ['EM-GUARD', 'UNAVAILABLE', 'unk', 'fresh', false, 503, 'PDP_UNAVAILABLE', 'DENY', _, U, [], []],
  ['EM-GUARD', 'UNAVAILABLE', 'unk', 'stale', false, 503, 'PDP_UNAVAILABLE', 'DENY', _, U, [], []],

  ['EM-DELEGATE', 'ALLOW', 'none', 'fresh', true, _, _, 'ALLOW', D, _, [], []],
  ['EM-DELEGATE', 'ALLOW', 'none', 'stale', true, _, _, 'ALLOW', D, _, [], []],
  ['EM-DELEGATE', 'ALLOW', 'met', 'fresh', true, _, _, 'ALLOW', D, _, [], []],
  ['EM-DELEGATE', 'ALLOW', 'met', 'stale', true, _, _, 'ALLOW', D, _, [], []],
  ['EM-DELEGATE', 'ALLOW', 'rl', 'fresh', false, 429, 'rate_limit_exceeded', 'DENY', D, _, [RL], []],
  ['EM-DELEGATE', 'ALLOW', 'rl', 'stale', false, 429, 'rate_limit_exceeded', 'DENY', D, _, [RL], []],
  ['EM-DELEGATE', 'ALLOW', 'unk', 'fresh', true, _, _, 'ALLOW', D, _, [], [X]],
  ['EM-DELEGATE', 'ALLOW', 'unk', 'stale', true, _, _, 'ALLOW', D, _, [], [X]],
  ['EM-DELEGATE', 'DENY', 'none', 'fresh', false, 403, 'POLICY_DENIED', 'DENY', D, _, [], []],
  ['EM-DELEGATE', 'DENY', 'none', 'stale', false, 403, 'POLICY_DENIED', 'DENY', D, _, [], []],
  ['EM-DELEGATE', 'DENY', 'met', 'fresh', false, 403, 'POLICY_DENIED', 'DENY', D, _, [], []],
  ['EM-DELEGATE', 'DENY', 'met', 'stale', false, 403, 'POLICY_DENIED', 'DENY', D, _, [], []],
  ['EM-DELEGATE', 'DENY', 'rl', 'fresh', false, 403, 'POLICY_DENIED', 'DENY', D, _, [], []],
  ['EM-DELEGATE', 'DENY', 'rl', 'stale', false, 403, 'POLICY_DENIED', 'DENY', D, _, [], []],
  ['EM-DELEGATE', 'DENY', 'unk', 'fresh', false, 403, 'POLICY_DENIED', 'DENY', D, _, [], []],
  ['EM-DELEGATE', 'DENY', 'unk', 'stale', false, 403, 'POLICY_DENIED', 'DENY', D, _, [], []],
  ['EM-DELEGATE', 'UNAVAILABLE', 'none', 'fresh', false, 503, 'PDP_UNAVAILABLE', 'DENY', _, U, [], []],
  ['EM-DELEGATE', 'UNAVAILABLE', 'none', 'stale', false, 503, 'PDP_UNAVAILABLE', 'DENY', _, U, [], []],
  ['EM-DELEGATE', 'UNAVAILABLE', 'met', 'fresh', false, 503, 'PDP_UNAVAILABLE', 'DENY', _, U, [], []],
  ['EM-DELEGATE', 'UNAVAILABLE', 'met', 'stale', false, 503, 'PDP_UNAVAILABLE', 'DENY', _, U, [], []],
  ['EM-DELEGATE', 'UNAVAILABLE', 'rl', 'fresh', false, 503, 'PDP_UNAVAILABLE', 'DENY', _, U, [], []],
  ['EM-DELEGATE', 'UNAVAILABLE', 'rl', 'stale', false, 503, 'PDP_UNAVAILABLE', 'DENY', _, U, [], []],
  ['EM-DELEGATE', 'UNAVAILABLE', 'unk', 'fresh', false, 503, 'PDP_UNAVAILABLE', 'DENY', _, U, [], []],
  ['EM-DELEGATE', 'UNAVAILABLE', 'unk', 'stale', false, 503, 'PDP_UNAVAILABLE', 'DENY', _, U, [], []],

  ['EM-STRICT', 'ALLOW', 'none', 'fresh', true, _, _, 'ALLOW', D, _, [], []],
  ['EM-STRICT', 'ALLOW', 'none', 'stale', false, 403, 'BUNDLE_STALE', 'DENY', _, _, [], []],
  ['EM-STRICT', 'ALLOW', 'met', 'fresh', true, _, _, 'ALLOW', D, _, [], []],
  ['EM-STRICT', 'ALLOW', 'met', 'stale', false, 403, 'BUNDLE_STALE', 'DENY', _, _, [], []],
  ['EM-STRICT', 'ALLOW', 'rl', 'fresh', false, 429, 'rate_limit_exceeded', 'DENY', D, _, [RL], []],
  ['EM-STRICT', 'ALLOW', 'rl', 'stale', false, 403, 'BUNDLE_STALE', 'DENY', _, _, [], []],
  ['EM-STRICT', 'ALLOW', 'unk', 'fresh', false, 403, 'OBLIGATION_FAILED', 'DENY', D, _, [X], []],
  ['EM-STRICT', 'ALLOW', 'unk', 'stale', false, 403, 'BUNDLE_STALE', 'DENY', _, _, [], []],
  ['EM-STRICT', 'DENY', 'none', 'fresh', false, 403, 'POLICY_DENIED', 'DENY', D, _, [], []],
  ['EM-STRICT', 'DENY', 'none', 'stale', false, 403, 'BUNDLE_STALE', 'DENY', _, _, [], []],
  ['EM-STRICT', 'DENY', 'met', 'fresh', false, 403, 'POLICY_DENIED', 'DENY', D, _, [], []],
  ['EM-STRICT', 'DENY', 'met', 'stale', false, 403, 'BUNDLE_STALE', 'DENY', _, _, [], []],
  ['EM-STRICT', 'DENY', 'rl', 'fresh', false, 403, 'POLICY_DENIED', 'DENY', D, _, [], []],
  ['EM-STRICT', 'DENY', 'rl', 'stale', false, 403, 'BUNDLE_STALE', 'DENY', _, _, [], []],
  ['EM-STRICT', 'DENY', 'unk', 'fresh', false, 403, 'POLICY_DENIED', 'DENY', D, _, [], []],
  ['EM-STRICT', 'DENY', 'unk', 'stale', false, 403, 'BUNDLE_STALE', 'DENY', _, _, [], []],
  ['EM-STRICT', 'UNAVAILABLE', 'none', 'fresh', false, 503, 'PDP_UNAVAILABLE', 'DENY', _, U, [], []],
  ['EM-STRICT', 'UNAVAILABLE', 'none', 'stale', false, 403, 'BUNDLE_STALE', 'DENY', _, _, [], []],
  ['EM-STRICT', 'UNAVAILABLE', 'met', 'fresh', false, 503, 'PDP_UNAVAILABLE', 'DENY', _, U, [], []],
  ['EM-STRICT', 'UNAVAILABLE', 'met', 'stale', false, 403, 'BUNDLE_STALE', 'DENY', _, _, [], []],
  ['EM-STRICT', 'UNAVAILABLE', 'rl', 'fresh', false, 503, 'PDP_UNAVAILABLE', 'DENY', _, U, [], []],
  ['EM-STRICT', 'UNAVAILABLE', 'rl', 'stale', false, 403, 'BUNDLE_STALE', 'DENY', _, _, [], []],
  ['EM-STRICT', 'UNAVAILABLE', 'unk', 'fresh', false, 503, 'PDP_UNAVAILABLE', 'DENY', _, U, [], []],
  ['EM-STRICT', 'UNAVAILABLE', 'unk', 'stale', false, 403, 'BUNDLE_STALE', 'DENY', _, _, [], []],
]

t.test('the table covers every cell exactly once', async (t) => {
  t.equal(TABLE.length, 4 * 3 * 4 * 2)
  t.equal(new Set(TABLE.map((row) => row.slice(0, 4).join(' '))).size, TABLE.length)
})

t.test('every cell of the enforcement mode table', async (t) => {
  for (const [mode, pdp, obl, fresh, forward, status, code, decision, decisionId, errorCode, obligationFailures, logOnly] of TABLE) {
    const name = `${mode} ${pdp} ${obl} ${fresh}`
    const result = enforce(input(mode, pdp, obl, fresh))
    t.strictSame(
      result,
      {
        forward,
        ...(status === undefined ? {} : { status }),
        ...(code === undefined ? {} : { code }),
        decision,
        ...(decisionId === undefined ? {} : { decisionId }),
        ...(errorCode === undefined ? {} : { errorCode }),
        obligationFailures,
        logOnly,
        // Staleness is annotated in every mode, whatever the response.
        bundleStale: fresh === 'stale',
      },
      name,
    )
  }
})

t.test('obligation details', async (t) => {
  const allow = (mode: EnforcementMode, obligations: PdpObligation[], obligationResults?: EnforcementInput['obligationResults']): EnforcementInput => ({
    mode,
    pdp: { outcome: 'ALLOW', decisionId: 'd', obligations },
    bundleStale: false,
    ...(obligationResults === undefined ? {} : { obligationResults }),
  })
  const rl = { type: 'rate_limit.apply', params: { rpm: 'many' } }
  const cannotApply: ObligationResult = { status: 'known', met: false }

  let r = enforce(allow('EM-STRICT', [rl], [cannotApply]))
  t.match(r, { forward: false, status: 403, code: 'OBLIGATION_FAILED', obligationFailures: ['rate_limit.apply'] }, 'strict: a rate limit that cannot be applied is a failure, not a 429')
  r = enforce(allow('EM-DELEGATE', [rl], [cannotApply]))
  t.match(r, { forward: true, decision: 'ALLOW', logOnly: ['rate_limit.apply'], obligationFailures: [] }, 'delegate: logged only')

  r = enforce(allow('EM-STRICT', [{ type: 'log.enhanced' }], [{ status: 'known', met: false, overLimit: true }]))
  t.match(r, { status: 403, code: 'OBLIGATION_FAILED' }, 'overLimit only means 429 on rate_limit.apply')

  r = enforce(allow('EM-STRICT', [{ type: 'rate_limit.apply' }, { type: 'x.custom' }], [{ status: 'known', met: false, overLimit: true }, { status: 'unknown' }]))
  t.match(r, { status: 403, code: 'OBLIGATION_FAILED', obligationFailures: ['rate_limit.apply', 'x.custom'] }, 'strict: 403 wins over 429')

  r = enforce(allow('EM-DELEGATE', [{ type: 'rate_limit.apply' }, { type: 'x.custom' }], [{ status: 'known', met: false, overLimit: true }, { status: 'unknown' }]))
  t.match(r, { status: 429, code: 'rate_limit_exceeded', obligationFailures: ['rate_limit.apply'], logOnly: ['x.custom'] }, 'delegate: 429 and the unknown type logged')

  r = enforce(allow('EM-STRICT', [{ type: 'log.enhanced' }, { type: 'y.other' }]))
  t.match(r, { status: 403, code: 'OBLIGATION_FAILED', obligationFailures: ['log.enhanced', 'y.other'] }, 'strict: no handler result fails closed')
  r = enforce(allow('EM-DELEGATE', [{ type: 'log.enhanced' }, { type: 'y.other' }]))
  t.match(r, { forward: true, logOnly: ['log.enhanced', 'y.other'] }, 'delegate: no handler result is logged')
})

t.test('the response table', async (t) => {
  t.strictSame(
    { ...ENFORCEMENT_RESPONSES },
    {
      POLICY_DENIED: { status: 403, code: 'POLICY_DENIED' },
      PDP_UNAVAILABLE: { status: 503, code: 'PDP_UNAVAILABLE' },
      OBLIGATION_FAILED: { status: 403, code: 'OBLIGATION_FAILED' },
      RATE_LIMIT_EXCEEDED: { status: 429, code: 'rate_limit_exceeded' },
      BUNDLE_STALE: { status: 403, code: 'BUNDLE_STALE' },
    },
  )
  t.ok(Object.isFrozen(ENFORCEMENT_RESPONSES) && Object.isFrozen(ENFORCEMENT_RESPONSES.POLICY_DENIED))
})

t.test('effectiveMode', async (t) => {
  t.ok(MODE_STRICTNESS['EM-OBSERVE'] < MODE_STRICTNESS['EM-GUARD'])
  t.ok(MODE_STRICTNESS['EM-GUARD'] < MODE_STRICTNESS['EM-DELEGATE'])
  t.ok(MODE_STRICTNESS['EM-DELEGATE'] < MODE_STRICTNESS['EM-STRICT'])
  const cases: [EnforcementMode, (string | null | undefined)[], EnforcementMode][] = [
    ['EM-OBSERVE', [], 'EM-OBSERVE'],
    ['EM-GUARD', [null, undefined], 'EM-GUARD'],
    ['EM-OBSERVE', ['EM-GUARD'], 'EM-GUARD'],
    ['EM-OBSERVE', ['EM-DELEGATE', null, 'EM-GUARD'], 'EM-DELEGATE'],
    ['EM-DELEGATE', ['EM-OBSERVE', 'EM-GUARD'], 'EM-DELEGATE'],
    ['EM-GUARD', ['EM-STRICT'], 'EM-STRICT'],
    ['EM-STRICT', ['EM-OBSERVE'], 'EM-STRICT'],
    ['EM-OBSERVE', ['EM-MAXIMUM', 'em-strict', '', 'toString', '__proto__'], 'EM-OBSERVE'],
    ['EM-GUARD', ['bogus', 'EM-DELEGATE'], 'EM-DELEGATE'],
  ]
  for (const [configured, minimums, expected] of cases) {
    t.equal(effectiveMode(configured, minimums), expected, `${configured} + ${JSON.stringify(minimums)}`)
  }
})
