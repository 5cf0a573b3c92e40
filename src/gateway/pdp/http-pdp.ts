/**
 * The remote policy decision points (docs/api.md §2.12, docs/wire-contract.md §8, §13): an external PDP that takes the PDP
 * request as its POST body (`SERVICE_PDP_PROTOCOL=service`, the default) and OPA's data API
 * (`SERVICE_PDP_PROTOCOL=opa`, `{"input": <request>}` to `<base>/v1/data/service/policy`).
 *
 * This is on the gateway hot path whenever no cached decision applies, so a call does one
 * `JSON.stringify`, one request over a keep-alive pool, and answers through a single settle-once
 * exchange object. Every failure, including a PDP slower than `timeoutMs`, is `UNAVAILABLE` with a short
 * reason; the enforcement mode decides what that means for the request (docs/api.md §8).
 */
import { Pool, type Dispatcher } from 'undici'
import type { PdpRequest } from '../../core/policy/types.js'
import { HEADER_VALUE } from '../../http/header-syntax.js'
import { abandonBody, BodyTooLargeError, readBoundedBody } from '../../net/bounded-body.js'
import { statusReason, validatePdpDocument, type PdpUnavailableReason } from './pdp-answer.js'
import type { PdpAnswer, PolicyDecisionPoint } from './pdp.js'

/** Configuration of {@link createHttpPdp}, normally from `SERVICE_PDP_*` and `SERVICE_PEP_ID` (docs/api.md §8). */
export interface HttpPdpOptions {
  /**
   * `service`: the PDP URL, used exactly as given (path and query). `opa`: the OPA server's base URL;
   * decisions are asked at `<base>/v1/data/service/policy`.
   */
  endpoint: string
  protocol: 'service' | 'opa'
  /** Bound on the whole exchange (connect, headers and body), in milliseconds (`SERVICE_PDP_TIMEOUT_MS`). */
  timeoutMs: number
  /** Sent as `X-Service-PEP-ID` when set (`SERVICE_PEP_ID`). */
  pepId: string | null
  /** Most sockets kept open to the PDP; further decisions queue. Default {@link DEFAULT_CONNECTIONS}. */
  connections?: number
}

/** Default socket limit: enough for a busy gateway, bounded so a slow PDP cannot exhaust descriptors. */
export const DEFAULT_CONNECTIONS = 64

/** Largest PDP answer read (docs/wire-contract.md §8); a decision is a few hundred bytes. */
export const MAX_PDP_RESPONSE_BYTES = 64 * 1024

const OPA_DECISION_PATH = '/v1/data/service/policy'

/** Connection errors worth one retry: the pooled keep-alive socket was closed by the PDP under us. */
const STALE_SOCKET_CODES = new Set(['UND_ERR_SOCKET', 'ECONNRESET', 'EPIPE'])
const CONNECT_CODES = new Set([
  'ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'EADDRNOTAVAIL', 'UND_ERR_CONNECT_TIMEOUT',
])
const TIMEOUT_CODES = new Set(['UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT'])
const CLOSED_CODES = new Set(['UND_ERR_CLOSED', 'UND_ERR_DESTROYED'])


function unavailable(reason: PdpUnavailableReason): PdpAnswer {
  return { outcome: 'UNAVAILABLE', reason }
}

/** Module-level so that discarding a body creates no closure. */
function ignore(): void {}

/**
 * One decision in flight. It settles exactly once: with the PDP's answer, or with `timeout` when the
 * timer fires first; the timer also aborts the request so a late answer is dropped with its socket and
 * can never be read (nor left on a connection that a later decision would reuse).
 */
class Exchange {
  settled = false
  readonly controller = new AbortController()
  readonly answer: Promise<PdpAnswer>
  readonly #timer: NodeJS.Timeout
  #resolve!: (answer: PdpAnswer) => void

  constructor(timeoutMs: number) {
    this.answer = new Promise<PdpAnswer>((resolve) => {
      this.#resolve = resolve
    })
    // the timer gets the exchange as an argument, so no per-call closure is needed for it
    this.#timer = setTimeout(expire, timeoutMs, this)
  }

