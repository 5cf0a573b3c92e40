/**
 * SDK policy context and policy bundles (docs/api.md §2.11, §4.7, §5 rule 3; docs/wire-contract.md §8, §13), on the
 * backend SERVICE_TEST_DB selects.
 */
import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import t from 'tap'
import { createOrg, startTestAdmin, type TestAdmin, type TestResponse } from '../../helpers/admin.js'
import { BACKEND } from '../../helpers/database.js'
import { expectError } from '../../helpers/expect.js'
import { projectPath } from '../../../src/core/paths.js'

const ORG_YAML = 'version: "1"\nmin_trust_level: REG\ndenied_dids: ["did:web:bad.example.com"]\n'
const ORG_YAML_V2 = 'version: "1"\nmin_trust_level: DV\n'
const GROUP_YAML = 'version: "1"\noperations:\n  - pattern: "orders.*"\n    min_trust_level: OV\n'
const AGENT_YAML = 'version: "1"\nallowed_dids: ["did:web:partner.example.com"]\n'
const REGO = readFileSync(projectPath('policies', 'service', 'policy.rego'), 'utf8')

// A large poll interval: any revision change seen within the test must have come through NOTIFY.
const admin = await startTestAdmin(t, { SERVICE_BUNDLE_POLL_INTERVAL: '1h' })

/** A request carrying the key in X-Service-Registry-Key only (the helper would add a bearer). */
function registry(key: string, method: string, url: string, headers: Record<string, string> = {}): Promise<TestResponse> {
  return admin.request(method, url, { key: null, headers: { 'x-service-registry-key': key, ...headers } })
}

async function raw(key: string, url: string, headers: Record<string, string> = {}): Promise<{ status: number; headers: Headers; bytes: Buffer }> {
  const res = await fetch(`${admin.url}${url}`, { headers: { 'x-service-registry-key': key, ...headers } })
  return { status: res.status, headers: res.headers, bytes: Buffer.from(await res.arrayBuffer()) }
}

async function activate(a: TestAdmin, key: string, url: string, yaml: string): Promise<string> {
  const proposal = await a.request('POST', url, { key, body: { yaml_content: yaml } })
  if (proposal.status !== 201) throw new Error(`proposal failed: ${proposal.status} ${proposal.text}`)
  const approved = await a.request('POST', `${url.replace(/\/policy\/.*$/, '/policy')}/proposals/${proposal.body.id}/approve`, { key })
  if (approved.status !== 200) throw new Error(`approval failed: ${approved.status} ${approved.text}`)
  return proposal.body.id as string
}

function canonical(value: unknown): string {
  return JSON.stringify(value, (_k, v: unknown) => (v === null || typeof v !== 'object' || Array.isArray(v)
    ? v
    : Object.fromEntries(Object.keys(v).sort().map((k) => [k, (v as Record<string, unknown>)[k]]))))
}

interface World {
  orgId: string
  key: string
  agents: { id: string; did: string }[]
  groupId: string
  orgDocId: string
  pendingId: string
}

// One org with two agents (one with an explicit DID and a raised trust level), a group holding one of
// them, active org/group/agent policies and one pending proposal.
async function world(name: string): Promise<World> {
  const { orgId, key } = await createOrg(admin, name)
  const a1 = (await admin.request('POST', '/v1/agents', { key, body: { name: 'alpha' } })).body.data
  // explicit DIDs are unique across the registry, so each world gets its own
  const betaDid = `did:web:${name}.example.com`
  const a2 = (await admin.request('POST', '/v1/agents', { key, body: { name: 'beta', did: betaDid } })).body.data
  await admin.database.db.query('UPDATE agents SET trust_level = 3 WHERE id = $1', [a2.id])
  const group = await admin.request('POST', `/v1/orgs/${orgId}/groups`, { key, body: { name: 'orders', precedence: 10 } })
  if (group.status !== 201) throw new Error(group.text)
  await admin.request('PUT', `/v1/orgs/${orgId}/groups/${group.body.id}/agents/${a1.id}`, { key })
  const policy = `/v1/orgs/${orgId}/policy`
  const orgDocId = await activate(admin, key, `${policy}/org`, ORG_YAML)
  await activate(admin, key, `${policy}/groups/${group.body.id}`, GROUP_YAML)
  await activate(admin, key, `${policy}/agents/${a1.id}`, AGENT_YAML)
  const pending = await admin.request('POST', `${policy}/agents/${a2.id}`, { key, body: { yaml_content: AGENT_YAML } })
  return {
    orgId, key,
    agents: [
      { id: a1.id, did: `did:web:${admin.config.registryDidHost}:agents:${a1.id}` },
      { id: a2.id, did: betaDid },
    ],
    groupId: group.body.id, orgDocId, pendingId: pending.body.id,
  }
}

