/**
 * Where `rate_limit.apply` tokens are counted (docs/operations.md, "Rate limits across the fleet"): in this
 * process, or with REDIS_URL in Redis for every gateway and worker at once, by one Lua script on Redis's
 * clock. While Redis cannot answer, SERVICE_RATE_LIMIT_REDIS_FALLBACK decides.
 */
import { createHash } from 'node:crypto'
import type { Redis } from 'ioredis'
import type { RateLimitFallback } from '../config/index.js'
import type { RedisLink } from '../net/redis-link.js'
import type { GatewayMetrics } from '../telemetry/metrics.js'
import { MAX_WAIT_MS, RateLimiter } from './obligations.js'

export interface TokenRequest {
  readonly key: string
  readonly rpm: number
}

/** One bucket's answer: `wait` 0 when the token was taken, else the ms until one is available. */
export interface TokenGrant {
  readonly wait: number
  /** Whole tokens left after this take. */
  readonly remaining: number
  /** Epoch ms of the clock that counted (Redis's, or this process's): the reset is `atMs + wait`. */
  readonly atMs: number
}

/** `null` for a request let through uncounted (the `allow` fallback): it has no limit to report. */
export type TokenGrants = readonly (TokenGrant | null)[]

export interface RateLimits {
  /** One grant per request, in order; a promise only when Redis is asked. */
  take(requests: readonly TokenRequest[], nowMs: number): TokenGrants | Promise<TokenGrants>
}

/** This process's buckets (a fleet of N processes allows N × rpm). */
export class LocalRateLimits implements RateLimits {
  readonly #limiter: RateLimiter

  constructor(limiter = new RateLimiter()) {
    this.#limiter = limiter
  }

