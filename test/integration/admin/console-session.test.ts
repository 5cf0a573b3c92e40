/**
 * Operator console sessions (docs/console.md, "Sign-in and sessions"): sign-in with a key or a session
 * token, the cookie's flags, the cookie as a credential of the /v1 API, CSRF and Origin checks, sign-out,
 * idle and absolute expiry, and sessions ending with the key or membership they were made from.
 */
import { createHash } from 'node:crypto'
import t, { type Test } from 'tap'
import { API_KEY_CHANNEL } from '../../../src/core/notify-channels.js'
import { createOrg, startTestAdmin, type TestAdmin, type TestResponse } from '../../helpers/admin.js'
import { expectEnvelope, expectError, sleep, type Asserts } from '../../helpers/expect.js'
import { startIdentityProvider, TEST_ISSUER } from '../../helpers/identity-provider.js'

const COOKIE = 'agent_trust_console'

interface Signed {
  readonly secret: string
  readonly csrf: string
  readonly setCookie: string
  readonly data: any
}

async function signIn(t: Asserts, admin: TestAdmin, apiKey: string): Promise<Signed> {
  const res = await admin.request('POST', '/v1/console/session', { key: null, body: { api_key: apiKey } })
  const data = expectEnvelope(t, res, 201, 'sign-in')
  const setCookie = res.headers.get('set-cookie') ?? ''
  const secret = new RegExp(`^${COOKIE}=([A-Za-z0-9_-]+);`).exec(setCookie)?.[1] ?? ''
  return { secret, csrf: data.csrf_token, setCookie, data }
}

/** A request authenticated by the console cookie only, as the browser sends it. */
function withCookie(admin: TestAdmin, method: string, path: string, session: { secret: string }, options: {
  csrf?: string; origin?: string; body?: unknown; headers?: Record<string, string>
} = {}): Promise<TestResponse> {
  const headers: Record<string, string> = { cookie: `theme=dark; ${COOKIE}=${session.secret}`, ...options.headers }
  if (options.csrf !== undefined) headers['x-csrf-token'] = options.csrf
  if (options.origin !== undefined) headers.origin = options.origin
  return admin.request(method, path, { key: null, headers, ...(options.body === undefined ? {} : { body: options.body }) })
}

/** `GET /v1/console/session` answered "no session": 200 `{success: true, data: null}`, not cacheable. */
function expectNoSession(t: Test, res: TestResponse, label: string): unknown {
  t.equal(res.status, 200, `${label}: 200`)
  t.same(res.body, { success: true, data: null }, `${label}: data null`)
  t.equal(res.headers.get('cache-control'), 'no-store', `${label}: no-store`)
  return res.body
}

async function sessionRows(admin: TestAdmin): Promise<Record<string, any>[]> {
  return admin.database.db.query('SELECT * FROM console_sessions ORDER BY created_at')
}

async function agentCount(admin: TestAdmin, orgId: string): Promise<number> {
  const rows = await admin.database.db.query<{ n: number }>('SELECT count(*)::int AS n FROM agents WHERE org_id = $1', [orgId])
  return Number(rows[0]?.n)
}

