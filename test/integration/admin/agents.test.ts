import t from 'tap'
import { createOrg, startTestAdmin } from '../../helpers/admin.js'

t.test('agent CRUD over HTTP with org isolation', async (t) => {
  const admin = await startTestAdmin(t)

  const created = await admin.request('POST', '/v1/agents', { body: { name: 'weather-bot', domain: 'weather.example.com', description: 'Forecasts' } })
  t.equal(created.status, 201)
  t.equal(created.body.success, true)
  const agent = created.body.data
  t.match(agent, { name: 'weather-bot', domain: 'weather.example.com', status: 'enabled', trustLevel: '1' })
  t.equal(agent.did, `did:web:registry.test%3A8080:agents:${agent.id}`, 'an agent without a DID gets the registry did:web')

  const read = await admin.request('GET', `/v1/agents/${agent.id}`)
  t.equal(read.status, 200)
  t.same(read.body.data, agent)

  const updated = await admin.request('PUT', `/v1/agents/${agent.id}`, { body: { did: 'did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG1GLVVQR3djdX3mDooWp', description: null } })
  t.equal(updated.status, 200)
  t.equal(updated.body.data.did, 'did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG1GLVVQR3djdX3mDooWp')
  t.equal(updated.body.data.description, null)
  t.equal(updated.body.data.name, 'weather-bot', 'fields not given stay as they were')

  const disabled = await admin.request('POST', `/v1/agents/${agent.id}/disable`)
  t.equal(disabled.body.data.status, 'disabled')
  const status = await admin.request('GET', `/v1/agents/${agent.id}/status`, { key: null })
  t.equal(status.status, 200, 'agent status is public')
  t.same(status.body.data, { id: agent.id, did: updated.body.data.did, status: 'disabled' })
  const enabled = await admin.request('POST', `/v1/agents/${agent.id}/enable`)
  t.equal(enabled.body.data.status, 'enabled')

  const other = await createOrg(admin, 'other-org')
  const foreign = await admin.request('GET', `/v1/agents/${agent.id}`, { key: other.key })
  t.equal(foreign.status, 404, 'another org cannot see the agent')
  t.equal(foreign.body.error, 'agent_not_found')
  const foreignDelete = await admin.request('DELETE', `/v1/agents/${agent.id}`, { key: other.key })
  t.equal(foreignDelete.status, 404, 'nor delete it')
  const foreignList = await admin.request('GET', '/v1/agents', { key: other.key })
  t.same(foreignList.body.data, [], 'lists show only the caller\'s agents')

  const deleted = await admin.request('DELETE', `/v1/agents/${agent.id}`)
  t.equal(deleted.status, 204)
  t.equal((await admin.request('GET', `/v1/agents/${agent.id}`)).status, 404)
})

t.test('deleting an agent archives its live agent-scope policy documents', async (t) => {
  const admin = await startTestAdmin(t)
  const agent = (await admin.request('POST', '/v1/agents', { body: { name: 'short-lived' } })).body.data
  const orgId = (await admin.database.db.query<{ org_id: string }>('SELECT org_id FROM agents WHERE id = $1', [agent.id]))[0]?.org_id as string
  const proposal = await admin.request('POST', `/v1/orgs/${orgId}/policy/agents/${agent.id}`, { body: { yaml_content: 'version: "1"\nmin_trust_level: REG\n' } })
  t.equal(proposal.status, 201)
  t.equal((await admin.request('DELETE', `/v1/agents/${agent.id}`)).status, 204)
  const states = await admin.database.db.query<{ state: string }>('SELECT state FROM policy_documents WHERE scope_id = $1', [agent.id])
  t.same(states.map((r) => r.state), ['archived'], 'the proposal is archived with the agent')
  const approve = await admin.request('POST', `/v1/orgs/${orgId}/policy/proposals/${proposal.body.id}/approve`)
  t.equal(approve.status, 400, 'and can no longer be approved')
  const proposals = await admin.request('GET', `/v1/orgs/${orgId}/policy/proposals`)
  t.same(proposals.body, [], 'nor is it listed')
})
