/**
 * Self-signed level-0 badges (docs/wire-contract.md §4): minted for the did:key of a private key, verified with
 * the key inside the DID, level 0 only, iss = sub, and the same time, audience and revocation rules as
 * authority badges.
 */
import t from 'tap'
import { generateKeyPairSync, sign, type KeyObject } from 'node:crypto'
import { buildBadgeClaims, CLOCK_LEEWAY_SECONDS, signBadge, verifyBadge, type BadgeClaims } from '../../../src/core/badge.js'
import type { TrustLevel } from '../../../src/core/trust-level.js'
import { didKeyVerificationMethodId, encodeDidKey } from '../../../src/core/did-key.js'
import { looksSelfSigned, signSelfSignedBadge, verifySelfSignedBadge } from '../../../src/core/self-signed-badge.js'

const NOW = 1_800_000_000
const key = generateKeyPairSync('ed25519')
const other = generateKeyPairSync('ed25519')
const didOf = (k: KeyObject): string => encodeDidKey(Buffer.from((k.export({ format: 'jwk' }) as { x: string }).x, 'base64url'))
const DID = didOf(key.publicKey)
const OTHER_DID = didOf(other.publicKey)

const mint = (over: { jti?: string; issuedAt?: number; expiresAt?: number; audience?: string[]; domain?: string } = {}) =>
  signSelfSignedBadge(key.privateKey, { jti: over.jti ?? 'ss-1', issuedAt: over.issuedAt ?? NOW - 10, expiresAt: over.expiresAt ?? NOW + 600, ...over })

const b64 = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString('base64url')
function rawSign(header: Record<string, unknown>, payload: unknown, k: KeyObject = key.privateKey): string {
  const input = `${b64(header)}.${b64(payload)}`
  return `${input}.${sign(null, Buffer.from(input, 'ascii'), k).toString('base64url')}`
}
const claims = (over: { level?: TrustLevel; iss?: string; sub?: string } = {}): BadgeClaims => buildBadgeClaims({
  jti: 'raw-1', issuer: over.iss ?? DID, subject: over.sub ?? DID, issuedAt: NOW - 10, expiresAt: NOW + 600, ial: '0', level: over.level ?? '0', domain: '',
})
const HEADER = { alg: 'EdDSA', typ: 'JWT', kid: didKeyVerificationMethodId(DID) }

t.test('mint and verify', async (t) => {
  const { token, did } = mint({ domain: 'agent.example.com', audience: ['https://api.example.com'] })
  t.equal(did, DID, 'the did:key of the private key')
  t.match(did, /^did:key:z6Mk/, 'an Ed25519 did:key')
  const [h, p] = token.split('.')
  t.strictSame(JSON.parse(Buffer.from(h!, 'base64url').toString()), HEADER, 'header names the DID verification method')
  const payload = JSON.parse(Buffer.from(p!, 'base64url').toString()) as BadgeClaims
  t.equal(payload.iss, DID)
  t.equal(payload.sub, DID)
  t.equal(payload.ial, '0')
  t.equal(payload.vc.credentialSubject.level, '0')
  t.equal(payload.vc.credentialSubject.domain, 'agent.example.com')
  t.strictSame(payload.aud, ['https://api.example.com'])

  const result = verifySelfSignedBadge(token, { now: NOW, audience: ['https://api.example.com'] })
  t.ok(result.valid)
  t.equal(result.valid && result.kid, didKeyVerificationMethodId(DID))
  t.equal(result.valid && result.claims.jti, 'ss-1')
  t.notOk('aud' in (JSON.parse(Buffer.from(mint().token.split('.')[1]!, 'base64url').toString()) as object), 'no aud unless asked')
})

t.test('looksSelfSigned', async (t) => {
  t.ok(looksSelfSigned({ iss: DID, sub: DID }))
  t.notOk(looksSelfSigned({ iss: DID, sub: OTHER_DID }), 'iss ≠ sub')
  t.notOk(looksSelfSigned({ iss: 'https://registry.test', sub: 'https://registry.test' }), 'not a did:key')
  t.notOk(looksSelfSigned({ iss: 'did:web:x', sub: 'did:web:x' }), 'another DID method')
  t.notOk(looksSelfSigned({ sub: DID }), 'no iss')
  t.notOk(looksSelfSigned({ iss: 5, sub: 5 }), 'non-string iss')
})

