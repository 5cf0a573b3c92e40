/**
 * 1000 requests per minute per API key (docs/api.md §8) through @fastify/rate-limit, counted in Redis when
 * configured so several instances enforce one limit.
 *
 * Authentication runs first (a root onRequest hook), so the limiter counts the authenticated key, not
 * whatever string was presented: guessing keys cannot earn a fresh budget per guess. Unauthenticated
 * callers of public routes count per address, and failed authentications count per address in their own
 * bucket (`countFailedAuthentication`), which answers 429 once exceeded.
 *
 * With Redis configured, counting fails over per request: while the connection is not ready (or a
 * command fails) the request is counted in this instance's memory instead, so a Redis outage costs the
 * shared budget but never the limit itself, and no request waits for Redis.
 */
import rateLimit, { type FastifyRateLimitStoreCtor } from '@fastify/rate-limit'
import { createRequire } from 'node:module'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { Redis } from 'ioredis'
import { ServiceError } from '../../core/errors.js'

// The plugin writes X-RateLimit-Reset as seconds until the window resets; docs/wire-contract.md §3 wants Unix
// seconds. The onSend hook below (run once per response) turns the relative value into the absolute one.
const RESET_HEADER = 'x-ratelimit-reset'
const WINDOW_MS = 60_000

type CountCallback = (error: Error | null, result?: { current: number; ttl: number }) => void
/** The counter store contract of @fastify/rate-limit (its own two stores implement it). */
interface CounterStore {
  incr(key: string, callback: CountCallback, timeWindow: number, max: number): void
  child(routeOptions: Record<string, unknown>): CounterStore
}
interface StoreParams {
  continueExceeding: boolean
  exponentialBackoff: boolean
  cache?: number
}

// The plugin's stores are reused rather than copied; the package does not export them by name.
const require = createRequire(import.meta.url)
const LocalStore = require('@fastify/rate-limit/store/LocalStore.js') as new (continueExceeding: boolean, exponentialBackoff: boolean, cache?: number) => CounterStore
const RedisStore = require('@fastify/rate-limit/store/RedisStore.js') as new (continueExceeding: boolean, exponentialBackoff: boolean, redis: Redis, key: string) => CounterStore

/** Redis while it is ready and answers, this instance's memory otherwise. */
class FailoverStore implements CounterStore {
  constructor(private readonly shared: CounterStore, private readonly local: CounterStore, private readonly redis: Redis) {}

  incr(key: string, callback: CountCallback, timeWindow: number, max: number): void {
    if (this.redis.status !== 'ready') return this.local.incr(key, callback, timeWindow, max)
    this.shared.incr(key, (error, result) => {
      if (error || result === undefined) this.local.incr(key, callback, timeWindow, max)
      else callback(null, result)
    }, timeWindow, max)
  }

  child(routeOptions: Record<string, unknown>): CounterStore {
    return new FailoverStore(this.shared.child(routeOptions), this.local.child(routeOptions), this.redis)
  }
}

/** The `store` option: the plugin constructs it with its merged parameters. */
function failoverStore(redis: Redis, nameSpace: string): FastifyRateLimitStoreCtor {
  return function (params: StoreParams) {
    return new FailoverStore(
      new RedisStore(params.continueExceeding, params.exponentialBackoff, redis, nameSpace),
      new LocalStore(params.continueExceeding, params.exponentialBackoff, params.cache),
      redis,
    )
  } as unknown as FastifyRateLimitStoreCtor
}

function rateLimitKey(request: FastifyRequest): string {
  const principal = request.principal
  if (principal?.keyId != null) return `k:${principal.keyId}`
  if (principal?.userId != null) return `u:${principal.userId}`
  return `ip:${request.ip}`
}

export interface RateLimiting {
  /** Counts a failed authentication against the caller's address; throws 429 once over the limit. */
  countFailedAuthentication(request: FastifyRequest, reply: FastifyReply): Promise<void>
}

export async function registerRateLimit(
  app: FastifyInstance,
  options: { perMinute: number; redis: Redis | null },
): Promise<RateLimiting> {
  await app.register(rateLimit, {
    global: true,
    max: options.perMinute,
    timeWindow: WINDOW_MS,
    keyGenerator: rateLimitKey,
    ...(options.redis === null ? {} : { store: failoverStore(options.redis, 'service-rl:') }),
    // The stores above never fail; should one ever, the request passes rather than failing with 500.
    skipOnError: true,
    errorResponseBuilder: (_request, context) =>
      new ServiceError('rate_limit_exceeded', `Rate limit of ${context.max} requests per minute exceeded; retry in ${context.after}.`),
  })
  app.addHook('onSend', async (_request, reply, payload) => {
    const secondsLeft = reply.getHeader(RESET_HEADER)
    if (secondsLeft !== undefined) reply.header(RESET_HEADER, Math.ceil(Date.now() / 1000) + Number(secondsLeft))
    return payload
  })

  const failures = app.createRateLimit({
    max: options.perMinute,
    timeWindow: WINDOW_MS,
    keyGenerator: (request) => `authfail:${request.ip}`,
  })
  return {
    async countFailedAuthentication(request, reply) {
      const state = await failures(request).catch(() => null)
      if (state === null || state.isAllowed) return
      void reply.header('x-ratelimit-limit', state.max)
      void reply.header('x-ratelimit-remaining', state.remaining)
      void reply.header(RESET_HEADER, state.ttlInSeconds)
      if (state.isExceeded) {
        void reply.header('retry-after', state.ttlInSeconds)
        throw new ServiceError('rate_limit_exceeded', `Too many failed authentications from this address; retry in ${state.ttlInSeconds} s.`)
      }
    },
  }
}
