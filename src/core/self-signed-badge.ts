/**
 * Self-signed level-0 badges (docs/wire-contract.md §4): `iss` = `sub` = a did:key, trust level `0`, signed by
 * the key inside that DID. No authority vouches for them, so the gateway accepts them only when
 * `SERVICE_ACCEPT_SELF_SIGNED=true`. The same claim shape and time rules as authority badges apply.
 */
import { createPublicKey, sign, verify, type KeyObject } from 'node:crypto'
import {
  MAX_BADGE_BYTES,
  buildBadgeClaims,
  checkValidity,
  claimsShapeValid,
  decodeEdDsaJws,
  type BadgeClaims,
  type BadgeVerification,
} from './badge.js'
import { decodeDidKey, didKeyVerificationMethodId, encodeDidKey, publicKeyToJwk } from './did-key.js'

const DID_KEY_PREFIX = 'did:key:'

/** Whether an (unverified) payload claims to be self-signed: only then is the DID's key consulted. */
export function looksSelfSigned(payload: Record<string, unknown>): boolean {
  return typeof payload.iss === 'string' && payload.iss.startsWith(DID_KEY_PREFIX) && payload.iss === payload.sub
}

/** Mints a self-signed level-0 badge for the did:key of `privateKey` (SDK and tests). */
export function signSelfSignedBadge(
  privateKey: KeyObject,
  options: { jti: string; issuedAt: number; expiresAt: number; audience?: readonly string[]; domain?: string },
): { token: string; did: string } {
  const x = (createPublicKey(privateKey).export({ format: 'jwk' }) as { x: string }).x
  const did = encodeDidKey(Buffer.from(x, 'base64url'))
  const claims = buildBadgeClaims({
    jti: options.jti,
    issuer: did,
    subject: did,
    issuedAt: options.issuedAt,
    expiresAt: options.expiresAt,
    ial: '0',
    level: '0',
    domain: options.domain ?? '',
    ...(options.audience === undefined ? {} : { audience: options.audience }),
  })
  const header = { alg: 'EdDSA', typ: 'JWT', kid: didKeyVerificationMethodId(did) }
  const input = `${Buffer.from(JSON.stringify(header)).toString('base64url')}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}`
  return { token: `${input}.${sign(null, Buffer.from(input, 'ascii'), privateKey).toString('base64url')}`, did }
}

/**
 * Verifies a self-signed badge: the key comes from the did:key in `iss` (which must equal `sub`), the
 * header `kid`, when present, must be that DID's verification method, and the level must be `0`.
 */
export function verifySelfSignedBadge(
  token: string,
  options: { now: number; audience?: readonly string[]; isRevoked?: (jti: string) => boolean },
): BadgeVerification {
  const decoded = decodeEdDsaJws(token, MAX_BADGE_BYTES)
  if ('error' in decoded) return { valid: false, error: decoded.error === 'ALG' ? 'BADGE_SIGNATURE_INVALID' : 'BADGE_MALFORMED' }
  const { header, payload, signingInput, signature } = decoded
  if (header.typ !== undefined && header.typ !== 'JWT') return { valid: false, error: 'BADGE_MALFORMED' }
  if (!looksSelfSigned(payload)) return { valid: false, error: 'BADGE_ISSUER_UNTRUSTED' }
  const did = payload.iss as string
  if (header.kid !== undefined && header.kid !== didKeyVerificationMethodId(did)) return { valid: false, error: 'BADGE_SIGNATURE_INVALID' }
  let ok = false
  try {
    const key = createPublicKey({ key: { ...publicKeyToJwk(decodeDidKey(did)) }, format: 'jwk' })
    ok = verify(null, signingInput, key, signature)
  } catch {
    return { valid: false, error: 'BADGE_ISSUER_UNTRUSTED' }
  }
  if (!ok) return { valid: false, error: 'BADGE_SIGNATURE_INVALID' }
  if (!claimsShapeValid(payload)) return { valid: false, error: 'BADGE_CLAIMS_INVALID' }
  const claims = payload as unknown as BadgeClaims
  if (claims.vc.credentialSubject.level !== '0') return { valid: false, error: 'BADGE_CLAIMS_INVALID' }
  const failure = checkValidity(claims, options)
  if (failure !== null) return { valid: false, error: failure }
  return { valid: true, claims, kid: header.kid === undefined ? null : String(header.kid) }
}
