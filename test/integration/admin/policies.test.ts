import t from 'tap'
import { createOrg, startTestAdmin, type TestAdmin } from '../../helpers/admin.js'
import { BACKEND } from '../../helpers/database.js'
import { expectError } from '../../helpers/expect.js'

const ORG_YAML = 'version: "1"\nmin_trust_level: REG\n'
const ORG_YAML_V2 = 'version: "1"\nmin_trust_level: DV\ndenied_dids: ["did:web:bad.example.com"]\n'

async function policyRows(admin: TestAdmin, orgId: string): Promise<{ id: string; state: string; version: number }[]> {
  return admin.database.db.query('SELECT id, state, version FROM policy_documents WHERE org_id = $1 ORDER BY created_at, id', [orgId])
}

async function documents(admin: TestAdmin, orgId: string): Promise<string> {
  return JSON.stringify(await admin.database.db.query('SELECT * FROM policy_documents WHERE org_id = $1 ORDER BY id', [orgId]))
}

// One app and database for the file (PGlite start-up is slow); every subtest works in its own org.
const admin = await startTestAdmin(t)

async function memberKey(admin: TestAdmin, adminKey: string): Promise<string> {
  const res = await admin.request('POST', '/v1/keys', { key: adminKey, body: { name: 'reader', role: 'member' } })
  if (res.status !== 201) throw new Error(`member key creation failed: ${res.status} ${res.text}`)
  return res.body.data.key as string
}

t.test('org policy workflow: propose, approve, supersede, history', async (t) => {
  const { orgId, key } = await createOrg(admin, 'policy-org')
  const base = `/v1/orgs/${orgId}/policy`

  expectError(t, await admin.request('GET', `${base}/org`, { key }), 404, 'policy_not_found', 'no active org policy yet')

  const first = await admin.request('POST', `${base}/org`, { key, body: { yaml_content: ORG_YAML } })
  t.equal(first.status, 201, 'proposal created')
  t.notOk('success' in first.body, 'bare body, no envelope')
  t.match(first.body, {
    org_id: orgId, scope_type: 'org', scope_id: orgId, state: 'proposal', version: 1, yaml_content: ORG_YAML,
    schema_version: '1', created_by_type: 'api_key', approved_by_user_id: null, rejection_reason: null,
  })
  t.match(first.body.content_hash, /^sha256:[0-9a-f]{64}$/)

  const proposals = await admin.request('GET', `${base}/proposals`, { key })
  t.equal(proposals.status, 200)
  t.same(proposals.body.map((d: { id: string }) => d.id), [first.body.id], 'listed as pending')

  const approved = await admin.request('POST', `${base}/proposals/${first.body.id}/approve`, { key })
  t.equal(approved.status, 200)
  t.match(approved.body, { id: first.body.id, state: 'active', version: 1 })
  const active = await admin.request('GET', `${base}/org`, { key })
  t.equal(active.status, 200)
  t.same(active.body, approved.body, 'GET answers the active document')
  t.same((await admin.request('GET', `${base}/proposals`, { key })).body, [], 'no longer pending')

  const second = await admin.request('PUT', `${base}/org`, { key, body: { yaml_content: ORG_YAML_V2 } })
  t.equal(second.status, 201, 'PUT files a new proposal')
  t.match(second.body, { state: 'proposal', version: 2 })
  t.equal((await admin.request('GET', `${base}/org`, { key })).body.id, first.body.id, 'the old version stays active until approval')

  const approved2 = await admin.request('POST', `${base}/proposals/${second.body.id}/approve`, { key })
  t.equal(approved2.status, 200)
  t.match(approved2.body, { state: 'active', version: 2 })

  const history = await admin.request('GET', `${base}/org/history`, { key })
  t.equal(history.status, 200)
  t.same(history.body.map((d: { version: number; state: string }) => [d.version, d.state]), [[2, 'active'], [1, 'superseded']], 'newest first')

  // a rejected proposal is in the history, and version numbering continues from the active one
  const third = await admin.request('POST', `${base}/org`, { key, body: { yaml_content: ORG_YAML } })
  t.equal(third.body.version, 3)
  const rejected = await admin.request('POST', `${base}/proposals/${third.body.id}/reject`, { key, body: { reason: 'too lax' } })
  t.equal(rejected.status, 200)
  t.match(rejected.body, { state: 'rejected', rejection_reason: 'too lax' })
  const history2 = await admin.request('GET', `${base}/org/history`, { key })
  t.same(history2.body.map((d: { state: string }) => d.state), ['rejected', 'active', 'superseded'])
  t.equal((await admin.request('GET', `${base}/org`, { key })).body.version, 2, 'rejection leaves the active one')

  expectError(t, await admin.request('POST', `${base}/proposals/${third.body.id}/approve`, { key }), 400, 'proposal_not_pending', 'approving a rejected proposal')
  expectError(t, await admin.request('POST', `${base}/proposals/${third.body.id}/reject`, { key, body: { reason: 'again' } }), 400, 'proposal_not_pending', 'rejecting a rejected proposal')
  expectError(t, await admin.request('POST', `${base}/proposals/${first.body.id}/reject`, { key, body: { reason: 'x' } }), 400, 'proposal_not_pending', 'rejecting a superseded document')
  expectError(t, await admin.request('POST', `${base}/proposals/${second.body.id}/approve`, { key }), 400, 'proposal_not_pending', 'approving the active document')
  const unknown = '00000000-0000-4000-8000-000000000000'
  expectError(t, await admin.request('POST', `${base}/proposals/${unknown}/approve`, { key }), 404, 'proposal_not_found', 'unknown proposal')
  expectError(t, await admin.request('POST', `${base}/proposals/${unknown}/reject`, { key, body: { reason: 'x' } }), 404, 'proposal_not_found', 'unknown proposal on reject')

  const rows = await policyRows(admin, orgId)
  t.same(rows.map((r) => r.state), ['superseded', 'active', 'rejected'], 'failed actions changed nothing')

  const operatorRow = await admin.request('GET', '/v1/orgs/' + orgId + '/policy/org')
  expectError(t, operatorRow, 404, 'org_not_found', 'the operator of another org is not a member')
})