t.test(`SDK policy context (${BACKEND})`, async (t) => {
  const w = await world('sdk-context')
  const res = await registry(w.key, 'GET', '/v1/sdk/policy-context')
  t.equal(res.status, 200)
  t.notOk('success' in res.body, 'bare body')
  t.equal(res.body.org_id, w.orgId)
  t.same(res.body.agents, [
    { id: w.agents[0]!.id, name: 'alpha', did: w.agents[0]!.did, trust_level: 'REG', group_ids: [w.groupId] },
    { id: w.agents[1]!.id, name: 'beta', did: w.agents[1]!.did, trust_level: 'OV', group_ids: [] },
  ])
  t.same(res.body.groups, [{ id: w.groupId, name: 'orders', precedence: 10 }])
  t.equal(res.body.active_policies.length, 3, 'org, group and agent documents')
  t.same(res.body.active_policies[0], { id: w.orgDocId, scope_type: 'org', scope_id: w.orgId, version: 1, yaml_content: ORG_YAML })
  t.same(res.body.active_policies.map((p: { scope_type: string }) => p.scope_type), ['org', 'group', 'agent'])
  t.equal(res.body.pending_proposals.length, 1)
  t.match(res.body.pending_proposals[0], { id: w.pendingId, state: 'proposal', scope_type: 'agent', scope_id: w.agents[1]!.id, yaml_content: AGENT_YAML })

  // docs/api.md §5 rule 3: the registry key header only
  expectError(t, await admin.request('GET', '/v1/sdk/policy-context', { key: w.key }), 401, 'unauthorized', 'bearer only')
  expectError(t, await admin.request('GET', '/v1/sdk/policy-context', { key: null }), 401, 'unauthorized', 'no credentials')
  expectError(t, await registry('sk_not-a-real-key-at-all-000000000000000000', 'GET', '/v1/sdk/policy-context'), 401, 'unauthorized', 'unknown key')
  const both = await admin.request('GET', '/v1/sdk/policy-context', { key: w.key, headers: { 'x-service-registry-key': w.key } })
  t.equal(both.status, 200, 'the same key in both headers still carries the registry header')
})