  take(requests: readonly TokenRequest[], nowMs: number): TokenGrants {
    const grants: TokenGrant[] = []
    for (const { key, rpm } of requests) {
      const wait = this.#limiter.take(key, rpm, nowMs)
      grants.push({ wait, remaining: this.#limiter.remaining(key), atMs: nowMs })
    }
    return grants
  }
}

/**
 * The local limiter's token bucket, atomically for every key of one request: capacity rpm, refilled
 * continuously at rpm per minute, stored as a hash {t: tokens, a: ms of the last refill}. After 60 s
 * untouched a bucket is full again, as if it did not exist, so every key expires 60 s after its last use.
 * The reply is one {wait ms, whole tokens left} pair per key, then Redis's time in ms.
 */
export const TAKE_TOKENS_LUA = `
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000 + tonumber(now_parts[2]) / 1000
local reply = {}
for i, key in ipairs(KEYS) do
  local rpm = tonumber(ARGV[i])
  local state = redis.call('HMGET', key, 't', 'a')
  local tokens = tonumber(state[1])
  local at = tonumber(state[2])
  if tokens == nil or at == nil then
    tokens = rpm
  else
    local elapsed = now - at
    if elapsed < 0 then elapsed = 0 end
    tokens = math.min(rpm, tokens + elapsed * rpm / 60000)
  end
  local wait = 0
  if tokens >= 1 then
    tokens = tokens - 1
  else
    wait = math.min(${MAX_WAIT_MS}, math.ceil((1 - tokens) * 60000 / rpm))
  end
  redis.call('HSET', key, 't', string.format('%.17g', tokens), 'a', string.format('%.17g', now))
  redis.call('PEXPIRE', key, 60000)
  reply[2 * i - 1] = wait
  reply[2 * i] = math.floor(tokens)
end
reply[2 * #KEYS + 1] = math.floor(now)
return reply
`

const COMMAND = 'agentTrustTakeTokens'

/** How long after a failed command requests skip Redis (then one probes): a stalled Redis costs one timeout per second, not one per request. */
export const REDIS_RETRY_AFTER_FAILURE_MS = 1_000
/** The wait a `deny` fallback names: about the link's longest reconnection delay. */
export const DENY_WAIT_MS = 2_000

/** The Redis key of a bucket: the key is a DID or a name the PDP chose, so only its hash reaches the key space. */
export function bucketKey(prefix: string, key: string): string {
  return prefix + createHash('sha256').update(key).digest('base64url')
}

export interface RedisRateLimitsOptions {
  readonly link: RedisLink
  readonly prefix: string
  readonly fallback: RateLimitFallback
  /** Called once per request counted by the fallback. */
  readonly onFallback?: (behaviour: RateLimitFallback) => void
}

type TakeTokens = (numberOfKeys: number, ...args: (string | number)[]) => Promise<unknown>

export class RedisRateLimits implements RateLimits {
  readonly #link: RedisLink
  readonly #prefix: string
  readonly #fallback: RateLimitFallback
  readonly #onFallback: (behaviour: RateLimitFallback) => void
  readonly #local = new LocalRateLimits()
  readonly #takeTokens: TakeTokens
  #skipUntil = 0

  constructor(options: RedisRateLimitsOptions) {
    this.#link = options.link
    this.#prefix = options.prefix
    this.#fallback = options.fallback
    this.#onFallback = options.onFallback ?? (() => {})
    const client: Redis = options.link.client
    // ioredis sends EVALSHA, and EVAL on a new connection or after NOSCRIPT (a Redis restart, SCRIPT FLUSH).
    if (!(COMMAND in client)) client.defineCommand(COMMAND, { lua: TAKE_TOKENS_LUA })
    const command = (client as unknown as Record<string, TakeTokens>)[COMMAND] as TakeTokens
    this.#takeTokens = command.bind(client)
  }

  /** Whether requests are counted in Redis now (false while it is unreachable or just failed). */
  shared(): boolean {
    return this.#link.state() === 'ready' && Date.now() >= this.#skipUntil
  }

  take(requests: readonly TokenRequest[], nowMs: number): TokenGrants | Promise<TokenGrants> {
    if (!this.shared()) return this.#fallbackTake(requests, nowMs)
    const args: (string | number)[] = []
    for (const request of requests) args.push(bucketKey(this.#prefix, request.key))
    for (const request of requests) args.push(request.rpm)
    return this.#takeTokens(requests.length, ...args).then(
      (reply) => grantsOf(reply, requests.length) ?? this.#failed(requests, nowMs),
      () => this.#failed(requests, nowMs),
    )
  }

  #failed(requests: readonly TokenRequest[], nowMs: number): TokenGrants {
    this.#skipUntil = Date.now() + REDIS_RETRY_AFTER_FAILURE_MS
    return this.#fallbackTake(requests, nowMs)
  }

  #fallbackTake(requests: readonly TokenRequest[], nowMs: number): TokenGrants {
    this.#onFallback(this.#fallback)
    switch (this.#fallback) {
      case 'local':
        return this.#local.take(requests, nowMs)
      case 'deny':
        return requests.map(() => ({ wait: DENY_WAIT_MS, remaining: 0, atMs: nowMs }))
      case 'allow':
        return requests.map(() => null)
    }
  }
}

/** The script's reply read back; null when it is not the shape the script returns. */
function grantsOf(reply: unknown, count: number): TokenGrant[] | null {
  if (!Array.isArray(reply) || reply.length !== 2 * count + 1) return null
  const atMs = reply[2 * count] as unknown
  if (typeof atMs !== 'number') return null
  const grants: TokenGrant[] = []
  for (let i = 0; i < count; i++) {
    const wait = reply[2 * i] as unknown
    const remaining = reply[2 * i + 1] as unknown
    if (typeof wait !== 'number' || typeof remaining !== 'number' || wait < 0) return null
    grants.push({ wait: Math.min(MAX_WAIT_MS, wait), remaining: Math.max(0, remaining), atMs })
  }
  return grants
}

/**
 * The gateway's rate limits: in Redis when the process has a link to it, with the fallback counted and the
 * Redis state a gauge on `metrics`; else in this process.
 */
export function gatewayRateLimits(
  link: RedisLink | null, config: { readonly rateLimitRedisPrefix: string; readonly rateLimitRedisFallback: RateLimitFallback }, metrics: GatewayMetrics,
): { readonly limits: RateLimits; readonly shared: (() => boolean) | null; readonly stop: () => void } {
  if (link === null) return { limits: new LocalRateLimits(), shared: null, stop: () => {} }
  const limits = new RedisRateLimits({
    link,
    prefix: config.rateLimitRedisPrefix,
    fallback: config.rateLimitRedisFallback,
    onFallback: (behaviour) => metrics.rateLimitFallback.labels(behaviour).inc(),
  })
  const stop = metrics.beforeCollect(() => metrics.rateLimitRedisShared.set(limits.shared() ? 1 : 0))
  return { limits, shared: () => limits.shared(), stop }
}
