import type { FastifyInstance, FastifyRequest } from 'fastify'
import { createHash } from 'node:crypto'
import * as authority from '../../authority/badge-authority.js'
import { buildAgentDidDocument } from '../../core/did-document.js'
import { jwkToPublicKey } from '../../core/did-key.js'
import { agentDidWeb } from '../../core/did.js'
import { ServiceError } from '../../core/errors.js'
import { MAX_BADGE_BYTES } from '../../core/badge.js'
import { VERBATIM } from '../../core/safe-text.js'
import { findAgentById } from '../../db/repositories/agents.js'
import { principalOf } from '../plugins/auth.js'
import { ROUTINE_POLL } from '../plugins/request-log.js'
import { AUTHED_ERRORS, cursorQuery, envelope, idParams, responses } from '../schemas.js'
import { forRequest } from '../plugins/audit.js'

/** docs/api.md §8: 100 badges per minute per agent. */
export const BADGE_ISSUANCE_PER_MINUTE = 100

const cnfSchema = {
  type: 'object',
  properties: {
    kid: { type: 'string' },
    jwk: { type: 'object', properties: { kty: { type: 'string' }, crv: { type: 'string' }, x: { type: 'string' }, kid: { type: 'string' } } },
  },
}

export const issuedBadgeSchema = {
  type: 'object',
  required: ['token', 'jti', 'subject', 'trustLevel', 'expiresAt', 'ial'],
  properties: {
    token: { type: 'string' },
    jti: { type: 'string' },
    subject: { type: 'string' },
    trustLevel: { type: 'string' },
    expiresAt: { type: 'string', format: 'date-time' },
    ial: { type: 'string', enum: ['0', '1'] },
    cnf: cnfSchema,
  },
}

const jtiParams = {
  type: 'object',
  required: ['jti'],
  additionalProperties: false,
  properties: { jti: { type: 'string', minLength: 1, maxLength: 128, pattern: '^[A-Za-z0-9._:-]+$' } },
}

/** The agent path segment of the badge routes: a UUID or a DID (docs/api.md §4.4). */
export const agentRefParams = {
  type: 'object',
  required: ['id'],
  additionalProperties: false,
  properties: { id: { type: 'string', minLength: 1, maxLength: 600 } },
}

function agentRateKey(request: FastifyRequest): string {
  const id = (request.params as { id?: string }).id ?? ''
  return `badge:${createHash('sha256').update(id.toLowerCase()).digest('base64url')}`
}

