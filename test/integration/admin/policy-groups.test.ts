import t from 'tap'
import { POLICY_CHANNEL } from '../../../src/core/notify-channels.js'
import { parsePolicyYaml } from '../../../src/core/policy/grammar.js'
import { evaluate } from '../../../src/core/policy/evaluate.js'
import { resolvePolicy } from '../../../src/core/policy/merge.js'
import type { PdpRequest, PolicyLayer, ResolvedPolicy, TrustCode } from '../../../src/core/policy/types.js'
import { createOrg, startTestAdmin, type TestAdmin } from '../../helpers/admin.js'
import { expectError, sleep } from '../../helpers/expect.js'

const A = 'did:web:peers.example.com:a'
const B = 'did:web:peers.example.com:b'
const C = 'did:web:peers.example.com:c'
const X = 'did:web:peers.example.com:x'
const Y = 'did:web:peers.example.com:y'

const ORG = `version: "1"
min_trust_level: REG
allowed_dids: ["${A}", "${B}"]
denied_dids: ["${X}"]
operations:
  - pattern: agent.invoke
    min_trust_level: DV
`
const LOW = `version: "1"
min_trust_level: DV
allowed_dids: ["${B}", "${C}"]
denied_dids: ["${Y}"]
operations:
  - pattern: agent.invoke
    min_trust_level: OV
`
const HIGH = `version: "1"
min_trust_level: OV
rate_limits:
  - did: "${B}"
    rpm: 10
mcp_tools:
  - tool: "fs.*"
    rpm: 5
`
const AGENT = `version: "1"
allowed_dids: ["${A}", "${C}"]
`

async function activate(t: Tap, admin: TestAdmin, key: string, path: string, yaml: string): Promise<Record<string, any>> {
  const proposed = await admin.request('POST', path, { key, body: { yaml_content: yaml } })
  t.equal(proposed.status, 201, `proposed at ${path}`)
  const approved = await admin.request('POST', `${path.replace(/\/policy\/.*$/, '/policy')}/proposals/${proposed.body.id}/approve`, { key })
  t.equal(approved.status, 200, `approved at ${path}`)
  return approved.body
}

interface Tap {
  equal(found: unknown, wanted: unknown, message: string): boolean
}

async function snapshot(admin: TestAdmin, orgId: string): Promise<string> {
  return JSON.stringify([
    await admin.database.db.query('SELECT * FROM policy_documents WHERE org_id = $1 ORDER BY id', [orgId]),
    await admin.database.db.query('SELECT * FROM policy_groups WHERE org_id = $1 ORDER BY id', [orgId]),
    await admin.database.db.query(
      'SELECT m.* FROM policy_group_members m JOIN policy_groups g ON g.id = m.group_id WHERE g.org_id = $1 ORDER BY group_id, agent_id', [orgId]),
  ])
}

async function count(admin: TestAdmin, sql: string, orgId: string): Promise<number> {
  return Number((await admin.database.db.query<{ n: number }>(sql, [orgId]))[0]?.n ?? -1)
}

const MEMBERS_OF_ORG = 'SELECT count(*)::int AS n FROM policy_group_members m JOIN policy_groups g ON g.id = m.group_id WHERE g.org_id = $1'

// One app and database for the file (PGlite start-up is slow); every subtest works in its own org.
const admin = await startTestAdmin(t)

