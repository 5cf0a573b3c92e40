/**
 * Clean refusals: every admin endpoint that stores a string, reads a cursor or reads a time is fed NUL
 * (U+0000), lone UTF-16 surrogates, over-long strings, forged cursors and out-of-range times. Each answer
 * is 400 with the documented code, in the {error, message} shape, and the database is byte-for-byte
 * unchanged. Before the central text check and the strict cursor/time parsers, many of these were 500.
 */
import t from 'tap'
import { randomBytes, randomUUID } from 'node:crypto'
import { createOrg, startTestAdmin, type RequestOptions, type TestAdmin, type TestResponse } from '../../helpers/admin.js'
import { expectError } from '../../helpers/expect.js'
import { ed25519Identity, minimalAgentCard } from '../../helpers/fixtures.js'
import { clerkEvents, startIdentityProvider } from '../../helpers/identity-provider.js'

const TABLES = [
  'organizations', 'users', 'memberships', 'api_keys', 'agents', 'badges', 'pop_challenges',
  'domain_verifications', 'policy_documents', 'policy_groups', 'policy_group_members', 'webhook_deliveries', 'console_sessions',
]

/** One digest per table over every column of every row: a refusal must leave all of them as they were. */
async function dbState(admin: TestAdmin): Promise<Record<string, string>> {
  const state: Record<string, string> = {}
  for (const table of TABLES) {
    const rows = await admin.database.db.query<{ h: string | null; n: number }>(
      `SELECT md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), '')) AS h, count(*)::int AS n FROM ${table} x`,
    )
    state[table] = `${rows[0]?.n}:${rows[0]?.h}`
  }
  return state
}

const b64 = (value: unknown): string => Buffer.from(typeof value === 'string' ? value : JSON.stringify(value), 'utf8').toString('base64url')

/** The hostile strings every stored field is fed; over-long values are per field. */
const UNSAFE_TEXT: [string, string][] = [
  ['NUL', 'a\u0000b'],
  ['only NUL', '\u0000'],
  ['lone high surrogate', 'x\ud800'],
  ['lone low surrogate', '\udc00y'],
  ['reversed pair', '\udc00\ud800'],
]

interface Field {
  /** What the case is called in assertion messages. */
  label: string
  method: string
  path: () => string
  key?: () => string | null
  /** The request body with the hostile string placed in the field under test. */
  body: (value: string) => unknown
  /** An over-long value and the code it answers; omitted where the field has no length of its own. */
  overLong?: { value: string; code: string }
}

