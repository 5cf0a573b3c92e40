/**
 * The pure IAL-1 proof checks (docs/wire-contract.md §6): one case per defect code, the order of the checks, and
 * the exact edges of the time rules.
 */
import t from 'tap'
import { randomUUID, sign, type KeyObject } from 'node:crypto'
import {
  checkPopProofClaims,
  verifyPopProofKey,
  POP_EXP_LEEWAY_SECONDS,
  POP_IAT_LEEWAY_SECONDS,
  POP_MAX_LIFETIME_SECONDS,
  type CheckedPopProof,
  type PopProofExpectations,
} from '../../../src/core/pop-proof.js'
import type { ResolvedKeys } from '../../../src/core/did-document.js'
import { b64json, didKeyPair } from '../../helpers/fixtures.js'


function jws(privateKey: KeyObject, header: Record<string, unknown>, claims: Record<string, unknown>): string {
  const input = `${b64json(header)}.${b64json(claims)}`
  return `${input}.${sign(null, Buffer.from(input), privateKey).toString('base64url')}`
}

const me = didKeyPair()
const now = 1_800_000_000
const expected: PopProofExpectations = {
  challengeId: `ch-${randomUUID()}`,
  nonce: 'bm9uY2Utbm9uY2Utbm9uY2Utbm9uY2Utbm9uY2Utbm9u',
  did: me.did,
  audience: 'http://registry.test:8080',
  htu: `http://registry.test:8080/v1/agents/${me.did}/badge/pop`,
  challengeCreatedAt: now - 10,
  now,
}

function goodClaims(): Record<string, unknown> {
  return {
    cid: expected.challengeId,
    nonce: expected.nonce,
    sub: expected.did,
    aud: expected.audience,
    htu: expected.htu,
    htm: 'POST',
    iat: now,
    exp: now + 30,
    jti: randomUUID(),
  }
}

const goodHeader = (): Record<string, unknown> => ({ alg: 'EdDSA', typ: 'pop+jwt', kid: me.kid })

function proof(claims: Record<string, unknown> = {}, header: Record<string, unknown> = {}, key = me.privateKey): string {
  return jws(key, { ...goodHeader(), ...header }, { ...goodClaims(), ...claims })
}

function codeOf(token: string, overrides: Partial<PopProofExpectations> = {}): string {
  const result = checkPopProofClaims(token, { ...expected, ...overrides })
  return result.ok ? 'ok' : result.code
}

t.test('a well-formed proof passes and exposes kid and claims', async (t) => {
  const result = checkPopProofClaims(proof(), expected)
  t.equal(result.ok, true)
  if (!result.ok) return
  t.equal(result.proof.kid, me.kid)
  t.equal(result.proof.claims.cid, expected.challengeId)
  t.equal(result.proof.signature.length, 64)
  t.equal(codeOf(proof({ aud: [expected.audience] })), 'ok', 'aud as a one-element array is accepted')
})

t.test('invalid_proof: structure, header, claim types, nonce, htm', async (t) => {
  t.equal(codeOf('garbage'), 'invalid_proof', 'not a JWS')
  t.equal(codeOf(''), 'invalid_proof', 'empty')
  t.equal(codeOf(`${proof()}.x`), 'invalid_proof', 'four segments')
  t.equal(codeOf('a'.repeat(16 * 1024 + 1)), 'invalid_proof', 'over the size cap')
  t.equal(codeOf(proof({}, { alg: 'ES256' })), 'invalid_proof', 'alg other than EdDSA')
  t.equal(codeOf(proof({}, { alg: 'none' })), 'invalid_proof', 'alg none')
  t.equal(codeOf(proof({}, { typ: 'JWT' })), 'invalid_proof', 'typ JWT')
  t.equal(codeOf(proof({}, { typ: undefined })), 'invalid_proof', 'typ missing')
  t.equal(codeOf(proof({}, { kid: undefined })), 'invalid_proof', 'kid missing')
  t.equal(codeOf(proof({}, { kid: 7 })), 'invalid_proof', 'kid not a string')
  t.equal(codeOf(proof({}, { jwk: { kty: 'OKP' } })), 'invalid_proof', 'an embedded key is refused')
  for (const claim of ['cid', 'nonce', 'sub', 'aud', 'htu', 'htm', 'iat', 'exp', 'jti']) {
    t.equal(codeOf(proof({ [claim]: undefined })), 'invalid_proof', `missing ${claim}`)
  }
  for (const claim of ['cid', 'nonce', 'sub', 'htu', 'htm', 'jti']) {
    t.equal(codeOf(proof({ [claim]: 42 })), 'invalid_proof', `${claim} not a string`)
  }
  t.equal(codeOf(proof({ aud: 42 })), 'invalid_proof', 'aud not a string')
  t.equal(codeOf(proof({ iat: String(now) })), 'invalid_proof', 'iat as a string')
  t.equal(codeOf(proof({ exp: now + 0.5 })), 'invalid_proof', 'exp not an integer')
  t.equal(codeOf(proof({ nonce: 'another-nonce' })), 'invalid_proof', 'wrong nonce')
  t.equal(codeOf(proof({ htm: 'GET' })), 'invalid_proof', 'htm GET')
  t.equal(codeOf(proof({ htm: 'post' })), 'invalid_proof', 'htm is case-sensitive')
  const bad = checkPopProofClaims(proof({ nonce: 'x' }), expected)
  t.ok(!bad.ok && bad.message.length > 0, 'a failure carries a message')
})

