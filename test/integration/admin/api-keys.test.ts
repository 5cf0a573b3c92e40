/**
 * API keys, roles and organizations over HTTP (docs/api.md §2.8, §4.5, §5; docs/wire-contract.md §2): the secret is shown
 * once, stored only as a SHA-256 digest, never listed or logged; both credential headers work; roles and
 * the operator flag are enforced.
 */
import { createHash } from 'node:crypto'
import t from 'tap'
import { createOrg, startTestAdmin, type TestAdmin } from '../../helpers/admin.js'
import { countRows, expectEnvelope, expectError, ISO_UTC_RE, UUID_RE } from '../../helpers/expect.js'

/** Every secret a test saw, so the log check can look for all of them. */
function secretFragments(secret: string): string[] {
  // the whole secret, its random part, and a 16-character window from the middle of the random part
  return [secret, secret.slice(3), secret.slice(12, 28)]
}

async function createKey(admin: TestAdmin, key: string, body: Record<string, unknown>): Promise<{ id: string; key: string; role: string }> {
  const res = await admin.request('POST', '/v1/keys', { key, body })
  if (res.status !== 201) throw new Error(`key creation failed: ${res.status} ${res.text}`)
  return res.body.data
}

t.test('API keys: creation, listing, storage, both headers, deletion, roles, orgs and logs', async (t) => {
  const admin = await startTestAdmin(t)
  const secrets: string[] = [admin.operatorKey]

  await t.test('create answers 201 with the secret, shown once', async (t) => {
    const before = await countRows(admin, 'api_keys')
    const res = await admin.request('POST', '/v1/keys', { body: { name: 'ci key' } })
    const data = expectEnvelope(t, res, 201, 'create key')
    t.type(data.key, 'string')
    t.ok(data.key.startsWith('sk_'), 'the secret starts with sk_')
    t.ok(data.key.length >= 46, `the secret is at least 46 characters (${data.key.length})`)
    t.match(data.key, /^sk_[A-Za-z0-9_-]+$/, 'sk_ then base64url')
    t.match(data.id, UUID_RE, 'id is a UUID')
    t.equal(data.name, 'ci key')
    t.equal(data.role, 'admin', 'default role is the creator\'s role')
    t.equal(data.operator, false, 'a key made over the API is never an operator key')
    t.match(data.createdAt, ISO_UTC_RE, 'createdAt is ISO 8601 UTC')
    t.type(res.body.message, 'string')
    t.match(res.body.message, /once/i, 'the message says the key is shown once')
    t.equal(await countRows(admin, 'api_keys'), before + 1, 'one row written')
    secrets.push(data.key)

    const second = await admin.request('POST', '/v1/keys', { body: { name: 'ci key' } })
    t.equal(second.status, 201, 'names need not be unique')
    t.not(second.body.data.key, data.key, 'every key gets a fresh secret')
    t.not(second.body.data.id, data.id)
    secrets.push(second.body.data.key)
  })

  await t.test('create rejects bad bodies and writes nothing', async (t) => {
    const before = await countRows(admin, 'api_keys')
    for (const [label, body] of [
      ['missing name', {}],
      ['empty name', { name: '' }],
      ['name too long', { name: 'n'.repeat(201) }],
      ['unknown role', { name: 'x', role: 'owner' }],
      ['unknown field', { name: 'x', operator: true }],
      ['client-chosen secret', { name: 'x', key: `sk_${'a'.repeat(43)}` }],
    ] as const) {
      expectError(t, await admin.request('POST', '/v1/keys', { body }), 400, 'invalid_request', label)
    }
    t.equal(await countRows(admin, 'api_keys'), before, 'no key row written')
  })

  await t.test('listing never shows a secret', async (t) => {
    const created = await createKey(admin, admin.operatorKey, { name: 'listed' })
    secrets.push(created.key)
    const res = await admin.request('GET', '/v1/keys?limit=500')
    const data = expectEnvelope(t, res, 200, 'list keys')
    t.ok(Array.isArray(data), 'data is an array')
    t.ok('nextCursor' in res.body, 'nextCursor sits beside data')
    const listed = data.find((k: { id: string }) => k.id === created.id)
    t.ok(listed !== undefined, 'the new key is listed')
    t.match(listed, { id: created.id, name: 'listed', role: 'admin' })
    for (const item of data as Record<string, unknown>[]) {
      t.notOk('key' in item, `key ${String(item.id)} has no key member`)
      t.notOk('key_hash' in item || 'keyHash' in item, `key ${String(item.id)} has no hash member`)
    }
    for (const secret of secrets) {
      for (const fragment of secretFragments(secret)) {
        t.notOk(res.text.includes(fragment), 'no secret (or part of one) in the listing')
      }
    }
  })

  await t.test('only a SHA-256 digest is stored', async (t) => {
    const created = await createKey(admin, admin.operatorKey, { name: 'stored' })
    secrets.push(created.key)
    const rows = await admin.database.db.query<{ key_hash: Buffer; key_prefix: string }>(
      'SELECT key_hash, key_prefix FROM api_keys WHERE id = $1', [created.id])
    t.equal(rows.length, 1)
    const stored = Buffer.from(rows[0]!.key_hash)
    t.notOk(stored.equals(Buffer.from(created.key, 'utf8')), 'key_hash is not the secret')
    t.ok(stored.equals(createHash('sha256').update(created.key, 'utf8').digest()), 'key_hash is SHA-256 of the secret')
    t.ok(rows[0]!.key_prefix.length < 16, 'the stored prefix is a short hint, not the secret')

    const all = await admin.database.db.query('SELECT * FROM api_keys')
    const dump = JSON.stringify(all)
    for (const secret of secrets) {
      for (const fragment of secretFragments(secret)) t.notOk(dump.includes(fragment), 'no column holds a secret')
    }
    // nor as hex or base64 of its bytes
    t.notOk(dump.includes(Buffer.from(created.key).toString('hex')), 'no hex-encoded secret')
    t.notOk(dump.includes(Buffer.from(created.key).toString('base64')), 'no base64-encoded secret')
  })

  await t.test('the new key authenticates with either header', async (t) => {
    const created = await createKey(admin, admin.operatorKey, { name: 'headers' })
    secrets.push(created.key)
    const bearer = await admin.request('GET', '/v1/agents', { key: created.key })
    expectEnvelope(t, bearer, 200, 'Authorization: Bearer')
    const registry = await admin.request('GET', '/v1/agents', { key: null, headers: { 'x-service-registry-key': created.key } })
    expectEnvelope(t, registry, 200, 'X-Service-Registry-Key')
    const lowerBearer = await admin.request('GET', '/v1/agents', { key: null, headers: { authorization: `bearer ${created.key}` } })
    t.equal(lowerBearer.status, 200, 'the Bearer scheme is case-insensitive')
    const same = await admin.request('GET', '/v1/agents', { key: created.key, headers: { 'x-service-registry-key': created.key } })
    t.equal(same.status, 200, 'both headers with the same key are fine')

    // The key acts for its org: an agent it creates is the operator's org's agent.
    const agent = await admin.request('POST', '/v1/agents', { key: null, headers: { 'x-service-registry-key': created.key }, body: { name: 'made-by-new-key' } })
    t.equal(agent.status, 201, 'the new key can create an agent')
    const seen = await admin.request('GET', `/v1/agents/${agent.body.data.id}`)
    t.equal(seen.status, 200, 'the creator\'s org sees the agent')

    const ambiguous = await admin.request('GET', '/v1/agents', { key: created.key, headers: { 'x-service-registry-key': admin.operatorKey } })
    expectError(t, ambiguous, 401, 'unauthorized', 'both headers with different keys')
    const ambiguousWrite = await admin.request('POST', '/v1/agents', {
      key: admin.operatorKey, headers: { 'x-service-registry-key': `sk_${'Q'.repeat(43)}` }, body: { name: 'never' },
    })
    expectError(t, ambiguousWrite, 401, 'unauthorized', 'ambiguous credentials on a write')
    t.equal((await admin.database.db.query('SELECT 1 FROM agents WHERE name = $1', ['never'])).length, 0, 'nothing written')
  })

  await t.test('bad credentials are 401 unauthorized', async (t) => {
    const cases: [string, Record<string, string>][] = [
      ['no credentials', {}],
      ['garbage bearer', { authorization: 'Bearer garbage' }],
      ['well-formed unknown key', { authorization: `Bearer sk_${'A'.repeat(43)}` }],
      ['Basic scheme', { authorization: 'Basic abc' }],
      ['Bearer without a token', { authorization: 'Bearer' }],
      ['token without a scheme', { authorization: admin.operatorKey }],
      ['two tokens', { authorization: `Bearer ${admin.operatorKey} extra` }],
      ['empty registry key header', { 'x-service-registry-key': '' }],
      ['garbage registry key header', { 'x-service-registry-key': 'garbage' }],
      ['secret with a character appended', { authorization: `Bearer ${admin.operatorKey}x` }],
      ['secret missing its last character', { authorization: `Bearer ${admin.operatorKey.slice(0, -1)}` }],
    ]
    for (const [label, headers] of cases) {
      expectError(t, await admin.request('GET', '/v1/agents', { key: null, headers }), 401, 'unauthorized', label)
    }
    const before = await countRows(admin, 'agents')
    expectError(t, await admin.request('POST', '/v1/agents', { key: 'garbage', body: { name: 'x' } }), 401, 'unauthorized', 'garbage key on a write')
    expectError(t, await admin.request('POST', '/v1/keys', { key: null, body: { name: 'x' } }), 401, 'unauthorized', 'create key without credentials')
    t.equal(await countRows(admin, 'agents'), before, 'nothing written by unauthenticated calls')
  })

  await t.test('delete: 204, then the key stops working', async (t) => {
    const victim = await createKey(admin, admin.operatorKey, { name: 'to delete' })
    secrets.push(victim.key)
    t.equal((await admin.request('GET', '/v1/agents', { key: victim.key })).status, 200, 'works before deletion')
    const before = await countRows(admin, 'api_keys')
    const deleted = await admin.request('DELETE', `/v1/keys/${victim.id}`)
    t.equal(deleted.status, 204)
    t.equal(deleted.text, '', '204 has no body')
    t.equal(await countRows(admin, 'api_keys'), before - 1, 'the row is gone')
    expectError(t, await admin.request('GET', '/v1/agents', { key: victim.key }), 401, 'unauthorized', 'deleted key on /v1/agents')
    expectError(t, await admin.request('GET', '/v1/agents', { key: null, headers: { 'x-service-registry-key': victim.key } }), 401, 'unauthorized', 'deleted key in X-Service-Registry-Key')
    const list = await admin.request('GET', '/v1/keys?limit=500')
    t.notOk(list.body.data.some((k: { id: string }) => k.id === victim.id), 'no longer listed')
    expectError(t, await admin.request('DELETE', `/v1/keys/${victim.id}`), 404, 'key_not_found', 'deleting twice')

    // A key may delete itself; afterwards it is dead too.
    const selfie = await createKey(admin, admin.operatorKey, { name: 'self-deleting' })
    secrets.push(selfie.key)
    t.equal((await admin.request('DELETE', `/v1/keys/${selfie.id}`, { key: selfie.key })).status, 204, 'a key can delete itself')
    t.equal((await admin.request('GET', '/v1/keys', { key: selfie.key })).status, 401, 'and is then refused')
  })

  await t.test('another org\'s key is invisible: delete 404 and the key survives', async (t) => {
    const other = await createOrg(admin, 'other org')
    secrets.push(other.key)
    const otherKeys = await admin.request('GET', '/v1/keys', { key: other.key })
    expectEnvelope(t, otherKeys, 200, 'other org lists its keys')
    t.equal(otherKeys.body.data.length, 1, 'the other org has only its first admin key')
    const otherKeyId: string = otherKeys.body.data[0].id

    const operatorKeys = await admin.request('GET', '/v1/keys?limit=500')
    t.notOk(operatorKeys.body.data.some((k: { id: string }) => k.id === otherKeyId), 'org lists never show another org\'s keys')
    const operatorKeyIds = (operatorKeys.body.data as { id: string }[]).map((k) => k.id)
    t.notOk((otherKeys.body.data as { id: string }[]).some((k) => operatorKeyIds.includes(k.id)), 'and the other way round')

    expectError(t, await admin.request('DELETE', `/v1/keys/${otherKeyId}`), 404, 'key_not_found', 'operator deleting another org\'s key')
    expectError(t, await admin.request('DELETE', `/v1/keys/${operatorKeyIds[0]}`, { key: other.key }), 404, 'key_not_found', 'org admin deleting the operator org\'s key')
    t.equal((await admin.request('GET', '/v1/agents', { key: other.key })).status, 200, 'the other org\'s key still works')
    t.equal((await admin.request('GET', '/v1/agents')).status, 200, 'the operator key still works')
  })

  await t.test('member role', async (t) => {
    const memberRes = await admin.request('POST', '/v1/keys', { body: { name: 'member', role: 'member' } })
    const member = expectEnvelope(t, memberRes, 201, 'create member key')
    t.equal(member.role, 'member')
    secrets.push(member.key)

    const agent = await admin.request('POST', '/v1/agents', { body: { name: 'member-visible' } })
    t.equal(agent.status, 201)
    const agentId: string = agent.body.data.id
    const agentsBefore = await countRows(admin, 'agents')
    const keysBefore = await countRows(admin, 'api_keys')
    const rowBefore = JSON.stringify(await admin.database.db.query('SELECT * FROM agents WHERE id = $1', [agentId]))

    const list = await admin.request('GET', '/v1/agents', { key: member.key })
    expectEnvelope(t, list, 200, 'member lists agents')
    t.ok(list.body.data.some((a: { id: string }) => a.id === agentId), 'member sees the org\'s agents')
    t.equal((await admin.request('GET', `/v1/agents/${agentId}`, { key: member.key })).status, 200, 'member reads an agent')
    t.equal((await admin.request('GET', '/v1/keys', { key: member.key })).status, 200, 'member lists keys')

    expectError(t, await admin.request('POST', '/v1/agents', { key: member.key, body: { name: 'nope' } }), 403, 'forbidden', 'member creates an agent')
    expectError(t, await admin.request('PUT', `/v1/agents/${agentId}`, { key: member.key, body: { name: 'renamed' } }), 403, 'forbidden', 'member updates an agent')
    expectError(t, await admin.request('POST', `/v1/agents/${agentId}/disable`, { key: member.key }), 403, 'forbidden', 'member disables an agent')
    expectError(t, await admin.request('POST', `/v1/agents/${agentId}/enable`, { key: member.key }), 403, 'forbidden', 'member enables an agent')
    expectError(t, await admin.request('DELETE', `/v1/agents/${agentId}`, { key: member.key }), 403, 'forbidden', 'member deletes an agent')
    expectError(t, await admin.request('POST', '/v1/keys', { key: member.key, body: { name: 'escalate', role: 'admin' } }), 403, 'role_not_allowed', 'member creates an admin key')
    const memberKeys = await admin.request('GET', '/v1/keys?limit=500', { key: member.key })
    const someKey: string = memberKeys.body.data.find((k: { id: string }) => k.id !== member.id).id
    expectError(t, await admin.request('DELETE', `/v1/keys/${someKey}`, { key: member.key }), 403, 'forbidden', 'member deletes another key')
    expectError(t, await admin.request('DELETE', `/v1/keys/${member.id}`, { key: member.key }), 403, 'forbidden', 'member deletes its own key')
    expectError(t, await admin.request('POST', '/v1/orgs', { key: member.key, body: { name: 'member org' } }), 403, 'operator_required', 'member creates an org')

    t.equal(await countRows(admin, 'agents'), agentsBefore, 'no agent written or deleted by the member')
    t.equal(await countRows(admin, 'api_keys'), keysBefore, 'no key written or deleted by the member')
    t.equal(JSON.stringify(await admin.database.db.query('SELECT * FROM agents WHERE id = $1', [agentId])), rowBefore, 'the agent row is unchanged')

    const own = await admin.request('POST', '/v1/keys', { key: member.key, body: { name: 'member made' } })
    t.equal(own.status, 201, 'a member may create a key')
    t.equal(own.body.data.role, 'member', 'which defaults to the member role')
    secrets.push(own.body.data.key)
    expectError(t, await admin.request('POST', '/v1/agents', { key: own.body.data.key, body: { name: 'nope' } }), 403, 'forbidden', 'the member-made key is a member too')
  })

  await t.test('organizations: only operators create them', async (t) => {
    const orgAdmin = await createOrg(admin, 'tenant a')
    secrets.push(orgAdmin.key)
    const nonOperatorAdmin = await createKey(admin, admin.operatorKey, { name: 'plain admin', role: 'admin' })
    secrets.push(nonOperatorAdmin.key)
    const orgsBefore = await countRows(admin, 'organizations')
    const keysBefore = await countRows(admin, 'api_keys')
    expectError(t, await admin.request('POST', '/v1/orgs', { key: orgAdmin.key, body: { name: 'sneaky' } }), 403, 'operator_required', 'org admin key creates an org')
    expectError(t, await admin.request('POST', '/v1/orgs', { key: nonOperatorAdmin.key, body: { name: 'sneaky' } }), 403, 'operator_required', 'non-operator admin of the default org creates an org')
    expectError(t, await admin.request('POST', '/v1/orgs', { key: null, body: { name: 'sneaky' } }), 401, 'unauthorized', 'no credentials')
    expectError(t, await admin.request('POST', '/v1/orgs', { body: {} }), 400, 'invalid_request', 'operator without a name')
    expectError(t, await admin.request('POST', '/v1/orgs', { body: { name: 'x', id: '00000000-0000-4000-8000-000000000000' } }), 400, 'invalid_request', 'operator with an unknown field')
    t.equal(await countRows(admin, 'organizations'), orgsBefore, 'no organization written')
    t.equal(await countRows(admin, 'api_keys'), keysBefore, 'no key written')

    const res = await admin.request('POST', '/v1/orgs', { body: { name: 'tenant b' } })
    const data = expectEnvelope(t, res, 201, 'operator creates an org')
    t.match(data.org.id, UUID_RE, 'data.org.id is a UUID')
    t.equal(data.org.name, 'tenant b')
    t.match(data.org.createdAt, ISO_UTC_RE)
    t.match(data.apiKey.id, UUID_RE)
    t.ok(typeof data.apiKey.key === 'string' && data.apiKey.key.startsWith('sk_') && data.apiKey.key.length >= 46, 'data.apiKey.key is a secret')
    t.equal(data.apiKey.role, 'admin', 'the first key is an admin key')
    t.equal(data.apiKey.operator, false, 'and not an operator key')
    t.match(res.body.message, /once/i)
    secrets.push(data.apiKey.key)
    t.equal(await countRows(admin, 'organizations'), orgsBefore + 1)
    const stored = await admin.database.db.query<{ org_id: string }>('SELECT org_id FROM api_keys WHERE id = $1', [data.apiKey.id])
    t.equal(stored[0]?.org_id, data.org.id, 'the key belongs to the new org')

    const fresh = await admin.request('GET', '/v1/agents', { key: data.apiKey.key })
    expectEnvelope(t, fresh, 200, 'the new org key works')
    t.same(fresh.body.data, [], 'and sees an empty registry')
    expectError(t, await admin.request('POST', '/v1/orgs', { key: data.apiKey.key, body: { name: 'grandchild' } }), 403, 'operator_required', 'the new org\'s key is not an operator')
  })

  await t.test('no secret ever reaches the log', async (t) => {
    // a few more requests that carry secrets in every header form, including refused ones
    const last = secrets[secrets.length - 1]!
    await admin.request('GET', '/v1/agents', { key: null, headers: { 'x-service-registry-key': last } })
    await admin.request('GET', '/v1/agents', { key: last, headers: { 'x-service-registry-key': admin.operatorKey } })
    await admin.request('POST', '/v1/keys', { body: { name: 'x', key: last } })
    const joined = admin.logs.join('')
    t.ok(admin.logs.length > 10, 'the app logged requests')
    t.match(joined, /\/v1\/keys/, 'the log captured the key routes')
    for (const secret of secrets) {
      for (const fragment of secretFragments(secret)) {
        t.notOk(joined.includes(fragment), `secret ${secret.slice(0, 6)}… is not in the log`)
      }
    }
  })
})