t.test('reject needs a reason; bad proposals are 400 and write nothing', async (t) => {
  const { orgId, key } = await createOrg(admin, 'validation-org')
  const base = `/v1/orgs/${orgId}/policy`
  const proposal = await admin.request('POST', `${base}/org`, { key, body: { yaml_content: ORG_YAML } })
  t.equal(proposal.status, 201)
  const before = await documents(admin, orgId)

  expectError(t, await admin.request('POST', `${base}/proposals/${proposal.body.id}/reject`, { key }), 400, 'invalid_request', 'reject without body')
  expectError(t, await admin.request('POST', `${base}/proposals/${proposal.body.id}/reject`, { key, body: {} }), 400, 'invalid_request', 'reject without reason')
  expectError(t, await admin.request('POST', `${base}/proposals/${proposal.body.id}/reject`, { key, body: { reason: '' } }), 400, 'invalid_request', 'empty reason')
  expectError(t, await admin.request('POST', `${base}/proposals/${proposal.body.id}/reject`, { key, body: { reason: '   ' } }), 400, 'invalid_request', 'blank reason')
  expectError(t, await admin.request('POST', `${base}/proposals/${proposal.body.id}/reject`, { key, body: { reason: 'x', extra: 1 } }), 400, 'invalid_request', 'unknown field on reject')

  const invalidYaml = await admin.request('POST', `${base}/org`, { key, body: { yaml_content: 'version: "1"\nmin_trust_level: [unclosed\n' } })
  expectError(t, invalidYaml, 400, 'invalid_policy', 'invalid YAML')
  t.ok(Array.isArray(invalidYaml.body.errors) && invalidYaml.body.errors.length > 0, 'issues listed')

  const badValues = await admin.request('PUT', `${base}/org`, { key, body: { yaml_content: 'version: "1"\nmin_trust_level: ZZ\nallowed_dids: ["not-a-did"]\n' } })
  expectError(t, badValues, 400, 'invalid_policy', 'failed validation')
  t.ok(badValues.body.errors.length >= 2, 'every problem is reported')
  for (const issue of badValues.body.errors) {
    t.ok(typeof issue.code === 'string' && typeof issue.path === 'string' && typeof issue.message === 'string', 'issue has code, path, message')
  }

  const bomb = ['version: "1"', 'a: &a ["x","x","x","x","x","x","x","x","x"]', 'b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]',
    'c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]', 'd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]', 'e: [*d,*d,*d,*d,*d,*d,*d,*d,*d]'].join('\n')
  expectError(t, await admin.request('POST', `${base}/org`, { key, body: { yaml_content: bomb } }), 400, 'invalid_policy', 'alias bomb')
  const unknownKey = await admin.request('POST', `${base}/org`, { key, body: { yaml_content: 'version: "1"\nsurprise: true\n' } })
  expectError(t, unknownKey, 400, 'invalid_policy', 'unknown YAML key')
  t.ok(unknownKey.body.errors.some((e: { path: string }) => e.path.includes('surprise')), 'the unknown key is named')

  expectError(t, await admin.request('POST', `${base}/org`, { key, body: { yaml_content: '' } }), 400, 'invalid_request', 'empty yaml_content')
  expectError(t, await admin.request('POST', `${base}/org`, { key, body: { yaml_content: '  \n ' } }), 400, 'invalid_policy', 'blank yaml_content')
  expectError(t, await admin.request('POST', `${base}/org`, { key, body: {} }), 400, 'invalid_request', 'missing yaml_content')
  expectError(t, await admin.request('POST', `${base}/org`, { key, body: { yaml_content: 5 } }), 400, 'invalid_request', 'non-string yaml_content')
  expectError(t, await admin.request('POST', `${base}/org`, { key, body: { yaml_content: ORG_YAML, state: 'active' } }), 400, 'invalid_request', 'unknown body field')
  expectError(t, await admin.request('GET', `/v1/orgs/not-a-uuid/policy/org`, { key }), 400, 'invalid_id', 'malformed org id')
  expectError(t, await admin.request('POST', `${base}/proposals/not-a-uuid/approve`, { key }), 400, 'invalid_id', 'malformed proposal id')

  const after = await documents(admin, orgId)
  t.equal(after, before, 'no row was written or changed by any rejected request')
})