t.test('stored strings, cursors and times are refused cleanly on every endpoint', async (t) => {
  const idp = await startIdentityProvider(t)
  const admin = await startTestAdmin(t, { CLERK_WEBHOOK_SECRET: idp.webhookSecret })
  const db = admin.database.db
  const call = (method: string, path: string, options: RequestOptions = {}): Promise<TestResponse> => admin.request(method, path, options)

  // Fixtures: two agents, two keys, a group, a pending proposal, two revoked badges.
  const holder = ed25519Identity()
  const agent = (await call('POST', '/v1/agents', { body: { name: 'target', domain: 'target.example.com', did: holder.didKey, publicKeyJwk: holder.jwk } })).body.data
  await call('POST', '/v1/agents', { body: { name: 'second' } })
  await call('POST', '/v1/keys', { body: { name: 'second key' } })
  const [defaultOrg] = await db.query<{ id: string }>("SELECT id FROM organizations WHERE name = 'default'")
  const org = defaultOrg?.id as string
  const group = (await call('POST', `/v1/orgs/${org}/groups`, { body: { name: 'group', precedence: 1 } })).body
  const proposal = (await call('POST', `/v1/orgs/${org}/policy/org`, { body: { yaml_content: 'version: "1"\nmin_trust_level: REG\n' } })).body
  t.ok(typeof group?.id === 'string' && typeof proposal?.id === 'string', 'group and proposal fixtures exist')
  const revoked: string[] = []
  for (let i = 0; i < 2; i++) {
    const jti = randomUUID()
    await db.query(
      `INSERT INTO badges (jti, agent_id, org_id, subject, trust_level, ial, kid, issued_at, expires_at, revoked_at, revoke_reason)
       VALUES ($1, $2, $3, $4, 1, '0', 'k', now(), now() + interval '1 hour', date_trunc('milliseconds', now()), 'fixture')`,
      [jti, agent.id, org, holder.didKey],
    )
    revoked.push(jti)
  }
  const stranger = await createOrg(admin, 'stranger')
  void stranger

  const fields: Field[] = [
    { label: 'POST /v1/agents name', method: 'POST', path: () => '/v1/agents', body: (v) => ({ name: v }), overLong: { value: 'n'.repeat(201), code: 'invalid_request' } },
    { label: 'POST /v1/agents description', method: 'POST', path: () => '/v1/agents', body: (v) => ({ name: 'x', description: v }), overLong: { value: 'd'.repeat(2001), code: 'invalid_request' } },
    { label: 'POST /v1/agents domain', method: 'POST', path: () => '/v1/agents', body: (v) => ({ name: 'x', domain: v }), overLong: { value: 'd'.repeat(254), code: 'invalid_request' } },
    { label: 'POST /v1/agents did', method: 'POST', path: () => '/v1/agents', body: (v) => ({ name: 'x', did: `did:web:${v}` }), overLong: { value: 'w'.repeat(520), code: 'invalid_request' } },
    { label: 'POST /v1/agents publicKeyMultibase', method: 'POST', path: () => '/v1/agents', body: (v) => ({ name: 'x', publicKeyMultibase: v }), overLong: { value: 'z'.repeat(201), code: 'invalid_request' } },
    { label: 'POST /v1/agents agent_card value', method: 'POST', path: () => '/v1/agents', body: (v) => ({ name: 'x', agent_card: { ...minimalAgentCard(), description: v } }) },
    { label: 'POST /v1/agents agent_card key', method: 'POST', path: () => '/v1/agents', body: (v) => ({ name: 'x', agent_card: { ...minimalAgentCard(), [v]: 1 } }) },
    { label: 'PUT /v1/agents/:id name', method: 'PUT', path: () => `/v1/agents/${agent.id}`, body: (v) => ({ name: v }), overLong: { value: 'n'.repeat(201), code: 'invalid_request' } },
    { label: 'PUT /v1/agents/:id agent_card nested', method: 'PUT', path: () => `/v1/agents/${agent.id}`, body: (v) => ({ agent_card: { ...minimalAgentCard(), skills: [{ id: 's', name: v, description: 'x', tags: [] }] } }) },
    { label: 'POST /v1/keys name', method: 'POST', path: () => '/v1/keys', body: (v) => ({ name: v }), overLong: { value: 'k'.repeat(201), code: 'invalid_request' } },
    { label: 'POST /v1/orgs name', method: 'POST', path: () => '/v1/orgs', body: (v) => ({ name: v }), overLong: { value: 'o'.repeat(201), code: 'invalid_request' } },
    { label: 'POST /v1/badges/:jti/revoke reason', method: 'POST', path: () => `/v1/badges/${revoked[0]}/revoke`, body: (v) => ({ reason: v }), overLong: { value: 'r'.repeat(501), code: 'invalid_request' } },
    { label: 'POST /v1/agents/:id/badge domain', method: 'POST', path: () => `/v1/agents/${agent.id}/badge`, body: (v) => ({ domain: v }), overLong: { value: 'd'.repeat(254), code: 'invalid_request' } },
    { label: 'POST /v1/agents/:id/badge audience', method: 'POST', path: () => `/v1/agents/${agent.id}/badge`, body: (v) => ({ domain: 'target.example.com', audience: [v] }), overLong: { value: 'a'.repeat(513), code: 'invalid_request' } },
    { label: 'POST /v1/agents/:id/badge/challenge badge_aud', method: 'POST', path: () => `/v1/agents/${encodeURIComponent(holder.didKey)}/badge/challenge`, body: (v) => ({ badge_aud: [v] }), overLong: { value: 'a'.repeat(513), code: 'invalid_request' } },
    { label: 'POST /v1/agents/:id/badge/pop challenge_id', method: 'POST', path: () => `/v1/agents/${encodeURIComponent(holder.didKey)}/badge/pop`, key: () => null, body: (v) => ({ challenge_id: v, proof_jws: 'a.b.c' }), overLong: { value: 'c'.repeat(201), code: 'invalid_request' } },
    { label: 'POST /v1/agents/:id/verify-domain domain', method: 'POST', path: () => `/v1/agents/${agent.id}/verify-domain`, body: (v) => ({ domain: v }), overLong: { value: 'd'.repeat(254), code: 'invalid_request' } },
    { label: 'PUT /v1/agents/:id/trust-level trustLevel', method: 'PUT', path: () => `/v1/agents/${agent.id}/trust-level`, body: (v) => ({ trustLevel: v }), overLong: { value: '1'.repeat(1000), code: 'invalid_trust_level' } },
    { label: 'POST policy/org yaml_content', method: 'POST', path: () => `/v1/orgs/${org}/policy/org`, body: (v) => ({ yaml_content: `version: "1"\n# ${v}\n` }), overLong: { value: `#${'y'.repeat(64 * 1024)}`, code: 'invalid_policy' } },
    { label: 'PUT policy/agents/:id yaml_content', method: 'PUT', path: () => `/v1/orgs/${org}/policy/agents/${agent.id}`, body: (v) => ({ yaml_content: v }) },
    { label: 'POST proposal reject reason', method: 'POST', path: () => `/v1/orgs/${org}/policy/proposals/${proposal.id}/reject`, body: (v) => ({ reason: v }), overLong: { value: 'r'.repeat(2001), code: 'invalid_request' } },
    { label: 'POST groups name', method: 'POST', path: () => `/v1/orgs/${org}/groups`, body: (v) => ({ name: v, precedence: 5 }), overLong: { value: 'g'.repeat(201), code: 'invalid_request' } },
    { label: 'PUT groups/:id name', method: 'PUT', path: () => `/v1/orgs/${org}/groups/${group.id}`, body: (v) => ({ name: v }), overLong: { value: 'g'.repeat(201), code: 'invalid_request' } },
    { label: 'POST simulate operation', method: 'POST', path: () => `/v1/orgs/${org}/policy/agents/${agent.id}/simulate`, body: (v) => ({ action: { operation: v } }), overLong: { value: 'o'.repeat(2049), code: 'invalid_request' } },
    { label: 'POST simulate context key', method: 'POST', path: () => `/v1/orgs/${org}/policy/agents/${agent.id}/simulate`, body: (v) => ({ action: { operation: 'read' }, context: { [v]: 'x' } }) },
    { label: 'POST /v1/console/session api_key', method: 'POST', path: () => '/v1/console/session', key: () => null, body: (v) => ({ api_key: v }), overLong: { value: 'k'.repeat(4097), code: 'invalid_request' } },
    { label: 'POST /v1/agent-cards/validate', method: 'POST', path: () => '/v1/agent-cards/validate', body: (v) => ({ ...minimalAgentCard(), name: v }) },
  ]

  await t.test('bodies: NUL, lone surrogates and over-long strings', async (t) => {
    for (const field of fields) {
      const cases: [string, string, string][] = UNSAFE_TEXT.map(([name, value]) => [name, value, 'invalid_request'])
      if (field.overLong !== undefined) cases.push(['over-long', field.overLong.value, field.overLong.code])
      for (const [name, value, code] of cases) {
        const before = await dbState(admin)
        const key = field.key?.()
        const res = await call(field.method, field.path(), { body: field.body(value), ...(key === undefined ? {} : { key }) })
        const label = `${field.label} ← ${name}`
        expectError(t, res, 400, code, label)
        if (name === 'NUL' && field.label === 'POST /v1/agents name') t.match(res.body.message, /^body\/name must not contain U\+0000/, 'the message names the field')
        t.same(await dbState(admin), before, `${label}: nothing changed`)
      }
    }
  })

  await t.test('path parameters carrying NUL or a lone surrogate', async (t) => {
    const refs = [
      ['NUL in a DID', `did:key:z6Mk${'%00'}x`],
      ['NUL in did:web', 'did:web:%00..'],
      ['lone surrogate (CESU-8 bytes)', 'did:web:%ED%A0%80'],
    ]
    for (const [name, ref] of refs) {
      for (const [method, path, key] of [
        ['POST', `/v1/agents/${ref}/badge`, undefined],
        ['POST', `/v1/agents/${ref}/badge/challenge`, undefined],
        ['POST', `/v1/agents/${ref}/badge/pop`, null],
      ] as [string, string, null | undefined][]) {
        const before = await dbState(admin)
        const body = path.endsWith('/pop') ? { challenge_id: 'c', proof_jws: 'a.b.c' } : path.endsWith('/badge') ? { domain: 'target.example.com' } : {}
        const res = await call(method, path, { body, ...(key === undefined ? {} : { key }) })
        const label = `${method} ${path.replace(ref, name)}`
        t.equal(res.status, 400, `${label}: 400`)
        t.ok(['invalid_id', 'invalid_request'].includes(res.body?.error), `${label}: invalid_id or invalid_request (${String(res.body?.error)})`)
        expectError(t, res, 400, res.body?.error, label)
        t.same(await dbState(admin), before, `${label}: nothing changed`)
      }
    }
  })

  await t.test('forged cursors on every list', async (t) => {
    const real = async (path: string): Promise<string> => {
      const res = await call('GET', path, path.startsWith('/v1/revocations') ? { key: null } : {})
      const cursor = res.body?.nextCursor
      if (typeof cursor !== 'string') throw new Error(`no cursor from ${path}: ${res.status} ${res.text}`)
      return cursor
    }
    const lists = {
      agents: { path: '/v1/agents?limit=1', cursor: await real('/v1/agents?limit=1') },
      keys: { path: '/v1/keys?limit=1', cursor: await real('/v1/keys?limit=1') },
      revocations: { path: '/v1/revocations?limit=1', cursor: await real('/v1/revocations?limit=1') },
      organizations: { path: '/v1/orgs?limit=1', cursor: await real('/v1/orgs?limit=1') },
      badges: { path: `/v1/agents/${agent.id}/badges?limit=1`, cursor: await real(`/v1/agents/${agent.id}/badges?limit=1`) },
    }
    const uuid = randomUUID()
    const forged: [string, string][] = [
      ['random base64url', randomBytes(48).toString('base64url')],
      ['standard base64 with padding', randomBytes(10).toString('base64')],
      ['base64 of garbage text', b64('not json at all')],
      ['base64 of a JSON object', b64({ createdAt: '2024-01-01T00:00:00.000Z', id: uuid })],
      ['base64 of numbers', b64([1, 2, 3])],
      ['the old two-element form', b64(['2024-01-01T00:00:00.000Z', uuid])],
      // the old form with values PostgreSQL refuses (the revocation cursor passed these to SQL)
      ['old form, year 0000', b64(['0000-01-01T00:00:00.000Z', uuid])],
      ['old form, February 30', b64(['2024-02-30T00:00:00.000Z', uuid])],
      ['old form, year 275760', b64(['+275760-09-13T00:00:00.000Z', 'x'])],
      ['old form, "1" as a time', b64(['1', 'x'])],
      ['old form, NUL in the id', b64(['2024-01-01T00:00:00.000Z', 'a\u0000b'])],
      ['February 30', b64(['agents', '2024-02-30T00:00:00.000Z', uuid])],
      ['year 0000', b64(['agents', '0000-01-01T00:00:00.000Z', uuid])],
      ['hour 24', b64(['api_keys', '2024-01-01T24:00:00.000Z', uuid])],
      ['a five-digit year', b64(['revocations', '+10000-01-01T00:00:00.000Z', 'x'])],
      ['a NUL in the id', b64(['revocations', '2024-01-01T00:00:00.000Z', 'a\u0000b'])],
      ['a lone surrogate in the id', b64(['revocations', '2024-01-01T00:00:00.000Z', '\ud800'])],
      ['a NUL in the cursor text', 'abc%00def'],
      ['over-long', 'A'.repeat(201)],
      ['far over-long', 'A'.repeat(5000)],
    ]
    for (const [list, { path }] of Object.entries(lists)) {
      const others = Object.entries(lists).filter(([other]) => other !== list).map(([other, l]): [string, string] => [`a cursor of ${other}`, l.cursor])
      for (const [name, cursor] of [...forged, ...others]) {
        const before = await dbState(admin)
        const encoded = cursor.includes('%') ? cursor : encodeURIComponent(cursor)
        const res = await call('GET', `${path}&cursor=${encoded}`, list === 'revocations' ? { key: null } : {})
        const label = `${list} ← ${name}`
        // Longer than the list's query schema allows (200, revocations 300) is refused by the schema.
        const schemaLimit = list === 'revocations' ? 300 : 200
        expectError(t, res, 400, cursor.length > schemaLimit ? 'invalid_request' : 'invalid_cursor', label)
        t.same(await dbState(admin), before, `${label}: nothing changed`)
      }
      // A list's own cursor still works.
      const own = await call('GET', `${path}&cursor=${encodeURIComponent(lists[list as keyof typeof lists].cursor)}`, list === 'revocations' ? { key: null } : {})
      t.equal(own.status, 200, `${list}: its own cursor is accepted`)
    }
  })

  await t.test('out-of-range and malformed since on the public revocations list', async (t) => {
    const bad = [
      '10000-01-01T00:00:00Z', '+010000-01-01T00:00:00.000Z', '+275760-09-13T00:00:00.000Z', '-000001-01-01T00:00:00.000Z',
      '-271821-04-20T00:00:00.000Z', '0000-01-01T00:00:00Z', 'NaN', 'Infinity', '99999999999999999999', '1e400', '1', '-1',
      '2024-02-30T00:00:00Z', '2024-01-01T25:00:00Z', '2024-13-01', 'yesterday', '', ' ', '2024-01-01T00:00:00Z\u0000',
      'x'.repeat(65),
    ]
    // A lone surrogate cannot be percent-encoded as UTF-8; its CESU-8 bytes are what a client could send.
    const raw = [...bad.map(encodeURIComponent), '%ED%A0%80', '2024-01-01T00:00:00Z%ED%B0%80']
    for (const since of raw) {
      const before = await dbState(admin)
      const res = await call('GET', `/v1/revocations?since=${since}`, { key: null })
      expectError(t, res, 400, 'invalid_request', `since=${since.slice(0, 40)}`)
      t.same(await dbState(admin), before)
    }
    for (const since of ['2000-01-01T00:00:00.000Z', '2000-01-01T00:00:00Z', '2000-01-01T02:00:00+02:00', '2000-01-01', new Date().toISOString()]) {
      const res = await call('GET', `/v1/revocations?since=${encodeURIComponent(since)}`, { key: null })
      t.equal(res.status, 200, `since=${since} is accepted`)
    }
    const all = await call('GET', `/v1/revocations?since=${encodeURIComponent('2000-01-01T02:00:00+02:00')}`, { key: null })
    t.same((all.body.data.revocations as { jti: string }[]).map((r) => r.jti).sort(), [...revoked].sort(), 'an offset time selects the same revocations')
  })

  await t.test('the identity webhook: unsafe and over-long text in signed events', async (t) => {
    const events: [string, unknown][] = []
    for (const [name, value] of UNSAFE_TEXT) {
      events.push(
        [`user id ${name}`, clerkEvents.user('user.created', `user_${value}`, 'a@example.com', 'A', 'B')],
        [`first name ${name}`, clerkEvents.user('user.created', 'user_ok', 'a@example.com', value, 'B')],
        [`email ${name}`, clerkEvents.user('user.created', 'user_ok', `a${value}@example.com`, 'A', 'B')],
        [`organization name ${name}`, clerkEvents.organization('organization.created', 'org_ok', value)],
        [`membership org id ${name}`, clerkEvents.membership('organizationMembership.created', `org_${value}`, 'user_ok')],
        [`deleted user id ${name}`, clerkEvents.userDeleted(`user_${value}`)],
      )
    }
    events.push(
      ['user id of 201 characters', clerkEvents.user('user.created', 'u'.repeat(201), 'a@example.com', 'A', 'B')],
      ['email of 400 characters', clerkEvents.user('user.created', 'user_ok', `${'e'.repeat(400)}@example.com`, 'A', 'B')],
    )
    for (const [name, event] of events) {
      const before = await dbState(admin)
      const delivery = idp.signWebhook(event)
      const res = await call('POST', '/v1/webhooks/identity', { key: null, rawBody: delivery.body, headers: delivery.headers })
      expectError(t, res, 400, 'invalid_request', `webhook ← ${name}`)
      t.same(await dbState(admin), before, `webhook ← ${name}: nothing changed, not even the delivery record`)
    }
    // Long names are cut at 200 characters without splitting a surrogate pair.
    const longName = `${'n'.repeat(199)}\u{1F600}`
    const ok = idp.signWebhook(clerkEvents.organization('organization.created', 'org_long', longName))
    t.equal((await call('POST', '/v1/webhooks/identity', { key: null, rawBody: ok.body, headers: ok.headers })).status, 200)
    t.same(await db.query('SELECT name FROM organizations WHERE external_id = $1', ['org_long']), [{ name: 'n'.repeat(199) }])
  })

  t.ok(admin.logs.every((line) => !/"statusCode":5|"status":5\d\d/.test(line)), 'no 5xx was logged')
})
