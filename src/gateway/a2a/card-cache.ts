/**
 * The public agent cards the gateway served (docs/a2a.md, "The public card"): anyone may ask for a card
 * without a badge, so a card is fetched, checked and signed once per lifetime and per kind of request, and
 * callers arriving while it loads wait for that one load instead of starting their own.
 */
import type { GatewayErrorCode } from '../../core/gateway-errors.js'

/** What the card path answers: the card (or the agent's relayed non-200 answer), or a refusal. */
export type CardOutcome =
  | {
    readonly kind: 'answer'
    readonly status: number
    readonly body: Buffer
    readonly contentType: string | undefined
    readonly cacheControl: string | undefined
  }
  | { readonly kind: 'refusal'; readonly code: GatewayErrorCode }

/** A loaded outcome and how many seconds it may be served again (0: not at all). */
export interface LoadedCard {
  readonly outcome: CardOutcome
  readonly lifetimeSeconds: number
}

interface Entry {
  readonly outcome: CardOutcome
  readonly expiresAtMs: number
}

/** The card variants one route holds at most (two paths, two versions, a few modes and signing keys). */
const MAX_ENTRIES_PER_ROUTE = 64

export class PublicCardCache {
  readonly #served = new WeakMap<object, Map<string, Entry>>()
  readonly #loading = new WeakMap<object, Map<string, Promise<CardOutcome>>>()

  /**
   * The outcome for `key` on `route`: the stored one while it is fresh, else the one `load` makes, shared by
   * every caller that asks before it settles.
   */
  get(route: object, key: string, nowMs: number, load: () => Promise<LoadedCard>): CardOutcome | Promise<CardOutcome> {
    const stored = this.#served.get(route)?.get(key)
    if (stored !== undefined && stored.expiresAtMs > nowMs) return stored.outcome
    let loading = this.#loading.get(route)
    if (loading === undefined) {
      loading = new Map()
      this.#loading.set(route, loading)
    }
    const pending = loading.get(key)
    if (pending !== undefined) return pending
    const inFlight = loading
    const started = load().then(
      (loaded) => {
        inFlight.delete(key)
        if (loaded.lifetimeSeconds > 0) this.#store(route, key, { outcome: loaded.outcome, expiresAtMs: nowMs + loaded.lifetimeSeconds * 1000 }, nowMs)
        return loaded.outcome
      },
      (error: unknown) => {
        inFlight.delete(key)
        throw error
      },
    )
    inFlight.set(key, started)
    return started
  }

  #store(route: object, key: string, entry: Entry, nowMs: number): void {
    let served = this.#served.get(route)
    if (served === undefined) {
      served = new Map()
      this.#served.set(route, served)
    }
    if (served.size >= MAX_ENTRIES_PER_ROUTE) {
      for (const [old, held] of served) if (held.expiresAtMs <= nowMs) served.delete(old)
      if (served.size >= MAX_ENTRIES_PER_ROUTE) served.clear()
    }
    served.set(key, entry)
  }
}

/**
 * How long a shared cache may keep the agent's answer, in seconds, by its `Cache-Control` (RFC 9111 §5.2.2):
 * none when it says `no-store`, `no-cache` or `private`; else `s-maxage`, then `max-age`, then `fallback`;
 * never more than `ceiling`.
 */
export function cardLifetimeSeconds(cacheControl: string | undefined, fallback: number, ceiling: number): number {
  if (cacheControl === undefined) return Math.min(fallback, ceiling)
  let maxAge: number | null = null
  let sharedMaxAge: number | null = null
  for (const directive of cacheControl.toLowerCase().split(',')) {
    const [name = '', value] = directive.trim().split('=', 2)
    if (name === 'no-store' || name === 'no-cache' || name === 'private') return 0
    const seconds = value === undefined ? null : deltaSeconds(value)
    if (name === 's-maxage' && seconds !== null) sharedMaxAge = seconds
    if (name === 'max-age' && seconds !== null) maxAge = seconds
  }
  return Math.min(sharedMaxAge ?? maxAge ?? fallback, ceiling)
}

/** A delta-seconds value, quoted or not; null when it is not one. */
function deltaSeconds(value: string): number | null {
  const bare = value.length >= 2 && value.startsWith('"') && value.endsWith('"') ? value.slice(1, -1) : value
  return /^\d{1,10}$/.test(bare) ? Number(bare) : null
}
