/**
 * The remote PDPs, service and OPA protocols (docs/wire-contract.md §8). On the hot path at every cache miss:
 * one `JSON.stringify`, one pooled request, one settle-once exchange; every failure is `UNAVAILABLE`.
 */
import { Pool, type Dispatcher } from 'undici'
import type { PdpRequest } from '../../core/policy/types.js'
import { HEADER_VALUE } from '../../http/header-syntax.js'
import { abandonBody, BodyTooLargeError, readBoundedBody } from '../../net/bounded-body.js'
import { statusReason, validatePdpDocument, type PdpUnavailableReason } from './pdp-answer.js'
import type { PdpAnswer, PolicyDecisionPoint } from './pdp.js'

export interface HttpPdpOptions {
  /** `service`: used exactly as given. `opa`: the server's base URL. */
  endpoint: string
  protocol: 'service' | 'opa'
  /** The whole exchange, connect to body. */
  timeoutMs: number
  pepId: string | null
  /** Further decisions queue. */
  connections?: number
}

/** Default socket limit: enough for a busy gateway, bounded so a slow PDP cannot exhaust descriptors. */
export const DEFAULT_CONNECTIONS = 64

/** A decision is a few hundred bytes. */
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
 * Settles once: the answer, or `timeout`. The timer also aborts the request, so a late answer is dropped with
 * its socket and never left on a connection a later decision would reuse.
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
  // undici aborts a request waiting for a socket only once one is free: the timer answers promptly.
  exchange.settle(unavailable('timeout'))
  exchange.controller.abort()
}

interface Target {
  readonly pool: Pool
  readonly path: string
  readonly headers: Record<string, string>
  readonly opa: boolean
}

/** Bad options (credentials in the URL, which undici would drop) throw here; `decide` never rejects. */
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
  // A base path (a reverse proxy) is joined without doubling the slash; a query (OPA's ?metrics) is kept.
  const path = opa ? `${url.pathname.replace(/\/+$/, '')}${OPA_DECISION_PATH}${url.search}` : `${url.pathname}${url.search}`

  const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json' }
  if (pepId !== null) headers['x-service-pep-id'] = pepId

  const pool = new Pool(url.origin, {
    connections,
    // Keep undici from holding a socket on a silent PDP past the exchange timer (draining a non-200 body).
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

/** In-flight decisions end within their own timers; the pool is destroyed should a close still pend past that. */
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
