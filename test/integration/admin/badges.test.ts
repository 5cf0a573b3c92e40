import t from 'tap'
import { createLocalJWKSet, jwtVerify, decodeProtectedHeader } from 'jose'
import { createHmac, generateKeyPairSync, sign } from 'node:crypto'
import { createOrg, startTestAdmin, type TestAdmin } from '../../helpers/admin.js'

const ISSUER = 'http://registry.test:8080'

const b64 = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString('base64url')

async function newAgent(admin: TestAdmin, body: Record<string, unknown> = {}, key?: string): Promise<any> {
  const res = await admin.request('POST', '/v1/agents', { body: { name: 'badge-agent', domain: 'agent.example.com', ...body }, ...(key === undefined ? {} : { key }) })
  if (res.status !== 201) throw new Error(res.text)
  return res.body.data
}

async function issue(admin: TestAdmin, ref: string, body: Record<string, unknown>, key?: string | null): Promise<{ status: number; body: any }> {
  return admin.request('POST', `/v1/agents/${encodeURIComponent(ref)}/badge`, { body, ...(key === undefined ? {} : { key }) })
}

async function verify(admin: TestAdmin, token: string, audience?: string[]): Promise<any> {
  const res = await admin.request('POST', '/v1/badges/verify', { body: { token, ...(audience === undefined ? {} : { audience }) } })
  t.equal(res.status, 200, 'verify answers 200 for any token')
  return res.body.data
}

t.test('an issued badge verifies with jose against the served JWKS alone, with the exact header and claims', async (t) => {
  const admin = await startTestAdmin(t)
  const agent = await newAgent(admin)
  const res = await issue(admin, agent.id, { domain: 'agent.example.com', audience: ['https://verifier.example.com'], ttl: 600 })
  t.equal(res.status, 200)
  const data = res.body.data
  t.match(data, { subject: agent.did, trustLevel: '1', ial: '0' })

  const jwksRes = await fetch(`${admin.url}/.well-known/jwks.json`)
  t.equal(jwksRes.status, 200)
  t.match(jwksRes.headers.get('cache-control') ?? '', /max-age=\d+/)
  const jwks = await jwksRes.json() as { keys: Record<string, unknown>[] }
  t.equal(jwks.keys.length, 1)
  t.same(Object.keys(jwks.keys[0] ?? {}).sort(), ['alg', 'crv', 'kid', 'kty', 'use', 'x'], 'no private member in the JWKS')
  t.match(jwks.keys[0], { kty: 'OKP', crv: 'Ed25519', alg: 'EdDSA', use: 'sig', kid: /^service-ca-\d+$/ })

  const header = decodeProtectedHeader(data.token)
  t.same(header, { alg: 'EdDSA', typ: 'JWT', kid: jwks.keys[0]?.kid })
  const { payload } = await jwtVerify(data.token, createLocalJWKSet(jwks as never), { issuer: ISSUER, algorithms: ['EdDSA'] })
  t.same(Object.keys(payload).sort(), ['aud', 'exp', 'ial', 'iat', 'iss', 'jti', 'sub', 'vc'])
  t.equal(payload.jti, data.jti)
  t.equal(payload.sub, agent.did)
  t.equal(payload.ial, '0')
  t.same(payload.aud, ['https://verifier.example.com'])
  t.equal((payload.exp as number) - (payload.iat as number), 600)
  t.same(payload.vc, { type: ['VerifiableCredential', 'AgentIdentity'], credentialSubject: { domain: 'agent.example.com', level: '1' } })
  t.equal(new Date(data.expiresAt).getTime(), (payload.exp as number) * 1000)

  const verified = await verify(admin, data.token)
  t.equal(verified.valid, true)
  t.equal(verified.claims.sub, agent.did)
  t.equal(verified.claims.vc.credentialSubject.level, '1')

  const etag = jwksRes.headers.get('etag') as string
  const notModified = await fetch(`${admin.url}/.well-known/jwks.json`, { headers: { 'if-none-match': etag } })
  t.equal(notModified.status, 304, 'ETag revalidation')

  // The authority metadata names the issuer as badges spell it, though this client reached 127.0.0.1.
  const metadata = await fetch(`${admin.url}/.well-known/service-authority`)
  t.equal(metadata.status, 200, 'public')
  t.strictSame(await metadata.json(), { issuer: payload.iss, jwks_uri: `${ISSUER}/.well-known/jwks.json` })
  t.equal(payload.iss, ISSUER)
})

