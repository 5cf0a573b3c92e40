/**
 * The identity provider's user-sync webhook (docs/wire-contract.md §2): Svix-signed Clerk events keep users,
 * organizations and memberships in step; bad signatures, stale timestamps and replays change nothing.
 */
import t from 'tap'
import { startTestAdmin, type TestAdmin, type TestResponse } from '../../helpers/admin.js'
import { expectError } from '../../helpers/expect.js'
import { clerkEvents, startIdentityProvider, type WebhookDelivery } from '../../helpers/identity-provider.js'

const PATH = '/v1/webhooks/identity'

function deliver(admin: TestAdmin, delivery: WebhookDelivery, headers: Record<string, string> = delivery.headers): Promise<TestResponse> {
  return admin.request('POST', PATH, { key: null, rawBody: delivery.body, headers })
}

async function snapshot(admin: TestAdmin): Promise<unknown> {
  const db = admin.database.db
  return {
    users: await db.query('SELECT id, email, display_name FROM users ORDER BY id'),
    orgs: await db.query('SELECT id, name, external_id FROM organizations ORDER BY id'),
    memberships: await db.query('SELECT org_id, user_id, role FROM memberships ORDER BY org_id, user_id'),
    deliveries: await db.query('SELECT svix_id FROM webhook_deliveries ORDER BY svix_id'),
  }
}

