/**
 * One upstream origin behind keep-alive undici Pools (one for requests that accept an event stream, one for
 * the others), and the streaming forwarder (docs/architecture.md, "The path of a proxied request", step 7). Answers are timed by {@link IdleWatch} rather than undici's
 * per-request timers (docs/performance.md, "Hot-path choices"): the head and an ordinary body by the
 * upstream time-out, a `text/event-stream` body by the stream idle limit, none by default (docs/mcp.md, "Streams").
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Transform } from 'node:stream'
import type { TLSSocket } from 'node:tls'
import { errors, Pool, type Dispatcher } from 'undici'
import { CONSOLE_COOKIE, setsConsoleCookie, withoutConsoleCookie } from '../../core/console-cookie.js'
import { lowerHeaderName } from '../ingress/header-names.js'
import type { UnderscoreHeaders } from '../ingress/routes.js'

/** RFC 9110 §7.6.1 plus `keep-alive` and `proxy-connection`; removed both ways, with every name in `Connection`. */
export const HOP_BY_HOP: ReadonlySet<string> = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
])

export interface ForwardOptions {
  /** The canonical target the decision was made on; default `req.url`. */
  readonly target?: string
  readonly headersWithUnderscores?: UnderscoreHeaders
  /** A flat [name, value…] list (the verified identity) replacing any client copy. */
  readonly add: readonly string[]
  /** Lower-case names removed from the client's request besides hop-by-hop ones. */
  readonly strip: ReadonlySet<string>
  /** Append to the client's X-Forwarded-For rather than replace it. */
  readonly trustedPeer: boolean
  /** A flat list replacing any upstream copy. */
  readonly responseHeaders?: readonly string[]
  /** Sent both ways as `X-Service-Txn`, apart from the lists so none is built per request. */
  readonly txnId?: string
  /** A body already read whole (an MCP route's), sent instead of the request stream. */
  readonly body?: Buffer | null
  /** Rewrites some answers' bodies (an MCP route's list answers); null: every body streams through untouched. */
  readonly responseFilter?: ResponseFilter | null
}

export interface ResponseFilter {
  /** The transform for a response with this head (`rawHeaders` as undici gives them), or null to pass its body through untouched. */
  filterFor(status: number, contentType: string | undefined, contentEncoding: string | undefined, rawHeaders: readonly Buffer[]): Transform | null
}

/** Called once when a forward ends, with the caller's own context object (no closure per request). */
export type ForwardDone<C> = (context: C, result: ForwardResult) => void

/** `ok: true`: settled, the caller must not write to `res`; `ok: false`: nothing written, the caller answers. */
export type ForwardResult = { ok: true; status: number } | { ok: false; code: 'UPSTREAM_UNAVAILABLE' | 'UPSTREAM_TIMEOUT' }

/** nginx's "client closed request", for the log line only. */
export const CLIENT_CLOSED_STATUS = 499

export interface UpstreamOptions {
  /** Connect, headers and body (idle) timeout in ms; the connect timeout is capped at 10 s. */
  readonly timeoutMs: number
  /** Longest silence in a `text/event-stream` answer's body, in ms; 0 or absent: no limit. */
  readonly streamIdleMs?: number
  /** Maximum keep-alive connections to the origin for ordinary requests (default 128). */
  readonly connections?: number
}

const TIMEOUT_CODES: ReadonlySet<string> = new Set([
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
  'ETIMEDOUT',
])

// Frozen results shared by every request: they carry no per-request data.
const UNAVAILABLE: ForwardResult = Object.freeze({ ok: false, code: 'UPSTREAM_UNAVAILABLE' })
const TIMED_OUT: ForwardResult = Object.freeze({ ok: false, code: 'UPSTREAM_TIMEOUT' })
const CLIENT_CLOSED: ForwardResult = Object.freeze({ ok: true, status: CLIENT_CLOSED_STATUS })
const OK_200: ForwardResult = Object.freeze({ ok: true, status: 200 })

