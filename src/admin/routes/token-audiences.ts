import type { FastifyInstance } from 'fastify'
import type { Database } from '../../db/database.js'
import { principalOf } from '../plugins/auth.js'
import { AUTHED_ERRORS, envelope, responses } from '../schemas.js'
import { getTokenAudiences, MAX_TOKEN_AUDIENCE_LENGTH, MAX_TOKEN_AUDIENCES, replaceTokenAudiences } from '../services/token-audiences.js'

const audiencesView = envelope({
  type: 'object',
  required: ['audiences'],
  properties: { audiences: { type: 'array', items: { type: 'string' } } },
})

/** The allow-list of token audiences of the caller's organization (docs/api.md §4.10). */
export function tokenAudienceRoutes(app: FastifyInstance, db: Database): void {
  const tags = ['oauth']

  app.get('/v1/token-audiences', {
    schema: {
      tags,
      summary: 'The audiences (resources and audience scopes) tokens of the organization\'s agents may name',
      response: responses({ 200: audiencesView }, AUTHED_ERRORS),
    },
  }, async (request) => ({ success: true, data: await getTokenAudiences(db, principalOf(request)) }))

  app.put<{ Body: { audiences: string[] } }>('/v1/token-audiences', {
    schema: {
      tags,
      summary: 'Replace the token-audience allow-list (admin); exact strings, empty closes the token endpoint to audiences',
      body: {
        type: 'object',
        required: ['audiences'],
        additionalProperties: false,
        properties: {
          audiences: {
            type: 'array',
            maxItems: MAX_TOKEN_AUDIENCES,
            items: { type: 'string', minLength: 1, maxLength: MAX_TOKEN_AUDIENCE_LENGTH },
          },
        },
      },
      response: responses({ 200: audiencesView }, [...AUTHED_ERRORS, 413]),
    },
  }, async (request) => ({ success: true, data: await replaceTokenAudiences(request.db, principalOf(request), request.body.audiences) }))
}
