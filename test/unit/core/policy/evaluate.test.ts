import fc from 'fast-check'
import { isDeepStrictEqual } from 'node:util'
import t from 'tap'
import {
  ALLOW_TTL_SECONDS,
  capabilityClassApplies,
  evaluate,
  mcpToolOf,
  mcpToolRateLimitKey,
  meetsMinimumTrust,
  operationMatches,
  patternSpecificity,
  selectCapabilityClassRule,
  selectMcpToolRule,
  selectOperationRule,
  toolPatternMatches,
} from '../../../../src/core/policy/evaluate.js'
import { compareCodePoints } from '../../../../src/core/policy/merge.js'
import type { McpToolRule, MinimumTrustCode, PdpRequest, ResolvedPolicy, TrustCode } from '../../../../src/core/policy/types.js'
import { propertyRuns } from '../../../helpers/property-runs.js'
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
  const trustDenials = vectors.filter((v) => v.expected.reason.endsWith('trust_level_below_minimum'))
  t.ok(trustDenials.length > 0 && trustDenials.every((v) => v.expected.required_trust_level !== undefined), 'every trust-level denial of the table names the level')
  t.ok(vectors.every((v) => v.expected.required_trust_level === undefined || v.expected.reason.endsWith('trust_level_below_minimum')), 'and no other decision does')
  t.ok(reasons.has('operation_pattern_over_limit') && reasons.has('mcp_tool_pattern_over_limit'), 'both over-limit reasons')
  const toolKeys = vectors.flatMap((v) => v.expected.obligations).filter((o) => String(o.params.key).includes(' mcp_tool '))
  t.ok(toolKeys.length >= 3, 'some vectors expect a per-tool rate limit')
  t.ok(vectors.some((v) => typeof v.input.action.http_operation === 'string'), 'some vectors carry an HTTP operation')
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
    const { decision, reason, obligations, required_trust_level: required } = result
    t.strictSame(
      required === undefined ? { decision, reason, obligations } : { decision, reason, obligations, required_trust_level: required },
      vector.expected,
      `${vector.name}: ${vector.description}`,
    )
    t.equal(result.ttl, vector.expected.decision === 'ALLOW' ? ALLOW_TTL_SECONDS : 0, `${vector.name}: ttl`)
    t.equal(result.decision_id, 'fixed', `${vector.name}: decision id from options`)
  }
})

