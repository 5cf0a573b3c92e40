/**
 * The live decision feed of docs/console.md: the last N finished gateway requests that reached a decision
 * or were refused after their badge was verified, in a ring with a monotonic sequence number, and the
 * last break-glass overrides in a smaller ring. The gateway records one object per request and nothing
 * else (no serialisation, no I/O, no lookup): readers format events and subscribers are woken once per
 * event-loop turn and pull, so a slow reader costs the gateway nothing and skips what left the ring.
 */

/** What one finished request left behind; every field is a reference the request already held. */
export interface DecisionRecord {
  /** Set by the feed. */
  seq: number
  /** Epoch ms at arrival. */
  readonly timeMs: number
  /** The request id is `requestIdPrefix + requestSeq`, formatted only when read. */
  readonly requestIdPrefix: string
  readonly requestSeq: number
  readonly txnId: string | undefined
  readonly agentDid: string | undefined
  /**
   * The jti of the caller's badge when the authority signed it (undefined for a self-signed one): the event
   * belongs to the organization that badge was issued for, fixed at issuance, whoever registers the DID later.
   */
  readonly badgeJti: string | undefined
  readonly method: string
  /** The canonical path, never the query (which may carry credentials). */
  readonly path: string
  readonly operationMethod: string
  /** On an MCP route: the method and tool decided last; on an A2A route: the operation. */
  readonly mcpMethod: string | undefined
  readonly tool: string | undefined
  readonly a2aOperation: string | undefined
  readonly decision: 'ALLOW' | 'DENY' | 'ALLOW_OBSERVE' | undefined
  readonly reason: string | undefined
  readonly decisionId: string | undefined
  readonly mode: string
  readonly obligations: readonly { readonly type: string }[] | undefined
  readonly obligationsNotMet: readonly string[] | undefined
  readonly overrideJti: string | undefined
  readonly status: number
  readonly protocol: string
  /** A check a proxy asked (docs/ext-authz.md): the proxy; undefined for the gateway's own requests. */
  readonly proxy?: string | undefined
  readonly errorCode: string | undefined
  /** The PDP request, kept for DENY and ALLOW_OBSERVE (an observed denial) so the denial can be opened. */
  readonly pdpRequest: object | null
}

/** A break-glass override the gateway accepted (docs/wire-contract.md §11). */
export interface OverrideRecord {
  readonly timeMs: number
  readonly jti: string
  /** The token's `sub`: the operator who issued it. */
  readonly operator: string
  readonly reason: string
  readonly agentDid: string | undefined
  /** As in {@link DecisionRecord}. */
  readonly badgeJti: string | undefined
  readonly method: string
  readonly path: string
}

/** What a pull finds after a position: the records still held and whether some were lost before them. */
export interface FeedSlice<T> {
  readonly items: T[]
  /** The sequence numbers that left the ring before the reader got to them, or null when none did. */
  readonly missed: { readonly from: number; readonly to: number } | null
}

/** A bounded ring of records numbered from 1; the oldest is overwritten. */
export class SequencedRing<T extends object> {
  readonly capacity: number
  readonly #slots: (T | undefined)[]
  readonly #seqs: Float64Array
  #last = 0

  constructor(capacity: number) {
    if (!Number.isSafeInteger(capacity) || capacity < 1) throw new RangeError('capacity must be a positive integer')
    this.capacity = capacity
    this.#slots = new Array<T | undefined>(capacity).fill(undefined)
    this.#seqs = new Float64Array(capacity)
  }

  /** Stores `item` and returns its sequence number. */
  push(item: T): number {
    const seq = ++this.#last
    const slot = seq % this.capacity
    this.#slots[slot] = item
    this.#seqs[slot] = seq
    return seq
  }

  /** The newest sequence number (0 before the first push). */
  get lastSeq(): number {
    return this.#last
  }

  /** The oldest sequence number still held (0 when empty). */
  get firstSeq(): number {
    return this.#last === 0 ? 0 : Math.max(1, this.#last - this.capacity + 1)
  }

  get size(): number {
    return this.#last === 0 ? 0 : this.#last - this.firstSeq + 1
  }

