/**
 * Every gateway reports its decisions to the control plane (docs/console.md, "Live decisions"): the gateway
 * keeps recording into its bounded ring (decision-feed.ts) and this shipper, on a timer and never on a
 * request's path, reads what is new, sends it in batches with the gateway's status (the heartbeat), and
 * counts what left the ring before it was sent. One report is in flight at a time; a failed one is retried
 * with backoff while the ring keeps the events.
 */
import { randomBytes } from 'node:crypto'
import type { DecisionFeed, DecisionRecord } from './decision-feed.js'

/** One decision as a gateway reports it: the feed's fields, the badge jti for attribution, the PDP request of a denial. */
export interface ReportedEvent {
  /** The gateway's own sequence number of the event. */
  readonly seq: number
  readonly time: string
  readonly request_id: string
  readonly txn_id: string | null
  readonly agent_did: string | null
  /** The jti of an authority-signed badge (null for a self-signed one or none). */
  readonly badge_jti: string | null
  readonly method: string
  readonly path: string
  readonly operation: string
  readonly decision: 'ALLOW' | 'DENY' | 'ALLOW_OBSERVE' | null
  readonly reason: string | null
  readonly decision_id: string | null
  readonly mode: string
  readonly obligations: readonly string[]
  readonly obligations_not_met: readonly string[]
  readonly breakglass: { readonly jti: string } | null
  readonly status: number
  readonly protocol: string
  /** Only for a check a proxy asked: the proxy (docs/ext-authz.md). */
  readonly proxy?: string
  readonly error_code: string | null
  /** Only for DENY and ALLOW_OBSERVE (an observed denial); null otherwise. */
  readonly pdp_request: object | null
}

/** One route of a gateway as its heartbeat describes it. */
export interface ReportedRoute {
  readonly prefix: string
  readonly mode: string
  readonly protocol: string
}

/** A gateway's state, sent with every report (the heartbeat). */
export interface ReportedStatus {
  readonly routes: readonly ReportedRoute[]
  readonly pdp: 'embedded' | 'http' | 'opa' | 'none'
  readonly workspace: string | null
  readonly bundle_revision: string | null
  readonly snapshot_age_ms: number | null
  readonly default_mode: string
  /** How often this gateway reports at the least; the control plane judges staleness by it. */
  readonly heartbeat_interval_ms: number
}

/** The body of `POST /v1/gateway/reports` (docs/api.md). */
export interface GatewayReport {
  readonly gateway_id: string
  readonly version: string
  /**
   * This gateway process's run, the same in all its reports and new at every start: with it the control
   * plane skips events of a retried report it already stored (events at or below the highest `seq` of the run).
   */
  readonly run?: string
  readonly sent_at: string
  readonly status?: ReportedStatus
  readonly events: readonly ReportedEvent[]
  /** Events that left the gateway's ring before they were sent, and the gateway's sequence numbers they had. */
  readonly dropped?: { readonly count: number; readonly from_seq: number; readonly to_seq: number }
}

function operationOf(record: DecisionRecord): string {
  if (record.mcpMethod !== undefined) return record.tool === undefined ? record.mcpMethod : `${record.mcpMethod} ${record.tool}`
  return record.a2aOperation ?? `${record.operationMethod} ${record.path}`
}

/** The wire form of one recorded request; built by the shipper, off the request path. */
export function reportedEventOf(record: DecisionRecord): ReportedEvent {
  const observedDenial = record.decision === 'DENY' || record.decision === 'ALLOW_OBSERVE'
  return {
    seq: record.seq,
    time: new Date(record.timeMs).toISOString(),
    request_id: record.requestIdPrefix + record.requestSeq,
    txn_id: record.txnId ?? null,
    agent_did: record.agentDid ?? null,
    badge_jti: record.badgeJti ?? null,
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
    pdp_request: observedDenial ? record.pdpRequest : null,
    ...(record.proxy === undefined ? {} : { proxy: record.proxy }),
  }
}

/** The control plane refused the report itself (400, 401, 403, 413): sending it again cannot succeed, so its events are dropped. */
export class ReportRejected extends Error {
  readonly code = 'REPORT_REJECTED'
  override readonly name = 'ReportRejected'
}

