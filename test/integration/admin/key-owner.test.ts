/**
 * Credentials follow their owner: an API key acts for the dashboard user who created it (or, for a key
 * created by a key, the user at the start of the chain). When the identity provider's webhook removes
 * the membership, downgrades the role, deletes the user or deletes the organization, the key is capped
 * or stops working at once on every instance (NOTIFY), the key row records why, and the log says so.
 */
import t from 'tap'
import { startTestAdmin, type TestAdmin, type TestResponse } from '../../helpers/admin.js'
import { createTestDatabase } from '../../helpers/database.js'
import { expectError, sleep } from '../../helpers/expect.js'
import { clerkEvents, startIdentityProvider, TEST_ISSUER, type IdentityProvider } from '../../helpers/identity-provider.js'
import { generateApiKeySecret, hashApiKeySecret } from '../../../src/core/api-key.js'
import { loadMigrations, migrate } from '../../../src/db/migrate.js'

async function webhook(admin: TestAdmin, idp: IdentityProvider, event: unknown): Promise<void> {
  const delivery = idp.signWebhook(event)
  const res = await admin.request('POST', '/v1/webhooks/identity', { key: null, rawBody: delivery.body, headers: delivery.headers })
  if (res.status !== 200) throw new Error(`webhook ${res.status} ${res.text}`)
}

interface Owner {
  orgId: string
  /** Created with the user's session token. */
  key: string
  keyId: string
  /** Created with `key`: acts for the same user. */
  childKey: string
  childKeyId: string
}

/** A synced user, admin of a synced org, who creates a key with a session token and a child key with it. */
async function ownerWithKeys(admin: TestAdmin, idp: IdentityProvider, userId: string, externalOrg: string): Promise<Owner> {
  await webhook(admin, idp, clerkEvents.user('user.created', userId, `${userId}@example.com`, 'Pat', 'Doe'))
  await webhook(admin, idp, clerkEvents.organization('organization.created', externalOrg, `Org ${externalOrg}`))
  await webhook(admin, idp, clerkEvents.membership('organizationMembership.created', externalOrg, userId, 'org:admin'))
  const session = await idp.signSession({ sub: userId, org_id: externalOrg })
  const created = await admin.request('POST', '/v1/keys', { key: session, body: { name: 'made by a person' } })
  if (created.status !== 201) throw new Error(`key creation ${created.status} ${created.text}`)
  const child = await admin.request('POST', '/v1/keys', { key: created.body.data.key, body: { name: 'made by a key' } })
  if (child.status !== 201) throw new Error(`child key creation ${child.status} ${child.text}`)
  const [org] = await admin.database.db.query<{ id: string }>('SELECT id FROM organizations WHERE external_id = $1', [externalOrg])
  return { orgId: org?.id as string, key: created.body.data.key, keyId: created.body.data.id, childKey: child.body.data.key, childKeyId: child.body.data.id }
}

async function keyRow(admin: TestAdmin, id: string): Promise<{ revoke_reason: string | null; revoked: boolean; created_by_type: string; created_by_key_id: string | null; created_by_user_id: string | null }> {
  const rows = await admin.database.db.query<{ revoke_reason: string | null; revoked: boolean; created_by_type: string; created_by_key_id: string | null; created_by_user_id: string | null }>(
    'SELECT revoke_reason, revoked_at IS NOT NULL AS revoked, created_by_type, created_by_key_id, created_by_user_id FROM api_keys WHERE id = $1', [id])
  return rows[0] as never
}

function listKeys(admin: TestAdmin, key: string): Promise<TestResponse> {
  return admin.request('GET', '/v1/keys', { key })
}

function auditLines(admin: TestAdmin, keyId: string): Record<string, unknown>[] {
  return admin.logs.filter((line) => line.includes(keyId)).map((line) => JSON.parse(line) as Record<string, unknown>)
}

