/**
 * The gateway's end of the registry's watch stream (`GET /v1/gateway/watch`, docs/api.md): one stream per
 * process, read through a bounded SSE reader, every event validated (registry-documents.ts). The stream is
 * "up" from its `ready` event until it ends, fails, sends something out of shape or stays silent past twice
 * its announced heartbeat; then it is reconnected with a growing, jittered delay.
 */
import { SseReader, type SseEvent } from '../../core/sse.js'
import type { RegistryClient } from './registry-client.js'
import { MAX_WATCH_EVENT_BYTES, parseWatchEvent, type WatchEvent } from './registry-documents.js'

export interface WatchHandlers {
  /** The stream is up: what changed while it was down (or before it was first up) must be re-read now. */
  onUp(): void
  /** An event other than `ready`. */
  onEvent(event: WatchEvent): void
  /** The stream went down (it was up) or a connect attempt failed (`wasUp` false). */
  onDown(error: unknown, wasUp: boolean): void
}

export interface WatchOptions {
  /** Path and query of the stream, relative to the registry URL. */
  readonly path: string
  /** How long the `ready` event may take after connecting. */
  readonly readyTimeoutMs: number
  readonly backoffMinMs?: number
  readonly backoffMaxMs?: number
}

const DEFAULT_BACKOFF_MIN_MS = 250
const DEFAULT_BACKOFF_MAX_MS = 30_000

export class RegistryWatch {
  readonly #client: RegistryClient
  readonly #handlers: WatchHandlers
  readonly #options: WatchOptions
  #up = false
  #stopped = true
  #abort: (() => void) | null = null
  #retry: NodeJS.Timeout | null = null
  #attempt = 0
  #running: Promise<void> | null = null
  /** Callers of {@link settled} waiting for the first connect attempt's outcome. */
  readonly #waiters = new Set<() => void>()

  constructor(client: RegistryClient, handlers: WatchHandlers, options: WatchOptions) {
    this.#client = client
    this.#handlers = handlers
    this.#options = options
  }

  get up(): boolean {
    return this.#up
  }

  /** Resolves once the stream is up or an attempt failed, or after `timeoutMs`, whichever comes first. */
  settled(timeoutMs: number): Promise<void> {
    if (this.#up || this.#stopped) return Promise.resolve()
    return new Promise((resolve) => {
      const done = (): void => {
        clearTimeout(timer)
        this.#waiters.delete(done)
        resolve()
      }
      const timer = setTimeout(done, timeoutMs)
      timer.unref()
      this.#waiters.add(done)
    })
  }

  #wake(): void {
    for (const waiter of [...this.#waiters]) waiter()
  }

  start(): void {
    if (!this.#stopped) return
    this.#stopped = false
    this.#connect()
  }

  async stop(): Promise<void> {
    this.#stopped = true
    this.#wake()
    if (this.#retry !== null) clearTimeout(this.#retry)
    this.#retry = null
    this.#abort?.()
    await this.#running
  }

  #connect(): void {
    this.#retry = null
    if (this.#stopped) return
    this.#running = this.#session().then(
      () => this.#ended(new Error('the watch stream ended')),
      (error: unknown) => this.#ended(error),
    )
  }

  #ended(error: unknown): void {
    this.#abort = null
    const wasUp = this.#up
    this.#up = false
    if (this.#stopped) return
    this.#handlers.onDown(error, wasUp)
    this.#wake()
    if (wasUp) this.#attempt = 0
    const min = this.#options.backoffMinMs ?? DEFAULT_BACKOFF_MIN_MS
    const max = this.#options.backoffMaxMs ?? DEFAULT_BACKOFF_MAX_MS
    const delay = Math.min(max, min * 2 ** Math.min(this.#attempt, 20))
    this.#attempt++
    // Jitter, so that a fleet cut off together does not reconnect in one burst.
    this.#retry = setTimeout(() => this.#connect(), Math.round(delay * (0.5 + Math.random() / 2)))
    this.#retry.unref()
  }

  /** One connection: resolves when the stream ends, rejects on any fault. */
  async #session(): Promise<void> {
    const stream = await this.#client.stream(this.#options.path, 'text/event-stream')
    let failure: unknown = null
    let silence: NodeJS.Timeout | null = null
    let silenceMs = this.#options.readyTimeoutMs
    const fail = (error: unknown): void => {
      failure ??= error
      stream.abort()
    }
    const arm = (): void => {
      if (silence !== null) clearTimeout(silence)
      silence = setTimeout(() => fail(new Error(`the watch stream was silent for ${silenceMs} ms`)), silenceMs)
      silence.unref()
    }
    this.#abort = () => fail(new Error('the watch stream was stopped'))
    if (this.#stopped) stream.abort()
    arm()
    const reader = new SseReader(MAX_WATCH_EVENT_BYTES)
    const onEvent = (raw: SseEvent): void => {
      const event = parseWatchEvent(raw.event, raw.data)
      if (event === null) return
      if (event.kind === 'ready') {
        if (this.#up) throw new Error('the watch stream sent a second ready event')
        // Twice the interval and a second more: one late heartbeat is not yet a dead connection.
        silenceMs = event.heartbeatMs * 2 + 1000
        this.#up = true
        this.#handlers.onUp()
        this.#wake()
        return
      }
      if (!this.#up) throw new Error(`the watch stream sent ${event.kind} before ready`)
      this.#handlers.onEvent(event)
    }
    try {
      for await (const chunk of stream.body) {
        if (failure !== null) break
        arm()
        reader.push(chunk, onEvent)
      }
    } catch (error) {
      failure ??= error
    } finally {
      if (silence !== null) clearTimeout(silence)
      stream.abort()
    }
    if (failure !== null) throw failure
  }
}
