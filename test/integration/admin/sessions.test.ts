/**
 * Dashboard session tokens (docs/wire-contract.md §2, docs/api.md §5): identity-provider JWTs verified against its JWKS
 * or PEM key, mapped to the users and memberships the webhook syncs.
 */
import t from 'tap'
import { createOrg, startTestAdmin, type TestAdmin } from '../../helpers/admin.js'
import { expectError } from '../../helpers/expect.js'
import { clerkEvents, startIdentityProvider, TEST_ISSUER } from '../../helpers/identity-provider.js'

async function link(admin: TestAdmin, orgId: string, externalId: string): Promise<void> {
  await admin.database.db.query('UPDATE organizations SET external_id = $1 WHERE id = $2', [externalId, orgId])
}

async function member(admin: TestAdmin, userId: string, memberships: [orgId: string, role: 'admin' | 'member'][]): Promise<void> {
  const db = admin.database.db
  await db.query('INSERT INTO users (id, email) VALUES ($1, $2)', [userId, `${userId}@example.com`])
  for (const [orgId, role] of memberships) {
    await db.query('INSERT INTO memberships (org_id, user_id, role) VALUES ($1, $2, $3)', [orgId, userId, role])
  }
}

t.test('session tokens verified against the JWKS', async (t) => {
  const idp = await startIdentityProvider(t)
  const admin = await startTestAdmin(t, {
    SERVICE_AUTH_JWKS_URL: idp.jwksUrl,
    SERVICE_AUTH_ISSUER: TEST_ISSUER,
    CLERK_WEBHOOK_SECRET: idp.webhookSecret,
  })
  const a = await createOrg(admin, 'org-a')
  const b = await createOrg(admin, 'org-b')
  await link(admin, a.orgId, 'org_A')
  await link(admin, b.orgId, 'org_B')
  const agentA = (await admin.request('POST', '/v1/agents', { key: a.key, body: { name: 'agent-a' } })).body.data
  const agentB = (await admin.request('POST', '/v1/agents', { key: b.key, body: { name: 'agent-b' } })).body.data
  await member(admin, 'user_admin', [[a.orgId, 'admin']])
  await member(admin, 'user_member', [[a.orgId, 'member']])
  await member(admin, 'user_two', [[a.orgId, 'member'], [b.orgId, 'admin']])
  await member(admin, 'user_none', [])

  await t.test('a member sees their organization\'s agents', async (t) => {
    const token = await idp.signSession({ sub: 'user_member', org_id: 'org_A' })
    const list = await admin.request('GET', '/v1/agents', { key: token })
    t.equal(list.status, 200)
    t.same(list.body.data.map((agent: { id: string }) => agent.id), [agentA.id], 'only org A\'s agents')
    expectError(t, await admin.request('POST', '/v1/agents', { key: token, body: { name: 'nope' } }), 403, 'forbidden', 'member cannot create')
    t.equal((await admin.request('GET', `/v1/agents/${agentB.id}`, { key: token })).status, 404, 'another org\'s agent is invisible')
  })

  await t.test('an admin may write', async (t) => {
    const token = await idp.signSession({ sub: 'user_admin', org_id: 'org_A' })
    const created = await admin.request('POST', '/v1/agents', { key: token, body: { name: 'by-session' } })
    t.equal(created.status, 201)
    t.equal((await admin.request('DELETE', `/v1/agents/${created.body.data.id}`, { key: token })).status, 204)
  })

  await t.test('the active organization comes from the org claim, else the only membership', async (t) => {
    const inB = await idp.signSession({ sub: 'user_two', org_id: 'org_B' })
    const listB = await admin.request('GET', '/v1/agents', { key: inB })
    t.equal(listB.status, 200)
    t.same(listB.body.data.map((agent: { id: string }) => agent.id), [agentB.id])
    t.equal((await admin.request('POST', '/v1/agents', { key: inB, body: { name: 'two-in-b' } })).status, 201, 'admin in B')
    const v2 = await idp.signSession({ sub: 'user_two', o: { id: 'org_A', rol: 'admin' } })
    expectError(t, await admin.request('POST', '/v1/agents', { key: v2, body: { name: 'x' } }), 403, 'forbidden', 'Clerk v2 `o.id`; the role comes from the database, not the token')
    expectError(t, await admin.request('GET', '/v1/agents', { key: await idp.signSession({ sub: 'user_two' }) }), 401, 'unauthorized', 'two memberships and no org claim')
    t.equal((await admin.request('GET', '/v1/agents', { key: await idp.signSession({ sub: 'user_member' }) })).status, 200, 'single membership without org claim')
    expectError(t, await admin.request('GET', '/v1/agents', { key: await idp.signSession({ sub: 'user_member', org_id: 'org_B' }) }), 401, 'unauthorized', 'org claim of an org the user is not in')
    expectError(t, await admin.request('GET', '/v1/agents', { key: await idp.signSession({ sub: 'user_none' }) }), 401, 'unauthorized', 'user without memberships')
    expectError(t, await admin.request('GET', '/v1/agents', { key: await idp.signSession({ sub: 'user_ghost', org_id: 'org_A' }) }), 401, 'unauthorized', 'user not in the database')
  })

  await t.test('invalid tokens are refused', async (t) => {
    const now = Math.floor(Date.now() / 1000)
    const claims = { sub: 'user_admin', org_id: 'org_A' }
    const cases: [string, string][] = [
      ['expired beyond the 60 s tolerance', await idp.signSession(claims, { exp: now - 120 })],
      ['wrong issuer', await idp.signSession(claims, { issuer: 'https://evil.example' })],
      ['no issuer', await idp.signSession(claims, { issuer: null })],
      ['signed by another key', await idp.signSession(claims, { foreignKey: true })],
      ['alg none', idp.unsignedToken(claims)],
      ['HS256', await idp.signHs256(claims, new TextEncoder().encode('a-shared-secret-that-is-long-enough-for-hs256'))],
      ['no sub', await idp.signSession({ org_id: 'org_A' })],
      ['not a JWT', 'definitely-not-a-token'],
      ['truncated signature', (await idp.signSession(claims)).slice(0, -10)],
    ]
    for (const [label, token] of cases) {
      expectError(t, await admin.request('GET', '/v1/agents', { key: token }), 401, 'unauthorized', label)
    }
    const grace = await idp.signSession(claims, { exp: now - 20 })
    t.equal((await admin.request('GET', '/v1/agents', { key: grace })).status, 200, 'expired within the clock tolerance')
  })

  await t.test('API keys keep working and tokens are cached', async (t) => {
    t.equal((await admin.request('GET', '/v1/agents')).status, 200, 'operator API key')
    t.equal((await admin.request('GET', '/v1/agents', { key: a.key })).status, 200, 'org API key')
    const before = idp.jwksFetches()
    const token = await idp.signSession({ sub: 'user_admin', org_id: 'org_A' })
    for (let i = 0; i < 5; i++) t.equal((await admin.request('GET', '/v1/agents', { key: token })).status, 200)
    t.ok(before >= 1, 'the JWKS was fetched')
    t.equal(idp.jwksFetches(), before, 'no JWKS fetch per request')
  })

  await t.test('a member removed by the webhook loses access within ~6 s', async (t) => {
    const token = await idp.signSession({ sub: 'user_member', org_id: 'org_A' })
    t.equal((await admin.request('GET', '/v1/agents', { key: token })).status, 200)
    const delivery = idp.signWebhook(clerkEvents.membership('organizationMembership.deleted', 'org_A', 'user_member'))
    const hook = await admin.request('POST', '/v1/webhooks/identity', { key: null, rawBody: delivery.body, headers: delivery.headers })
    t.equal(hook.status, 200)
    // Measured from the committed change: the bound is the 5 s membership cache plus one request.
    const started = Date.now()
    let status = 200
    while (status === 200 && Date.now() - started < 8_000) {
      await new Promise((resolve) => setTimeout(resolve, 250))
      status = (await admin.request('GET', '/v1/agents', { key: token })).status
    }
    t.equal(status, 401, 'the same token is refused')
    t.ok(Date.now() - started <= 6_000, `within 6 s (took ${Date.now() - started} ms)`)
  })
})

