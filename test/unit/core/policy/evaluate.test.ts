import fc from 'fast-check'
import t from 'tap'
import {
  ALLOW_TTL_SECONDS,
  capabilityClassApplies,
  evaluate,
  mcpToolOf,
  meetsMinimumTrust,
  operationMatches,
  patternSpecificity,
  selectCapabilityClassRule,
  selectOperationRule,
} from '../../../../src/core/policy/evaluate.js'
import type { MinimumTrustCode, PdpRequest, ResolvedPolicy, TrustCode } from '../../../../src/core/policy/types.js'
import { loadDecisionVectors } from '../../../helpers/decisions.js'

const vectors = loadDecisionVectors()

const ALICE = 'did:web:agents.example.com:alice'
const BOB = 'did:web:agents.example.com:bob'

function emptyPolicy(over: Partial<ResolvedPolicy> = {}): ResolvedPolicy {
  return {
    min_trust_level: null,
    allowed_dids: null,
    denied_dids: [],
    rate_limits: [],
    operations: [],
    mcp_tools: [],
    capability_classes: [],
    ...over,
  }
}

function request(over: { did?: string; level?: TrustCode | ''; operation?: string; capability_class?: string | null } = {}): PdpRequest {
  return {
    pip_version: 'service.pip.v1',
    subject: { did: over.did ?? ALICE, badge_jti: 'jti-1', ial: 'IAL-1', trust_level: over.level ?? 'DV' },
    action: { operation: over.operation ?? 'GET /v1/things', capability_class: over.capability_class ?? null },
    resource: { identifier: '/v1/things' },
    context: { txn_id: 'txn-1', enforcement_mode: 'EM-GUARD' },
    environment: { pep_id: 'pep-1', time: '2026-03-01T12:00:00Z' },
  }
}

t.test('the decision vector table', async (t) => {
  t.ok(vectors.length >= 40, `${vectors.length} vectors`)
  t.equal(new Set(vectors.map((v) => v.name)).size, vectors.length, 'vector names are unique')
  const reasons = new Set(vectors.map((v) => v.expected.reason))
  for (const family of ['', 'operation_', 'mcp_tool_', 'capability_class_', 'leaf_capability_']) {
    for (const check of ['denied_did', 'not_in_allow_list', 'trust_level_below_minimum']) {
      t.ok(reasons.has(`${family}${check}`), `some vector expects ${family}${check}`)
    }
  }
  t.ok(reasons.has('allowed'))
  const policyKeys = Object.keys(emptyPolicy()).sort()
  for (const vector of vectors) {
    t.same(Object.keys(vector.policy).sort(), policyKeys, `${vector.name}: a complete resolved policy`)
    t.equal(vector.input.pip_version, 'service.pip.v1', `${vector.name}: a PDP request`)
    t.ok(vector.description.length > 0, `${vector.name}: described`)
  }
})

t.test('every decision vector holds for the built-in evaluator', async (t) => {
  for (const vector of vectors) {
    const result = evaluate(vector.input, vector.policy, { decisionId: () => 'fixed' })
    t.same(
      { decision: result.decision, reason: result.reason, obligations: result.obligations },
      vector.expected,
      `${vector.name}: ${vector.description}`,
    )
    t.equal(result.ttl, vector.expected.decision === 'ALLOW' ? ALLOW_TTL_SECONDS : 0, `${vector.name}: ttl`)
    t.equal(result.decision_id, 'fixed', `${vector.name}: decision id from options`)
  }
})

t.test('decision ids', async (t) => {
  const first = evaluate(request(), emptyPolicy())
  const second = evaluate(request(), emptyPolicy())
  t.match(first.decision_id, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/, 'random UUID by default')
  t.not(first.decision_id, second.decision_id)
  t.same({ ...first, decision_id: '' }, { ...second, decision_id: '' }, 'otherwise deterministic')
})

t.test('the evaluator does not mutate its inputs', async (t) => {
  for (const vector of vectors.slice(0, 20)) {
    const policy = structuredClone(vector.policy)
    const input = structuredClone(vector.input)
    evaluate(input, policy, { decisionId: () => 'x' })
    t.same(policy, vector.policy, vector.name)
    t.same(input, vector.input, vector.name)
  }
})

