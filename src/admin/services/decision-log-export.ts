/**
 * Gateway decision events leave the appliance in OPA's decision-log format (docs/console.md, "Export"): each
 * batch is POSTed to the configured sink as a gzip-compressed JSON array of events, exactly as an OPA agent
 * uploads its own, so the collectors that already ingest OPA's decision logs ingest the appliance's too.
 * The exporter sits behind the admin plane's ingest, never on a gateway's request path: a bounded queue,
 * one upload in flight, retries with back-off for a sink that is down, and what overflows is dropped and
 * counted.
 */
import { gzipSync } from 'node:zlib'
import type { Logger } from '../../telemetry/logger.js'

/** What the exporter reads of an event: the feed's event view, as the console shows it. */
export interface ExportableEvent {
  readonly time: string
  readonly gateway_id?: string | null
  readonly request_id: string
  readonly txn_id: string | null
  readonly org_id: string | null
  readonly agent_did: string | null
  readonly method: string
  readonly path: string
  readonly operation: string
  readonly decision: string | null
  readonly reason: string | null
  readonly decision_id: string | null
  readonly mode: string
  readonly obligations: readonly string[]
  readonly status: number
  readonly protocol: string
  readonly error_code: string | null
  readonly breakglass?: { readonly jti: string } | null
  /** Kept for a denial: the PDP request, the decision's input. */
  readonly pdp_request?: object | null
}

/** One event of OPA's decision-log upload (OPA docs, "Decision Logs", "Decision Log Service API"). */
export interface OpaDecisionLogEvent {
  readonly labels: { readonly id: string; readonly version: string; readonly app: string }
  readonly decision_id: string
  readonly path: string
  readonly input: object
  readonly result: object
  readonly requested_by: string
  readonly timestamp: string
}

/** The query path the gateway's decisions answer: the Rego package `service.policy`. */
export const DECISION_PATH = 'service/policy'
const APP_LABEL = 'agent-trust-gateway'

/** An event in OPA's shape; a refusal made before any decision gets an id of its gateway's request. */
export function opaDecisionLogEvent(event: ExportableEvent, version: string): OpaDecisionLogEvent {
  const gatewayId = event.gateway_id ?? 'appliance'
  const input = event.pdp_request ?? {
    subject: { did: event.agent_did },
    action: { operation: event.operation },
    context: { txn_id: event.txn_id, enforcement_mode: event.mode },
  }
  return {
    labels: { id: gatewayId, version, app: APP_LABEL },
    decision_id: event.decision_id ?? `${gatewayId}:${event.request_id}`,
    path: DECISION_PATH,
    input,
    result: {
      decision: event.decision,
      reason: event.reason,
      obligations: event.obligations,
      status: event.status,
      error_code: event.error_code,
      mode: event.mode,
      protocol: event.protocol,
      org_id: event.org_id,
      method: event.method,
      path: event.path,
      breakglass: event.breakglass ?? null,
    },
    requested_by: gatewayId,
    timestamp: event.time,
  }
}

export interface DecisionLogExporterOptions {
  /** The sink: an OPA-compatible decision-log service's upload URL. */
  readonly url: string
  /** Sent as `Authorization` when set (a collector's token); never logged. */
  readonly authorization: string | null
  readonly version: string
  readonly logger: Logger
  /** Events waiting at most; more are dropped and counted. */
  readonly queueMax?: number
  /** Events per upload at most. */
  readonly batchMax?: number
  /** How long a lone event waits for company before it is sent. */
  readonly flushMs?: number
  /** Time an upload may take. */
  readonly timeoutMs?: number
  /** First retry delay; doubled per failure up to `maxBackoffMs`. */
  readonly backoffMs?: number
  readonly maxBackoffMs?: number
  /** Called with the count of each outcome, for the metrics. */
  readonly count?: (outcome: 'sent' | 'dropped', events: number) => void
}

export class DecisionLogExporter {
  readonly #options: Required<Omit<DecisionLogExporterOptions, 'count'>> & Pick<DecisionLogExporterOptions, 'count'>
  #queue: OpaDecisionLogEvent[] = []
  #timer: NodeJS.Timeout | null = null
  #inFlight: Promise<void> | null = null
  #failures = 0
  #closed = false
  sent = 0
  dropped = 0

