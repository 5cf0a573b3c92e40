/**
 * What a gateway-only process accepts from its registry (docs/peer-input-validation.md, "Registry answers"
 * and "The watch stream"): JWKS, issuer metadata, revocation pages, bundles and watch events are parsed
 * here and refused whole when any part is out of shape, so the last good snapshot stays in place.
 */
import { createPublicKey, type KeyObject } from 'node:crypto'
import { bundleDataProblem } from './bundle-data.js'
import type { GatewayBundle, GatewayBundleData } from './snapshot.js'
import { isRecord } from '../../core/json-objects.js'

/** Compared with every badge's `iss` and forwarded as `X-Service-Issuer`, so bounded and visible ASCII. */
const MAX_ISSUER_LENGTH = 1024
const ISSUER_CHARACTERS = /^[\x21-\x7e]+$/
export const REVOCATION_PAGE_SIZE = 500
/** Subtracted from `since`, so a revocation committed just after the registry read its clock is not missed. */
export const REVOCATION_OVERLAP_MS = 5000
/** A registry publishes its signer and a few retiring keys; more than this is a fault, not a key set. */
export const MAX_JWKS_KEYS = 100
/** Key ids, jtis and revisions reach sets and `If-None-Match`: bounded, visible ASCII. */
const SAFE_ID = /^[\x21-\x7e]{1,256}$/
const ED25519_X = /^[A-Za-z0-9_-]{43}$/
const MAX_CURSOR_LENGTH = 1024
/** `syncedAt` is the next `since`: one far in the future would skip every revocation until then. */
const MAX_SYNCED_AT_AHEAD_MS = 24 * 60 * 60 * 1000

export interface KeySet {
  readonly keys: ReadonlyMap<string, KeyObject>
  readonly keysVersion: string
}

/** Builds the key map of a JWKS document; only Ed25519 signing keys with a kid are kept (docs/wire-contract.md §5). */
export function parseJwks(document: unknown): KeySet {
  if (!isRecord(document) || !Array.isArray(document.keys)) throw new Error('the JWKS has no keys array')
  if (document.keys.length > MAX_JWKS_KEYS) throw new Error(`the JWKS holds more than ${MAX_JWKS_KEYS} keys`)
  const keys = new Map<string, KeyObject>()
  const xs = new Map<string, string>()
  for (const jwk of document.keys) {
    if (!isRecord(jwk) || jwk.kty !== 'OKP' || jwk.crv !== 'Ed25519') continue
    // A kid no badge header could carry as is can never be looked up: skipped like a foreign key type.
    if (typeof jwk.kid !== 'string' || !SAFE_ID.test(jwk.kid) || typeof jwk.x !== 'string') continue
    if (jwk.use !== undefined && jwk.use !== 'sig') continue
    if (jwk.alg !== undefined && jwk.alg !== 'EdDSA' && jwk.alg !== 'Ed25519') continue
    if (xs.has(jwk.kid)) {
      // Two keys under one kid: which one verifies a badge would depend on the order in the document.
      if (xs.get(jwk.kid) !== jwk.x) throw new Error(`the JWKS names two different keys ${JSON.stringify(jwk.kid)}`)
      continue
    }
    let key: KeyObject
    try {
      if (!ED25519_X.test(jwk.x)) throw new Error('not 32 bytes of base64url')
      // Only the public members: a stray `d` must never turn this into a private key object.
      key = createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: jwk.x }, format: 'jwk' })
    } catch {
      throw new Error(`the JWKS key ${JSON.stringify(jwk.kid)} is not a valid Ed25519 public key`)
    }
    keys.set(jwk.kid, key)
    xs.set(jwk.kid, jwk.x)
  }
  // A registry always publishes its signer; an empty set would reject every badge, so it is a fault.
  if (keys.size === 0) throw new Error('the JWKS holds no Ed25519 signing key')
  const keysVersion = [...xs.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([kid, x]) => `${kid}=${x}`).join(',')
  return { keys, keysVersion }
}

/** The `issuer` of the registry's metadata document: an absolute http(s) URL as badges spell it. */
export function parseIssuer(document: unknown): string {
  if (!isRecord(document) || typeof document.issuer !== 'string') throw new Error('the authority metadata has no issuer')
  const issuer = document.issuer
  if (issuer.length > MAX_ISSUER_LENGTH || !ISSUER_CHARACTERS.test(issuer)) {
    throw new Error(`the authority issuer is longer than ${MAX_ISSUER_LENGTH} characters or not visible ASCII`)
  }
  let url: URL
  try {
    url = new URL(issuer)
  } catch {
    throw new Error('the authority issuer is not an absolute URL')
  }
  // RFC 8414 §2's rule for an issuer identifier, with http allowed as CA_ISSUER_URL allows it.
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error('the authority issuer is not an http or https URL')
  if (url.username !== '' || url.password !== '' || issuer.includes('?') || issuer.includes('#')) {
    throw new Error('the authority issuer carries credentials, a query or a fragment')
  }
  return issuer
}