t.test('issuance rules: aliases, TTL bounds, levels, disabled agents, DIDs in the path, org isolation', async (t) => {
  const admin = await startTestAdmin(t)
  const agent = await newAgent(admin, { did: 'did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp' })
  const count = async (): Promise<number> => Number((await admin.database.db.query<{ n: number }>('SELECT count(*)::int AS n FROM badges'))[0]?.n)

  const byDid = await issue(admin, agent.did, { domain: 'agent.example.com', badge_ttl: 120, badge_aud: ['a'] })
  t.equal(byDid.status, 200, 'the path may be the agent DID')
  t.equal(byDid.body.data.subject, agent.did, 'the subject of an IAL-0 badge is the explicit DID')
  const claims = JSON.parse(Buffer.from(byDid.body.data.token.split('.')[1], 'base64url').toString())
  t.equal(claims.exp - claims.iat, 120, 'badge_ttl is an alias of ttl')
  t.same(claims.aud, ['a'], 'badge_aud is an alias of audience')
  t.equal(await count(), 1)

  const cases: [string, Record<string, unknown>, number, string][] = [
    ['missing domain', {}, 400, 'missing_domain'],
    ['empty domain', { domain: ' ' }, 400, 'missing_domain'],
    ['domain not a host name', { domain: 'https://agent.example.com/' }, 400, 'invalid_request'],
    ['domain with a trailing dot', { domain: 'agent.example.com.' }, 400, 'invalid_request'],
    ['level 5', { domain: 'agent.example.com', trustLevel: '5' }, 400, 'invalid_trust_level'],
    ['level 0', { domain: 'agent.example.com', trustLevel: '0' }, 400, 'invalid_trust_level'],
    ['level word', { domain: 'agent.example.com', trustLevel: 'high' }, 400, 'invalid_trust_level'],
    ['ttl too short', { domain: 'agent.example.com', ttl: 59 }, 400, 'invalid_ttl'],
    ['ttl too long', { domain: 'agent.example.com', ttl: 3601 }, 400, 'invalid_ttl'],
    ['ttl aliases differ', { domain: 'agent.example.com', ttl: 300, badge_ttl: 301 }, 400, 'conflicting_fields'],
    ['audience aliases differ', { domain: 'agent.example.com', audience: ['a'], badge_aud: ['b'] }, 400, 'conflicting_fields'],
    ['mode ial1', { domain: 'agent.example.com', mode: 'ial1' }, 400, 'invalid_mode'],
    ['unknown field', { domain: 'agent.example.com', level: 2 }, 400, 'invalid_request'],
    ['ttl as string', { domain: 'agent.example.com', ttl: '300' }, 400, 'invalid_request'],
    ['level above verified', { domain: 'agent.example.com', trustLevel: '2' }, 403, 'trust_level_not_verified'],
  ]
  for (const [name, body, status, code] of cases) {
    const res = await issue(admin, agent.id, body)
    t.equal(res.status, status, `${name}: status`)
    t.equal(res.body.error, code, `${name}: code`)
  }
  t.equal((await issue(admin, agent.id, { domain: 'agent.example.com', ttl: 300, badge_ttl: 300 })).status, 200, 'equal aliases are fine')
  t.equal((await issue(admin, '00000000-0000-4000-8000-000000000000', { domain: 'x.example.com' })).body.error, 'agent_not_found')
  t.equal((await issue(admin, 'did:key:z6MkpTHR8VNsBxYAAWHut2Geadd9jSwuBV8xRoAnwWsdvktH', { domain: 'x.example.com' })).status, 404)
  t.equal((await issue(admin, 'not-an-agent', { domain: 'x.example.com' })).status, 404)

  const other = await createOrg(admin, 'other')
  t.equal((await issue(admin, agent.id, { domain: 'agent.example.com' }, other.key)).status, 404, 'another org cannot issue for the agent')

  const before = await count()
  await admin.request('POST', `/v1/agents/${agent.id}/disable`)
  const disabled = await issue(admin, agent.id, { domain: 'agent.example.com' })
  t.equal(disabled.status, 403)
  t.equal(disabled.body.error, 'agent_disabled')
  t.equal(await count(), before, 'rejected requests write nothing')
  t.equal((await verify(admin, byDid.body.data.token)).valid, true, 'badges issued before a disable stay valid')
  await admin.request('POST', `/v1/agents/${agent.id}/enable`)
  t.equal((await issue(admin, agent.id, { domain: 'agent.example.com' })).status, 200, 'enabled again')
  t.equal((await issue(admin, agent.id, { domain: 'agent.example.com' }, null)).status, 401, 'credentials are required')
})