export interface DecisionShipperOptions {
  readonly feed: DecisionFeed
  readonly gatewayId: string
  readonly version: string
  /** This process's run id (see {@link GatewayReport.run}); default: one made when the shipper is built. */
  readonly run?: string
  readonly status: () => ReportedStatus
  /** Delivers one report; rejects with {@link ReportRejected} when it must not be retried, with anything else to retry. */
  readonly send: (report: GatewayReport) => Promise<void>
  readonly heartbeatMs: number
  /** How often the ring is read (default 250 ms). */
  readonly intervalMs?: number
  /** This many waiting events are shipped without waiting for the timer (default 200). */
  readonly wakeAt?: number
  /** Events per report at most (default 500). */
  readonly maxBatch?: number
  /** Ship after every event-loop turn that recorded something (the appliance's own gateway, whose delivery is in-process). */
  readonly eager?: boolean
  readonly initialBackoffMs?: number
  readonly maxBackoffMs?: number
  /** Events lost: overflowed from the ring before they were sent, or in a refused report. */
  readonly onDropped?: (count: number) => void
  /** A failed delivery; `retryInMs` is null when the report was refused and its events dropped. */
  readonly onError?: (error: unknown, retryInMs: number | null) => void
  readonly now?: () => number
}

type Gap = { count: number; from_seq: number; to_seq: number }

/** Reads the gateway's ring after a cursor and ships it; see the module comment. */
export class DecisionShipper {
  readonly #o: DecisionShipperOptions
  readonly #intervalMs: number
  readonly #wakeAt: number
  readonly #maxBatch: number
  readonly #initialBackoffMs: number
  readonly #maxBackoffMs: number
  readonly #now: () => number
  readonly #run: string
  #cursor = 0
  #gap: Gap | null = null
  #inFlight: Promise<boolean> | null = null
  #lastReportAt = Number.NEGATIVE_INFINITY
  #retryAt = 0
  #backoffMs: number
  #timer: NodeJS.Timeout | null = null
  #unsubscribe: (() => void) | null = null
  #stopped = false
  #droppedTotal = 0
  #reports = 0

  constructor(options: DecisionShipperOptions) {
    this.#o = options
    this.#intervalMs = options.intervalMs ?? 250
    this.#wakeAt = options.wakeAt ?? 200
    this.#maxBatch = options.maxBatch ?? 500
    this.#initialBackoffMs = options.initialBackoffMs ?? 250
    this.#maxBackoffMs = options.maxBackoffMs ?? 10_000
    this.#backoffMs = this.#initialBackoffMs
    this.#now = options.now ?? Date.now
    this.#run = options.run ?? generatedRunId(this.#now(), randomBytes)
  }

  /** The run id sent in every report. */
  get run(): string {
    return this.#run
  }

  /** Events lost so far (also handed to `onDropped`). */
  get droppedTotal(): number {
    return this.#droppedTotal
  }

  /** Reports delivered so far. */
  get reports(): number {
    return this.#reports
  }

  /** Whether a report is being delivered now. */
  get busy(): boolean {
    return this.#inFlight !== null
  }

  /** Starts the timer and sends the first heartbeat at once. */
  start(): void {
    if (this.#timer !== null || this.#stopped) return
    this.#timer = setInterval(() => this.#tick(false), this.#intervalMs)
    this.#timer.unref()
    this.#unsubscribe = this.#o.feed.subscribe(() => {
      if (this.#due()) this.#tick(false)
    })
    this.#tick(false)
  }

  /** Whether new events should go out before the next tick. */
  #due(): boolean {
    const waiting = this.#o.feed.lastSeq - this.#cursor
    return waiting > 0 && (this.#o.eager === true || waiting >= this.#wakeAt)
  }

