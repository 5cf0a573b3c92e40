/**
 * A badge is verified once per process and re-checked per request only for what can change. The cache key is
 * the signature segment (docs/performance.md, "Hot-path choices"); the whole token is compared on every hit,
 * so a forgery sharing a signature segment only misses the cache.
 */
import { LRUCache } from 'lru-cache'
import { CLOCK_LEEWAY_SECONDS, decodeEdDsaJws, MAX_BADGE_BYTES, verifyBadge, type BadgeClaims, type BadgeErrorCode } from '../../core/badge.js'
import { looksSelfSigned, verifySelfSignedBadge } from '../../core/self-signed-badge.js'
import { TRUST_CODES, type TrustCode } from '../../core/trust-level.js'
import { jsonValue } from '../../telemetry/request-log.js'
import type { ResourceServer } from '../ingress/resource-metadata.js'
import type { GatewaySnapshot } from '../snapshot/snapshot.js'

const ENTRY_OVERHEAD_BYTES = 1024
/** Characters of an Ed25519 signature (64 bytes) in base64url: the last segment of every badge. */
const SIGNATURE_CHARS = 86

export interface VerifiedBadge {
  /** The token this verification is for (the cache's key is only its signature segment). */
  readonly token: string
  readonly claims: BadgeClaims
  readonly trustCode: TrustCode
  /** Unix seconds after which the badge (with leeway) is expired. */
  readonly expiresAt: number
  /** `X-Service-Subject`, `-Issuer`, `-Trust-Level`, `-Badge-JTI` as a flat [name, value…] list. */
  readonly identityHeaders: readonly string[]
  /** The key set the badge was verified against; a changed key set means verifying again. */
  readonly keysVersion: string
  /** The trusted issuer it was verified under; the registry naming another means verifying again. */
  readonly trustedIssuer: string
  /** `agent_did` and `badge_jti` of the log line, serialised once. */
  readonly logFields: string
  /** The did and jti in decision cache keys; a badge verified again gets a new one (only a cache miss). */
  readonly decisionSubject: string
  /** `aud` as a list (empty without one), so a resource server compares it without allocating. */
  readonly audience: readonly string[]
  /** Signed by its own did:key rather than the authority: no token endpoint can raise its level. */
  readonly selfSigned: boolean
}

const NO_AUDIENCE: readonly string[] = Object.freeze([])

export type BadgeResult = VerifiedBadge | BadgeErrorCode

interface Options {
  readonly acceptSelfSigned: boolean
  /** Entries kept; a bound, so a flood of distinct valid badges costs memory only up to it. */
  readonly maxEntries?: number
  /** Total bytes of cached tokens (plus a fixed per-entry estimate); default 64 MiB. */
  readonly maxBytes?: number
  readonly onLookup?: (hit: boolean) => void
}

let verifications = 0

function toVerified(token: string, claims: BadgeClaims, snapshot: GatewaySnapshot, selfSigned: boolean): VerifiedBadge {
  const level = claims.vc.credentialSubject.level
  const aud = claims.aud as string | string[] | undefined
  return {
    token,
    claims,
    trustCode: TRUST_CODES[Number(level)]!,
    expiresAt: claims.exp + CLOCK_LEEWAY_SECONDS,
    identityHeaders: Object.freeze([
      'x-service-subject', claims.sub,
      'x-service-issuer', claims.iss,
      'x-service-trust-level', level,
      'x-service-badge-jti', claims.jti,
    ]),
    keysVersion: snapshot.keysVersion,
    trustedIssuer: snapshot.issuer,
    logFields: ',"agent_did":' + jsonValue(claims.sub) + ',"badge_jti":' + jsonValue(claims.jti),
    decisionSubject: (++verifications).toString(36),
    audience: aud === undefined ? NO_AUDIENCE : Object.freeze(typeof aud === 'string' ? [aud] : [...aud]),
    selfSigned,
  }
}

export class BadgeVerifier {
  readonly #cache: LRUCache<string, VerifiedBadge>
  readonly #acceptSelfSigned: boolean
  readonly #onLookup: ((hit: boolean) => void) | undefined

