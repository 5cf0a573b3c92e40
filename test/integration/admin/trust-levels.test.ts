/**
 * Earned trust levels over HTTP (docs/api.md §2.3, docs/wire-contract.md §4, §13): DNS TXT domain validation against a
 * local authoritative DNS server (level 2), operator-set levels 3-4, and what each level lets the IAL-0
 * badge endpoint issue. Every refusal is checked to write nothing.
 */
import t from 'tap'
import { createOrg, startTestAdmin, type TestAdmin } from '../../helpers/admin.js'
import { startDnsServer } from '../../helpers/dns-server.js'
import { agentRowSnapshot, expectEnvelope, expectError } from '../../helpers/expect.js'

const UNKNOWN_ID = '6f1c1a52-93a4-4f4e-9b5d-3d2d1c0b7a11'
const RECORD_VALUE = /^service-domain-verification=[A-Za-z0-9_-]{43}$/

async function newAgent(admin: TestAdmin, body: Record<string, unknown>, key?: string): Promise<{ id: string; updatedAt: string }> {
  const res = await admin.request('POST', '/v1/agents', { body, ...(key === undefined ? {} : { key }) })
  if (res.status !== 201) throw new Error(`agent creation failed: ${res.status} ${res.text}`)
  return res.body.data
}

async function memberKey(admin: TestAdmin, adminKey?: string): Promise<string> {
  const res = await admin.request('POST', '/v1/keys', { body: { name: 'member', role: 'member' }, ...(adminKey === undefined ? {} : { key: adminKey }) })
  if (res.status !== 201) throw new Error(`key creation failed: ${res.status} ${res.text}`)
  return res.body.data.key
}

/** Every verification row, in a stable order, as text: proves a refusal changed nothing. */
async function verificationsSnapshot(admin: TestAdmin): Promise<string> {
  return JSON.stringify(await admin.database.db.query('SELECT * FROM domain_verifications ORDER BY agent_id, domain'))
}

function verifyDomain(admin: TestAdmin, id: string, body?: unknown, key?: string | null) {
  return admin.request('POST', `/v1/agents/${id}/verify-domain`, { ...(body === undefined ? {} : { body }), ...(key === undefined ? {} : { key }) })
}

function issue(admin: TestAdmin, id: string, body: unknown, key?: string) {
  return admin.request('POST', `/v1/agents/${id}/badge`, { body, ...(key === undefined ? {} : { key }) })
}

function setLevel(admin: TestAdmin, id: string, body: unknown, key?: string) {
  return admin.request('PUT', `/v1/agents/${id}/trust-level`, { body, ...(key === undefined ? {} : { key }) })
}