/** The answer to {@link Upstream.fetchWhole}. */
export type WholeAnswer =
  | { ok: true; status: number; headers: Record<string, string | string[] | undefined>; body: Buffer }
  | { ok: false; code: 'UPSTREAM_UNAVAILABLE' | 'UPSTREAM_TIMEOUT' }
  | { ok: false; code: null; tooLarge: true }

const TOO_LARGE: WholeAnswer = Object.freeze({ ok: false, code: null, tooLarge: true })

function failedWith(error: unknown): WholeAnswer {
  const code = (error as { code?: unknown } | null)?.code
  return { ok: false, code: typeof code === 'string' && TIMEOUT_CODES.has(code) ? 'UPSTREAM_TIMEOUT' : 'UPSTREAM_UNAVAILABLE' }
}

// Request headers the forwarder replaces or that undici refuses to send (`expect`: the Node server
// already answered `100 Continue` itself, so the upstream sees a plain request).
const HOST = 'host'
const EXPECT = 'expect'
const XFF = 'x-forwarded-for'
const XFP = 'x-forwarded-proto'
const XFH = 'x-forwarded-host'
// RFC 7239 carries the same claims as X-Forwarded-*; from an untrusted peer it would be a forgery.
const FORWARDED = 'forwarded'
const CONTENT_LENGTH = 'content-length'
const CONTENT_TYPE = 'content-type'
const EVENT_STREAM = /^[ \t]*text\/event-stream[ \t]*(?:;|$)/i
// The operator console's session cookie: browsers send it to the gateway too when both planes share a
// host (cookies ignore ports), and it must reach no upstream; nor may an upstream set it.
const COOKIE = 'cookie'
const SET_COOKIE = 'set-cookie'
const ACCEPT = 'accept'

/**
 * TCP keep-alive probes start after this long without traffic on the sockets of an event stream, both the
 * client's and the upstream's (undici's default): a stream with no idle limit still ends when a peer vanishes.
 */
export const STREAM_KEEPALIVE_MS = 60_000

const kForward = Symbol('upstream.forward')
type TrackedResponse = ServerResponse & { [kForward]?: ForwardHandler<unknown> | null }

// CGI, WSGI and Rack read `X_Service_Subject` as `X-Service-Subject`, so such a spelling never passes.
export function spellsGatewayHeader(lower: string): boolean {
  const normalised = lower.replaceAll('_', '-')
  return normalised.startsWith('x-service-') || normalised.startsWith('x-forwarded-') || normalised === 'forwarded' ||
    normalised === 'host' || normalised === 'content-length' || HOP_BY_HOP.has(normalised)
}

function listHasName(list: readonly string[], lower: string): boolean {
  for (let j = 0; j < list.length; j += 2) {
    const name = list[j]!
    if (name.length === lower.length && name.toLowerCase() === lower) return true
  }
  return false
}

/** Lower-case tokens of a Connection header value that name extra hop-by-hop headers (null if none). */
function connectionTokens(value: string): Set<string> | null {
  // The usual values name no extra header: skip the split (every upstream answer carries one).
  if (value.length <= 10 && (value === 'keep-alive' || value === 'close' || value.toLowerCase() === 'keep-alive' || value.toLowerCase() === 'close')) return null
  let tokens: Set<string> | null = null
  for (const part of value.split(',')) {
    const token = part.trim().toLowerCase()
    if (token === '' || token === 'close' || token === 'keep-alive') continue
    ;(tokens ??= new Set()).add(token)
  }
  return tokens
}

/** Removes the [name, value] pairs whose lower-cased name is in `names` (rare path: Connection tokens). */
function removeNames(list: string[], names: ReadonlySet<string>): string[] {
  const kept: string[] = []
  for (let i = 0; i < list.length; i += 2) {
    if (!names.has(list[i]!.toLowerCase())) kept.push(list[i]!, list[i + 1]!)
  }
  return kept
}

/** The peer address as it goes into X-Forwarded-For: IPv4-mapped IPv6 shown as plain IPv4. */
function peerAddress(req: IncomingMessage): string | undefined {
  const address = req.socket.remoteAddress
  return address !== undefined && address.startsWith('::ffff:') && address.includes('.') ? address.slice(7) : address
}