t.test('trust level ordering', async (t) => {
  const levels: TrustCode[] = ['SS', 'REG', 'DV', 'OV', 'EV']
  levels.forEach((have, i) => {
    levels.forEach((need, j) => t.equal(meetsMinimumTrust(have, need), i >= j, `${have} vs minimum ${need}`))
    t.ok(meetsMinimumTrust(have, ''), `${have} with no minimum`)
    t.ok(meetsMinimumTrust(have, null))
    t.notOk(meetsMinimumTrust(have, 'XX'), 'an unknown minimum is met by nobody')
  })
  t.notOk(meetsMinimumTrust('', 'SS'), 'no level ranks below SS')
  t.notOk(meetsMinimumTrust('constructor', 'SS'), 'object keys are not levels')
})

t.test('operation matching', async (t) => {
  const cases: [string, string, boolean][] = [
    ['GET /a/b', 'GET /a/b', true],
    ['GET /a/b', 'get /a/b', true],
    ['gEt /a/b', 'GET /a/b', true],
    ['GET /a/b', 'GET /a/B', false],
    ['* /a', 'OPTIONS /a', true],
    ['GET /a/*', 'GET /a/b', true],
    ['GET /a/*', 'GET /a', false],
    ['GET /a/*', 'GET /a/b/c', false],
    ['GET /a/**', 'GET /a', true],
    ['GET /a/**', 'GET /a/b/c/d', true],
    ['GET /**', 'GET /', true],
    ['GET /**/z', 'GET /z', true],
    ['GET /**/z', 'GET /a/b/z', true],
    ['GET /**/z', 'GET /a/z/b/z', true],
    ['GET /**/z/**', 'GET /a/z/b/z', false], // two `**`: over the structural limit, never matched
    ['GET /*/**/*', 'GET /a', false],
    ['GET /*/**/*', 'GET /a/b', true],
    ['GET /a', 'GET /a?x=1', true],
    ['GET /a', 'GET /a#frag', true],
    ['GET /a', 'GET a', false],
    ['GET a', 'GET a', false],
    ['GET /a.b', 'GET /a.b', true],
    ['GET /a', 'GET /a/', true], // a trailing slash is governed by the rules for the path without it
    ['GET /a/', 'GET /a', false],
    ['GET /a/*', 'GET /a/', true],
    ['GET /', 'GET /', true],
    ['GET /a/b', 'GET /a/b//', false], // only one trailing slash (the gateway merges the others)
    ['a.b', 'a.b', true],
    ['a.*', 'a.b', true],
    ['a.*', 'a', false],
    ['a.**', 'a', true],
    ['*.b', 'x.b', true],
    ['**', 'anything.at.all', true],
    ['**', 'GET /a', false],
    ['* /**', 'a.b', false],
    ['a.b', 'a.bc', false],
    ['a.(b)+', 'a.(b)+', true],
    ['a.(b)+', 'a.bb', false],
  ]
  for (const [pattern, operation, expected] of cases) {
    t.equal(operationMatches(pattern, operation), expected, `${JSON.stringify(pattern)} vs ${JSON.stringify(operation)}`)
  }
})

t.test('operationMatches agrees with a plain recursive matcher on random segment patterns (fast-check)', async (t) => {
  // The reference: `**` takes any number of segments, `*` exactly one, anything else itself.
  const reference = (pattern: readonly string[], target: readonly string[]): boolean => {
    if (pattern.length === 0) return target.length === 0
    const [head, ...rest] = pattern
    if (head === '**') return target.some((_, k) => reference(rest, target.slice(k))) || reference(rest, [])
    return target.length > 0 && (head === '*' || head === target[0]) && reference(rest, target.slice(1))
  }
  const segments = (values: string[]): fc.Arbitrary<string[]> => fc.array(fc.constantFrom(...values), { maxLength: 6 })
  fc.assert(fc.property(segments(['a', 'b', '', '*', '**']), segments(['a', 'b', '']), (pattern, target) => {
    // Parsed as the evaluator does: the path after the first `/`, split on `/`. More than one `**` is
    // over the structural limit and never matches.
    const tokens = ('/' + pattern.join('/')).split('/').slice(1)
    const overLimit = tokens.filter((s) => s === '**').length > 1
    // A target ending in `/` (other than `/`) is also read without that slash.
    const targetTokens = ('/' + target.join('/')).split('/').slice(1)
    const trimmed = targetTokens.length > 1 && targetTokens[targetTokens.length - 1] === '' ? [targetTokens.slice(0, -1)] : []
    const expected = !overLimit && [targetTokens, ...trimmed].some((candidate) => reference(tokens, candidate))
    return operationMatches(`GET /${pattern.join('/')}`, `GET /${target.join('/')}`) === expected
  }), { numRuns: 3000 })
  t.pass('3000 random pattern/operation pairs agree')
})

