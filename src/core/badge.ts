/**
 * Trust badges (docs/wire-contract.md §4): one verifier for the verify endpoint, the gateway and the SDK, on
 * node:crypto rather than a JOSE library, so the header is checked field by field before any key is touched
 * (no `none`, HMAC, embedded or remote keys, `crit` or `b64`) and every failure has one stable code.
 */
import { sign, verify, type KeyObject } from 'node:crypto'
import type { TrustLevel } from './trust-level.js'

export const BADGE_ERROR_CODES = [
  'BADGE_MALFORMED',
  'BADGE_SIGNATURE_INVALID',
  'BADGE_EXPIRED',
  'BADGE_NOT_YET_VALID',
  'BADGE_ISSUER_UNTRUSTED',
  'BADGE_AUDIENCE_MISMATCH',
  'BADGE_REVOKED',
  'BADGE_CLAIMS_INVALID',
] as const
export type BadgeErrorCode = (typeof BADGE_ERROR_CODES)[number]

export type Ial = '0' | '1'

export interface BadgeClaims {
  jti: string
  iss: string
  sub: string
  iat: number
  exp: number
  nbf?: number
  ial: Ial
  aud?: string[]
  cnf?: { kid: string; jwk: { kty: 'OKP'; crv: 'Ed25519'; x: string; kid?: string } }
  pop_challenge_id?: string
  vc: {
    type: string[]
    /** Required from level 2 (DV) up. */
    credentialSubject: { domain?: string; level: TrustLevel }
  }
}

/** A badge as the registry's issuance endpoints answer it (`data` of the envelope; docs/api.md §2.4). */
export interface IssuedBadge {
  token: string
  jti: string
  subject: string
  trustLevel: string
  expiresAt: string
  ial: Ial
  cnf?: BadgeClaims['cnf']
}

export interface BadgeToSign {
  jti: string
  issuer: string
  subject: string
  issuedAt: number
  expiresAt: number
  ial: Ial
  level: TrustLevel
  domain: string
  audience?: readonly string[]
  cnf?: BadgeClaims['cnf']
  popChallengeId?: string
}

/** The largest token any verifier here will parse: bounds the work an attacker can ask for. */
export const MAX_BADGE_BYTES = 16 * 1024
/** Clock leeway on exp / iat / nbf (docs/wire-contract.md §4). */
export const CLOCK_LEEWAY_SECONDS = 60
/** Without a `kid`, at most this many keys are tried (docs/wire-contract.md §4). */
const MAX_KEYS_WITHOUT_KID = 5

/** Header parameters no verifier here accepts: they bring their own keys or change how the JWS is processed. */
export const FORBIDDEN_HEADER_PARAMS = ['jwk', 'jku', 'x5u', 'x5c', 'x5t', 'x5t#S256', 'crit', 'b64'] as const
const BASE64URL = /^[A-Za-z0-9_-]+$/
const LEVELS = new Set(['0', '1', '2', '3', '4'])

const encodeJson = (value: unknown): string => Buffer.from(JSON.stringify(value), 'utf8').toString('base64url')

export function buildBadgeClaims(input: BadgeToSign): BadgeClaims {
  const claims: BadgeClaims = {
    jti: input.jti,
    iss: input.issuer,
    sub: input.subject,
    iat: input.issuedAt,
    exp: input.expiresAt,
    ial: input.ial,
    vc: {
      type: ['VerifiableCredential', 'AgentIdentity'],
      credentialSubject: { domain: input.domain, level: input.level },
    },
  }
  if (input.audience !== undefined && input.audience.length > 0) claims.aud = [...input.audience]
  if (input.cnf !== undefined) claims.cnf = input.cnf
  if (input.popChallengeId !== undefined) claims.pop_challenge_id = input.popChallengeId
  return claims
}

/** Signs claims as a compact JWS with header `{alg: EdDSA, typ: JWT, kid}`. */
export function signBadge(claims: BadgeClaims, key: { kid: string; privateKey: KeyObject }): string {
  const signingInput = `${encodeJson({ alg: 'EdDSA', typ: 'JWT', kid: key.kid })}.${encodeJson(claims)}`
  return `${signingInput}.${sign(null, Buffer.from(signingInput, 'ascii'), key.privateKey).toString('base64url')}`
}

/** Strict, canonical base64url: one accepted spelling per value. */
function decodeSegment(segment: string): Buffer | null {
  if (!BASE64URL.test(segment) || segment.length % 4 === 1) return null
  const bytes = Buffer.from(segment, 'base64url')
  return bytes.toString('base64url') === segment ? bytes : null
}

const utf8 = new TextDecoder('utf-8', { fatal: true })

function decodeJsonObject(segment: string): Record<string, unknown> | null {
  const bytes = decodeSegment(segment)
  if (bytes === null) return null
  try {
    const value: unknown = JSON.parse(utf8.decode(bytes))
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : null
  } catch {
    return null
  }
}

export interface DecodedJws {
  header: Record<string, unknown>
  payload: Record<string, unknown>
  signingInput: Buffer
  signature: Buffer
}

/**
 * Splits and decodes a compact JWS whose header allows only EdDSA and no key-bearing or processing-
 * changing parameters. Returns an error code instead of throwing. Shared by badges, proofs and envelopes.
 */
