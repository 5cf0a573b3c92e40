import type { FastifyInstance, FastifyReply } from 'fastify'
import type { AuthorityContext } from '../../authority/badge-authority.js'
import type { DidResolver } from '../../authority/did-resolver.js'
import * as pop from '../../authority/pop-challenges.js'
import { MAX_POP_PROOF_BYTES } from '../../core/pop-proof.js'
import { VERBATIM } from '../../core/safe-text.js'
import { ServiceError } from '../../core/errors.js'
import { principalOf } from '../plugins/auth.js'
import { AUTHED_ERRORS, envelope, responses } from '../schemas.js'
import { agentRefParams, issuedBadgeSchema } from './badges.js'
import { forRequest } from '../plugins/audit.js'

export interface PopContext extends AuthorityContext {
  readonly resolver: DidResolver
}

const challengeSchema = {
  type: 'object',
  required: ['challenge_id', 'nonce', 'challenge_expires_at', 'expires_at', 'aud', 'htu', 'htm', 'badge_aud', 'badge_ttl'],
  properties: {
    challenge_id: { type: 'string', description: 'ch-<uuid>' },
    nonce: { type: 'string', description: 'base64url, to be copied into the proof' },
    challenge_expires_at: { type: 'string', format: 'date-time' },
    expires_at: { type: 'string', format: 'date-time', description: 'same as challenge_expires_at' },
    aud: { type: 'string', description: 'the authority issuer URL, the proof aud' },
    htu: { type: 'string', description: 'the badge/pop URL, the proof htu' },
    htm: { type: 'string', enum: ['POST'] },
    badge_aud: { type: 'array', items: { type: 'string' } },
    badge_ttl: { type: 'integer' },
  },
}

const challengeBody = {
  // every field is optional, so an empty body (no JSON at all) is a request for the defaults
  type: ['object', 'null'],
  additionalProperties: false,
  properties: {
    badge_ttl: { type: 'integer', description: 'badge lifetime in seconds, 60-3600, default 300' },
    // a number, so that any numeric value outside 1-600 integers answers invalid_challenge_ttl
    challenge_ttl: { type: 'number', description: 'challenge lifetime in seconds, integer 1-600, default 300' },
    badge_aud: { type: 'array', items: { type: 'string' }, description: 'audiences of the badge' },
  },
}

const proofBody = {
  type: 'object',
  required: ['challenge_id', 'proof_jws'],
  additionalProperties: false,
  properties: {
    // Shapes are checked by the service so that each defect answers with its own code (docs/wire-contract.md §6).
    challenge_id: { type: 'string', maxLength: 200 },
    proof_jws: { type: 'string', maxLength: MAX_POP_PROOF_BYTES * 4, description: 'compact JWS, typ pop+jwt', [VERBATIM]: true },
  },
}

function setChallengeRateHeaders(reply: FastifyReply, limit: pop.ChallengeRateLimit): void {
  // Replaces the global per-key limiter's values: on this route the per-DID limit is the one that binds.
  // The reset is written relative, as @fastify/rate-limit does; the rate-limit plugin's onSend hook
  // turns it into Unix seconds for every response (docs/wire-contract.md §3).
  void reply
    .header('x-ratelimit-limit', limit.limit)
    .header('x-ratelimit-remaining', Math.max(0, limit.remaining))
    .header('x-ratelimit-reset', limit.resetSeconds)
}

/** IAL-1 proof of possession (RFC-003, docs/wire-contract.md §6): challenge and pop endpoints. */
export function popRoutes(app: FastifyInstance, ctx: PopContext): void {
  const tags = ['badges']

  app.post<{ Params: { id: string }; Body: pop.ChallengeRequest | null | undefined }>('/v1/agents/:id/badge/challenge', {
    schema: {
      tags,
      summary: 'IAL-1 step 1: a proof-of-possession challenge for a DID of the caller\'s agent (bare body; 10 per DID per 5 minutes)',
      params: agentRefParams,
      body: challengeBody,
      response: responses({ 200: challengeSchema }, [...AUTHED_ERRORS, 404, 413]),
    },
  }, async (request, reply) => {
    const outcome = await pop.createChallenge(forRequest(ctx, request), principalOf(request), request.params.id, request.body ?? {})
    setChallengeRateHeaders(reply, outcome.rateLimit)
    if (!outcome.ok) {
      void reply.header('retry-after', outcome.rateLimit.resetSeconds)
      throw new ServiceError('rate_limit_exceeded', outcome.message)
    }
    return outcome.challenge
  })

  app.post<{ Params: { id: string }; Body: pop.ProofRequest }>('/v1/agents/:id/badge/pop', {
    // The signed proof is the credential (docs/api.md §5); no API key is asked for.
    config: { auth: 'public' },
    schema: {
      tags,
      summary: 'IAL-1 step 2: redeem a challenge with a signed pop+jwt proof; no credentials',
      params: agentRefParams,
      body: proofBody,
      response: responses({ 200: envelope(issuedBadgeSchema) }, [400, 403, 404, 413, 429, 500, 502]),
    },
  }, async (request) => ({
    success: true,
    data: await pop.redeemProof(forRequest(ctx, request), request.params.id, request.body),
  }))
}