t.test('groups: CRUD, precedence order, duplicates, membership', async (t) => {
  const { orgId, key } = await createOrg(admin, 'groups-org')
  const other = await createOrg(admin, 'groups-other')
  const base = `/v1/orgs/${orgId}/groups`

  const notified: string[] = []
  const unlisten = await admin.database.db.listen(POLICY_CHANNEL, (payload) => notified.push(payload))
  t.teardown(unlisten)

  const ops = await admin.request('POST', base, { key, body: { name: 'ops', precedence: 20 } })
  t.equal(ops.status, 201)
  t.notOk('success' in ops.body, 'bare body')
  t.match(ops.body, { org_id: orgId, name: 'ops', precedence: 20, agent_ids: [] })
  const vip = await admin.request('POST', base, { key, body: { name: 'vip', precedence: 5 } })
  t.equal(vip.status, 201)

  const list = await admin.request('GET', base, { key })
  t.equal(list.status, 200)
  t.same(list.body.map((g: { name: string }) => g.name), ['vip', 'ops'], 'highest priority (lowest number) first')

  expectError(t, await admin.request('POST', base, { key, body: { name: 'ops', precedence: 1 } }), 409, 'group_name_taken', 'duplicate name')
  expectError(t, await admin.request('PUT', `${base}/${vip.body.id}`, { key, body: { name: 'ops' } }), 409, 'group_name_taken', 'rename onto a taken name')
  expectError(t, await admin.request('POST', base, { key, body: { name: 'x' } }), 400, 'invalid_request', 'precedence required')
  expectError(t, await admin.request('POST', base, { key, body: { name: 'x', precedence: 1.5 } }), 400, 'invalid_request', 'integer precedence')
  expectError(t, await admin.request('POST', base, { key, body: { name: 'x', precedence: 1, colour: 'red' } }), 400, 'invalid_request', 'unknown field')
  expectError(t, await admin.request('POST', base, { key, body: { name: '', precedence: 1 } }), 400, 'invalid_request', 'empty name')
  expectError(t, await admin.request('PUT', `${base}/${vip.body.id}`, { key, body: {} }), 400, 'invalid_request', 'empty update')
  t.equal(await count(admin, 'SELECT count(*)::int AS n FROM policy_groups WHERE org_id = $1', orgId), 2, 'refused creates wrote nothing')
  // the same name in another org is fine
  t.equal((await admin.request('POST', `/v1/orgs/${other.orgId}/groups`, { key: other.key, body: { name: 'ops', precedence: 1 } })).status, 201)

  const renamed = await admin.request('PUT', `${base}/${ops.body.id}`, { key, body: { name: 'operations', precedence: 1 } })
  t.equal(renamed.status, 200)
  t.match(renamed.body, { name: 'operations', precedence: 1 })
  t.same((await admin.request('GET', base, { key })).body.map((g: { name: string }) => g.name), ['operations', 'vip'], 'reordered by precedence')
  const read = await admin.request('GET', `${base}/${ops.body.id}`, { key })
  t.same(read.body, renamed.body)

  const agent = await admin.request('POST', '/v1/agents', { key, body: { name: 'member-bot' } })
  const agentId = agent.body.data.id as string
  const foreignAgent = await admin.request('POST', '/v1/agents', { key: other.key, body: { name: 'foreign-bot' } })
  const foreignId = foreignAgent.body.data.id as string
  const unknown = '00000000-0000-4000-8000-000000000000'

  t.equal((await admin.request('PUT', `${base}/${ops.body.id}/agents/${agentId}`, { key })).status, 204, 'added')
  t.equal((await admin.request('PUT', `${base}/${ops.body.id}/agents/${agentId}`, { key })).status, 204, 'adding again is idempotent')
  t.same((await admin.request('GET', `${base}/${ops.body.id}`, { key })).body.agent_ids, [agentId])
  expectError(t, await admin.request('PUT', `${base}/${ops.body.id}/agents/${foreignId}`, { key }), 404, 'agent_not_found', 'another org\'s agent')
  expectError(t, await admin.request('PUT', `${base}/${ops.body.id}/agents/${unknown}`, { key }), 404, 'agent_not_found', 'unknown agent')
  expectError(t, await admin.request('PUT', `${base}/${unknown}/agents/${agentId}`, { key }), 404, 'group_not_found', 'unknown group')
  t.equal(await count(admin, MEMBERS_OF_ORG, orgId), 1, 'refused membership changes wrote nothing')

  await sleep(100)
  t.ok(notified.includes(orgId.toLowerCase()), 'membership change notified service_policies with the org id')

  t.equal((await admin.request('DELETE', `${base}/${ops.body.id}/agents/${agentId}`, { key })).status, 204, 'removed')
  t.same((await admin.request('GET', `${base}/${ops.body.id}`, { key })).body.agent_ids, [])

  // deleting a group archives its live documents and drops memberships
  t.equal((await admin.request('PUT', `${base}/${vip.body.id}/agents/${agentId}`, { key })).status, 204)
  await activate(t, admin, key, `/v1/orgs/${orgId}/policy/groups/${vip.body.id}`, HIGH)
  t.equal((await admin.request('DELETE', `${base}/${vip.body.id}`, { key })).status, 204)
  expectError(t, await admin.request('GET', `${base}/${vip.body.id}`, { key }), 404, 'group_not_found', 'deleted group')
  expectError(t, await admin.request('DELETE', `${base}/${vip.body.id}`, { key }), 404, 'group_not_found', 'deleted twice')
  expectError(t, await admin.request('GET', `/v1/orgs/${orgId}/policy/groups/${vip.body.id}`, { key }), 404, 'group_not_found', 'policy of a deleted group')
  const states = await admin.database.db.query<{ state: string }>('SELECT state FROM policy_documents WHERE org_id = $1', [orgId])
  t.same(states.map((s) => s.state), ['archived'], 'the group document is archived')
  t.equal(await count(admin, MEMBERS_OF_ORG, orgId), 0, 'memberships of the deleted group are gone')
  t.same((await admin.request('GET', `/v1/orgs/${orgId}/policy/agents/${agentId}/lineage`, { key })).body, [], 'no longer in lineage')
})

