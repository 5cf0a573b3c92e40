/**
 * The Rego module that OPA users run (policies/service/policy.rego), evaluated by a real OPA: the
 * decision-vector table, the module's own OPA unit tests, and the data.config fallback, each compared
 * with what the gateway's embedded evaluator answers. The engine is the OPA embedded in a dev
 * dependency (see test/helpers/opa.ts); the module itself targets OPA 1.x.
 */
import { readFileSync } from 'node:fs'
import t from 'tap'
import { projectPath } from '../../src/core/paths.js'
import { embeddedDecision, loadDecisionVectors, POLICY_OUTPUTS, type DecisionVector, type PolicyOutputs } from '../helpers/decisions.js'
import { startOpa, type RegoModule } from '../helpers/opa.js'
import { ORG_POLICY_CASES, orgPolicyRequest } from '../helpers/contracts/decision-point.js'

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
