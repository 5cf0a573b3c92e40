/**
 * Limits against slow clients (slowloris and friends) for every node:http listener of the process:
 * the gateway, the admin plane (Fastify's `app.server`) and the ops listener of gateway-only mode.
 * One function, applied by main.ts before `listen`.
 *
 * What node does with them (Node 20):
 * - `headersTimeout`: the request head must be complete this long after its first byte (or after the
 *   connection opened). `requestTimeout`: the whole request, head and body, likewise. Both answer
 *   `clientError` ERR_HTTP_REQUEST_TIMEOUT, answered here with a 408 in the listener's error shape,
 *   and the connection is closed.
 * - `keepAliveTimeout`: an idle connection between two requests is closed (node waits 1 s more than
 *   the value it announces in `Keep-Alive: timeout=…`, so well-behaved clients let go first).
 * - `maxHeadersCount`: header lines beyond the cap are left out of `req.headers` (node does not refuse
 *   the request, and `req.rawHeaders` still holds every line).
 * - Head size: the admin plane and the ops listener keep node's `maxHeaderSize` (16 KiB; a larger head is
 *   431, answered by Fastify or node); the gateway sets its own in createGateway (SERVICE_GATEWAY_MAX_HEAD_BYTES).
 *
 * Both request timers are only looked at every `connectionsCheckingInterval` (node's default: 30 s, so a
 * 10 s head limit would really be 10-40 s). The interval is read when the server starts listening, so
 * setting it here, before `listen`, makes the limits hold to about a quarter of the shortest one.
 */
import type { Server } from 'node:http'
import type { Duplex } from 'node:stream'
import type { Config } from '../config/index.js'
import { rawGatewayError, rawJsonResponse } from './raw-response.js'

export interface ServerLimits {
  readonly headersTimeoutMs: number
  readonly requestTimeoutMs: number
  readonly keepAliveTimeoutMs: number
  /** Null keeps node's default (2000). */
  readonly maxHeadersCount: number | null
  /** The raw 408 answer written on the socket (there is no request object to write through). */
  readonly timeoutResponse: string
}

export type Listener = 'admin' | 'gateway' | 'ops'

// docs/wire-contract.md §3: lower snake case codes on the admin plane (and the ops listener that stands in for it)…
const ADMIN_TIMEOUT = rawJsonResponse(408, { error: 'request_timeout', message: 'The request was not received in time.' })
// …upper case and the X-Service-Gateway marker for answers the gateway makes itself (docs/wire-contract.md §9).
const GATEWAY_TIMEOUT = rawGatewayError('REQUEST_TIMEOUT')

/** The configured limits of one listener. */
export function serverLimits(config: Config, listener: Listener): ServerLimits {
  const http = config.http
  if (listener === 'gateway') {
    return {
      headersTimeoutMs: http.headersTimeoutMs,
      requestTimeoutMs: config.gateway.requestTimeoutMs,
      keepAliveTimeoutMs: http.keepAliveTimeoutMs,
      // Not capped: the gateway checks and forwards `rawHeaders`, which node never truncates, so a cap
      // would only make `req.headers` disagree with what goes upstream. The head stays bounded by the
      // gateway's maxHeaderSize (SERVICE_GATEWAY_MAX_HEAD_BYTES, 431) and the head time limit.
      maxHeadersCount: null,
      timeoutResponse: GATEWAY_TIMEOUT,
    }
  }
  return {
    headersTimeoutMs: http.headersTimeoutMs,
    requestTimeoutMs: http.requestTimeoutMs,
    keepAliveTimeoutMs: http.keepAliveTimeoutMs,
    maxHeadersCount: http.maxHeadersCount,
    timeoutResponse: ADMIN_TIMEOUT,
  }
}

interface HttpSocket extends Duplex {
  _httpMessage?: { headersSent?: boolean } | null
}

const BAD_REQUEST = 'HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n'
const HEADERS_TOO_LARGE = 'HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\n\r\n'

/**
 * Applies `limits` to `server`; call before `listen`. Adds a `clientError` listener in front of any
 * other: a time-out is answered 408 (unless a response already started, then the connection is only
 * cut) and the socket destroyed, so later listeners (Fastify's, the gateway's) find it closed and do
 * nothing. Other client errors are left to those listeners, or to node's own answer when there are none.
 */
export function applyServerLimits(server: Server, limits: ServerLimits): void {
  // node refuses this order at construction (headersTimeout must not exceed requestTimeout); the config
  // checks it too, this guards other callers.
  if (limits.headersTimeoutMs > limits.requestTimeoutMs) {
    throw new RangeError('headersTimeoutMs must not exceed requestTimeoutMs')
  }
  server.headersTimeout = limits.headersTimeoutMs
  server.requestTimeout = limits.requestTimeoutMs
  server.keepAliveTimeout = limits.keepAliveTimeoutMs
  if (limits.maxHeadersCount !== null) server.maxHeadersCount = limits.maxHeadersCount
  const shortest = Math.min(limits.headersTimeoutMs, limits.requestTimeoutMs)
  ;(server as Server & { connectionsCheckingInterval: number }).connectionsCheckingInterval =
    Math.max(100, Math.min(1_000, Math.floor(shortest / 4)))

  const onClientError = (err: Error & { code?: string }, socket: HttpSocket): void => {
    if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') {
      if (socket.writable && !(socket._httpMessage?.headersSent ?? false)) socket.write(limits.timeoutResponse)
      socket.destroy()
      return
    }
    // Adding a listener turns node's default answer off; give it back when nobody else answers.
    if (server.listenerCount('clientError') > 1) return
    if (err.code !== 'ECONNRESET' && socket.writable && !(socket._httpMessage?.headersSent ?? false)) {
      socket.write(err.code === 'HPE_HEADER_OVERFLOW' ? HEADERS_TOO_LARGE : BAD_REQUEST)
    }
    socket.destroy()
  }
  server.prependListener('clientError', onClientError)
}
