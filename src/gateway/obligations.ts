// The built-in obligation handlers (docs/wire-contract.md §8) report results; the mode table decides what
// a failure means.
import { LRUCache } from 'lru-cache'
import type { ObligationResult, PdpObligation } from '../core/enforcement.js'
import type { RateLimits, TokenGrants, TokenRequest } from './rate-limits.js'

const UNKNOWN: ObligationResult = Object.freeze({ status: 'unknown' })
const MET: ObligationResult = Object.freeze({ status: 'known', met: true })
const UNMET: ObligationResult = Object.freeze({ status: 'known', met: false })
const OVER_LIMIT: ObligationResult = Object.freeze({ status: 'known', met: false, overLimit: true })

const LOG_LEVELS = new Set(['trace', 'debug', 'info', 'warn', 'error', 'fatal'])

interface Bucket {
  tokens: number
  /** Epoch ms of the last refill. */
  at: number
}

/** The longest wait a refusal names: one day. */
export const MAX_WAIT_MS = 86_400_000

/** One process's token buckets; with REDIS_URL the fleet's are in Redis (rate-limits.ts), and this one is the `local` fallback. */
export class RateLimiter {
  readonly #buckets: LRUCache<string, Bucket>

  constructor(maxKeys = 100_000) {
    this.#buckets = new LRUCache({ max: maxKeys })
  }

  /** Takes one token; returns 0 when allowed, else the ms until a token is available. */
  take(key: string, rpm: number, nowMs: number): number {
    let bucket = this.#buckets.get(key)
    if (bucket === undefined) {
      bucket = { tokens: rpm, at: nowMs }
      this.#buckets.set(key, bucket)
    } else {
      bucket.tokens = Math.min(rpm, bucket.tokens + ((nowMs - bucket.at) * rpm) / 60_000)
      bucket.at = nowMs
    }
    if (bucket.tokens >= 1) {
      bucket.tokens -= 1
      return 0
    }
    // A PDP may name a vanishing rpm: the wait is capped so that Retry-After and the reset stay numbers.
    return Math.min(MAX_WAIT_MS, Math.ceil(((1 - bucket.tokens) * 60_000) / rpm))
  }

  /** Whole tokens left in `key`'s bucket after the last `take` (0 when unknown). */
  remaining(key: string): number {
    const bucket = this.#buckets.peek(key)
    return bucket === undefined ? 0 : Math.floor(bucket.tokens)
  }
}

export interface EnhancedLogContext {
  readonly [field: string]: unknown
}

/** The tightest rate limit applied, for the `X-RateLimit-*` headers (docs/wire-contract.md §3). */
export interface AppliedRateLimit {
  readonly limit: number
  readonly remaining: number
  /** Unix seconds at which a request will be allowed again (now when one is allowed now). */
  readonly reset: number
}

export interface ObligationRun {
  readonly results: ObligationResult[]
  /** Seconds a 429 should ask the caller to wait (rate_limit.apply over limit), else 0. */
  readonly retryAfterSeconds: number
  /** Null when no valid rate_limit.apply ran. */
  readonly rateLimit: AppliedRateLimit | null
}

/** A valid `rate_limit.apply`, waiting for its token: `index` is its place in the results. */
interface PendingLimit extends TokenRequest {
  readonly index: number
}

export class ObligationHandlers {
  constructor(
    private readonly limits: RateLimits,
    private readonly log: (level: string, context: EnhancedLogContext) => void,
  ) {}

  /**
   * `subjectDid` is the bucket key when `rate_limit.apply` names none. Synchronous unless a rate limit is
   * counted in Redis: then every limit of the answer is taken in one round trip.
   */
  run(obligations: readonly PdpObligation[], subjectDid: string, nowMs: number, context: () => EnhancedLogContext): ObligationRun | Promise<ObligationRun> {
    const results: ObligationResult[] = []
    let limits: PendingLimit[] | null = null
    for (const obligation of obligations) {
      const params = obligation.params
      switch (obligation.type) {
        case 'rate_limit.apply': {
          const rpm = params?.rpm
          const key = params?.key ?? subjectDid
          if (typeof rpm !== 'number' || !Number.isFinite(rpm) || rpm <= 0 || typeof key !== 'string' || key === '') {
            results.push(UNMET)
            break
          }
          ;(limits ??= []).push({ index: results.length, key, rpm })
          // Replaced by the grant; unmet should it never come.
          results.push(UNMET)
          break
        }
        case 'log.enhanced': {
          const level = params?.level ?? 'info'
          if (typeof level !== 'string' || !LOG_LEVELS.has(level)) {
            results.push(UNMET)
            break
          }
          this.log(level, context())
          results.push(MET)
          break
        }
        default:
          results.push(UNKNOWN)
      }
    }
    if (limits === null) return { results, retryAfterSeconds: 0, rateLimit: null }
    const pending = limits
    const grants = this.limits.take(pending, nowMs)
    return grants instanceof Promise ? grants.then((settled) => granted(results, pending, settled)) : granted(results, pending, grants)
  }
}

/** The results with each limit's grant in place, the longest wait, and the limit the headers report. */
function granted(results: ObligationResult[], limits: readonly PendingLimit[], grants: TokenGrants): ObligationRun {
  let retryAfterMs = 0
  let rateLimit: AppliedRateLimit | null = null
  for (let i = 0; i < limits.length; i++) {
    const limit = limits[i] as PendingLimit
    const grant = grants[i]
    // Let through uncounted (the `allow` fallback): met, with no count to report.
    if (grant === null) {
      results[limit.index] = MET
      continue
    }
    if (grant === undefined) continue
    const { wait, remaining } = grant
    if (wait > retryAfterMs) retryAfterMs = wait
    // Several limits: report the one closest to refusing (then the smaller limit).
    if (rateLimit === null || remaining < rateLimit.remaining || (remaining === rateLimit.remaining && limit.rpm < rateLimit.limit)) {
      rateLimit = { limit: Math.floor(limit.rpm), remaining, reset: Math.ceil((grant.atMs + wait) / 1000) }
    }
    results[limit.index] = wait === 0 ? MET : OVER_LIMIT
  }
  return { results, retryAfterSeconds: Math.ceil(retryAfterMs / 1000), rateLimit }
}
