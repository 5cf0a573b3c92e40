/**
 * Where the admin plane keeps the gateways' decision events and heartbeats (docs/console.md, "Live
 * decisions"): in this process (one appliance, no Redis) or in Redis when REDIS_URL is set, so that every
 * admin instance reads the same events, ids and gateways. Events are numbered from 1 in both stores; with
 * Redis the number is the stream entry id's first part (`<seq>-0`), given by one script per batch.
 */
import type { Redis } from 'ioredis'
import { ServiceError } from '../../core/errors.js'
import { SequencedRing, type FeedSlice } from '../../telemetry/decision-feed.js'

/** One stored entry: a decision event, or a gap a gateway reported (events it lost before sending). */
export interface StoredEvent {
  /** The store's sequence number: the list's `seq`, the stream's event id. */
  seq: number
  readonly kind: 'decision' | 'gap'
  /** Fixed when stored: null = operators only. */
  readonly orgId: string | null
  readonly decisionId: string | null
  /** The event as listed, without `seq` and `pdp_request`; for a gap, `{gateway_id, dropped, from_seq, to_seq}`. */
  readonly event: Readonly<Record<string, unknown>>
  readonly pdpRequest: object | null
}

/**
 * The input of {@link DecisionStore.append}: an entry before it is numbered, with the reporting gateway's
 * own sequence number (a gap's is its `to_seq`) when the report names its run.
 */
export type NewEvent = Omit<StoredEvent, 'seq'> & { readonly gatewaySeq?: number }

/**
 * Which gateway process sent a batch: its id and its run (one per process start, since a restarted gateway
 * numbers its events from 1 again). A retried report of the same run stores only what is above the highest
 * gateway sequence number already stored for that gateway.
 */
export interface ReportSource {
  readonly gatewayId: string
  readonly run: string
}

/** A gateway's last heartbeat as stored. */
export interface GatewayHeartbeat {
  readonly gatewayId: string
  readonly version: string
  readonly status: Readonly<Record<string, unknown>>
  /** Epoch ms the admin plane received it. */
  readonly receivedAt: number
  readonly intervalMs: number
  /** The organization the gateway decides for, when the reporting key may say so (null: operators only). */
  readonly orgId: string | null
  /** Events the gateway reported lost, summed over its reports. */
  readonly droppedTotal: number
}

/** A report's heartbeat, stored with its events in one step. */
export interface HeartbeatUpdate {
  readonly heartbeat: Omit<GatewayHeartbeat, 'droppedTotal'>
  /** Events the report says the gateway lost, added to its total. */
  readonly dropped: number
}

/** Who may see an entry: an operator everything, a member its organization's. */
export type Visible = (orgId: string | null) => boolean

export interface DecisionStore {
  readonly kind: 'memory' | 'redis'
  /** The bound on events kept (the oldest leave). */
  readonly capacity: number
  /**
   * Numbers and stores the entries in order, and the heartbeat with them (in Redis in one script: a
   * report's events and heartbeat are stored together or not at all). With a `source`, entries whose
   * `gatewaySeq` is at or below the highest one stored for that gateway in the same run are skipped (a
   * retry of a report whose answer was lost), and so is the heartbeat's dropped count when its gap is.
   * Resolves to how many decision entries were stored.
   */
  append(entries: readonly NewEvent[], heartbeat?: HeartbeatUpdate, source?: ReportSource): Promise<number>
  /** The newest `limit` visible decisions, oldest first. */
  latest(limit: number, visible: Visible): Promise<StoredEvent[]>
  /** Up to `max` entries after `seq`, oldest first, and the numbers that left the store before a reader got to them. */
  after(seq: number, max: number): Promise<FeedSlice<StoredEvent>>
  /** The newest decision with that decision id (ids repeat only for cached ALLOWs). */
  findByDecisionId(decisionId: string): Promise<StoredEvent | undefined>
  /** The newest sequence number (0 when empty). */
  lastSeq(): Promise<number>
  /** `wake` is called after new entries (at most once per turn here; within a poll interval from other instances). */
  subscribe(wake: () => void): () => void
  putHeartbeat(heartbeat: Omit<GatewayHeartbeat, 'droppedTotal'>, dropped: number): Promise<void>
  heartbeats(): Promise<GatewayHeartbeat[]>
  close(): Promise<void>
}

/** Gateways not heard from for this long are forgotten (their ids are per process, so they come and go). */
export const GATEWAY_FORGET_MS = 24 * 60 * 60 * 1000
/** Gateways remembered at most, so that a stream of made-up ids cannot grow the table without bound. */
export const GATEWAYS_MAX = 1000

