/**
 * The A2A part of bench/gateway.ts: the upstream agent answers every request id and never throws, and the
 * bench policy passes the grammar and, under the built-in evaluator, allows the benchmarked message/send and
 * denies the tasks/cancel of the enforcement check (so the pre-measurement checks and the policy cannot drift).
 */
import fc from 'fast-check'
import t from 'tap'
import { A2A_PATH, a2aPolicy, answerA2a, messageSendBody } from '../../../bench/a2a.js'
import { classifyA2a } from '../../../src/core/a2a-methods.js'
import { evaluate } from '../../../src/core/policy/evaluate.js'
import { parsePolicyYaml } from '../../../src/core/policy/grammar.js'
import { resolvePolicy } from '../../../src/core/policy/merge.js'
import { messagePdpAction } from '../../../src/core/policy/pdp-action.js'
import type { PdpRequest, TrustCode } from '../../../src/core/policy/types.js'
import { parseStrictJson } from '../../../src/core/strict-json.js'
import { propertyRuns } from '../../helpers/property-runs.js'

const DID = 'did:web:a2a.bench.example.com'
const id = fc.oneof(fc.string({ maxLength: 40 }), fc.maxSafeInteger(), fc.integer({ min: Number.MIN_SAFE_INTEGER, max: 0 }))

t.test('the upstream answers message/send with a completed task for the request id', async (t) => {
  fc.assert(fc.property(id, (requestId) => {
    const answer = answerA2a(Buffer.from(messageSendBody(requestId)))
    const body = JSON.parse(answer.body) as { id: unknown; result: { kind: string; status: { state: string } } }
    return answer.status === 200 && body.id === requestId && body.result.kind === 'task' && body.result.status.state === 'completed'
  }), propertyRuns(200))
  t.pass('every id answered with the completed task')
})

t.test('the upstream answers anything else with an A2A error, and never throws', async (t) => {
  const errorOf = (text: string): number => (JSON.parse(answerA2a(Buffer.from(text)).body) as { error: { code: number } }).error.code
  t.equal(errorOf('{'), -32700)
  t.equal(errorOf('[]'), -32600)
  t.equal(errorOf('{"jsonrpc":"2.0","method":"message/send"}'), -32600, 'no id')
  t.equal(errorOf('{"jsonrpc":"2.0","id":1,"method":"tasks/cancel","params":{"id":"t"}}'), -32002, 'a cancel that got through is told apart')
  t.equal(errorOf('{"jsonrpc":"2.0","id":1,"method":"tasks/get"}'), -32601)
  fc.assert(fc.property(fc.uint8Array({ maxLength: 200 }), (bytes) => JSON.parse(answerA2a(Buffer.from(bytes)).body) !== undefined), propertyRuns(500))
})

t.test('the bench policy allows the bench agent its message/send and denies tasks/cancel', async (t) => {
  const parsed = parsePolicyYaml(a2aPolicy(DID))
  if (!parsed.ok) throw new Error(JSON.stringify(parsed.issues))
  const policy = resolvePolicy([{ scope_type: 'org', scope_id: 'org-1', document_id: 'doc-1', version: 1, document: parsed.document }]).resolved
  // The question the gateway asks: the call classified as the A2A stage does, the action built as decide.ts does.
  const ask = (body: string, did: string, level: TrustCode): PdpRequest => {
    const call = classifyA2a({ httpMethod: 'POST', path: A2A_PATH, versionHeader: undefined, body: parseStrictJson(Buffer.from(body)) })
    return {
      pip_version: 'service.pip.v1',
      subject: { did, badge_jti: 'jti-1', ial: '0', trust_level: level },
      action: messagePdpAction(call.operation, `POST ${A2A_PATH}`, { skill: call.skill }),
      resource: { identifier: call.taskId ?? call.contextId ?? A2A_PATH },
      context: { txn_id: 'txn-1', enforcement_mode: 'EM-GUARD' },
      environment: { pep_id: 'pep-1', time: '2026-03-01T12:00:00Z' },
    }
  }
  const cancel = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tasks/cancel', params: { id: 'task-0001' } })
  for (const level of ['REG', 'DV', 'OV', 'EV'] as const) {
    t.equal(evaluate(ask(messageSendBody(1), DID, level), policy).decision, 'ALLOW', `message/send at ${level}`)
    t.equal(evaluate(ask(cancel, DID, level), policy).decision, 'DENY', `tasks/cancel at ${level}`)
  }
  t.equal(evaluate(ask(messageSendBody(1), 'did:web:partner.example.com', 'EV'), policy).decision, 'DENY', 'the send is the bench agent\'s only')
})
