/**
 * What the admin plane does with a gateway's report (docs/api.md, "Gateway reports"): the events are
 * attributed when recorded and stored, the status is kept as the gateway's heartbeat. An event belongs to
 * the organization its caller's authority-signed badge was issued for, and only if the reporting key may
 * speak for it (an operator's key, or a key of that organization): a gateway holding one organization's key
 * cannot place events in another organization's feed; such an event is kept for operators only.
 */
import { changeDigest, type AuditEntry } from '../../core/audit.js'
import { ServiceError } from '../../core/errors.js'
import type { Queryable } from '../../db/database.js'
import { insertPendingAudit } from '../../db/repositories/audit.js'
import type { GatewayReport } from '../../telemetry/decision-shipper.js'
import type { BadgeOrgs } from './badge-orgs.js'
import type { DecisionLogExporter, ExportableEvent } from './decision-log-export.js'
import type { DecisionStore, NewEvent } from './decision-store.js'

/** The caller that sent a report, as the API key resolved it. */
export interface Reporter {
  readonly orgId: string
  readonly operator: boolean
  /** The reporting API key (the audit trail's actor id beside the gateway id); null for this process's own gateway. */
  readonly keyId?: string | null
}

/** Where refusals in reports enter the audit trail (docs/audit.md, "Gateway refusals"). */
export interface ReportAudit {
  readonly db: Queryable
  /** One ALLOW in this many is recorded (by the gateway's event seq); 0: none. */
  readonly allowSample: number
  /** The pending records are committed: the chainer runs soon. */
  readonly committed: () => void
}

/** Events per report at most. */
export const REPORT_MAX_EVENTS = 1000
/** Bytes of one report body at most. */
export const REPORT_BODY_LIMIT_BYTES = 4 * 1024 * 1024

const text = (max: number): Record<string, unknown> => ({ type: 'string', maxLength: max })
const nullableText = (max: number): Record<string, unknown> => ({ type: ['string', 'null'], maxLength: max })
const MODES = ['EM-OBSERVE', 'EM-GUARD', 'EM-DELEGATE', 'EM-STRICT']
const PROTOCOLS = ['http', 'mcp', 'a2a']
const SEQ = { type: 'integer', minimum: 1, maximum: Number.MAX_SAFE_INTEGER }

/** The JSON Schema of one reported event (the feed's fields as a gateway sends them). */
export const REPORTED_EVENT_SCHEMA = {
  type: 'object',
  additionalProperties: false,
  required: ['seq', 'time', 'request_id', 'method', 'path', 'operation', 'decision', 'mode', 'status', 'protocol'],
  properties: {
    seq: SEQ,
    time: { type: 'string', format: 'date-time', maxLength: 40 },
    request_id: { type: 'string', minLength: 1, maxLength: 200 },
    txn_id: nullableText(200),
    agent_did: nullableText(2048),
    badge_jti: nullableText(200),
    method: { type: 'string', minLength: 1, maxLength: 32 },
    path: text(4096),
    operation: text(4200),
    decision: { type: ['string', 'null'], enum: ['ALLOW', 'DENY', 'ALLOW_OBSERVE', null] },
    reason: nullableText(2048),
    decision_id: nullableText(200),
    mode: { type: 'string', enum: MODES },
    obligations: { type: 'array', maxItems: 64, items: text(200) },
    obligations_not_met: { type: 'array', maxItems: 64, items: text(200) },
    breakglass: { type: ['object', 'null'], additionalProperties: false, required: ['jti'], properties: { jti: text(200) } },
    status: { type: 'integer', minimum: 100, maximum: 599 },
    protocol: { type: 'string', enum: PROTOCOLS },
    proxy: { type: 'string', enum: ['envoy-grpc', 'envoy-http', 'nginx', 'traefik'] },
    error_code: nullableText(64),
    pdp_request: { type: ['object', 'null'], additionalProperties: true },
  },
} as const