/** Wakes subscribers once per event-loop turn, as the gateway's own feed does. */
class Subscribers {
  readonly #set = new Set<() => void>()
  #scheduled = false
  readonly #wake = (): void => {
    this.#scheduled = false
    for (const wake of this.#set) {
      try {
        wake()
      } catch {
        // One subscriber's failure is its own.
      }
    }
  }

  add(wake: () => void): () => void {
    this.#set.add(wake)
    return () => this.#set.delete(wake)
  }

  get size(): number {
    return this.#set.size
  }

  notify(): void {
    if (this.#set.size > 0 && !this.#scheduled) {
      this.#scheduled = true
      setImmediate(this.#wake)
    }
  }
}

function forgetOld<T extends { receivedAt: number }>(entries: Iterable<[string, T]>, now: number): { keep: [string, T][]; forget: string[] } {
  const keep: [string, T][] = []
  const forget: string[] = []
  for (const [id, entry] of entries) {
    if (now - entry.receivedAt > GATEWAY_FORGET_MS) forget.push(id)
    else keep.push([id, entry])
  }
  return { keep, forget }
}

/** The in-process store: a ring of `capacity` entries (today's buffer) and a map of heartbeats. */
export class MemoryDecisionStore implements DecisionStore {
  readonly kind = 'memory'
  readonly #ring: SequencedRing<StoredEvent>
  readonly #subscribers = new Subscribers()
  readonly #gateways = new Map<string, GatewayHeartbeat>()
  /** Per gateway: the run of its last report and the highest gateway sequence number stored for it. */
  readonly #highest = new Map<string, { run: string; seq: number }>()

  constructor(capacity: number, private readonly now: () => number = Date.now) {
    this.#ring = new SequencedRing(capacity)
  }

  get capacity(): number {
    return this.#ring.capacity
  }

  async append(entries: readonly NewEvent[], heartbeat?: HeartbeatUpdate, source?: ReportSource): Promise<number> {
    let kept = entries
    let dropped = heartbeat?.dropped ?? 0
    if (source !== undefined) {
      const previous = this.#highest.get(source.gatewayId)
      const floor = previous !== undefined && previous.run === source.run ? previous.seq : 0
      kept = entries.filter((entry) => entry.gatewaySeq === undefined || entry.gatewaySeq > floor)
      if (kept.length < entries.length && !kept.some((entry) => entry.kind === 'gap')) dropped = 0
      let top = floor
      for (const entry of kept) if (entry.gatewaySeq !== undefined && entry.gatewaySeq > top) top = entry.gatewaySeq
      this.#highest.delete(source.gatewayId)
      if (this.#highest.size >= GATEWAYS_MAX) {
        // Insertion order is the order of last reports, as for the heartbeats.
        const oldest = this.#highest.keys().next().value
        if (oldest !== undefined) this.#highest.delete(oldest)
      }
      this.#highest.set(source.gatewayId, { run: source.run, seq: top })
    }
    if (heartbeat !== undefined) await this.putHeartbeat(heartbeat.heartbeat, dropped)
    let decisions = 0
    for (const { gatewaySeq: _, ...entry } of kept) {
      const stored = { seq: 0, ...entry }
      stored.seq = this.#ring.push(stored)
      if (entry.kind === 'decision') decisions++
    }
    if (kept.length > 0) this.#subscribers.notify()
    return decisions
  }

  async latest(limit: number, visible: Visible): Promise<StoredEvent[]> {
    const out: StoredEvent[] = []
    for (let seq = this.#ring.lastSeq; seq >= this.#ring.firstSeq && seq > 0 && out.length < limit; seq--) {
      const entry = this.#ring.get(seq)
      if (entry !== undefined && entry.kind === 'decision' && visible(entry.orgId)) out.push(entry)
    }
    return out.reverse()
  }

  async after(seq: number, max: number): Promise<FeedSlice<StoredEvent>> {
    return this.#ring.after(seq, max)
  }

  async findByDecisionId(decisionId: string): Promise<StoredEvent | undefined> {
    for (let seq = this.#ring.lastSeq; seq >= this.#ring.firstSeq && seq > 0; seq--) {
      const entry = this.#ring.get(seq)
      if (entry?.kind === 'decision' && entry.decisionId === decisionId) return entry
    }
    return undefined
  }

  async lastSeq(): Promise<number> {
    return this.#ring.lastSeq
  }

  subscribe(wake: () => void): () => void {
    return this.#subscribers.add(wake)
  }

