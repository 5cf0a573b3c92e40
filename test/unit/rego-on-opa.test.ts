/**
 * The Rego module that OPA users run (policies/service/policy.rego), evaluated by a real OPA: the
 * decision-vector table, the module's own OPA unit tests, and the data.config fallback, each compared
 * with what the gateway's embedded evaluator answers. The engine is the OPA embedded in a dev
 * dependency (see test/helpers/opa.ts); the module itself targets OPA 1.x.
 */
import fc from 'fast-check'
import { readFileSync } from 'node:fs'
import t from 'tap'
import { projectPath } from '../../src/core/paths.js'
import { evaluate } from '../../src/core/policy/evaluate.js'
import type { MinimumTrustCode, PdpRequest, ResolvedPolicy } from '../../src/core/policy/types.js'
import { embeddedDecision, loadDecisionVectors, POLICY_OUTPUTS, type DecisionVector, type PolicyOutputs } from '../helpers/decisions.js'
import { startOpa, type RegoModule } from '../helpers/opa.js'
import { ORG_POLICY_CASES, orgPolicyRequest } from '../helpers/contracts/decision-point.js'
import { propertyRuns } from '../helpers/property-runs.js'

const vectors = loadDecisionVectors()
const policyModule: RegoModule = {
  name: 'policies/service/policy.rego',
  text: readFileSync(projectPath('policies', 'service', 'policy.rego'), 'utf8'),
}
const testModule: RegoModule = {
  name: 'policies/service/policy_test.rego',
  text: readFileSync(projectPath('policies', 'service', 'policy_test.rego'), 'utf8'),
}

const opa = await startOpa()
t.teardown(() => opa.close())

const REQUEST = orgPolicyRequest()

function expectedOutputs(vector: DecisionVector): PolicyOutputs {
  return { ...vector.expected, ttl: vector.expected.decision === 'ALLOW' ? 60 : 0 }
}

t.test('the READMEs name the OPA release the tests run', async (t) => {
  for (const readme of [['README.md'], ['policies', 'README.md']]) {
    t.ok(readFileSync(projectPath(...readme), 'utf8').includes(opa.version), `${readme.join('/')} names ${opa.version}`)
  }
})

t.test('the OPA harness reports what it cannot run instead of hiding it', async (t) => {
  const probe = (text: string): RegoModule => ({ name: 'probe.rego', text: `package probe\n\nimport rego.v1\n\n${text}\n` })
  t.strictSame(
    opa.evaluate([probe('defined := [1, "a"]\n\nnever if {\n\tfalse\n}')], [{ rules: ['defined', 'never'] }]),
    [{ defined: [1, 'a'] }],
    'a defined rule has its value, an undefined one none',
  )
  t.throws(() => opa.evaluate([probe('broken := {')], [{ rules: ['broken'] }]), /^OPA: /, 'a compile error is thrown')
  t.throws(() => opa.evaluate([probe('clash := x if {\n\tsome x in [1, 2]\n}')], [{ rules: ['clash'] }]), /^OPA: .*conflict/, 'an evaluation error is thrown')
  t.throws(() => opa.evaluate([probe('violation := 1')], [{ rules: ['violation'] }]), /defines violation/, "a rule of the host's module is refused")
  const other: RegoModule = { name: 'other.rego', text: 'package other\n\nimport rego.v1\n\nshared := 2\n' }
  t.throws(() => opa.evaluate([probe('shared := 1'), other], [{ rules: ['shared'] }]), /both define shared/, 'two modules defining one name are refused')
})

t.test('every decision vector holds on OPA', async (t) => {
  // Unlike simulation, which refuses policies its grammar rejects (lower-case methods, patterns over a
  // limit), OPA is handed each resolved policy as bundle data, as from any other source: none is skipped.
  const results = opa.evaluate([policyModule], vectors.map((vector) => ({
    rules: POLICY_OUTPUTS,
    input: vector.input,
    data: { resolved_policies: { by_agent_did: { [vector.input.subject.did]: vector.policy } } },
  })))
  t.equal(results.length, vectors.length, 'one result per vector')
  vectors.forEach((vector, i) => t.strictSame(results[i], expectedOutputs(vector), `${vector.name}: ${vector.description}`))
})

t.test('every test_ rule of policy_test.rego is true on OPA', async (t) => {
  const tests = [...testModule.text.matchAll(/^(test_[A-Za-z0-9_]*)\s+if\b/gm)].map((match) => match[1]!)
  t.ok(tests.length >= 15, `${tests.length} test rules found`)
  t.ok(tests.includes('test_every_decision_vector'), 'the whole-table test is among them')
  // As with `opa test policies/service <table>`: the vector table loaded as data.decision_vectors.
  const [result] = opa.evaluate([policyModule, testModule], [{
    rules: [...tests, 'vectors', 'failing_vectors'],
    data: { decision_vectors: vectors },
  }])
  for (const name of tests) t.equal(result![name], true, name)
  t.equal((result!.vectors as unknown[]).length, vectors.length, 'the whole-table test saw every vector')
  t.strictSame(result!.failing_vectors, [], 'and none failed')
})

