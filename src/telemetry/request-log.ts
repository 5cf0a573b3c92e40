// The gateway's request log line without pino (docs/performance.md, "Hot-path choices"): pino's JSON
// shape, on pino's own destination, batched into one write at most every FLUSH_INTERVAL_MS.
import { symbols as pinoSymbols, type Logger } from 'pino'

/** A value of a request log field; undefined fields are left out, as pino does. */
export type FieldValue = string | number | boolean | undefined | null | readonly string[]

interface Destination {
  write(chunk: string): unknown
}

const LEVELS: Readonly<Record<string, number>> = { trace: 10, debug: 20, info: 30, warn: 40, error: 50, fatal: 60 }

const FLUSH_INTERVAL_MS = 5
/** Pending UTF-16 units that force a write without waiting for the interval. */
const FLUSH_BYTES = 64 * 1024

let lastTimeMs = -1
let lastTime = ''
/** The start (epoch ms) of the second `secondText` (`YYYY-MM-DDTHH:MM:SS.`) names; -1: none yet. */
let secondStartMs = -1
let secondText = ''

// Formatted once per millisecond, not per line; requests arrive in time order, so one entry is enough.
// Within one second only the milliseconds change: they are appended to the second's text, with no Date.
export function isoTimeAt(ms: number): string {
  if (ms !== lastTimeMs) {
    lastTimeMs = ms
    const into = ms - secondStartMs
    if (secondStartMs >= 0 && into >= 0 && into < 1000 && Number.isInteger(into)) {
      lastTime = secondText + (into < 10 ? '00' : into < 100 ? '0' : '') + into + 'Z'
    } else {
      lastTime = new Date(ms).toISOString()
      // Only a plain four-digit year has the 24-character form; anything else is formatted each time.
      if (ms >= 0 && Number.isInteger(ms) && lastTime.length === 24) {
        secondStartMs = ms - (ms % 1000)
        secondText = lastTime.slice(0, 20)
      } else secondStartMs = -1
    }
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

  /** Reuses the logger's destination, `service` field and level, so the lines look like pino's. */
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

  /** `fields` keys are code constants (never escaped); every string value is escaped. */
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

  /** `fragment`: `,"key":value` pairs whose values the caller escaped with {@link jsonValue} or knows are JSON. */
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

/** Non-finite numbers as null; a string needing no escape is quoted directly, at half the cost of JSON.stringify. */
export function jsonValue(value: Exclude<FieldValue, undefined>): string {
  if (typeof value === 'string') return JSON_SAFE.test(value) ? '"' + value + '"' : JSON.stringify(value)
  return typeof value === 'number' ? (Number.isFinite(value) ? String(value) : 'null') : JSON.stringify(value)
}
