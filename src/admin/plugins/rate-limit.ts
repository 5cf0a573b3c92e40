/**
 * 1000 requests per minute per API key (spec §8) through @fastify/rate-limit, counted in Redis when
 * configured so several instances enforce one limit. Unauthenticated callers count per address.
 */
import rateLimit from '@fastify/rate-limit'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { Redis } from 'ioredis'
import { createHash } from 'node:crypto'
import { ServiceError } from '../../core/errors.js'

// The plugin writes X-RateLimit-Reset as seconds until the window resets; protocol.md §3 wants Unix
// seconds. The onSend hook below (run once per response) turns the relative value into the absolute one.
const RESET_HEADER = 'x-ratelimit-reset'

function rateLimitKey(request: FastifyRequest): string {
  const authorization = request.headers.authorization
  const registryKey = request.headers['x-service-registry-key']
  const credential = typeof registryKey === 'string' && registryKey !== '' ? registryKey : authorization
  if (typeof credential === 'string' && credential !== '') {
    // Keyed by a digest of the presented credential: no database work before the limit applies, and
    // the secret itself never becomes a Redis key.
    const bearer = credential.replace(/^Bearer\s+/i, '')
    return `k:${createHash('sha256').update(bearer).digest('base64url')}`
  }
  return `ip:${request.ip}`
}

export async function registerRateLimit(
  app: FastifyInstance,
  options: { perMinute: number; redis: Redis | null },
): Promise<void> {
  await app.register(rateLimit, {
    global: true,
    max: options.perMinute,
    timeWindow: 60_000,
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
}