t.test('a DNS TXT record earns level 2 for the domain', async (t) => {
  const dns = await startDnsServer(t)
  const admin = await startTestAdmin(t, { SERVICE_DNS_SERVERS: dns.server })
  const agent = await newAgent(admin, { name: 'weather-bot', domain: 'Weather.Example.com' })
  const recordName = '_service-challenge.weather.example.com'

  const early = await issue(admin, agent.id, { domain: 'weather.example.com', trustLevel: '2' })
  expectError(t, early, 403, 'trust_level_not_verified', 'level 2 before verification')

  // Refusals before any challenge exists write nothing.
  const emptyTable = await verificationsSnapshot(admin)
  const member = await memberKey(admin)
  expectError(t, await verifyDomain(admin, agent.id, undefined, member), 403, 'forbidden', 'member key')
  const other = await createOrg(admin, 'other-org')
  expectError(t, await verifyDomain(admin, agent.id, undefined, other.key), 404, 'agent_not_found', 'another org')
  expectError(t, await verifyDomain(admin, UNKNOWN_ID), 404, 'agent_not_found', 'unknown agent')
  expectError(t, await verifyDomain(admin, 'not-a-uuid'), 400, 'invalid_id', 'malformed id')
  expectError(t, await verifyDomain(admin, agent.id, undefined, null), 401, 'unauthorized', 'no credentials')
  expectError(t, await verifyDomain(admin, agent.id, { domain: 'weather.example.com', extra: 1 }), 400, 'invalid_request', 'unknown field')
  expectError(t, await verifyDomain(admin, agent.id, { domain: 5 }), 400, 'invalid_request', 'domain is a number')
  expectError(t, await verifyDomain(admin, agent.id, { domain: null }), 400, 'invalid_request', 'domain is null')
  for (const bad of ['', 'example.com.', '-x.example.com', 'under_score.example.com', 'https://example.com', '10.0.0.1', `${'a'.repeat(64)}.example.com`]) {
    expectError(t, await verifyDomain(admin, agent.id, { domain: bad }), 400, 'invalid_request', `domain ${JSON.stringify(bad.slice(0, 20))}`)
  }
  const bare = await newAgent(admin, { name: 'no-domain' })
  expectError(t, await verifyDomain(admin, bare.id), 400, 'domain_not_registered', 'agent without a domain')
  // A domain that is not a host name is refused when the agent is registered, so none is ever verified.
  const badRegistered = await admin.request('POST', '/v1/agents', { body: { name: 'bad-domain', domain: 'https://bad.example.com/' } })
  expectError(t, badRegistered, 400, 'invalid_request', 'registering a domain that is not a host name')
  t.equal(await verificationsSnapshot(admin), emptyTable, 'no challenge was written by a refusal')

  // First call: the record to publish, no lookup yet.
  const first = await verifyDomain(admin, agent.id)
  const challenge = expectEnvelope(t, first, 200, 'first call')
  t.same(Object.keys(challenge).sort(), ['domain', 'record_name', 'record_value', 'status'])
  t.equal(challenge.domain, 'weather.example.com', 'the registered domain, lower-cased')
  t.equal(challenge.record_name, recordName)
  t.match(challenge.record_value, RECORD_VALUE)
  t.equal(challenge.status, 'pending')
  t.equal(dns.queryCount(recordName), 0, 'the first call does not look anything up')

  // Nothing published yet: NXDOMAIN is pending, and the challenge stays the same.
  const second = expectEnvelope(t, await verifyDomain(admin, agent.id, {}), 200, 'before publishing')
  t.same(second, challenge, 'same record, still pending')
  t.equal(dns.queryCount(recordName), 1, 'the second call looked the record up')
  const explicit = expectEnvelope(t, await verifyDomain(admin, agent.id, { domain: 'WEATHER.example.COM' }), 200, 'explicit domain')
  t.same(explicit, challenge, 'an explicit domain of another case names the same challenge')

  // The name exists without TXT records (NODATA), or with other records: still pending.
  dns.setTxt(recordName, [])
  t.equal(expectEnvelope(t, await verifyDomain(admin, agent.id), 200, 'NODATA').status, 'pending')
  dns.setTxt(recordName, ['service-domain-verification=wrong-token', `${challenge.record_value} `, 'v=spf1 -all'])
  t.equal(expectEnvelope(t, await verifyDomain(admin, agent.id), 200, 'wrong value').status, 'pending')

  // A failing resolver is a 502, not "pending": it says nothing about the record.
  const beforeFailure = await verificationsSnapshot(admin)
  const agentBefore = await agentRowSnapshot(admin, agent.id)
  dns.setServfail(recordName)
  const failed = await verifyDomain(admin, agent.id)
  expectError(t, failed, 502, 'dns_lookup_failed', 'SERVFAIL')
  t.notOk(failed.text.includes('127.0.0.1'), 'the resolver address is not disclosed')
  t.equal(await verificationsSnapshot(admin), beforeFailure, 'a failed lookup writes nothing')
  t.equal(await agentRowSnapshot(admin, agent.id), agentBefore, 'nor touches the agent')

  // Published (among other TXT records at the name): verified, level 2.
  dns.setTxt(recordName, ['v=spf1 -all', challenge.record_value])
  const verified = expectEnvelope(t, await verifyDomain(admin, agent.id), 200, 'published')
  t.same(verified, { ...challenge, status: 'verified' })
  const read = expectEnvelope(t, await admin.request('GET', `/v1/agents/${agent.id}`), 200, 'read agent')
  t.equal(read.trustLevel, '2', 'the agent is at level 2')
  t.not(read.updatedAt, agent.updatedAt, 'updatedAt moved')
  const rows = await admin.database.db.query<{ verified_at: Date | null }>('SELECT verified_at FROM domain_verifications WHERE agent_id = $1', [agent.id])
  t.equal(rows.length, 1)
  t.ok(rows[0]?.verified_at instanceof Date, 'verified_at is set')

  // Verified is final: no further lookups, even when the record is gone.
  dns.remove(recordName)
  const lookups = dns.queryCount(recordName)
  t.equal(expectEnvelope(t, await verifyDomain(admin, agent.id), 200, 'after verification').status, 'verified')
  t.equal(dns.queryCount(recordName), lookups, 'no lookup once verified')

  // What level 2 allows.
  const badge = expectEnvelope(t, await issue(admin, agent.id, { domain: 'weather.example.com', trustLevel: '2' }), 200, 'level-2 badge')
  t.equal(badge.trustLevel, '2')
  t.equal(badge.ial, '0')
  const claims = JSON.parse(Buffer.from(String(badge.token).split('.')[1] as string, 'base64url').toString('utf8'))
  t.equal(claims.vc?.credentialSubject?.level, '2', 'the badge carries level 2')
  expectError(t, await issue(admin, agent.id, { domain: 'other.example.org', trustLevel: '2' }), 403, 'domain_not_verified', 'level 2 for an unverified domain')
  expectError(t, await issue(admin, agent.id, { domain: 'weather.example.com', trustLevel: '3' }), 403, 'trust_level_not_verified', 'level 3')
  t.equal(expectEnvelope(t, await issue(admin, agent.id, { domain: 'other.example.org' }), 200, 'level 1 elsewhere').trustLevel, '1')

  // A second domain is a separate challenge with its own token; verifying it keeps level 2.
  const second2 = expectEnvelope(t, await verifyDomain(admin, agent.id, { domain: 'other.example.org' }), 200, 'second domain')
  t.equal(second2.record_name, '_service-challenge.other.example.org')
  t.equal(second2.status, 'pending')
  t.not(second2.record_value, challenge.record_value, 'a fresh token')
  dns.setTxt(second2.record_name, [second2.record_value])
  t.equal(expectEnvelope(t, await verifyDomain(admin, agent.id, { domain: 'other.example.org' }), 200, 'second domain verified').status, 'verified')
  t.equal(expectEnvelope(t, await issue(admin, agent.id, { domain: 'other.example.org', trustLevel: '2' }), 200, 'level 2 there').trustLevel, '2')
  t.equal(expectEnvelope(t, await admin.request('GET', `/v1/agents/${agent.id}`), 200, 'read').trustLevel, '2')

  // Another agent cannot ride on this agent's record: its token differs.
  const copycat = await newAgent(admin, { name: 'copycat', domain: 'weather.example.com' }, other.key)
  dns.setTxt(recordName, [challenge.record_value])
  const copy = expectEnvelope(t, await verifyDomain(admin, copycat.id, undefined, other.key), 200, 'copycat first call')
  t.not(copy.record_value, challenge.record_value)
  t.equal(expectEnvelope(t, await verifyDomain(admin, copycat.id, undefined, other.key), 200, 'copycat check').status, 'pending')
  expectError(t, await issue(admin, copycat.id, { domain: 'weather.example.com', trustLevel: '2' }, other.key), 403, 'trust_level_not_verified', 'copycat level 2')
})