t.test('case-insensitive routes compare paths in lower case, methods and dotted names as before', async (t) => {
  t.ok(operationMatches('GET /Admin/**', 'GET /admin/x', undefined, true))
  t.ok(operationMatches('GET /admin', 'GET /ADMIN/', undefined, true))
  t.notOk(operationMatches('GET /Admin/**', 'GET /admin/x'), 'case-sensitive by default')
  t.notOk(operationMatches('Agent.invoke', 'agent.invoke', undefined, true), 'dotted names are not paths')
  const rules = [{ pattern: 'GET /Admin/**', denied_dids: ['did:web:x'] }, { pattern: 'GET /admin/public' }]
  t.equal(selectOperationRule(rules, 'GET /admin/public', undefined, true)?.pattern, 'GET /admin/public', 'specificity as usual')
})

t.test('pattern specificity and selection', async (t) => {
  t.same(patternSpecificity('GET /v1/things'), [0, -2, 0, 0, -2])
  t.same(patternSpecificity('* /v1/**'), [2, -1, 1, 1, -2])
  t.same(patternSpecificity('agent.*'), [1, -1, 0, 0, -2])
  const rules = [
    { pattern: '* /**', min_trust_level: 'EV' as const },
    { pattern: 'GET /v1/**' },
    { pattern: 'GET /v1/*' },
    { pattern: 'GET /v1/things' },
  ]
  t.equal(selectOperationRule(rules, 'GET /v1/things')?.pattern, 'GET /v1/things')
  t.equal(selectOperationRule(rules, 'GET /v1/other')?.pattern, 'GET /v1/*')
  t.equal(selectOperationRule(rules, 'GET /v1/a/b')?.pattern, 'GET /v1/**')
  t.equal(selectOperationRule(rules, 'POST /v1/a')?.pattern, '* /**')
  t.equal(selectOperationRule(rules, 'agent.invoke'), undefined)
  t.equal(selectOperationRule([...rules].reverse(), 'GET /v1/other')?.pattern, 'GET /v1/*', 'rule order does not matter')
  const duplicates = [{ pattern: 'a.b', min_trust_level: 'SS' as const }, { pattern: 'a.b', min_trust_level: 'EV' as const }]
  t.equal(selectOperationRule(duplicates, 'a.b')?.min_trust_level, 'EV', 'of duplicate patterns the last wins')
})

t.test('capability classes', async (t) => {
  t.ok(capabilityClassApplies('a.b', 'a.b'))
  t.ok(capabilityClassApplies('a.b', 'a.b.c'))
  t.notOk(capabilityClassApplies('a.b', 'a.bc'))
  t.notOk(capabilityClassApplies('a.b', 'a'))
  const rules = [{ class: 'a' }, { class: 'a.b.c' }, { class: 'a.b' }]
  t.equal(selectCapabilityClassRule(rules, 'a.b.c.d')?.class, 'a.b.c')
  t.equal(selectCapabilityClassRule(rules, 'a.b.x')?.class, 'a.b')
  t.equal(selectCapabilityClassRule(rules, 'a.x')?.class, 'a')
  t.equal(selectCapabilityClassRule(rules, 'b'), undefined)
})

t.test('the MCP tool of a request', async (t) => {
  const base = request({ operation: 'mcp.tool.call' })
  t.equal(mcpToolOf({ ...base, action: { ...base.action, mcp_tool: 'search' } }), 'search')
  t.equal(mcpToolOf({ ...base, resource: { identifier: 'read_file' } }), 'read_file')
  t.equal(mcpToolOf({ ...base, action: { ...base.action, mcp_tool: '' }, resource: { identifier: 'x' } }), 'x')
  t.equal(mcpToolOf(request()), null)
})

