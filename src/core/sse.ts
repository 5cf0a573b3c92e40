/**
 * Server-sent events, read incrementally and written, by the WHATWG HTML standard's parsing rules. Lines
 * are split on bytes and decoded whole, so an event split anywhere (inside a CRLF or a UTF-8 character)
 * reads the same, and each event keeps its exact bytes for a proxy to pass on unchanged.
 */

/** The fields of one event, as a client would see them when it is dispatched. */
export interface SseFields {
  /** The `data` lines joined with "\n"; undefined when the event has none (a client then dispatches nothing). */
  readonly data?: string | undefined
  /** The last `event` field (the event type; a client reads "" or none as "message"). */
  readonly event?: string | undefined
  /** The last `id` field without a NUL (those are ignored); "" resets the client's last event id. */
  readonly id?: string | undefined
  /** The last `retry` field made of ASCII digits only (the reconnection time in milliseconds). */
  readonly retry?: number | undefined
}

/** One event: every block of lines ended by a blank line, including blocks with no field at all. */
export interface SseEvent extends SseFields {
  /**
   * The bytes as they arrived, through the ending blank line (may share memory with the pushed chunks),
   * a leading BOM included. When a chunk ended on a CRLF's CR, its LF opens the next event's bytes.
   */
  readonly raw: Buffer
}

export class SseEventTooLargeError extends Error {
  readonly code = 'SSE_EVENT_TOO_LARGE'
  override readonly name = 'SseEventTooLargeError'

  constructor(readonly limit: number) {
    super(`A server-sent event exceeds ${limit} bytes.`)
  }
}

const LF = 0x0a
const CR = 0x0d
const COLON = 0x3a
const SPACE = 0x20

function asBuffer(chunk: Uint8Array): Buffer {
  return Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength)
}

function isAsciiDigits(value: string): boolean {
  if (value === '') return false
  for (let i = 0; i < value.length; i++) {
    const code = value.charCodeAt(i)
    if (code < 0x30 || code > 0x39) return false
  }
  return true
}

/**
 * Reads events pushed in chunks of any size, holding at most one unfinished event: one larger than
 * `maxEventBytes` throws SseEventTooLargeError, and the reader then refuses every further chunk.
 */
export class SseReader {
  private readonly maxEventBytes: number
  /** Earlier chunks' bytes of the unfinished event, and of its unfinished line (a suffix of those). */
  private eventParts: Buffer[] = []
  private eventPartsBytes = 0
  private lineParts: Buffer[] = []
  /** The last byte read was a CR ending a line, so an LF next is the rest of that line end. */
  private afterCr = false
  private firstLine = true
  private failure: SseEventTooLargeError | undefined
  private data: string | undefined
  private event: string | undefined
  private id: string | undefined
  private retry: number | undefined

  constructor(maxEventBytes: number) {
    if (!Number.isSafeInteger(maxEventBytes) || maxEventBytes < 1) throw new RangeError('maxEventBytes must be a positive integer')
    this.maxEventBytes = maxEventBytes
  }

  /**
   * Reads `chunk` and calls `onEvent` for each event it completes, in order. An oversized event throws
   * after the events before it were handed over.
   */
  push(chunk: Uint8Array, onEvent: (event: SseEvent) => void): void {
    if (this.failure !== undefined) throw this.failure
    const buf = asBuffer(chunk)
    const length = buf.length
    if (length === 0) return
    let eventStart = 0
    let lineStart = 0
    if (this.afterCr) {
      this.afterCr = false
      if (buf[0] === LF) lineStart = 1
    }
    let nextLf = buf.indexOf(LF, lineStart)
    let nextCr = buf.indexOf(CR, lineStart)
    while (nextLf !== -1 || nextCr !== -1) {
      const end = nextCr === -1 || (nextLf !== -1 && nextLf < nextCr) ? nextLf : nextCr
      let after = end + 1
      if (end === nextCr) {
        if (after === length) this.afterCr = true
        else if (buf[after] === LF) after++
      }
      if (this.readLine(this.lineBytes(buf, lineStart, end))) {
        const size = this.eventPartsBytes + after - eventStart
        if (size > this.maxEventBytes) throw this.fail()
        const raw = this.eventParts.length === 0 ? buf.subarray(eventStart, after) : this.joinEvent(buf.subarray(eventStart, after), size)
        onEvent(this.dispatch(raw))
        eventStart = after
      }
      lineStart = after
      if (nextLf !== -1 && nextLf < after) nextLf = buf.indexOf(LF, after)
      if (nextCr !== -1 && nextCr < after) nextCr = buf.indexOf(CR, after)
    }
    if (lineStart < length) this.lineParts.push(buf.subarray(lineStart))
    if (eventStart < length) {
      this.eventParts.push(buf.subarray(eventStart))
      this.eventPartsBytes += length - eventStart
      if (this.eventPartsBytes > this.maxEventBytes) throw this.fail()
    }
  }

