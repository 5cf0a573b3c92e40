/**
 * The operator console's live reads (docs/console.md, "Live decisions" and "Keys and operations"): this
 * process's gateway decisions as a list, one by decision id and as a server-sent event stream, the
 * break-glass overrides it accepted, its status, and the authority's keys. Members see the events whose caller
 * held a badge issued for their organization (looked up here, not on the gateway's path); operators see all.
 */
import type { ServerResponse } from 'node:http'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { KeyRing } from '../../authority/key-ring.js'
import type { BundleCache } from '../../bundles/cache.js'
import { ServiceError } from '../../core/errors.js'
import { requireAdmin, type Principal } from '../../core/principal.js'
import { sseEvent } from '../../core/sse.js'
import type { Database } from '../../db/database.js'
import type { DecisionRecord, GatewayView } from '../../telemetry/decision-feed.js'
import type { Logger } from '../../telemetry/logger.js'
import { principalOf } from '../plugins/auth.js'
import { AUTHED_ERRORS, envelope, responses } from '../schemas.js'
import { BadgeOrgs } from '../services/badge-orgs.js'

export interface GatewayFeedDeps {
  readonly db: Database
  readonly gateway: GatewayView
  readonly keyRing: KeyRing
  readonly logger: Logger
  readonly streamsMax: number
  readonly streamsPerOrg: number
  readonly heartbeatMs: number
  /** The registry's current bundles, to say whether the gateway enforces the latest of its organization's. */
  readonly bundles: BundleCache
}

const nullable = (type: string): Record<string, unknown> => ({ type: [type, 'null'] })

const eventProperties = {
  seq: { type: 'integer', description: 'position in this process\'s feed; the stream\'s event id' },
  time: { type: 'string', format: 'date-time', description: 'when the gateway received the request' },
  request_id: { type: 'string' },
  txn_id: nullable('string'),
  org_id: { ...nullable('string'), description: 'the agent\'s organization; null when no agent of this registry holds the DID' },
  agent_did: nullable('string'),
  method: { type: 'string' },
  path: { type: 'string', description: 'the canonical path, never the query' },
  operation: { type: 'string', description: '`METHOD /path`, the MCP method (and tool) or the A2A operation' },
  decision: { type: ['string', 'null'], enum: ['ALLOW', 'DENY', 'ALLOW_OBSERVE', null] },
  reason: nullable('string'),
  decision_id: nullable('string'),
  mode: { type: 'string' },
  obligations: { type: 'array', items: { type: 'string' }, description: 'the types of the obligations the PDP attached' },
  obligations_not_met: { type: 'array', items: { type: 'string' } },
  breakglass: { type: ['object', 'null'], properties: { jti: { type: 'string' } } },
  status: { type: 'integer' },
  protocol: { type: 'string', enum: ['http', 'mcp', 'a2a'] },
  error_code: nullable('string'),
}
const eventSchema = { type: 'object', properties: eventProperties }
const eventWithRequest = {
  type: 'object',
  properties: {
    ...eventProperties,
    pdp_request: { type: ['object', 'null'], additionalProperties: true, description: 'what the PDP was asked; kept for DENY and ALLOW_OBSERVE' },
  },
}
const GATEWAY_FIELD = { type: 'boolean', description: 'false: no gateway runs in this process, so the feed stays empty' }

function listOf(item: Record<string, unknown>): Record<string, unknown> {
  return {
    type: 'object',
    required: ['success', 'data', 'gateway'],
    properties: { success: { type: 'boolean' }, data: { type: 'array', items: item }, gateway: GATEWAY_FIELD },
  }
}

const limitQuery = (max: number, fallback: number): Record<string, unknown> => ({
  type: 'object',
  additionalProperties: false,
  properties: { limit: { type: 'integer', minimum: 1, maximum: max, default: fallback } },
})

