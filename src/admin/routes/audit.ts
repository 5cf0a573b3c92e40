/**
 * The audit trail's reads (docs/audit.md, docs/api.md "Audit trail"): `GET /v1/audit` lists records newest
 * first (members: their organization's; operators: every record), `GET /v1/audit/export` streams the whole
 * chain with its signed checkpoints as JSON Lines, for operators only: a filtered view is no contiguous
 * chain and could not be verified.
 */
import type { FastifyInstance } from 'fastify'
import { Readable } from 'node:stream'
import type { AuditRecord } from '../../core/audit.js'
import { ServiceError } from '../../core/errors.js'
import { decodeCursor, encodeCursor, MAX_CURSOR_LENGTH, MAX_PAGE_SIZE, DEFAULT_PAGE_SIZE, parseTimestamp } from '../../core/pagination.js'
import { requireOperator } from '../../core/principal.js'
import type { Database } from '../../db/database.js'
import { listAuditRecords, readAuditCheckpoints, readAuditRange, readChainHead } from '../../db/repositories/audit.js'
import { principalOf } from '../plugins/auth.js'
import { AUTHED_ERRORS, cursorQuery, listEnvelope, responses } from '../schemas.js'

const recordSchema = {
  type: 'object',
  required: ['chain', 'seq', 'time', 'actorType', 'action', 'outcome', 'prevHash', 'hash'],
  properties: {
    chain: { type: 'string', format: 'uuid' },
    seq: { type: 'integer', description: 'position in the chain, from 1, without gaps' },
    time: { type: 'string', format: 'date-time' },
    actorType: { type: 'string', enum: ['key', 'user', 'operator', 'gateway', 'idp', 'cli'] },
    actorId: { type: ['string', 'null'], description: 'API key id, user id, gateway id' },
    orgId: { type: ['string', 'null'] },
    action: { type: 'string', description: 'for example `agent.create`, `badge.revoke`, `gateway.refusal` (docs/audit.md)' },
    target: { type: ['string', 'null'], description: 'what was acted on: an id, jti or DID' },
    outcome: { type: 'string', description: '`success`, `refused:<status>`, or a gateway decision `DENY:403`' },
    requestId: { type: ['string', 'null'] },
    digest: { type: ['string', 'null'], description: 'hex SHA-256 of the canonical JSON of the change, secrets redacted' },
    prevHash: { type: 'string' },
    hash: { type: 'string' },
  },
} as const

interface ListQuery { limit: number; cursor?: string; action?: string; actor?: string; target?: string; since?: string; until?: string; orgId?: string }

const SEQ_ID = /^[1-9][0-9]{0,15}$/
const EXPORT_PAGE = 1000

function timeOf(text: string | undefined, name: string): Date | undefined {
  if (text === undefined) return undefined
  const date = parseTimestamp(text)
  if (date === null) throw new ServiceError('invalid_request', `querystring/${name} must be an RFC 3339 date-time or a date`)
  return date
}

export function auditRoutes(app: FastifyInstance, deps: { db: Database }): void {
  const tags = ['audit']

  app.get<{ Querystring: ListQuery }>('/v1/audit', {
    schema: {
      tags,
      summary: 'The audit trail, newest first: members see their organization\'s records, operators every record',
      querystring: {
        type: 'object', additionalProperties: false,
        properties: {
          limit: { type: 'integer', minimum: 1, maximum: MAX_PAGE_SIZE, default: DEFAULT_PAGE_SIZE },
          cursor: cursorQuery(MAX_CURSOR_LENGTH),
          action: { type: 'string', pattern: '^[a-z_]+(\\.[a-z_]+)*(\\.\\*)?$', maxLength: 100, description: 'an action, or a family (`agent.*`)' },
          actor: { type: 'string', minLength: 1, maxLength: 200, description: 'actor id (API key id, user id, gateway id)' },
          target: { type: 'string', minLength: 1, maxLength: 2048 },
          since: { type: 'string', maxLength: 64, description: 'records at or after this time' },
          until: { type: 'string', maxLength: 64, description: 'records before this time' },
          orgId: { type: 'string', format: 'uuid', description: 'operators: one organization\'s records' },
        },
      },
      response: responses({ 200: listEnvelope(recordSchema) }, AUTHED_ERRORS),
    },
  }, async (request) => {
    const principal = principalOf(request)
    const q = request.query
    if (q.orgId !== undefined && !principal.operator && q.orgId.toLowerCase() !== principal.orgId) throw new ServiceError('operator_required')
    const position = decodeCursor(q.cursor, 'audit', (id) => SEQ_ID.test(id))
    const orgId = principal.operator ? (q.orgId?.toLowerCase() ?? null) : principal.orgId
    const rows = await listAuditRecords(deps.db, {
      orgId,
      ...(q.action === undefined ? {} : { action: q.action }),
      ...(q.actor === undefined ? {} : { actor: q.actor }),
      ...(q.target === undefined ? {} : { target: q.target }),
      ...(q.since === undefined ? {} : { since: timeOf(q.since, 'since') as Date }),
      ...(q.until === undefined ? {} : { until: timeOf(q.until, 'until') as Date }),
      ...(position === null ? {} : { beforeSeq: Number(position.id) }),
    }, q.limit)
    const items = rows.slice(0, q.limit)
    const last = items[items.length - 1]
    const nextCursor = rows.length > q.limit && last !== undefined ? encodeCursor('audit', { createdAt: last.time, id: String(last.seq) }) : null
    return { success: true, data: items, nextCursor }
  })

  app.get<{ Querystring: { after?: number } }>('/v1/audit/export', {
    schema: {
      tags,
      summary: 'Operator: the chain and its signed checkpoints as JSON Lines (verify with `agent-trust audit verify --file`)',
      description: 'One JSON object per line: `{"type":"record",...}` in seq order, then `{"type":"checkpoint",chain,seq,head,jws}`, then `{"type":"head",chain,from,seq,hash}`. `after` starts after that seq (an export continuing an earlier one).',
      produces: ['application/x-ndjson'],
      querystring: { type: 'object', additionalProperties: false, properties: { after: { type: 'integer', minimum: 0, maximum: Number.MAX_SAFE_INTEGER } } },
      response: responses({ 200: { type: 'string', description: 'JSON Lines: records, checkpoints, then the head line' } }, AUTHED_ERRORS),
    },
  }, async (request, reply) => {
    requireOperator(principalOf(request))
    const db = deps.db
    const head = await readChainHead(db)
    const after = request.query.after ?? 0
    async function* lines(): AsyncGenerator<string> {
      let from = after
      for (;;) {
        // Up to the head read above: records chained during the export belong to the next one.
        const page: AuditRecord[] = (await readAuditRange(db, from, EXPORT_PAGE)).filter((r) => r.seq <= head.seq)
        for (const record of page) yield `${JSON.stringify({ type: 'record', ...record })}\n`
        if (page.length < EXPORT_PAGE) break
        from = page[page.length - 1]!.seq
      }
      for (const checkpoint of await readAuditCheckpoints(db)) {
        if (checkpoint.seq > after && checkpoint.seq <= head.seq) yield `${JSON.stringify({ type: 'checkpoint', ...checkpoint })}\n`
      }
      yield `${JSON.stringify({ type: 'head', chain: head.chain, from: after + 1, seq: head.seq, hash: head.hash })}\n`
    }
    void reply.header('cache-control', 'no-store')
    void reply.header('content-disposition', `attachment; filename="audit-${head.chain}-${after + 1}-${head.seq}.jsonl"`)
    return reply.type('application/x-ndjson; charset=utf-8').send(Readable.from(lines()))
  })
}