export function decodeEdDsaJws(token: string, maxBytes: number): DecodedJws | { error: 'MALFORMED' | 'ALG' } {
  if (typeof token !== 'string' || token.length === 0 || token.length > maxBytes) return { error: 'MALFORMED' }
  const first = token.indexOf('.')
  const second = token.indexOf('.', first + 1)
  if (first <= 0 || second <= first + 1 || token.indexOf('.', second + 1) !== -1 || second === token.length - 1) {
    return { error: 'MALFORMED' }
  }
  const header = decodeJsonObject(token.slice(0, first))
  const payload = decodeJsonObject(token.slice(first + 1, second))
  const signature = decodeSegment(token.slice(second + 1))
  if (header === null || payload === null || signature === null) return { error: 'MALFORMED' }
  for (const param of FORBIDDEN_HEADER_PARAMS) if (param in header) return { error: 'MALFORMED' }
  if (header.alg !== 'EdDSA') return { error: 'ALG' }
  if (signature.length !== 64) return { error: 'ALG' }
  return { header, payload, signingInput: Buffer.from(token.slice(0, second), 'ascii'), signature }
}

export interface BadgeVerificationOptions {
  readonly keys: ReadonlyMap<string, KeyObject>
  readonly issuer: string
  /** Unix seconds. */
  readonly now: number
  /** When given, a badge carrying `aud` must list one of these. */
  readonly audience?: readonly string[]
  readonly isRevoked?: (jti: string) => boolean
}

export type BadgeVerification =
  | { valid: true; claims: BadgeClaims; kid: string | null }
  | { valid: false; error: BadgeErrorCode }

export function claimsShapeValid(p: Record<string, unknown>): boolean {
  const vc = p.vc as { type?: unknown; credentialSubject?: { domain?: unknown; level?: unknown } } | undefined
  return (
    typeof p.jti === 'string' && p.jti.length > 0 && p.jti.length <= 128 &&
    typeof p.sub === 'string' && p.sub.startsWith('did:') &&
    Number.isSafeInteger(p.iat) && Number.isSafeInteger(p.exp) &&
    (p.nbf === undefined || Number.isSafeInteger(p.nbf)) &&
    (p.ial === '0' || p.ial === '1') &&
    (p.aud === undefined || (Array.isArray(p.aud) && p.aud.every((a) => typeof a === 'string')) || typeof p.aud === 'string') &&
    typeof vc === 'object' && vc !== null && Array.isArray(vc.type) &&
    vc.type.includes('VerifiableCredential') && vc.type.includes('AgentIdentity') &&
    typeof vc.credentialSubject === 'object' && vc.credentialSubject !== null &&
    typeof vc.credentialSubject.level === 'string' && LEVELS.has(vc.credentialSubject.level) &&
    (typeof vc.credentialSubject.domain === 'string' ||
      (vc.credentialSubject.domain === undefined && (vc.credentialSubject.level === '0' || vc.credentialSubject.level === '1')))
  )
}

/** Signature first: nothing unverified is ever trusted or returned. */
export function verifyBadge(token: string, options: BadgeVerificationOptions): BadgeVerification {
  const decoded = decodeEdDsaJws(token, MAX_BADGE_BYTES)
  if ('error' in decoded) return { valid: false, error: decoded.error === 'ALG' ? 'BADGE_SIGNATURE_INVALID' : 'BADGE_MALFORMED' }
  const { header, payload, signingInput, signature } = decoded
  if (header.typ !== undefined && header.typ !== 'JWT') return { valid: false, error: 'BADGE_MALFORMED' }

  let kid: string | null = null
  if (header.kid !== undefined) {
    if (typeof header.kid !== 'string') return { valid: false, error: 'BADGE_MALFORMED' }
    const key = options.keys.get(header.kid)
    if (key === undefined || !verify(null, signingInput, key, signature)) return { valid: false, error: 'BADGE_SIGNATURE_INVALID' }
    kid = header.kid
  } else {
    let ok = false
    let tried = 0
    for (const key of options.keys.values()) {
      if (tried++ >= MAX_KEYS_WITHOUT_KID) break
      if (verify(null, signingInput, key, signature)) {
        ok = true
        break
      }
    }
    if (!ok) return { valid: false, error: 'BADGE_SIGNATURE_INVALID' }
  }

  if (payload.iss !== options.issuer) return { valid: false, error: 'BADGE_ISSUER_UNTRUSTED' }
  if (!claimsShapeValid(payload)) return { valid: false, error: 'BADGE_CLAIMS_INVALID' }
  const claims = payload as unknown as BadgeClaims
  if (claims.vc.credentialSubject.level === '0') return { valid: false, error: 'BADGE_CLAIMS_INVALID' }
  const failure = checkValidity(claims, options)
  return failure === null ? { valid: true, claims, kid } : { valid: false, error: failure }
}

/** Time, audience and revocation, shared by every kind of badge; null when the badge passes. */
export function checkValidity(
  claims: BadgeClaims,
  options: { now: number; audience?: readonly string[]; isRevoked?: (jti: string) => boolean },
): BadgeErrorCode | null {
  if (claims.exp + CLOCK_LEEWAY_SECONDS < options.now) return 'BADGE_EXPIRED'
  if (claims.iat - CLOCK_LEEWAY_SECONDS > options.now) return 'BADGE_NOT_YET_VALID'
  if (claims.nbf !== undefined && claims.nbf - CLOCK_LEEWAY_SECONDS > options.now) return 'BADGE_NOT_YET_VALID'
  if (options.audience !== undefined && claims.aud !== undefined) {
    const aud = typeof claims.aud === 'string' ? [claims.aud] : claims.aud
    if (!aud.some((a) => options.audience?.includes(a))) return 'BADGE_AUDIENCE_MISMATCH'
  }
  if (options.isRevoked?.(claims.jti) === true) return 'BADGE_REVOKED'
  return null
}
