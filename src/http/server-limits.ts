// Slow-client limits of every node:http listener, applied before `listen`: docs/operations.md, "Configuration".
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
  readonly timeoutResponse: string
}

export type Listener = 'admin' | 'gateway' | 'ops'

// Each listener answers in its own error shape: docs/wire-contract.md §3 (admin, ops) and §9 (gateway).
const ADMIN_TIMEOUT = rawJsonResponse(408, { error: 'request_timeout', message: 'The request was not received in time.' })
const GATEWAY_TIMEOUT = rawGatewayError('REQUEST_TIMEOUT')

export function serverLimits(config: Config, listener: Listener): ServerLimits {
  const http = config.http
  if (listener === 'gateway') {
    return {
      headersTimeoutMs: http.headersTimeoutMs,
      requestTimeoutMs: config.gateway.requestTimeoutMs,
      keepAliveTimeoutMs: http.keepAliveTimeoutMs,
      // Not capped: the gateway forwards `rawHeaders`, which node never truncates; maxHeaderSize bounds the head.
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

// Call before `listen`. The 408 listener goes first and destroys the socket, so Fastify's and the
// gateway's `clientError` listeners find it closed and do nothing.
export function applyServerLimits(server: Server, limits: ServerLimits): void {
  // node refuses this order at construction; the config checks it too, this guards other callers.
  if (limits.headersTimeoutMs > limits.requestTimeoutMs) {
    throw new RangeError('headersTimeoutMs must not exceed requestTimeoutMs')
  }
  server.headersTimeout = limits.headersTimeoutMs
  server.requestTimeout = limits.requestTimeoutMs
  server.keepAliveTimeout = limits.keepAliveTimeoutMs
  if (limits.maxHeadersCount !== null) server.maxHeadersCount = limits.maxHeadersCount
  // Node checks both timers only every connectionsCheckingInterval (30 s by default), read at `listen`.
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