t.test('session tokens verified with CLERK_JWT_KEY (PEM)', async (t) => {
  const idp = await startIdentityProvider(t)
  // Environment files often carry the PEM on one line with literal \n.
  const admin = await startTestAdmin(t, { CLERK_JWT_KEY: idp.publicKeyPem.trim().replace(/\n/g, '\\n') })
  const org = await createOrg(admin, 'pem-org')
  await link(admin, org.orgId, 'org_P')
  await member(admin, 'user_p', [[org.orgId, 'admin']])
  t.equal((await admin.request('GET', '/v1/agents', { key: await idp.signSession({ sub: 'user_p', org_id: 'org_P' }) })).status, 200)
  expectError(t, await admin.request('GET', '/v1/agents', { key: await idp.signSession({ sub: 'user_p' }, { foreignKey: true }) }), 401, 'unauthorized', 'another key')
  t.equal(idp.jwksFetches(), 0, 'no network with a PEM key')
})

t.test('without sign-in configuration only API keys work', async (t) => {
  const idp = await startIdentityProvider(t)
  const admin = await startTestAdmin(t)
  expectError(t, await admin.request('GET', '/v1/agents', { key: await idp.signSession({ sub: 'user_x' }) }), 401, 'unauthorized', 'session token')
  t.equal((await admin.request('GET', '/v1/agents')).status, 200)
})

t.test('an unreachable JWKS is a 503, not a sign-out', async (t) => {
  const idp = await startIdentityProvider(t)
  const admin = await startTestAdmin(t, { SERVICE_AUTH_JWKS_URL: 'http://127.0.0.1:9/jwks.json' })
  expectError(t, await admin.request('GET', '/v1/agents', { key: await idp.signSession({ sub: 'user_x' }) }), 503, 'service_unavailable', 'JWKS down')
})
