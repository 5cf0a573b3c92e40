/**
 * Filtered MCP list answers, kept per bundle revision, decision context (subject, operation, target, mode,
 * delegation leaf) and digest of the upstream's answer bytes: with the embedded PDP an item's verdict is a
 * function of exactly these, so the same upstream answer to the same caller under the same bundle filters to
 * the same bytes, and a tools/list need not be parsed, judged and serialised again. Any other bundle, caller
 * or answer is a different key; the cache is also emptied on a revision change (context.ts).
 */
import { createHash } from 'node:crypto'
import { LRUCache } from 'lru-cache'
import type { ListKind } from '../../core/mcp-methods.js'

export interface CachedListAnswer {
  /** The filtered body as the client receives it. */
  readonly bytes: Buffer
  /** What the filter removed, per kind, replayed into the request's telemetry. */
  readonly removed: Readonly<Record<ListKind, number>>
  /** Epoch ms after which the entry is not served: the badge's (or leaf envelope's) end. */
  readonly notAfterMs: number
}

/** Bounded by entries and by bytes held, whichever is reached first. */
const MAX_ENTRIES = 1_000
const MAX_BYTES = 32 * 1024 * 1024

export class ListAnswerCache {
  readonly #cache = new LRUCache<string, CachedListAnswer>({ max: MAX_ENTRIES, maxSize: MAX_BYTES, sizeCalculation: (entry) => entry.bytes.length + 128 })

  /** `context` names revision and decision context; the answer enters as its SHA-256. */
  static key(context: string, answer: Buffer): string {
    return context + '\u0000' + createHash('sha256').update(answer).digest('base64url')
  }

  get(key: string, nowMs: number): CachedListAnswer | undefined {
    const entry = this.#cache.get(key)
    if (entry === undefined) return undefined
    if (entry.notAfterMs <= nowMs) {
      this.#cache.delete(key)
      return undefined
    }
    return entry
  }

  set(key: string, entry: CachedListAnswer, nowMs: number): void {
    // An answer larger than the whole bound is not worth keeping (lru-cache would refuse it anyway).
    if (entry.notAfterMs > nowMs && entry.bytes.length + 128 <= MAX_BYTES) this.#cache.set(key, entry)
  }

  get size(): number {
    return this.#cache.size
  }

  clear(): void {
    this.#cache.clear()
  }
}