  settle(answer: PdpAnswer): void {
    if (this.settled) return
    this.settled = true
    clearTimeout(this.#timer)
    this.#resolve(answer)
  }
}

function expire(exchange: Exchange): void {
  if (exchange.settled) return
  // undici aborts a request still waiting for a socket only once a socket is free, so the timer, not
  // the abort, is what answers promptly
  exchange.settle(unavailable('timeout'))
  exchange.controller.abort()
}

interface Target {
  readonly pool: Pool
  readonly path: string
  readonly headers: Record<string, string>
  readonly opa: boolean
}

/**
 * Builds the PDP client for `options`. Throws at construction (configuration time) when the endpoint is not
 * an absolute http(s) URL, carries credentials (which undici would silently drop), or when `timeoutMs`,
 * `connections` or `pepId` is unusable; `decide` itself never throws and never rejects.
 */
export function createHttpPdp(options: HttpPdpOptions): PolicyDecisionPoint {
  const { protocol, timeoutMs, pepId } = options
  let url: URL
  try {
    url = new URL(options.endpoint)
  } catch {
    throw new Error(`PDP endpoint is not an absolute URL: ${options.endpoint}`)
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error(`PDP endpoint must be http or https, not ${url.protocol}`)
  if (url.username !== '' || url.password !== '') throw new Error('PDP endpoint must not contain credentials')
  if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) throw new Error(`PDP timeout must be a positive number of milliseconds, not ${timeoutMs}`)
  const connections = options.connections ?? DEFAULT_CONNECTIONS
  if (!Number.isInteger(connections) || connections < 1) throw new Error(`PDP connections must be a positive integer, not ${connections}`)
  // Control characters would be refused per call by undici: a bad SERVICE_PEP_ID is reported once at start.
  if (pepId !== null && !HEADER_VALUE.test(pepId)) throw new Error('PEP id contains characters not allowed in a header')

  const opa = protocol === 'opa'
  // OPA: the endpoint is a base URL, possibly with a path prefix (a reverse proxy); join without
  // doubling the slash. A query on the base is kept, as OPA's own options (e.g. ?metrics) go there.
  const path = opa ? `${url.pathname.replace(/\/+$/, '')}${OPA_DECISION_PATH}${url.search}` : `${url.pathname}${url.search}`

  const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json' }
  if (pepId !== null) headers['x-service-pep-id'] = pepId

  const pool = new Pool(url.origin, {
    connections,
    // the exchange timer bounds the total; these keep undici from holding a socket on a silent PDP
    // beyond it, for example while a non-200 body is being drained after the decision was settled
    connect: { timeout: timeoutMs },
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
  })
  const target: Target = { pool, path, headers, opa }
  let closed = false
  let closing: Promise<void> | null = null

  return {
    kind: opa ? 'opa' : 'http',

    decide(request: PdpRequest): Promise<PdpAnswer> {
      if (closed) return Promise.resolve(unavailable('closed'))
      let payload: string
      try {
        const json = JSON.stringify(request)
        payload = opa ? `{"input":${json}}` : json
      } catch {
        // a request that cannot be serialized (cycle, BigInt) is a gateway bug; fail like the PDP did
        return Promise.resolve(unavailable('invalid_request'))
      }
      const exchange = new Exchange(timeoutMs)
      void run(target, payload, exchange)
      return exchange.answer
    },

    close(): Promise<void> {
      closed = true
      closing ??= shutdown(pool, timeoutMs)
      return closing
    },
  }
}

/**
 * Lets decisions in flight end (each is bounded by its own timer, and an aborted request frees its
 * socket) and closes the sockets; destroys the pool should a close still be pending past that bound.
 */
async function shutdown(pool: Pool, timeoutMs: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined
  const grace = new Promise<void>((resolve) => {
    timer = setTimeout(resolve, timeoutMs + 250)
  })
  try {
    await Promise.race([pool.close().catch(ignore), grace])
  } finally {
    clearTimeout(timer)
  }
  if (!pool.destroyed) await pool.destroy().catch(ignore)
}

/** Performs one exchange and settles it; never rejects. */
async function run(target: Target, payload: string, exchange: Exchange): Promise<void> {
  let answer: PdpAnswer
  try {
    answer = await ask(target, payload, exchange)
  } catch (err) {
    answer = failure(err)
  }
  exchange.settle(answer)
}

async function ask(target: Target, payload: string, exchange: Exchange): Promise<PdpAnswer> {
  let response: Dispatcher.ResponseData
  try {
    response = await send(target, payload, exchange)
  } catch (err) {
    // undici does not retry a POST; a decision request is a pure query, so one retry on a fresh socket
    // is safe and hides the keep-alive race where the PDP closes an idle socket just as it is reused
    if (exchange.settled || !STALE_SOCKET_CODES.has(errorCode(err) ?? '')) throw err
    response = await send(target, payload, exchange)
  }
  if (exchange.settled) {
    abandonBody(response.body)
    return unavailable('timeout')
  }
  return readAnswer(response, target.opa)
}

function send(target: Target, payload: string, exchange: Exchange): Promise<Dispatcher.ResponseData> {
  return target.pool.request({
    path: target.path,
    method: 'POST',
    headers: target.headers,
    body: payload,
    signal: exchange.controller.signal,
  })
}

async function readAnswer(response: Dispatcher.ResponseData, opa: boolean): Promise<PdpAnswer> {
  const { body } = response
  if (response.statusCode !== 200) {
    drain(body)
    return unavailable(statusReason(response.statusCode))
  }
  if (!isJsonMediaType(response.headers['content-type'])) {
    drain(body)
    return unavailable('invalid_content_type')
  }
  let text: string
  try {
    text = (await readBoundedBody(body, MAX_PDP_RESPONSE_BYTES, response.headers['content-length'])).toString('utf8')
  } catch (error) {
    if (error instanceof BodyTooLargeError) return unavailable('too_large')
    throw error
  }
  let document: unknown
  try {
    document = JSON.parse(text)
  } catch {
    return unavailable('invalid_json')
  }
  return validatePdpDocument(document, opa)
}

/** `application/json` or a `+json` type, parameters (charset) ignored. */
function isJsonMediaType(header: string | string[] | undefined): boolean {
  if (typeof header !== 'string') return false
  const semicolon = header.indexOf(';')
  const type = (semicolon === -1 ? header : header.slice(0, semicolon)).trim().toLowerCase()
  return type === 'application/json' || (type.startsWith('application/') && type.endsWith('+json'))
}

/** Reads a small unwanted body to the end so the socket can be reused; larger ones close the socket. */
function drain(body: Dispatcher.ResponseData['body']): void {
  body.dump({ limit: MAX_PDP_RESPONSE_BYTES }).catch(ignore)
}

function errorCode(err: unknown): string | undefined {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    const code = (e as { code?: unknown }).code
    if (typeof code === 'string') return code
  }
  return undefined
}

function failure(err: unknown): PdpAnswer {
  const code = errorCode(err)
  if (code === undefined) return unavailable('request_failed')
  if (CONNECT_CODES.has(code)) return unavailable('connect_failed')
  if (TIMEOUT_CODES.has(code)) return unavailable('timeout')
  if (STALE_SOCKET_CODES.has(code)) return unavailable('connection_lost')
  if (CLOSED_CODES.has(code)) return unavailable('closed')
  return unavailable('request_failed')
}
