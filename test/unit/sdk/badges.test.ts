/**
 * SDK badges: self-signed level-0 badges verify with the core verifier; verifyBadgeWithJwks accepts an
 * authority badge with the right JWKS (given or fetched) and refuses a wrong key, an expired badge, a
 * wrong issuer, an audience mismatch and a revoked jti, each with the gateway's code.
 */
import t from 'tap'
import { createServer } from 'node:http'
import { once } from 'node:events'
import { generateKeyPairSync, type KeyObject } from 'node:crypto'
import type { AddressInfo } from 'node:net'
import { buildBadgeClaims, signBadge } from '../../../src/core/badge.js'
import { didKeyVerificationMethodId } from '../../../src/core/did-key.js'
import { verifySelfSignedBadge } from '../../../src/core/self-signed-badge.js'
import { SdkError } from '../../../src/sdk/errors.js'
import { fetchJwks, jwksKeyMap, jwksUrlFor, mintSelfSignedBadge, verifyBadgeWithJwks, type Jwks } from '../../../src/sdk/badges.js'
import { generateAgentKey } from '../../../src/sdk/keys.js'

const NOW = 1_800_000_000
const ISSUER = 'https://registry.example.com'
const authority = generateKeyPairSync('ed25519')
const other = generateKeyPairSync('ed25519')
const KID = 'service-ca-1700000000'

const jwkOf = (key: KeyObject, kid: string): Record<string, unknown> => ({ ...key.export({ format: 'jwk' }), kid, alg: 'EdDSA', use: 'sig' })
const JWKS: Jwks = { keys: [jwkOf(authority.publicKey, KID)] }

function authorityBadge(over: { key?: KeyObject; kid?: string; issuer?: string; iat?: number; exp?: number; audience?: string[]; jti?: string } = {}): string {
  const claims = buildBadgeClaims({
    jti: over.jti ?? 'badge-1', issuer: over.issuer ?? ISSUER, subject: 'did:web:registry.example.com:agents:1',
    issuedAt: over.iat ?? NOW - 10, expiresAt: over.exp ?? NOW + 300, ial: '1', level: '1', domain: 'agent.example.com',
    ...(over.audience === undefined ? {} : { audience: over.audience }),
  })
  return signBadge(claims, { kid: over.kid ?? KID, privateKey: over.key ?? authority.privateKey })
}

t.test('mintSelfSignedBadge: level 0, iss = sub = the did:key, verifies with the core verifier', async (t) => {
  const key = generateAgentKey()
  const { token, did, jti } = mintSelfSignedBadge(key.privateKey, { ttlSeconds: 120, audience: ['https://api.example.com'], now: NOW })
  t.equal(did, key.did)
  const result = verifySelfSignedBadge(token, { now: NOW + 1, audience: ['https://api.example.com'] })
  t.ok(result.valid, 'verifies')
  if (!result.valid) return
  t.equal(result.claims.iss, key.did)
  t.equal(result.claims.sub, key.did)
  t.equal(result.claims.jti, jti)
  t.equal(result.claims.vc.credentialSubject.level, '0')
  t.equal(result.claims.exp - result.claims.iat, 120, 'ttl')
  t.equal(result.kid, didKeyVerificationMethodId(key.did))
  t.match(verifySelfSignedBadge(token, { now: NOW + 120 + 61 }), { valid: false, error: 'BADGE_EXPIRED' }, 'expires after ttl + leeway')
  t.not(mintSelfSignedBadge(key.privateKey).jti, jti, 'a fresh jti each time')
  const defaults = verifySelfSignedBadge(mintSelfSignedBadge(key.privateKey).token, { now: Math.floor(Date.now() / 1000) })
  t.ok(defaults.valid && defaults.claims.exp - defaults.claims.iat === 300, 'default ttl 300 s on the clock')
  t.throws(() => mintSelfSignedBadge(key.privateKey, { ttlSeconds: 0 }), { code: 'invalid_argument' })
})