  async putHeartbeat(heartbeat: Omit<GatewayHeartbeat, 'droppedTotal'>, dropped: number): Promise<void> {
    const previous = this.#gateways.get(heartbeat.gatewayId)
    this.#gateways.delete(heartbeat.gatewayId)
    if (this.#gateways.size >= GATEWAYS_MAX) {
      // Insertion order is the order of last reports: the first is the longest silent.
      const oldest = this.#gateways.keys().next().value
      if (oldest !== undefined) this.#gateways.delete(oldest)
    }
    this.#gateways.set(heartbeat.gatewayId, { ...heartbeat, droppedTotal: (previous?.droppedTotal ?? 0) + dropped })
  }

  async heartbeats(): Promise<GatewayHeartbeat[]> {
    const { keep, forget } = forgetOld(this.#gateways.entries(), this.now())
    for (const id of forget) this.#gateways.delete(id)
    return keep.map(([, entry]) => entry)
  }

  async close(): Promise<void> {}
}

/**
 * Numbers and appends one batch atomically, with the reporting gateway's heartbeat: the next number follows
 * both the counter and the stream's last entry (so a lost counter cannot make ids go backwards), and
 * MAXLEN ~ bounds the stream. With a run, entries at or below the gateway's highest stored sequence number
 * of that run are skipped, and the highest is kept (`<run> <seq>` in KEYS[5], by gateway id) in the same
 * script, so that a retry cannot store twice even across admin instances. ARGV: maxlen, heartbeat gateway
 * id ('' for none), heartbeat JSON, dropped, source gateway id, run ('' for none), then six fields per
 * entry (gateway seq, '' for none, and the five stored). Returns the decision entries stored.
 */
const APPEND_SCRIPT = `
local floor = 0
if ARGV[6] ~= '' then
  local prev = redis.call('HGET', KEYS[5], ARGV[5])
  if prev then
    local run, seq = string.match(prev, '^(%S+) (%d+)$')
    if run == ARGV[6] then floor = tonumber(seq) end
  end
end
local n = (#ARGV - 6) / 6
local keep = {}
local top = floor
local skipped = false
local gap = false
for i = 0, n - 1 do
  local at = 7 + i * 6
  local g = ARGV[at]
  if g ~= '' and tonumber(g) <= floor then
    skipped = true
  else
    keep[#keep + 1] = at
    if g ~= '' and tonumber(g) > top then top = tonumber(g) end
    if ARGV[at + 1] == 'gap' then gap = true end
  end
end
if ARGV[6] ~= '' then redis.call('HSET', KEYS[5], ARGV[5], ARGV[6] .. ' ' .. top) end
local dropped = tonumber(ARGV[4])
if skipped and not gap then dropped = 0 end
if ARGV[2] ~= '' then
  redis.call('HSET', KEYS[3], ARGV[2], ARGV[3])
  if dropped > 0 then redis.call('HINCRBY', KEYS[4], ARGV[2], dropped) end
end
if #keep == 0 then return 0 end
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
local base = tonumber(redis.call('GET', KEYS[2]) or '0')
if last[1] ~= nil then
  local top = tonumber(string.match(last[1][1], '^(%d+)'))
  if top > base then base = top end
end
local decisions = 0
for _, at in ipairs(keep) do
  base = base + 1
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], base .. '-0', 'k', ARGV[at + 1], 'o', ARGV[at + 2], 'd', ARGV[at + 3], 'e', ARGV[at + 4], 'p', ARGV[at + 5])
  if ARGV[at + 1] == 'decision' then decisions = decisions + 1 end
end
redis.call('SET', KEYS[2], base)
return decisions
`

type StreamEntry = [id: string, fields: string[]]

function seqOfId(id: string): number {
  return Number(id.slice(0, id.indexOf('-') < 0 ? id.length : id.indexOf('-')))
}

function fieldsOf(fields: readonly string[]): Map<string, string> {
  const map = new Map<string, string>()
  for (let i = 0; i + 1 < fields.length; i += 2) map.set(fields[i] as string, fields[i + 1] as string)
  return map
}

function entryOf([id, raw]: StreamEntry): StoredEvent {
  const fields = fieldsOf(raw)
  const org = fields.get('o') ?? ''
  const decisionId = fields.get('d') ?? ''
  const pdp = fields.get('p') ?? ''
  return {
    seq: seqOfId(id),
    kind: fields.get('k') === 'gap' ? 'gap' : 'decision',
    orgId: org === '' ? null : org,
    decisionId: decisionId === '' ? null : decisionId,
    event: JSON.parse(fields.get('e') ?? '{}') as Record<string, unknown>,
    pdpRequest: pdp === '' ? null : (JSON.parse(pdp) as object),
  }
}

export interface RedisStoreOptions {
  readonly redis: Redis
  /** Whether the connection is up; commands are not even tried while it is not. */
  readonly ready: () => boolean
  /** Prefix of every key (SERVICE_DECISIONS_REDIS_PREFIX). */
  readonly prefix: string
  /** The stream's MAXLEN (~): SERVICE_CONSOLE_DECISIONS_BUFFER. */
  readonly capacity: number
  /** How often a subscribed instance looks for entries other instances appended (default 200 ms). */
  readonly pollMs?: number
  readonly now?: () => number
}

/** Entries read per XREVRANGE while scanning for a member's page or a decision id. */
const SCAN_PAGE = 500

/**
 * Redis Streams: one stream of entries (XADD MAXLEN ~ capacity: at least `capacity` are kept, at most about
 * 100 more, since trimming removes whole nodes), a counter, and a hash of heartbeats with the gateway id as
 * field. Any failure is `decision_store_unavailable` (503): the caller answers it, a gateway retries.
 */
export class RedisDecisionStore implements DecisionStore {
  readonly kind = 'redis'
  readonly capacity: number
  readonly #o: RedisStoreOptions
  readonly #stream: string
  readonly #counter: string
  readonly #gateways: string
  readonly #dropped: string
  readonly #highest: string
  readonly #subscribers = new Subscribers()
  #poll: NodeJS.Timeout | null = null
  #polledSeq = -1
  #polling = false

