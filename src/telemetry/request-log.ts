/**
 * The gateway's per-request log line, written without pino on the hot path.
 *
 * Through pino the line was a third of the gateway's overhead over a bare forwarder (docs/performance.md,
 * "Hot-path choices"): its generic serialisation with redaction, and the destination's per-write cost
 * (sonic-boom re-measures its pending buffer on every write, so each line costs more the more is
 * pending). Here the line's fields are fixed by the gateway's code, so they are serialised directly,
 * and lines are handed to the logger's own destination in one write per event-loop turn. The output
 * is the same JSON shape as every other log line (level, time, service, msg), on the same stream, so
 * ordering with other lines is kept per write.
 *
 * Lines are written at the end of the event-loop turn, but at most once per FLUSH_INTERVAL_MS: under
 * load a turn handles a few requests only, so a write per turn costs a write per few requests; batching
 * over a few milliseconds makes it a fraction of that, and a lone line still goes out at once.
 */
import { symbols as pinoSymbols, type Logger } from 'pino'

/** A value of a request log field; undefined fields are left out, as pino does. */
export type FieldValue = string | number | boolean | undefined | null | readonly string[]

interface Destination {
  write(chunk: string): unknown
}

const LEVELS: Readonly<Record<string, number>> = { trace: 10, debug: 20, info: 30, warn: 40, error: 50, fatal: 60 }

/** Minimum time between two writes to the destination while lines keep coming. */
const FLUSH_INTERVAL_MS = 5
/** Pending bytes (UTF-16 units) that force a write without waiting for the interval. */
const FLUSH_BYTES = 64 * 1024

let lastTimeMs = -1
let lastTime = ''

/**
 * A time (epoch ms) as ISO 8601, formatted once per millisecond: every log line and every PDP request of
 * a busy process would otherwise format its own Date (~1 % of the gateway's CPU under load for the log
 * lines alone). Requests arrive in time order, so remembering the last millisecond is enough.
 */
export function isoTimeAt(ms: number): string {
  if (ms !== lastTimeMs) {
    lastTimeMs = ms
    lastTime = new Date(ms).toISOString()
  }
  return lastTime
}

/** The current time as {@link isoTimeAt} formats it. Shared with pino's timestamp option in logger.ts, so all lines agree. */
export function cachedIsoTime(): string {
  return isoTimeAt(Date.now())
}

export class RequestLogWriter {
  readonly #destination: Destination
  /** `{"level":30,"time":"` */
  readonly #prefix: string
  /** `","service":"…"`: what follows the time. */
  readonly #afterTime: string
  readonly #enabled: boolean
  #pending: string[] = []
  #pendingLength = 0
  #scheduled = false
  #timer: NodeJS.Timeout | null = null
  #lastFlush = 0
  readonly #flush = (): void => this.flush()
  readonly #flushSoon = (): void => this.#flushWhenDue()

  /**
   * @param logger the process logger: its destination, `service` base field and level are reused, so
   *   the lines look exactly like pino's and obey SERVICE_LOG_LEVEL.
   * @param level the level of every line.
   */
  constructor(logger: Logger, level: 'info' | 'warn' = 'info') {
    this.#destination = (logger as unknown as Record<symbol, Destination>)[pinoSymbols.streamSym]
    this.#enabled = logger.isLevelEnabled(level)
    const service = (logger.bindings() as { service?: unknown }).service
    this.#prefix = `{"level":${LEVELS[level]},"time":"`
    this.#afterTime = '"' + (typeof service === 'string' ? `,"service":${JSON.stringify(service)}` : '')
  }

  get enabled(): boolean {
    return this.#enabled
  }

  /**
   * Queues one line. `fields` keys are code constants (never escaped); every string value is escaped.
   * Written out at the end of the current event-loop turn (or a few ms later under load), or by `flush()`.
   */
  write(fields: Readonly<Record<string, FieldValue>>, msg: string): void {
    if (!this.#enabled) return
    let fragment = ''
    for (const key in fields) {
      const value = fields[key]
      if (value === undefined) continue
      fragment += ',"' + key + '":' + jsonValue(value)
    }
    this.writeFragment(fragment, RequestLogWriter.ending(msg))
  }

  /** The end of a line with message `msg`, for {@link writeFragment}: compute it once per message. */
  static ending(msg: string): string {
    return ',"msg":' + JSON.stringify(msg) + '}\n'
  }

  /**
   * Queues one line from a pre-serialised fragment: `,"key":value` pairs whose values the caller
   * escaped with {@link jsonValue} (or knows to be JSON already), and an {@link ending}. The gateway
   * builds its line this way, without an intermediate object per request.
   */
  writeFragment(fragment: string, ending: string): void {
    if (!this.#enabled) return
    const line = this.#prefix + cachedIsoTime() + this.#afterTime + fragment + ending
    this.#pending.push(line)
    this.#pendingLength += line.length
    if (this.#pendingLength >= FLUSH_BYTES) return this.flush()
    if (!this.#scheduled) {
      this.#scheduled = true
      setImmediate(this.#flushSoon)
    }
  }

  #flushWhenDue(): void {
    const wait = this.#lastFlush + FLUSH_INTERVAL_MS - performance.now()
    if (wait <= 0) return this.flush()
    this.#timer = setTimeout(this.#flush, wait)
  }

  /** Hands every queued line to the destination in one write. */
  flush(): void {
    this.#scheduled = false
    if (this.#timer !== null) {
      clearTimeout(this.#timer)
      this.#timer = null
    }
    if (this.#pending.length === 0) return
    const chunk = this.#pending.length === 1 ? (this.#pending[0] as string) : this.#pending.join('')
    this.#pending = []
    this.#pendingLength = 0
    this.#lastFlush = performance.now()
    this.#destination.write(chunk)
  }
}

// Printable ASCII other than `"` and `\\`: such a string is its own JSON body (DIDs, jtis, ids, codes).
const JSON_SAFE = /^[\x20\x21\x23-\x5b\x5d-\x7e]*$/

/**
 * A field value as JSON: numbers as JSON.stringify writes them (non-finite as null), strings escaped.
 * A string that needs no escaping is quoted directly, at half the cost of JSON.stringify.
 */
export function jsonValue(value: Exclude<FieldValue, undefined>): string {
  if (typeof value === 'string') return JSON_SAFE.test(value) ? '"' + value + '"' : JSON.stringify(value)
  return typeof value === 'number' ? (Number.isFinite(value) ? String(value) : 'null') : JSON.stringify(value)
}