  constructor(options: DecisionLogExporterOptions) {
    this.#options = {
      queueMax: 10_000, batchMax: 500, flushMs: 1_000, timeoutMs: 10_000, backoffMs: 500, maxBackoffMs: 30_000, ...options,
    }
  }

  /** Queues the events (never waits, never throws); what does not fit is dropped and counted. */
  enqueue(events: readonly ExportableEvent[]): void {
    if (this.#closed || events.length === 0) return
    const room = this.#options.queueMax - this.#queue.length
    const taken = events.length <= room ? events : events.slice(0, Math.max(0, room))
    for (const event of taken) this.#queue.push(opaDecisionLogEvent(event, this.#options.version))
    if (taken.length < events.length) this.#drop(events.length - taken.length)
    this.#schedule(this.#queue.length >= this.#options.batchMax ? 0 : this.#options.flushMs)
  }

  /** Sends what is queued (one attempt per batch, no retries, within `withinMs`), drops the rest, and stops. */
  async close(withinMs = 5_000): Promise<void> {
    this.#closed = true
    if (this.#timer !== null) clearTimeout(this.#timer)
    this.#timer = null
    const deadline = Date.now() + withinMs
    await this.#inFlight
    while (this.#queue.length > 0) {
      const left = deadline - Date.now()
      if (left <= 0 || !(await this.#upload(Math.min(left, this.#options.timeoutMs)))) {
        this.#drop(this.#queue.length)
        this.#queue = []
      }
    }
  }

  #drop(events: number): void {
    this.dropped += events
    this.#options.count?.('dropped', events)
  }

  #schedule(delayMs: number): void {
    if (this.#inFlight !== null || (this.#timer !== null && delayMs > 0)) return
    if (this.#timer !== null) clearTimeout(this.#timer)
    this.#timer = setTimeout(() => {
      this.#timer = null
      this.#inFlight = this.#uploadAndRetry().finally(() => {
        this.#inFlight = null
        if (this.#queue.length > 0 && !this.#closed) this.#schedule(this.#backoff())
      })
    }, delayMs)
    this.#timer.unref()
  }

  #backoff(): number {
    if (this.#failures === 0) return this.#queue.length >= this.#options.batchMax ? 0 : this.#options.flushMs
    return Math.min(this.#options.maxBackoffMs, this.#options.backoffMs * 2 ** (this.#failures - 1))
  }

  async #uploadAndRetry(): Promise<void> {
    if (await this.#upload()) this.#failures = 0
    else this.#failures++
  }

  /** One upload of the oldest batch: true when the sink took it (or refused it for good, which drops it). */
  async #upload(timeoutMs = this.#options.timeoutMs): Promise<boolean> {
    const batch = this.#queue.slice(0, this.#options.batchMax)
    if (batch.length === 0) return true
    const headers: Record<string, string> = { 'content-type': 'application/json', 'content-encoding': 'gzip' }
    if (this.#options.authorization !== null) headers.authorization = this.#options.authorization
    let status: number
    try {
      const res = await fetch(this.#options.url, {
        method: 'POST', headers, body: gzipSync(JSON.stringify(batch)), signal: AbortSignal.timeout(timeoutMs), redirect: 'error',
      })
      await res.arrayBuffer().catch(() => undefined)
      status = res.status
    } catch (error) {
      this.#options.logger.warn({ reason: (error as Error).name }, 'decision log sink unreachable')
      return false
    }
    if (status >= 200 && status < 300) {
      this.#queue.splice(0, batch.length)
      this.sent += batch.length
      this.#options.count?.('sent', batch.length)
      return true
    }
    if (status === 429 || status >= 500) {
      this.#options.logger.warn({ status }, 'decision log sink refused a batch; retrying')
      return false
    }
    // Any other answer would refuse the same batch again: it is dropped, so later events still go out.
    this.#options.logger.error({ status, events: batch.length }, 'decision log sink rejected a batch; dropped')
    this.#queue.splice(0, batch.length)
    this.#drop(batch.length)
    return true
  }
}