t.test('data.config: the policy for a subject without an entry, as the embedded evaluator reads it', async (t) => {
  const cases = ORG_POLICY_CASES
  const results = opa.evaluate([policyModule], cases.map((c) => ({ rules: POLICY_OUTPUTS, input: REQUEST, data: c.data })))
  cases.forEach((c, i) => {
    t.strictSame(results[i], c.expected, `OPA: ${c.name}`)
    t.strictSame(embeddedDecision(REQUEST, c.data), c.expected, `embedded evaluator: ${c.name}`)
  })
})

t.test('random MCP tool policies and requests: OPA answers what the built-in evaluator answers (fast-check)', async (t) => {
  // Characters that are special to regular expressions or globs, a line break and one outside the BMP, so
  // that escaping, "*" spanning anything and code-point counting are all exercised.
  const char = fc.constantFrom('a', 'b', '.', '/', '?', '[', ']', '{', '}', '\\', '\n', '\u{1F600}')
  const name = (maxLength: number): fc.Arbitrary<string> => fc.array(char, { maxLength }).map((c) => c.join(''))
  const pattern = fc.array(fc.oneof(char, fc.constant('*')), { minLength: 1, maxLength: 7 }).map((c) => c.join(''))
  const level = fc.constantFrom<MinimumTrustCode>('', 'SS', 'DV', 'EV')
  const did = fc.constantFrom(REQUEST.subject.did, 'did:web:agents.example.com:bob')
  const rule = fc.record({ min_trust_level: level, denied_dids: fc.uniqueArray(did, { maxLength: 1 }), rpm: fc.integer({ min: 1, max: 100 }) }, { requiredKeys: [] })
  const policy: fc.Arbitrary<ResolvedPolicy> = fc.record({
    rate_limits: fc.option(fc.integer({ min: 1, max: 1000 }), { nil: undefined }),
    operations: fc.array(fc.tuple(fc.constantFrom('POST /mcp', '* /**', 'POST /MCP', 'mcp.tool.call', 'mcp.**'), rule), { maxLength: 2 }),
    mcp_tools: fc.array(fc.tuple(pattern, rule), { maxLength: 4 }),
  }).map(({ rate_limits, operations, mcp_tools }) => ({
    min_trust_level: null,
    allowed_dids: null,
    denied_dids: [],
    rate_limits: rate_limits === undefined ? [] : [{ did: REQUEST.subject.did, rpm: rate_limits }],
    operations: operations.map(([p, { rpm: _, ...r }]) => ({ pattern: p, ...r })),
    mcp_tools: mcp_tools.map(([p, r]) => ({ tool: p, ...r })),
    capability_classes: [],
  }))
  const request: fc.Arbitrary<PdpRequest> = fc.record({
    tool: name(6),
    named: fc.boolean(),
    http: fc.option(fc.constantFrom('POST /mcp', 'POST /Mcp?x=1', 'GET /'), { nil: undefined }),
    caseInsensitive: fc.boolean(),
    level: fc.constantFrom('SS' as const, 'DV' as const, 'EV' as const),
  }).map(({ tool, named, http, caseInsensitive, level }) => ({
    ...REQUEST,
    subject: { ...REQUEST.subject, trust_level: level },
    action: { operation: 'mcp.tool.call', capability_class: null, ...(named ? { mcp_tool: tool } : {}), ...(http === undefined ? {} : { http_operation: http }) },
    resource: caseInsensitive ? { identifier: tool, case_insensitive: true as const } : { identifier: tool },
  }))
  const runs = propertyRuns(200)
  const cases = fc.sample(fc.tuple(policy, request), runs)
  const results = opa.evaluate([policyModule], cases.map(([p, input]) => ({
    rules: POLICY_OUTPUTS,
    input,
    data: { resolved_policies: { by_agent_did: { [input.subject.did]: p } } },
  })))
  let mismatches = 0
  cases.forEach(([p, input], i) => {
    const { decision_id: _, ...expected } = evaluate(input, p, { decisionId: () => 'x' })
    if (mismatches < 5 && !t.strictSame(results[i], expected, `case ${i}`, { policy: p, input })) mismatches++
  })
  t.ok(results.some((r) => r.decision === 'ALLOW' && (r.obligations as unknown[]).length > 0), 'some answers carry obligations')
  t.ok(results.some((r) => r.reason === 'mcp_tool_denied_did') && results.some((r) => r.decision === 'ALLOW'), 'both outcomes occur')
})
