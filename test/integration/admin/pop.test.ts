/**
 * IAL-1 badge issuance over HTTP (RFC-003; docs/wire-contract.md §6, §13): the challenge/proof flow for did:key and
 * this registry's did:web, every defect code with its status, the failed-proof rule, single redemption
 * under concurrency, the per-DID challenge limit, credentials, and the cleanup of old challenges.
 * Proofs are signed here with node:crypto so nothing of the code under test builds them.
 */
import t from 'tap'
import { createServer } from 'node:http'
import { randomUUID, sign, type KeyObject } from 'node:crypto'
import { once } from 'node:events'
import type { AddressInfo } from 'node:net'
import { deleteExpiredChallenges, startChallengeCleanup } from '../../../src/authority/pop-challenges.js'
import { lockChallengeWindow } from '../../../src/db/repositories/pop-challenges.js'
import { createOrg, startTestAdmin, type TestAdmin, type TestResponse } from '../../helpers/admin.js'
import type { ChallengeView } from '../../../src/authority/pop-challenges.js'
import { expectEnvelope, expectError, sleep } from '../../helpers/expect.js'
import { ed25519Identity, registryDidWeb, type Ed25519Identity } from '../../helpers/fixtures.js'

const ISSUER = 'http://registry.test:8080'

type Challenge = ChallengeView

// An agent and the key that controls its DID.
interface Holder {
  id: string
  did: string
  kid: string
  identity: Ed25519Identity
}

const nowSeconds = (): number => Math.floor(Date.now() / 1000)
const b64 = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString('base64url')

function signJws(privateKey: KeyObject, header: Record<string, unknown>, claims: Record<string, unknown>): string {
  const input = `${b64(header)}.${b64(claims)}`
  return `${input}.${sign(null, Buffer.from(input), privateKey).toString('base64url')}`
}

// A correct proof for the challenge, with any claim or header member overridden (undefined drops it).
function makeProof(
  holder: Holder, ch: Challenge, claims: Record<string, unknown> = {}, header: Record<string, unknown> = {},
  key: KeyObject = holder.identity.privateKey,
): string {
  const iat = nowSeconds()
  return signJws(
    key,
    { alg: 'EdDSA', typ: 'pop+jwt', kid: holder.kid, ...header },
    { cid: ch.challenge_id, nonce: ch.nonce, sub: holder.did, aud: ch.aud, htu: ch.htu, htm: 'POST', iat, exp: iat + 30, jti: randomUUID(), ...claims },
  )
}

async function createAgent(admin: TestAdmin, body: Record<string, unknown>, key?: string): Promise<{ id: string; did: string }> {
  const res = await admin.request('POST', '/v1/agents', { body: { name: `agent-${randomUUID().slice(0, 8)}`, ...body }, ...(key === undefined ? {} : { key }) })
  if (res.status !== 201) throw new Error(`agent creation failed: ${res.status} ${res.text}`)
  return { id: res.body.data.id, did: res.body.data.did }
}

async function didKeyHolder(admin: TestAdmin, extra: Record<string, unknown> = {}): Promise<Holder> {
  const identity = ed25519Identity()
  const agent = await createAgent(admin, { did: identity.didKey, ...extra })
  return { id: agent.id, did: identity.didKey, kid: identity.didKeyKid, identity }
}

function requestChallenge(admin: TestAdmin, did: string, body?: unknown, key?: string | null): Promise<TestResponse> {
  return admin.request('POST', `/v1/agents/${encodeURIComponent(did)}/badge/challenge`, {
    ...(body === undefined ? {} : { body }),
    ...(key === undefined ? {} : { key }),
  })
}

async function newChallenge(admin: TestAdmin, did: string, body?: unknown): Promise<Challenge> {
  const res = await requestChallenge(admin, did, body)
  if (res.status !== 200) throw new Error(`challenge failed: ${res.status} ${res.text}`)
  return res.body as Challenge
}

function redeem(admin: TestAdmin, did: string, challengeId: string, proof: string): Promise<TestResponse> {
  return admin.request('POST', `/v1/agents/${encodeURIComponent(did)}/badge/pop`, { key: null, body: { challenge_id: challengeId, proof_jws: proof } })
}