t.test('user, organization and membership events', async (t) => {
  const idp = await startIdentityProvider(t)
  const admin = await startTestAdmin(t, { CLERK_WEBHOOK_SECRET: idp.webhookSecret })
  const db = admin.database.db
  const send = (payload: unknown) => deliver(admin, idp.signWebhook(payload))

  const created = await send(clerkEvents.user('user.created', 'user_1', 'ada@example.com', 'Ada', 'Lovelace'))
  t.equal(created.status, 200)
  t.same(created.body, { received: true })
  t.same(await db.query('SELECT id, email, display_name, is_operator FROM users WHERE id = $1', ['user_1']),
    [{ id: 'user_1', email: 'ada@example.com', display_name: 'Ada Lovelace', is_operator: false }], 'user created with the primary address')

  t.equal((await send(clerkEvents.user('user.updated', 'user_1', 'ada@new.example', 'Ada', 'King'))).status, 200)
  t.same(await db.query('SELECT email, display_name FROM users WHERE id = $1', ['user_1']),
    [{ email: 'ada@new.example', display_name: 'Ada King' }], 'user updated')

  t.equal((await send(clerkEvents.organization('organization.created', 'org_1', 'Acme'))).status, 200)
  const [org] = await db.query<{ id: string; name: string }>('SELECT id, name FROM organizations WHERE external_id = $1', ['org_1'])
  t.ok(org !== undefined && /^[0-9a-f-]{36}$/.test(org.id), 'organization created with a new UUID')
  t.equal(org?.name, 'Acme')
  t.equal((await send(clerkEvents.organization('organization.updated', 'org_1', 'Acme Corp'))).status, 200)
  t.same(await db.query('SELECT id, name FROM organizations WHERE external_id = $1', ['org_1']), [{ id: org?.id, name: 'Acme Corp' }], 'renamed in place')

  t.equal((await send(clerkEvents.membership('organizationMembership.created', 'org_1', 'user_1', 'org:admin'))).status, 200)
  t.same(await db.query('SELECT role FROM memberships WHERE org_id = $1 AND user_id = $2', [org?.id, 'user_1']), [{ role: 'admin' }], 'org:admin → admin')
  t.equal((await send(clerkEvents.membership('organizationMembership.updated', 'org_1', 'user_1', 'org:member'))).status, 200)
  t.same(await db.query('SELECT role FROM memberships WHERE org_id = $1 AND user_id = $2', [org?.id, 'user_1']), [{ role: 'member' }], 'org:member → member')
  t.equal((await send(clerkEvents.membership('organizationMembership.updated', 'org_1', 'user_1', 'org:billing_manager'))).status, 200)
  t.same(await db.query('SELECT role FROM memberships WHERE org_id = $1 AND user_id = $2', [org?.id, 'user_1']), [{ role: 'member' }], 'custom roles → member')

  // A membership for a user and an organization not seen yet creates both.
  t.equal((await send(clerkEvents.membership('organizationMembership.created', 'org_2', 'user_2', 'admin', 'Beta'))).status, 200)
  t.same(await db.query(
    `SELECT u.id AS user_id, u.display_name, o.name, m.role FROM memberships m JOIN users u ON u.id = m.user_id
     JOIN organizations o ON o.id = m.org_id WHERE o.external_id = $1`, ['org_2']),
  [{ user_id: 'user_2', display_name: 'Pat Doe', name: 'Beta', role: 'admin' }], 'user and org created from the membership')
  // A later membership event does not rename the organization (its embedded name may be older).
  t.equal((await send(clerkEvents.membership('organizationMembership.created', 'org_2', 'user_1', 'org:member', 'Old name'))).status, 200)
  t.same(await db.query('SELECT name FROM organizations WHERE external_id = $1', ['org_2']), [{ name: 'Beta' }])

  t.equal((await send(clerkEvents.membership('organizationMembership.deleted', 'org_1', 'user_1'))).status, 200)
  t.same(await db.query('SELECT * FROM memberships WHERE org_id = $1', [org?.id]), [], 'membership deleted')
  t.equal((await send(clerkEvents.membership('organizationMembership.deleted', 'org_unknown', 'user_1'))).status, 200, 'deleting an unknown membership is a no-op')

  // user_1 is still a member of org_2: deleting the user cascades to that membership.
  t.equal((await send(clerkEvents.userDeleted('user_1'))).status, 200)
  t.same(await db.query('SELECT id FROM users WHERE id = $1', ['user_1']), [], 'user deleted')
  t.same(await db.query('SELECT user_id FROM memberships WHERE user_id = $1', ['user_1']), [], 'their memberships cascade')

  // organization.deleted unlinks the tenant and drops its memberships, but keeps its data.
  const [org2] = await db.query<{ id: string }>('SELECT id FROM organizations WHERE external_id = $1', ['org_2'])
  await db.query("INSERT INTO agents (id, org_id, name) VALUES ('00000000-0000-4000-8000-000000000001', $1, 'kept')", [org2?.id])
  t.equal((await send(clerkEvents.organizationDeleted('org_2'))).status, 200)
  t.same(await db.query('SELECT name, external_id FROM organizations WHERE id = $1', [org2?.id]), [{ name: 'Beta', external_id: null }], 'org kept, unlinked')
  t.same(await db.query('SELECT * FROM memberships WHERE org_id = $1', [org2?.id]), [], 'memberships dropped')
  t.same(await db.query('SELECT name FROM agents WHERE org_id = $1', [org2?.id]), [{ name: 'kept' }], 'tenant data kept')
  t.same(await db.query('SELECT id FROM users WHERE id = $1', ['user_2']), [{ id: 'user_2' }], 'users are not deleted with the org')

  // A re-created organization with the same external id is a new tenant, not the unlinked one.
  t.equal((await send(clerkEvents.organization('organization.created', 'org_2', 'Beta again'))).status, 200)
  const [org2Again] = await db.query<{ id: string }>('SELECT id FROM organizations WHERE external_id = $1', ['org_2'])
  t.not(org2Again?.id, org2?.id)

  const unknown = await send({ type: 'session.created', object: 'event', data: { id: 'sess_1' } })
  t.equal(unknown.status, 200)
  t.same(unknown.body, { received: true, ignored: true }, 'unknown events are acknowledged and ignored')
  t.ok(admin.logs.every((line) => !line.includes(idp.webhookSecret)), 'the secret never reaches the log')
})

