/**
 * The operator console's live reads (docs/console.md, "Live decisions", "Gateways" and "Keys and
 * operations"): the decisions every gateway reported, as a list, one by decision id and as a server-sent
 * event stream, read from the decision store that every admin instance shares; the gateways' reports
 * themselves (`POST /v1/gateway/reports`) and their heartbeats (`GET /v1/gateways`); the break-glass
 * overrides this process's gateway accepted, its status, and the authority's keys. Members see the events
 * attributed to their organization when they were recorded (gateway-reports.ts); operators see all.
 */
import type { ServerResponse } from 'node:http'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import type { KeyRing } from '../../authority/key-ring.js'
import type { BundleCache } from '../../bundles/cache.js'
import { ServiceError } from '../../core/errors.js'
import { requireAdmin, type Principal } from '../../core/principal.js'
import { sseEvent } from '../../core/sse.js'
import type { Database } from '../../db/database.js'
import type { GatewayView } from '../../telemetry/decision-feed.js'
import type { GatewayReport } from '../../telemetry/decision-shipper.js'
import type { Logger } from '../../telemetry/logger.js'
import { principalOf } from '../plugins/auth.js'
import { AUTHED_ERRORS, envelope, responses } from '../schemas.js'
import { ROUTINE_POLL } from '../plugins/request-log.js'
import { BadgeOrgs } from '../services/badge-orgs.js'
import type { DecisionLogExporter } from '../services/decision-log-export.js'
import type { DecisionStore, GatewayHeartbeat, StoredEvent } from '../services/decision-store.js'
import { GATEWAY_REPORT_SCHEMA, ingestReport, REPORT_BODY_LIMIT_BYTES, type ReportAudit } from '../services/gateway-reports.js'

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
  /** Where reported events and heartbeats are kept: this process, or Redis shared by every instance. */
  readonly store: DecisionStore
  /** The decision-log export of what is stored (SERVICE_DECISION_LOG_URL), if configured. */
  readonly exporter?: DecisionLogExporter | null
  /** Where the reports' refusals are recorded in the audit trail; null: auditing is off. */
  readonly audit?: ReportAudit | null
  /** Ships what this process's own gateway recorded so far, so a read here sees this process's latest decisions. */
  readonly drainLocal?: () => Promise<void>
  /** The staleness threshold of bundles, to judge a reported snapshot age (SERVICE_BUNDLE_STALENESS_THRESHOLD). */
  readonly bundleStalenessMs: number
  /** The gateway id of this process's own gateway, when one runs here. */
  readonly localGatewayId?: string
}

const nullable = (type: string): Record<string, unknown> => ({ type: [type, 'null'] })

const eventProperties = {
  seq: { type: 'integer', description: 'position in the decision store, the same on every admin instance; the stream\'s event id' },
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
  proxy: { type: 'string', enum: ['envoy-grpc', 'envoy-http', 'nginx', 'traefik'], description: 'only for a check a proxy asked (docs/ext-authz.md): that proxy' },
  error_code: nullable('string'),
  gateway_id: { type: 'string', description: 'the gateway that decided (SERVICE_PEP_ID, or the id it generated and logged at start)' },
}
const eventSchema = { type: 'object', properties: eventProperties }
const eventWithRequest = {
  type: 'object',
  properties: {
    ...eventProperties,
    pdp_request: { type: ['object', 'null'], additionalProperties: true, description: 'what the PDP was asked; kept for DENY and ALLOW_OBSERVE' },
  },
}
const GATEWAY_FIELD = { type: 'boolean', description: 'false: no gateway runs in this process and none reports, so the feed stays empty' }

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