  /** The record numbered `seq`, while it is held. */
  get(seq: number): T | undefined {
    if (!Number.isSafeInteger(seq) || seq < this.firstSeq || seq > this.#last || seq < 1) return undefined
    return this.#slots[seq % this.capacity]
  }

  /**
   * Up to `max` records after `afterSeq`, oldest first. A position ahead of the newest (a sequence from an
   * earlier process) reads as the start of the ring.
   */
  after(afterSeq: number, max = this.capacity): FeedSlice<T> {
    let from = afterSeq + 1
    if (afterSeq > this.#last) from = 1
    const first = this.firstSeq
    let missed: FeedSlice<T>['missed'] = null
    if (first > 0 && from < first) {
      missed = { from, to: first - 1 }
      from = first
    }
    const items: T[] = []
    for (let seq = from; seq <= this.#last && items.length < max; seq++) items.push(this.#slots[seq % this.capacity] as T)
    return { items, missed }
  }

  /** The newest `limit` records, oldest first. */
  latest(limit: number): T[] {
    const from = Math.max(this.firstSeq, this.#last - limit + 1)
    const items: T[] = []
    for (let seq = Math.max(from, 1); seq <= this.#last; seq++) items.push(this.#slots[seq % this.capacity] as T)
    return items
  }
}

/** The decision ring and its subscribers; one per process, shared by the gateway and the admin plane. */
export class DecisionFeed {
  readonly #ring: SequencedRing<DecisionRecord>
  readonly #subscribers = new Set<() => void>()
  #scheduled = false
  /** One function for the life of the feed, so scheduling a wake-up makes no closure. */
  readonly #wake = (): void => {
    this.#scheduled = false
    for (const subscriber of this.#subscribers) {
      try {
        subscriber()
      } catch {
        // A subscriber's failure is its own (it closes its stream); the others are still woken.
      }
    }
  }

  constructor(capacity: number) {
    this.#ring = new SequencedRing(capacity)
  }

  get capacity(): number {
    return this.#ring.capacity
  }

  get lastSeq(): number {
    return this.#ring.lastSeq
  }

  /** The gateway's one call per finished request: stores it and, with subscribers, schedules one wake-up per turn. */
  record(record: DecisionRecord): void {
    record.seq = this.#ring.push(record)
    if (this.#subscribers.size > 0 && !this.#scheduled) {
      this.#scheduled = true
      setImmediate(this.#wake)
    }
  }

  get(seq: number): DecisionRecord | undefined {
    return this.#ring.get(seq)
  }

  after(afterSeq: number, max?: number): FeedSlice<DecisionRecord> {
    return this.#ring.after(afterSeq, max)
  }

  latest(limit: number): DecisionRecord[] {
    return this.#ring.latest(limit)
  }

  /** The record whose decision id is `decisionId`, newest first (ids repeat only for cached ALLOWs). */
  findByDecisionId(decisionId: string): DecisionRecord | undefined {
    for (let seq = this.#ring.lastSeq; seq >= this.#ring.firstSeq && seq > 0; seq--) {
      const record = this.#ring.get(seq)
      if (record?.decisionId === decisionId) return record
    }
    return undefined
  }

  /** `wake` is called at most once per event-loop turn after new records; the subscriber pulls. Returns the unsubscribe. */
  subscribe(wake: () => void): () => void {
    this.#subscribers.add(wake)
    return () => this.#subscribers.delete(wake)
  }

  get subscriberCount(): number {
    return this.#subscribers.size
  }
}

/** The last break-glass overrides (a rare event, so a small ring is enough). */
export class OverrideLog {
  readonly #ring: SequencedRing<OverrideRecord>

  constructor(capacity = 100) {
    this.#ring = new SequencedRing(capacity)
  }

  record(record: OverrideRecord): void {
    this.#ring.push(record)
  }

  latest(limit: number): OverrideRecord[] {
    return this.#ring.latest(limit)
  }
}

/** The gateway's state as `GET /v1/gateway/status` reports it. */
export interface GatewayStatus {
  readonly bundleRevision: string | null
  /** Seconds since the bundle was last confirmed; null without a bundle. */
  readonly bundleAgeSeconds: number | null
  readonly stale: boolean
  readonly mode: string
  /** The modes the routes enforce (a route's own, else `mode`). */
  readonly routeModes?: readonly string[]
  /** `embedded`, `http`, `opa` or `none` (badge-only). */
  readonly pdp: string
  readonly ready: boolean
  /** The organization whose bundle the embedded PDP enforces (SERVICE_WORKSPACE); null without one. */
  readonly workspace: string | null
}

/**
 * What the admin plane reads of this process's gateway. `status()` is null while no gateway runs here (an
 * admin-only process, or before the gateway started); the feeds then stay empty.
 */
export interface GatewayView {
  readonly decisions: DecisionFeed
  readonly overrides: OverrideLog
  status(): GatewayStatus | null
}