t.test('keys made by a dashboard user follow the user', async (t) => {
  const idp = await startIdentityProvider(t)
  const env = { CLERK_WEBHOOK_SECRET: idp.webhookSecret, SERVICE_AUTH_JWKS_URL: idp.jwksUrl, SERVICE_AUTH_ISSUER: TEST_ISSUER }
  const admin = await startTestAdmin(t, env)
  // A second instance on the same database: it hears about changed keys only through NOTIFY.
  const peer = await startTestAdmin(t, { ...env, SERVICE_BOOTSTRAP_API_KEY: admin.operatorKey }, { database: admin.database })

  await t.test('creation records who made the key', async (t) => {
    const owner = await ownerWithKeys(admin, idp, 'user_rec', 'org_rec')
    t.match(await keyRow(admin, owner.keyId), { created_by_type: 'user', created_by_user_id: 'user_rec', created_by_key_id: null, revoked: false })
    t.match(await keyRow(admin, owner.childKeyId), { created_by_type: 'key', created_by_user_id: 'user_rec', created_by_key_id: owner.keyId, revoked: false },
      'a key made by a key acts for the user at the start of the chain')
    const listed = (await listKeys(admin, owner.key)).body.data as Record<string, unknown>[]
    t.match(listed.find((k) => k.id === owner.childKeyId), { createdByType: 'key', createdByUserId: 'user_rec', createdByKeyId: owner.keyId, revokedAt: null, revokeReason: null })
  })

  await t.test('role downgraded admin → member: the keys act as members', async (t) => {
    const owner = await ownerWithKeys(admin, idp, 'user_down', 'org_down')
    // Warm both instances' caches with the admin principal.
    t.equal((await admin.request('POST', '/v1/keys', { key: owner.key, body: { name: 'still admin', role: 'admin' } })).status, 201)
    t.equal((await peer.request('POST', '/v1/keys', { key: owner.childKey, body: { name: 'still admin', role: 'admin' } })).status, 201)

    await webhook(admin, idp, clerkEvents.membership('organizationMembership.updated', 'org_down', 'user_down', 'org:member'))
    expectError(t, await admin.request('POST', '/v1/keys', { key: owner.key, body: { name: 'x', role: 'admin' } }), 403, 'role_not_allowed', 'an admin key of a member cannot mint admin keys')
    expectError(t, await admin.request('DELETE', `/v1/keys/${owner.childKeyId}`, { key: owner.key }), 403, 'forbidden', 'nor delete keys (admin action)')
    t.equal((await listKeys(admin, owner.key)).status, 200, 'member actions still work')
    t.match(await keyRow(admin, owner.keyId), { revoked: false, revoke_reason: null }, 'a downgrade caps, it does not revoke')

    // The peer instance learns through NOTIFY, well inside the 5 s cache lifetime.
    let status = 0
    const started = Date.now()
    while (Date.now() - started < 4000) {
      status = (await peer.request('POST', '/v1/keys', { key: owner.childKey, body: { name: 'x', role: 'admin' } })).status
      if (status === 403) break
      await sleep(50)
    }
    t.equal(status, 403, 'the other instance caps the key too')
    t.ok(Date.now() - started < 2000, `…within ${Date.now() - started} ms (cache lifetime 5000 ms)`)
    t.ok(auditLines(admin, owner.keyId).some((l) => l.msg === 'api key access changed' && l.reason === 'creator_role_changed'), 'the change is logged with the key id')

    await webhook(admin, idp, clerkEvents.membership('organizationMembership.updated', 'org_down', 'user_down', 'org:admin'))
    t.equal((await admin.request('POST', '/v1/keys', { key: owner.key, body: { name: 'admin again', role: 'admin' } })).status, 201, 'an upgrade back restores the key\'s own role')
  })

  const revocations: [string, (owner: Owner, userId: string, externalOrg: string) => unknown, string][] = [
    ['membership deleted', (_o, user, org) => clerkEvents.membership('organizationMembership.deleted', org, user), 'membership_removed'],
    ['user deleted', (_o, user) => clerkEvents.userDeleted(user), 'creator_deleted'],
    ['organization deleted', (_o, _user, org) => clerkEvents.organizationDeleted(org), 'organization_unlinked'],
  ]
  for (const [name, event, reason] of revocations) {
    await t.test(`${name}: the keys stop working and say why`, async (t) => {
      const suffix = reason.split('_')[0] as string
      const owner = await ownerWithKeys(admin, idp, `user_${suffix}`, `org_${suffix}`)
      // A bystander in the same org keeps working.
      await webhook(admin, idp, clerkEvents.membership('organizationMembership.created', `org_${suffix}`, `user_${suffix}_other`, 'org:admin'))
      const bystanderSession = await idp.signSession({ sub: `user_${suffix}_other`, org_id: `org_${suffix}` })
      const bystander = (await admin.request('POST', '/v1/keys', { key: bystanderSession, body: { name: 'bystander' } })).body.data
      t.equal((await listKeys(admin, owner.key)).status, 200)
      t.equal((await listKeys(peer, owner.childKey)).status, 200, 'the peer has the child key cached')

      await webhook(admin, idp, event(owner, `user_${suffix}`, `org_${suffix}`))
      for (const [label, key] of [['the key', owner.key], ['the child key', owner.childKey]]) {
        const res = await listKeys(admin, key as string)
        expectError(t, res, 401, 'api_key_revoked', `${name}: ${label}`)
        t.match(res.body.message, reason, `${label}: the message names the reason`)
      }
      let status = 0
      const started = Date.now()
      while (Date.now() - started < 4000) {
        status = (await listKeys(peer, owner.childKey)).status
        if (status === 401) break
        await sleep(50)
      }
      t.equal(status, 401, 'the other instance refuses it too')
      t.ok(Date.now() - started < 2000, `…within ${Date.now() - started} ms (cache lifetime 5000 ms)`)

      for (const id of [owner.keyId, owner.childKeyId]) {
        t.match(await keyRow(admin, id), { revoked: true, revoke_reason: reason }, `${name}: the key row records the reason`)
        t.ok(auditLines(admin, id).some((l) => l.msg === 'api key access changed' && l.reason === reason && l.keyId === id), 'the webhook logs the key id and reason')
        t.ok(auditLines(admin, id).some((l) => l.msg === 'api key refused' && l.reason === reason), 'the refusal is logged too')
      }
      const bystanderUse = await listKeys(admin, bystander.key)
      if (reason === 'organization_unlinked') {
        expectError(t, bystanderUse, 401, 'api_key_revoked', 'an unlinked org: every member key stops')
      } else {
        t.equal(bystanderUse.status, 200, 'another member\'s key is untouched')
      }
      // Re-adding the user does not revive revoked keys: they mint new ones.
      if (reason !== 'organization_unlinked') {
        await webhook(admin, idp, clerkEvents.user('user.created', `user_${suffix}`, 'back@example.com', 'Pat', 'Doe'))
        await webhook(admin, idp, clerkEvents.membership('organizationMembership.created', `org_${suffix}`, `user_${suffix}`, 'org:admin'))
        expectError(t, await listKeys(admin, owner.key), 401, 'api_key_revoked', `${name}: stays revoked after the user is back`)
      }
      t.ok(admin.logs.every((line) => !line.includes(owner.key) && !line.includes(owner.childKey)), 'no secret in the log')
    })
  }

  await t.test('operator and bootstrap keys are bound to no user of the identity provider', async (t) => {
    const operatorRow = await admin.database.db.query<{ created_by_type: string }>('SELECT created_by_type FROM api_keys WHERE key_hash = $1', [hashApiKeySecret(admin.operatorKey)])
    t.same(operatorRow, [{ created_by_type: 'bootstrap' }])
    const org = await admin.request('POST', '/v1/orgs', { body: { name: 'made by the operator' } })
    const initial = await keyRow(admin, org.body.data.apiKey.id)
    t.equal(initial.created_by_type, 'operator', 'an org\'s first key is recorded as made by the operator')
    t.ok(initial.created_by_key_id !== null, 'with the operator key that asked for it')
    // Even if every membership of the default org went away, the operator key keeps working.
    await admin.database.db.query("DELETE FROM memberships WHERE org_id = (SELECT id FROM organizations WHERE name = 'default')")
    t.equal((await listKeys(admin, admin.operatorKey)).status, 200)
  })

  t.ok(admin.logs.every((line) => !/"status":5\d\d/.test(line)), 'no 5xx')
})

