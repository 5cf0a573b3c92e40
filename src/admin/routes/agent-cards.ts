import type { FastifyInstance } from 'fastify'
import { createPublicKey, type KeyObject } from 'node:crypto'
import { AGENT_CARD_SCHEMA, validateAgentCard } from '../../core/agent-card.js'
import { authorityJku, canonicalCardPayload, countersignCard, verifyCardSignatures, type CardKeyLookup } from '../../core/card-signatures.js'
import { jwkToPublicKey, publicKeyToJwk } from '../../core/did-key.js'
import { ServiceError } from '../../core/errors.js'
import { isRecord } from '../../core/json-objects.js'
import { verifySignedAgentCard } from '../../core/signed-agent-card.js'
import type { DidResolver } from '../../authority/did-resolver.js'
import type { KeyRing } from '../../authority/key-ring.js'
import { checkAgentCardReachability } from '../../net/guarded-fetch.js'
import { principalOf } from '../plugins/auth.js'
import { getAgent, type RegistryContext } from '../services/agents.js'
import { AUTHED_ERRORS, envelope, responses, uuidParam } from '../schemas.js'

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

const signatureChecks = {
  type: 'array',
  items: {
    type: 'object',
    required: ['index', 'valid'],
    properties: {
      index: { type: 'integer' },
      valid: { type: 'boolean' },
      kid: { type: 'string' },
      alg: { type: 'string' },
      error: { type: 'string' },
      message: { type: 'string' },
    },
  },
}

function ed25519Key(raw: Uint8Array): KeyObject {
  return createPublicKey({ key: publicKeyToJwk(raw), format: 'jwk' })
}

/** An Ed25519 (OKP) or P-256 (EC) public JWK as a key; anything else, or a private part, is refused. */
function explicitCardKey(jwk: unknown): KeyObject {
  if (isRecord(jwk) && jwk['kty'] === 'EC') {
    const { crv, x, y } = jwk
    if (Object.prototype.hasOwnProperty.call(jwk, 'd') || crv !== 'P-256' || typeof x !== 'string' || typeof y !== 'string') {
      throw new ServiceError('invalid_public_key', "An EC key must be a public P-256 JWK with string 'x' and 'y'.")
    }
    try {
      return createPublicKey({ key: { kty: 'EC', crv, x, y }, format: 'jwk' })
    } catch {
      throw new ServiceError('invalid_public_key', 'The EC JWK is not a point on P-256.')
    }
  }
  try {
    return ed25519Key(jwkToPublicKey(jwk))
  } catch {
    throw new ServiceError('invalid_public_key')
  }
}

export interface AgentCardDeps {
  resolver: DidResolver
  didWebAllowHosts: readonly string[]
  registry: RegistryContext
  keyRing: KeyRing
  issuer: string
}

export function agentCardRoutes(app: FastifyInstance, deps: AgentCardDeps): void {
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
      summary: 'Verify a signed Agent Card: an A2A card with `signatures` ({card}), or a flattened JWS ({payload, protected, signature}); keys from the kid (authority, did:key, did:web) or publicKeyJwk',
      body: {
        type: 'object',
        additionalProperties: false,
        properties: {
          card: { type: 'object' },
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
            signatures: signatureChecks,
          },
        }),
      }, [...AUTHED_ERRORS, 413]),
    },
  }, async (request) => {
    const { signed_card: wrapped, publicKeyJwk, card, ...bare } = request.body
    if (card !== undefined || (isRecord(wrapped) && Object.prototype.hasOwnProperty.call(wrapped, 'signatures'))) {
      if (card !== undefined && (wrapped !== undefined || Object.keys(bare).length > 0)) {
        throw new ServiceError('invalid_request', 'Send either {card} (A2A signatures) or a flattened JWS, not both.')
      }
      return { success: true, data: await verifyA2aCard(card ?? wrapped, publicKeyJwk) }
    }
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

  /**
   * Trust store for §8.4 signatures, in this order: the authority's own keys (its countersignatures), a kid
   * that resolves as a DID (did:key, this registry's did:web, another did:web), and only then the caller's
   * publicKeyJwk, which may not stand in for a kid that resolves (as for the flattened form).
   */
  async function verifyA2aCard(card: unknown, publicKeyJwk: unknown): Promise<Record<string, unknown>> {
    const explicit = publicKeyJwk === undefined ? null : explicitCardKey(publicKeyJwk)
    const lookup: CardKeyLookup = async (kid) => {
      const authority = deps.keyRing.current.keys.get(kid)
      if (authority !== undefined) return authority.publicKey
      const resolved = await resolver.resolveKey(kid).catch(() => null)
      if (resolved === null) return explicit
      const key = ed25519Key(resolved)
      if (explicit !== null && !explicit.equals(key)) return null
      return key
    }
    const result = await verifyCardSignatures(card, lookup)
    if (!('signatures' in result)) throw new ServiceError('invalid_signed_card', result.message)
    if (result.signatures.length === 0) throw new ServiceError('invalid_signed_card', 'The card has no signatures.')
    if (result.valid) {
      return { valid: true, kid: result.verifiedKids[0], card, validation: validateAgentCard(card), signatures: result.signatures }
    }
    // the first failure speaks for the answer; every signature's own is in `signatures`
    const first = result.signatures.find((check) => !check.valid)
    const reason = first !== undefined && !first.valid ? { error: first.error, message: first.message } : { error: 'SIGNATURE_INVALID', message: 'No signature verifies.' }
    return { valid: false, ...reason, signatures: result.signatures }
  }

  app.post<{ Body: { agentId: string; card?: Record<string, unknown> } }>('/v1/agent-cards/sign', {
    schema: {
      tags,
      summary: "Countersign a registered agent's card with the authority's key (A2A §8.4 `signatures`, EdDSA); the agent's own signatures are kept",
      body: {
        type: 'object',
        required: ['agentId'],
        additionalProperties: false,
        properties: { agentId: uuidParam, card: { type: 'object' } },
      },
      response: responses({
        200: envelope({
          type: 'object',
          required: ['card', 'kid', 'jku'],
          properties: { card: { type: 'object', additionalProperties: true }, kid: { type: 'string' }, jku: { type: 'string' } },
        }),
      }, [...AUTHED_ERRORS, 404, 409, 413]),
    },
  }, async (request) => {
    const agent = await getAgent(deps.registry, principalOf(request), request.body.agentId)
    if (agent.status !== 'enabled') throw new ServiceError('agent_disabled', 'The agent is disabled; its card is not signed.')
    const registered = agent.agent_card
    if (registered === null || registered === undefined) throw new ServiceError('agent_card_missing')
    const card = request.body.card ?? registered
    // What is signed is the registered card: a card sent along may only add signatures to it.
    const given = canonicalCardPayload(card)
    const stored = canonicalCardPayload(registered)
    if (!given.ok) throw new ServiceError('invalid_agent_card', given.message)
    if (!stored.ok || given.canonical !== stored.canonical) throw new ServiceError('agent_card_mismatch')
    const validation = validateAgentCard(card)
    if (!validation.valid) throw new ServiceError('invalid_agent_card', 'The agent card is not valid; see errors.', { errors: validation.errors })
    const { signing } = deps.keyRing.current
    const signed = await countersignCard(card, { privateKey: signing.privateKey, kid: signing.kid, issuer: deps.issuer })
    if (!signed.ok) throw new ServiceError('invalid_signed_card', signed.message)
    return { success: true, data: { card: signed.card, kid: signing.kid, jku: authorityJku(deps.issuer) } }
  })
}