t.test('a disable racing with issuance never lets a badge out after the disable commits', async (t) => {
  const admin = await startTestAdmin(t)
  const agent = await newAgent(admin)
  const issuances = Array.from({ length: 15 }, () => issue(admin, agent.id, { domain: 'agent.example.com' }).then((r) => ({ r, at: Date.now() })))
  const disable = admin.request('POST', `/v1/agents/${agent.id}/disable`).then((r) => ({ r, at: Date.now() }))
  const [results, disabled] = await Promise.all([Promise.all(issuances), disable])
  t.equal(disabled.r.status, 200)
  const disabledAt = new Date(disabled.r.body.data.updatedAt).getTime()
  for (const { r } of results) {
    t.ok(r.status === 200 || (r.status === 403 && r.body.error === 'agent_disabled'), `issuance answered ${r.status}`)
  }
  const rows = await admin.database.db.query<{ issued_at: Date }>('SELECT issued_at FROM badges')
  for (const row of rows) t.ok(row.issued_at.getTime() <= disabledAt + 1000, 'every recorded badge was issued before the disable committed')
  t.equal((await issue(admin, agent.id, { domain: 'agent.example.com' })).body.error, 'agent_disabled')
})

t.test('hostile badges are rejected by verify without echoing claims', async (t) => {
  const admin = await startTestAdmin(t)
  const agent = await newAgent(admin)
  const good = (await issue(admin, agent.id, { domain: 'agent.example.com' })).body.data.token as string
  const [h, p, s] = good.split('.') as [string, string, string]
  const header = JSON.parse(Buffer.from(h, 'base64url').toString())
  const payload = JSON.parse(Buffer.from(p, 'base64url').toString())
  const attacker = generateKeyPairSync('ed25519')
  const attackerJwk = attacker.publicKey.export({ format: 'jwk' })
  const signWith = (hdr: unknown, pl: unknown): string => {
    const input = `${b64(hdr)}.${b64(pl)}`
    return `${input}.${sign(null, Buffer.from(input), attacker.privateKey).toString('base64url')}`
  }
  const hmac = (() => {
    const input = `${b64({ alg: 'HS256', typ: 'JWT', kid: header.kid })}.${p}`
    return `${input}.${createHmac('sha256', JSON.stringify(attackerJwk)).update(input).digest('base64url')}`
  })()
  const cases: [string, string, string][] = [
    ['alg none', `${b64({ alg: 'none', typ: 'JWT' })}.${p}.`, 'BADGE_MALFORMED'],
    ['alg none with a signature', `${b64({ alg: 'none', typ: 'JWT' })}.${p}.${s}`, 'BADGE_SIGNATURE_INVALID'],
    ['HS256 keyed with public material', hmac, 'BADGE_SIGNATURE_INVALID'],
    ['embedded jwk', signWith({ ...header, jwk: attackerJwk }, payload), 'BADGE_MALFORMED'],
    ['jku', signWith({ ...header, jku: 'https://attacker.example/jwks.json' }, payload), 'BADGE_MALFORMED'],
    ['x5u', signWith({ ...header, x5u: 'https://attacker.example/cert.pem' }, payload), 'BADGE_MALFORMED'],
    ['crit', `${b64({ ...header, crit: ['exp'] })}.${p}.${s}`, 'BADGE_MALFORMED'],
    ['b64 false', `${b64({ ...header, b64: false, crit: ['b64'] })}.${p}.${s}`, 'BADGE_MALFORMED'],
    ['signed by another key under our kid', signWith(header, payload), 'BADGE_SIGNATURE_INVALID'],
    ['unknown kid', signWith({ ...header, kid: 'service-ca-1' }, payload), 'BADGE_SIGNATURE_INVALID'],
    ['tampered payload', `${h}.${b64({ ...payload, vc: { ...payload.vc, credentialSubject: { domain: 'x', level: '4' } } })}.${s}`, 'BADGE_SIGNATURE_INVALID'],
    ['wrong issuer', signWith(header, { ...payload, iss: 'https://evil.example' }), 'BADGE_SIGNATURE_INVALID'],
    ['oversize', `${h}.${'A'.repeat(20_000)}.${s}`, 'BADGE_MALFORMED'],
    ['two segments', `${h}.${p}`, 'BADGE_MALFORMED'],
    ['garbage', 'not-a-token', 'BADGE_MALFORMED'],
    ['padded base64', `${h}=.${p}.${s}`, 'BADGE_MALFORMED'],
  ]
  for (const [name, token, code] of cases) {
    const res = await admin.request('POST', '/v1/badges/verify', { body: { token } })
    t.equal(res.status, 200, `${name}: 200`)
    t.same(res.body.data, { valid: false, error: code }, `${name}: ${code}, and nothing else`)
    t.notMatch(res.text, /agent\.example\.com|evil/, `${name}: no unverified claim is echoed`)
  }
  const audience = await verify(admin, (await issue(admin, agent.id, { domain: 'agent.example.com', audience: ['https://a.example'] })).body.data.token, ['https://b.example'])
  t.same(audience, { valid: false, error: 'BADGE_AUDIENCE_MISMATCH' })
  t.equal((await admin.request('POST', '/v1/badges/verify', { body: { token: 5 } })).status, 400)
  t.equal((await admin.request('POST', '/v1/badges/verify', { body: {} })).status, 400)
})