t.test('verifyBadgeWithJwks with a given JWKS', async (t) => {
  const ok = await verifyBadgeWithJwks(authorityBadge(), { jwks: JWKS, issuer: ISSUER, now: NOW })
  t.ok(ok.valid, 'valid')
  t.equal(ok.valid && ok.kid, KID)
  t.equal(ok.valid && ok.claims.jti, 'badge-1')

  t.match(await verifyBadgeWithJwks(authorityBadge({ key: other.privateKey }), { jwks: JWKS, issuer: ISSUER, now: NOW }),
    { valid: false, error: 'BADGE_SIGNATURE_INVALID' }, 'signed by another key')
  t.match(await verifyBadgeWithJwks(authorityBadge({ kid: 'service-ca-unknown' }), { jwks: JWKS, issuer: ISSUER, now: NOW }),
    { valid: false, error: 'BADGE_SIGNATURE_INVALID' }, 'unknown kid')
  t.match(await verifyBadgeWithJwks(authorityBadge({ exp: NOW - 61 }), { jwks: JWKS, issuer: ISSUER, now: NOW }),
    { valid: false, error: 'BADGE_EXPIRED' }, 'expired beyond the leeway')
  t.ok((await verifyBadgeWithJwks(authorityBadge({ exp: NOW - 59 }), { jwks: JWKS, issuer: ISSUER, now: NOW })).valid, 'within the 60 s leeway')
  t.match(await verifyBadgeWithJwks(authorityBadge(), { jwks: JWKS, issuer: 'https://other.example.com', now: NOW }),
    { valid: false, error: 'BADGE_ISSUER_UNTRUSTED' }, 'another issuer')
  t.match(await verifyBadgeWithJwks(authorityBadge({ audience: ['https://a.example.com'] }), { jwks: JWKS, issuer: ISSUER, now: NOW, audience: ['https://b.example.com'] }),
    { valid: false, error: 'BADGE_AUDIENCE_MISMATCH' }, 'audience')
  t.match(await verifyBadgeWithJwks(authorityBadge({ jti: 'gone' }), { jwks: JWKS, issuer: ISSUER, now: NOW, isRevoked: (jti) => jti === 'gone' }),
    { valid: false, error: 'BADGE_REVOKED' }, 'revoked through the lookup')
  t.match(await verifyBadgeWithJwks('not.a.badge', { jwks: JWKS, issuer: ISSUER, now: NOW }), { valid: false, error: 'BADGE_MALFORMED' })

  // A JWKS that also lists a private key, or another key type, is not trusted with those entries.
  const withPrivate: Jwks = { keys: [{ ...authority.privateKey.export({ format: 'jwk' }), kid: KID }] }
  t.equal(jwksKeyMap(withPrivate).size, 0, 'a JWK carrying d is skipped')
  t.match(await verifyBadgeWithJwks(authorityBadge(), { jwks: withPrivate, issuer: ISSUER, now: NOW }), { valid: false, error: 'BADGE_SIGNATURE_INVALID' })
  const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' }).publicKey.export({ format: 'jwk' })
  t.equal(jwksKeyMap({ keys: [{ ...ec, kid: 'ec' }, jwkOf(authority.publicKey, KID)] }).size, 1, 'non-Ed25519 keys skipped')

  const selfSigned = mintSelfSignedBadge(generateAgentKey().privateKey, { now: NOW }).token
  t.match(await verifyBadgeWithJwks(selfSigned, { jwks: JWKS, issuer: ISSUER, now: NOW }), { valid: false }, 'self-signed refused by default')
  t.ok((await verifyBadgeWithJwks(selfSigned, { jwks: JWKS, issuer: ISSUER, now: NOW, acceptSelfSigned: true })).valid, 'accepted when asked')
  await t.rejects(verifyBadgeWithJwks(selfSigned, { issuer: ISSUER }), { code: 'invalid_argument' }, 'needs jwks or jwksUrl')
})

t.test('verifyBadgeWithJwks fetching the JWKS from a registry', async (t) => {
  let served: unknown = JWKS
  let status = 200
  const server = createServer((request, response) => {
    if (request.url !== '/.well-known/jwks.json') return void response.writeHead(404).end()
    response.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(served))
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => server.close())
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  t.equal(jwksUrlFor(`${base}/`), `${base}/.well-known/jwks.json`, 'a trailing slash is fine')
  t.strictSame(await fetchJwks(jwksUrlFor(base)), JWKS)
  const ok = await verifyBadgeWithJwks(authorityBadge(), { jwksUrl: jwksUrlFor(base), issuer: ISSUER, now: NOW })
  t.ok(ok.valid, 'valid against the fetched JWKS')
  t.match(await verifyBadgeWithJwks(authorityBadge({ key: other.privateKey }), { jwksUrl: jwksUrlFor(base), issuer: ISSUER, now: NOW }),
    { valid: false, error: 'BADGE_SIGNATURE_INVALID' })

  served = { nope: true }
  const bad = await verifyBadgeWithJwks(authorityBadge(), { jwksUrl: jwksUrlFor(base), issuer: ISSUER, now: NOW }).then(() => null, (e: unknown) => e)
  t.ok(bad instanceof SdkError && bad.code === 'invalid_response', 'a body without keys is an SdkError')
  status = 500
  served = { error: 'internal_error', message: 'x' }
  const down = await fetchJwks(jwksUrlFor(base)).then(() => null, (e: unknown) => e)
  t.ok(down instanceof SdkError && down.code === 'internal_error' && down.status === 500, 'the registry error code and status')
  const closed = await fetchJwks('http://127.0.0.1:1/.well-known/jwks.json').then(() => null, (e: unknown) => e)
  t.ok(closed instanceof SdkError && closed.code === 'registry_unreachable' && closed.status === null, 'unreachable')
})