t.test('refusals', async (t) => {
  const check = (token: string, now = NOW, extra: { audience?: string[]; isRevoked?: (jti: string) => boolean } = {}) => {
    const r = verifySelfSignedBadge(token, { now, ...extra })
    return r.valid ? 'valid' : r.error
  }
  const { token } = mint()
  const [h, p, s] = token.split('.')
  t.equal(check(token), 'valid')
  t.equal(check(`${h}.${p}.${Buffer.alloc(64, 7).toString('base64url')}`), 'BADGE_SIGNATURE_INVALID', 'wrong signature')
  t.equal(check(`${h}.${b64({ ...claims(), jti: 'changed' })}.${s}`), 'BADGE_SIGNATURE_INVALID', 'tampered payload')
  t.equal(check(rawSign(HEADER, claims(), other.privateKey)), 'BADGE_SIGNATURE_INVALID', 'signed by a key other than the DID names')
  t.equal(check(rawSign({ ...HEADER, kid: didKeyVerificationMethodId(OTHER_DID) }, claims())), 'BADGE_SIGNATURE_INVALID', 'kid of another DID')
  t.equal(check(rawSign({ ...HEADER, kid: 'k1' }, claims())), 'BADGE_SIGNATURE_INVALID', 'kid not a verification method of the DID')
  t.equal(check(rawSign({ alg: 'EdDSA', typ: 'JWT' }, claims())), 'valid', 'no kid is allowed')
  t.equal(check(rawSign({ alg: 'EdDSA', typ: 'JOSE+JSON', kid: HEADER.kid }, claims())), 'BADGE_MALFORMED', 'another typ')
  t.equal(check(`${b64({ alg: 'none' })}.${b64(claims())}.`), 'BADGE_MALFORMED', 'alg none, empty signature')
  t.equal(check(`${b64({ alg: 'HS256' })}.${b64(claims())}.${Buffer.alloc(64).toString('base64url')}`), 'BADGE_SIGNATURE_INVALID', 'another alg')
  t.equal(check(rawSign({ ...HEADER, jwk: { kty: 'OKP' } }, claims())), 'BADGE_MALFORMED', 'embedded key header')
  t.equal(check('a.b'), 'BADGE_MALFORMED')
  t.equal(check(rawSign(HEADER, claims({ sub: OTHER_DID }))), 'BADGE_ISSUER_UNTRUSTED', 'iss ≠ sub')
  t.equal(check(rawSign(HEADER, claims({ iss: 'https://registry.test', sub: 'https://registry.test' }))), 'BADGE_ISSUER_UNTRUSTED', 'not a did:key')
  t.equal(check(rawSign({ alg: 'EdDSA', typ: 'JWT' }, claims({ iss: 'did:key:zNotAKey', sub: 'did:key:zNotAKey' }))), 'BADGE_ISSUER_UNTRUSTED', 'undecodable did:key')
  for (const level of ['1', '2', '3', '4'] as const) {
    t.equal(check(rawSign(HEADER, claims({ level }))), 'BADGE_CLAIMS_INVALID', `level ${level}`)
  }
  t.equal(check(rawSign(HEADER, { iss: DID, sub: DID, jti: 'x' })), 'BADGE_CLAIMS_INVALID', 'claims missing')
})

t.test('the domain is optional below level 2; vc.type must name VerifiableCredential and AgentIdentity', async (t) => {
  const check = (payload: unknown): string => {
    const r = verifySelfSignedBadge(rawSign(HEADER, payload), { now: NOW })
    return r.valid ? 'valid' : r.error
  }
  const withSubject = (subject: Record<string, unknown>, type: unknown = ['VerifiableCredential', 'AgentIdentity']) =>
    ({ ...claims(), vc: { type, credentialSubject: subject } })
  t.equal(check(withSubject({ level: '0' })), 'valid', 'level 0 without a domain (RFC-002)')
  t.equal(check(withSubject({ level: '0', domain: 'agent.example.com' })), 'valid', 'level 0 with a domain')
  t.equal(check(withSubject({ level: '0', domain: 7 })), 'BADGE_CLAIMS_INVALID', 'a domain that is not a string')
  t.equal(check(withSubject({ level: '0' }, ['VerifiableCredential'])), 'BADGE_CLAIMS_INVALID', 'AgentIdentity missing')
  t.equal(check(withSubject({ level: '0' }, ['AgentIdentity'])), 'BADGE_CLAIMS_INVALID', 'VerifiableCredential missing')

  // Authority badges follow the same rule: levels 0 and 1 may omit the domain, 2 and up may not.
  const authority = (level: TrustLevel): string => {
    const base = buildBadgeClaims({ jti: `auth-${level}`, issuer: 'https://registry.test', subject: DID, issuedAt: NOW - 10, expiresAt: NOW + 600, ial: '1', level, domain: 'x' })
    const token = signBadge({ ...base, vc: { type: base.vc.type, credentialSubject: { level } } }, { kid: 'k1', privateKey: key.privateKey })
    const r = verifyBadge(token, { keys: new Map([['k1', key.publicKey]]), issuer: 'https://registry.test', now: NOW })
    return r.valid ? 'valid' : r.error
  }
  t.equal(authority('1'), 'valid', 'level 1 without a domain')
  t.equal(authority('2'), 'BADGE_CLAIMS_INVALID', 'level 2 needs a domain')
  t.equal(authority('4'), 'BADGE_CLAIMS_INVALID', 'level 4 needs a domain')
})

t.test('time, audience and revocation', async (t) => {
  const exp = NOW + 600
  const { token } = mint({ expiresAt: exp, audience: ['https://api.example.com'] })
  const check = (now: number, extra: { audience?: string[]; isRevoked?: (jti: string) => boolean } = {}) => {
    const r = verifySelfSignedBadge(token, { now, ...extra })
    return r.valid ? 'valid' : r.error
  }
  t.equal(check(exp + CLOCK_LEEWAY_SECONDS), 'valid', 'within the leeway')
  t.equal(check(exp + CLOCK_LEEWAY_SECONDS + 1), 'BADGE_EXPIRED')
  t.equal(check(NOW - 10 - CLOCK_LEEWAY_SECONDS - 1), 'BADGE_NOT_YET_VALID')
  t.equal(check(NOW, { audience: ['https://other.example.com'] }), 'BADGE_AUDIENCE_MISMATCH')
  t.equal(check(NOW, { audience: ['https://other.example.com', 'https://api.example.com'] }), 'valid')
  t.equal(check(NOW, { isRevoked: (jti) => jti === 'ss-1' }), 'BADGE_REVOKED')
  t.equal(check(NOW, { isRevoked: () => false }), 'valid')
})
