import type { FastifyInstance } from 'fastify'
import { principalOf } from '../plugins/auth.js'
import { AUTHED_ERRORS, envelope, idParams, listEnvelope, nullableString, pageQuery, responses } from '../schemas.js'
import * as agents from '../services/agents.js'
import type { AgentStatus } from '../../db/repositories/agents.js'
import { forRequest } from '../plugins/audit.js'

const publicKeyJwkSchema = {
  type: ['object', 'null'],
  properties: { kty: { type: 'string' }, crv: { type: 'string' }, x: { type: 'string' } },
}

/** The agent view's response schema: what of an agent leaves the process (shared by agent routes). */
export const agentSchema = {
  type: 'object',
  required: ['id', 'name', 'did', 'status', 'trustLevel', 'createdAt', 'updatedAt'],
  properties: {
    id: { type: 'string', format: 'uuid' },
    name: { type: 'string' },
    domain: { type: ['string', 'null'] },
    description: { type: ['string', 'null'] },
    did: { type: 'string', description: 'explicit DID, else did:web:<registry host>:agents:<id>' },
    status: { type: 'string', enum: ['enabled', 'disabled'] },
    trustLevel: { type: 'string', enum: ['1', '2', '3', '4'] },
    publicKeyJwk: publicKeyJwkSchema,
    agent_card: { type: ['object', 'null'], additionalProperties: true },
    createdAt: { type: 'string', format: 'date-time' },
    updatedAt: { type: 'string', format: 'date-time' },
  },
}

/** Longest `q` of the agent search (docs/console.md). */
export const MAX_SEARCH_LENGTH = 200

const badgeRecordSchema = {
  type: 'object',
  required: ['jti', 'subject', 'trustLevel', 'ial', 'issuedAt', 'expiresAt', 'revoked', 'revokedAt', 'reason'],
  properties: {
    jti: { type: 'string' },
    subject: { type: 'string', description: 'the badge\'s `sub`, the agent\'s DID when it was issued' },
    trustLevel: { type: 'string', enum: ['1', '2', '3', '4'] },
    ial: { type: 'string', enum: ['0', '1'] },
    issuedAt: { type: 'string', format: 'date-time' },
    expiresAt: { type: 'string', format: 'date-time' },
    revoked: { type: 'boolean' },
    revokedAt: { type: ['string', 'null'], format: 'date-time' },
    reason: { type: ['string', 'null'], description: 'the revocation reason, when one was given' },
  },
}

const agentGroupSchema = {
  type: 'object',
  required: ['id', 'name', 'precedence'],
  properties: { id: { type: 'string', format: 'uuid' }, name: { type: 'string' }, precedence: { type: 'integer' } },
}

const agentFields = {
  name: { type: 'string', minLength: 1, maxLength: 200 },
  // a host name or similar label; no whitespace
  domain: { type: ['string', 'null'], maxLength: 253, pattern: '^\\S+$' },
  description: nullableString(2000),
  did: nullableString(512),
  publicKeyJwk: { type: ['object', 'null'], maxProperties: 20 },
  publicKeyMultibase: nullableString(200),
  agent_card: { type: ['object', 'null'] },
}

const createBody = { type: 'object', required: ['name'], additionalProperties: false, properties: agentFields }
const updateBody = { type: 'object', additionalProperties: false, minProperties: 1, properties: agentFields }