t.test(`bundle: JSON form, caching headers, tenancy (${BACKEND})`, async (t) => {
  const w = await world('bundle-json')
  const url = `/v1/bundles/${w.orgId}`
  const res = await registry(w.key, 'GET', url)
  t.equal(res.status, 200)
  t.match(res.headers.get('content-type') ?? '', /^application\/json/)
  t.same(Object.keys(res.body).sort(), ['data', 'modules', 'revision'])
  t.same(res.body.modules, { 'service/policy.rego': REGO }, 'the Rego module text')
  t.match(res.body.revision, /^[0-9a-f]{64}$/)
  t.equal(res.body.revision, createHash('sha256').update(canonical({ modules: res.body.modules, data: res.body.data })).digest('hex'), 'revision = sha256 of canonical {modules, data}')
  t.equal(res.headers.get('etag'), `"${res.body.revision}"`, 'quoted ETag')
  t.equal(res.headers.get('cache-control'), 'no-cache')

  const orgPolicy = await admin.request('GET', `/v1/orgs/${w.orgId}/policy/org`, { key: w.key })
  t.equal(orgPolicy.body.id, w.orgDocId)
  t.same(res.body.data.config, { min_trust_level: 'REG', allowed_dids: null, denied_dids: ['did:web:bad.example.com'], rate_limits: [], operations: [], mcp_tools: [], capability_classes: [] }, 'config is the org policy alone')
  t.same(Object.keys(res.body.data.resolved_policies.by_agent_did).sort(), w.agents.map((a) => a.did).sort())
  for (const agent of w.agents) {
    const resolved = await admin.request('GET', `/v1/orgs/${w.orgId}/policy/agents/${agent.id}/resolved`, { key: w.key })
    const lineage = await admin.request('GET', `/v1/orgs/${w.orgId}/policy/agents/${agent.id}/lineage`, { key: w.key })
    t.same(res.body.data.resolved_policies.by_agent_did[agent.did], resolved.body, `resolved policy of ${agent.did}`)
    t.same(res.body.data.policy_lineage.by_agent_did[agent.did], lineage.body, `lineage of ${agent.did}`)
  }
  t.same(res.body.data.agents[w.agents[0]!.did], { id: w.agents[0]!.id, name: 'alpha', trust_level: 'REG', group_ids: [w.groupId] })
  t.same(res.body.data.agents[w.agents[1]!.did], { id: w.agents[1]!.id, name: 'beta', trust_level: 'OV', group_ids: [] })

  const again = await registry(w.key, 'GET', url)
  t.equal(again.text, res.text, 'identical bytes on repeat')
  t.equal(again.headers.get('etag'), res.headers.get('etag'))

  const cached = await registry(w.key, 'GET', url, { 'if-none-match': `"${res.body.revision}"` })
  t.equal(cached.status, 304)
  t.equal(cached.text, '', 'empty body')
  t.equal(cached.headers.get('etag'), `"${res.body.revision}"`)
  const stale = await registry(w.key, 'GET', url, { 'if-none-match': '"0000"' })
  t.equal(stale.status, 200, 'another tag gets the bundle')

  // docs/api.md §5 rule 3 and tenancy (docs/wire-contract.md §2)
  expectError(t, await admin.request('GET', url, { key: w.key }), 401, 'unauthorized', 'bearer only')
  const other = await createOrg(admin, 'bundle-other')
  const foreign = await registry(other.key, 'GET', url)
  expectError(t, foreign, 404, 'org_not_found', "another org's workspace")
  t.notOk(foreign.text.includes(w.agents[0]!.id) || foreign.text.includes('policy'), 'no contents leak')
  expectError(t, await registry(w.key, 'GET', '/v1/bundles/not-a-uuid'), 400, 'invalid_id', 'malformed workspace')
  expectError(t, await admin.request('GET', '/v1/bundles/not-a-uuid', { key: w.key }), 401, 'unauthorized', 'bearer only beats a bad id')
})

t.test(`bundle: a newly approved policy changes the revision through NOTIFY (${BACKEND})`, async (t) => {
  const w = await world('bundle-notify')
  const url = `/v1/bundles/${w.orgId}`
  const before = await registry(w.key, 'GET', url)
  t.equal(before.status, 200)
  t.equal((await registry(w.key, 'GET', url)).body.revision, before.body.revision, 'stable')
  // A write that announces nothing stays invisible until the poll interval: proof that the bundle is
  // served from the cache, so the change below can only have come through NOTIFY.
  await admin.database.db.query("UPDATE agents SET name = 'renamed' WHERE id = $1", [w.agents[0]!.id])
  const cached = await registry(w.key, 'GET', url)
  t.equal(cached.text, before.text, 'served from the cache')

  await activate(admin, w.key, `/v1/orgs/${w.orgId}/policy/org`, ORG_YAML_V2)
  let after = before
  for (let i = 0; i < 50 && after.body.revision === before.body.revision; i++) {
    await new Promise((resolve) => setTimeout(resolve, 100))
    after = await registry(w.key, 'GET', url)
  }
  t.not(after.body.revision, before.body.revision, 'revision changed within 5 s (poll interval is 1 h)')
  t.equal(after.body.data.config.min_trust_level, 'DV', 'the new org policy is in the bundle')
  t.equal(after.body.data.agents[w.agents[0]!.did].name, 'renamed', 'the rebuild also picked up the unannounced rename')
  t.equal(after.headers.get('etag'), `"${after.body.revision}"`)
  t.equal((await registry(w.key, 'GET', url, { 'if-none-match': `"${before.body.revision}"` })).status, 200, 'the old ETag no longer matches')
})

