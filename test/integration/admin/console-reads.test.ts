/**
 * What the operator console reads (docs/console.md, "Who am I, organizations", "Agents and badges"):
 * GET /v1/me, GET /v1/orgs, the agent search, an agent's badges and groups.
 */
import t from 'tap'
import { createOrg, startTestAdmin, type TestAdmin } from '../../helpers/admin.js'
import { expectEnvelope, expectError, ISO_UTC_RE } from '../../helpers/expect.js'

async function newAgent(admin: TestAdmin, key: string, body: Record<string, unknown>): Promise<any> {
  const res = await admin.request('POST', '/v1/agents', { key, body })
  if (res.status !== 201) throw new Error(res.text)
  return res.body.data
}

t.test('console reads', async (t) => {
  const admin = await startTestAdmin(t)
  const a = await createOrg(admin, 'reads-a')
  const b = await createOrg(admin, 'reads-b')
  const member = (await admin.request('POST', '/v1/keys', { key: a.key, body: { name: 'reader', role: 'member' } })).body.data

  await t.test('GET /v1/me names the credential', async (t) => {
    const asAdmin = expectEnvelope(t, await admin.request('GET', '/v1/me', { key: a.key }), 200, 'org admin key')
    t.same(asAdmin, {
      kind: 'api_key', org_id: a.orgId, org_name: 'reads-a', role: 'admin', operator: false,
      key_id: asAdmin.key_id, user_id: asAdmin.user_id,
    })
    t.match(asAdmin.key_id, /^[0-9a-f-]{36}$/)
    t.type(asAdmin.user_id, 'string', 'the user the key acts for')
    const asMember = expectEnvelope(t, await admin.request('GET', '/v1/me', { key: member.key }), 200, 'member key')
    t.equal(asMember.role, 'member')
    t.equal(asMember.key_id, member.id)
    const asOperator = expectEnvelope(t, await admin.request('GET', '/v1/me'), 200, 'operator key')
    t.equal(asOperator.operator, true)
    t.equal(asOperator.org_name, 'default')
    expectError(t, await admin.request('GET', '/v1/me', { key: null }), 401, 'unauthorized', 'no credential')
    t.notOk(JSON.stringify(asAdmin).includes(a.key), 'never the secret')

    // and through the console cookie
    const signed = await admin.request('POST', '/v1/console/session', { key: null, body: { api_key: member.key } })
    const cookie = (signed.headers.get('set-cookie') ?? '').split(';')[0] as string
    const viaCookie = expectEnvelope(t, await admin.request('GET', '/v1/me', { key: null, headers: { cookie } }), 200, 'cookie')
    t.same(viaCookie, asMember, 'the same answer through the cookie')
  })

  await t.test('GET /v1/orgs: a member sees its own organization, an operator all, paged', async (t) => {
    const own = await admin.request('GET', '/v1/orgs', { key: member.key })
    expectEnvelope(t, own, 200, 'member')
    t.same(own.body.data.map((o: { id: string }) => o.id), [a.orgId], 'only its own')
    t.equal(own.body.nextCursor, null)
    t.match(own.body.data[0], { id: a.orgId, name: 'reads-a', createdAt: ISO_UTC_RE })

    const all = await admin.request('GET', '/v1/orgs?limit=500')
    t.same(all.body.data.map((o: { name: string }) => o.name), ['default', 'reads-a', 'reads-b'], 'every org, oldest first')
    const seen: string[] = []
    let cursor: string | null = null
    let pages = 0
    do {
      const page: any = await admin.request('GET', `/v1/orgs?limit=1${cursor === null ? '' : `&cursor=${cursor}`}`)
      t.equal(page.status, 200)
      seen.push(...page.body.data.map((o: { name: string }) => o.name))
      cursor = page.body.nextCursor
      pages++
    } while (cursor !== null && pages < 10)
    t.same(seen, ['default', 'reads-a', 'reads-b'], 'the pages cover every org once')

    expectError(t, await admin.request('GET', '/v1/orgs?cursor=forged'), 400, 'invalid_cursor', 'a forged cursor')
    const agentsCursor = (await admin.request('GET', '/v1/agents?limit=1')).body.nextCursor
    if (agentsCursor !== null) expectError(t, await admin.request('GET', `/v1/orgs?cursor=${agentsCursor}`), 400, 'invalid_cursor', 'another list\'s cursor')
    expectError(t, await admin.request('GET', '/v1/orgs?limit=0'), 400, 'invalid_request', 'limit 0')
    expectError(t, await admin.request('GET', '/v1/orgs?cursor=forged', { key: member.key }), 400, 'invalid_cursor', 'a member\'s forged cursor')
  })

  await t.test('GET /v1/agents?q= searches name, domain and DID, without LIKE wildcards', async (t) => {
    const weather = await newAgent(admin, a.key, { name: 'Weather_Bot', domain: 'weather.example.com' })
    const percent = await newAgent(admin, a.key, { name: 'discount 50% bot' })
    const underscoreless = await newAgent(admin, a.key, { name: 'WeatherXBot' })
    const backslash = await newAgent(admin, a.key, { name: 'path\\agent' })
    const withDid = await newAgent(admin, a.key, { name: 'keyed', did: 'did:web:agents.example.org:Keyed' })
    await newAgent(admin, b.key, { name: 'weather of b' })

    const search = async (q: string, key = a.key): Promise<string[]> => {
      const res = await admin.request('GET', `/v1/agents?q=${encodeURIComponent(q)}&limit=500`, { key })
      t.equal(res.status, 200, `q=${q}`)
      return res.body.data.map((agent: { id: string }) => agent.id).sort()
    }
    t.same(await search('weather'), [weather.id, underscoreless.id].sort(), 'substring of the name, any case, own org only')
    t.same(await search('WEATHER_'), [weather.id], '`_` is a literal underscore, not any character')
    t.same(await search('% b'), [percent.id], '`%` is a literal percent sign')
    t.same(await search('50%'), [percent.id])
    t.same(await search('%'), [weather.id, percent.id, underscoreless.id, backslash.id].sort(),
      'a lone `%` matches the agents known by the registry did:web (its port is percent-encoded), not the one with its own DID')
    t.same(await search('\\'), [backslash.id], 'a backslash is literal')
    t.same(await search('EXAMPLE.COM'), [weather.id], 'the domain')
    t.same(await search('agents.example.org:keyed'), [withDid.id], 'the explicit DID')
    t.same(await search(`agents:${weather.id.slice(0, 8)}`), [weather.id], 'the registry did:web of an agent without a DID')
    t.same(await search('nothing-like-this'), [])
    t.equal((await admin.request('GET', '/v1/agents?q=', { key: a.key })).body.data.length, 5, 'an empty q lists everything')

    const first = await admin.request('GET', '/v1/agents?q=weather&limit=1', { key: a.key })
    t.equal(first.body.data.length, 1)
    t.type(first.body.nextCursor, 'string', 'search results are paged')
    const second = await admin.request('GET', `/v1/agents?q=weather&limit=1&cursor=${first.body.nextCursor}`, { key: a.key })
    t.equal(second.body.data.length, 1)
    t.not(second.body.data[0].id, first.body.data[0].id)
    t.equal(second.body.nextCursor, null)

    expectError(t, await admin.request('GET', `/v1/agents?q=${'x'.repeat(201)}`, { key: a.key }), 400, 'invalid_request', 'q over 200 characters')
    t.equal((await admin.request('GET', `/v1/agents?q=${'x'.repeat(200)}`, { key: a.key })).status, 200, '200 characters are fine')
    expectError(t, await admin.request('GET', '/v1/agents?q=a%00b', { key: a.key }), 400, 'invalid_request', 'a NUL')
  })

  await t.test('GET /v1/agents/{id}/badges: newest first, paged, never a token', async (t) => {
    const agent = await newAgent(admin, a.key, { name: 'badged', domain: 'badged.example.com' })
    const tokens: string[] = []
    const jtis: string[] = []
    for (let i = 0; i < 3; i++) {
      const res = await admin.request('POST', `/v1/agents/${agent.id}/badge`, { key: a.key, body: { domain: 'badged.example.com', ttl: 300 + i } })
      t.equal(res.status, 200)
      tokens.push(res.body.data.token)
      jtis.push(res.body.data.jti)
    }
    // distinct issue times (badges carry whole seconds), so the order is by time rather than by jti
    await admin.database.db.query(`UPDATE badges SET issued_at = issued_at - make_interval(secs => $2) WHERE jti = $1`, [jtis[0], 20])
    await admin.database.db.query(`UPDATE badges SET issued_at = issued_at - make_interval(secs => $2) WHERE jti = $1`, [jtis[1], 10])
    const revoked = await admin.request('POST', `/v1/badges/${jtis[1]}/revoke`, { key: a.key, body: { reason: 'rotated' } })
    t.equal(revoked.status, 200)

    const list = await admin.request('GET', `/v1/agents/${agent.id}/badges`, { key: member.key })
    expectEnvelope(t, list, 200, 'a member lists')
    t.same(list.body.data.map((badge: { jti: string }) => badge.jti), [jtis[2], jtis[1], jtis[0]], 'newest first')
    t.equal(list.body.nextCursor, null)
    t.same(Object.keys(list.body.data[0]).sort(), ['expiresAt', 'ial', 'issuedAt', 'jti', 'reason', 'revoked', 'revokedAt', 'subject', 'trustLevel'])
    t.match(list.body.data[1], { subject: agent.did, trustLevel: '1', ial: '0', issuedAt: ISO_UTC_RE, expiresAt: ISO_UTC_RE, revoked: true, revokedAt: ISO_UTC_RE, reason: 'rotated' })
    t.match(list.body.data[0], { revoked: false, revokedAt: null, reason: null })
    for (const token of tokens) t.notOk(list.text.includes(token.split('.')[2] as string), 'no token in the answer')

    const seen: string[] = []
    let cursor: string | null = null
    let pages = 0
    do {
      const page: any = await admin.request('GET', `/v1/agents/${agent.id}/badges?limit=2${cursor === null ? '' : `&cursor=${cursor}`}`, { key: a.key })
      t.equal(page.status, 200)
      seen.push(...page.body.data.map((badge: { jti: string }) => badge.jti))
      cursor = page.body.nextCursor
      pages++
    } while (cursor !== null && pages < 5)
    t.same(seen, [jtis[2], jtis[1], jtis[0]], 'pages of two cover every badge once, in order')
    t.equal(pages, 2)

    t.same((await admin.request('GET', `/v1/agents/${agent.id}/badges`, { key: a.key })).body.data.length, 3)
    expectError(t, await admin.request('GET', `/v1/agents/${agent.id}/badges`, { key: b.key }), 404, 'agent_not_found', 'another org\'s agent')
    expectError(t, await admin.request('GET', '/v1/agents/00000000-0000-4000-8000-000000000000/badges', { key: a.key }), 404, 'agent_not_found', 'an unknown agent')
    expectError(t, await admin.request('GET', '/v1/agents/not-a-uuid/badges', { key: a.key }), 400, 'invalid_id', 'not a UUID')
    expectError(t, await admin.request('GET', `/v1/agents/${agent.id}/badges?cursor=forged`, { key: a.key }), 400, 'invalid_cursor', 'a forged cursor')
    const orgCursor = (await admin.request('GET', '/v1/orgs?limit=1')).body.nextCursor as string
    expectError(t, await admin.request('GET', `/v1/agents/${agent.id}/badges?cursor=${orgCursor}`, { key: a.key }), 400, 'invalid_cursor', 'another list\'s cursor')
    expectError(t, await admin.request('GET', `/v1/agents/${agent.id}/badges`, { key: null }), 401, 'unauthorized', 'no credential')
    const none = await newAgent(admin, a.key, { name: 'unbadged' })
    t.same((await admin.request('GET', `/v1/agents/${none.id}/badges`, { key: a.key })).body, { success: true, data: [], nextCursor: null })
  })

  await t.test('GET /v1/agents/{id}/groups: the agent\'s groups, highest priority first', async (t) => {
    const agent = await newAgent(admin, a.key, { name: 'grouped' })
    const base = `/v1/orgs/${a.orgId}/groups`
    const ops = (await admin.request('POST', base, { key: a.key, body: { name: 'ops', precedence: 20 } })).body
    const vip = (await admin.request('POST', base, { key: a.key, body: { name: 'vip', precedence: 5 } })).body
    await admin.request('POST', base, { key: a.key, body: { name: 'unrelated', precedence: 1 } })
    for (const group of [ops, vip]) {
      t.equal((await admin.request('PUT', `${base}/${group.id}/agents/${agent.id}`, { key: a.key })).status, 204)
    }
    const res = await admin.request('GET', `/v1/agents/${agent.id}/groups`, { key: member.key })
    t.equal(res.status, 200, 'a member reads')
    t.same(res.body, [{ id: vip.id, name: 'vip', precedence: 5 }, { id: ops.id, name: 'ops', precedence: 20 }], 'a bare array, lowest precedence first')
    const loner = await newAgent(admin, a.key, { name: 'loner' })
    t.same((await admin.request('GET', `/v1/agents/${loner.id}/groups`, { key: a.key })).body, [], 'no groups')
    expectError(t, await admin.request('GET', `/v1/agents/${agent.id}/groups`, { key: b.key }), 404, 'agent_not_found', 'another org\'s agent')
    expectError(t, await admin.request('GET', '/v1/agents/not-a-uuid/groups', { key: a.key }), 400, 'invalid_id', 'not a UUID')
  })
})
