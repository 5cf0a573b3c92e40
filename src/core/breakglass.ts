// Break-glass tokens (docs/wire-contract.md §11). A failure is ignored by the gateway (normal evaluation
// runs), so it is a stable reason for the log rather than an exception.
import { createPublicKey, sign, verify, type JsonWebKey, type KeyObject } from 'node:crypto'
import { decodeEdDsaJws } from './badge.js'

/** Times in Unix seconds; `sub` is the operator. */
export interface BreakglassClaims {
  jti: string
  iat: number
  exp: number
  iss: string
  sub: string
  reason: string
  scope: { methods: string[]; routes: string[] }
}

export type BreakglassFailure =
  | 'malformed'
  | 'alg'
  | 'signature'
  | 'claims'
  | 'expired'
  | 'not_yet_valid'
  | 'lifetime_too_long'
  | 'out_of_scope'

/** The largest token parsed: an override header has no reason to be large. */
export const MAX_BREAKGLASS_TOKEN_BYTES = 8 * 1024
export const BREAKGLASS_MAX_LIFETIME_SECONDS = 3600
/** Below the badges' 60 s: an override is the most powerful credential, yet a few seconds of drift must not void it. */
export const BREAKGLASS_CLOCK_LEEWAY_SECONDS = 30

const nonEmptyString = (value: unknown): value is string => typeof value === 'string' && value.trim().length > 0
const stringArray = (value: unknown): value is string[] => Array.isArray(value) && value.every((v) => typeof v === 'string')
// Integers only: tokens are minted by `signBreakglassToken`, and fractional times only widen what to test.
const time = (value: unknown): value is number => typeof value === 'number' && Number.isSafeInteger(value) && value >= 0

function parseClaims(payload: Record<string, unknown>): BreakglassClaims | null {
  const { jti, iat, exp, iss, sub, reason, scope } = payload
  if (!nonEmptyString(jti) || !nonEmptyString(iss) || !nonEmptyString(sub) || !nonEmptyString(reason)) return null
  if (!time(iat) || !time(exp)) return null
  if (typeof scope !== 'object' || scope === null || Array.isArray(scope)) return null
  const { methods, routes } = scope as Record<string, unknown>
  if (!stringArray(methods) || !stringArray(routes)) return null
  return { jti, iat, exp, iss, sub, reason, scope: { methods: [...methods], routes: [...routes] } }
}

// Dot segments and encoded separators are refused for every route but `*`: the upstream may normalise
// `/admin/../users` to `/users`, which would let a token scoped to `/admin` reach anything.
const AMBIGUOUS_PATH = /(^|\/)(\.|%2e){1,2}(\/|$)|%2f|%5c|\\/i

function routeMatches(route: string, path: string): boolean {
  if (route === '*') return true
  if (route.length === 0 || AMBIGUOUS_PATH.test(path)) return false
  if (path === route) return true
  // A prefix only counts at a segment boundary: `/admin` covers `/admin/x` but not `/administrator`.
  return route.endsWith('/') ? path.startsWith(route) : path.startsWith(`${route}/`)
}

