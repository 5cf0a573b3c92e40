/**
 * The policy workflow with dashboard session tokens (issue 4 acceptance): an admin user proposes and
 * approves, a member reads but gets 403 on writes, a user of another organization sees nothing (404),
 * and the documents record who did what (`created_by_type` human, the user ids).
 */
import t from 'tap'
import { createOrg, startTestAdmin, type TestAdmin } from '../../helpers/admin.js'
import { expectError } from '../../helpers/expect.js'
import { startIdentityProvider, TEST_ISSUER } from '../../helpers/identity-provider.js'

async function signUp(admin: TestAdmin, userId: string, orgId: string, role: 'admin' | 'member'): Promise<void> {
  await admin.database.db.query('INSERT INTO users (id) VALUES ($1) ON CONFLICT DO NOTHING', [userId])
  await admin.database.db.query('INSERT INTO memberships (org_id, user_id, role) VALUES ($1, $2, $3)', [orgId, userId, role])
}

t.test('the full policy workflow with session tokens', async (t) => {
  const idp = await startIdentityProvider(t)
  const admin = await startTestAdmin(t, { SERVICE_AUTH_JWKS_URL: idp.jwksUrl, SERVICE_AUTH_ISSUER: TEST_ISSUER })
  const acme = await createOrg(admin, 'acme')
  const other = await createOrg(admin, 'other')
  await admin.database.db.query("UPDATE organizations SET external_id = 'org_acme' WHERE id = $1", [acme.orgId])
  await admin.database.db.query("UPDATE organizations SET external_id = 'org_other' WHERE id = $1", [other.orgId])
  await signUp(admin, 'user_ada', acme.orgId, 'admin')
  await signUp(admin, 'user_bob', acme.orgId, 'member')
  await signUp(admin, 'user_eve', other.orgId, 'admin')
  const ada = await idp.signSession({ sub: 'user_ada', org_id: 'org_acme' })
  const bob = await idp.signSession({ sub: 'user_bob', org_id: 'org_acme' })
  const eve = await idp.signSession({ sub: 'user_eve', org_id: 'org_other' })
  const base = `/v1/orgs/${acme.orgId}/policy`

  const proposal = await admin.request('POST', `${base}/org`, { key: ada, body: { yaml_content: 'version: "1"\nmin_trust_level: DV\n' } })
  t.equal(proposal.status, 201, 'an admin user proposes')
  t.equal(proposal.body.state, 'proposal')
  t.equal(proposal.body.created_by_user_id, 'user_ada')
  t.equal(proposal.body.created_by_type, 'human', 'a session principal is recorded as a human')

  expectError(t, await admin.request('POST', `${base}/proposals/${proposal.body.id}/approve`, { key: bob }), 403, 'forbidden', 'a member cannot approve')
  expectError(t, await admin.request('PUT', `${base}/org`, { key: bob, body: { yaml_content: 'version: "1"\n' } }), 403, 'forbidden', 'nor propose')
  t.equal((await admin.request('GET', `${base}/proposals`, { key: bob })).status, 200, 'but reads')

  expectError(t, await admin.request('GET', `${base}/proposals`, { key: eve }), 404, 'org_not_found', 'another org\'s admin sees nothing')
  expectError(t, await admin.request('POST', `${base}/proposals/${proposal.body.id}/approve`, { key: eve }), 404, 'org_not_found', 'and changes nothing')

  const approved = await admin.request('POST', `${base}/proposals/${proposal.body.id}/approve`, { key: ada })
  t.equal(approved.status, 200)
  t.equal(approved.body.state, 'active')
  t.equal(approved.body.approved_by_user_id, 'user_ada')
  const active = await admin.request('GET', `${base}/org`, { key: bob })
  t.equal(active.status, 200)
  t.equal(active.body.id, proposal.body.id)
  t.equal(active.body.version, 1)

  const second = await admin.request('PUT', `${base}/org`, { key: ada, body: { yaml_content: 'version: "1"\nmin_trust_level: OV\n' } })
  t.equal(second.body.version, 2)
  const rejected = await admin.request('POST', `${base}/proposals/${second.body.id}/reject`, { key: ada, body: { reason: 'too strict' } })
  t.equal(rejected.status, 200)
  t.equal(rejected.body.state, 'rejected')
  const history = await admin.request('GET', `${base}/org/history`, { key: bob })
  t.same(history.body.map((d: { state: string }) => d.state).sort(), ['active', 'rejected'])
})
