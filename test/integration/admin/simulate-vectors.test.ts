/**
 * Issue 4 acceptance: simulate answers the same as the built-in evaluator on the decision-vector table.
 * Each vector's policy is written as an org policy document, proposed and approved over HTTP, and the
 * vector's request is simulated for an agent of that org. Vectors whose policy the grammar refuses on
 * purpose (for example a lower-case method pattern, kept in the table for policies from other sources)
 * are named, so none is silently dropped.
 */
import t from 'tap'
import { readFileSync } from 'node:fs'
import { stringify } from 'yaml'
import type { PdpRequest, ResolvedPolicy } from '../../../src/core/policy/types.js'
import { projectPath } from '../../../src/core/paths.js'
import { createOrg, startTestAdmin } from '../../helpers/admin.js'

interface Vector {
  name: string
  policy: ResolvedPolicy
  input: PdpRequest
  expected: { decision: string; reason: string; obligations: unknown[] }
}

const vectors = JSON.parse(readFileSync(projectPath('policies', 'decision-vectors.json'), 'utf8')) as Vector[]

/** Vectors whose policy the grammar refuses (a duplicate, a lower-case method, a limit passed), in table order. */
const REFUSED_ON_PURPOSE = [
  'denied-beats-allow-list',
  'operation-method-case-insensitive',
  'operation-partial-star-is-literal',
  'specific-tie-method-case',
  'operation-pattern-over-segment-limit-denies',
  'operation-pattern-over-segment-limit-dotted-denies',
  'operation-pattern-over-limit-after-policy-wide-checks',
  'operation-pattern-two-double-stars-denies',
  'operation-pattern-nine-wildcards-denies',
  'operation-trailing-slash-pattern-not-reversed',
  'mcp-tool-pattern-later-duplicate',
  'mcp-tool-pattern-over-limit-denies',
  'mcp-tool-pattern-over-limit-after-policy-wide-checks',
  'mcp-tool-pattern-over-limit-after-operation-limit',
  'mcp-tool-pattern-over-limit-before-operation-rules',
]

/** The single-document policy whose resolution is `policy` (a lone org layer resolves to itself). */
function policyYaml(policy: ResolvedPolicy): string {
  const document: Record<string, unknown> = { version: '1' }
  if (policy.min_trust_level !== null) document.min_trust_level = policy.min_trust_level
  if (policy.allowed_dids !== null) document.allowed_dids = policy.allowed_dids
  for (const key of ['denied_dids', 'rate_limits', 'operations', 'mcp_tools', 'capability_classes'] as const) {
    if (policy[key].length > 0) document[key] = policy[key]
  }
  return stringify(document)
}

t.test('simulate agrees with the decision vectors', async (t) => {
  const admin = await startTestAdmin(t)
  const org = await createOrg(admin, 'vectors')
  const agent = (await admin.request('POST', '/v1/agents', { key: org.key, body: { name: 'subject' } })).body.data
  const base = `/v1/orgs/${org.orgId}/policy`
  const refused: string[] = []
  let compared = 0

  for (const vector of vectors) {
    const proposal = await admin.request('POST', `${base}/org`, { key: org.key, body: { yaml_content: policyYaml(vector.policy) } })
    if (proposal.status === 400 && proposal.body.error === 'invalid_policy') {
      refused.push(vector.name)
      continue
    }
    t.equal(proposal.status, 201, `${vector.name}: proposed`)
    t.equal((await admin.request('POST', `${base}/proposals/${proposal.body.id}/approve`, { key: org.key })).status, 200, `${vector.name}: approved`)
    const { subject, action, resource, context, environment } = vector.input
    const simulated = await admin.request('POST', `${base}/agents/${agent.id}/simulate`, {
      key: org.key,
      body: { subject: { did: subject.did, trust_level: subject.trust_level }, action, resource, context, environment },
    })
    t.equal(simulated.status, 200, `${vector.name}: simulated`)
    t.equal(simulated.body.decision, vector.expected.decision, `${vector.name}: decision`)
    t.equal(simulated.body.reason, vector.expected.reason, `${vector.name}: reason`)
    t.same(simulated.body.obligations, vector.expected.obligations, `${vector.name}: obligations`)
    compared++
  }
  t.same(refused, REFUSED_ON_PURPOSE, `${compared} of ${vectors.length} vectors compared; only those refused on purpose were refused`)
})