t.test('concurrent first calls agree on one token', async (t) => {
  const dns = await startDnsServer(t)
  const admin = await startTestAdmin(t, { SERVICE_DNS_SERVERS: dns.server })
  const agent = await newAgent(admin, { name: 'racer', domain: 'race.example.com' })
  const answers = await Promise.all(Array.from({ length: 8 }, () => verifyDomain(admin, agent.id)))
  const values = new Set(answers.map((r) => { t.equal(r.status, 200); return r.body.data.record_value }))
  t.equal(values.size, 1, 'every caller was shown the stored token')
  dns.setTxt('_service-challenge.race.example.com', [...values])
  const checks = await Promise.all(Array.from({ length: 5 }, () => verifyDomain(admin, agent.id)))
  t.ok(checks.every((r) => r.status === 200 && r.body.data.status === 'verified'), 'concurrent checks all verify')
  t.equal(expectEnvelope(t, await admin.request('GET', `/v1/agents/${agent.id}`), 200, 'read').trustLevel, '2')
})

t.test('operators set levels 3 and 4, for any organization', async (t) => {
  const dns = await startDnsServer(t)
  const admin = await startTestAdmin(t, { SERVICE_DNS_SERVERS: dns.server })
  const org = await createOrg(admin, 'customer')
  const agent = await newAgent(admin, { name: 'bank-bot', domain: 'bank.example.com' }, org.key)
  const member = await memberKey(admin, org.key)

  const untouched = await agentRowSnapshot(admin, agent.id)
  expectError(t, await setLevel(admin, agent.id, { trustLevel: '3' }, org.key), 403, 'operator_required', 'the org\'s own admin')
  expectError(t, await setLevel(admin, agent.id, { trustLevel: '3' }, member), 403, 'operator_required', 'a member')
  expectError(t, await setLevel(admin, agent.id, { trustLevel: '5' }, org.key), 403, 'operator_required', 'a non-operator learns nothing about the body')
  expectError(t, await setLevel(admin, UNKNOWN_ID, { trustLevel: '3' }, org.key), 403, 'operator_required', 'nor about other agents')
  expectError(t, await admin.request('PUT', `/v1/agents/${agent.id}/trust-level`, { body: { trustLevel: '3' }, key: null }), 401, 'unauthorized', 'no credentials')
  for (const bad of ['5', '0', '', 'three', '3.0', ' 3']) {
    expectError(t, await setLevel(admin, agent.id, { trustLevel: bad }), 400, 'invalid_trust_level', `level ${JSON.stringify(bad)}`)
  }
  // Wrong JSON types fail the body schema, as on the badge route: the level is a string, never a number.
  for (const bad of [3, 5, 0, 2.5, null, true, ['3']]) {
    expectError(t, await setLevel(admin, agent.id, { trustLevel: bad }), 400, 'invalid_request', `level ${JSON.stringify(bad)}`)
  }
  expectError(t, await setLevel(admin, agent.id, {}), 400, 'invalid_request', 'missing level')
  expectError(t, await setLevel(admin, agent.id, { trustLevel: '3', domain: 'x.example.com' }), 400, 'invalid_request', 'unknown field')
  expectError(t, await setLevel(admin, UNKNOWN_ID, { trustLevel: '3' }), 404, 'agent_not_found', 'unknown agent')
  expectError(t, await setLevel(admin, 'not-a-uuid', { trustLevel: '3' }), 400, 'invalid_id', 'malformed id')
  t.equal(await agentRowSnapshot(admin, agent.id), untouched, 'refusals change nothing')
  expectError(t, await issue(admin, agent.id, { domain: 'bank.example.com', trustLevel: '3' }, org.key), 403, 'trust_level_not_verified', 'level 3 before')

  const set = expectEnvelope(t, await setLevel(admin, agent.id, { trustLevel: '3' }), 200, 'operator sets 3')
  t.equal(set.trustLevel, '3')
  t.equal(set.id, agent.id)
  t.equal(set.did, `did:web:registry.test%3A8080:agents:${agent.id}`, 'the usual agent view')
  t.equal(expectEnvelope(t, await admin.request('GET', `/v1/agents/${agent.id}`, { key: org.key }), 200, 'org reads').trustLevel, '3')

  // Level 3 vouches for the registered domain only.
  const badge = expectEnvelope(t, await issue(admin, agent.id, { domain: 'bank.example.com', trustLevel: '3' }, org.key), 200, 'level-3 badge')
  t.equal(badge.trustLevel, '3')
  t.equal(expectEnvelope(t, await issue(admin, agent.id, { domain: 'bank.example.com', trustLevel: '2' }, org.key), 200, 'level 2 too').trustLevel, '2')
  expectError(t, await issue(admin, agent.id, { domain: 'elsewhere.example.com', trustLevel: '3' }, org.key), 403, 'domain_not_verified', 'level 3 elsewhere')
  expectError(t, await issue(admin, agent.id, { domain: 'bank.example.com', trustLevel: '4' }, org.key), 403, 'trust_level_not_verified', 'level 4')

  // Domain validation never lowers a higher level.
  const challenge = expectEnvelope(t, await verifyDomain(admin, agent.id, undefined, org.key), 200, 'challenge')
  dns.setTxt(challenge.record_name, [challenge.record_value])
  t.equal(expectEnvelope(t, await verifyDomain(admin, agent.id, undefined, org.key), 200, 'verified').status, 'verified')
  t.equal(expectEnvelope(t, await admin.request('GET', `/v1/agents/${agent.id}`, { key: org.key }), 200, 'still 3').trustLevel, '3')

  // A JSON number is not the string the API types the level as: refused by name, nothing changes.
  const numeric = await setLevel(admin, agent.id, { trustLevel: 4 })
  expectError(t, numeric, 400, 'invalid_request', 'trustLevel 4 as a number')
  t.match(numeric.body?.message, /body\/trustLevel must be string/, 'the field is named')
  t.equal(expectEnvelope(t, await admin.request('GET', `/v1/agents/${agent.id}`, { key: org.key }), 200, 'unchanged').trustLevel, '3')
  t.equal(expectEnvelope(t, await setLevel(admin, agent.id, { trustLevel: '4' }), 200, 'string "4"').trustLevel, '4')
  t.equal(expectEnvelope(t, await issue(admin, agent.id, { domain: 'bank.example.com', trustLevel: '4' }, org.key), 200, 'level-4 badge').trustLevel, '4')

  // The operator may lower a level too; issuance follows at once.
  t.equal(expectEnvelope(t, await setLevel(admin, agent.id, { trustLevel: '1' }), 200, 'lowered').trustLevel, '1')
  expectError(t, await issue(admin, agent.id, { domain: 'bank.example.com', trustLevel: '2' }, org.key), 403, 'trust_level_not_verified', 'level 2 after lowering')
})