t.test('an operator key can only be deleted by an operator', async (t) => {
  const admin = await startTestAdmin(t)
  const keys = await admin.request('GET', '/v1/keys')
  const operatorKeyId: string = keys.body.data.find((k: { operator: boolean }) => k.operator).id
  const orgAdmin = await admin.request('POST', '/v1/keys', { body: { name: 'org admin', role: 'admin' } })
  t.equal(orgAdmin.body.data.operator, false, 'keys made over the API are never operator keys')
  const refused = await admin.request('DELETE', `/v1/keys/${operatorKeyId}`, { key: orgAdmin.body.data.key })
  t.equal(refused.status, 403)
  t.equal(refused.body.error, 'operator_required')
  t.equal((await admin.request('GET', '/v1/agents')).status, 200, 'the operator key still works')
  t.equal((await admin.request('DELETE', `/v1/keys/${orgAdmin.body.data.id}`)).status, 204, 'an operator may delete an org admin key')
})

t.test('a key deleted on one instance is refused by another that had it cached', async (t) => {
  const { createTestDatabase } = await import('../../helpers/database.js')
  const database = await createTestDatabase(t)
  const one = await startTestAdmin(t, {}, { database })
  const two = await startTestAdmin(t, { SERVICE_BOOTSTRAP_API_KEY: one.operatorKey }, { database })
  const created = await one.request('POST', '/v1/keys', { body: { name: 'shared' } })
  const key: string = created.body.data.key
  t.equal((await two.request('GET', '/v1/agents', { key })).status, 200, 'instance two has the key cached')
  t.equal((await one.request('DELETE', `/v1/keys/${created.body.data.id}`)).status, 204)
  t.equal((await one.request('GET', '/v1/agents', { key })).status, 401, 'refused at once where it was deleted')
  let status = 0
  for (let i = 0; i < 40 && status !== 401; i++) {
    status = (await two.request('GET', '/v1/agents', { key })).status
    if (status !== 401) await new Promise((r) => setTimeout(r, 50))
  }
  t.equal(status, 401, 'and by the other instance once the notification arrives (well before the cache TTL)')
})
