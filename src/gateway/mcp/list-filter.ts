/**
 * Removes from an MCP server's list answers (`tools/list`, `prompts/list`, `resources/list`,
 * `resources/templates/list`) every item the caller may not use, on the way back to the client, for both
 * answer types of the Streamable HTTP transport: one JSON body, or a stream of server-sent events. A list
 * answer is known by its shape, not by its id: any message whose `result` holds an array named `tools`,
 * `prompts`, `resources` or `resourceTemplates` has each such array filtered, since a resumed stream replays
 * answers to requests the gateway never saw and ids can be reused. Every other message goes through byte
 * for byte. Defaults are closed: an item without a name, a JSON body that
 * cannot be read and an SSE event whose data is not JSON never reach the client.
 */
import { Transform, type TransformCallback } from 'node:stream'
import { isRecord } from '../../core/json-objects.js'
import { SseReader, sseEvent, type SseEvent } from '../../core/sse.js'
import { ListAnswerCache } from './list-cache.js'

import type { ListKind } from '../../core/mcp-methods.js'

export type { ListKind }

export interface ListFilterOptions {
  /** The upstream answer's media type: `application/json` or `text/event-stream`. */
  readonly mediaType: 'json' | 'sse'
  /** Whether the caller may use the item named `name`; only `true` keeps it. */
  readonly allowed: (kind: ListKind, name: string) => boolean | Promise<boolean>
  /**
   * The answer has a content coding: its bytes are not the text, so none may pass for holding no list
   * (a JSON body is then replaced by the error, every SSE event with data dropped).
   */
  readonly encoded?: boolean
  /** json: the largest body read; sse: the largest single event. */
  readonly maxBytes: number
  /**
   * json, not encoded: filtered answers kept under `context` (list-cache.ts says what it must name), so the
   * same upstream answer is served from `store` without asking `allowed` again, until `notAfterMs`.
   */
  readonly cache?: { readonly store: ListAnswerCache; readonly context: string; readonly nowMs: number; readonly notAfterMs: number }
}

/** The filtering stream, with the number of items it removed so far, per kind. */
export interface ListFilter extends Transform {
  readonly removed: Readonly<Record<ListKind, number>>
}

const NAME_MEMBER: Readonly<Record<ListKind, string>> = {
  tools: 'name',
  prompts: 'name',
  resources: 'uri',
  resourceTemplates: 'uriTemplate',
}

const UNREADABLE_ANSWER = JSON.stringify({
  jsonrpc: '2.0',
  id: null,
  error: { code: -32603, message: "The gateway could not read the upstream's list answer." },
})

const UTF8_BOM = Buffer.from([0xef, 0xbb, 0xbf])
const LF = 0x0a
const CR = 0x0d
const LF_BYTE = Buffer.from('\n')

const LIST_KINDS: readonly ListKind[] = ['tools', 'prompts', 'resources', 'resourceTemplates']

/**
 * Whether a message's text could hold a list member: every member name is written in the text literally or
 * with `\u` escapes, and all four names end in `s`, so text with neither `s"` nor `\u` holds none and is
 * passed on without being parsed.
 */
function mayHoldList(text: string): boolean {
  return text.includes('s"') || text.includes('\\u')
}

/** A list found in a parsed message, with its items' verdicts once known. */
interface ListAnswer {
  readonly result: Record<string, unknown>
  readonly kind: ListKind
  readonly items: readonly unknown[]
  readonly keep: boolean[]
}

/** Serialised replacement of a message; null when the rewritten message cannot be serialised. */
type Rewrite = string | null

class ListRewriter {
  readonly removed: Record<ListKind, number> = { tools: 0, prompts: 0, resources: 0, resourceTemplates: 0 }

  constructor(private readonly allowed: ListFilterOptions['allowed']) {}

  /**
   * The filtered serialisation of a parsed message or batch, or undefined when it holds no list (the
   * original bytes then stand). A verdict that throws or rejects rejects the promise.
   */
  rewrite(parsed: unknown): undefined | Rewrite | Promise<Rewrite> {
    let answers: ListAnswer[] | undefined
    let waits: Promise<void>[] | undefined
    const messages = Array.isArray(parsed) ? parsed : [parsed]
    for (const message of messages) {
      if (!isRecord(message) || !isRecord(message.result)) continue
      for (const kind of LIST_KINDS) {
        const items = message.result[kind]
        if (!Array.isArray(items)) continue
        const answer: ListAnswer = { result: message.result, kind, items, keep: new Array<boolean>(items.length) }
        ;(answers ??= []).push(answer)
        const wait = this.judge(answer)
        if (wait !== undefined) (waits ??= []).push(wait)
      }
    }
    if (answers === undefined) return undefined
    const found = answers
    if (waits === undefined) return this.apply(parsed, found)
    return Promise.all(waits).then(() => this.apply(parsed, found))
  }

