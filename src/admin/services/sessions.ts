/**
 * Dashboard session tokens (docs/wire-contract.md §2, docs/api.md §5): a JWT from the external identity provider,
 * verified against its JWKS (SERVICE_AUTH_JWKS_URL) or its PEM public key (CLERK_JWT_KEY). The token
 * says who the user is; what they may do comes only from the users and memberships the webhook syncs.
 *
 * Freshness: a verified token is cached (by its SHA-256) for at most 60 s and never past its `exp`, so
 * the JWKS and the signature check are not paid per request. The membership behind it is re-read at
 * most every MEMBERSHIP_TTL_MS (5 s): a member removed at the identity provider loses access within
 * about 5 s of the webhook arriving, on every instance, without any cross-instance signalling.
 */
import { createHash } from 'node:crypto'
import { createRemoteJWKSet, customFetch, decodeJwt, errors, importSPKI, jwtVerify, type JWTPayload, type JWTVerifyGetKey } from 'jose'
import { LRUCache } from 'lru-cache'
import type { Config } from '../../config/index.js'
import { ServiceError } from '../../core/errors.js'
import type { Database } from '../../db/database.js'
import { findSessionMembership } from '../../db/repositories/identity.js'
import type { CredentialResolver } from '../plugins/auth.js'
import type { Principal } from '../../core/principal.js'
import { BodyTooLargeError, readBoundedBody } from '../../net/bounded-body.js'

// Asymmetric algorithms only: an HMAC algorithm would let anyone holding the public key mint tokens,
// and 'none' needs no key at all.
const JWKS_ALGORITHMS = ['RS256', 'ES256', 'EdDSA']
// Clerk signs its session tokens with RS256, and the PEM key it publishes is an RSA key.
const PEM_ALGORITHM = 'RS256'
const CLOCK_TOLERANCE_S = 60
const JWKS_TIMEOUT_MS = 5_000
const TOKEN_TTL_MS = 60_000
/** How long a membership read stands before it is read again (also for console sessions). */
export const MEMBERSHIP_TTL_MS = 5_000
const CACHE_SIZE = 10_000
const JWT_SHAPE = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/
/** Largest JWKS body read from the identity provider; a provider's key set is a few KiB. */
export const MAX_IDP_JWKS_BYTES = 256 * 1024
/** Most keys in the provider's JWKS: every token without a matching kid is tried against each. */
export const MAX_IDP_JWKS_KEYS = 50

/** The JWKS document is not a usable key set; jose reports it, and the caller answers 503. */
class IdpJwksRefused extends Error {
  readonly code = 'IDP_JWKS_REFUSED'
  override readonly name = 'IdpJwksRefused'

  constructor(reason: string, options?: ErrorOptions) {
    super(`the identity provider's JWKS was refused: ${reason}`, options)
  }
}

/**
 * The fetch jose uses for the provider's JWKS, with what jose leaves out: a body cap (jose reads
 * any length into memory) and a bound on the number of keys. The provider is a peer; a runaway or
 * hostile answer must cost at most this much memory, once per JWKS refresh.
 */
async function boundedJwksFetch(url: string, init: RequestInit): Promise<Response> {
  const response = await fetch(url, init)
  if (response.status !== 200 || response.body === null) return response
  const text = (await readBoundedBody(response.body, MAX_IDP_JWKS_BYTES, response.headers.get('content-length')).catch((error: unknown) => {
    if (error instanceof BodyTooLargeError) throw new IdpJwksRefused(`a body of more than ${MAX_IDP_JWKS_BYTES} bytes`, { cause: error })
    throw error
  })).toString('utf8')
  let document: unknown
  try {
    document = JSON.parse(text)
  } catch (error) {
    throw new IdpJwksRefused('not JSON', { cause: error })
  }
  const keys = typeof document === 'object' && document !== null ? (document as { keys?: unknown }).keys : undefined
  if (!Array.isArray(keys)) throw new IdpJwksRefused('no keys array')
  if (keys.length > MAX_IDP_JWKS_KEYS) throw new IdpJwksRefused(`more than ${MAX_IDP_JWKS_KEYS} keys`)
  return new Response(text, { status: 200, headers: { 'content-type': 'application/json' } })
}