export function agentRoutes(app: FastifyInstance, ctx: agents.RegistryContext): void {
  const tags = ['agents']

  app.get<{ Querystring: { limit: number; cursor?: string; q?: string } }>('/v1/agents', {
    schema: {
      tags, summary: 'List the caller\'s agents; `q` keeps those whose name, domain or DID contains it (any case)',
      querystring: { ...pageQuery, properties: { ...pageQuery.properties, q: { type: 'string', maxLength: MAX_SEARCH_LENGTH } } },
      response: responses({ 200: listEnvelope(agentSchema) }, AUTHED_ERRORS),
    },
  }, async (request) => {
    const page = await agents.listAgents(forRequest(ctx, request), principalOf(request), request.query.limit, request.query.cursor, request.query.q)
    return { success: true, data: page.items, nextCursor: page.nextCursor }
  })

  app.get<{ Params: { id: string }; Querystring: { limit: number; cursor?: string } }>('/v1/agents/:id/badges', {
    schema: {
      tags: ['badges'], summary: 'The badges issued to an agent, newest first (records, never tokens)', params: idParams, querystring: pageQuery,
      response: responses({ 200: listEnvelope(badgeRecordSchema) }, [...AUTHED_ERRORS, 404]),
    },
  }, async (request) => {
    const page = await agents.listAgentBadges(forRequest(ctx, request), principalOf(request), request.params.id, request.query.limit, request.query.cursor)
    return { success: true, data: page.items, nextCursor: page.nextCursor }
  })

  app.get<{ Params: { id: string } }>('/v1/agents/:id/groups', {
    schema: {
      tags, summary: 'The policy groups an agent belongs to, highest priority first', params: idParams,
      response: responses({ 200: { type: 'array', items: agentGroupSchema } }, [...AUTHED_ERRORS, 404]),
    },
  }, async (request) => agents.listAgentGroups(forRequest(ctx, request), principalOf(request), request.params.id))

  app.post<{ Body: agents.AgentInput & { name: string } }>('/v1/agents', {
    schema: { tags, summary: 'Register an agent', body: createBody, response: responses({ 201: envelope(agentSchema) }, [...AUTHED_ERRORS, 409, 413]) },
  }, async (request, reply) => {
    const agent = await agents.createAgent(forRequest(ctx, request), principalOf(request), request.body)
    return reply.code(201).send({ success: true, data: agent, message: 'Agent created.' })
  })

  app.get<{ Params: { id: string } }>('/v1/agents/:id', {
    schema: { tags, summary: 'Read an agent', params: idParams, response: responses({ 200: envelope(agentSchema) }, [...AUTHED_ERRORS, 404]) },
  }, async (request) => ({ success: true, data: await agents.getAgent(forRequest(ctx, request), principalOf(request), request.params.id) }))

  app.put<{ Params: { id: string }; Body: agents.AgentInput }>('/v1/agents/:id', {
    schema: {
      tags, summary: 'Update an agent (only the fields given; null clears)', params: idParams, body: updateBody,
      response: responses({ 200: envelope(agentSchema) }, [...AUTHED_ERRORS, 404, 409, 413]),
    },
  }, async (request) => ({
    success: true,
    data: await agents.updateAgent(forRequest(ctx, request), principalOf(request), request.params.id, request.body),
    message: 'Agent updated.',
  }))

  app.delete<{ Params: { id: string } }>('/v1/agents/:id', {
    schema: { tags, summary: 'Delete an agent', params: idParams, response: responses({ 204: { type: 'null' } }, [...AUTHED_ERRORS, 404]) },
  }, async (request, reply) => {
    await agents.deleteAgent(forRequest(ctx, request), principalOf(request), request.params.id)
    return reply.code(204).send()
  })

  for (const [action, status] of [['enable', 'enabled'], ['disable', 'disabled']] as [string, AgentStatus][]) {
    app.post<{ Params: { id: string } }>(`/v1/agents/:id/${action}`, {
      schema: {
        tags, summary: `${action === 'enable' ? 'Enable' : 'Disable'} an agent`, params: idParams,
        response: responses({ 200: envelope(agentSchema) }, [...AUTHED_ERRORS, 404]),
      },
    }, async (request) => ({
      success: true,
      data: await agents.setAgentStatus(forRequest(ctx, request), principalOf(request), request.params.id, status),
      message: `Agent ${status}.`,
    }))
  }

  app.get<{ Params: { id: string } }>('/v1/agents/:id/status', {
    config: { auth: 'public' },
    schema: {
      tags, summary: 'Public: whether an agent is enabled', params: idParams,
      response: responses({
        200: envelope({ type: 'object', required: ['id', 'did', 'status'], properties: { id: { type: 'string' }, did: { type: 'string' }, status: { type: 'string' } } }),
      }, [400, 404, 429, 500]),
    },
  }, async (request) => ({ success: true, data: await agents.publicAgentStatus(forRequest(ctx, request), request.params.id) }))
}