function operationOf(record: DecisionRecord): string {
  if (record.mcpMethod !== undefined) return record.tool === undefined ? record.mcpMethod : `${record.mcpMethod} ${record.tool}`
  return record.a2aOperation ?? `${record.operationMethod} ${record.path}`
}

/** The event of docs/console.md: fields the gateway set, never a token, header value or body. */
export function eventView(record: DecisionRecord, orgId: string | null): Record<string, unknown> {
  return {
    seq: record.seq,
    time: new Date(record.timeMs).toISOString(),
    request_id: record.requestIdPrefix + record.requestSeq,
    txn_id: record.txnId ?? null,
    org_id: orgId,
    agent_did: record.agentDid ?? null,
    method: record.method,
    path: record.path,
    operation: operationOf(record),
    decision: record.decision ?? null,
    reason: record.reason ?? null,
    decision_id: record.decisionId ?? null,
    mode: record.mode,
    obligations: record.obligations?.map((o) => o.type) ?? [],
    obligations_not_met: record.obligationsNotMet ?? [],
    breakglass: record.overrideJti === undefined ? null : { jti: record.overrideJti },
    status: record.status,
    protocol: record.protocol,
    error_code: record.errorCode ?? null,
  }
}

function jtisOf(records: readonly { readonly badgeJti: string | undefined }[]): string[] {
  const jtis: string[] = []
  for (const record of records) if (record.badgeJti !== undefined) jtis.push(record.badgeJti)
  return jtis
}

function visibleTo(principal: Principal, orgId: string | null): boolean {
  return principal.operator || (orgId !== null && orgId === principal.orgId)
}

/** Open streams per organization and in all, so that browsers left open cannot hold the process's sockets. */
class StreamSlots {
  #total = 0
  readonly #perOrg = new Map<string, number>()

  constructor(private readonly max: number, private readonly perOrg: number) {}