t.test('resolution and lineage: org, two groups, agent', async (t) => {
  const { orgId, key } = await createOrg(admin, 'resolve-org')
  const policy = `/v1/orgs/${orgId}/policy`
  const agent = (await admin.request('POST', '/v1/agents', { key, body: { name: 'resolved-bot' } })).body.data
  const bystander = (await admin.request('POST', '/v1/agents', { key, body: { name: 'bystander' } })).body.data

  const empty = await admin.request('GET', `${policy}/agents/${agent.id}/resolved`, { key })
  t.equal(empty.status, 200)
  t.same(empty.body, {
    min_trust_level: null, allowed_dids: null, denied_dids: [], rate_limits: [], operations: [], mcp_tools: [], capability_classes: [],
  }, 'no policy at all: absent allow-list is null')
  t.same((await admin.request('GET', `${policy}/agents/${agent.id}/lineage`, { key })).body, [])

  // created high priority first so that creation order is not the applied order
  const high = (await admin.request('POST', `/v1/orgs/${orgId}/groups`, { key, body: { name: 'high', precedence: 5 } })).body
  const low = (await admin.request('POST', `/v1/orgs/${orgId}/groups`, { key, body: { name: 'low', precedence: 20 } })).body
  for (const group of [high, low]) {
    t.equal((await admin.request('PUT', `/v1/orgs/${orgId}/groups/${group.id}/agents/${agent.id}`, { key })).status, 204)
  }
  const orgDoc = await activate(t, admin, key, `${policy}/org`, ORG)
  const highDoc = await activate(t, admin, key, `${policy}/groups/${high.id}`, HIGH)
  const lowDoc = await activate(t, admin, key, `${policy}/groups/${low.id}`, LOW)
  const agentDoc = await activate(t, admin, key, `${policy}/agents/${agent.id}`, AGENT)
  // a pending proposal never contributes
  t.equal((await admin.request('POST', `${policy}/org`, { key, body: { yaml_content: 'version: "1"\nmin_trust_level: EV\n' } })).status, 201)

  const resolved = await admin.request('GET', `${policy}/agents/${agent.id}/resolved`, { key })
  t.equal(resolved.status, 200)
  t.same(resolved.body, {
    min_trust_level: 'OV',
    allowed_dids: [],
    denied_dids: [X, Y],
    rate_limits: [{ did: B, rpm: 10 }],
    operations: [{ pattern: 'agent.invoke', min_trust_level: 'OV' }],
    mcp_tools: [{ tool: 'fs.*', rpm: 5 }],
    capability_classes: [],
  }, 'disjoint allow-lists give [], denied lists are united, the most specific scope wins, a tool rule keeps its rpm')

  const contributing: [Record<string, any>, number | undefined][] = [[orgDoc, undefined], [lowDoc, 20], [highDoc, 5], [agentDoc, undefined]]
  const layers: PolicyLayer[] = contributing.map(([doc, precedence]) => {
    const parsed = parsePolicyYaml(doc.yaml_content)
    if (!parsed.ok) throw new Error('test fixture invalid')
    const layer: PolicyLayer = { scope_type: doc.scope_type, scope_id: doc.scope_id, document_id: doc.id, version: doc.version, document: parsed.document }
    if (precedence !== undefined) layer.precedence = precedence
    return layer
  })
  t.same(resolved.body, resolvePolicy(layers).resolved, 'identical to resolvePolicy over the active documents')

  const lineage = await admin.request('GET', `${policy}/agents/${agent.id}/lineage`, { key })
  t.equal(lineage.status, 200)
  t.same(lineage.body.map((d: { id: string }) => d.id), [orgDoc.id, lowDoc.id, highDoc.id, agentDoc.id], 'org, lower-priority group, higher-priority group, agent')
  t.same(lineage.body.map((d: { scope_type: string; scope_id: string }) => [d.scope_type, d.scope_id]),
    [['org', orgId], ['group', low.id], ['group', high.id], ['agent', agent.id]], 'scope attribution')
  t.same(lineage.body.map((d: { precedence?: number }) => d.precedence), [undefined, 20, 5, undefined], 'precedence on group entries')
  t.match(lineage.body[0], { state: 'active', yaml_content: ORG, version: 1 }, 'full documents')

  // swapping precedences swaps the applied order of the groups
  t.equal((await admin.request('PUT', `/v1/orgs/${orgId}/groups/${high.id}`, { key, body: { precedence: 50 } })).status, 200)
  const swapped = await admin.request('GET', `${policy}/agents/${agent.id}/lineage`, { key })
  t.same(swapped.body.map((d: { id: string }) => d.id), [orgDoc.id, highDoc.id, lowDoc.id, agentDoc.id])
  t.equal((await admin.request('GET', `${policy}/agents/${agent.id}/resolved`, { key })).body.min_trust_level, 'DV', 'now the low group is the most specific minimum')

  const bystanderResolved = await admin.request('GET', `${policy}/agents/${bystander.id}/resolved`, { key })
  t.same(bystanderResolved.body.allowed_dids, [A, B], 'an agent in no group gets the org policy only')
  t.same((await admin.request('GET', `${policy}/agents/${bystander.id}/lineage`, { key })).body.map((d: { id: string }) => d.id), [orgDoc.id])

  const unknown = '00000000-0000-4000-8000-000000000000'
  expectError(t, await admin.request('GET', `${policy}/agents/${unknown}/resolved`, { key }), 404, 'agent_not_found', 'unknown agent resolved')
  expectError(t, await admin.request('GET', `${policy}/agents/${unknown}/lineage`, { key }), 404, 'agent_not_found', 'unknown agent lineage')
  expectError(t, await admin.request('GET', `${policy}/agents/${unknown}`, { key }), 404, 'agent_not_found', 'unknown agent scope')
  expectError(t, await admin.request('POST', `${policy}/groups/${unknown}`, { key, body: { yaml_content: HIGH } }), 404, 'group_not_found', 'unknown group scope')
})