  /**
   * Starts one report if there is something to send (new events, a gap, a heartbeat due) and none is in
   * flight. `force` ignores the backoff (a flush asked for it). Returns the delivery, or null when nothing started.
   */
  #tick(force: boolean): Promise<boolean> | null {
    if (this.#inFlight !== null) return null
    const now = this.#now()
    if (!force && now < this.#retryAt) return null
    const slice = this.#o.feed.after(this.#cursor, this.#maxBatch)
    if (slice.missed !== null) {
      // Counted once, when the loss is seen: the cursor moves past it, and the next report names the range.
      const count = slice.missed.to - slice.missed.from + 1
      this.#drop(count)
      this.#gap = this.#gap === null
        ? { count, from_seq: slice.missed.from, to_seq: slice.missed.to }
        : { count: this.#gap.count + count, from_seq: this.#gap.from_seq, to_seq: slice.missed.to }
      this.#cursor = slice.missed.to
    }
    const heartbeatDue = now - this.#lastReportAt >= this.#o.heartbeatMs
    if (slice.items.length === 0 && this.#gap === null && !heartbeatDue) return null
    const gap = this.#gap
    let status: ReportedStatus
    try {
      status = this.#o.status()
    } catch (error) {
      // A timer callback must not throw: the report waits for the next tick.
      this.#o.onError?.(error, this.#intervalMs)
      return null
    }
    const report: GatewayReport = {
      gateway_id: this.#o.gatewayId,
      version: this.#o.version,
      run: this.#run,
      sent_at: new Date(now).toISOString(),
      status,
      events: slice.items.map(reportedEventOf),
      ...(gap === null ? {} : { dropped: gap }),
    }
    const lastSeq = slice.items.length === 0 ? this.#cursor : (slice.items[slice.items.length - 1] as DecisionRecord).seq
    const delivery = this.#deliver(report, lastSeq, gap)
    this.#inFlight = delivery
    void delivery.finally(() => {
      this.#inFlight = null
      // A backlog (or, eager, anything) waiting: the next report goes out now rather than at the next tick.
      if (!this.#stopped && this.#retryAt === 0 && this.#due()) this.#tick(false)
    })
    return delivery
  }

  async #deliver(report: GatewayReport, lastSeq: number, gap: Gap | null): Promise<boolean> {
    try {
      await this.#o.send(report)
      this.#cursor = Math.max(this.#cursor, lastSeq)
      if (this.#gap === gap) this.#gap = null
      this.#lastReportAt = this.#now()
      this.#retryAt = 0
      this.#backoffMs = this.#initialBackoffMs
      this.#reports++
      return true
    } catch (error) {
      if (error instanceof ReportRejected) {
        // Sending it again would be refused again: its events are lost, and counted.
        this.#drop(report.events.length)
        this.#cursor = Math.max(this.#cursor, lastSeq)
        if (this.#gap === gap) this.#gap = null
        this.#lastReportAt = this.#now()
        this.#o.onError?.(error, null)
        return false
      }
      const wait = this.#backoffMs
      this.#retryAt = this.#now() + wait
      this.#backoffMs = Math.min(this.#backoffMs * 2, this.#maxBackoffMs)
      this.#o.onError?.(error, wait)
      return false
    }
  }

  #drop(count: number): void {
    if (count <= 0) return
    this.#droppedTotal += count
    this.#o.onDropped?.(count)
  }

  /**
   * Sends everything recorded so far (waiting for the report in flight first), ignoring the backoff once;
   * resolves when it is delivered or a delivery failed.
   */
  async flush(): Promise<void> {
    const target = this.#o.feed.lastSeq
    for (let round = 0; round < 1000; round++) {
      if (this.#inFlight !== null) {
        await this.#inFlight
        continue
      }
      if (this.#cursor >= target && this.#gap === null) return
      const delivery = this.#tick(true)
      if (delivery === null || !(await delivery)) return
    }
  }

  /** Stops the timer and makes one last flush within `graceMs`; later records are not shipped. */
  async stop(graceMs: number): Promise<void> {
    if (this.#stopped) return
    this.#stopped = true
    if (this.#timer !== null) clearInterval(this.#timer)
    this.#unsubscribe?.()
    let timer: NodeJS.Timeout | undefined
    // Not unref'd: the shutdown waits for this, and it is cleared as soon as the flush is done.
    const deadline = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, graceMs)
    })
    await Promise.race([this.flush(), deadline])
    clearTimeout(timer)
  }
}

/** `gw-` and 12 random hex characters: a gateway's id when SERVICE_PEP_ID names none. */
export function generatedGatewayId(random: (bytes: number) => Buffer): string {
  return `gw-${random(6).toString('hex')}`
}

/**
 * A run id: the start time (base 36) and 8 random hex characters, so that two processes reporting under one
 * `SERVICE_PEP_ID`, or one restarted within a millisecond, still differ.
 */
export function generatedRunId(now: number, random: (bytes: number) => Buffer): string {
  return `${now.toString(36)}-${random(4).toString('hex')}`
}
