/**
 * A check a proxy asks (docs/ext-authz.md): the request the proxy will forward, rebuilt as the request object
 * the gateway's stages read, and a stand-in for the response that captures the gateway-made refusal the
 * stages write, so the proxy can answer its client with exactly that.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { Readable } from 'node:stream'
import { STRIP } from '../request-scope.js'

/** The proxies the check service answers, as the log line, the decision feed and the metrics name them. */
export const CHECK_PROXIES = ['envoy-grpc', 'envoy-http', 'nginx', 'traefik'] as const
export type CheckProxy = (typeof CHECK_PROXIES)[number]

/** What a proxy's check says about the request it will forward. */
export interface CheckInput {
  readonly proxy: CheckProxy
  readonly method: string
  /** The request target the proxy will forward: path and query, undecoded. */
  readonly target: string
  /** The `Host` (or `:authority`) of that request. */
  readonly host: string | undefined
  /** Its headers as [name, value, …], without pseudo-headers and without what only the check request carries. */
  readonly rawHeaders: readonly string[]
  /** The body when the proxy sent one (null: none was sent). */
  readonly body: Buffer | null
  /** The proxy said it sent only the first part of the body (Envoy's `x-envoy-auth-partial-body: true`). */
  readonly partialBody: boolean
  /** The peer that asked: only a SERVICE_TRUSTED_PROXIES peer's X-Forwarded-Host counts on an MCP route. */
  readonly remoteAddress: string | undefined
}

/** The answer for the proxy. */
export type CheckVerdict =
  | {
    readonly allowed: true
    /** Headers to set on the forwarded request (replacing any copy), as [name, value, …]. */
    readonly set: readonly string[]
    /** Headers to remove from the forwarded request. */
    readonly remove: readonly string[]
    /** Headers for the client's answer (rate-limit headers, an extended card's cache rules), as [name, value, …]. */
    readonly responseHeaders: readonly string[]
  }
  | {
    readonly allowed: false
    /** The gateway's status: on an MCP or A2A route a decision's JSON-RPC refusal may be a 200. */
    readonly status: number
    /** The gateway error code. */
    readonly code: string
    /** The gateway-made answer's headers, framing headers aside. */
    readonly headers: readonly string[]
    readonly body: string
  }

const NO_SOCKET = Object.freeze({ remoteAddress: undefined as string | undefined })
const BODY_FRAMING = new Set(['content-length', 'transfer-encoding'])

/** The request the proxy will forward, with the members of IncomingMessage the stages read. */
class CheckedRequest extends Readable {
  readonly method: string
  readonly url: string
  readonly headers: Record<string, string>
  readonly rawHeaders: string[]
  readonly httpVersionMajor = 1
  readonly httpVersionMinor = 1
  readonly socket: { readonly remoteAddress: string | undefined }

  constructor(input: CheckInput, body: Buffer | null) {
    super()
    this.method = input.method
    this.url = input.target
    this.socket = input.remoteAddress === undefined ? NO_SOCKET : { remoteAddress: input.remoteAddress }
    const raw: string[] = []
    let hasHost = false
    const given = input.rawHeaders
    // The proxy framed the body; the stages see the body it sent, framed by its length.
    for (let i = 0; i + 1 < given.length; i += 2) {
      const lower = given[i]!.toLowerCase()
      if (BODY_FRAMING.has(lower)) continue
      if (lower === 'host') hasHost = true
      raw.push(given[i]!, given[i + 1]!)
    }
    if (!hasHost && input.host !== undefined && input.host !== '') raw.unshift('host', input.host)
    if (body !== null) raw.push('content-length', String(body.length))
    this.rawHeaders = raw
    const headers: Record<string, string> = Object.create(null) as Record<string, string>
    for (let i = 0; i < raw.length; i += 2) {
      const lower = raw[i]!.toLowerCase()
      const value = raw[i + 1]!
      headers[lower] = headers[lower] === undefined ? value : `${headers[lower]}, ${value}`
    }
    this.headers = headers
    if (body !== null && body.length > 0) this.push(body)
    this.push(null)
  }

  override _read(): void {}
}

/** The members of ServerResponse a gateway-made answer uses, writing into the verdict instead of a socket. */
class CapturedResponse {
  headersSent = false
  shouldKeepAlive = true
  #status = 0
  #headers: Record<string, string | number> = {}
  readonly #exchange: CheckExchange

  constructor(exchange: CheckExchange) {
    this.#exchange = exchange
  }

  writeHead(status: number, headers: Record<string, string | number>): this {
    this.#status = status
    this.#headers = headers
    this.headersSent = true
    return this
  }

  end(body?: string): void {
    const headers: string[] = []
    for (const name of Object.keys(this.#headers)) {
      if (name.toLowerCase() === 'content-length') continue
      headers.push(name.toLowerCase(), String(this.#headers[name]))
    }
    this.#exchange.settle({ allowed: false, status: this.#status, code: this.#exchange.errorCode ?? 'GATEWAY_ERROR', headers, body: body ?? '' })
  }

  destroy(): void {
    // Only a second answer to one request destroys a response; the first one stands.
    if (!this.headersSent) this.#exchange.settle({ allowed: false, status: 500, code: 'GATEWAY_ERROR', headers: ['content-type', 'application/json; charset=utf-8'], body: '{"error":"GATEWAY_ERROR","message":"The gateway failed to handle the request."}' })
  }

  setHeader(): this {
    return this
  }

  removeHeader(): void {}
}

/** One check: what the proxy asked, the request and response stand-ins, and where the verdict goes. */
export class CheckExchange {
  readonly proxy: CheckProxy
  readonly req: IncomingMessage
  readonly res: ServerResponse
  /** The body was sent and sent whole, so a protocol route can decide on it. */
  readonly bodyWhole: boolean
  readonly bodySent: boolean
  /** Read when the refusal is written: the stages set the code first. */
  errorCode: string | undefined = undefined
  #settled = false
  readonly #resolve: (verdict: CheckVerdict) => void

  constructor(input: CheckInput, resolve: (verdict: CheckVerdict) => void) {
    this.proxy = input.proxy
    this.#resolve = resolve
    const body = input.body
    this.bodySent = body !== null && body.length > 0
    let declared: number | undefined
    for (let i = 0; i + 1 < input.rawHeaders.length; i += 2) {
      if (input.rawHeaders[i]!.toLowerCase() === 'content-length') declared = Number(input.rawHeaders[i + 1]!.trim())
    }
    this.bodyWhole = this.bodySent && !input.partialBody && (declared === undefined || declared === (body as Buffer).length)
    this.req = new CheckedRequest(input, this.bodyWhole ? body : null) as unknown as IncomingMessage
    this.res = new CapturedResponse(this) as unknown as ServerResponse
  }

  settle(verdict: CheckVerdict): void {
    if (this.#settled) return
    this.#settled = true
    this.#resolve(verdict)
  }
}

/** The headers the gateway would strip that the allow does not set: a client's copy must not reach the upstream. */
export function headersToRemove(set: readonly string[]): string[] {
  const remove: string[] = []
  for (const name of STRIP) {
    let setsIt = false
    for (let i = 0; i < set.length; i += 2) if (set[i] === name) setsIt = true
    if (!setsIt) remove.push(name)
  }
  return remove
}