t.test('console sessions from API keys', async (t) => {
  const admin = await startTestAdmin(t)
  const org = await createOrg(admin, 'console-org')
  const member = (await admin.request('POST', '/v1/keys', { key: org.key, body: { name: 'member', role: 'member' } })).body.data

  await t.test('sign-in sets an HttpOnly, SameSite=Strict cookie and stores only its digest', async (t) => {
    const signed = await signIn(t, admin, org.key)
    t.match(signed.secret, /^[A-Za-z0-9_-]{43}$/, '32 random bytes, base64url')
    const attributes = signed.setCookie.split(';').map((a) => a.trim())
    t.ok(attributes.includes('HttpOnly'), 'HttpOnly')
    t.ok(attributes.includes('SameSite=Strict'), 'SameSite=Strict')
    t.ok(attributes.includes('Path=/'), 'Path=/')
    t.notOk(attributes.includes('Secure'), 'no Secure over plain http outside production')
    const maxAge = Number(/Max-Age=(\d+)/.exec(signed.setCookie)?.[1])
    t.ok(maxAge > 8 * 3600 - 5 && maxAge <= 8 * 3600, `Max-Age is the absolute lifetime (${maxAge})`)
    t.match(signed.csrf, /^[A-Za-z0-9_-]{43}$/, 'a CSRF token')
    const expiresIn = Date.parse(signed.data.expires_at) - Date.now()
    t.ok(expiresIn > 8 * 3600_000 - 10_000 && expiresIn <= 8 * 3600_000 + 1000, 'expires_at 8 h ahead')
    t.same(signed.data.principal, {
      kind: 'api_key', org_id: org.orgId, org_name: 'console-org', role: 'admin', operator: false,
      key_id: signed.data.principal.key_id, user_id: signed.data.principal.user_id,
    })
    const rows = await admin.database.db.query<{ id: string; kind: string; api_key_id: string }>('SELECT * FROM console_sessions WHERE id = $1', [
      createHash('sha256').update(signed.secret).digest('hex'),
    ])
    t.equal(rows.length, 1, 'the row is named by the SHA-256 of the secret')
    t.equal(rows[0]?.api_key_id, signed.data.principal.key_id)
    t.notOk(JSON.stringify(await sessionRows(admin)).includes(signed.secret), 'the secret is stored nowhere')
    t.notOk(admin.logs.join('').includes(signed.secret), 'nor logged')
  })

  await t.test('a credential that does not sign in: 401 invalid_credentials, the same for every reason, nothing stored', async (t) => {
    const before = (await sessionRows(admin)).length
    const revoked = (await admin.request('POST', '/v1/keys', { key: org.key, body: { name: 'to-revoke' } })).body.data
    await admin.database.db.query(`UPDATE api_keys SET revoked_at = now(), revoke_reason = 'creator_deleted' WHERE id = $1`, [revoked.id])
    const cases: [string, unknown, Record<string, string>?][] = [
      ['an unknown key', { api_key: `sk_${'B'.repeat(43)}` }],
      ['not a key at all', { api_key: 'hello' }],
      ['a revoked key', { api_key: revoked.key }],
      ['an unknown bearer token', {}, { authorization: `Bearer sk_${'C'.repeat(43)}` }],
      ['a malformed Authorization header', {}, { authorization: 'Basic abc' }],
    ]
    const messages = new Set<string>()
    for (const [label, body, headers] of cases) {
      const res = await admin.request('POST', '/v1/console/session', { key: null, body, ...(headers === undefined ? {} : { headers }) })
      expectError(t, res, 401, 'invalid_credentials', label)
      t.equal(res.headers.get('set-cookie'), null, `${label}: no cookie`)
      messages.add(res.body.message)
    }
    t.equal(messages.size, 1, 'one message whatever the reason')
    expectError(t, await admin.request('POST', '/v1/console/session', { key: null, body: {} }), 400, 'invalid_request', 'no credential')
    expectError(t, await admin.request('POST', '/v1/console/session', { key: org.key, body: { api_key: org.key } }), 400, 'invalid_request', 'two credentials')
    expectError(t, await admin.request('POST', '/v1/console/session', { key: null, body: { api_key: 'x'.repeat(5000) } }), 400, 'invalid_request', 'an over-long key')
    expectError(t, await admin.request('POST', '/v1/console/session', { key: null, body: { api_key: org.key, role: 'admin' } }), 400, 'invalid_request', 'an unknown field')
    const foreign = await admin.request('POST', '/v1/console/session', { key: null, body: { api_key: org.key }, headers: { origin: 'https://evil.example' } })
    expectError(t, foreign, 403, 'csrf_failed', 'a sign-in from another origin')
    const form = await admin.request('POST', '/v1/console/session', { key: null, rawBody: `api_key=${org.key}`, headers: { 'content-type': 'application/x-www-form-urlencoded' } })
    expectError(t, form, 415, 'unsupported_media_type', 'a form post')
    const plain = await admin.request('POST', '/v1/console/session', { key: null, rawBody: JSON.stringify({ api_key: org.key }), headers: { 'content-type': 'text/plain' } })
    expectError(t, plain, 415, 'unsupported_media_type', 'a text/plain post (no preflight)')
    t.equal((await sessionRows(admin)).length, before, 'no session was stored')
    const own = await admin.request('POST', '/v1/console/session', { key: null, body: { api_key: org.key }, headers: { origin: admin.url } })
    t.equal(own.status, 201, 'a sign-in from this origin')
  })

  await t.test('GET /v1/console/session answers the live session', async (t) => {
    const signed = await signIn(t, admin, org.key)
    const res = await withCookie(admin, 'GET', '/v1/console/session', signed)
    const data = expectEnvelope(t, res, 200, 'read')
    t.equal(data.csrf_token, signed.csrf, 'the same CSRF token')
    t.equal(data.expires_at, signed.data.expires_at)
    t.same(data.principal, signed.data.principal)
    t.equal(res.headers.get('cache-control'), 'no-store')
    const twice = await admin.request('GET', '/v1/console/session', {
      key: null, headers: { cookie: `${COOKIE}=${signed.secret}; ${COOKIE}=${'A'.repeat(43)}` },
    })
    expectError(t, twice, 401, 'unauthorized', 'two different console cookies')
  })

  await t.test('GET /v1/console/session without a live session: 200 data null, never a failed request', async (t) => {
    const none = await admin.request('GET', '/v1/console/session', { key: null })
    t.same(expectNoSession(t, none, 'no cookie'), { success: true, data: null })
    t.equal(none.headers.get('set-cookie'), null, 'nothing to clear')
    expectNoSession(t, await admin.request('GET', '/v1/console/session', { key: org.key }), 'a header credential is no console session')
    const signed = await signIn(t, admin, org.key)
    expectNoSession(t, await admin.request('GET', '/v1/console/session', { key: org.key, headers: { cookie: `${COOKIE}=${signed.secret}` } }),
      'a header credential wins over a live cookie')
    for (const [label, secret] of [['an unknown cookie', 'A'.repeat(43)], ['a malformed cookie', 'short']] as const) {
      const res = await withCookie(admin, 'GET', '/v1/console/session', { secret })
      expectNoSession(t, res, label)
      const cleared = res.headers.get('set-cookie') ?? ''
      t.match(cleared, new RegExp(`^${COOKIE}=;`), `${label}: the cookie is cleared`)
      t.match(cleared, /Max-Age=0/)
      t.match(cleared, /HttpOnly/)
      t.match(cleared, /SameSite=Strict/)
    }
    t.equal((await withCookie(admin, 'GET', '/v1/console/session', signed)).status, 200, 'the live session is still answered')
    t.not((await withCookie(admin, 'GET', '/v1/console/session', signed)).body.data, null)
  })

  await t.test('the cookie is a credential of the API; writes need the CSRF token and this origin', async (t) => {
    const signed = await signIn(t, admin, org.key)
    const list = await withCookie(admin, 'GET', '/v1/agents', signed)
    t.equal(list.status, 200, 'a read needs no CSRF token')
    const before = await agentCount(admin, org.orgId)
    expectError(t, await withCookie(admin, 'POST', '/v1/agents', signed, { body: { name: 'no-csrf' } }), 403, 'csrf_failed', 'no CSRF header')
    expectError(t, await withCookie(admin, 'POST', '/v1/agents', signed, { body: { name: 'bad-csrf' }, csrf: 'x'.repeat(43) }), 403, 'csrf_failed', 'a wrong token')
    expectError(t, await withCookie(admin, 'POST', '/v1/agents', signed, { body: { name: 'short-csrf' }, csrf: 'x' }), 403, 'csrf_failed', 'a token of another length')
    expectError(t, await withCookie(admin, 'POST', '/v1/agents', signed, { body: { name: 'forged' }, csrf: signed.csrf, origin: 'https://evil.example' }), 403, 'csrf_failed', 'a forged Origin')
    expectError(t, await withCookie(admin, 'POST', '/v1/agents', signed, { body: { name: 'null-origin' }, csrf: signed.csrf, origin: 'null' }), 403, 'csrf_failed', 'Origin null')
    const other = await signIn(t, admin, org.key)
    expectError(t, await withCookie(admin, 'POST', '/v1/agents', signed, { body: { name: 'other-token' }, csrf: other.csrf }), 403, 'csrf_failed', 'another session\'s token')
    t.equal(await agentCount(admin, org.orgId), before, 'the refused writes changed nothing')

    t.equal((await withCookie(admin, 'POST', '/v1/agents', signed, { body: { name: 'with-csrf' }, csrf: signed.csrf })).status, 201, 'token, no Origin')
    t.equal((await withCookie(admin, 'POST', '/v1/agents', signed, { body: { name: 'own-origin' }, csrf: signed.csrf, origin: admin.url })).status, 201, 'token and the request\'s own origin')
    t.equal((await withCookie(admin, 'POST', '/v1/agents', signed, { body: { name: 'public-origin' }, csrf: signed.csrf, origin: 'http://registry.test:8080' })).status, 201, 'token and the configured public origin (CA_ISSUER_URL)')
    t.equal(await agentCount(admin, org.orgId), before + 3)

    // A header credential wins over the cookie and needs no CSRF token.
    const viaHeader = await admin.request('POST', '/v1/agents', { key: admin.operatorKey, headers: { cookie: `${COOKIE}=${signed.secret}` }, body: { name: 'operator-agent' } })
    t.equal(viaHeader.status, 201, 'the header credential acts, without CSRF')
    const me = await admin.request('GET', '/v1/me', { key: admin.operatorKey, headers: { cookie: `${COOKIE}=${signed.secret}` } })
    t.equal(me.body.data.operator, true, 'as the header\'s principal')
  })

  await t.test('member and admin roles through the cookie', async (t) => {
    const asMember = await signIn(t, admin, member.key)
    t.equal(asMember.data.principal.role, 'member')
    expectError(t, await withCookie(admin, 'POST', '/v1/agents', asMember, { body: { name: 'member-write' }, csrf: asMember.csrf }), 403, 'forbidden', 'a member is refused a write')
    t.equal((await withCookie(admin, 'GET', '/v1/agents', asMember)).status, 200, 'a member reads')
    const asAdmin = await signIn(t, admin, org.key)
    t.equal((await withCookie(admin, 'POST', '/v1/agents', asAdmin, { body: { name: 'admin-write' }, csrf: asAdmin.csrf })).status, 201, 'an admin writes')
  })

  await t.test('sign-out needs the CSRF token, deletes the session and clears the cookie', async (t) => {
    const signed = await signIn(t, admin, org.key)
    const digest = createHash('sha256').update(signed.secret).digest('hex')
    expectError(t, await withCookie(admin, 'DELETE', '/v1/console/session', signed), 403, 'csrf_failed', 'no CSRF header')
    t.equal((await withCookie(admin, 'GET', '/v1/console/session', signed)).status, 200, 'still signed in')
    const out = await withCookie(admin, 'DELETE', '/v1/console/session', signed, { csrf: signed.csrf })
    t.equal(out.status, 204)
    const cleared = out.headers.get('set-cookie') ?? ''
    t.match(cleared, new RegExp(`^${COOKIE}=;`), 'the cookie is emptied')
    t.match(cleared, /Max-Age=0/, 'and expires now')
    t.match(cleared, /HttpOnly/)
    t.equal((await admin.database.db.query('SELECT 1 FROM console_sessions WHERE id = $1', [digest])).length, 0, 'the row is gone')
    expectNoSession(t, await withCookie(admin, 'GET', '/v1/console/session', signed), 'signed out')
    expectError(t, await withCookie(admin, 'GET', '/v1/agents', signed), 401, 'unauthorized', 'the cookie no longer works anywhere')
  })

  await t.test('idle and absolute expiry: the session ends and the row is deleted', async (t) => {
    const idle = await signIn(t, admin, org.key)
    const idleId = createHash('sha256').update(idle.secret).digest('hex')
    await admin.database.db.query(`UPDATE console_sessions SET last_seen_at = now() - interval '29 minutes' WHERE id = $1`, [idleId])
    t.equal((await withCookie(admin, 'GET', '/v1/agents', idle)).status, 200, 'within the 30 min idle time')
    const touched = await admin.database.db.query<{ age: number }>('SELECT extract(epoch FROM now() - last_seen_at)::float8 AS age FROM console_sessions WHERE id = $1', [idleId])
    t.ok(Number(touched[0]?.age) < 5, 'the request refreshed last_seen_at')
    await admin.database.db.query(`UPDATE console_sessions SET last_seen_at = now() - interval '31 minutes' WHERE id = $1`, [idleId])
    expectError(t, await withCookie(admin, 'GET', '/v1/agents', idle), 401, 'unauthorized', 'idle for 31 min')
    t.equal((await admin.database.db.query('SELECT 1 FROM console_sessions WHERE id = $1', [idleId])).length, 0, 'the idle session was deleted')

    const old = await signIn(t, admin, org.key)
    const oldId = createHash('sha256').update(old.secret).digest('hex')
    await admin.database.db.query(`UPDATE console_sessions SET expires_at = now() - interval '1 second' WHERE id = $1`, [oldId])
    expectNoSession(t, await withCookie(admin, 'GET', '/v1/console/session', old), 'past the absolute end')
    t.equal((await admin.database.db.query('SELECT 1 FROM console_sessions WHERE id = $1', [oldId])).length, 0, 'the expired session was deleted')
  })

  await t.test('last_seen_at is written at most once a minute', async (t) => {
    const signed = await signIn(t, admin, org.key)
    const id = createHash('sha256').update(signed.secret).digest('hex')
    await admin.database.db.query(`UPDATE console_sessions SET last_seen_at = now() - interval '30 seconds' WHERE id = $1`, [id])
    const read = async (): Promise<string> => String((await admin.database.db.query<{ s: string }>('SELECT last_seen_at::text AS s FROM console_sessions WHERE id = $1', [id]))[0]?.s)
    const before = await read()
    for (let i = 0; i < 3; i++) t.equal((await withCookie(admin, 'GET', '/v1/agents', signed)).status, 200)
    t.equal(await read(), before, 'no write for requests within the minute')
    await admin.database.db.query(`UPDATE console_sessions SET last_seen_at = now() - interval '61 seconds' WHERE id = $1`, [id])
    const stale = await read()
    t.equal((await withCookie(admin, 'GET', '/v1/agents', signed)).status, 200)
    t.not(await read(), stale, 'written once it is a minute old')
  })

  await t.test('deleting the key ends its sessions', async (t) => {
    const made = (await admin.request('POST', '/v1/keys', { key: org.key, body: { name: 'short-lived' } })).body.data
    const signed = await signIn(t, admin, made.key)
    t.equal((await withCookie(admin, 'GET', '/v1/agents', signed)).status, 200)
    t.equal((await admin.request('DELETE', `/v1/keys/${made.id}`, { key: org.key })).status, 204)
    expectError(t, await withCookie(admin, 'GET', '/v1/agents', signed), 401, 'unauthorized', 'the key\'s session ends with it')
    t.equal((await admin.database.db.query('SELECT 1 FROM console_sessions WHERE api_key_id = $1', [made.id])).length, 0, 'its rows are gone')
  })

  await t.test('a session follows its key: a revoked key ends it', async (t) => {
    const made = (await admin.request('POST', '/v1/keys', { key: org.key, body: { name: 'to-be-revoked' } })).body.data
    const signed = await signIn(t, admin, made.key)
    t.equal((await withCookie(admin, 'GET', '/v1/agents', signed)).status, 200)
    await admin.database.db.transaction(async (tx) => {
      await tx.query(`UPDATE api_keys SET revoked_at = now(), revoke_reason = 'membership_removed' WHERE id = $1`, [made.id])
      await tx.query('SELECT pg_notify($1, $2)', [API_KEY_CHANNEL, made.id])
    })
    let status = 200
    const started = Date.now()
    while (status === 200 && Date.now() - started < 7_000) {
      status = (await withCookie(admin, 'GET', '/v1/agents', signed)).status
      if (status === 200) await sleep(200)
    }
    t.equal(status, 401, 'refused once the key is revoked')
    t.equal((await admin.database.db.query('SELECT 1 FROM console_sessions WHERE api_key_id = $1', [made.id])).length, 0, 'and the session deleted')
  })
})