t.test('revocation: status, list with since and cursor, verify fails, org-scoped', async (t) => {
  const admin = await startTestAdmin(t)
  const agent = await newAgent(admin)
  const tokens = []
  for (let i = 0; i < 3; i++) tokens.push((await issue(admin, agent.id, { domain: 'agent.example.com' })).body.data)
  const [first, second, third] = tokens

  const status = await admin.request('GET', `/v1/badges/${first.jti}/status`, { key: null })
  t.equal(status.status, 200, 'badge status is public')
  t.same(status.body.data, { jti: first.jti, revoked: false, expiresAt: first.expiresAt })

  const other = await createOrg(admin, 'other')
  const foreign = await admin.request('POST', `/v1/badges/${first.jti}/revoke`, { key: other.key, body: { reason: 'x' } })
  t.equal(foreign.status, 404, 'another org cannot revoke the badge')

  const start = new Date().toISOString()
  const revoked = await admin.request('POST', `/v1/badges/${first.jti}/revoke`, { body: { reason: 'key compromised' } })
  t.equal(revoked.status, 200)
  t.match(revoked.body.data, { jti: first.jti, revoked: true, reason: 'key compromised' })
  t.ok(!Number.isNaN(Date.parse(revoked.body.data.revokedAt)))
  const again = await admin.request('POST', `/v1/badges/${first.jti}/revoke`, { body: { reason: 'other' } })
  t.equal(again.body.data.revokedAt, revoked.body.data.revokedAt, 'revoking twice keeps the first time')
  t.equal(again.body.data.reason, 'key compromised')
  await admin.request('POST', `/v1/badges/${second.jti}/revoke`)
  await admin.request('POST', `/v1/badges/${third.jti}/revoke`, { body: {} })

  t.same(await verify(admin, first.token), { valid: false, error: 'BADGE_REVOKED' })
  const afterStatus = await admin.request('GET', `/v1/badges/${first.jti}/status`, { key: null })
  t.match(afterStatus.body.data, { revoked: true, reason: 'key compromised', revokedAt: revoked.body.data.revokedAt })

  const page1 = await admin.request('GET', '/v1/revocations?limit=2', { key: null })
  t.equal(page1.status, 200, 'revocations are public')
  t.equal(page1.body.data.revocations.length, 2)
  t.ok(page1.body.data.nextCursor)
  t.equal(page1.body.nextCursor, page1.body.data.nextCursor)
  t.ok(!Number.isNaN(Date.parse(page1.body.data.syncedAt)))
  const page2 = await admin.request('GET', `/v1/revocations?limit=2&cursor=${page1.body.data.nextCursor}`, { key: null })
  t.equal(page2.body.data.revocations.length, 1)
  t.equal(page2.body.data.nextCursor, null)
  const all = [...page1.body.data.revocations, ...page2.body.data.revocations].map((r: { jti: string }) => r.jti)
  t.same(new Set(all), new Set([first.jti, second.jti, third.jti]))
  const since = await admin.request('GET', `/v1/revocations?since=${encodeURIComponent(start)}`, { key: null })
  t.equal(since.body.data.revocations.length, 3)
  const future = await admin.request('GET', `/v1/revocations?since=${encodeURIComponent(new Date(Date.now() + 60_000).toISOString())}`, { key: null })
  t.same(future.body.data.revocations, [])
  t.equal((await admin.request('GET', '/v1/revocations?since=yesterday', { key: null })).status, 400)
  t.equal((await admin.request('GET', '/v1/revocations?cursor=@@', { key: null })).status, 400)
  t.equal((await admin.request('GET', '/v1/badges/unknown-jti/status', { key: null })).status, 404)
  t.equal((await admin.request('POST', '/v1/badges/unknown-jti/revoke')).status, 404)
})