t.test('migration 006: existing keys with no recorded creator are revoked, the rest follow their creator', async (t) => {
  const database = await createTestDatabase(t, { migrate: false })
  const db = database.db
  await migrate(db, loadMigrations().slice(0, 5))
  const org = '11111111-1111-4111-8111-111111111111'
  await db.query("INSERT INTO organizations (id, name) VALUES ($1, 'legacy')", [org])
  await db.query("INSERT INTO users (id) VALUES ('user_kept'), ('user_gone')")
  await db.query("INSERT INTO memberships (org_id, user_id, role) VALUES ($1, 'user_kept', 'member'), ($1, 'user_gone', 'admin')", [org])
  const secrets = { kept: generateApiKeySecret(), orphan: generateApiKeySecret(), operator: generateApiKeySecret() }
  const insert = (id: string, secret: string, creator: string | null, operator: boolean): Promise<unknown> => db.query(
    `INSERT INTO api_keys (id, org_id, name, key_hash, key_prefix, role, is_operator, created_by_user_id)
     VALUES ($1, $2, 'legacy', $3, 'sk_legacy', 'admin', $4, $5)`, [id, org, hashApiKeySecret(secret), operator, creator])
  await insert('00000000-0000-4000-8000-000000000001', secrets.kept, 'user_kept', false)
  await insert('00000000-0000-4000-8000-000000000002', secrets.orphan, 'user_gone', false)
  await insert('00000000-0000-4000-8000-000000000003', secrets.operator, null, true)
  // Under the old foreign key, deleting the creator erased the link: the bug this issue is about.
  await db.query("DELETE FROM users WHERE id = 'user_gone'")
  t.same(await db.query("SELECT created_by_user_id FROM api_keys WHERE id = '00000000-0000-4000-8000-000000000002'"), [{ created_by_user_id: null }])

  t.same(await migrate(db, loadMigrations().slice(0, 6)), [6], 'migration 006 applies')
  await migrate(db)
  t.same(await db.query('SELECT id, created_by_type, revoke_reason, revoked_at IS NOT NULL AS revoked FROM api_keys ORDER BY id'), [
    { id: '00000000-0000-4000-8000-000000000001', created_by_type: 'legacy', revoke_reason: null, revoked: false },
    { id: '00000000-0000-4000-8000-000000000002', created_by_type: 'legacy', revoke_reason: 'creator_unknown', revoked: true },
    { id: '00000000-0000-4000-8000-000000000003', created_by_type: 'operator', revoke_reason: null, revoked: false },
  ])

  const admin = await startTestAdmin(t, {}, { database })
  const kept = await admin.request('POST', '/v1/keys', { key: secrets.kept, body: { name: 'x', role: 'admin' } })
  expectError(t, kept, 403, 'role_not_allowed', 'a legacy admin key of a member user acts as a member')
  t.equal((await listKeys(admin, secrets.kept)).status, 200, 'and works for member actions')
  const orphan = await listKeys(admin, secrets.orphan)
  expectError(t, orphan, 401, 'api_key_revoked', 'a key whose creator is unknown')
  t.match(orphan.body.message, /creator_unknown/)
  t.equal((await listKeys(admin, secrets.operator)).status, 200, 'an operator key with no creator keeps working')
  // From now on a deleted creator keeps its id on the key, so the key is refused as creator_deleted.
  await db.query("DELETE FROM users WHERE id = 'user_kept'")
  await sleep(0)
  const res = await admin.request('GET', '/v1/keys', { key: secrets.kept })
  t.ok(res.status === 200 || res.status === 401, 'within the cache lifetime the key may still be cached')
  await sleep(5100)
  const later = await listKeys(admin, secrets.kept)
  expectError(t, later, 401, 'api_key_revoked', 'after the cache lifetime a key of a deleted creator is refused even without a webhook')
  t.match(later.body.message, /creator_deleted/)
})