  constructor(options: RedisStoreOptions) {
    this.#o = options
    this.capacity = options.capacity
    this.#stream = `${options.prefix}events`
    this.#counter = `${options.prefix}seq`
    this.#gateways = `${options.prefix}gateways`
    this.#dropped = `${options.prefix}gateways:dropped`
    this.#highest = `${options.prefix}gateways:highest`
  }

  async #call<T>(fn: (redis: Redis) => Promise<T>): Promise<T> {
    if (!this.#o.ready()) throw new ServiceError('decision_store_unavailable')
    try {
      return await fn(this.#o.redis)
    } catch (error) {
      throw new ServiceError('decision_store_unavailable', undefined, undefined, { cause: error })
    }
  }

  async append(entries: readonly NewEvent[], heartbeat?: HeartbeatUpdate, source?: ReportSource): Promise<number> {
    if (entries.length === 0 && heartbeat === undefined) return 0
    const args: string[] = [
      String(this.capacity), heartbeat?.heartbeat.gatewayId ?? '', heartbeat === undefined ? '' : JSON.stringify(heartbeat.heartbeat), String(heartbeat?.dropped ?? 0),
      source?.gatewayId ?? '', source?.run ?? '',
    ]
    for (const entry of entries) {
      args.push(
        source === undefined || entry.gatewaySeq === undefined ? '' : String(entry.gatewaySeq),
        entry.kind, entry.orgId ?? '', entry.decisionId ?? '', JSON.stringify(entry.event), entry.pdpRequest === null ? '' : JSON.stringify(entry.pdpRequest),
      )
    }
    const stored = await this.#call((redis) => redis.eval(APPEND_SCRIPT, 5, this.#stream, this.#counter, this.#gateways, this.#dropped, this.#highest, ...args))
    if (entries.length > 0) this.#subscribers.notify()
    return Number(stored)
  }

  async #scanNewestFirst(keep: (entry: StoredEvent) => boolean): Promise<void> {
    let end = '+'
    for (let scanned = 0; scanned < this.capacity + SCAN_PAGE;) {
      const page = (await this.#call((redis) => redis.xrevrange(this.#stream, end, '-', 'COUNT', SCAN_PAGE))) as StreamEntry[]
      if (page.length === 0) return
      for (const raw of page) if (!keep(entryOf(raw))) return
      scanned += page.length
      const lastSeq = seqOfId((page[page.length - 1] as StreamEntry)[0])
      if (lastSeq <= 1) return
      end = `${lastSeq - 1}-0`
      if (page.length < SCAN_PAGE) return
    }
  }

  async latest(limit: number, visible: Visible): Promise<StoredEvent[]> {
    const out: StoredEvent[] = []
    await this.#scanNewestFirst((entry) => {
      if (entry.kind === 'decision' && visible(entry.orgId)) out.push(entry)
      return out.length < limit
    })
    return out.reverse()
  }