/**
 * One spelling per token: every segment must be canonical base64url (no stray bits in the last
 * character). jose decodes leniently, so without this a valid token re-spelled with other trailing bits
 * would verify too, defeating anything keyed on the token text (the verified-token cache, deny lists).
 */
function canonicalSegments(token: string): boolean {
  for (const segment of token.split('.')) {
    if (segment.length % 4 === 1 || Buffer.from(segment, 'base64url').toString('base64url') !== segment) return false
  }
  return true
}

interface VerifiedToken {
  readonly sub: string
  /** The identity provider's id of the active organization, if the token names one. */
  readonly externalOrgId: string | null
}

/** A cached membership lookup; `principal` null means "no access", which is cached just as briefly. */
interface MembershipEntry {
  readonly principal: Principal | null
}

type Verifier = (token: string) => Promise<JWTPayload>

/**
 * The active organization of a Clerk token: `org_id` (session token v1) or `o.id` (v2). Other
 * providers carry no organization, and the user's only membership is used instead.
 */
function externalOrgIdOf(payload: JWTPayload): string | null {
  if (typeof payload.org_id === 'string' && payload.org_id !== '') return payload.org_id
  const o = payload.o
  if (typeof o === 'object' && o !== null && typeof (o as { id?: unknown }).id === 'string' && (o as { id: string }).id !== '') {
    return (o as { id: string }).id
  }
  return null
}

/** Environment files often carry a PEM on one line with literal `\n` separators. */
function normalizePem(pem: string): string {
  return pem.includes('\\n') ? pem.replace(/\\n/g, '\n') : pem
}

function isJoseError(error: unknown): boolean {
  return error instanceof errors.JOSEError
}

/** A JWKS that cannot be fetched is the provider's outage, not the user's bad token: 503, not 401. */
function isJwksOutage(error: unknown): boolean {
  return error instanceof errors.JWKSTimeout || error instanceof errors.JWKSInvalid || !isJoseError(error)
}

/** Clerk's backend API JWKS endpoint, used when only CLERK_SECRET_KEY is configured. */
export const CLERK_API_JWKS_URL = 'https://api.clerk.com/v1/jwks'

function buildVerifier(config: Config): Verifier | null {
  const { jwksUrl, clerkJwtKey, clerkSecretKey, issuer } = config.auth
  if (jwksUrl === null && clerkJwtKey === null && clerkSecretKey === null) return null
  const common = { clockTolerance: CLOCK_TOLERANCE_S, requiredClaims: ['sub', 'exp'], ...(issuer === null ? {} : { issuer }) }

  let pemKey: ReturnType<typeof importSPKI> | null = null
  if (clerkJwtKey !== null) {
    pemKey = importSPKI(normalizePem(clerkJwtKey), PEM_ALGORITHM)
    // A malformed key surfaces on first use as a 503; keep the rejection from going unhandled meanwhile.
    pemKey.catch(() => {})
  }
  // SERVICE_AUTH_JWKS_URL wins; with only CLERK_SECRET_KEY, the instance's keys come from Clerk's backend
  // API, which authenticates the request with that secret (docs/api.md §8).
  const jwks: JWTVerifyGetKey | null = jwksUrl !== null
    ? createRemoteJWKSet(new URL(jwksUrl), { timeoutDuration: JWKS_TIMEOUT_MS, [customFetch]: boundedJwksFetch })
    : clerkSecretKey !== null
      ? createRemoteJWKSet(new URL(CLERK_API_JWKS_URL), {
        timeoutDuration: JWKS_TIMEOUT_MS, headers: { authorization: `Bearer ${clerkSecretKey}` }, [customFetch]: boundedJwksFetch,
      })
      : null

  const viaPem = async (token: string): Promise<JWTPayload> => {
    let key: Awaited<ReturnType<typeof importSPKI>>
    try {
      key = await (pemKey as ReturnType<typeof importSPKI>)
    } catch {
      throw new ServiceError('service_unavailable', 'Session sign-in is misconfigured (CLERK_JWT_KEY is not a PEM public key).')
    }
    return (await jwtVerify(token, key, { ...common, algorithms: [PEM_ALGORITHM] })).payload
  }
  const viaJwks = async (token: string): Promise<JWTPayload> => {
    try {
      return (await jwtVerify(token, jwks as JWTVerifyGetKey, { ...common, algorithms: JWKS_ALGORITHMS })).payload
    } catch (error) {
      if (isJwksOutage(error)) throw new ServiceError('service_unavailable', 'The identity provider\'s keys cannot be fetched; retry shortly.', undefined, { cause: error })
      throw error
    }
  }

  if (pemKey !== null && jwks !== null) {
    // Both configured: the local key first (no network), the JWKS for tokens it did not sign.
    return async (token) => {
      try {
        return await viaPem(token)
      } catch (error) {
        if (error instanceof errors.JWSSignatureVerificationFailed || error instanceof errors.JOSEAlgNotAllowed) return viaJwks(token)
        throw error
      }
    }
  }
  return pemKey !== null ? viaPem : viaJwks
}