/** The JSON Schema of a report's status (the heartbeat). */
export const REPORTED_STATUS_SCHEMA = {
  type: 'object',
  additionalProperties: false,
  required: ['routes', 'pdp', 'workspace', 'bundle_revision', 'snapshot_age_ms', 'default_mode', 'heartbeat_interval_ms'],
  properties: {
    routes: {
      type: 'array', maxItems: 1000,
      items: {
        type: 'object', additionalProperties: false, required: ['prefix', 'mode', 'protocol'],
        properties: { prefix: text(2048), mode: { type: 'string', enum: MODES }, protocol: { type: 'string', enum: PROTOCOLS } },
      },
    },
    pdp: { type: 'string', enum: ['embedded', 'http', 'opa', 'none'] },
    workspace: { type: ['string', 'null'], format: 'uuid' },
    bundle_revision: nullableText(200),
    snapshot_age_ms: { type: ['integer', 'null'], minimum: 0 },
    default_mode: { type: 'string', enum: MODES },
    heartbeat_interval_ms: { type: 'integer', minimum: 100, maximum: 3_600_000 },
  },
} as const

/** The JSON Schema of `POST /v1/gateway/reports`. */
export const GATEWAY_REPORT_SCHEMA = {
  type: 'object',
  additionalProperties: false,
  required: ['gateway_id', 'version', 'sent_at', 'events'],
  properties: {
    gateway_id: { type: 'string', minLength: 1, maxLength: 128, pattern: '^[A-Za-z0-9._:-]+$' },
    version: { type: 'string', minLength: 1, maxLength: 64 },
    run: { type: 'string', minLength: 1, maxLength: 64, pattern: '^[A-Za-z0-9._:-]+$' },
    sent_at: { type: 'string', format: 'date-time', maxLength: 40 },
    status: REPORTED_STATUS_SCHEMA,
    events: { type: 'array', maxItems: REPORT_MAX_EVENTS, items: REPORTED_EVENT_SCHEMA },
    dropped: {
      type: 'object', additionalProperties: false, required: ['count', 'from_seq', 'to_seq'],
      properties: { count: { type: 'integer', minimum: 1, maximum: Number.MAX_SAFE_INTEGER }, from_seq: SEQ, to_seq: SEQ },
    },
  },
} as const

/** What the schema cannot say; a problem is a 400 and nothing of the report is stored. */
function semanticProblem(report: GatewayReport): string | null {
  if (report.dropped !== undefined && report.dropped.from_seq > report.dropped.to_seq) return 'body/dropped from_seq must not exceed to_seq'
  for (let i = 0; i < report.events.length; i++) {
    const event = report.events[i]!
    if (Number.isNaN(Date.parse(event.time))) return `body/events/${i}/time is not a date`
    if (i > 0 && event.seq <= report.events[i - 1]!.seq) return `body/events/${i}/seq must be above the previous event's`
  }
  return null
}

/** The organization of a gateway's heartbeat: its workspace when the key may speak for it; for a key of one organization without a workspace, that organization. */
export function gatewayOrgOf(workspace: string | null, reporter: Reporter): string | null {
  if (workspace === null) return reporter.operator ? null : reporter.orgId
  if (reporter.operator || workspace.toLowerCase() === reporter.orgId.toLowerCase()) return workspace.toLowerCase()
  return null
}

export interface IngestDeps {
  readonly store: DecisionStore
  readonly orgs: BadgeOrgs
  /** The decision-log export, when a sink is configured: it gets each stored decision once, off the gateways' path. */
  readonly exporter?: DecisionLogExporter | null
  readonly audit?: ReportAudit | null
}

/** What the trail keeps of a report: every refusal (DENY, or a request answered 4xx/5xx), every break-glass use, sampled ALLOWs. */
export function auditEntriesOf(report: GatewayReport, entries: readonly NewEvent[], allowSample: number): AuditEntry[] {
  const out: AuditEntry[] = []
  for (const entry of entries) {
    if (entry.kind !== 'decision') continue
    const e = entry.event as Record<string, unknown> & { decision: string | null; status: number; breakglass: { jti: string } | null; request_id: string; agent_did: string | null }
    const refused = e.decision === 'DENY' || e.status >= 400
    const breakglass = e.breakglass !== null
    const sampled = !refused && allowSample > 0 && (entry.gatewaySeq ?? 0) % allowSample === 0
    if (!refused && !breakglass && !sampled) continue
    const action = breakglass ? 'gateway.breakglass' : refused ? 'gateway.refusal' : 'gateway.allow'
    out.push({
      actorType: 'gateway', actorId: report.gateway_id, orgId: entry.orgId, action,
      target: e.agent_did ?? null,
      outcome: refused ? `${e.decision ?? 'REFUSED'}:${e.status}${typeof e.error_code === 'string' ? `:${e.error_code}` : ''}` : `${e.decision ?? 'ALLOW'}:${e.status}`,
      requestId: e.request_id,
      digest: changeDigest({ ...e, pdp_request: null }),
    })
  }
  return out
}