  acquire(orgId: string): void {
    if (this.#total >= this.max) throw new ServiceError('stream_limit_reached')
    const open = this.#perOrg.get(orgId) ?? 0
    if (open >= this.perOrg) throw new ServiceError('too_many_streams')
    this.#total++
    this.#perOrg.set(orgId, open + 1)
  }

  release(orgId: string): void {
    this.#total--
    const open = (this.#perOrg.get(orgId) ?? 1) - 1
    if (open <= 0) this.#perOrg.delete(orgId)
    else this.#perOrg.set(orgId, open)
  }
}

/** Events read per pull: a stream that fell behind catches up in bounded steps. */
const PULL = 256
const LAST_EVENT_ID = /^\d{1,15}$/

/**
 * One open stream. It pulls from the feed when woken and writes at most one pull before waiting for the
 * socket to drain, so a slow browser buffers one pull at most; what left the ring meanwhile is announced
 * with an `event: gap` naming the lost sequence numbers.
 */
class DecisionStream {
  #cursor: number
  #pumping = false
  #again = false
  #draining = false
  #closed = false
  readonly #unsubscribe: () => void
  readonly #heartbeat: NodeJS.Timeout

  constructor(
    private readonly res: ServerResponse,
    private readonly principal: Principal,
    private readonly gateway: GatewayView,
    private readonly orgs: BadgeOrgs,
    private readonly logger: Logger,
    cursor: number,
    heartbeatMs: number,
    private readonly onClose: (stream: DecisionStream) => void,
  ) {
    this.#cursor = cursor
    this.#unsubscribe = gateway.decisions.subscribe(() => this.#wake())
    // A comment line keeps proxies from closing an idle stream; skipped while the socket is full.
    this.#heartbeat = setInterval(() => {
      if (!this.#draining && !this.#closed) this.res.write(': heartbeat\n\n')
    }, heartbeatMs)
    this.#heartbeat.unref()
    res.on('close', () => this.close())
    this.#wake()
  }

  #wake(): void {
    if (this.#closed || this.#draining) return
    if (this.#pumping) {
      this.#again = true
      return
    }
    void this.#pump()
  }

  async #pump(): Promise<void> {
    this.#pumping = true
    try {
      do {
        this.#again = false
        const slice = this.gateway.decisions.after(this.#cursor, PULL)
        let chunk = ''
        if (slice.missed !== null) chunk += sseEvent({ event: 'gap', data: JSON.stringify(slice.missed) })
        if (slice.items.length > 0) {
          const orgs = await this.orgs.resolve(jtisOf(slice.items))
          if (this.#closed) return
          for (const record of slice.items) {
            const orgId = record.badgeJti === undefined ? null : (orgs.get(record.badgeJti) ?? null)
            if (!visibleTo(this.principal, orgId)) continue
            chunk += sseEvent({ event: 'decision', id: String(record.seq), data: JSON.stringify(eventView(record, orgId)) })
          }
          this.#cursor = (slice.items[slice.items.length - 1] as DecisionRecord).seq
          if (slice.items.length === PULL) this.#again = true
        } else if (slice.missed !== null) {
          this.#cursor = slice.missed.to
        }
        if (chunk !== '' && !this.res.write(chunk)) {
          this.#draining = true
          this.res.once('drain', () => {
            this.#draining = false
            this.#wake()
          })
          return
        }
      } while (this.#again && !this.#closed)
    } catch (error) {
      // The client reconnects with Last-Event-ID and loses nothing the buffer still holds.
      this.logger.warn({ err: error }, 'decision stream ended by an error')
      this.close()
    } finally {
      this.#pumping = false
    }
  }

  close(): void {
    if (this.#closed) return
    this.#closed = true
    this.#unsubscribe()
    clearInterval(this.#heartbeat)
    if (!this.res.writableEnded) this.res.end()
    this.onClose(this)
  }
}

export function gatewayFeedRoutes(app: FastifyInstance, deps: GatewayFeedDeps): void {
  const { gateway } = deps
  const orgs = new BadgeOrgs(deps.db)
  const slots = new StreamSlots(deps.streamsMax, deps.streamsPerOrg)
  const streams = new Set<DecisionStream>()
  const tags = ['console']
  const running = (): boolean => gateway.status() !== null

  // Open streams would keep server.close() waiting for ever: end them first (docs/console.md).
  app.addHook('preClose', async () => {
    for (const stream of [...streams]) stream.close()
  })

  app.get<{ Querystring: { limit: number } }>('/v1/gateway/decisions', {
    schema: {
      tags, summary: 'The latest gateway decisions of this process (newest last); members see their organization\'s',
      querystring: limitQuery(100_000, 100),
      response: responses({ 200: listOf(eventSchema) }, AUTHED_ERRORS),
    },
  }, async (request) => {
    const principal = principalOf(request)
    // Filtering happens after the read, so a member's page is taken from the whole buffer.
    const records = gateway.decisions.latest(gateway.decisions.capacity)
    const resolved = await orgs.resolve(jtisOf(records))
    const data: Record<string, unknown>[] = []
    for (let i = records.length - 1; i >= 0 && data.length < request.query.limit; i--) {
      const record = records[i] as DecisionRecord
      const orgId = record.badgeJti === undefined ? null : (resolved.get(record.badgeJti) ?? null)
      if (visibleTo(principal, orgId)) data.push(eventView(record, orgId))
    }
    return { success: true, data: data.reverse(), gateway: running() }
  })

  app.get('/v1/gateway/decisions/stream', {
    schema: {
      tags,
      summary: 'Server-sent events: `event: decision`, `id: <seq>`, the event as JSON; `Last-Event-ID` resumes from the buffer',
      headers: { type: 'object', properties: { 'last-event-id': { type: 'string', maxLength: 64 } } },
      response: responses({ 200: { type: 'string', description: 'text/event-stream' } }, [...AUTHED_ERRORS, 503]),
    },
  }, async (request, reply) => {
    // The auth hook has run (onRequest): nothing below is reached without a principal.
    const principal = principalOf(request)
    const cursor = startPosition(request, gateway)
    slots.acquire(principal.orgId)
    reply.hijack()
    const res = reply.raw
    // Hijacked: Fastify's onSend hooks (and any compression) never see this body; every write goes out as written.
    res.writeHead(200, {
      ...(reply.getHeaders() as Record<string, string>),
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-store',
      'x-accel-buffering': 'no',
      'x-content-type-options': 'nosniff',
      // The connection ends with the stream, so a server shutdown leaves no idle socket behind.
      connection: 'close',
    })
    res.write(running() ? ': decisions\n\n' : ': no gateway runs in this process\n\n')
    const stream = new DecisionStream(res, principal, gateway, orgs, deps.logger, cursor, deps.heartbeatMs, (closed) => {
      if (streams.delete(closed)) slots.release(principal.orgId)
    })
    streams.add(stream)
  })

  app.get<{ Params: { decisionId: string } }>('/v1/gateway/decisions/:decisionId', {
    schema: {
      tags, summary: 'One decision still in the buffer, with the PDP request of a denial',
      params: {
        type: 'object', required: ['decisionId'], additionalProperties: false,
        properties: { decisionId: { type: 'string', minLength: 1, maxLength: 200 } },
      },
      response: responses({
        200: envelope(eventWithRequest),
      }, [...AUTHED_ERRORS, 404]),
    },
  }, async (request) => {
    const principal = principalOf(request)
    const record = gateway.decisions.findByDecisionId(request.params.decisionId)
    if (record === undefined) throw new ServiceError('decision_not_found')
    const orgId = record.badgeJti === undefined ? null : ((await orgs.resolve([record.badgeJti])).get(record.badgeJti) ?? null)
    // Another organization's decision answers as one that is not there.
    if (!visibleTo(principal, orgId)) throw new ServiceError('decision_not_found')
    return { success: true, data: { ...eventView(record, orgId), pdp_request: withoutQuery(record.pdpRequest) } }
  })

  app.get<{ Querystring: { limit: number } }>('/v1/breakglass/uses', {
    schema: {
      tags, summary: 'Admin: the break-glass overrides this process\'s gateway accepted (newest last)',
      querystring: limitQuery(100, 100),
      response: responses({
        200: listOf({
          type: 'object',
          properties: {
            time: { type: 'string', format: 'date-time' }, jti: { type: 'string' }, operator: { type: 'string' }, reason: { type: 'string' },
            agent_did: nullable('string'), org_id: nullable('string'), method: { type: 'string' }, path: { type: 'string' },
          },
        }),
      }, AUTHED_ERRORS),
    },
  }, async (request) => {
    const principal = principalOf(request)
    requireAdmin(principal)
    const records = gateway.overrides.latest(request.query.limit)
    const resolved = await orgs.resolve(jtisOf(records))
    const data = records.flatMap((record) => {
      const orgId = record.badgeJti === undefined ? null : (resolved.get(record.badgeJti) ?? null)
      if (!visibleTo(principal, orgId)) return []
      return [{
        time: new Date(record.timeMs).toISOString(), jti: record.jti, operator: record.operator, reason: record.reason,
        agent_did: record.agentDid ?? null, org_id: orgId, method: record.method, path: record.path,
      }]
    })
    return { success: true, data, gateway: running() }
  })

  app.get('/v1/gateway/status', {
    schema: {
      tags, summary: 'This process\'s gateway: bundle revision and age, staleness, default mode, PDP kind',
      response: responses({
        200: envelope({
          type: 'object',
          properties: {
            gateway: GATEWAY_FIELD,
            ready: { type: 'boolean', description: 'the gateway has its first snapshot' },
            bundle_revision: nullable('string'),
            bundle_age_seconds: nullable('integer'),
            stale: { type: 'boolean' },
            mode: nullable('string'),
            pdp: { ...nullable('string'), description: '`embedded`, `http`, `opa` or `none` (badge-only)' },
            workspace: { ...nullable('string'), description: 'the organization whose bundle the gateway enforces, when it is the caller\'s (or the caller is an operator)' },
            registry_revision: { ...nullable('string'), description: 'that organization\'s current bundle revision in the registry' },
            in_sync: { ...nullable('boolean'), description: 'the gateway enforces the registry\'s current revision' },
          },
        }),
      }, AUTHED_ERRORS),
    },
  }, async (request) => {
    const principal = principalOf(request)
    const status = gateway.status()
    if (status === null) {
      return {
        success: true,
        data: { gateway: false, ready: false, bundle_revision: null, bundle_age_seconds: null, stale: false, mode: null, pdp: null, workspace: null, registry_revision: null, in_sync: null },
      }
    }
    // Which organization the gateway enforces, and whether it has that organization's latest policies, is
    // told to that organization (and operators): the console shows it beside the policies it displays.
    const workspace = status.workspace?.toLowerCase() ?? null
    const own = workspace !== null && (principal.operator || principal.orgId.toLowerCase() === workspace)
    const registryRevision = own ? (await deps.bundles.get(workspace)).revision : null
    return {
      success: true,
      data: {
        gateway: true, ready: status.ready, bundle_revision: status.bundleRevision, bundle_age_seconds: status.bundleAgeSeconds,
        stale: status.stale, mode: status.mode, pdp: status.pdp,
        workspace: own ? workspace : null, registry_revision: registryRevision, in_sync: own ? status.bundleRevision === registryRevision : null,
      },
    }
  })

  app.get('/v1/authority/keys', {
    schema: {
      tags, summary: 'The authority\'s signing keys and their states, never key material',
      response: responses({
        200: envelope({
          type: 'array',
          items: {
            type: 'object',
            properties: {
              kid: { type: 'string' },
              state: { type: 'string', enum: ['active', 'published'] },
              createdAt: { type: 'string', format: 'date-time' },
              activatedAt: { type: 'string', format: 'date-time' },
              retiresAt: { type: 'null', description: 'always null: retirement is an operator\'s command, not a schedule' },
            },
          },
        }),
      }, AUTHED_ERRORS),
    },
  }, async (request) => {
    principalOf(request)
    const ring = deps.keyRing.current
    // Every key became the signer when it was made (`keys rotate`), so it was activated when created; a retired
    // key is removed from the file, so the ring never holds one (docs/console.md, "Keys and operations").
    const data = [...ring.keys.values()]
      .sort((a, b) => b.createdAt - a.createdAt || (a.kid < b.kid ? 1 : -1))
      .map((key) => {
        const created = new Date(key.createdAt * 1000).toISOString()
        return { kid: key.kid, state: key.kid === ring.signing.kid ? 'active' : 'published', createdAt: created, activatedAt: created, retiresAt: null }
      })
    return { success: true, data }
  })
}

/**
 * The PDP request as shown: a query in `resource.identifier` (the request target) is replaced by `?…`, since
 * queries carry credentials often enough (the event's `path` never has one either).
 */
function withoutQuery(request: object | null): object | null {
  const resource = (request as { resource?: { identifier?: unknown } } | null)?.resource
  const identifier = resource?.identifier
  if (typeof identifier !== 'string' || identifier.startsWith('/') === false || !identifier.includes('?')) return request
  return { ...request, resource: { ...resource, identifier: `${identifier.slice(0, identifier.indexOf('?'))}?…` } }
}

/** Where a stream starts: after `Last-Event-ID` when given (a resume), else at the newest event. */
function startPosition(request: FastifyRequest, gateway: GatewayView): number {
  const header = request.headers['last-event-id']
  if (header === undefined) return gateway.decisions.lastSeq
  const value = typeof header === 'string' ? header.trim() : ''
  if (!LAST_EVENT_ID.test(value)) throw new ServiceError('invalid_last_event_id')
  return Number(value)
}