  // Every verdict is asked at once; each lands at its item's index, so the order is the upstream's.
  private judge(answer: ListAnswer): Promise<void> | undefined {
    const { kind, items, keep } = answer
    const member = NAME_MEMBER[kind]
    let waits: Promise<void>[] | undefined
    for (let i = 0; i < items.length; i++) {
      const item = items[i]
      const name = isRecord(item) ? item[member] : undefined
      if (typeof name !== 'string') {
        keep[i] = false
        continue
      }
      let verdict: boolean | Promise<boolean>
      try {
        verdict = this.allowed(kind, name)
      } catch (error) {
        // Thrown after an earlier verdict was a promise, a bare throw would leave that promise's rejection unhandled.
        verdict = Promise.reject(error)
      }
      if (typeof verdict === 'boolean') keep[i] = verdict
      else (waits ??= []).push(Promise.resolve(verdict).then((v) => { keep[i] = v === true }))
    }
    return waits === undefined ? undefined : Promise.all(waits).then(() => undefined)
  }

  private apply(parsed: unknown, answers: readonly ListAnswer[]): Rewrite {
    for (const { result, kind, items, keep } of answers) {
      const kept = items.filter((_, i) => keep[i] === true)
      this.removed[kind] += items.length - kept.length
      result[kind] = kept
    }
    try {
      return JSON.stringify(parsed)
    } catch {
      // JSON.parse accepts nesting deeper than JSON.stringify's recursion can write back.
      return null
    }
  }
}

function isPromise<T>(value: T | Promise<T>): value is Promise<T> {
  return value instanceof Promise
}

/** application/json: the whole body, read up to the limit, filtered, then written at once. */
class JsonListFilter extends Transform implements ListFilter {
  private readonly rewriter: ListRewriter
  private chunks: Buffer[] = []
  private size = 0
  private tooLarge = false

  constructor(private readonly options: ListFilterOptions) {
    super()
    this.rewriter = new ListRewriter(options.allowed)
  }

  get removed(): Readonly<Record<ListKind, number>> {
    return this.rewriter.removed
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    if (!this.tooLarge) {
      this.size += chunk.length
      if (this.size > this.options.maxBytes) {
        this.tooLarge = true
        this.chunks = []
      } else {
        this.chunks.push(chunk)
      }
    }
    done()
  }

  override _flush(done: TransformCallback): void {
    if (this.tooLarge) {
      done(null, Buffer.from(UNREADABLE_ANSWER))
      return
    }
    const body = this.chunks.length === 1 ? this.chunks[0] as Buffer : Buffer.concat(this.chunks, this.size)
    this.chunks = []
    let parsed: unknown
    try {
      // A client reads the body as fetch's json() does: UTF-8, one leading BOM ignored.
      const text = body.subarray(0, 3).equals(UTF8_BOM) ? body.toString('utf8', 3) : body.toString('utf8')
      if (this.options.encoded !== true && !mayHoldList(text)) {
        done(null, body)
        return
      }
      parsed = JSON.parse(text)
    } catch {
      done(null, Buffer.from(UNREADABLE_ANSWER))
      return
    }
    const cache = this.options.encoded === true ? undefined : this.options.cache
    const key = cache === undefined ? null : ListAnswerCache.key(cache.context, body)
    if (cache !== undefined && key !== null) {
      const hit = cache.store.get(key, cache.nowMs)
      if (hit !== undefined) {
        const removed = this.rewriter.removed
        for (const kind of LIST_KINDS) removed[kind] += hit.removed[kind]
        done(null, hit.bytes)
        return
      }
    }
    const settle = (rewrite: undefined | Rewrite): void => {
      if (rewrite === undefined || rewrite === null) {
        done(null, rewrite === undefined ? body : Buffer.from(UNREADABLE_ANSWER))
        return
      }
      const bytes = Buffer.from(rewrite)
      if (cache !== undefined && key !== null) cache.store.set(key, { bytes, removed: { ...this.rewriter.removed }, notAfterMs: cache.notAfterMs }, cache.nowMs)
      done(null, bytes)
    }
    const rewrite = this.rewriter.rewrite(parsed)
    if (isPromise(rewrite)) rewrite.then(settle, done)
    else settle(rewrite)
  }
}

