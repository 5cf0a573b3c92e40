/**
 * Request-smuggling defences of the gateway, in two layers.
 *
 * 1. Node 20's llhttp parser (strict mode) already refuses most ambiguous framings before a request
 *    exists: Content-Length together with Transfer-Encoding, duplicate or non-numeric Content-Length,
 *    a Transfer-Encoding whose last coding is not `chunked` or that repeats `chunked`, whitespace
 *    before the colon, obs-fold, bare LF and CR in values. Those surface as `clientError`, answered by
 *    {@link clientErrorHandler}.
 * 2. {@link framingProblem} re-checks every request that reached the handler, because llhttp still lets
 *    through shapes an upstream may read differently (`Transfer-Encoding: gzip, chunked`, an empty
 *    Transfer-Encoding, Transfer-Encoding on HTTP/1.0), and because a server may run with
 *    `insecureHTTPParser`, where layer 1 is mostly gone.
 *
 * The gateway's own server is created with {@link STRICT_PARSER}, which overrides the process-wide
 * `--insecure-http-parser` flag, so the character checks of layer 2 (header names are tokens; no CR,
 * LF or NUL in values) would only repeat what llhttp has refused already (400 via clientError; the
 * gateway e2e suite sends each such probe). It skips them: the value check is a measurable share of a
 * request's instructions on a badge header (docs/performance.md).
 */
import type { IncomingMessage } from 'node:http'
import type { Duplex } from 'node:stream'
import { HEADER_NAME } from '../../http/header-syntax.js'
import { rawGatewayError } from '../../http/raw-response.js'
import { lowerHeaderName } from './header-names.js'

// A value carrying CR, LF or NUL could split into a second header line at a less careful hop.
const BAD_VALUE_CHAR = /[\r\n\0]/
const DIGITS = /^[0-9]+$/

/** Server options under which llhttp refuses non-token header names and CR, LF or NUL in values. */
export const STRICT_PARSER = Object.freeze({ insecureHTTPParser: false })

/**
 * Headers that must appear at most once. node:http keeps only the first copy of Host and
 * Authorization in `req.headers` while `rawHeaders` (what is forwarded) keeps all: a second copy would
 * reach the upstream unverified. The gateway's own headers are refused twice for the same reason
 * (Node would join them with ", " into a value nobody signed). RFC 9112 §3.2: two Hosts is a 400.
 */
const SINGLETONS = new Set([
  'host',
  'authorization',
  'x-service-badge',
  'x-service-breakglass',
  'x-service-authority',
  'x-service-authority-chain',
  'x-service-badge-map',
  'x-service-txn',
])

/**
 * The request headers the gateway's stages read, collected by {@link inspectRequestHead} in the same
 * pass as the framing checks. Every one of them is a singleton (a second copy is refused), so the first
 * raw value is the value: the same as `req.headers` would give, without Node building that object (a
 * lower-cased copy of every header) for each request.
 */
export interface GatewayHeaders {
  authorization: string | undefined
  badgeHeader: string | undefined
  txnHeader: string | undefined
  authority: string | undefined
  authorityChain: string | undefined
  badgeMap: string | undefined
  breakglass: string | undefined
}

/**
 * Returns a short reason (for the log) when the request's framing is ambiguous or unsafe to forward,
 * null when it is fine. Runs per request: one pass over `rawHeaders`, which also fills `into` (when
 * given) with the gateway's own headers. `parsedStrictly`: the request came through a server created
 * with {@link STRICT_PARSER}, so the header characters need no second look.
 */
