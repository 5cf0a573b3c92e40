import type { FastifyInstance } from 'fastify'
import type { Database } from '../../db/database.js'
import { principalOf } from '../plugins/auth.js'
import { AUTHED_ERRORS, envelope, idParams, listEnvelope, pageQuery, responses } from '../schemas.js'
import * as credentials from '../services/credentials.js'
import { requireOperator } from '../../core/principal.js'

const keyViewProperties = {
  id: { type: 'string', format: 'uuid' },
  name: { type: 'string' },
  role: { type: 'string', enum: ['admin', 'member'] },
  operator: { type: 'boolean' },
  prefix: { type: 'string', description: 'first characters of the secret, to tell keys apart' },
  createdAt: { type: 'string', format: 'date-time' },
  createdByUserId: { type: ['string', 'null'], description: 'the user the key acts for; it works only while this user is a member' },
  createdByType: { type: 'string', enum: ['user', 'key', 'operator', 'bootstrap', 'legacy'] },
  createdByKeyId: { type: ['string', 'null'], description: 'the API key that created this one, when one did' },
  revokedAt: { type: ['string', 'null'], format: 'date-time' },
  revokeReason: { type: ['string', 'null'], enum: ['creator_unknown', 'creator_deleted', 'membership_removed', 'organization_unlinked', null] },
}
const keyView = { type: 'object', required: ['id', 'name', 'role', 'createdAt'], properties: keyViewProperties }
const createdKey = {
  type: 'object',
  required: ['id', 'name', 'key', 'role', 'createdAt'],
  properties: { ...keyViewProperties, key: { type: 'string', description: 'the secret; shown only in this response' } },
}
const SHOWN_ONCE = 'Store this key now: it is shown only once.'

export function keyRoutes(app: FastifyInstance, db: Database, authenticator: credentials.ApiKeyAuthenticator): void {
  const tags = ['api-keys']

  app.get<{ Querystring: { limit: number; cursor?: string } }>('/v1/keys', {
    schema: { tags, summary: 'List the organization\'s API keys (never the secrets)', querystring: pageQuery, response: responses({ 200: listEnvelope(keyView) }, AUTHED_ERRORS) },
  }, async (request) => {
    const page = await credentials.listApiKeys(db, principalOf(request), request.query.limit, request.query.cursor)
    return { success: true, data: page.items, nextCursor: page.nextCursor }
  })

  app.post<{ Body: { name: string; role?: 'admin' | 'member' } }>('/v1/keys', {
    schema: {
      tags, summary: 'Create an API key; the secret is in this response only',
      body: {
        type: 'object', required: ['name'], additionalProperties: false,
        properties: { name: { type: 'string', minLength: 1, maxLength: 200 }, role: { type: 'string', enum: ['admin', 'member'] } },
      },
      response: responses({ 201: envelope(createdKey) }, [...AUTHED_ERRORS, 413]),
    },
  }, async (request, reply) => {
    const key = await credentials.createApiKey(request.db, principalOf(request), request.body)
    return reply.code(201).send({ success: true, data: key, message: SHOWN_ONCE })
  })

  app.delete<{ Params: { id: string } }>('/v1/keys/:id', {
    schema: { tags, summary: 'Delete an API key', params: idParams, response: responses({ 204: { type: 'null' } }, [...AUTHED_ERRORS, 404]) },
  }, async (request, reply) => {
    await credentials.deleteApiKey(request.db, authenticator, principalOf(request), request.params.id)
    return reply.code(204).send()
  })

  app.post<{ Body: { name: string } }>('/v1/orgs', {
    schema: {
      tags: ['organizations'], summary: 'Operator: create an organization and its first admin API key',
      body: { type: 'object', required: ['name'], additionalProperties: false, properties: { name: { type: 'string', minLength: 1, maxLength: 200 } } },
      response: responses({
        201: envelope({
          type: 'object', required: ['org', 'apiKey'],
          properties: {
            org: { type: 'object', required: ['id', 'name', 'createdAt'], properties: { id: { type: 'string' }, name: { type: 'string' }, createdAt: { type: 'string' } } },
            apiKey: createdKey,
          },
        }),
      }, [...AUTHED_ERRORS, 413]),
    },
  }, async (request, reply) => {
    const principal = principalOf(request)
    requireOperator(principal)
    const created = await credentials.createOrganization(request.db, request.body, principal.keyId)
    return reply.code(201).send({ success: true, data: created, message: SHOWN_ONCE })
  })
}