t.test('signatures, timestamps and replays', async (t) => {
  const idp = await startIdentityProvider(t)
  const admin = await startTestAdmin(t, { CLERK_WEBHOOK_SECRET: idp.webhookSecret })
  const db = admin.database.db

  const first = idp.signWebhook(clerkEvents.user('user.created', 'user_r', 'r@example.com', 'Rita', 'One'))
  t.equal((await deliver(admin, first)).status, 200)
  const before = await snapshot(admin)

  const event = clerkEvents.user('user.updated', 'user_r', 'evil@example.com', 'Mallory', 'X')
  const badSecret = idp.signWebhook(event, { secret: `whsec_${Buffer.from('not the secret at all 123').toString('base64')}` })
  expectError(t, await deliver(admin, badSecret), 400, 'invalid_request', 'signed with another secret')
  const good = idp.signWebhook(event)
  expectError(t, await deliver(admin, { ...good, body: good.body.replace('Mallory', 'Mallorx') }), 400, 'invalid_request', 'body altered after signing')
  const noSignature = Object.fromEntries(Object.entries(good.headers).filter(([name]) => name !== 'svix-signature'))
  const missing = await deliver(admin, good, noSignature)
  expectError(t, missing, 400, 'invalid_request', 'missing signature header')
  t.match(missing.body.message, /svix-signature/)
  const stale = idp.signWebhook(event, { timestamp: new Date(Date.now() - 10 * 60_000) })
  const staleRes = await deliver(admin, stale)
  expectError(t, staleRes, 400, 'invalid_request', 'timestamp 10 minutes old')
  t.match(staleRes.body.message, /timestamp/)
  expectError(t, await deliver(admin, idp.signWebhook(event, { timestamp: new Date(Date.now() + 10 * 60_000) })), 400, 'invalid_request', 'timestamp in the future')
  t.same(await snapshot(admin), before, 'rejected deliveries changed nothing')

  // A replay: the same svix-id, validly re-signed with a fresh timestamp, carrying other content.
  const replay = idp.signWebhook(event, { id: first.id })
  const replayed = await deliver(admin, replay)
  expectError(t, replayed, 400, 'invalid_request', 'replayed delivery id')
  t.match(replayed.body.message, /already processed/)
  t.equal((await deliver(admin, first)).status, 400, 'the identical original delivery again')
  t.same(await snapshot(admin), before, 'replays changed nothing')

  const ignored = idp.signWebhook({ type: 'email.created', data: {} })
  t.equal((await deliver(admin, ignored)).status, 200)
  expectError(t, await deliver(admin, ignored), 400, 'invalid_request', 'ignored events are recorded for replay too')

  const malformed = idp.signWebhook({ type: 'user.created', data: { first_name: 'No id' } })
  expectError(t, await deliver(admin, malformed), 400, 'invalid_request', 'event without data.id')
  t.same(await db.query('SELECT svix_id FROM webhook_deliveries WHERE svix_id = $1', [malformed.id]), [], 'a failed event is not recorded, so a fixed retry can succeed')
  const notObject = idp.signWebhook(['not', 'an', 'event'])
  expectError(t, await deliver(admin, notObject), 400, 'invalid_request', 'signed body that is not an event')

  const text = await admin.request('POST', PATH, { key: null, rawBody: 'x', headers: { ...good.headers, 'content-type': 'text/plain' } })
  t.equal(text.status, 415, 'only JSON bodies')

  // The raw-body parser is scoped to the webhook: other routes still parse JSON (and reject bad JSON).
  const agent = await admin.request('POST', '/v1/agents', { body: { name: 'still-parsed' } })
  t.equal(agent.status, 201)
  expectError(t, await admin.request('POST', '/v1/agents', { rawBody: '{"name":' }), 400, 'invalid_json', 'app parser untouched')
})

t.test('without CLERK_WEBHOOK_SECRET the webhook answers 503', async (t) => {
  const idp = await startIdentityProvider(t)
  const admin = await startTestAdmin(t)
  const res = await deliver(admin, idp.signWebhook(clerkEvents.user('user.created', 'user_x', 'x@example.com', 'X', 'Y')))
  expectError(t, res, 503, 'service_unavailable', 'no secret')
  t.same(await admin.database.db.query('SELECT id FROM users WHERE id = $1', ['user_x']), [])
})

t.test('the webhook is documented', async (t) => {
  const admin = await startTestAdmin(t)
  const doc = await admin.request('GET', '/swagger/doc.json', { key: null })
  t.ok(doc.body.paths?.[PATH]?.post !== undefined)
})
