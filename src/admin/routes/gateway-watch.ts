/**
 * `GET /v1/gateway/watch` (docs/api.md, "Gateway watch stream"): the push stream of gateway-only processes,
 * served by any admin instance from the change notices it hears (services/gateway-watch.ts). It takes the
 * registry key like the bundle and report calls, and like reports it is a gateway's routine call, outside
 * the per-key rate limit: a fleet shares one key and reconnects together after an outage.
 */
import type { FastifyInstance } from 'fastify'
import { principalOf } from '../plugins/auth.js'
import { ROUTINE_POLL } from '../plugins/request-log.js'
import { AUTHED_ERRORS, responses, uuidParam } from '../schemas.js'
import type { GatewayWatchHub } from '../services/gateway-watch.js'
import { requireOrgMember } from '../services/policies.js'
import { registryKeyOnly } from './bundles.js'

export function gatewayWatchRoutes(app: FastifyInstance, hub: GatewayWatchHub): void {
  // Open streams would keep server.close() waiting for ever: end them first.
  app.addHook('preClose', async () => hub.endStreams())

  app.get<{ Querystring: { workspace?: string } }>('/v1/gateway/watch', {
    config: { rateLimit: false, ...ROUTINE_POLL },
    onRequest: registryKeyOnly,
    schema: {
      tags: ['bundles'],
      summary: 'Server-sent events for gateway-only processes: `ready`, then `policy`, `revoked`, `keys` and `resync` as the registry hears of changes (X-Service-Registry-Key only)',
      querystring: {
        type: 'object',
        additionalProperties: false,
        properties: { workspace: { ...uuidParam, description: 'the gateway\'s SERVICE_WORKSPACE: its organization\'s policy changes are announced' } },
      },
      response: responses({ 200: { type: 'string', description: 'text/event-stream' } }, [...AUTHED_ERRORS, 404, 503]),
    },
  }, async (request, reply) => {
    const principal = principalOf(request)
    const workspace = request.query.workspace === undefined ? null : requireOrgMember(principal, request.query.workspace)
    // Refusals (limit, no LISTEN) throw before the head is written, so they answer the documented error.
    hub.open(reply.raw, { workspace, keyId: principal.keyId })
    reply.hijack()
  })
}