/** Attributes and stores a (schema-valid) report; 400 `invalid_request` when it is inconsistent, 503 when the store is away. */
export async function ingestReport(deps: IngestDeps, report: GatewayReport, reporter: Reporter, receivedAt: number): Promise<{ accepted: number; stored: number }> {
  const problem = semanticProblem(report)
  if (problem !== null) throw new ServiceError('invalid_request', problem)
  const jtis: string[] = []
  for (const event of report.events) if (event.badge_jti !== null && event.badge_jti !== undefined) jtis.push(event.badge_jti)
  const badgeOrgs = jtis.length === 0 ? new Map<string, string | null>() : await deps.orgs.resolve(jtis)
  const entries: NewEvent[] = []
  const gatewayOrg = gatewayOrgOf(report.status?.workspace ?? null, reporter)
  if (report.dropped !== undefined) {
    entries.push({
      kind: 'gap', orgId: gatewayOrg, decisionId: null, pdpRequest: null, gatewaySeq: report.dropped.to_seq,
      event: { gateway_id: report.gateway_id, dropped: report.dropped.count, from_seq: report.dropped.from_seq, to_seq: report.dropped.to_seq },
    })
  }
  for (const e of report.events) {
    const badgeOrg = e.badge_jti === null || e.badge_jti === undefined ? null : (badgeOrgs.get(e.badge_jti) ?? null)
    const orgId = badgeOrg !== null && (reporter.operator || badgeOrg === reporter.orgId) ? badgeOrg : null
    const observedDenial = e.decision === 'DENY' || e.decision === 'ALLOW_OBSERVE'
    entries.push({
      kind: 'decision',
      gatewaySeq: e.seq,
      orgId,
      decisionId: e.decision_id ?? null,
      pdpRequest: observedDenial ? (e.pdp_request ?? null) : null,
      event: {
        time: e.time, request_id: e.request_id, txn_id: e.txn_id ?? null, org_id: orgId, agent_did: e.agent_did ?? null,
        method: e.method, path: e.path, operation: e.operation, decision: e.decision, reason: e.reason ?? null,
        decision_id: e.decision_id ?? null, mode: e.mode, obligations: e.obligations ?? [], obligations_not_met: e.obligations_not_met ?? [],
        breakglass: e.breakglass ?? null, status: e.status, protocol: e.protocol, error_code: e.error_code ?? null,
        gateway_id: report.gateway_id,
        ...(e.proxy === undefined ? {} : { proxy: e.proxy }),
      },
    })
  }
  const heartbeat = report.status === undefined ? undefined : {
    heartbeat: {
      gatewayId: report.gateway_id, version: report.version, status: { ...report.status }, receivedAt,
      intervalMs: report.status.heartbeat_interval_ms, orgId: gatewayOrg,
    },
    dropped: report.dropped?.count ?? 0,
  }
  // Without a run the gateway cannot be told from its own restart, so nothing is skipped.
  const source = report.run === undefined ? undefined : { gatewayId: report.gateway_id, run: report.run }
  // Before the store, so that a failure here is a 503 the gateway retries (the trail is at least once).
  if (deps.audit != null) {
    const audited = auditEntriesOf(report, entries, deps.audit.allowSample)
    if (audited.length > 0) {
      try {
        await insertPendingAudit(deps.audit.db, audited)
      } catch (error) {
        throw new ServiceError('service_unavailable', 'The audit trail cannot record this report now; send it again.', undefined, { cause: error })
      }
      deps.audit.committed()
    }
  }
  const stored = await deps.store.append(entries, heartbeat, source)
  if (deps.exporter != null && stored > 0) {
    // What a retry repeats is a prefix of the report (its seqs increase), so the stored ones are the last.
    const decisions = entries.filter((entry) => entry.kind === 'decision')
    deps.exporter.enqueue(decisions.slice(decisions.length - stored).map((entry) => ({ ...(entry.event as unknown as ExportableEvent), pdp_request: entry.pdpRequest })))
  }
  return { accepted: report.events.length, stored }
}
