// Supplies core/envelope.ts with keys and badges (docs/wire-contract.md §10); badge-map badges go through the
// gateway's badge cache, so revocations apply.
import { createPublicKey, type KeyObject } from 'node:crypto'
import { LRUCache } from 'lru-cache'
import { decodeDidKey, didKeyVerificationMethodId, publicKeyToJwk } from '../../core/did-key.js'
import { decodeChainHeaders, verifyChain, type ChainFailure, type VerifiedChain } from '../../core/envelope.js'
import type { GatewaySnapshot } from '../snapshot/snapshot.js'
import type { BadgeVerifier } from './badge.js'

/** Where did:web keys come from: DidResolver in the appliance, the same over the registry in `agent-trust gateway`. */
export interface DidKeySource {
  /** The raw Ed25519 key a DID URL names; null when the DID has no such key; throws when it cannot resolve. */
  resolveKey(kid: string): Promise<Uint8Array | null>
}

export interface ChainVerifierOptions {
  readonly maxDepth: number
  readonly orgTrustBoundary: string | null
  readonly didWeb: DidKeySource | null
  readonly badges: BadgeVerifier
}

interface CachedKey {
  readonly key: KeyObject | null
}

const DID_KEY = 'did:key:'
/** Resolved did:web keys are kept this long; a failed resolution is retried after a short pause. */
const KEY_TTL_MS = 5 * 60_000
const NEGATIVE_TTL_MS = 30_000

function toKeyObject(raw: Uint8Array): KeyObject {
  return createPublicKey({ key: publicKeyToJwk(raw), format: 'jwk' })
}

export class ChainVerifier {
  readonly #options: ChainVerifierOptions
  readonly #keys = new LRUCache<string, CachedKey>({ max: 10_000 })

  constructor(options: ChainVerifierOptions) {
    this.#options = options
  }

  /** Null when the request carries no envelope header. */
  async verify(
    headers: { authority?: string; chain?: string; badgeMap?: string },
    caller: { did: string; jti: string },
    snapshot: GatewaySnapshot,
    now: number,
  ): Promise<VerifiedChain | ChainFailure | null> {
    const decoded = decodeChainHeaders(headers, this.#options.maxDepth)
    if (decoded === null || !decoded.ok) return decoded
    const badges = this.#options.badges
    return verifyChain(decoded.envelopes, decoded.badgeMap, {
      now,
      maxDepth: this.#options.maxDepth,
      orgTrustBoundary: this.#options.orgTrustBoundary,
      caller,
      resolveKey: (kid, issuerDid) => this.#resolveKey(kid, issuerDid),
      verifyBadge: (token) => {
        const result = badges.verify(token, snapshot, now)
        return typeof result === 'string' ? null : { did: result.claims.sub, jti: result.claims.jti }
      },
    })
  }

  /** The key a DID URL names (did:key, or did:web through the resolver), cached as envelope keys are; else null. */
  keyOf(kid: string): KeyObject | null | Promise<KeyObject | null> {
    const hash = kid.indexOf('#')
    return hash <= 0 ? null : this.#resolveKey(kid, kid.slice(0, hash))
  }

  /** The key for `kid` when it is a key of `issuerDid`; synchronous for did:key and cache hits. */
  #resolveKey(kid: string, issuerDid: string): KeyObject | null | Promise<KeyObject | null> {
    // A kid of another DID is never bound to this issuer, whatever it resolves to.
    if (!kid.startsWith(`${issuerDid}#`)) return null
    const cached = this.#keys.get(kid)
    if (cached !== undefined) return cached.key
    if (issuerDid.startsWith(DID_KEY)) {
      let key: KeyObject | null = null
      try {
        if (kid === didKeyVerificationMethodId(issuerDid)) key = toKeyObject(decodeDidKey(issuerDid))
      } catch {
        key = null
      }
      this.#keys.set(kid, { key })
      return key
    }
    const didWeb = this.#options.didWeb
    if (didWeb === null || !issuerDid.startsWith('did:web:')) return null
    return didWeb.resolveKey(kid).then(
      (raw) => {
        const key = raw === null ? null : toKeyObject(raw)
        this.#keys.set(kid, { key }, { ttl: key === null ? NEGATIVE_TTL_MS : KEY_TTL_MS })
        return key
      },
      () => {
        this.#keys.set(kid, { key: null }, { ttl: NEGATIVE_TTL_MS })
        return null
      },
    )
  }
}