t.test(`bundle: agent changes made over the API reach the bundle through NOTIFY (${BACKEND})`, async (t) => {
  const w = await world('bundle-agents')
  const url = `/v1/bundles/${w.orgId}`
  const before = await registry(w.key, 'GET', url)
  const waitForChange = async (revision: string): Promise<TestResponse> => {
    let current = await registry(w.key, 'GET', url)
    for (let i = 0; i < 50 && current.body.revision === revision; i++) {
      await new Promise((resolve) => setTimeout(resolve, 100))
      current = await registry(w.key, 'GET', url)
    }
    return current
  }
  const created = (await admin.request('POST', '/v1/agents', { key: w.key, body: { name: 'gamma' } })).body.data
  const gammaDid = `did:web:${admin.config.registryDidHost}:agents:${created.id}`
  const afterCreate = await waitForChange(before.body.revision)
  t.ok(afterCreate.body.data.agents[gammaDid], 'a created agent appears within 5 s (poll interval is 1 h)')
  await admin.request('PUT', `/v1/agents/${w.agents[0]!.id}`, { key: w.key, body: { name: 'alpha-2' } })
  const afterUpdate = await waitForChange(afterCreate.body.revision)
  t.equal(afterUpdate.body.data.agents[w.agents[0]!.did].name, 'alpha-2', 'an update too')
  await admin.request('DELETE', `/v1/agents/${created.id}`, { key: w.key })
  const afterDelete = await waitForChange(afterUpdate.body.revision)
  t.notOk(afterDelete.body.data.agents[gammaDid], 'and a deletion')

  const alpha = w.agents[0]!
  await admin.request('POST', `/v1/agents/${alpha.id}/disable`, { key: w.key })
  const afterDisable = await waitForChange(afterDelete.body.revision)
  t.ok(afterDisable.body.data.resolved_policies.by_agent_did[alpha.did].denied_dids.includes(alpha.did), 'a disabled agent is denied by its own resolved policy')
  t.same(afterDisable.body.data.resolved_policies.by_agent_did[w.agents[1]!.did], afterDelete.body.data.resolved_policies.by_agent_did[w.agents[1]!.did], 'no other agent\'s')
  await admin.request('POST', `/v1/agents/${alpha.id}/enable`, { key: w.key })
  const afterEnable = await waitForChange(afterDisable.body.revision)
  t.same(afterEnable.body.data.resolved_policies.by_agent_did[alpha.did], afterDelete.body.data.resolved_policies.by_agent_did[alpha.did], 'enabled again: its policy as before')
  t.equal(afterEnable.body.revision, afterDelete.body.revision, 'and the revision as before')
})

t.test(`bundle: OPA tarball (${BACKEND})`, async (t) => {
  const w = await world('bundle-tarball')
  const url = `/v1/bundles/${w.orgId}`
  const json = await registry(w.key, 'GET', url)
  const first = await raw(w.key, url, { accept: 'application/gzip' })
  t.equal(first.status, 200)
  t.equal(first.headers.get('content-type'), 'application/gzip')
  t.equal(first.headers.get('etag'), `"${json.body.revision}"`, 'same ETag as the JSON form')
  const second = await raw(w.key, url, { accept: 'application/vnd.openpolicyagent.bundle' })
  t.ok(first.bytes.equals(second.bytes), 'byte-identical on repeat')
  t.equal((await raw(w.key, url, { accept: 'application/gzip', 'if-none-match': `"${json.body.revision}"` })).status, 304)

  const dir = mkdtempSync(path.join(tmpdir(), 'bundle-test-'))
  const file = path.join(dir, 'bundle.tar.gz')
  writeFileSync(file, first.bytes)
  const names = execFileSync('tar', ['-tzf', file], { encoding: 'utf8' }).split('\n').filter((n) => n !== '').sort()
  t.same(names, ['.manifest', 'data.json', 'service/policy.rego'])
  const manifest = JSON.parse(execFileSync('tar', ['-xzf', file, '-O', '.manifest'], { encoding: 'utf8' }))
  t.same(manifest, { revision: json.body.revision, roots: ['service', 'config', 'resolved_policies', 'policy_lineage', 'agents'] })
  t.same(JSON.parse(execFileSync('tar', ['-xzf', file, '-O', 'data.json'], { encoding: 'utf8' })), json.body.data, 'data.json is the data object')
  t.equal(execFileSync('tar', ['-xzf', file, '-O', 'service/policy.rego'], { encoding: 'utf8' }), REGO)

  const bearer = await fetch(`${admin.url}${url}`, { headers: { authorization: `Bearer ${w.key}`, accept: 'application/gzip' } })
  t.equal(bearer.status, 401, 'bearer only is refused for the tarball too')
})