const TXN = 'x-service-txn'

function resolveWith(resolve: (result: ForwardResult) => void, result: ForwardResult): void {
  resolve(result)
}

// Shared listeners (no per-request closure): `this` is the response, the handler hangs off a symbol.
function onResponseDrain(this: TrackedResponse): void {
  this[kForward]?.drained()
}
function onResponseClose(this: TrackedResponse): void {
  this[kForward]?.clientClosed()
}

/** A forward the {@link IdleWatch} times: an intrusive list node (no allocation to add or remove). */
interface Watched {
  /** performance.now() of the last progress: on a socket, response head, body chunk, client drained. */
  lastActivity: number
  prevWatched: Watched | null
  nextWatched: Watched | null
  /** The head was written but is still held by Node for the first body bytes. */
  headPending: boolean
  /** Ends the forward as timed out (through undici's abort, so its onError runs and unlinks it). */
  timeOut(): void
  /** Sends the held head on its own: the body is slower than a sweep. */
  flushHead(): void
}

/** One timer, armed only while a forward is on a socket, fires within a tenth of the timeout. */
class IdleWatch {
  #head: Watched | null = null
  #timer: NodeJS.Timeout | null = null
  #armed = false
  readonly #intervalMs: number
  readonly #sweep = (): void => this.sweep()

  constructor(readonly timeoutMs: number) {
    this.#intervalMs = Math.min(500, Math.max(1, Math.floor(timeoutMs / 10)))
  }