async function scalar(admin: TestAdmin, sql: string, params: unknown[] = []): Promise<number> {
  const rows = await admin.database.db.query<{ n: number }>(sql, params)
  return Number(rows[0]?.n ?? -1)
}

const badgeCount = (admin: TestAdmin): Promise<number> => scalar(admin, 'SELECT count(*)::int AS n FROM badges')
const challengeCount = (admin: TestAdmin): Promise<number> => scalar(admin, 'SELECT count(*)::int AS n FROM pop_challenges')
const failedAttempts = (admin: TestAdmin, id: string): Promise<number> =>
  scalar(admin, 'SELECT failed_attempts AS n FROM pop_challenges WHERE id = $1', [id])
const isUsed = async (admin: TestAdmin, id: string): Promise<boolean> =>
  (await scalar(admin, 'SELECT CASE WHEN used_at IS NULL THEN 0 ELSE 1 END AS n FROM pop_challenges WHERE id = $1', [id])) === 1

// A did:web host on 127.0.0.1: `/.well-known/did.json` lists the key as a verification method but not
// under authentication; `/broken/did.json` answers 500.
async function startDidServer(t: { teardown(fn: () => unknown): void }, identity: Ed25519Identity): Promise<{ did: string; brokenDid: string }> {
  let did = ''
  const server = createServer((request, response) => {
    if (request.url === '/.well-known/did.json') {
      response.writeHead(200, { 'content-type': 'application/did+json' })
      response.end(JSON.stringify({
        '@context': ['https://www.w3.org/ns/did/v1'],
        id: did,
        verificationMethod: [{ id: `${did}#key-1`, type: 'Ed25519VerificationKey2020', controller: did, publicKeyMultibase: identity.multibase }],
        authentication: [],
        assertionMethod: [`${did}#key-1`],
      }))
      return
    }
    response.writeHead(request.url === '/broken/did.json' ? 500 : 404).end()
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => {
    server.closeAllConnections()
    server.close()
  })
  did = `did:web:127.0.0.1%3A${(server.address() as AddressInfo).port}`
  return { did, brokenDid: `${did}:broken` }
}

t.test('IAL-1 proof of possession', async (t) => {
  const admin = await startTestAdmin(t, { SERVICE_DID_WEB_ALLOW_HOSTS: '127.0.0.1' })
  t.equal(admin.config.issuerUrl, ISSUER)

  await t.test('(a) did:key agent: challenge, proof, badge that verifies', async (t) => {
    const holder = await didKeyHolder(admin)
    const res = await requestChallenge(admin, holder.did, { badge_ttl: 120, badge_aud: ['https://api.example.com'] })
    t.equal(res.status, 200, 'challenge answers 200')
    const ch = res.body as Challenge
    t.notOk('success' in ch, 'the challenge is a bare object, not an envelope')
    t.match(ch.challenge_id, /^ch-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/)
    t.match(ch.nonce, /^[A-Za-z0-9_-]{43,}$/, 'nonce: at least 32 bytes of base64url')
    t.equal(ch.expires_at, ch.challenge_expires_at)
    const ttl = (Date.parse(ch.challenge_expires_at) - Date.now()) / 1000
    t.ok(ttl > 290 && ttl <= 301, `default challenge TTL 300 s (got ${ttl})`)
    t.equal(ch.aud, ISSUER)
    t.equal(ch.htu, `${ISSUER}/v1/agents/${holder.did}/badge/pop`)
    t.equal(ch.htm, 'POST')
    t.same(ch.badge_aud, ['https://api.example.com'])
    t.equal(ch.badge_ttl, 120)
    t.equal(res.headers.get('x-ratelimit-limit'), '10', 'the per-DID limit is reported')
    t.equal(res.headers.get('x-ratelimit-remaining'), '9')

    const before = await badgeCount(admin)
    const popRes = await redeem(admin, holder.did, ch.challenge_id, makeProof(holder, ch))
    const badge = expectEnvelope(t, popRes, 200, 'pop')
    t.equal(badge.ial, '1')
    t.equal(badge.subject, holder.did, 'the subject is the proven did:key')
    t.equal(badge.trustLevel, '1')
    t.same(badge.cnf, { kid: holder.kid, jwk: { kty: 'OKP', crv: 'Ed25519', x: holder.identity.jwk.x, kid: holder.kid } })
    t.equal(await badgeCount(admin), before + 1)

    const verified = expectEnvelope(t, await admin.request('POST', '/v1/badges/verify', { body: { token: badge.token } }), 200, 'verify')
    t.equal(verified.valid, true, 'the badge verifies')
    const claims = verified.claims
    t.equal(claims.pop_challenge_id, ch.challenge_id)
    t.same(claims.cnf, badge.cnf, 'cnf is in the token')
    t.equal(claims.ial, '1')
    t.equal(claims.sub, holder.did)
    t.equal(claims.jti, badge.jti)
    t.same(claims.aud, ['https://api.example.com'], 'the audience locked in the challenge')
    t.equal(claims.exp - claims.iat, 120, 'the TTL locked in the challenge')
    t.equal(claims.vc.credentialSubject.level, '1')
    t.equal(claims.vc.credentialSubject.domain, holder.did, 'without a registered domain, a did:key badge names the DID')
    const rows = await admin.database.db.query<Record<string, unknown>>('SELECT * FROM badges WHERE jti = $1', [badge.jti])
    t.match(rows[0], { ial: '1', subject: holder.did, pop_challenge_id: ch.challenge_id, agent_id: holder.id })
    t.equal(await isUsed(admin, ch.challenge_id), true, 'the challenge is consumed')

    expectError(t, await redeem(admin, holder.did, ch.challenge_id, makeProof(holder, ch)), 403, 'challenge_used', 'second use')
    t.equal(await badgeCount(admin), before + 1, 'no second badge')

    const defaults = await newChallenge(admin, holder.did)
    t.same(defaults.badge_aud, [])
    t.equal(defaults.badge_ttl, 300, 'badge TTL defaults to 300 s')
    const plain = expectEnvelope(t, await redeem(admin, holder.did, defaults.challenge_id, makeProof(holder, defaults)), 200, 'defaults')
    const plainClaims = (await admin.request('POST', '/v1/badges/verify', { body: { token: plain.token } })).body.data.claims
    t.equal(plainClaims.exp - plainClaims.iat, 300)
    t.notOk('aud' in plainClaims, 'no audience asked for, none in the badge')

    const withDomain = await didKeyHolder(admin, { domain: 'bot.example.com' })
    const dch = await newChallenge(admin, withDomain.did)
    const dBadge = expectEnvelope(t, await redeem(admin, withDomain.did, dch.challenge_id, makeProof(withDomain, dch)), 200, 'with domain')
    const dClaims = (await admin.request('POST', '/v1/badges/verify', { body: { token: dBadge.token } })).body.data.claims
    t.equal(dClaims.vc.credentialSubject.domain, 'bot.example.com', 'the registered domain when there is one')
  })

  await t.test('(b) did:web agent of this registry', async (t) => {
    const identity = ed25519Identity()
    const agent = await createAgent(admin, { publicKeyJwk: identity.jwk })
    t.equal(agent.did, registryDidWeb(agent.id))
    const holder: Holder = { id: agent.id, did: agent.did, kid: `${agent.did}#key-1`, identity }
    const ch = await newChallenge(admin, holder.did)
    t.equal(ch.htu, `${ISSUER}/v1/agents/${holder.did}/badge/pop`, 'htu carries the DID as is (%3A before the port)')
    const badge = expectEnvelope(t, await redeem(admin, holder.did, ch.challenge_id, makeProof(holder, ch)), 200, 'did:web pop')
    t.equal(badge.subject, holder.did)
    t.equal(badge.ial, '1')
    t.same(badge.cnf, { kid: holder.kid, jwk: { kty: 'OKP', crv: 'Ed25519', x: identity.jwk.x, kid: holder.kid } })
    const claims = (await admin.request('POST', '/v1/badges/verify', { body: { token: badge.token } })).body.data
    t.equal(claims.valid, true)
    t.equal(claims.claims.vc.credentialSubject.domain, 'registry.test', 'without a registered domain: the did:web host')

    // A client that did not encode the path: the router decodes %3A to ':'; the DID is still the same one.
    const raw = await admin.request('POST', `/v1/agents/${holder.did}/badge/challenge`)
    t.equal(raw.status, 200, 'an unencoded DID path works')
    t.equal(raw.body.htu, ch.htu, 'and names the canonical DID')
    const rawBadge = await admin.request('POST', `/v1/agents/${holder.did}/badge/pop`, {
      key: null, body: { challenge_id: raw.body.challenge_id, proof_jws: makeProof(holder, raw.body) },
    })
    t.equal(rawBadge.status, 200)

    const noKey = await createAgent(admin, {})
    const nch = await newChallenge(admin, noKey.did)
    expectError(t, await redeem(admin, noKey.did, nch.challenge_id, makeProof({ ...holder, did: noKey.did, kid: `${noKey.did}#key-1` }, nch)),
      403, 'kid_not_found', 'did:web agent without a registered key')
  })

  await t.test('(c, h) every defect code, and nothing written', async (t) => {
    const holder = await didKeyHolder(admin)
    const other = await didKeyHolder(admin)
    const badgesBefore = await badgeCount(admin)
    const check = async (res: TestResponse, status: number, code: string, label: string): Promise<void> => {
      expectError(t, res, status, code, label)
    }

    await check(await redeem(admin, holder.did, 'nope', 'x.y.z'), 400, 'invalid_challenge_id', 'not a challenge id')
    await check(await redeem(admin, holder.did, 'ch-1234', 'x.y.z'), 400, 'invalid_challenge_id', 'ch- without a uuid')
    await check(await redeem(admin, holder.did, `ch-${randomUUID()}`, 'x.y.z'), 404, 'challenge_not_found', 'unknown challenge')

    const ch0 = await newChallenge(admin, holder.did)
    await check(await redeem(admin, other.did, ch0.challenge_id, makeProof(holder, ch0)), 403, 'subject_mismatch', 'path DID differs')
    t.equal(await failedAttempts(admin, ch0.challenge_id), 0, 'a wrong path is not a failed proof')

    const ch1 = await newChallenge(admin, holder.did)
    await check(await redeem(admin, holder.did, ch1.challenge_id, 'garbage'), 400, 'invalid_proof', 'garbage JWS')
    await check(await redeem(admin, holder.did, ch1.challenge_id, makeProof(holder, ch1, {}, { typ: 'JWT' })), 400, 'invalid_proof', 'typ JWT')
    await check(await redeem(admin, holder.did, ch1.challenge_id, makeProof(holder, ch1, { nonce: 'AAAA' })), 400, 'invalid_proof', 'wrong nonce')
    await check(await redeem(admin, holder.did, ch1.challenge_id, makeProof(holder, ch1, { htm: 'GET' })), 400, 'invalid_proof', 'htm GET')
    t.equal(await failedAttempts(admin, ch1.challenge_id), 4, 'each failed proof is counted')

    const ch2 = await newChallenge(admin, holder.did)
    await check(await redeem(admin, holder.did, ch2.challenge_id, makeProof(holder, ch2, { jti: undefined })), 400, 'invalid_proof', 'missing claim')
    await check(await redeem(admin, holder.did, ch2.challenge_id, makeProof(holder, ch2, { cid: ch1.challenge_id })), 403, 'cid_mismatch', 'cid of another challenge')
    await check(await redeem(admin, holder.did, ch2.challenge_id, makeProof(holder, ch2, { sub: other.did })), 403, 'subject_mismatch', 'proof sub differs')
    await check(await redeem(admin, holder.did, ch2.challenge_id, makeProof(holder, ch2, { aud: 'https://elsewhere.example' })), 403, 'audience_mismatch', 'aud')

    const ch3 = await newChallenge(admin, holder.did)
    const now = nowSeconds()
    await check(await redeem(admin, holder.did, ch3.challenge_id, makeProof(holder, ch3, { htu: `${ISSUER}/v1/agents/${other.did}/badge/pop` })), 403, 'htu_mismatch', 'htu')
    await check(await redeem(admin, holder.did, ch3.challenge_id, makeProof(holder, ch3, { iat: now + 120, exp: now + 150 })), 403, 'iat_invalid', 'iat in the future')
    await check(await redeem(admin, holder.did, ch3.challenge_id, makeProof(holder, ch3, { iat: now - 200, exp: now - 190 })), 403, 'iat_invalid', 'iat before the challenge')
    await check(await redeem(admin, holder.did, ch3.challenge_id, makeProof(holder, ch3, { iat: now, exp: now + 61 })), 403, 'exp_too_long', 'exp 61 s after iat')

    const ch4 = await newChallenge(admin, holder.did)
    await check(await redeem(admin, holder.did, ch4.challenge_id, makeProof(holder, ch4, { iat: now - 50, exp: now - 10 })), 403, 'proof_expired', 'expired proof')
    await check(await redeem(admin, holder.did, ch4.challenge_id, makeProof(holder, ch4, {}, { kid: `${holder.did}#nope` })), 403, 'kid_not_found', 'kid not in the document')
    await check(await redeem(admin, holder.did, ch4.challenge_id, makeProof(holder, ch4, {}, {}, other.identity.privateKey)), 403, 'proof_verification_failed', 'signed by another key')
    t.equal(await failedAttempts(admin, ch4.challenge_id), 3)
    t.equal(await isUsed(admin, ch4.challenge_id), false, 'failed proofs leave the challenge unused')

    const expiring = await newChallenge(admin, holder.did, { challenge_ttl: 1 })
    await sleep(1200)
    await check(await redeem(admin, holder.did, expiring.challenge_id, makeProof(holder, expiring)), 403, 'challenge_expired', 'challenge_ttl 1, after 1.2 s')
    t.equal(await failedAttempts(admin, expiring.challenge_id), 0, 'an expired challenge is not a failed proof')

    // did:web hosts on 127.0.0.1 (allowed for this test)
    const webKey = ed25519Identity()
    const server = await startDidServer(t, webKey)
    await createAgent(admin, { did: server.did })
    const webHolder: Holder = { id: '', did: server.did, kid: `${server.did}#key-1`, identity: webKey }
    const wch = await newChallenge(admin, server.did)
    await check(await redeem(admin, server.did, wch.challenge_id, makeProof(webHolder, wch)), 403, 'key_not_in_authentication', 'key only under assertionMethod')
    await check(await redeem(admin, server.did, wch.challenge_id, makeProof(webHolder, wch, {}, { kid: `${server.did}#key-2` })), 403, 'kid_not_found', 'did:web kid not in the document')

    await createAgent(admin, { did: server.brokenDid })
    const brokenHolder: Holder = { id: '', did: server.brokenDid, kid: `${server.brokenDid}#key-1`, identity: webKey }
    const bch = await newChallenge(admin, server.brokenDid)
    await check(await redeem(admin, server.brokenDid, bch.challenge_id, makeProof(brokenHolder, bch)), 502, 'did_resolution_failed', 'DID host answers 500')
    t.equal(await failedAttempts(admin, bch.challenge_id), 0, 'a resolution failure does not count against the challenge')

    await check(await admin.request('POST', `/v1/agents/${encodeURIComponent(holder.did)}/badge/pop`, {
      key: null, body: { challenge_id: ch4.challenge_id, proof_jws: makeProof(holder, ch4), extra: 1 },
    }), 400, 'invalid_request', 'unknown body field')
    await check(await admin.request('POST', `/v1/agents/${encodeURIComponent(holder.did)}/badge/pop`, {
      key: null, body: { challenge_id: ch4.challenge_id },
    }), 400, 'invalid_request', 'proof_jws missing')

    t.equal(await badgeCount(admin), badgesBefore, 'no badge was written by any rejected proof')
  })

  await t.test('challenge request validation writes nothing', async (t) => {
    const holder = await didKeyHolder(admin)
    const before = await challengeCount(admin)
    expectError(t, await requestChallenge(admin, holder.did, { challenge_ttl: 0 }), 400, 'invalid_challenge_ttl', 'challenge_ttl 0')
    expectError(t, await requestChallenge(admin, holder.did, { challenge_ttl: 601 }), 400, 'invalid_challenge_ttl', 'challenge_ttl 601')
    expectError(t, await requestChallenge(admin, holder.did, { challenge_ttl: 1.5 }), 400, 'invalid_challenge_ttl', 'challenge_ttl 1.5')
    expectError(t, await requestChallenge(admin, holder.did, { badge_ttl: 59 }), 400, 'invalid_ttl', 'badge_ttl 59')
    expectError(t, await requestChallenge(admin, holder.did, { badge_ttl: 3601 }), 400, 'invalid_ttl', 'badge_ttl 3601')
    expectError(t, await requestChallenge(admin, holder.did, { badge_aud: 'x' }), 400, 'invalid_request', 'badge_aud not an array')
    expectError(t, await requestChallenge(admin, holder.did, { nonce: 'mine' }), 400, 'invalid_request', 'unknown field')
    expectError(t, await requestChallenge(admin, 'did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG1GLVVQR3djdX3mDooWp'), 404, 'agent_not_found', 'a DID no agent holds')
    expectError(t, await requestChallenge(admin, holder.id), 404, 'agent_not_found', 'an agent UUID is not a DID')
    t.equal(await challengeCount(admin), before, 'no challenge row for a rejected request')

    const edge = await newChallenge(admin, holder.did, { challenge_ttl: 600, badge_ttl: 3600 })
    t.equal(edge.badge_ttl, 3600)
    const ttl = (Date.parse(edge.challenge_expires_at) - Date.now()) / 1000
    t.ok(ttl > 590 && ttl <= 601, 'challenge_ttl 600 is accepted')

    await admin.request('POST', `/v1/agents/${holder.id}/disable`)
    const beforeDisabled = await challengeCount(admin)
    expectError(t, await requestChallenge(admin, holder.did), 403, 'agent_disabled', 'disabled agent')
    t.equal(await challengeCount(admin), beforeDisabled)
    // A challenge made while enabled cannot be redeemed while disabled, and is not consumed by trying.
    const badges = await badgeCount(admin)
    expectError(t, await redeem(admin, holder.did, edge.challenge_id, makeProof(holder, edge)), 403, 'agent_disabled', 'pop for a disabled agent')
    t.equal(await isUsed(admin, edge.challenge_id), false, 'the redemption was rolled back')
    t.equal(await badgeCount(admin), badges)
    await admin.request('POST', `/v1/agents/${holder.id}/enable`)
    expectEnvelope(t, await redeem(admin, holder.did, edge.challenge_id, makeProof(holder, edge)), 200, 'after re-enabling')

    // The DID taken off the agent between challenge and proof: no badge binds the agent to it any more.
    const moving = await didKeyHolder(admin)
    const mch = await newChallenge(admin, moving.did)
    const moved = await admin.request('PUT', `/v1/agents/${moving.id}`, { body: { did: ed25519Identity().didKey } })
    t.equal(moved.status, 200)
    expectError(t, await redeem(admin, moving.did, mch.challenge_id, makeProof(moving, mch)), 403, 'subject_mismatch', 'DID no longer the agent\'s')
    t.equal(await isUsed(admin, mch.challenge_id), false)
  })

  await t.test('(d) the fifth failed proof burns the challenge', async (t) => {
    const holder = await didKeyHolder(admin)
    const stranger = ed25519Identity()
    const survives = await newChallenge(admin, holder.did)
    for (let i = 0; i < 4; i++) {
      expectError(t, await redeem(admin, holder.did, survives.challenge_id, makeProof(holder, survives, {}, {}, stranger.privateKey)),
        403, 'proof_verification_failed', `failure ${i + 1}`)
    }
    t.equal(await isUsed(admin, survives.challenge_id), false, 'four failures leave it usable')
    expectEnvelope(t, await redeem(admin, holder.did, survives.challenge_id, makeProof(holder, survives)), 200, 'valid proof after four failures')

    const burned = await newChallenge(admin, holder.did)
    for (let i = 0; i < 5; i++) {
      expectError(t, await redeem(admin, holder.did, burned.challenge_id, makeProof(holder, burned, { nonce: `wrong-${i}` })),
        400, 'invalid_proof', `failure ${i + 1}`)
    }
    t.equal(await isUsed(admin, burned.challenge_id), true, 'the fifth failure burns it')
    const badges = await badgeCount(admin)
    expectError(t, await redeem(admin, holder.did, burned.challenge_id, makeProof(holder, burned)), 403, 'challenge_used', 'valid proof after five failures')
    t.equal(await badgeCount(admin), badges)
  })

  await t.test('(e) 20 concurrent redemptions of one proof: exactly one badge', async (t) => {
    const holder = await didKeyHolder(admin)
    const ch = await newChallenge(admin, holder.did)
    const proof = makeProof(holder, ch)
    const results = await Promise.all(Array.from({ length: 20 }, () => redeem(admin, holder.did, ch.challenge_id, proof)))
    const ok = results.filter((r) => r.status === 200)
    const used = results.filter((r) => r.status === 403 && r.body?.error === 'challenge_used')
    t.equal(ok.length, 1, 'exactly one 200')
    t.equal(used.length, 19, 'nineteen 403 challenge_used')
    t.equal(await scalar(admin, 'SELECT count(*)::int AS n FROM badges WHERE pop_challenge_id = $1', [ch.challenge_id]), 1, 'one badge row')
    t.equal(await failedAttempts(admin, ch.challenge_id), 0, 'losing the race is not a failed proof')
  })

  await t.test('(f) 10 challenges per DID per 5 minutes', async (t) => {
    const holder = await didKeyHolder(admin)
    for (let i = 0; i < 10; i++) {
      const res = await requestChallenge(admin, holder.did)
      t.equal(res.status, 200, `challenge ${i + 1}`)
      t.equal(res.headers.get('x-ratelimit-remaining'), String(9 - i))
    }
    const limited = await requestChallenge(admin, holder.did)
    expectError(t, limited, 429, 'rate_limit_exceeded', 'the 11th')
    const retryAfter = Number(limited.headers.get('retry-after'))
    t.ok(Number.isInteger(retryAfter) && retryAfter > 0 && retryAfter <= 300, `Retry-After in (0, 300] (got ${retryAfter})`)
    t.equal(limited.headers.get('x-ratelimit-limit'), '10')
    t.equal(limited.headers.get('x-ratelimit-remaining'), '0')
    const reset = Number(limited.headers.get('x-ratelimit-reset'))
    t.ok(reset >= nowSeconds() + retryAfter - 2 && reset <= nowSeconds() + retryAfter + 2, 'X-RateLimit-Reset is the Unix second the slot frees')
    t.equal(await scalar(admin, 'SELECT count(*)::int AS n FROM pop_challenges WHERE did = $1', [holder.did]), 10, 'the refused one was not stored')

    const neighbour = await didKeyHolder(admin)
    t.equal((await requestChallenge(admin, neighbour.did)).status, 200, 'another DID is unaffected')

    // Concurrent requests cannot both take the last slots: the count and insert are serialized per DID.
    // Eight taken, then twelve at once race for the last two slots.
    const burst = await didKeyHolder(admin)
    for (let i = 0; i < 8; i++) await newChallenge(admin, burst.did)
    const results = await Promise.all(Array.from({ length: 12 }, () => requestChallenge(admin, burst.did)))
    t.equal(results.filter((r) => r.status === 200).length, 2, 'two of twelve concurrent requests succeed')
    t.equal(results.filter((r) => r.status === 429).length, 10, 'ten are refused')
    t.equal(await scalar(admin, 'SELECT count(*)::int AS n FROM pop_challenges WHERE did = $1', [burst.did]), 10)

    // The same, made deterministic: while another transaction (another instance) holds the DID's lock,
    // a challenge request for that DID waits instead of counting a stale window.
    const locked = await didKeyHolder(admin)
    let release: () => void = () => {}
    const gate = new Promise<void>((resolve) => { release = resolve })
    let acquired: () => void = () => {}
    const lockTaken = new Promise<void>((resolve) => { acquired = resolve })
    const holding = admin.database.db.transaction(async (tx) => {
      await lockChallengeWindow(tx, locked.did)
      acquired()
      await gate
    })
    await lockTaken
    let settled = false
    const pending = requestChallenge(admin, locked.did).then((r) => {
      settled = true
      return r
    })
    await sleep(300)
    t.equal(settled, false, 'the request waits for the lock')
    release()
    await holding
    t.equal((await pending).status, 200, 'and proceeds once it is released')
  })

  await t.test('(g) credentials: needed for the challenge, not for the proof', async (t) => {
    const holder = await didKeyHolder(admin)
    expectError(t, await requestChallenge(admin, holder.did, undefined, null), 401, 'unauthorized', 'no key')
    expectError(t, await requestChallenge(admin, holder.did, undefined, 'sk_not_a_real_key'), 401, 'unauthorized', 'bad key')
    const otherOrg = await createOrg(admin, `other-${randomUUID().slice(0, 8)}`)
    expectError(t, await requestChallenge(admin, holder.did, undefined, otherOrg.key), 404, 'agent_not_found', 'another org\'s key')
    const theirs = ed25519Identity()
    await createAgent(admin, { did: theirs.didKey }, otherOrg.key)
    expectError(t, await requestChallenge(admin, theirs.didKey), 404, 'agent_not_found', 'an agent of another org')
    const ch = await newChallenge(admin, holder.did)
    const res = await redeem(admin, holder.did, ch.challenge_id, makeProof(holder, ch))
    t.equal(res.status, 200, 'the proof needs no credentials')
  })

  await t.test('expired challenges are cleaned up after an hour', async (t) => {
    const holder = await didKeyHolder(admin)
    const [agent] = await admin.database.db.query<{ org_id: string }>('SELECT org_id FROM agents WHERE id = $1', [holder.id])
    const insert = async (id: string, expiresSql: string): Promise<void> => {
      await admin.database.db.query(
        `INSERT INTO pop_challenges (id, did, agent_id, org_id, nonce, aud, htu, badge_ttl, created_at, expires_at)
         VALUES ($1, $2, $3, $4, 'n', 'a', 'h', 300, now() - interval '3 hours', ${expiresSql})`,
        [id, holder.did, holder.id, agent?.org_id],
      )
    }
    const old = `ch-${randomUUID()}`
    const recent = `ch-${randomUUID()}`
    await insert(old, "now() - interval '2 hours'")
    await insert(recent, "now() - interval '10 minutes'")
    const live = await newChallenge(admin, holder.did)
    t.equal(await deleteExpiredChallenges(admin.database.db), 1, 'one challenge expired over an hour ago')
    const left = await admin.database.db.query<{ id: string }>('SELECT id FROM pop_challenges WHERE id = ANY($1::text[])', [[old, recent, live.challenge_id]])
    t.same(left.map((r) => r.id).sort(), [recent, live.challenge_id].sort(), 'recent and live challenges stay')
    expectError(t, await redeem(admin, holder.did, recent, makeProof(holder, { ...live, challenge_id: recent })), 403, 'challenge_expired',
      'a recently expired challenge still says so')

    const later = `ch-${randomUUID()}`
    await insert(later, "now() - interval '90 minutes'")
    const errors: unknown[] = []
    const stop = startChallengeCleanup(admin.database.db, 20, (e) => errors.push(e))
    let gone = false
    for (let i = 0; i < 100 && !gone; i++) {
      await sleep(20)
      gone = (await scalar(admin, 'SELECT count(*)::int AS n FROM pop_challenges WHERE id = $1', [later])) === 0
    }
    stop()
    t.equal(gone, true, 'the periodic cleanup removed it')
    t.same(errors, [], 'without errors')
  })
})