function inScope(scope: BreakglassClaims['scope'], method: string, rawPath: string, caseInsensitive: boolean): boolean {
  const path = rawPath.split(/[?#]/, 1)[0] ?? ''
  const upper = method.toUpperCase()
  const methodOk = scope.methods.some((m) => m === '*' || m.toUpperCase() === upper)
  if (!methodOk) return false
  if (!caseInsensitive) return scope.routes.some((route) => routeMatches(route, path))
  const lowerPath = path.toLowerCase()
  return scope.routes.some((route) => routeMatches(route.toLowerCase(), lowerPath))
}

/**
 * The signature is checked before any claim is trusted; the first failure is the reason. `typ` is not checked:
 * the key is dedicated to break-glass, so no other token type can carry a valid signature.
 */
export function verifyBreakglassToken(
  token: string,
  options: {
    publicKey: KeyObject
    now: number
    method: string
    path: string
    /** The route's upstream ignores path case: scope routes match case-insensitively too. */
    caseInsensitive?: boolean
  },
): { ok: true; claims: BreakglassClaims } | { ok: false; reason: BreakglassFailure } {
  const decoded = decodeEdDsaJws(token, MAX_BREAKGLASS_TOKEN_BYTES)
  if ('error' in decoded) return { ok: false, reason: decoded.error === 'ALG' ? 'alg' : 'malformed' }
  let valid = false
  try {
    valid = verify(null, decoded.signingInput, options.publicKey, decoded.signature)
  } catch {
    // A key of the wrong type throws; for the caller that is just a signature that does not verify.
    valid = false
  }
  if (!valid) return { ok: false, reason: 'signature' }
  const claims = parseClaims(decoded.payload)
  if (claims === null || claims.exp <= claims.iat) return { ok: false, reason: 'claims' }
  if (claims.exp - claims.iat > BREAKGLASS_MAX_LIFETIME_SECONDS) return { ok: false, reason: 'lifetime_too_long' }
  if (claims.iat > options.now + BREAKGLASS_CLOCK_LEEWAY_SECONDS) return { ok: false, reason: 'not_yet_valid' }
  if (options.now >= claims.exp + BREAKGLASS_CLOCK_LEEWAY_SECONDS) return { ok: false, reason: 'expired' }
  if (!inScope(claims.scope, options.method, options.path, options.caseInsensitive === true)) return { ok: false, reason: 'out_of_scope' }
  return { ok: true, claims }
}

/** PEM SPKI or an Ed25519 JWK; a private key in either form is refused, since this file must never hold one. */
export function loadBreakglassPublicKey(text: string): KeyObject {
  const trimmed = text.trim()
  let key: KeyObject
  if (trimmed.startsWith('{')) {
    let jwk: unknown
    try {
      jwk = JSON.parse(trimmed)
    } catch {
      throw new Error('break-glass public key: not valid JSON')
    }
    if (typeof jwk !== 'object' || jwk === null || Array.isArray(jwk)) throw new Error('break-glass public key: the JWK is not a JSON object')
    const fields = jwk as Record<string, unknown>
    if ('d' in fields) throw new Error('break-glass public key: the JWK holds a private key ("d"); give the public key only')
    if (fields.kty !== 'OKP' || fields.crv !== 'Ed25519' || typeof fields.x !== 'string') {
      throw new Error('break-glass public key: the JWK must have kty "OKP", crv "Ed25519" and x')
    }
    try {
      key = createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: fields.x } as JsonWebKey, format: 'jwk' })
    } catch {
      throw new Error('break-glass public key: the JWK is not a valid Ed25519 public key')
    }
  } else if (trimmed.startsWith('-----BEGIN')) {
    // createPublicKey would happily derive a public key from a private PEM; refuse instead, so a leaked
    // private key in the gateway's configuration is noticed.
    if (!trimmed.startsWith('-----BEGIN PUBLIC KEY-----')) {
      throw new Error('break-glass public key: expected a "BEGIN PUBLIC KEY" (SPKI) PEM; private keys are refused')
    }
    try {
      key = createPublicKey({ key: trimmed, format: 'pem' })
    } catch {
      throw new Error('break-glass public key: the PEM could not be parsed')
    }
  } else {
    throw new Error('break-glass public key: expected a PEM SPKI public key or a JWK JSON object')
  }
  if (key.asymmetricKeyType !== 'ed25519') {
    throw new Error(`break-glass public key: expected an Ed25519 key, got ${key.asymmetricKeyType ?? 'unknown'}`)
  }
  return key
}

const encodeJson = (value: unknown): string => Buffer.from(JSON.stringify(value), 'utf8').toString('base64url')

/** Signs break-glass claims as a compact JWS with header `{alg: EdDSA, typ: JWT}` (Ed25519 key). */
export function signBreakglassToken(claims: BreakglassClaims, privateKey: KeyObject): string {
  const signingInput = `${encodeJson({ alg: 'EdDSA', typ: 'JWT' })}.${encodeJson(claims)}`
  return `${signingInput}.${sign(null, Buffer.from(signingInput, 'ascii'), privateKey).toString('base64url')}`
}
