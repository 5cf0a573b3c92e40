import type { FastifyInstance } from 'fastify'
import type { Database } from '../../db/database.js'
import * as trust from '../../authority/domain-validation.js'
import { principalOf } from '../plugins/auth.js'
import { AUTHED_ERRORS, envelope, idParams, responses } from '../schemas.js'
import { toAgentView } from '../services/agents.js'
import { agentSchema } from './agents.js'

export interface TrustContext {
  readonly db: Database
  /** SERVICE_DNS_SERVERS: `ip` or `ip:port` resolvers; empty = the system resolver. */
  readonly dnsServers: readonly string[]
  /** `host` or `host%3Aport` of this registry's did:web identifiers, for the agent view. */
  readonly registryDidHost: string
}


const challengeSchema = {
  type: 'object',
  required: ['domain', 'record_name', 'record_value', 'status'],
  properties: {
    domain: { type: 'string', description: 'the domain being verified (lower case)' },
    record_name: { type: 'string', description: '_service-challenge.<domain>' },
    record_value: { type: 'string', description: 'TXT value to publish: service-domain-verification=<token>' },
    status: { type: 'string', enum: ['pending', 'verified'] },
  },
}

/** Earned trust levels (docs/wire-contract.md §4): DNS TXT domain validation (level 2), operator levels 3-4. */
export function trustRoutes(app: FastifyInstance, ctx: TrustContext): void {
  const tags = ['agents']
  const lookupTxt = trust.createTxtLookup(ctx.dnsServers)

  app.post<{ Params: { id: string }; Body: { domain?: string } | undefined }>('/v1/agents/:id/verify-domain', {
    schema: {
      tags,
      summary: 'Start or check DNS TXT validation of the agent\'s domain (trust level 2)',
      description: 'The first call answers the TXT record to publish and status pending; a later call looks it up. '
        + 'Once found the domain is verified and the agent\'s trust level is raised to 2 (never lowered).',
      params: idParams,
      body: {
        type: 'object',
        additionalProperties: false,
        properties: { domain: { type: 'string', maxLength: 253, description: 'default: the agent\'s registered domain' } },
      },
      response: responses({ 200: envelope(challengeSchema) }, [...AUTHED_ERRORS, 404, 413, 502]),
    },
  }, async (request) => {
    const view = await trust.verifyDomain({ db: request.db, lookupTxt }, principalOf(request), request.params.id, request.body?.domain)
    return {
      success: true,
      data: view,
      message: view.status === 'verified'
        ? 'Domain verified.'
        : `Publish a TXT record at ${view.record_name} with the value ${view.record_value}, then call again.`,
    }
  })

  app.put<{ Params: { id: string }; Body: { trustLevel: unknown } }>('/v1/agents/:id/trust-level', {
    schema: {
      tags,
      summary: 'Set an agent\'s trust level (operator credential only; any organization)',
      params: idParams,
      body: {
        type: 'object',
        required: ['trustLevel'],
        additionalProperties: false,
        properties: { trustLevel: { type: 'string', description: '"1" to "4"' } },
      },
      response: responses({ 200: envelope(agentSchema) }, [...AUTHED_ERRORS, 404, 413]),
    },
  }, async (request) => {
    const registry = { db: request.db, registryDidHost: ctx.registryDidHost }
    return {
      success: true,
      data: toAgentView(registry, await trust.setTrustLevel(registry, principalOf(request), request.params.id, request.body.trustLevel)),
      message: 'Trust level set.',
    }
  })
}