t.test('sign-in attempts are limited per address', async (t) => {
  const admin = await startTestAdmin(t)
  let status = 0
  let attempts = 0
  while (attempts < 40) {
    attempts++
    const res = await admin.request('POST', '/v1/console/session', { key: null, body: { api_key: `sk_${'D'.repeat(43)}` } })
    status = res.status
    if (status === 429) {
      expectError(t, res, 429, 'rate_limit_exceeded', 'over the sign-in limit')
      break
    }
  }
  t.equal(status, 429, 'the address is limited')
  t.equal(attempts, 31, 'after 30 attempts in a minute')
})

t.test('cookies that name no live session count as failed authentications on GET /v1/console/session too', async (t) => {
  // Five failures a minute per address: three dead cookies here, then the third wrong key elsewhere is the sixth.
  const admin = await startTestAdmin(t, { SERVICE_RATE_LIMIT_PER_MINUTE: '5' })
  for (let i = 0; i < 3; i++) expectNoSession(t, await withCookie(admin, 'GET', '/v1/console/session', { secret: String(i).repeat(43) }), `dead cookie ${i}`)
  const statuses: number[] = []
  for (let i = 0; i < 3; i++) statuses.push((await admin.request('GET', '/v1/agents', { key: `sk_${String(i).repeat(43)}` })).status)
  t.same(statuses, [401, 401, 429], 'the dead cookies were counted with the wrong keys')
})