  constructor(options: Options) {
    this.#cache = new LRUCache({
      max: options.maxEntries ?? 50_000,
      maxSize: options.maxBytes ?? 64 * 1024 * 1024,
      // The token's UTF-16 string plus the claims object and headers kept for it.
      sizeCalculation: (value, signature) => (value.token.length + signature.length) * 2 + ENTRY_OVERHEAD_BYTES,
    })
    this.#acceptSelfSigned = options.acceptSelfSigned
    this.#onLookup = options.onLookup
  }

  get size(): number {
    return this.#cache.size
  }

  clear(): void {
    this.#cache.clear()
  }

  /** Expiry and revocation are checked on every call, cached or not. `now` in Unix seconds. */
  verify(token: string, snapshot: GatewaySnapshot, now: number): BadgeResult {
    if (token.length > MAX_BADGE_BYTES) return 'BADGE_MALFORMED'
    // By position when the token has the EdDSA shape (String#lastIndexOf runs outside optimised code); the
    // key only finds a candidate, which must then equal the whole token.
    const n = token.length
    const key = n > SIGNATURE_CHARS && token.charCodeAt(n - SIGNATURE_CHARS - 1) === 0x2e
      ? token.slice(n - SIGNATURE_CHARS)
      : token.slice(token.lastIndexOf('.') + 1)
    const cached = this.#cache.get(key)
    if (cached !== undefined && cached.token === token && cached.keysVersion === snapshot.keysVersion && cached.trustedIssuer === snapshot.issuer) {
      this.#onLookup?.(true)
      if (cached.expiresAt < now) {
        this.#cache.delete(key)
        return 'BADGE_EXPIRED'
      }
      return snapshot.revoked.has(cached.claims.jti) ? 'BADGE_REVOKED' : cached
    }
    this.#onLookup?.(false)
    const result = this.#verifyFresh(token, snapshot, now)
    if (typeof result === 'string') return result
    this.#cache.set(key, result)
    return result
  }

  #verifyFresh(token: string, snapshot: GatewaySnapshot, now: number): BadgeResult {
    const isRevoked = (jti: string): boolean => snapshot.revoked.has(jti)
    // Peek at the unverified payload only to choose the key source; nothing from it is trusted until
    // the signature of the did:key it names has verified. A self-signed badge where they are not
    // accepted is refused for its issuer, the precise reason, not as a bad authority signature.
    const decoded = decodeEdDsaJws(token, MAX_BADGE_BYTES)
    if (!('error' in decoded) && looksSelfSigned(decoded.payload)) {
      if (!this.#acceptSelfSigned) return 'BADGE_ISSUER_UNTRUSTED'
      const result = verifySelfSignedBadge(token, { now, isRevoked })
      return result.valid ? toVerified(token, result.claims, snapshot, true) : result.error
    }
    const result = verifyBadge(token, { keys: snapshot.keys, issuer: snapshot.issuer, now, isRevoked })
    return result.valid ? toVerified(token, result.claims, snapshot, false) : result.error
  }
}

/** Another Authorization scheme belongs to the upstream; two different badges are a conflict, never a guess. */
export function extractBadge(authorization: string | undefined, badgeHeader: string | undefined): string | 'missing' | 'conflict' {
  let bearer: string | undefined
  if (authorization !== undefined && authorization.length > 7 && authorization.slice(0, 7).toLowerCase() === 'bearer ') {
    bearer = authorization.slice(7).trim()
  }
  const badge = badgeHeader?.trim()
  if (badge !== undefined && badge !== '') {
    if (bearer !== undefined && bearer !== badge) return 'conflict'
    return badge
  }
  return bearer !== undefined && bearer !== '' ? bearer : 'missing'
}

/** RFC 8707: a badge with an audience must name this resource; one without is accepted unless the route requires it. */
export function meantFor(audience: readonly string[], server: ResourceServer): boolean {
  if (audience.length === 0) return !server.requireAudience
  const resource = server.resource
  for (let i = 0; i < audience.length; i++) if (audience[i] === resource) return true
  return false
}