t.test('concurrent approvals of one proposal: exactly one wins', async (t) => {
  const { orgId, key } = await createOrg(admin, 'race-org')
  const base = `/v1/orgs/${orgId}/policy`
  const old = await admin.request('POST', `${base}/org`, { key, body: { yaml_content: ORG_YAML } })
  t.equal((await admin.request('POST', `${base}/proposals/${old.body.id}/approve`, { key })).status, 200)
  const proposal = await admin.request('PUT', `${base}/org`, { key, body: { yaml_content: ORG_YAML_V2 } })

  const results = await Promise.all(Array.from({ length: 10 }, () => admin.request('POST', `${base}/proposals/${proposal.body.id}/approve`, { key })))
  const statuses = results.map((r) => r.status)
  t.equal(statuses.filter((s) => s === 200).length, 1, `exactly one 200 (${BACKEND})`)
  t.equal(statuses.filter((s) => s === 400).length, 9, 'the other nine are 400')
  for (const loser of results.filter((r) => r.status === 400)) t.equal(loser.body.error, 'proposal_not_pending')
  const rows = await policyRows(admin, orgId)
  t.same(rows.map((r) => [r.version, r.state]), [[1, 'superseded'], [2, 'active']], 'one active document, the old one superseded')

  // two different proposals of one scope approved together: still one active document
  const a = await admin.request('POST', `${base}/org`, { key, body: { yaml_content: ORG_YAML } })
  const b = await admin.request('POST', `${base}/org`, { key, body: { yaml_content: ORG_YAML_V2 } })
  const pair = await Promise.all([a, b].map((p) => admin.request('POST', `${base}/proposals/${p.body.id}/approve`, { key })))
  t.same(pair.map((r) => r.status), [200, 200], 'both are proposals, so both approvals succeed in turn')
  const active = await admin.database.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM policy_documents WHERE state = 'active' AND org_id = $1`, [orgId])
  t.equal(Number(active[0]?.n), 1, 'never two active documents in one scope')
})

t.test('authorization: member reads only, another org sees nothing', async (t) => {
  const { orgId, key } = await createOrg(admin, 'owner-org')
  const other = await createOrg(admin, 'outsider-org')
  const reader = await memberKey(admin, key)
  const base = `/v1/orgs/${orgId}`

  const agent = await admin.request('POST', '/v1/agents', { key, body: { name: 'bot' } })
  const agentId = agent.body.data.id as string
  const group = await admin.request('POST', `${base}/groups`, { key, body: { name: 'ops', precedence: 10 } })
  t.equal(group.status, 201)
  const groupId = group.body.id as string
  const proposal = await admin.request('POST', `${base}/policy/org`, { key, body: { yaml_content: ORG_YAML } })
  const approved = await admin.request('POST', `${base}/policy/proposals/${proposal.body.id}/approve`, { key })
  t.equal(approved.status, 200)
  const pending = await admin.request('POST', `${base}/policy/agents/${agentId}`, { key, body: { yaml_content: ORG_YAML_V2 } })
  t.equal(pending.status, 201)

  const yaml = { yaml_content: ORG_YAML }
  const writes: [string, string, unknown][] = [
    ['POST', `${base}/policy/org`, yaml],
    ['PUT', `${base}/policy/org`, yaml],
    ['POST', `${base}/policy/groups/${groupId}`, yaml],
    ['PUT', `${base}/policy/agents/${agentId}`, yaml],
    ['POST', `${base}/policy/proposals/${pending.body.id}/approve`, undefined],
    ['POST', `${base}/policy/proposals/${pending.body.id}/reject`, { reason: 'no' }],
    ['POST', `${base}/groups`, { name: 'new', precedence: 1 }],
    ['PUT', `${base}/groups/${groupId}`, { precedence: 1 }],
    ['DELETE', `${base}/groups/${groupId}`, undefined],
    ['PUT', `${base}/groups/${groupId}/agents/${agentId}`, undefined],
    ['DELETE', `${base}/groups/${groupId}/agents/${agentId}`, undefined],
  ]
  const reads: [string, string, unknown][] = [
    ['GET', `${base}/policy/org`, undefined],
    ['GET', `${base}/policy/org/history`, undefined],
    ['GET', `${base}/policy/proposals`, undefined],
    ['GET', `${base}/policy/agents/${agentId}/history`, undefined],
    ['GET', `${base}/policy/agents/${agentId}/resolved`, undefined],
    ['GET', `${base}/policy/agents/${agentId}/lineage`, undefined],
    ['POST', `${base}/policy/agents/${agentId}/simulate`, { action: { operation: 'agent.invoke' } }],
    ['GET', `${base}/groups`, undefined],
    ['GET', `${base}/groups/${groupId}`, undefined],
    ['GET', `${base}/policy/groups/${groupId}/history`, undefined],
  ]
  const snapshot = async (): Promise<string> => JSON.stringify([
    await admin.database.db.query('SELECT * FROM policy_documents WHERE org_id = $1 ORDER BY id', [orgId]),
    await admin.database.db.query('SELECT * FROM policy_groups WHERE org_id = $1 ORDER BY id', [orgId]),
    await admin.database.db.query(
      'SELECT m.* FROM policy_group_members m JOIN policy_groups g ON g.id = m.group_id WHERE g.org_id = $1 ORDER BY group_id, agent_id', [orgId]),
  ])
  const before = await snapshot()
  for (const [method, path, body] of writes) {
    expectError(t, await admin.request(method, path, { key: reader, body }), 403, 'forbidden', `member ${method} ${path}`)
  }
  for (const [method, path, body] of reads) {
    const res = await admin.request(method, path, { key: reader, body })
    t.equal(res.status, 200, `member may ${method} ${path}`)
  }
  for (const [method, path, body] of [...writes, ...reads]) {
    const res = await admin.request(method, path, { key: other.key, body })
    expectError(t, res, 404, 'org_not_found', `other org ${method} ${path}`)
    t.notOk(res.text.includes(ORG_YAML.trim().split('\n')[1] as string), 'no contents leak')
  }
  // even with an invalid body, the outsider learns nothing beyond 404
  expectError(t, await admin.request('POST', `${base}/policy/org`, { key: other.key, body: { nope: 1 } }), 404, 'org_not_found', 'outsider with bad body')
  t.equal(await snapshot(), before, 'nothing was written by refused requests')

  // the outsider's own org is unaffected and empty
  const own = await admin.request('GET', `/v1/orgs/${other.orgId}/policy/proposals`, { key: other.key })
  t.same(own.body, [], 'the outsider sees only its own (empty) org')
})
