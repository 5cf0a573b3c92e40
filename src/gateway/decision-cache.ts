// Key, lifetime and what is never cached: docs/wire-contract.md §8. A cached ALLOW still runs its
// obligations and the mode table.
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

  /** `subject` is a short id per verified badge (did and jti), so the key stays short to join and hash. */
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

  get size(): number {
    return this.#cache.size
  }

  clear(): void {
    this.#cache.clear()
  }
}
