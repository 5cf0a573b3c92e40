/**
 * 1000 requests per minute per API key (spec §8) through @fastify/rate-limit, counted in Redis when
 * configured so several instances enforce one limit.
 *
 * Authentication runs first (a root onRequest hook), so the limiter counts the authenticated key, not
 * whatever string was presented: guessing keys cannot earn a fresh budget per guess. Unauthenticated
 * callers of public routes count per address, and failed authentications count per address in their own
 * bucket (`countFailedAuthentication`), which answers 429 once exceeded.
 */
import rateLimit from '@fastify/rate-limit'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import type { Redis } from 'ioredis'
import { ServiceError } from '../../core/errors.js'

// The plugin writes X-RateLimit-Reset as seconds until the window resets; protocol.md §3 wants Unix
// seconds. The onSend hook below (run once per response) turns the relative value into the absolute one.
const RESET_HEADER = 'x-ratelimit-reset'
const WINDOW_MS = 60_000

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
    ...(options.redis === null ? {} : { redis: options.redis, nameSpace: 'service-rl:' }),
    // A Redis outage must not take the registry down: requests pass and the failure is logged.
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