export function inspectRequestHead(req: IncomingMessage, into: GatewayHeaders | null, parsedStrictly = false): string | null {
  const raw = req.rawHeaders
  let contentLength: string | null = null
  let contentLengthCount = 0
  let transferEncoding: string | null = null
  let transferEncodingCount = 0
  let seen: Set<string> | null = null
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!
    const value = raw[i + 1] ?? ''
    if (!parsedStrictly) {
      // Spaces or tabs in a name mean "Name : value" tricks.
      if (!HEADER_NAME.test(name)) return 'invalid character in a header name'
      if (BAD_VALUE_CHAR.test(value)) return 'CR, LF or NUL in a header value'
    }
    const lower = lowerHeaderName(name)
    if (SINGLETONS.has(lower)) {
      if (seen?.has(lower) === true) return `more than one ${lower} header`
      ;(seen ??= new Set()).add(lower)
      if (into !== null) collect(into, lower, value)
    } else if (lower === 'content-length') {
      contentLengthCount++
      contentLength = value
    } else if (lower === 'transfer-encoding') {
      transferEncodingCount++
      transferEncoding = value
    }
  }
  if (contentLengthCount > 0 && transferEncodingCount > 0) return 'both Content-Length and Transfer-Encoding'
  if (contentLengthCount > 1) return 'more than one Content-Length header'
  if (contentLength !== null) {
    const trimmed = contentLength.trim()
    if (!DIGITS.test(trimmed)) return 'Content-Length is not a decimal number'
    if (!Number.isSafeInteger(Number(trimmed))) return 'Content-Length is too large'
  }
  if (transferEncodingCount > 1) return 'more than one Transfer-Encoding header'
  if (transferEncoding !== null) {
    // RFC 9112 §6.1: an HTTP/1.0 message with Transfer-Encoding has faulty framing.
    if (req.httpVersionMajor === 1 && req.httpVersionMinor === 0) return 'Transfer-Encoding in an HTTP/1.0 request'
    if (transferEncoding.trim().toLowerCase() !== 'chunked') return 'Transfer-Encoding other than a single "chunked"'
  }
  return null
}

function collect(into: GatewayHeaders, lower: string, value: string): void {
  switch (lower) {
    case 'authorization': into.authorization = value; break
    case 'x-service-badge': into.badgeHeader = value; break
    case 'x-service-txn': into.txnHeader = value; break
    case 'x-service-authority': into.authority = value; break
    case 'x-service-authority-chain': into.authorityChain = value; break
    case 'x-service-badge-map': into.badgeMap = value; break
    case 'x-service-breakglass': into.breakglass = value; break
  }
}

/** Whether any header name contains `_` (a route with `headersWithUnderscores: reject` refuses those). */
export function hasUnderscoreHeader(raw: readonly string[]): boolean {
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.includes('_')) return true
  return false
}

/** {@link inspectRequestHead} without collecting headers. */
export function framingProblem(req: IncomingMessage): string | null {
  return inspectRequestHead(req, null)
}

// A parse failure or a CONNECT has no response object: these go straight to the socket.
const MALFORMED_RESPONSE = rawGatewayError('REQUEST_MALFORMED')
const HEAD_TOO_LARGE_RESPONSE = rawGatewayError('REQUEST_HEADER_FIELDS_TOO_LARGE')
const CONNECT_RESPONSE = rawGatewayError('METHOD_NOT_ALLOWED', 'Allow: GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS\r\n')

/**
 * A `server.on('connect', connectHandler)` listener. CONNECT is the one method whose target is in
 * authority form; the gateway is a reverse proxy, not a tunnel, so it answers 405 and closes (without a
 * listener node would drop the connection without an answer).
 */
export function connectHandler(_req: IncomingMessage, socket: Duplex): void {
  if (socket.writable) socket.write(CONNECT_RESPONSE)
  socket.destroy()
}

/** The part of the socket the handler reads beyond `Duplex`: the response Node may have in flight. */
interface HttpSocket extends Duplex {
  _httpMessage?: { headersSent?: boolean } | null
}

/**
 * A `server.on('clientError', clientErrorHandler)` listener: answers a request that the parser refused
 * with a raw `400 REQUEST_MALFORMED`, or `431 REQUEST_HEADER_FIELDS_TOO_LARGE` when its head exceeds the
 * server's `maxHeaderSize` (JSON, `Connection: close`, `X-Service-Gateway: error`), and destroys the
 * socket. Nothing is written when the peer already reset the connection, when the socket
 * is not writable, or when a response on this socket has already started (writing then would corrupt
 * the peer's view of that response).
 */
export function clientErrorHandler(err: Error & { code?: string }, socket: Duplex): void {
  const inFlight = (socket as HttpSocket)._httpMessage
  if (err.code !== 'ECONNRESET' && socket.writable && !(inFlight?.headersSent ?? false)) {
    // Node's own default handler does the same write-then-destroy: the short answer fits the socket's
    // first write attempt, and destroying at once stops reading the rest of the hostile stream.
    socket.write(err.code === 'HPE_HEADER_OVERFLOW' ? HEAD_TOO_LARGE_RESPONSE : MALFORMED_RESPONSE)
  }
  socket.destroy()
}
