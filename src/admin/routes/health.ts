import type { FastifyInstance } from 'fastify'
import type { Registry } from 'prom-client'
import { readinessBody, type ReadinessReport } from '../../http/readiness.js'
import { ROUTINE_POLL } from '../plugins/request-log.js'

export type { ReadinessReport }

const NOTE_MAP = {
  type: 'object',
  additionalProperties: {
    type: 'object',
    properties: { code: { type: 'string' }, message: { type: 'string' } },
    required: ['code', 'message'],
  },
}
const READINESS_BODY = {
  type: 'object',
  properties: {
    status: { type: 'string' },
    checks: { type: 'object', additionalProperties: { type: 'boolean' } },
    reasons: NOTE_MAP,
    degraded: NOTE_MAP,
    // Only with SERVICE_GATEWAY_WORKERS above 1 (docs/operations.md, "Gateway workers").
    workers: {
      type: 'object',
      properties: {
        total: { type: 'integer' },
        ready: { type: 'integer' },
        list: {
          type: 'array',
          items: { type: 'object', properties: { worker: { type: 'integer' }, pid: { type: ['integer', 'null'] }, ready: { type: 'boolean' } } },
        },
      },
    },
  },
}

/** docs/wire-contract.md §1: /healthz while the process lives; /readyz only when every dependency is ready. */
export function healthRoutes(app: FastifyInstance, deps: { readiness: () => Promise<ReadinessReport>; registry: Registry }): void {
  // Probes and scrapers call these on a timer.
  const open = { auth: 'public' as const, rateLimit: false as const, ...ROUTINE_POLL }
  app.get('/healthz', {
    config: open,
    schema: {
      tags: ['health'],
      summary: 'Liveness',
      response: { 200: { type: 'object', properties: { status: { type: 'string' } } } },
    },
  }, async () => ({ status: 'ok' }))

  app.get('/readyz', {
    config: open,
    schema: {
      tags: ['health'],
      summary: 'Readiness: database, authority key and (with the embedded PDP) a first bundle',
      response: {
        200: { $id: 'readiness', ...READINESS_BODY },
        503: READINESS_BODY,
      },
    },
  }, async (_request, reply) => {
    const report = await deps.readiness()
    return reply.code(report.ready ? 200 : 503).send(readinessBody(report))
  })

  app.get('/metrics', {
    config: open,
    schema: { tags: ['health'], summary: 'Prometheus metrics', produces: ['text/plain'] },
  }, async (_request, reply) => {
    const body = await deps.registry.metrics()
    return reply.type(deps.registry.contentType).send(body)
  })
}
