// The proof of IAL-1 issuance (docs/wire-contract.md §6): claim checks, cheap first, then the key checks
// against an already resolved DID document.
import { createPublicKey, verify } from 'node:crypto'
import { decodeEdDsaJws } from './badge.js'
import type { ResolvedKeys } from './did-document.js'

export const POP_PROOF_TYP = 'pop+jwt'
/** The largest proof parsed: a proof is a few hundred bytes, so this only bounds hostile input. */
export const MAX_POP_PROOF_BYTES = 16 * 1024
/** A proof may be dated this far ahead of the server clock, or this far before its challenge existed. */
export const POP_IAT_LEEWAY_SECONDS = 60
export const POP_MAX_LIFETIME_SECONDS = 60
/** Proofs live at most a minute, so the badges' 60 s leeway would double their life. */
export const POP_EXP_LEEWAY_SECONDS = 5

const MAX_CLAIM_LENGTH = 2048

export type PopClaimErrorCode =
  | 'invalid_proof'
  | 'cid_mismatch'
  | 'subject_mismatch'
  | 'audience_mismatch'
  | 'htu_mismatch'
  | 'iat_invalid'
  | 'exp_too_long'
  | 'proof_expired'

export type PopKeyErrorCode = 'kid_not_found' | 'key_not_in_authentication' | 'proof_verification_failed'

/** What the challenge row fixes, plus the clock. Times are Unix seconds. */
export interface PopProofExpectations {
  readonly challengeId: string
  readonly nonce: string
  readonly did: string
  readonly audience: string
  readonly htu: string
  readonly challengeCreatedAt: number
  readonly now: number
}

export interface PopProofClaims {
  cid: string
  nonce: string
  sub: string
  aud: string | string[]
  htu: string
  htm: string
  iat: number
  exp: number
  jti: string
}

/** A proof whose header and claims passed; its signature is still unchecked. */
export interface CheckedPopProof {
  readonly kid: string
  readonly claims: PopProofClaims
  readonly signingInput: Buffer
  readonly signature: Buffer
}

export type PopClaimCheck =
  | { ok: true; proof: CheckedPopProof }
  | { ok: false; code: PopClaimErrorCode; message: string }

export type PopKeyCheck =
  | { ok: true; publicKey: Uint8Array }
  | { ok: false; code: PopKeyErrorCode; message: string }

const isText = (value: unknown): value is string =>
  typeof value === 'string' && value.length > 0 && value.length <= MAX_CLAIM_LENGTH

const isAudience = (value: unknown): value is string | string[] =>
  isText(value) || (Array.isArray(value) && value.length > 0 && value.length <= 10 && value.every(isText))

const REQUIRED_TEXT_CLAIMS = ['cid', 'nonce', 'sub', 'htu', 'htm', 'jti'] as const

const fail = (code: PopClaimErrorCode, message: string): PopClaimCheck => ({ ok: false, code, message })

/** The first failure is reported, in the order of docs/wire-contract.md §6. */
export function checkPopProofClaims(token: string, expected: PopProofExpectations): PopClaimCheck {
  const decoded = decodeEdDsaJws(token, MAX_POP_PROOF_BYTES)
  if ('error' in decoded) {
    return fail('invalid_proof', decoded.error === 'ALG' ? 'The proof must be signed with EdDSA.' : 'The proof is not a compact JWS.')
  }
  const { header, payload } = decoded
  if (header.typ !== POP_PROOF_TYP) return fail('invalid_proof', `The proof header typ must be "${POP_PROOF_TYP}".`)
  if (!isText(header.kid)) return fail('invalid_proof', 'The proof header must carry kid, a verification method id of the DID.')
  for (const name of REQUIRED_TEXT_CLAIMS) {
    if (!isText(payload[name])) return fail('invalid_proof', `The proof claim ${name} is missing or not a string.`)
  }
  if (!isAudience(payload.aud)) return fail('invalid_proof', 'The proof claim aud is missing or not a string.')
  if (!Number.isSafeInteger(payload.iat) || !Number.isSafeInteger(payload.exp)) {
    return fail('invalid_proof', 'The proof claims iat and exp must be Unix seconds.')
  }
  const claims = payload as unknown as PopProofClaims
  if (claims.nonce !== expected.nonce) return fail('invalid_proof', 'The proof nonce is not the challenge nonce.')
  if (claims.htm !== 'POST') return fail('invalid_proof', 'The proof htm must be "POST".')

  if (claims.cid !== expected.challengeId) return fail('cid_mismatch', 'The proof cid is not this challenge.')
  if (claims.sub !== expected.did) return fail('subject_mismatch', 'The proof sub is not the DID of the challenge.')
  // A proof is meant for exactly one authority: an array audience must name only this one.
  const audience = typeof claims.aud === 'string' ? [claims.aud] : claims.aud
  if (audience.length !== 1 || audience[0] !== expected.audience) {
    return fail('audience_mismatch', 'The proof aud must be the authority issuer URL.')
  }
  if (claims.htu !== expected.htu) return fail('htu_mismatch', 'The proof htu is not the badge/pop URL of the challenge.')
  if (claims.iat > expected.now + POP_IAT_LEEWAY_SECONDS) return fail('iat_invalid', 'The proof iat lies in the future.')
  // A proof cannot have been made for a challenge that did not exist yet (modulo clock skew).
  if (claims.iat < expected.challengeCreatedAt - POP_IAT_LEEWAY_SECONDS) {
    return fail('iat_invalid', 'The proof iat is earlier than the challenge.')
  }
  if (claims.exp - claims.iat > POP_MAX_LIFETIME_SECONDS) {
    return fail('exp_too_long', `The proof exp must be at most ${POP_MAX_LIFETIME_SECONDS} seconds after iat.`)
  }
  if (claims.exp + POP_EXP_LEEWAY_SECONDS < expected.now) return fail('proof_expired', 'The proof has expired.')
  return {
    ok: true,
    proof: { kid: header.kid, claims, signingInput: decoded.signingInput, signature: decoded.signature },
  }
}

export function verifyPopProofKey(proof: CheckedPopProof, resolved: ResolvedKeys): PopKeyCheck {
  const key = resolved.keys.get(proof.kid)
  if (key === undefined) return { ok: false, code: 'kid_not_found', message: 'The proof kid is not an Ed25519 verification method of the DID.' }
  // assertionMethod is not enough: the proof shows control of the DID, which is what authentication means.
  if (!resolved.authentication.has(proof.kid)) {
    return { ok: false, code: 'key_not_in_authentication', message: 'The proof kid is not listed under authentication in the DID document.' }
  }
  let valid = false
  try {
    const publicKey = createPublicKey({
      key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(key).toString('base64url') },
      format: 'jwk',
    })
    valid = verify(null, proof.signingInput, publicKey, proof.signature)
  } catch {
    // a key node cannot import can verify nothing
    valid = false
  }
  if (!valid) return { ok: false, code: 'proof_verification_failed', message: 'The proof signature does not verify with the key named by kid.' }
  return { ok: true, publicKey: key }
}

/** docs/wire-contract.md §6: a bare body, not enveloped. */
export interface ChallengeView {
  challenge_id: string
  nonce: string
  challenge_expires_at: string
  expires_at: string
  /** The authority issuer URL: the proof's `aud`. */
  aud: string
  /** The badge/pop URL: the proof's `htu`. */
  htu: string
  htm: 'POST'
  badge_aud: string[]
  badge_ttl: number
}