  add(watched: Watched): void {
    watched.prevWatched = null
    watched.nextWatched = this.#head
    if (this.#head !== null) this.#head.prevWatched = watched
    this.#head = watched
    if (this.#armed) return
    this.#armed = true
    // One Timeout for the life of the upstream, re-armed with refresh() (no allocation).
    if (this.#timer === null) this.#timer = setTimeout(this.#sweep, this.#intervalMs).unref()
    else this.#timer.refresh()
  }

  remove(watched: Watched): void {
    const { prevWatched, nextWatched } = watched
    if (prevWatched === null) this.#head = nextWatched
    else prevWatched.nextWatched = nextWatched
    if (nextWatched !== null) nextWatched.prevWatched = prevWatched
    watched.prevWatched = null
    watched.nextWatched = null
  }

  sweep(): void {
    const now = performance.now()
    let node = this.#head
    while (node !== null) {
      // timeOut() unlinks the node: take its successor first.
      const next = node.nextWatched
      if (now - node.lastActivity >= this.timeoutMs) node.timeOut()
      else if (node.headPending) node.flushHead()
      node = next
    }
    this.#armed = this.#head !== null
    if (this.#armed) this.#timer!.refresh()
  }

  close(): void {
    if (this.#timer !== null) clearTimeout(this.#timer)
    this.#armed = false
  }
}

/** The watches of one upstream: heads and ordinary bodies, and event-stream bodies (null: not timed). */
interface Watches {
  readonly answer: IdleWatch
  readonly stream: IdleWatch | null
}

/** undici's native handler callbacks, which the pool calls without any adapter. */
class ForwardHandler<C> implements Dispatcher.DispatchHandler, Watched {
  lastActivity = 0
  prevWatched: Watched | null = null
  nextWatched: Watched | null = null
  headPending = false
  /** The watch this forward is in, if any. */
  #watch: IdleWatch | null = null
  #abort: ((err?: Error) => void) | null = null
  #resume: (() => void) | null = null
  #status = 0
  #settled = false
  #clientGone = false
  #waitingDrain = false
  /** The transform the body goes through, when the response filter chose one. */
  #filter: Transform | null = null

  constructor(
    private readonly res: TrackedResponse,
    private readonly responseHeaders: readonly string[] | undefined,
    private readonly txnId: string | undefined,
    private readonly context: C,
    private readonly done: ForwardDone<C>,
    private readonly watches: Watches,
    /** The head is awaited by undici's headers timer (a request body still streaming) rather than the watch. */
    private readonly undiciTimesHead: boolean,
    private readonly responseFilter: ResponseFilter | null,
  ) {}

  /** Called by undici when the request is put on a socket; may repeat if a pipelined request is retried. */
  onConnect(abort: (err?: Error) => void): void {
    this.#abort = abort
    // The client may have left while the request waited in the pool's queue.
    if (this.#clientGone) return abort(new Error('client closed the connection'))
    // As undici's headers timer: the time-out runs from the moment the request is on a socket.
    this.lastActivity = performance.now()
    if (!this.undiciTimesHead && this.#watch === null && this.#status === 0 && !this.#settled) this.#watchBy(this.watches.answer)
  }

  timeOut(): void {
    this.#abort?.(this.#status === 0 ? new errors.HeadersTimeoutError() : new errors.BodyTimeoutError())
  }

  flushHead(): void {
    this.headPending = false
    if (!this.#settled && !this.res.destroyed) this.res.flushHeaders()
  }

  #watchBy(watch: IdleWatch | null): void {
    if (this.#watch === watch) return
    this.#watch?.remove(this)
    this.#watch = watch
    watch?.add(this)
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[], resume: () => void): boolean {
    // 1xx informational answers (103 Early Hints…) are not relayed: the final head follows.
    if (statusCode < 200) return true
    const res = this.res
    if (this.#settled) return false
    if (res.destroyed) {
      this.#clientGone = true
      this.#abort?.(new Error('client closed the connection'))
      return false
    }
    this.#resume = resume
    this.lastActivity = performance.now()
    const extra = this.responseHeaders
    const txnId = this.txnId
    const filter = this.responseFilter === null ? null : this.#chooseFilter(statusCode, rawHeaders)
    let headers: string[] = []
    let tokens: Set<string> | null = null
    let eventStream = false
    for (let i = 0; i < rawHeaders.length; i += 2) {
      const name = rawHeaders[i]!.toString('latin1')
      const lower = lowerHeaderName(name)
      // A rewritten body has a length of its own: Node frames it as chunked.
      if (filter !== null && lower === CONTENT_LENGTH) continue
      if (HOP_BY_HOP.has(lower)) {
        if (lower === 'connection') {
          const named = connectionTokens(rawHeaders[i + 1]!.toString('latin1'))
          if (named !== null) tokens = tokens === null ? named : new Set([...tokens, ...named])
        }
        continue
      }
      if (extra !== undefined && listHasName(extra, lower)) continue
      if (txnId !== undefined && lower === TXN) continue
      const value = rawHeaders[i + 1]!.toString('latin1')
      // Any event-stream type among the copies: a stream wrongly timed as an answer would be cut.
      if (lower === CONTENT_TYPE) eventStream ||= EVENT_STREAM.test(value)
      else if (lower === SET_COOKIE && setsConsoleCookie(value)) continue
      headers.push(name, value)
    }
    if (tokens !== null) headers = removeNames(headers, tokens)
    if (extra !== undefined) for (let i = 0; i < extra.length; i++) headers.push(extra[i]!)
    if (txnId !== undefined) headers.push(TXN, txnId)
    try {
      if (res.getHeaderNames().length === 0) {
        res.writeHead(statusCode, headers)
      } else {
        // writeHead merges an array into headers set earlier with setHeader, which would collapse
        // repeated headers (Set-Cookie) to the last one; appendHeader keeps them all.
        for (let i = 0; i < headers.length; i += 2) res.appendHeader(headers[i]!, headers[i + 1]!)
        res.writeHead(statusCode)
      }
    } catch {
      // A head Node refuses to write (invalid characters): nothing reached the client, so the caller
      // can still answer 502.
      this.#abort?.(new Error('invalid upstream response head'))
      this.#finish(UNAVAILABLE)
      return false
    }
    this.#status = statusCode
    if (eventStream) {
      // A stream's head is news of its own (an SSE client counts the stream open from it): sent now, not
      // with the first event; and the stream's silences are its own, timed by the stream limit if any.
      res.flushHeaders()
      res.socket?.setKeepAlive(true, STREAM_KEEPALIVE_MS)
      this.#watchBy(this.watches.stream)
    } else {
      // Usually the body is in the same read and leaves with the head; the watch's sweep sends it when not.
      this.headPending = true
      this.#watchBy(this.watches.answer)
    }
    if (filter !== null) this.#startFilter(filter)
    return true
  }

  #chooseFilter(statusCode: number, rawHeaders: Buffer[]): Transform | null {
    let contentType: string | undefined
    let contentEncoding: string | undefined
    for (let i = 0; i < rawHeaders.length; i += 2) {
      const name = lowerHeaderName(rawHeaders[i]!.toString('latin1'))
      if (name === 'content-type') contentType = rawHeaders[i + 1]!.toString('latin1')
      else if (name === 'content-encoding') contentEncoding = rawHeaders[i + 1]!.toString('latin1')
    }
    return this.responseFilter!.filterFor(statusCode, contentType, contentEncoding, rawHeaders)
  }

  #startFilter(filter: Transform): void {
    this.#filter = filter
    const res = this.res
    filter.on('data', (chunk: Buffer) => {
      if (!res.write(chunk)) {
        filter.pause()
        res.once('drain', () => filter.resume())
      }
    })
    filter.on('end', () => {
      if (this.#settled) return
      this.#finish(null)
      res.end()
      this.done(this.context, { ok: true, status: this.#status })
    })
    filter.on('error', () => {
      if (this.#settled) return
      // The head is out: a cut connection is the only honest signal left.
      this.#abort?.(new Error('response filter failed'))
      this.#finish(null)
      res.destroy()
      this.done(this.context, { ok: true, status: this.#status })
    })
    filter.on('drain', () => this.#resume?.())
  }

  onData(chunk: Buffer): boolean {
    if (this.#settled) return false
    this.lastActivity = performance.now()
    this.headPending = false
    const filter = this.#filter
    if (filter !== null) return filter.write(chunk)
    const res = this.res
    if (res.write(chunk)) return true
    // Back-pressure: undici pauses the upstream socket until the client drains.
    if (!this.#waitingDrain) {
      this.#waitingDrain = true
      res.on('drain', onResponseDrain)
    }
    return false
  }

  onComplete(): void {
    if (this.#settled) return
    // The filter's 'end' finishes the response once the last of the body went through it.
    if (this.#filter !== null) return void this.#filter.end()
    const status = this.#status
    // Detach before end(): the response's own 'close' after a normal finish is not a client abort.
    this.#finish(null)
    this.res.end()
    this.done(this.context, status === 200 ? OK_200 : { ok: true, status })
  }

  onError(err: Error): void {
    if (this.#settled) return
    if (this.#status !== 0) {
      // The head is out: the only honest signal left is a cut connection (truncated response).
      this.#finish(null)
      this.res.destroy()
      this.done(this.context, { ok: true, status: this.#status })
    } else if (this.#clientGone) {
      this.#finish(CLIENT_CLOSED)
    } else {
      const code = (err as Error & { code?: unknown }).code
      this.#finish(typeof code === 'string' && TIMEOUT_CODES.has(code) ? TIMED_OUT : UNAVAILABLE)
    }
  }

  /** The client's connection closed before the response finished: stop the upstream request. */
  clientClosed(): void {
    if (this.#settled || this.res.writableFinished) return
    this.#clientGone = true
    this.#abort?.(new Error('client closed the connection'))
  }

  /** The client drained its socket buffer: let undici read from the upstream again. */
  drained(): void {
    this.#waitingDrain = false
    this.lastActivity = performance.now()
    this.res.off('drain', onResponseDrain)
    this.#resume?.()
  }

  #finish(result: ForwardResult | null): void {
    this.#settled = true
    this.headPending = false
    if (this.#filter !== null && !this.#filter.destroyed && !this.#filter.writableFinished) this.#filter.destroy()
    if (this.#watch !== null) {
      this.#watch.remove(this)
      this.#watch = null
    }
    const res = this.res
    res[kForward] = null
    res.off('close', onResponseClose)
    if (this.#waitingDrain) res.off('drain', onResponseDrain)
    if (result !== null) this.done(this.context, result)
  }
}

export class Upstream {
  readonly origin: string
  /** Path prepended to every request path: '' or `/segment…` without a trailing slash. */
  readonly basePath: string
  readonly #pool: Pool
  /**
   * Requests that accept an event stream: a stream may hold its connection for hours, so these never
   * queue behind the ordinary pool's limit, nor make ordinary requests queue behind them.
   */
  readonly #streamPool: Pool
  readonly #watch: IdleWatch
  readonly #watches: Watches

  /** @throws TypeError when `url` is not a valid http(s) URL or carries a query or fragment. */
  constructor(url: string, options: UpstreamOptions) {
    const parsed = new URL(url)
    if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') throw new TypeError(`upstream must be http or https: ${url}`)
    if (parsed.search !== '' || parsed.hash !== '') throw new TypeError(`upstream must not carry a query or fragment: ${url}`)
    this.origin = parsed.origin
    this.basePath = parsed.pathname.replace(/\/+$/, '')
    const timeout = options.timeoutMs
    const streamIdle = options.streamIdleMs ?? 0
    this.#watch = new IdleWatch(timeout)
    this.#watches = { answer: this.#watch, stream: streamIdle > 0 ? new IdleWatch(streamIdle) : null }
    // Per request instead: undici's headers timer while a request body streams, the IdleWatch otherwise.
    const common = {
      pipelining: 1, headersTimeout: 0, bodyTimeout: 0,
      connect: { timeout: Math.min(timeout, 10_000), keepAlive: true, keepAliveInitialDelay: STREAM_KEEPALIVE_MS },
    }
    this.#pool = new Pool(this.origin, { ...common, connections: options.connections ?? 128 })
    // One connection per open stream, as the clients would open without the gateway.
    this.#streamPool = new Pool(this.origin, { ...common, connections: null })
  }

  /** Never rejects; header rules in docs/wire-contract.md §9, "Forwarding". */
  forward(req: IncomingMessage, res: ServerResponse, options: ForwardOptions): Promise<ForwardResult> {
    return new Promise((resolve) => this.forwardTo(req, res, options, resolve, resolveWith))
  }

  /** The hot path: `done(context, result)` exactly once, perhaps before this returns; no closure per request. */
  forwardTo<C>(req: IncomingMessage, res: ServerResponse, options: ForwardOptions, context: C, done: ForwardDone<C>): void {
    // The client may have left while earlier stages (badge, PDP) ran: no point bothering the upstream.
    if (res.destroyed) return done(context, CLIENT_CLOSED)
    const raw = req.rawHeaders
    const { strip, add, trustedPeer, txnId } = options
    const allowUnderscores = options.headersWithUnderscores === 'allow'
    let headers: string[] = []
    let hasBody = false
    let host: string | undefined
    let xff: string | undefined
    let xfp: string | undefined
    let xfh: string | undefined
    let tokens: Set<string> | null = null
    let acceptsStream = false
    for (let i = 0; i < raw.length; i += 2) {
      const name = raw[i]!
      let value = raw[i + 1]!
      const lower = lowerHeaderName(name)
      if (lower.includes('_') && (!allowUnderscores || spellsGatewayHeader(lower))) continue
      if (HOP_BY_HOP.has(lower)) {
        if (lower === 'connection') {
          const named = connectionTokens(value)
          if (named !== null) tokens = tokens === null ? named : new Set([...tokens, ...named])
        } else if (lower === 'transfer-encoding') {
          // framingProblem admitted only a single `chunked`; undici re-chunks the stream itself.
          hasBody = true
        }
        continue
      }
      switch (lower) {
        case HOST:
          host = value
          continue
        case XFF:
          xff = xff === undefined ? value : `${xff}, ${value}`
          continue
        case XFP:
          xfp ??= value
          continue
        case XFH:
          xfh ??= value
          continue
        case EXPECT:
          continue
        case FORWARDED:
          if (!trustedPeer) continue
          break
        case CONTENT_LENGTH:
          if (value !== '0') hasBody = true
          break
        case ACCEPT:
          // As SSE clients send it (EventSource, the MCP and A2A SDKs); a miss only picks the other pool.
          if (value.includes('text/event-stream')) acceptsStream = true
          break
        case COOKIE:
          if (value.includes(CONSOLE_COOKIE)) {
            const kept = withoutConsoleCookie(value)
            if (kept === null) continue
            value = kept
          }
          break
      }
      if (strip.has(lower) || listHasName(add, lower) || (txnId !== undefined && lower === TXN)) continue
      headers.push(name, value)
    }
    if (tokens !== null) headers = removeNames(headers, tokens)

    const peer = peerAddress(req)
    if (trustedPeer && xff !== undefined) headers.push(XFF, peer === undefined ? xff : `${xff}, ${peer}`)
    else if (peer !== undefined) headers.push(XFF, peer)
    headers.push(XFP, trustedPeer && xfp !== undefined ? xfp : (req.socket as TLSSocket).encrypted === true ? 'https' : 'http')
    const forwardedHost = trustedPeer && xfh !== undefined ? xfh : host
    if (forwardedHost !== undefined) headers.push(XFH, forwardedHost)
    for (let i = 0; i < add.length; i++) headers.push(add[i]!)
    if (txnId !== undefined) headers.push(TXN, txnId)

    const target = options.target ?? req.url ?? '/'

    const tracked = res as TrackedResponse
    // A body read whole goes out at once, so the watch times its head as it times a bodiless request's.
    const streamingBody = hasBody && options.body == null
    const handler = new ForwardHandler(
      tracked, options.responseHeaders, txnId, context, done, this.#watches, streamingBody, options.responseFilter ?? null,
    )
    tracked[kForward] = handler as ForwardHandler<unknown>
    tracked.on('close', onResponseClose)
    const path = this.basePath + target
    const method = req.method as Dispatcher.HttpMethod
    // dispatch reports its own argument errors through handler.onError, so this never throws.
    const body = options.body ?? null
    const pool = acceptsStream ? this.#streamPool : this.#pool
    if (body !== null) {
      pool.dispatch({ path, method, headers, body }, handler)
    } else if (hasBody) {
      // The answer's body is the watch's once its head is in: what it is decides how it is timed.
      pool.dispatch({ path, method, headers, body: req, headersTimeout: this.#watch.timeoutMs, bodyTimeout: 0 }, handler)
    } else {
      pool.dispatch({ path, method, headers, body: null }, handler)
    }
  }

  /**
   * A GET whose answer the gateway reads whole (the public agent card, stages/a2a-card.ts): at most
   * `maxBytes` of body, timed by the route's time-out; never rejects.
   */
  async fetchWhole(target: string, headers: Record<string, string>, maxBytes: number): Promise<WholeAnswer> {
    const timeout = this.#watch.timeoutMs
    let answer: Dispatcher.ResponseData
    try {
      answer = await this.#pool.request({ path: this.basePath + target, method: 'GET', headers, headersTimeout: timeout, bodyTimeout: timeout })
    } catch (error) {
      return failedWith(error)
    }
    const chunks: Buffer[] = []
    let size = 0
    try {
      for await (const chunk of answer.body as AsyncIterable<Buffer>) {
        size += chunk.length
        if (size > maxBytes) {
          answer.body.destroy()
          return TOO_LARGE
        }
        chunks.push(chunk)
      }
    } catch (error) {
      return failedWith(error)
    }
    return { ok: true, status: answer.statusCode, headers: answer.headers, body: Buffer.concat(chunks, size) }
  }

  async close(): Promise<void> {
    await Promise.all([this.#pool.close(), this.#streamPool.close()])
    this.#watch.close()
    this.#watches.stream?.close()
  }
}