/** text/event-stream: each event leaves as soon as it is complete and judged, in the upstream's order. */
class SseListFilter extends Transform implements ListFilter {
  private readonly rewriter: ListRewriter
  private readonly reader: SseReader
  private readonly events: SseEvent[] = []
  private readonly collect = (event: SseEvent): void => { this.events.push(event) }
  private lastEndedInCr = false
  private lastPassedRaw = true

  private readonly encoded: boolean

  constructor(options: ListFilterOptions) {
    super()
    this.rewriter = new ListRewriter(options.allowed)
    this.reader = new SseReader(options.maxBytes)
    this.encoded = options.encoded === true
  }

  get removed(): Readonly<Record<ListKind, number>> {
    return this.rewriter.removed
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    let failure: Error | undefined
    try {
      this.reader.push(chunk, this.collect)
    } catch (error) {
      failure = error as Error
    }
    this.drain(0, failure, done)
  }

  // An unfinished event at the end is dropped: a client discards it too, and one that did not could see an unfiltered list.
  override _flush(done: TransformCallback): void {
    const rest = this.reader.end()
    if (rest[0] === LF && this.lastEndedInCr && this.lastPassedRaw) this.push(LF_BYTE)
    done()
  }

  /** Passes on the collected events from `from`, waiting where a verdict is pending; then calls `done`. */
  private drain(from: number, failure: Error | undefined, done: TransformCallback): void {
    const events = this.events
    for (let i = from; i < events.length; i++) {
      const event = events[i] as SseEvent
      const out = this.filterEvent(event)
      if (isPromise(out)) {
        out.then((bytes) => {
          this.pass(event, bytes)
          this.drain(i + 1, failure, done)
        }, (error: Error) => {
          events.length = 0
          done(error)
        })
        return
      }
      this.pass(event, out)
    }
    events.length = 0
    done(failure)
  }

  /**
   * Pushes an event's outcome. When a chunk ended on the CR of a CRLF that closed an event, the reader
   * hands the LF to the next event; it is put back where reading the whole stream would have it, so the
   * output does not depend on how the upstream's bytes were chunked.
   */
  private pass(event: SseEvent, out: Buffer | null): void {
    const raw = event.raw
    const carriedLf = this.lastEndedInCr && raw[0] === LF
    const passedRaw = out === raw
    if (passedRaw) this.push(carriedLf && !this.lastPassedRaw ? raw.subarray(1) : raw)
    else {
      if (carriedLf && this.lastPassedRaw) this.push(LF_BYTE)
      if (out !== null) this.push(out)
    }
    this.lastEndedInCr = raw[raw.length - 1] === CR
    this.lastPassedRaw = passedRaw
  }

  /** The bytes to pass on for one event, or null to drop it. */
  // Empty data carries no message: MCP servers send it with an id and retry to prime a resumable stream.
  private filterEvent(event: SseEvent): Buffer | null | Promise<Buffer | null> {
    if (event.data === undefined || event.data === '' || (!this.encoded && !mayHoldList(event.data))) return event.raw
    let parsed: unknown
    try {
      parsed = JSON.parse(event.data)
    } catch {
      return null
    }
    const rewrite = this.rewriter.rewrite(parsed)
    if (rewrite === undefined) return event.raw
    if (isPromise(rewrite)) return rewrite.then((data) => rewritten(event, data))
    return rewritten(event, rewrite)
  }
}

function rewritten(event: SseEvent, data: Rewrite): Buffer | null {
  if (data === null) return null
  return Buffer.from(sseEvent({ event: event.event, id: event.id, retry: event.retry, data }))
}

/**
 * The stream between an upstream's answer body and the client. `pending` and `allowed` are read while
 * the answer streams; `removed` counts what was taken out. In json mode a body over `maxBytes` or not
 * JSON becomes a JSON-RPC error (id null, -32603); in sse mode an event over `maxBytes` ends the stream
 * with SseEventTooLargeError, and an event whose data is neither empty nor JSON is dropped. A verdict that
 * throws or rejects ends the stream with that error.
 */
export function createListFilter(options: ListFilterOptions): ListFilter {
  if (!Number.isSafeInteger(options.maxBytes) || options.maxBytes < 1) throw new RangeError('maxBytes must be a positive integer')
  if (options.mediaType === 'json') return new JsonListFilter(options)
  if (options.mediaType === 'sse') return new SseListFilter(options)
  throw new RangeError(`unknown media type: ${String(options.mediaType)}`)
}