t.test('DID documents and agent identities', async (t) => {
  const admin = await startTestAdmin(t)
  const { publicKey } = generateKeyPairSync('ed25519')
  const jwk = publicKey.export({ format: 'jwk' })
  const agent = await newAgent(admin, { publicKeyJwk: { kty: 'OKP', crv: 'Ed25519', x: jwk.x } })
  const res = await admin.request('GET', `/agents/${agent.id}/did.json`, { key: null })
  t.equal(res.status, 200, 'public')
  const did = `did:web:registry.test%3A8080:agents:${agent.id}`
  t.same(res.body['@context'], ['https://www.w3.org/ns/did/v1', 'https://w3id.org/security/suites/ed25519-2020/v1'])
  t.equal(res.body.id, did)
  t.equal(res.body.verificationMethod.length, 1)
  t.match(res.body.verificationMethod[0], { id: `${did}#key-1`, type: 'Ed25519VerificationKey2020', controller: did, publicKeyMultibase: /^z6Mk/ })
  t.same(res.body.authentication, [`${did}#key-1`])
  t.same(res.body.assertionMethod, [`${did}#key-1`])
  const bare = await newAgent(admin, { name: 'keyless' })
  const empty = await admin.request('GET', `/agents/${bare.id}/did.json`, { key: null })
  t.same(empty.body.verificationMethod, [], 'no key, no methods')
  t.equal((await admin.request('GET', '/agents/00000000-0000-4000-8000-000000000000/did.json', { key: null })).status, 404)
})