  /** Ends the stream: returns the bytes of the unfinished event, which a client discards (empty when none). */
  end(): Buffer {
    const rest = Buffer.concat(this.eventParts, this.eventPartsBytes)
    this.eventParts = []
    this.eventPartsBytes = 0
    this.lineParts = []
    this.data = this.event = this.id = this.retry = undefined
    return rest
  }

  private fail(): SseEventTooLargeError {
    this.failure = new SseEventTooLargeError(this.maxEventBytes)
    this.eventParts = []
    this.lineParts = []
    return this.failure
  }

  private lineBytes(buf: Buffer, start: number, end: number): Buffer {
    let line = buf.subarray(start, end)
    if (this.lineParts.length > 0) {
      this.lineParts.push(line)
      line = Buffer.concat(this.lineParts)
      this.lineParts = []
    }
    if (this.firstLine) {
      this.firstLine = false
      if (line.length >= 3 && line[0] === 0xef && line[1] === 0xbb && line[2] === 0xbf) line = line.subarray(3)
    }
    return line
  }

  private joinEvent(last: Buffer, size: number): Buffer {
    this.eventParts.push(last)
    const raw = Buffer.concat(this.eventParts, size)
    this.eventParts = []
    this.eventPartsBytes = 0
    return raw
  }

  /** Applies one line to the event being read; true when the line is blank, which ends the event. */
  private readLine(line: Buffer): boolean {
    if (line.length === 0) return true
    const colon = line.indexOf(COLON)
    // A comment line (starting with a colon) has the empty name, which is no field.
    const nameEnd = colon === -1 ? line.length : colon
    // No field this reader knows is longer than five bytes, so longer names are not decoded at all.
    if (nameEnd > 5) return false
    let valueStart = colon === -1 ? line.length : colon + 1
    if (line[valueStart] === SPACE) valueStart++
    const name = line.toString('latin1', 0, nameEnd)
    if (name === 'data') {
      const value = line.toString('utf8', valueStart)
      this.data = this.data === undefined ? value : `${this.data}\n${value}`
    } else if (name === 'event') {
      this.event = line.toString('utf8', valueStart)
    } else if (name === 'id') {
      const value = line.toString('utf8', valueStart)
      if (!value.includes('\0')) this.id = value
    } else if (name === 'retry') {
      const value = line.toString('latin1', valueStart)
      // Beyond 2^53 ms a reconnection never happens either way; the clamp keeps the value an exact integer.
      if (isAsciiDigits(value)) this.retry = Math.min(Number(value), Number.MAX_SAFE_INTEGER)
    }
    return false
  }

  private dispatch(raw: Buffer): SseEvent {
    const event: SseEvent = { raw, data: this.data, event: this.event, id: this.id, retry: this.retry }
    this.data = this.event = this.id = this.retry = undefined
    return event
  }
}

function refuseLineBreak(field: string, value: string): void {
  if (value.includes('\n') || value.includes('\r')) throw new RangeError(`An SSE ${field} field cannot hold a line break`)
}

/**
 * One event in the wire format, data with line breaks written as several `data` lines (read back joined
 * with "\n"). Throws RangeError for an `event` or `id` with a line break, an `id` with NUL (a reader would
 * ignore it) and a `retry` that is not a non-negative integer.
 */
export function sseEvent(fields: SseFields): string {
  let out = ''
  if (fields.event !== undefined) {
    refuseLineBreak('event', fields.event)
    out += `event: ${fields.event}\n`
  }
  if (fields.id !== undefined) {
    refuseLineBreak('id', fields.id)
    if (fields.id.includes('\0')) throw new RangeError('An SSE id field cannot hold NUL')
    out += `id: ${fields.id}\n`
  }
  if (fields.retry !== undefined) {
    if (!Number.isSafeInteger(fields.retry) || fields.retry < 0) throw new RangeError('An SSE retry field must be a non-negative integer')
    out += `retry: ${fields.retry}\n`
  }
  if (fields.data !== undefined) {
    for (const line of fields.data.split(/\r\n|\r|\n/)) out += `data: ${line}\n`
  }
  return `${out}\n`
}