  async findByDecisionId(decisionId: string): Promise<StoredEvent | undefined> {
    let found: StoredEvent | undefined
    await this.#scanNewestFirst((entry) => {
      if (entry.kind === 'decision' && entry.decisionId === decisionId) found = entry
      return found === undefined
    })
    return found
  }

  async after(seq: number, max: number): Promise<FeedSlice<StoredEvent>> {
    const [first, last] = await this.#bounds()
    // A position ahead of the newest (the stream was reset) reads as the start, as in the ring.
    let from = seq > last ? 1 : seq + 1
    let missed: FeedSlice<StoredEvent>['missed'] = null
    if (first > 0 && from < first) {
      missed = { from, to: first - 1 }
      from = first
    }
    if (last === 0 || from > last) return { items: [], missed }
    const page = (await this.#call((redis) => redis.xrange(this.#stream, `${from}-0`, '+', 'COUNT', max))) as StreamEntry[]
    return { items: page.map(entryOf), missed }
  }

  async #bounds(): Promise<[number, number]> {
    const [first, last] = await this.#call(async (redis) => {
      const results = await redis.multi().xrange(this.#stream, '-', '+', 'COUNT', 1).xrevrange(this.#stream, '+', '-', 'COUNT', 1).exec()
      if (results === null) throw new Error('transaction aborted')
      for (const [error] of results) if (error !== null) throw error
      return [results[0]?.[1] as StreamEntry[], results[1]?.[1] as StreamEntry[]]
    })
    return [first?.[0] === undefined ? 0 : seqOfId(first[0][0]), last?.[0] === undefined ? 0 : seqOfId(last[0][0])]
  }

  async lastSeq(): Promise<number> {
    return (await this.#bounds())[1]
  }

  subscribe(wake: () => void): () => void {
    const unsubscribe = this.#subscribers.add(wake)
    if (this.#poll === null) {
      // Another instance's appends are seen by polling the stream's newest id while anyone listens here.
      this.#poll = setInterval(() => void this.#pollOnce(), this.#o.pollMs ?? 200)
      this.#poll.unref()
    }
    return () => {
      unsubscribe()
      if (this.#subscribers.size === 0 && this.#poll !== null) {
        clearInterval(this.#poll)
        this.#poll = null
        this.#polledSeq = -1
      }
    }
  }

  async #pollOnce(): Promise<void> {
    if (this.#polling || !this.#o.ready()) return
    this.#polling = true
    try {
      const last = await this.lastSeq()
      if (last !== this.#polledSeq) {
        this.#polledSeq = last
        this.#subscribers.notify()
      }
    } catch {
      // Redis is away: the streams stay open and quiet, and resume when it returns.
    } finally {
      this.#polling = false
    }
  }

  async putHeartbeat(heartbeat: Omit<GatewayHeartbeat, 'droppedTotal'>, dropped: number): Promise<void> {
    await this.#call(async (redis) => {
      const multi = redis.multi().hset(this.#gateways, heartbeat.gatewayId, JSON.stringify(heartbeat))
      if (dropped > 0) multi.hincrby(this.#dropped, heartbeat.gatewayId, dropped)
      const results = await multi.exec()
      for (const [error] of results ?? []) if (error !== null) throw error
    })
  }

  async heartbeats(): Promise<GatewayHeartbeat[]> {
    const [all, dropped] = await this.#call(async (redis) => Promise.all([redis.hgetall(this.#gateways), redis.hgetall(this.#dropped)]))
    const parsed: [string, Omit<GatewayHeartbeat, 'droppedTotal'>][] = []
    for (const [id, text] of Object.entries(all)) {
      try {
        parsed.push([id, JSON.parse(text) as Omit<GatewayHeartbeat, 'droppedTotal'>])
      } catch {
        // Not ours to show: forgotten below.
        parsed.push([id, { gatewayId: id, version: '', status: {}, receivedAt: 0, intervalMs: 0, orgId: null }])
      }
    }
    const { keep, forget } = forgetOld(parsed, (this.#o.now ?? Date.now)())
    if (forget.length > 0) await this.#call((redis) => redis.multi().hdel(this.#gateways, ...forget).hdel(this.#dropped, ...forget).hdel(this.#highest, ...forget).exec())
    return keep.map(([id, entry]) => ({ ...entry, droppedTotal: Number(dropped[id] ?? 0) }))
  }

  async close(): Promise<void> {
    if (this.#poll !== null) clearInterval(this.#poll)
    this.#poll = null
  }
}