t.test('Secure cookie when ENVIRONMENT=production', async (t) => {
  const admin = await startTestAdmin(t, { ENVIRONMENT: 'production', SERVICE_ALLOW_EMBEDDED_DB: 'true', CA_ISSUER_URL: 'https://registry.test' })
  const signed = await signIn(t, admin, admin.operatorKey)
  t.ok(signed.setCookie.split(';').map((a) => a.trim()).includes('Secure'), 'Secure')
  t.equal(signed.data.principal.operator, true)
  const out = await withCookie(admin, 'DELETE', '/v1/console/session', signed, { csrf: signed.csrf, origin: 'https://registry.test' })
  t.equal(out.status, 204, 'the configured https origin is this admin plane\'s')
  t.match(out.headers.get('set-cookie') ?? '', /Secure/, 'the clearing cookie too')
})

t.test('console sessions from identity-provider session tokens', async (t) => {
  const idp = await startIdentityProvider(t)
  const admin = await startTestAdmin(t, { SERVICE_AUTH_JWKS_URL: idp.jwksUrl, SERVICE_AUTH_ISSUER: TEST_ISSUER, SERVICE_CONSOLE_SESSION_MAX: '1h' })
  const org = await createOrg(admin, 'idp-org')
  await admin.database.db.query('UPDATE organizations SET external_id = $1 WHERE id = $2', ['org_X', org.orgId])
  await admin.database.db.query('INSERT INTO users (id, email) VALUES ($1, $2), ($3, $4)', ['user_admin', 'a@example.com', 'user_member', 'm@example.com'])
  await admin.database.db.query(`INSERT INTO memberships (org_id, user_id, role) VALUES ($1, 'user_admin', 'admin'), ($1, 'user_member', 'member')`, [org.orgId])

  const signInWithToken = (token: string): Promise<TestResponse> =>
    admin.request('POST', '/v1/console/session', { key: null, headers: { authorization: `Bearer ${token}` }, body: {} })

  await t.test('a dashboard user signs in with the token and `{}`', async (t) => {
    const exp = Math.floor(Date.now() / 1000) + 600
    const res = await signInWithToken(await idp.signSession({ sub: 'user_admin', org_id: 'org_X' }, { exp }))
    const data = expectEnvelope(t, res, 201, 'token sign-in')
    t.same(data.principal, { kind: 'session', org_id: org.orgId, org_name: 'idp-org', role: 'admin', operator: false, key_id: null, user_id: 'user_admin' })
    t.equal(data.expires_at, new Date(exp * 1000).toISOString(), 'the session ends at the token\'s exp, before SERVICE_CONSOLE_SESSION_MAX')
    const maxAge = Number(/Max-Age=(\d+)/.exec(res.headers.get('set-cookie') ?? '')?.[1])
    t.ok(maxAge > 590 && maxAge <= 600, `the cookie lives as long (${maxAge})`)
    const secret = /agent_trust_console=([^;]+)/.exec(res.headers.get('set-cookie') ?? '')?.[1] ?? ''
    t.equal((await withCookie(admin, 'POST', '/v1/agents', { secret }, { body: { name: 'by-idp-cookie' }, csrf: data.csrf_token })).status, 201, 'an admin writes through the cookie')

    await admin.database.db.query(`UPDATE console_sessions SET idp_expires_at = now() - interval '1 second' WHERE user_id = 'user_admin'`)
    expectError(t, await withCookie(admin, 'GET', '/v1/agents', { secret }), 401, 'unauthorized', 'past the token\'s exp')
    t.equal((await admin.database.db.query(`SELECT 1 FROM console_sessions WHERE user_id = 'user_admin'`)).length, 0, 'deleted')
  })

  await t.test('without the token\'s exp bound, the configured maximum applies', async (t) => {
    const res = await signInWithToken(await idp.signSession({ sub: 'user_member', org_id: 'org_X' }, { exp: Math.floor(Date.now() / 1000) + 7200 }))
    const data = expectEnvelope(t, res, 201, 'token sign-in')
    const expiresIn = Date.parse(data.expires_at) - Date.now()
    t.ok(expiresIn > 3600_000 - 10_000 && expiresIn <= 3600_000 + 1000, 'SERVICE_CONSOLE_SESSION_MAX=1h')
  })

  await t.test('the session follows the membership', async (t) => {
    const res = await signInWithToken(await idp.signSession({ sub: 'user_member', org_id: 'org_X' }))
    const data = expectEnvelope(t, res, 201, 'token sign-in')
    const secret = /agent_trust_console=([^;]+)/.exec(res.headers.get('set-cookie') ?? '')?.[1] ?? ''
    expectError(t, await withCookie(admin, 'POST', '/v1/agents', { secret }, { body: { name: 'member' }, csrf: data.csrf_token }), 403, 'forbidden', 'a member is refused a write')
    await admin.database.db.query(`DELETE FROM memberships WHERE user_id = 'user_member'`)
    let status = 200
    const started = Date.now()
    while (status === 200 && Date.now() - started < 7_000) {
      status = (await withCookie(admin, 'GET', '/v1/agents', { secret })).status
      if (status === 200) await sleep(250)
    }
    t.equal(status, 401, 'refused once the membership is gone')
    t.ok(Date.now() - started <= 6_000, 'within about the membership cache time')
  })

  await t.test('tokens that do not sign in', async (t) => {
    const now = Math.floor(Date.now() / 1000)
    expectError(t, await signInWithToken(await idp.signSession({ sub: 'user_admin', org_id: 'org_X' }, { foreignKey: true })), 401, 'invalid_credentials', 'a foreign signature')
    expectError(t, await signInWithToken(await idp.signSession({ sub: 'user_ghost', org_id: 'org_X' })), 401, 'invalid_credentials', 'no membership')
    expectError(t, await signInWithToken(await idp.signSession({ sub: 'user_admin', org_id: 'org_X' }, { exp: now - 30 })), 401, 'invalid_credentials', 'expired within the verifier\'s clock tolerance')
  })
})