t.test('required_trust_level: the minimum of the check that failed, only when it is one of the five codes', async (t) => {
  const tool = (over: Partial<ResolvedPolicy>, level: TrustCode | '' = 'DV') => evaluate({
    ...request({ level, operation: 'mcp.tool.call' }), action: { operation: 'mcp.tool.call', capability_class: null, mcp_tool: 'pay' },
  }, emptyPolicy(over))
  t.equal(tool({ mcp_tools: [{ tool: 'pay', min_trust_level: 'OV' }] }).required_trust_level, 'OV')
  t.equal(tool({ min_trust_level: 'EV' }, '').required_trust_level, 'EV', 'a subject without a level')
  t.equal(tool({ min_trust_level: 'SS' }, '').required_trust_level, 'SS')
  const unknown = tool({ min_trust_level: 'GOLD' as MinimumTrustCode })
  t.same([unknown.decision, unknown.reason], ['DENY', 'trust_level_below_minimum'], 'an unknown minimum still denies')
  t.notOk('required_trust_level' in unknown, 'but names no level a caller could obtain')
  t.notOk('required_trust_level' in tool({ mcp_tools: [{ tool: 'pay', allowed_dids: [BOB], min_trust_level: 'EV' }] }), 'not for another check of the same rule')
  t.notOk('required_trust_level' in tool({ mcp_tools: [{ tool: 'pay', min_trust_level: 'REG' }] }), 'not on an ALLOW')
  const classes = evaluate({ ...request({ capability_class: 'payments.refund' }), context: { txn_id: 't', enforcement_mode: 'EM-GUARD', leaf_capability: 'payments.refund' } },
    emptyPolicy({ capability_classes: [{ class: 'payments', min_trust_level: 'EV' }] }))
  t.same([classes.reason, classes.required_trust_level], ['capability_class_trust_level_below_minimum', 'EV'], 'a class rule')
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

t.test('MCP tool patterns: only "*" is special', async (t) => {
  const cases: [string, string, boolean][] = [
    ['search', 'search', true],
    ['search', 'Search', false],
    ['search', 'search2', false],
    ['*', '', true],
    ['*', 'any/thing.at all\n', true],
    ['fs.*', 'fs.', true],
    ['fs.*', 'fs.read', true],
    ['fs.*', 'fsx.read', false],
    ['*.read', 'fs.read', true],
    ['*.read', 'fs.reads', false],
    ['a*z', 'az', true],
    ['a*z', 'a/b\nz', true],
    ['ab*ba', 'aba', false],
    ['ab*ba', 'abba', true],
    ['*b*a*', 'ab', false],
    ['*b*a*', 'ba', true],
    ['a**b', 'ab', true],
    ['what?', 'whats', false],
    ['what?', 'what?', true],
    ['[ab]*', 'a', false],
    ['[ab]*', '[ab]', true],
    ['a.c', 'abc', false],
    ['{a,b}*', 'a', false],
    ['\\d*', '\\d1', true],
    ['\\d*', '1', false],
    ['*\u{1F600}', 'x\u{1F600}', true],
  ]
  for (const [pattern, tool, expected] of cases) {
    t.equal(toolPatternMatches(pattern, tool), expected, `${JSON.stringify(pattern)} vs ${JSON.stringify(tool)}`)
  }
})

// The reference: `*` takes any number of characters (code points), anything else itself.
function toolReference(pattern: readonly string[], tool: readonly string[]): boolean {
  if (pattern.length === 0) return tool.length === 0
  const [head, ...rest] = pattern
  if (head === '*') return tool.some((_, k) => toolReference(rest, tool.slice(k))) || toolReference(rest, [])
  return tool.length > 0 && head === tool[0] && toolReference(rest, tool.slice(1))
}

// Few characters, so that literal parts often repeat and overlap; "?", "[" and "." are special elsewhere.
const toolChar = fc.constantFrom('a', 'b', '?', '[', '.', '\n', '\u{1F600}')

t.test('property: toolPatternMatches agrees with a plain recursive matcher', async (t) => {
  // Tools made from the pattern (each "*" filled in, maybe one character dropped) often match or nearly do.
  const pair = fc.array(fc.oneof(toolChar, fc.constant('*')), { maxLength: 8 }).chain((pattern) => fc.tuple(
    fc.constant(pattern),
    fc.oneof(
      fc.array(fc.oneof(toolChar, fc.constant('*')), { maxLength: 10 }),
      fc.tuple(fc.array(fc.oneof(fc.constant([]), fc.array(toolChar, { maxLength: 3 })), { minLength: pattern.length, maxLength: pattern.length }), fc.nat())
        .map(([fills, drop]) => {
          const tool = pattern.flatMap((c, i) => (c === '*' ? (fills[i] as string[]) : [c]))
          return drop % 2 === 0 ? tool : tool.filter((_, i) => i !== drop % (tool.length + 1))
        }),
      // the literal characters less one: the fixed parts would have to share characters to match
      fc.nat().map((drop) => pattern.filter((c) => c !== '*').filter((_, i, all) => i !== drop % all.length)),
    ),
  ))
  const runs = propertyRuns(3000)
  fc.assert(fc.property(pair, ([pattern, tool]) => toolPatternMatches(pattern.join(''), tool.join('')) === toolReference(pattern, tool)), runs)
  t.pass(`${runs.numRuns} runs`)
})

t.test('property: selectMcpToolRule picks what a sort by the documented keys picks', async (t) => {
  // policies/README.md, "MCP tool patterns": fewer "*", longer literal prefix, more literal characters
  // (in code points), code-point order of the text, then the later rule.
  const rank = (rule: McpToolRule, index: number): (number | string)[] => {
    const parts = rule.tool.split('*')
    return [parts.length - 1, -Array.from(parts[0] as string).length, -Array.from(parts.join('')).length, rule.tool, -index]
  }
  const compare = (a: (number | string)[], b: (number | string)[]): number => {
    for (let i = 0; i < a.length; i++) {
      const x = a[i] as number | string
      const y = b[i] as number | string
      const d = typeof x === 'string' ? compareCodePoints(x, y as string) : x - (y as number)
      if (d !== 0) return d
    }
    return 0
  }
  const pattern = fc.array(fc.oneof(fc.constantFrom('a', 'b', '\u{1F600}'), fc.constant('*')), { minLength: 1, maxLength: 5 }).map((p) => p.join(''))
  const runs = propertyRuns(2000)
  fc.assert(fc.property(
    fc.array(fc.record({ tool: pattern, min_trust_level: fc.constantFrom<MinimumTrustCode>('SS', 'EV') }), { maxLength: 8 }),
    fc.array(fc.constantFrom('a', 'b', '\u{1F600}'), { maxLength: 6 }).map((p) => p.join('')),
    (rules, tool) => {
      const ranked = rules.map((rule, i) => ({ rule, key: rank(rule, i) })).filter(({ rule }) => toolReference(Array.from(rule.tool), Array.from(tool)))
      ranked.sort((a, b) => compare(a.key, b.key))
      return selectMcpToolRule(rules, tool) === ranked[0]?.rule
    },
  ), runs)
  t.pass(`${runs.numRuns} runs`)
})

t.test('the per-tool rate limit key', async (t) => {
  t.equal(mcpToolRateLimitKey(ALICE, 'fs.read'), `${ALICE} mcp_tool fs.read`)
  t.equal(mcpToolRateLimitKey(ALICE, 'read my file'), `${ALICE} mcp_tool read my file`, 'the name is kept as it is')
  const policy = emptyPolicy({ rate_limits: [{ did: ALICE, rpm: 100 }], mcp_tools: [{ tool: 'fs.*', rpm: 5 }] })
  const call = (tool: string): PdpRequest => ({ ...request({ operation: 'mcp.tool.call' }), resource: { identifier: tool } })
  const keys = ['fs.read', 'fs.write'].map((tool) => evaluate(call(tool), policy).obligations.map((o) => o.params.key))
  t.same(keys, [[ALICE, `${ALICE} mcp_tool fs.read`], [ALICE, `${ALICE} mcp_tool fs.write`]], 'one bucket per tool, after the subject-wide one')
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
    fc.tuple(fc.constantFrom('GET /v1/things', '* /v1/*', 'GET /**', 'POST /mcp', 'agent.*', 'agent.**', 'mcp.tool.call'), ruleFields).map(([pattern, r]) => ({ pattern, ...r })),
    { maxLength: 3 },
  ),
  mcp_tools: fc.array(
    fc.tuple(fc.constantFrom('search', 'shell', 's*', '*', 'fs.*'), ruleFields, fc.option(fc.integer({ min: 1, max: 100 }), { nil: undefined }))
      .map(([tool, r, rpm]) => ({ tool, ...r, ...(rpm === undefined ? {} : { rpm }) })),
    { maxLength: 3 },
  ),
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
    tool: fc.option(fc.constantFrom('search', 'shell', 'fs.read'), { nil: undefined }),
    http: fc.option(fc.constantFrom('POST /mcp', 'GET /v1/things', 'POST /v1/things?x=1'), { nil: undefined }),
    leaf: fc.option(fc.constantFrom('payments.read', 'admin.users'), { nil: undefined }),
  })
  .map(({ did, level, operation, capability_class, tool, http, leaf }) => {
    const base = request({ did, level, operation, capability_class })
    if (tool !== undefined) base.action.mcp_tool = tool
    if (http !== undefined) base.action.http_operation = http
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

t.test('property: an HTTP operation beside the MCP one only adds restrictions', async (t) => {
  fc.assert(
    fc.property(arbitraryPolicy, arbitraryRequest, fc.constantFrom('POST /mcp', 'GET /v1/things', 'POST /v1/a/b'), (policy, input, http) => {
      const { http_operation: _, ...action } = input.action
      const without = evaluate({ ...input, action }, policy, { decisionId: () => 'p' })
      const withHttp = evaluate({ ...input, action: { ...action, http_operation: http } }, policy, { decisionId: () => 'p' })
      const alone = evaluate({ ...input, action: { ...action, operation: http } }, policy, { decisionId: () => 'p' })
      // Denied without it, or by the HTTP operation's own rule: denied. Otherwise the same answer as without.
      if (without.decision === 'DENY' || alone.reason.startsWith('operation_')) return withHttp.decision === 'DENY'
      return withHttp.decision === 'ALLOW' && isDeepStrictEqual(withHttp.obligations, without.obligations)
    }),
    { numRuns: 500 },
  )
  t.pass('500 runs')
})
