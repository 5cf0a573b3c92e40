/**
 * Badges on the agent side: self-signed level-0 badges for a did:key, and verification of authority
 * badges against a JWKS (given, or fetched from a registry) with the very verifier the gateway and the
 * verify endpoint use (src/core/badge.ts), so the SDK cannot accept what they would refuse.
 */
import { createPublicKey, randomUUID, type KeyObject } from 'node:crypto'
import { verifyBadge, type BadgeVerification } from '../core/badge.js'
import { isRecord } from '../core/json-objects.js'
import { looksSelfSigned, signSelfSignedBadge, verifySelfSignedBadge } from '../core/self-signed-badge.js'
import { SdkError } from './errors.js'
import { callRegistry, registryEndpoint } from './http.js'

/** A JSON Web Key Set as `/.well-known/jwks.json` serves it. */
export interface Jwks {
  keys: Array<Record<string, unknown>>
}

/** Options of {@link mintSelfSignedBadge}. */
export interface SelfSignedBadgeOptions {
  /** Lifetime in seconds (default 300). */
  ttlSeconds?: number
  audience?: readonly string[]
  domain?: string
  jti?: string
  /** Unix seconds (default: the clock). */
  now?: number
}

/**
 * Mints a self-signed level-0 badge (docs/wire-contract.md §4): `iss` = `sub` = the did:key of `privateKey`.
 * No authority vouches for it; a gateway accepts it only with `SERVICE_ACCEPT_SELF_SIGNED=true`.
 */
export function mintSelfSignedBadge(privateKey: KeyObject, options: SelfSignedBadgeOptions = {}): { token: string; did: string; jti: string } {
  const ttl = options.ttlSeconds ?? 300
  if (!Number.isSafeInteger(ttl) || ttl < 1) throw new SdkError('invalid_argument', 'ttlSeconds must be a positive integer.')
  const now = options.now ?? Math.floor(Date.now() / 1000)
  const jti = options.jti ?? randomUUID()
  const { token, did } = signSelfSignedBadge(privateKey, {
    jti,
    issuedAt: now,
    expiresAt: now + ttl,
    ...(options.audience === undefined ? {} : { audience: options.audience }),
    ...(options.domain === undefined ? {} : { domain: options.domain }),
  })
  return { token, did, jti }
}

/** `<registry>/.well-known/jwks.json`. */
export function jwksUrlFor(registryUrl: string): string {
  return registryEndpoint(registryUrl, '/.well-known/jwks.json')
}

/** Fetches a JWKS; {@link SdkError} `invalid_response` when the answer is not `{keys: [...]}`. */
export async function fetchJwks(jwksUrl: string, options: { timeoutMs?: number } = {}): Promise<Jwks> {
  const body = await callRegistry({ method: 'GET', url: jwksUrl, ...(options.timeoutMs === undefined ? {} : { timeoutMs: options.timeoutMs }) })
  const keys = (body as { keys?: unknown }).keys
  if (!Array.isArray(keys) || !keys.every(isRecord)) {
    throw new SdkError('invalid_response', 'The JWKS answer has no keys array.')
  }
  return { keys: keys as Array<Record<string, unknown>> }
}

/**
 * The Ed25519 keys of a JWKS by `kid`. Keys of other types, private keys (a `d` member: a JWKS that
 * publishes one is broken, and its keys are not trusted with it) and keys node cannot import are skipped;
 * a key without `kid` is kept under a synthetic name so that kid-less badges can still be tried on it.
 */
export function jwksKeyMap(jwks: Jwks): Map<string, KeyObject> {
  const keys = new Map<string, KeyObject>()
  jwks.keys.forEach((jwk, index) => {
    if (jwk.kty !== 'OKP' || jwk.crv !== 'Ed25519' || typeof jwk.x !== 'string' || 'd' in jwk) return
    if (jwk.alg !== undefined && jwk.alg !== 'EdDSA') return
    if (jwk.use !== undefined && jwk.use !== 'sig') return
    try {
      const key = createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: jwk.x }, format: 'jwk' })
      keys.set(typeof jwk.kid === 'string' ? jwk.kid : `#${index}`, key)
    } catch {
      // not a key this verifier can use
    }
  })
  return keys
}

/** Options of {@link verifyBadgeWithJwks}: exactly one of `jwks` and `jwksUrl`. */
export interface VerifyBadgeOptions {
  jwks?: Jwks
  jwksUrl?: string
  /** The authority issuer URL every badge must carry as `iss` (`CA_ISSUER_URL` of the registry). */
  issuer: string
  /** When given, a badge carrying `aud` must list one of these. */
  audience?: readonly string[]
  /** Unix seconds (default: the clock). */
  now?: number
  /** Revocation lookup (e.g. from `GET /v1/revocations`); the SDK keeps no revocation list itself. */
  isRevoked?: (jti: string) => boolean
  /**
   * Also accept self-signed level-0 badges, verified with the key inside their did:key (the gateway does
   * so only with `SERVICE_ACCEPT_SELF_SIGNED=true`). Default false.
   */
  acceptSelfSigned?: boolean
  timeoutMs?: number
}

/**
 * Verifies a badge as the gateway does (docs/wire-contract.md §4): EdDSA only, key by `kid` from the JWKS,
 * 60 s leeway, `iss` equal to `issuer`, audience and revocation. Resolves to the verified claims or the
 * `BADGE_*` code; rejects with {@link SdkError} only when the JWKS cannot be fetched.
 */
export async function verifyBadgeWithJwks(token: string, options: VerifyBadgeOptions): Promise<BadgeVerification> {
  if ((options.jwks === undefined) === (options.jwksUrl === undefined)) {
    throw new SdkError('invalid_argument', 'Give exactly one of jwks and jwksUrl.')
  }
  const now = options.now ?? Math.floor(Date.now() / 1000)
  const common = {
    now,
    ...(options.audience === undefined ? {} : { audience: options.audience }),
    ...(options.isRevoked === undefined ? {} : { isRevoked: options.isRevoked }),
  }
  if (options.acceptSelfSigned === true && typeof token === 'string' && selfSignedPayload(token)) {
    return verifySelfSignedBadge(token, common)
  }
  const jwks = options.jwks ?? (await fetchJwks(options.jwksUrl as string, options.timeoutMs === undefined ? {} : { timeoutMs: options.timeoutMs }))
  return verifyBadge(token, { keys: jwksKeyMap(jwks), issuer: options.issuer, ...common })
}

// Peeks at the unverified payload only to pick the verifier; the chosen verifier checks everything.
function selfSignedPayload(token: string): boolean {
  const segment = token.split('.')[1]
  if (segment === undefined) return false
  try {
    const payload: unknown = JSON.parse(Buffer.from(segment, 'base64url').toString('utf8'))
    return typeof payload === 'object' && payload !== null && looksSelfSigned(payload as Record<string, unknown>)
  } catch {
    return false
  }
}