t.test('rules restrict, never grant', async (t) => {
  const policy = emptyPolicy({
    allowed_dids: [BOB],
    operations: [{ pattern: 'GET /v1/things', allowed_dids: [ALICE] }],
  })
  t.equal(evaluate(request(), policy).reason, 'not_in_allow_list')
})

const trustCode = fc.constantFrom<MinimumTrustCode>('', 'SS', 'REG', 'DV', 'OV', 'EV')
const did: fc.Arbitrary<string> = fc.constantFrom(ALICE, BOB, 'did:key:z6MkA', 'did:web:x.example')
const didList = fc.uniqueArray(did, { maxLength: 4 })
const ruleFields = fc.record(
  { min_trust_level: trustCode, allowed_dids: didList, denied_dids: didList },
  { requiredKeys: [] },
)
const arbitraryPolicy: fc.Arbitrary<ResolvedPolicy> = fc.record({
  min_trust_level: fc.option(trustCode, { nil: null }),
  allowed_dids: fc.option(didList, { nil: null }),
  denied_dids: didList,
  rate_limits: fc.array(fc.record({ did, rpm: fc.integer({ min: 1, max: 10_000 }) }), { maxLength: 3 }),
  operations: fc.array(
    fc.tuple(fc.constantFrom('GET /v1/things', '* /v1/*', 'GET /**', 'agent.*', 'agent.**', 'mcp.tool.call'), ruleFields).map(([pattern, r]) => ({ pattern, ...r })),
    { maxLength: 3 },
  ),
  mcp_tools: fc.array(fc.tuple(fc.constantFrom('search', 'shell'), ruleFields).map(([tool, r]) => ({ tool, ...r })), { maxLength: 2 }),
  capability_classes: fc.array(
    fc.tuple(fc.constantFrom('payments', 'payments.read', 'admin'), ruleFields).map(([c, r]) => ({ class: c, ...r })),
    { maxLength: 3 },
  ),
})
const arbitraryRequest: fc.Arbitrary<PdpRequest> = fc
  .record({
    did,
    level: trustCode,
    operation: fc.constantFrom('GET /v1/things', 'POST /v1/things', 'agent.invoke', 'mcp.tool.call', 'GET /v1/a/b'),
    capability_class: fc.option(fc.constantFrom('payments.read.balance', 'payments.write', 'admin', 'other'), { nil: null }),
    tool: fc.option(fc.constantFrom('search', 'shell'), { nil: undefined }),
    leaf: fc.option(fc.constantFrom('payments.read', 'admin.users'), { nil: undefined }),
  })
  .map(({ did, level, operation, capability_class, tool, leaf }) => {
    const base = request({ did, level, operation, capability_class })
    if (tool !== undefined) base.action.mcp_tool = tool
    if (leaf !== undefined) base.context = { ...base.context, leaf_capability: leaf, delegation_depth: 1 }
    return base
  })

t.test('property: a subject in denied_dids is always denied', async (t) => {
  fc.assert(
    fc.property(arbitraryPolicy, arbitraryRequest, (policy, input) => {
      const denied = evaluate(input, { ...policy, denied_dids: [...policy.denied_dids, input.subject.did] }, { decisionId: () => 'p' })
      return denied.decision === 'DENY' && denied.reason === 'denied_did' && denied.ttl === 0 && denied.obligations.length === 0
    }),
    { numRuns: 500 },
  )
  t.pass('500 runs')
})

t.test('property: removing every restriction allows, and obligations only come with ALLOW', async (t) => {
  fc.assert(
    fc.property(arbitraryPolicy, arbitraryRequest, (policy, input) => {
      const result = evaluate(input, policy, { decisionId: () => 'p' })
      if (result.decision === 'DENY' && result.obligations.length > 0) return false
      const open = emptyPolicy({ rate_limits: policy.rate_limits })
      return evaluate(input, open, { decisionId: () => 'p' }).decision === 'ALLOW'
    }),
    { numRuns: 300 },
  )
  t.pass('300 runs')
})