t.test('each claim mismatch has its own code', async (t) => {
  t.equal(codeOf(proof({ cid: `ch-${randomUUID()}` })), 'cid_mismatch')
  t.equal(codeOf(proof({ sub: didKeyPair().did })), 'subject_mismatch')
  t.equal(codeOf(proof({ aud: 'http://evil.test' })), 'audience_mismatch')
  t.equal(codeOf(proof({ aud: [expected.audience, 'http://evil.test'] })), 'audience_mismatch', 'a second audience')
  t.equal(codeOf(proof({ htu: `${expected.htu}?x=1` })), 'htu_mismatch')
})

t.test('time rules and their edges', async (t) => {
  const future = now + POP_IAT_LEEWAY_SECONDS
  t.equal(codeOf(proof({ iat: future, exp: future + 10 })), 'ok', `iat ${POP_IAT_LEEWAY_SECONDS} s ahead is accepted`)
  t.equal(codeOf(proof({ iat: future + 1, exp: future + 10 })), 'iat_invalid', 'iat further ahead is not')
  const early = expected.challengeCreatedAt - POP_IAT_LEEWAY_SECONDS
  t.equal(codeOf(proof({ iat: early, exp: early + 60 }), { now: early + 30 }), 'ok', 'iat 60 s before the challenge is accepted')
  t.equal(codeOf(proof({ iat: early - 1, exp: early + 59 }), { now: early + 30 }), 'iat_invalid', 'iat before the challenge minus 60 s is not')
  t.equal(codeOf(proof({ exp: now + POP_MAX_LIFETIME_SECONDS })), 'ok', 'exp exactly 60 s after iat')
  t.equal(codeOf(proof({ exp: now + POP_MAX_LIFETIME_SECONDS + 1 })), 'exp_too_long')
  t.equal(codeOf(proof({ iat: now - 40, exp: now - POP_EXP_LEEWAY_SECONDS })), 'ok', 'within the exp leeway')
  t.equal(codeOf(proof({ iat: now - 40, exp: now - POP_EXP_LEEWAY_SECONDS - 1 })), 'proof_expired')
})

t.test('checks run in the order of docs/wire-contract.md §6 (first defect wins)', async (t) => {
  t.equal(codeOf(proof({ cid: 'ch-other', aud: 'x', htu: 'y', exp: now + 999 }, { typ: 'JWT' })), 'invalid_proof', 'header before claims')
  t.equal(codeOf(proof({ cid: 'ch-other', nonce: 'wrong' })), 'invalid_proof', 'nonce before cid')
  t.equal(codeOf(proof({ cid: 'ch-other', sub: 'did:key:other', aud: 'x' })), 'cid_mismatch')
  t.equal(codeOf(proof({ sub: 'did:key:other', aud: 'x', htu: 'y' })), 'subject_mismatch')
  t.equal(codeOf(proof({ aud: 'x', htu: 'y', iat: now + 999 })), 'audience_mismatch')
  t.equal(codeOf(proof({ htu: 'y', iat: now + 999 })), 'htu_mismatch')
  t.equal(codeOf(proof({ iat: now + 999, exp: now + 9999 })), 'iat_invalid')
  t.equal(codeOf(proof({ iat: now - 50, exp: now + 50 })), 'exp_too_long', 'lifetime before expiry')
})

t.test('key stage: kid_not_found, key_not_in_authentication, proof_verification_failed', async (t) => {
  const checked = (token: string): CheckedPopProof => {
    const result = checkPopProofClaims(token, expected)
    if (!result.ok) throw new Error(`unexpected ${result.code}`)
    return result.proof
  }
  const doc = (authentication: string[], keys: [string, Uint8Array][] = [[me.kid, me.raw]]): ResolvedKeys => ({
    did: me.did, keys: new Map(keys), authentication: new Set(authentication), assertionMethod: new Set([me.kid]),
  })

  const good = verifyPopProofKey(checked(proof()), doc([me.kid]))
  t.equal(good.ok, true, 'the right key verifies')
  if (good.ok) t.same(Buffer.from(good.publicKey), Buffer.from(me.raw), 'and is returned for cnf')

  const wrongKid = verifyPopProofKey(checked(proof({}, { kid: `${me.did}#other` })), doc([me.kid]))
  t.equal(wrongKid.ok ? 'ok' : wrongKid.code, 'kid_not_found')

  const notAuth = verifyPopProofKey(checked(proof()), doc([]))
  t.equal(notAuth.ok ? 'ok' : notAuth.code, 'key_not_in_authentication')

  const stranger = didKeyPair()
  const forged = verifyPopProofKey(checked(proof({}, {}, stranger.privateKey)), doc([me.kid]))
  t.equal(forged.ok ? 'ok' : forged.code, 'proof_verification_failed', 'signed by another key')

  const token = proof()
  const [h, p] = token.split('.')
  const tampered = `${h}.${b64json({ ...goodClaims(), jti: 'changed' })}.${token.split('.')[2]}`
  t.not(`${h}.${p}`, tampered.split('.').slice(0, 2).join('.'))
  const altered = verifyPopProofKey(checked(tampered), doc([me.kid]))
  t.equal(altered.ok ? 'ok' : altered.code, 'proof_verification_failed', 'a changed payload')
})