export function badgeRoutes(app: FastifyInstance, ctx: authority.AuthorityContext): void {
  const tags = ['badges']

  app.post<{ Params: { id: string }; Body: authority.Ial0Request }>('/v1/agents/:id/badge', {
    config: {
      // Per agent, counted after authentication (preHandler) so strangers cannot spend an agent's budget.
      rateLimit: { max: BADGE_ISSUANCE_PER_MINUTE, timeWindow: 60_000, keyGenerator: agentRateKey, hook: 'preHandler' },
    },
    schema: {
      tags,
      summary: 'Issue an IAL-0 badge (path: agent UUID or DID)',
      params: agentRefParams,
      body: {
        type: 'object',
        additionalProperties: false,
        properties: {
          domain: { type: 'string', maxLength: 253 },
          trustLevel: { type: 'string', description: '"1" to "4"' },
          audience: { type: 'array', items: { type: 'string' } },
          badge_aud: { type: 'array', items: { type: 'string' } },
          ttl: { type: 'integer' },
          badge_ttl: { type: 'integer' },
          mode: { type: 'string' },
        },
      },
      response: responses({ 200: envelope(issuedBadgeSchema) }, [...AUTHED_ERRORS, 404, 413]),
    },
  }, async (request) => ({
    success: true,
    data: await authority.issueIal0Badge(forRequest(ctx, request), principalOf(request), request.params.id, request.body ?? {}),
  }))

  app.post<{ Body: { token: string; audience?: string[] } }>('/v1/badges/verify', {
    schema: {
      tags,
      summary: 'Verify a badge; a bad token answers valid:false with its code, never its unverified claims',
      body: {
        type: 'object',
        required: ['token'],
        additionalProperties: false,
        properties: {
          // A malformed token is answered valid:false by the verifier, whatever characters it holds.
          token: { type: 'string', maxLength: MAX_BADGE_BYTES * 4, [VERBATIM]: true },
          audience: { type: 'array', maxItems: 10, items: { type: 'string', maxLength: 512 } },
        },
      },
      response: responses({
        200: envelope({
          type: 'object',
          required: ['valid'],
          properties: { valid: { type: 'boolean' }, error: { type: 'string' }, kid: { type: ['string', 'null'] }, claims: { type: 'object', additionalProperties: true } },
        }),
      }, [...AUTHED_ERRORS, 413]),
    },
  }, async (request) => {
    const result = await authority.verifyBadgeToken(ctx, request.body.token, request.body.audience)
    return { success: true, data: result.valid ? { valid: true, claims: result.claims, kid: result.kid } : { valid: false, error: result.error } }
  })

  app.post<{ Params: { jti: string }; Body: { reason?: string } | undefined }>('/v1/badges/:jti/revoke', {
    schema: {
      tags,
      summary: 'Revoke a badge of the caller\'s organization',
      params: jtiParams,
      body: { type: 'object', additionalProperties: false, properties: { reason: { type: 'string', maxLength: 500 } } },
      response: responses({
        200: envelope({
          type: 'object',
          required: ['jti', 'revoked', 'revokedAt'],
          properties: { jti: { type: 'string' }, revoked: { type: 'boolean' }, revokedAt: { type: 'string' }, reason: { type: 'string' } },
        }),
      }, [...AUTHED_ERRORS, 404]),
    },
  }, async (request) => ({
    success: true,
    data: await authority.revokeBadge(forRequest(ctx, request), principalOf(request), request.params.jti, request.body?.reason),
    message: 'Badge revoked.',
  }))

  app.get<{ Params: { jti: string } }>('/v1/badges/:jti/status', {
    config: { auth: 'public' },
    schema: {
      tags,
      summary: 'Public: whether a badge is revoked',
      params: jtiParams,
      response: responses({
        200: envelope({
          type: 'object',
          required: ['jti', 'revoked', 'expiresAt'],
          properties: { jti: { type: 'string' }, revoked: { type: 'boolean' }, revokedAt: { type: 'string' }, reason: { type: 'string' }, expiresAt: { type: 'string' } },
        }),
      }, [400, 404, 429, 500]),
    },
  }, async (request) => ({ success: true, data: await authority.badgeStatus(ctx, request.params.jti) }))

  app.get<{ Querystring: { since?: string; limit: number; cursor?: string } }>('/v1/revocations', {
    // A gateway's revocation sync, every second.
    config: { auth: 'public', ...ROUTINE_POLL },
    schema: {
      tags,
      summary: 'Public: revoked badge ids since a time, paginated',
      querystring: {
        type: 'object',
        additionalProperties: false,
        properties: {
          since: { type: 'string', maxLength: 64 },
          limit: { type: 'integer', minimum: 1, maximum: 500, default: 500 },
          cursor: cursorQuery(300),
        },
      },
      response: responses({
        200: {
          type: 'object',
          required: ['success', 'data', 'nextCursor'],
          properties: {
            success: { type: 'boolean' },
            data: {
              type: 'object',
              properties: {
                revocations: { type: 'array', items: { type: 'object', properties: { jti: { type: 'string' }, revokedAt: { type: 'string' }, reason: { type: 'string' } } } },
                nextCursor: { type: ['string', 'null'] },
                syncedAt: { type: 'string' },
              },
            },
            nextCursor: { type: ['string', 'null'] },
          },
        },
      }, [400, 429, 500]),
    },
  }, async (request) => {
    const page = await authority.listRevocations(ctx, request.query.since, request.query.limit, request.query.cursor)
    // docs/wire-contract.md §4 names the body {revocations, nextCursor, syncedAt}; §13 puts list cursors beside
    // `data`. Both are honoured: the cursor appears in the body and at the top level.
    return { success: true, data: page, nextCursor: page.nextCursor }
  })

  app.get('/.well-known/jwks.json', {
    config: { auth: 'public', ...ROUTINE_POLL },
    schema: {
      tags: ['keys'],
      summary: 'The authority\'s public keys (docs/api.md §2.6)',
      response: {
        304: { type: 'null', description: 'not modified (If-None-Match)' },
        200: {
          type: 'object',
          required: ['keys'],
          properties: {
            keys: {
              type: 'array',
              items: { type: 'object', properties: { kty: { type: 'string' }, crv: { type: 'string' }, x: { type: 'string' }, kid: { type: 'string' }, alg: { type: 'string' }, use: { type: 'string' } } },
            },
          },
        },
      },
    },
  }, async (request, reply) => {
    const jwks = ctx.keyRing.current.jwks
    const etag = `"${createHash('sha256').update(JSON.stringify(jwks)).digest('base64url').slice(0, 27)}"`
    // Short public caching: a rotation publishes the new key before it signs, so five minutes is safe.
    void reply.header('cache-control', 'public, max-age=300').header('etag', etag)
    if (request.headers['if-none-match'] === etag) return reply.code(304).send()
    return jwks
  })

  // The issuer as badges spell it: a gateway-only process learns it here instead of guessing it from
  // the URL it reaches the registry by (`127.0.0.1` and `localhost` are one host but two issuers).
  const metadata = Object.freeze({ issuer: ctx.issuer, jwks_uri: `${ctx.issuer}/.well-known/jwks.json` })
  app.get('/.well-known/service-authority', {
    config: { auth: 'public', ...ROUTINE_POLL },
    schema: {
      tags: ['keys'],
      summary: 'Public: the badge authority\'s metadata: the `iss` of its badges and where its keys are',
      response: {
        200: {
          type: 'object',
          required: ['issuer', 'jwks_uri'],
          properties: { issuer: { type: 'string' }, jwks_uri: { type: 'string' } },
        },
      },
    },
  }, async (_request, reply) => {
    void reply.header('cache-control', 'public, max-age=300')
    return metadata
  })

  app.get<{ Params: { id: string } }>('/agents/:id/did.json', {
    config: { auth: 'public' },
    schema: {
      tags: ['agents'],
      summary: 'Public: the did:web DID document of a registered agent (docs/api.md §2.7)',
      params: idParams,
      response: responses({ 200: { type: 'object', additionalProperties: true } }, [400, 404, 429, 500]),
    },
  }, async (request, reply) => {
    const agent = await findAgentById(ctx.db, request.params.id)
    if (agent === null) throw new ServiceError('agent_not_found')
    const did = agentDidWeb(ctx.registryDidHost, agent.id)
    const key = agent.public_key_jwk === null ? null : jwkToPublicKey(agent.public_key_jwk)
    void reply.header('cache-control', 'public, max-age=60')
    return buildAgentDidDocument(did, key)
  })
}
