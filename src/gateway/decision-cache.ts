/**
 * Decision cache (docs/wire-contract.md §8): key over did and badge jti (one verified badge), operation and
 * resource (method and request target), mode and leaf envelope id; an entry lives for min(PDP ttl,
 * badge expiry, envelope expiry); DENY and UNAVAILABLE are never cached. A cached ALLOW is re-enforced
 * on every request: its obligations run again and the mode table still applies. The embedded PDP's
 * entries are dropped whenever the bundle revision changes, so an approved policy takes effect on the
 * next request rather than after the TTL.
 */
import { LRUCache } from 'lru-cache'
import type { PdpAnswer } from './pdp/pdp.js'

type Allow = Extract<PdpAnswer, { outcome: 'ALLOW' | 'DENY' }>

interface Entry {
  readonly answer: Allow
  /** Epoch ms. */
  readonly expiresAt: number
}

export class DecisionCache {
  readonly #cache: LRUCache<string, Entry>

  constructor(maxEntries = 50_000) {
    this.#cache = new LRUCache({ max: maxEntries })
  }

  /**
   * The key of one decision. `subject` stands for the caller's did and badge jti: a short id of the
   * verified badge ({@link VerifiedBadge.decisionSubject}), so the key is a few dozen characters to
   * join and hash per request instead of two long ones. `method` and `target` (path and query) give
   * the operation and the resource.
   */
  static key(subject: string, method: string, target: string, mode: string, leafEnvelopeId: string): string {
    // NUL cannot occur in header-derived values or in request targets, so the fields cannot run into each other.
    return subject + '\u0000' + method + '\u0000' + target + '\u0000' + mode + '\u0000' + leafEnvelopeId
  }

  get(key: string, nowMs: number): Allow | undefined {
    const entry = this.#cache.get(key)
    if (entry === undefined) return undefined
    if (entry.expiresAt <= nowMs) {
      this.#cache.delete(key)
      return undefined
    }
    return entry.answer
  }

  /** Caches an ALLOW until `min(ttl, notAfterMs)`; anything else, or a zero TTL, is not cached. */
  set(key: string, answer: PdpAnswer, nowMs: number, notAfterMs: number): void {
    if (answer.outcome !== 'ALLOW' || answer.ttl <= 0) return
    const expiresAt = Math.min(nowMs + answer.ttl * 1000, notAfterMs)
    if (expiresAt > nowMs) this.#cache.set(key, { answer, expiresAt })
  }

  /** Decisions held now (bounded by maxEntries). */
  get size(): number {
    return this.#cache.size
  }

  clear(): void {
    this.#cache.clear()
  }
}