t.test('simulate: built-in evaluator, defaults, proposal_id, no side effects', async (t) => {
  const { orgId, key } = await createOrg(admin, 'simulate-org')
  const policy = `/v1/orgs/${orgId}/policy`
  const agent = (await admin.request('POST', '/v1/agents', { key, body: { name: 'sim-bot' } })).body.data
  await activate(t, admin, key, `${policy}/org`, ORG)
  const resolved = (await admin.request('GET', `${policy}/agents/${agent.id}/resolved`, { key })).body as ResolvedPolicy

  const request = (did: string, level: TrustCode, operation: string): PdpRequest => ({
    pip_version: 'service.pip.v1',
    subject: { did, badge_jti: '', ial: '', trust_level: level },
    action: { operation, capability_class: null },
    resource: { identifier: '' },
    context: { txn_id: 't', enforcement_mode: 'EM-OBSERVE' },
    environment: { pep_id: 'simulate', time: new Date().toISOString() },
  })
  const cases: [string, { subject?: { did?: string; trust_level?: TrustCode }; action: { operation: string } }, PdpRequest, string][] = [
    ['defaults: the agent did:web is not allow-listed', { action: { operation: 'other.op' } }, request(agent.did, 'REG', 'other.op'), 'DENY'],
    ['allow-listed DID at REG', { subject: { did: A }, action: { operation: 'other.op' } }, request(A, 'REG', 'other.op'), 'ALLOW'],
    ['operation rule needs DV', { subject: { did: A }, action: { operation: 'agent.invoke' } }, request(A, 'REG', 'agent.invoke'), 'DENY'],
    ['explicit EV passes the operation rule', { subject: { did: A, trust_level: 'EV' }, action: { operation: 'agent.invoke' } }, request(A, 'EV', 'agent.invoke'), 'ALLOW'],
    ['denied DID', { subject: { did: X, trust_level: 'EV' }, action: { operation: 'other.op' } }, request(X, 'EV', 'other.op'), 'DENY'],
  ]
  const before = await snapshot(admin, orgId)
  for (const [label, body, pdp, decision] of cases) {
    const res = await admin.request('POST', `${policy}/agents/${agent.id}/simulate`, { key, body })
    t.equal(res.status, 200, `${label}: 200`)
    const expected = evaluate(pdp, resolved, { decisionId: () => res.body.decision_id })
    t.same(res.body, expected, `${label}: same decision as evaluate`)
    t.equal(res.body.decision, decision, `${label}: ${decision}`)
  }

  t.equal(await snapshot(admin, orgId), before, 'simulations wrote nothing')

  // with a pending proposal that denies A, the decision changes; nothing is written
  const proposal = await admin.request('PUT', `${policy}/org`, { key, body: { yaml_content: `version: "1"\ndenied_dids: ["${A}"]\n` } })
  t.equal(proposal.status, 201)
  const withProposal = await snapshot(admin, orgId)
  const body = { subject: { did: A }, action: { operation: 'other.op' } }
  const now = await admin.request('POST', `${policy}/agents/${agent.id}/simulate`, { key, body })
  t.equal(now.body.decision, 'ALLOW', 'active policy allows A')
  const ifApproved = await admin.request('POST', `${policy}/agents/${agent.id}/simulate`, { key, body: { ...body, proposal_id: proposal.body.id } })
  t.equal(ifApproved.status, 200)
  t.match(ifApproved.body, { decision: 'DENY', reason: 'denied_did' }, 'as if the proposal replaced the org policy')
  t.equal(await snapshot(admin, orgId), withProposal, 'simulation wrote nothing')
  t.equal((await admin.request('GET', `${policy}/org`, { key })).body.version, 1, 'the active policy is unchanged')
  t.equal((await admin.request('GET', `${policy}/proposals`, { key })).body[0].state, 'proposal')
  // an agent-scope proposal for another agent does not affect this one
  const otherAgent = (await admin.request('POST', '/v1/agents', { key, body: { name: 'other-bot' } })).body.data
  const foreignScope = await admin.request('POST', `${policy}/agents/${otherAgent.id}`, { key, body: { yaml_content: `version: "1"\ndenied_dids: ["${A}"]\n` } })
  const unaffected = await admin.request('POST', `${policy}/agents/${agent.id}/simulate`, { key, body: { ...body, proposal_id: foreignScope.body.id } })
  t.equal(unaffected.body.decision, 'ALLOW', 'a proposal for another agent\'s scope does not apply')

  const unknown = '00000000-0000-4000-8000-000000000000'
  const beforeErrors = await snapshot(admin, orgId)
  expectError(t, await admin.request('POST', `${policy}/agents/${unknown}/simulate`, { key, body }), 400, 'simulate_agent_unknown', 'unknown agent')
  expectError(t, await admin.request('POST', `${policy}/agents/${agent.id}/simulate`, { key, body: { ...body, proposal_id: unknown } }), 404, 'proposal_not_found', 'unknown proposal')
  const activeId = (await admin.request('GET', `${policy}/org`, { key })).body.id
  expectError(t, await admin.request('POST', `${policy}/agents/${agent.id}/simulate`, { key, body: { ...body, proposal_id: activeId } }), 400, 'proposal_not_pending', 'an active document is not a proposal')
  expectError(t, await admin.request('POST', `${policy}/agents/${agent.id}/simulate`, { key, body: { subject: { did: A } } }), 400, 'invalid_request', 'action is required')
  expectError(t, await admin.request('POST', `${policy}/agents/${agent.id}/simulate`, { key, body: { ...body, extra: true } }), 400, 'invalid_request', 'unknown top-level field')
  expectError(t, await admin.request('POST', `${policy}/agents/${agent.id}/simulate`, { key, body: { ...body, subject: { trust_level: 'ZZ' } } }), 400, 'invalid_request', 'unknown trust level')
  t.equal(await snapshot(admin, orgId), beforeErrors, 'refused simulations wrote nothing')
})
