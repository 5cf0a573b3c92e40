/**
 * The Rego module that OPA users run (policies/service/policy.rego), evaluated by a real OPA: the
 * decision-vector table, the module's own OPA unit tests, and the data.config fallback, each compared
 * with what the gateway's embedded evaluator answers. The engine is the OPA embedded in a dev
 * dependency (see test/helpers/opa.ts); the module itself targets OPA 1.x.
 */
import { readFileSync } from 'node:fs'
import t from 'tap'
import type { ResolvedPolicy } from '../../src/core/policy/types.js'
import { projectPath } from '../../src/core/paths.js'
import { embeddedDecision, loadDecisionVectors, POLICY_OUTPUTS, type DecisionVector, type PolicyOutputs } from '../helpers/decisions.js'
import { startOpa, type RegoModule } from '../helpers/opa.js'

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

const ALICE = 'did:web:agents.example.com:alice'
const BOB = 'did:web:agents.example.com:bob'
const EMPTY_POLICY: ResolvedPolicy = {
  min_trust_level: null, allowed_dids: null, denied_dids: [], rate_limits: [], operations: [], mcp_tools: [], capability_classes: [],
}
const REQUEST = vectors[0]!.input

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
  const denyAlice = { ...EMPTY_POLICY, denied_dids: [ALICE] }
  const cases: { name: string; data: Record<string, unknown>; expected: PolicyOutputs }[] = [
    {
      name: 'no entry for the subject: the org policy applies',
      data: { config: denyAlice, resolved_policies: { by_agent_did: { [BOB]: EMPTY_POLICY } } },
      expected: { decision: 'DENY', reason: 'denied_did', obligations: [], ttl: 0 },
    },
    {
      name: 'an entry beats the org policy',
      data: { config: denyAlice, resolved_policies: { by_agent_did: { [ALICE]: EMPTY_POLICY } } },
      expected: { decision: 'ALLOW', reason: 'allowed', obligations: [], ttl: 60 },
    },
    {
      name: 'an entry that is not a policy falls back to the org policy',
      data: { config: denyAlice, resolved_policies: { by_agent_did: { [ALICE]: null } } },
      expected: { decision: 'DENY', reason: 'denied_did', obligations: [], ttl: 0 },
    },
    {
      name: 'a raw org document: absent fields are not set',
      data: { config: { version: '1', min_trust_level: 'OV' } },
      expected: { decision: 'DENY', reason: 'trust_level_below_minimum', obligations: [], ttl: 0 },
    },
    {
      name: 'a raw org document with an operation rule',
      data: { config: { version: '1', operations: [{ pattern: 'GET /v1/**', denied_dids: [ALICE] }] } },
      expected: { decision: 'DENY', reason: 'operation_denied_did', obligations: [], ttl: 0 },
    },
    {
      name: 'a raw org document with a rate limit',
      data: { config: { version: '1', rate_limits: [{ did: ALICE, rpm: 7 }] }, resolved_policies: { by_agent_did: {} } },
      expected: { decision: 'ALLOW', reason: 'allowed', obligations: [{ type: 'rate_limit.apply', params: { rpm: 7, key: ALICE } }], ttl: 60 },
    },
    {
      name: 'config null and no entry: nothing restricts',
      data: { config: null, resolved_policies: { by_agent_did: { [BOB]: denyAlice } } },
      expected: { decision: 'ALLOW', reason: 'allowed', obligations: [], ttl: 60 },
    },
    {
      name: 'config that is not an object: nothing restricts',
      data: { config: 'deny everyone' },
      expected: { decision: 'ALLOW', reason: 'allowed', obligations: [], ttl: 60 },
    },
    {
      name: 'neither config nor resolved_policies: nothing restricts',
      data: {},
      expected: { decision: 'ALLOW', reason: 'allowed', obligations: [], ttl: 60 },
    },
  ]
  const results = opa.evaluate([policyModule], cases.map((c) => ({ rules: POLICY_OUTPUTS, input: REQUEST, data: c.data })))
  cases.forEach((c, i) => {
    t.strictSame(results[i], c.expected, `OPA: ${c.name}`)
    t.strictSame(embeddedDecision(REQUEST, c.data), c.expected, `embedded evaluator: ${c.name}`)
  })
})