export function parseRevocationPage(document: unknown, nowMs: number): { jtis: string[]; nextCursor: string | null; syncedAt: string } {
  if (!isRecord(document) || document.success !== true || !isRecord(document.data)) {
    throw new Error('the revocations answer is not a success envelope')
  }
  const data = document.data
  if (!Array.isArray(data.revocations)) throw new Error('the revocations answer has no revocations array')
  // The page size was asked for; a longer page would let one answer grow the revoked set without bound.
  if (data.revocations.length > REVOCATION_PAGE_SIZE) throw new Error(`a revocations page holds more than ${REVOCATION_PAGE_SIZE} entries`)
  const jtis: string[] = []
  for (const entry of data.revocations) {
    if (!isRecord(entry) || typeof entry.jti !== 'string' || entry.jti === '') throw new Error('a revocation has no jti')
    if (!SAFE_ID.test(entry.jti)) throw new Error('a revocation has a jti of more than 256 characters or outside visible ASCII')
    jtis.push(entry.jti)
  }
  // The cursor sits in `data` (docs/wire-contract.md §4) and beside it (§13); either will do.
  const cursor = data.nextCursor !== undefined ? data.nextCursor : document.nextCursor
  if (cursor !== null && cursor !== undefined && (typeof cursor !== 'string' || cursor === '' || cursor.length > MAX_CURSOR_LENGTH)) {
    throw new Error('the revocations answer has an invalid nextCursor')
  }
  const syncedAt = data.syncedAt
  const syncedAtMs = typeof syncedAt === 'string' && syncedAt.length <= 64 ? Date.parse(syncedAt) : Number.NaN
  // From the epoch to the gateway's clock plus skew: the next `since` (minus the overlap) must be a valid date.
  if (!(syncedAtMs >= REVOCATION_OVERLAP_MS && syncedAtMs <= nowMs + MAX_SYNCED_AT_AHEAD_MS)) {
    throw new Error('the revocations answer has no valid syncedAt')
  }
  return { jtis, nextCursor: typeof cursor === 'string' ? cursor : null, syncedAt: syncedAt as string }
}

export function parseBundle(document: unknown, confirmedAt: number): GatewayBundle {
  if (!isRecord(document)) throw new Error('the bundle is not a JSON object')
  if (typeof document.revision !== 'string' || document.revision === '') throw new Error('the bundle has no revision')
  // The revision becomes an ETag sent back in If-None-Match: a header-unsafe one would fail every poll.
  if (!SAFE_ID.test(document.revision)) throw new Error('the bundle revision is longer than 256 characters or not visible ASCII')
  if (!isRecord(document.data)) throw new Error('the bundle has no data object')
  if (!isRecord(document.modules)) throw new Error('the bundle has no modules object')
  const problem = bundleDataProblem(document.data)
  if (problem !== null) throw new Error(`the bundle data is not what the evaluator reads: ${problem}`)
  return Object.freeze({ revision: document.revision, data: document.data as GatewayBundleData, confirmedAt })
}


/** What the registry's watch stream announces (docs/api.md, "Gateway watch stream"). */
export type WatchEvent =
  | { readonly kind: 'ready'; readonly heartbeatMs: number }
  | { readonly kind: 'policy'; readonly orgId: string }
  | { readonly kind: 'revoked'; readonly jti: string }
  | { readonly kind: 'keys' }
  | { readonly kind: 'resync' }

/** Every event is a few hundred bytes; the reader refuses anything past this. */
export const MAX_WATCH_EVENT_BYTES = 4096
const MIN_WATCH_HEARTBEAT_MS = 100
const MAX_WATCH_HEARTBEAT_MS = 5 * 60 * 1000
const ORG_ID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/

function watchData(kind: string, data: string | undefined): Record<string, unknown> {
  let parsed: unknown
  try {
    parsed = JSON.parse(data ?? '')
  } catch {
    throw new Error(`the watch event ${kind} has data that is not JSON`)
  }
  if (!isRecord(parsed)) throw new Error(`the watch event ${kind} has data that is not a JSON object`)
  return parsed
}

/**
 * One event of the watch stream; null for a comment (the heartbeat) or a kind this gateway does not know,
 * which a newer registry may send. A known kind out of shape throws: the stream can no longer be trusted.
 */
export function parseWatchEvent(event: string | undefined, data: string | undefined): WatchEvent | null {
  if (data === undefined) return null
  switch (event) {
    case 'ready': {
      const heartbeat = watchData(event, data).heartbeat_ms
      if (typeof heartbeat !== 'number' || !Number.isInteger(heartbeat) || heartbeat < MIN_WATCH_HEARTBEAT_MS || heartbeat > MAX_WATCH_HEARTBEAT_MS) {
        throw new Error(`the watch event ready has no heartbeat_ms between ${MIN_WATCH_HEARTBEAT_MS} and ${MAX_WATCH_HEARTBEAT_MS}`)
      }
      return { kind: 'ready', heartbeatMs: heartbeat }
    }
    case 'policy': {
      const orgId = watchData(event, data).org_id
      if (typeof orgId !== 'string' || !ORG_ID.test(orgId)) throw new Error('the watch event policy has no org_id UUID')
      return { kind: 'policy', orgId: orgId.toLowerCase() }
    }
    case 'revoked': {
      const jti = watchData(event, data).jti
      // The same rule as a revocations page: the jti reaches the revoked set.
      if (typeof jti !== 'string' || !SAFE_ID.test(jti)) throw new Error('the watch event revoked has no jti of 1 to 256 visible ASCII characters')
      return { kind: 'revoked', jti }
    }
    case 'keys':
    case 'resync':
      watchData(event, data)
      return { kind: event }
    default:
      return null
  }
}
