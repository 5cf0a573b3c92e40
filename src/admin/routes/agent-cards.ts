import type { FastifyInstance } from 'fastify'
import { AGENT_CARD_SCHEMA, validateAgentCard } from '../../core/agent-card.js'
import { jwkToPublicKey } from '../../core/did-key.js'
import { ServiceError } from '../../core/errors.js'
import { verifySignedAgentCard } from '../../core/signed-agent-card.js'
import type { DidResolver } from '../../authority/did-resolver.js'
import { checkAgentCardReachability } from '../../net/guarded-fetch.js'
import { AUTHED_ERRORS, envelope, responses } from '../schemas.js'

const issue = {
  type: 'object',
  required: ['code', 'path', 'message'],
  properties: { code: { type: 'string' }, path: { type: 'string' }, message: { type: 'string' } },
}
const validationSchema = {
  type: 'object',
  required: ['valid', 'errors', 'warnings'],
  properties: {
    valid: { type: 'boolean' },
    errors: { type: 'array', items: issue },
    warnings: { type: 'array', items: issue },
    live: {
      type: 'object',
      properties: {
        reachable: { type: 'boolean' },
        status: { type: 'integer' },
        error: { type: 'string' },
        message: { type: 'string' },
        elapsedMs: { type: 'number' },
      },
    },
  },
}

interface ValidateBody {
  card?: unknown
  live?: boolean
  [field: string]: unknown
}

/**
 * The body is `{card, live?}`; a bare card is accepted too (then `live` may sit beside its fields and is
 * not part of the card). Anything else in the wrapper form is an unknown field.
 */
function splitValidateBody(body: ValidateBody): { card: unknown; live: boolean } {
  const { live, ...rest } = body
  if (live !== undefined && typeof live !== 'boolean') throw new ServiceError('invalid_request', 'body/live must be boolean')
  if (Object.prototype.hasOwnProperty.call(body, 'card')) {
    const unknown = Object.keys(rest).filter((k) => k !== 'card')
    if (unknown.length > 0) throw new ServiceError('invalid_request', `body must NOT have additional properties (${unknown.join(', ')})`)
    return { card: body.card, live: live ?? false }
  }
  return { card: rest, live: live ?? false }
}

export function agentCardRoutes(
  app: FastifyInstance,
  deps: { resolver: DidResolver; didWebAllowHosts: readonly string[] },
): void {
  const tags = ['agent-cards']
  const { resolver } = deps

  app.get('/schemas/agent-card/v1.json', {
    config: { auth: 'public' },
    schema: { tags, summary: 'Agent Card JSON Schema v1', response: { 200: { type: 'object', additionalProperties: true } } },
  }, async (_request, reply) => reply.type('application/schema+json').send(AGENT_CARD_SCHEMA))

  app.post<{ Body: ValidateBody }>('/v1/agent-cards/validate', {
    schema: {
      tags,
      summary: 'Validate an Agent Card; `live: true` also checks that its URL answers (HTTPS, 10 s, public addresses only)',
      body: { type: 'object', properties: { card: { type: 'object' }, live: { type: 'boolean' } } },
      response: responses({ 200: envelope(validationSchema) }, [...AUTHED_ERRORS, 413]),
    },
  }, async (request) => {
    const { card, live } = splitValidateBody(request.body)
    const result = validateAgentCard(card)
    const data: Record<string, unknown> = { ...result }
    const url = (card as { url?: unknown } | null)?.url
    if (live) {
      if (typeof url === 'string') {
        const check = await checkAgentCardReachability(url, { timeoutMs: 10_000, allowHosts: deps.didWebAllowHosts })
        data.live = check
        if (!check.reachable) {
          data.valid = false
          result.errors.push({ code: 'URL_UNREACHABLE', path: '$.url', message: `The card URL did not answer successfully${check.error === undefined ? '' : ` (${check.error})`}.` })
        }
      } else {
        data.live = { reachable: false, error: 'URL_INVALID', message: 'The card has no URL to check.', elapsedMs: 0 }
      }
    }
    return { success: true, data }
  })

  app.post<{ Body: { signed_card?: unknown; publicKeyJwk?: unknown; [k: string]: unknown } }>('/v1/agent-cards/verify', {
    schema: {
      tags,
      summary: 'Verify a signed Agent Card ({payload, protected, signature}); the key comes from the kid (did:key or did:web) or publicKeyJwk',
      body: {
        type: 'object',
        additionalProperties: false,
        properties: {
          signed_card: { type: 'object' },
          publicKeyJwk: { type: 'object' },
          payload: { type: 'string' },
          protected: { type: 'string' },
          signature: { type: 'string' },
        },
      },
      response: responses({
        200: envelope({
          type: 'object',
          required: ['valid'],
          properties: {
            valid: { type: 'boolean' },
            kid: { type: 'string' },
            error: { type: 'string' },
            message: { type: 'string' },
            card: { type: 'object', additionalProperties: true },
            validation: validationSchema,
          },
        }),
      }, [...AUTHED_ERRORS, 413]),
    },
  }, async (request) => {
    const { signed_card: wrapped, publicKeyJwk, ...bare } = request.body
    const signed = wrapped ?? bare
    let explicitKey: Uint8Array | null = null
    if (publicKeyJwk !== undefined) {
      try {
        explicitKey = jwkToPublicKey(publicKeyJwk)
      } catch {
        throw new ServiceError('invalid_public_key')
      }
    }
    // The kid decides the key whenever it resolves: a caller-supplied key may not stand in for a DID
    // it does not belong to (else anyone could "verify" a card under another agent's kid). The explicit
    // key serves only kids that do not resolve, such as opaque key names.
    const keyFor = async (kid: string): Promise<Uint8Array | null> => {
      const resolved = await resolver.resolveKey(kid).catch(() => null)
      if (resolved === null) return explicitKey
      if (explicitKey !== null && !Buffer.from(explicitKey).equals(resolved)) return null
      return resolved
    }
    const result = await verifySignedAgentCard(signed, keyFor)
    if (!result.valid && result.error === 'SIGNED_CARD_MALFORMED') throw new ServiceError('invalid_signed_card', result.message)
    return { success: true, data: result }
  })
}