/**
 * The session-token resolver for the auth plugin, or null when sign-in is not configured (neither
 * SERVICE_AUTH_JWKS_URL nor CLERK_JWT_KEY). It answers null for credentials that are not its own (API
 * keys, anything not JWT-shaped) and for tokens that do not verify or map to exactly one membership.
 */
export function createSessionResolver(config: Config, db: Database): CredentialResolver | null {
  const verify = buildVerifier(config)
  if (verify === null) return null
  const tokens = new LRUCache<string, VerifiedToken>({ max: CACHE_SIZE })
  const memberships = new LRUCache<string, MembershipEntry>({ max: CACHE_SIZE, ttl: MEMBERSHIP_TTL_MS })

  const verifiedToken = async (token: string): Promise<VerifiedToken | null> => {
    const cacheKey = createHash('sha256').update(token).digest('hex')
    const cached = tokens.get(cacheKey)
    if (cached !== undefined) return cached
    let payload: JWTPayload
    try {
      payload = await verify(token)
    } catch (error) {
      if (error instanceof ServiceError) throw error
      return null
    }
    if (typeof payload.sub !== 'string' || payload.sub === '' || payload.sub.length > 200) return null
    const entry: VerifiedToken = { sub: payload.sub, externalOrgId: externalOrgIdOf(payload) }
    const untilExpiry = (payload.exp as number) * 1000 - Date.now()
    if (untilExpiry > 0) tokens.set(cacheKey, entry, { ttl: Math.min(untilExpiry, TOKEN_TTL_MS) })
    return entry
  }

  return async (credential) => {
    if (credential.startsWith('sk_') || !JWT_SHAPE.test(credential) || !canonicalSegments(credential)) return null
    const token = await verifiedToken(credential)
    if (token === null) return null
    const membershipKey = `${token.sub}\u0000${token.externalOrgId ?? ''}`
    const cached = memberships.get(membershipKey)
    if (cached !== undefined) return cached.principal
    const membership = await findSessionMembership(db, token.sub, token.externalOrgId)
    const principal: Principal | null = membership === null
      ? null
      : { kind: 'session', orgId: membership.orgId, role: membership.role, operator: membership.isOperator, userId: token.sub, keyId: null }
    memberships.set(membershipKey, { principal })
    return principal
  }
}

/**
 * The `exp` of a session token the resolver above has already accepted (a console session made from it
 * ends then at the latest). Decoding without verifying is sound only after that acceptance.
 */
export function acceptedTokenExpiry(token: string): Date | null {
  try {
    const exp = decodeJwt(token).exp
    return typeof exp === 'number' && Number.isFinite(exp) ? new Date(exp * 1000) : null
  } catch {
    return null
  }
}