t.test('a badge signed by a retired key stops verifying; rotation keeps old badges valid', async (t) => {
  const admin = await startTestAdmin(t)
  const agent = await newAgent(admin)
  const old = (await issue(admin, agent.id, { domain: 'agent.example.com' })).body.data.token as string
  const oldKid = admin.keyRing.current.signing.kid
  const { rotateKeyFile, retireKey } = await import('../../../src/authority/key-ring.js')
  await new Promise((r) => setTimeout(r, 20))
  const { kid: newKid } = await rotateKeyFile(admin.config.caKeyPath)
  // The ring's file watch may have reloaded it already; either way the running ring has the new file.
  await admin.keyRing.reloadIfChanged()
  t.equal(admin.keyRing.current.signing.kid, newKid, 'the running ring picks the new file up')
  const jwks = await (await fetch(`${admin.url}/.well-known/jwks.json`)).json() as { keys: { kid: string }[] }
  t.same(jwks.keys.map((k) => k.kid).sort(), [oldKid, newKid].sort(), 'both keys are published after rotation')
  const fresh = (await issue(admin, agent.id, { domain: 'agent.example.com' })).body.data.token as string
  t.equal(decodeProtectedHeader(fresh).kid, newKid, 'new badges are signed by the new key')
  t.equal((await verify(admin, old)).valid, true, 'old badges still verify')

  await t.rejects(
    retireKey(admin.config.caKeyPath, oldKid, { force: false, unexpiredBadges: async () => 1 }),
    /unexpired badge/,
    'retiring a key with unexpired badges is refused',
  )
  await t.rejects(retireKey(admin.config.caKeyPath, newKid, { force: true, unexpiredBadges: async () => 0 }), /signing key/)
  await new Promise((r) => setTimeout(r, 20))
  await retireKey(admin.config.caKeyPath, oldKid, { force: true, unexpiredBadges: async () => 1 })
  await admin.keyRing.reloadIfChanged()
  t.same(await verify(admin, old), { valid: false, error: 'BADGE_SIGNATURE_INVALID' }, 'a retired key verifies nothing')
  t.equal((await verify(admin, fresh)).valid, true)
})

t.test('deleting an agent revokes its unexpired badges, and only its own', async (t) => {
  const admin = await startTestAdmin(t)
  const doomed = await newAgent(admin)
  const kept = await newAgent(admin, { name: 'kept-agent' })
  const doomedBadges = [(await issue(admin, doomed.id, { domain: 'agent.example.com' })).body.data, (await issue(admin, doomed.id, { domain: 'agent.example.com' })).body.data]
  const keptBadge = (await issue(admin, kept.id, { domain: 'agent.example.com' })).body.data
  // Disabled first: deleting a disabled agent must not give its badges back to the organization's policy.
  t.equal((await admin.request('POST', `/v1/agents/${doomed.id}/disable`)).status, 200)
  t.equal((await admin.request('DELETE', `/v1/agents/${doomed.id}`)).status, 204)

  for (const badge of doomedBadges) {
    const status = await admin.request('GET', `/v1/badges/${badge.jti}/status`, { key: null })
    t.equal(status.body.data.revoked, true, 'the deleted agent\'s badge is revoked')
    t.equal(status.body.data.reason, 'agent_deleted', 'and says why')
    t.equal((await verify(admin, badge.token)).valid, false, 'and no longer verifies')
  }
  const keptStatus = await admin.request('GET', `/v1/badges/${keptBadge.jti}/status`, { key: null })
  t.equal(keptStatus.body.data.revoked, false, 'another agent\'s badge is untouched')
  const listed = await admin.request('GET', '/v1/revocations?limit=10')
  t.same(listed.body.data.revocations.map((r: { jti: string }) => r.jti).sort(), doomedBadges.map((b) => b.jti).sort(), 'gateways learn of them as revocations')
  t.equal((await admin.request('DELETE', `/v1/agents/${doomed.id}`)).status, 404, 'a second delete finds nothing and revokes nothing')
})