/** The event of docs/console.md: fields the gateway set, never a token, header value or body. */
export function eventView(entry: StoredEvent): Record<string, unknown> {
  return { seq: entry.seq, ...entry.event }
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
/** A number this stream sent; `<n>-0` too, the Redis stream entry id of the same event. */
const LAST_EVENT_ID = /^(\d{1,15})(?:-0)?$/

/**
 * One open stream. It pulls from the store when woken and writes at most one pull before waiting for the
 * socket to drain, so a slow browser buffers one pull at most; what left the store meanwhile is announced
 * with an `event: gap` naming the lost sequence numbers, and a gap a gateway reported (events it lost
 * before sending them) with an `event: gap` naming the gateway.
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
    private readonly store: DecisionStore,
    private readonly logger: Logger,
    cursor: number,
    heartbeatMs: number,
    private readonly onClose: (stream: DecisionStream) => void,
  ) {
    this.#cursor = cursor
    this.#unsubscribe = store.subscribe(() => this.#wake())
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
        const slice = await this.store.after(this.#cursor, PULL)
        if (this.#closed) return
        let chunk = ''
        if (slice.missed !== null) chunk += sseEvent({ event: 'gap', data: JSON.stringify(slice.missed) })
        for (const entry of slice.items) {
          if (!visibleTo(this.principal, entry.orgId)) continue
          chunk += entry.kind === 'gap'
            ? sseEvent({ event: 'gap', id: String(entry.seq), data: JSON.stringify(entry.event) })
            : sseEvent({ event: 'decision', id: String(entry.seq), data: JSON.stringify(eventView(entry)) })
        }
        if (slice.items.length > 0) {
          this.#cursor = (slice.items[slice.items.length - 1] as StoredEvent).seq
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
  const { gateway, store } = deps
  const orgs = new BadgeOrgs(deps.db)
  const slots = new StreamSlots(deps.streamsMax, deps.streamsPerOrg)
  const streams = new Set<DecisionStream>()
  const tags = ['console']
  const drain = async (): Promise<void> => {
    // This process's own decisions are in the store before it is read here; a failure is the shipper's to count.
    await deps.drainLocal?.().catch(() => {})
  }
  /** Whether a gateway runs here or one the caller may see reports (without waiting on a store that is away). */
  const running = async (principal: Principal): Promise<boolean> => {
    if (gateway.status() !== null) return true
    const reported = await store.heartbeats().catch(() => [])
    const now = Date.now()
    return reported.some((heartbeat) => gatewayVisible(principal, heartbeat) && !isStale(heartbeat, now))
  }

  // Open streams would keep server.close() waiting for ever: end them first (docs/console.md).
  app.addHook('preClose', async () => {
    for (const stream of [...streams]) stream.close()
  })

  app.post<{ Body: GatewayReport }>('/v1/gateway/reports', {
    bodyLimit: REPORT_BODY_LIMIT_BYTES,
    // Every gateway of a fleet may share one registry key and reports up to four times a second: the
    // per-key limit would throttle the fleet's record, not a caller. A successful report logs at debug.
    config: { rateLimit: false, ...ROUTINE_POLL },
    schema: {
      tags,
      summary: 'A gateway\'s decision events and heartbeat, sent with its registry key (SERVICE_REGISTRY_KEY)',
      body: GATEWAY_REPORT_SCHEMA,
      response: responses({
        202: {
          type: 'object', required: ['accepted', 'stored'],
          properties: { accepted: { type: 'integer', description: 'events in the report' }, stored: { type: 'integer', description: 'events stored: those of a retried report already stored are skipped' } },
        },
      }, [...AUTHED_ERRORS, 413, 503]),
    },
  }, async (request, reply) => {
    const principal = principalOf(request)
    // A gateway holds an API key; a console session (even one an API key signed in) is a person.
    if (principal.kind !== 'api_key' || request.consoleSession !== null) throw new ServiceError('session_not_allowed')
    const result = await ingestReport({ store, orgs, exporter: deps.exporter ?? null, audit: deps.audit ?? null }, request.body, { orgId: principal.orgId, operator: principal.operator, keyId: principal.keyId }, Date.now())
    return reply.code(202).send(result)
  })

  app.get('/v1/gateways', {
    schema: {
      tags,
      summary: 'Every gateway that reported: its routes, PDP, bundle and last heartbeat; members see those deciding for their organization',
      response: responses({ 200: envelope({ type: 'array', items: GATEWAY_SCHEMA }) }, [...AUTHED_ERRORS, 503]),
    },
  }, async (request) => {
    const principal = principalOf(request)
    await drain()
    const now = Date.now()
    const visible = (await store.heartbeats()).filter((heartbeat) => gatewayVisible(principal, heartbeat))
    visible.sort((a, b) => (a.gatewayId < b.gatewayId ? -1 : a.gatewayId > b.gatewayId ? 1 : 0))
    const data = await Promise.all(visible.map((heartbeat) => gatewayView(heartbeat, now, deps.bundles)))
    return { success: true, data }
  })

  app.get<{ Querystring: { limit: number } }>('/v1/gateway/decisions', {
    schema: {
      tags, summary: 'The latest gateway decisions (newest last), the same on every admin instance; members see their organization\'s',
      querystring: limitQuery(100_000, 100),
      response: responses({ 200: listOf(eventSchema) }, [...AUTHED_ERRORS, 503]),
    },
  }, async (request) => {
    const principal = principalOf(request)
    await drain()
    // Filtering happens while reading, so a member's page is taken from the whole store.
    const entries = await store.latest(request.query.limit, (orgId) => visibleTo(principal, orgId))
    return { success: true, data: entries.map(eventView), gateway: await running(principal) }
  })

  app.get('/v1/gateway/decisions/stream', {
    schema: {
      tags,
      summary: 'Server-sent events: `event: decision`, `id: <seq>`, the event as JSON; `Last-Event-ID` resumes from the store, on any admin instance',
      headers: { type: 'object', properties: { 'last-event-id': { type: 'string', maxLength: 64 } } },
      response: responses({ 200: { type: 'string', description: 'text/event-stream' } }, [...AUTHED_ERRORS, 503]),
    },
  }, async (request, reply) => {
    // The auth hook has run (onRequest): nothing below is reached without a principal.
    const principal = principalOf(request)
    const cursor = await startPosition(request, store)
    const announce = (await running(principal)) ? ': decisions\n\n' : ': no gateway runs in this process and none reports\n\n'
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
    res.write(announce)
    const stream = new DecisionStream(res, principal, store, deps.logger, cursor, deps.heartbeatMs, (closed) => {
      if (streams.delete(closed)) slots.release(principal.orgId)
    })
    streams.add(stream)
  })

  app.get<{ Params: { decisionId: string } }>('/v1/gateway/decisions/:decisionId', {
    schema: {
      tags, summary: 'One decision still in the store, with the PDP request of a denial',
      params: {
        type: 'object', required: ['decisionId'], additionalProperties: false,
        properties: { decisionId: { type: 'string', minLength: 1, maxLength: 200 } },
      },
      response: responses({
        200: envelope(eventWithRequest),
      }, [...AUTHED_ERRORS, 404, 503]),
    },
  }, async (request) => {
    const principal = principalOf(request)
    await drain()
    const entry = await store.findByDecisionId(request.params.decisionId)
    // Another organization's decision answers as one that is not there.
    if (entry === undefined || !visibleTo(principal, entry.orgId)) throw new ServiceError('decision_not_found')
    return { success: true, data: { ...eventView(entry), pdp_request: withoutQuery(entry.pdpRequest) } }
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
    return { success: true, data, gateway: gateway.status() !== null }
  })

  app.get('/v1/gateway/status', {
    schema: {
      tags, summary: 'The gateway\'s state: this process\'s gateway, else the latest report of one the caller may see, else `no gateway reports`',
      response: responses({
        200: envelope({
          type: 'object',
          properties: {
            gateway: { type: 'boolean', description: 'a gateway runs in this process' },
            source: { type: 'string', enum: ['local', 'report', 'none'], description: 'where the state comes from: this process\'s gateway, a gateway\'s latest heartbeat, or nowhere' },
            gateway_id: { ...nullable('string'), description: 'the gateway described' },
            reporting: { type: 'integer', description: 'gateways the caller may see whose heartbeat is not stale' },
            note: { ...nullable('string'), description: '`no gateway reports` when no gateway runs here and none the caller may see reports; else null' },
            ready: { type: 'boolean', description: 'the gateway has its first snapshot' },
            bundle_revision: nullable('string'),
            bundle_age_seconds: nullable('integer'),
            bundle_state: { type: 'string', enum: ['fresh', 'stale', 'none'], description: '`none`: no bundle (no gateway, or one without an embedded PDP)' },
            stale: { type: 'boolean' },
            mode: { ...nullable('string'), description: 'the default enforcement mode' },
            route_modes: { type: 'array', items: { type: 'string' }, description: 'the modes its routes enforce (a route\'s own mode, else the default)' },
            pdp: { type: 'string', description: '`embedded`, `http`, `opa`, `none` (badge-only), or `unknown` when no gateway reports' },
            workspace: { ...nullable('string'), description: 'the organization whose bundle the gateway enforces, when it is the caller\'s (or the caller is an operator)' },
            registry_revision: { ...nullable('string'), description: 'that organization\'s current bundle revision in the registry' },
            in_sync: { ...nullable('boolean'), description: 'the gateway enforces the registry\'s current revision' },
          },
        }),
      }, AUTHED_ERRORS),
    },
  }, async (request) => {
    const principal = principalOf(request)
    const now = Date.now()
    const reported = (await store.heartbeats().catch(() => [] as GatewayHeartbeat[]))
      .filter((heartbeat) => gatewayVisible(principal, heartbeat) && !isStale(heartbeat, now))
    const status = gateway.status()
    // Which organization the gateway enforces, and whether it has that organization's latest policies, is
    // told to that organization (and operators): the console shows it beside the policies it displays.
    const ownWorkspace = async (workspace: string | null, revision: string | null): Promise<Record<string, unknown>> => {
      const lower = workspace?.toLowerCase() ?? null
      const own = lower !== null && (principal.operator || principal.orgId.toLowerCase() === lower)
      const registryRevision = own ? await deps.bundles.get(lower).then((bundle) => bundle.revision, () => null) : null
      return { workspace: own ? lower : null, registry_revision: registryRevision, in_sync: own ? revision === registryRevision : null }
    }
    if (status !== null) {
      return {
        success: true,
        data: {
          gateway: true, source: 'local', gateway_id: deps.localGatewayId ?? null, reporting: reported.length, note: null,
          ready: status.ready, bundle_revision: status.bundleRevision, bundle_age_seconds: status.bundleAgeSeconds,
          bundle_state: status.bundleRevision === null ? 'none' : status.stale ? 'stale' : 'fresh',
          stale: status.stale, mode: status.mode, route_modes: status.routeModes ?? [status.mode], pdp: status.pdp,
          ...(await ownWorkspace(status.workspace, status.bundleRevision)),
        },
      }
    }
    const latest = reported.sort((a, b) => b.receivedAt - a.receivedAt)[0]
    if (latest === undefined) {
      return {
        success: true,
        data: {
          gateway: false, source: 'none', gateway_id: null, reporting: 0, note: 'no gateway reports', ready: false,
          bundle_revision: null, bundle_age_seconds: null, bundle_state: 'none', stale: false, mode: null, route_modes: [], pdp: 'unknown',
          workspace: null, registry_revision: null, in_sync: null,
        },
      }
    }
    const s = latest.status as unknown as ReportedStatusView
    const ageMs = s.snapshot_age_ms === null ? null : s.snapshot_age_ms + Math.max(0, now - latest.receivedAt)
    const bundleStale = ageMs !== null && s.pdp === 'embedded' && ageMs > deps.bundleStalenessMs
    return {
      success: true,
      data: {
        gateway: false, source: 'report', gateway_id: latest.gatewayId, reporting: reported.length, note: null, ready: true,
        bundle_revision: s.bundle_revision, bundle_age_seconds: ageMs === null ? null : Math.floor(ageMs / 1000),
        bundle_state: s.bundle_revision === null ? 'none' : bundleStale ? 'stale' : 'fresh',
        stale: bundleStale, mode: s.default_mode, route_modes: routeModes(s), pdp: s.pdp,
        ...(await ownWorkspace(s.workspace, s.bundle_revision)),
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

/** Where a stream starts: after `Last-Event-ID` when given (a resume, on any instance), else at the newest event. */
async function startPosition(request: FastifyRequest, store: DecisionStore): Promise<number> {
  const header = request.headers['last-event-id']
  if (header === undefined) return store.lastSeq()
  const value = typeof header === 'string' ? header.trim() : ''
  const match = LAST_EVENT_ID.exec(value)
  if (match === null) throw new ServiceError('invalid_last_event_id')
  return Number(match[1])
}

/** A heartbeat's status as the admin plane stored it (validated by the report schema). */
interface ReportedStatusView {
  readonly routes: readonly { readonly prefix: string; readonly mode: string; readonly protocol: string }[]
  readonly pdp: string
  readonly workspace: string | null
  readonly bundle_revision: string | null
  readonly snapshot_age_ms: number | null
  readonly default_mode: string
}

function routeModes(status: ReportedStatusView): string[] {
  const modes = [...new Set(status.routes.map((route) => route.mode))]
  return modes.length === 0 ? [status.default_mode] : modes
}

/** Heartbeats missed before a gateway counts as stale. */
export const STALE_AFTER_HEARTBEATS = 3

function isStale(heartbeat: GatewayHeartbeat, now: number): boolean {
  return now - heartbeat.receivedAt > STALE_AFTER_HEARTBEATS * heartbeat.intervalMs
}

/** Members see the gateways deciding for their organization; operators all. */
function gatewayVisible(principal: Principal, heartbeat: GatewayHeartbeat): boolean {
  return principal.operator || (heartbeat.orgId !== null && heartbeat.orgId === principal.orgId.toLowerCase())
}

const GATEWAY_SCHEMA = {
  type: 'object',
  properties: {
    gateway_id: { type: 'string' },
    version: { type: 'string' },
    org_id: { ...nullable('string'), description: 'the organization the gateway decides for (its workspace, or the organization of its key)' },
    routes: {
      type: 'array',
      items: { type: 'object', properties: { prefix: { type: 'string' }, mode: { type: 'string' }, protocol: { type: 'string' } } },
    },
    default_mode: { type: 'string' },
    pdp: { type: 'string', enum: ['embedded', 'http', 'opa', 'none'] },
    workspace: nullable('string'),
    bundle_revision: nullable('string'),
    bundle_current: { ...nullable('boolean'), description: 'the bundle is the registry\'s current one for the workspace; null without a workspace or bundle' },
    snapshot_age_ms: { ...nullable('integer'), description: 'the snapshot\'s age when the gateway last reported' },
    last_heartbeat: { type: 'string', format: 'date-time' },
    heartbeat_interval_ms: { type: 'integer' },
    stale: { type: 'boolean', description: `no heartbeat for ${STALE_AFTER_HEARTBEATS} intervals` },
    events_dropped: { type: 'integer', description: 'events the gateway reported lost before sending them' },
  },
}

async function gatewayView(heartbeat: GatewayHeartbeat, now: number, bundles: BundleCache): Promise<Record<string, unknown>> {
  const s = heartbeat.status as unknown as ReportedStatusView
  const workspace = s.workspace?.toLowerCase() ?? null
  let current: boolean | null = null
  if (workspace !== null && s.bundle_revision !== null) {
    current = await bundles.get(workspace).then((bundle) => bundle.revision === s.bundle_revision, () => null)
  }
  return {
    gateway_id: heartbeat.gatewayId, version: heartbeat.version, org_id: heartbeat.orgId, routes: s.routes, default_mode: s.default_mode,
    pdp: s.pdp, workspace, bundle_revision: s.bundle_revision, bundle_current: current, snapshot_age_ms: s.snapshot_age_ms,
    last_heartbeat: new Date(heartbeat.receivedAt).toISOString(), heartbeat_interval_ms: heartbeat.intervalMs,
    stale: isStale(heartbeat, now), events_dropped: heartbeat.droppedTotal,
  }
}
