/**
 * Request smuggling, in two layers: strict llhttp refuses most framings before a request exists, and each
 * request is re-checked for what llhttp lets through (docs/gateway-request-handling.md, "Headers").
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

// `req.headers` keeps the first Host or Authorization, `rawHeaders` (forwarded) all: a second copy would
// reach the upstream unverified, and two gateway headers would be joined into a value nobody signed.
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

/** Collected in the framing pass; all singletons, so the first raw value is the value, without `req.headers`. */
export interface GatewayHeaders {
  authorization: string | undefined
  badgeHeader: string | undefined
  txnHeader: string | undefined
  authority: string | undefined
  authorityChain: string | undefined
  badgeMap: string | undefined
  breakglass: string | undefined
}

/** A short reason for the log, or null. `parsedStrictly`: {@link STRICT_PARSER} already checked the characters. */
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

export function hasUnderscoreHeader(raw: readonly string[]): boolean {
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.includes('_')) return true
  return false
}

export function framingProblem(req: IncomingMessage): string | null {
  return inspectRequestHead(req, null)
}

// A parse failure or a CONNECT has no response object: these go straight to the socket.
const MALFORMED_RESPONSE = rawGatewayError('REQUEST_MALFORMED')
const HEAD_TOO_LARGE_RESPONSE = rawGatewayError('REQUEST_HEADER_FIELDS_TOO_LARGE')
const CONNECT_RESPONSE = rawGatewayError('METHOD_NOT_ALLOWED', 'Allow: GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS\r\n')

/** The gateway is not a tunnel; without this listener node would drop the connection unanswered. */
export function connectHandler(_req: IncomingMessage, socket: Duplex): void {
  if (socket.writable) socket.write(CONNECT_RESPONSE)
  socket.destroy()
}

interface HttpSocket extends Duplex {
  _httpMessage?: { headersSent?: boolean } | null
}

/** Nothing is written into a response already under way: it would corrupt the peer's view of it. */
export function clientErrorHandler(err: Error & { code?: string }, socket: Duplex): void {
  const inFlight = (socket as HttpSocket)._httpMessage
  if (err.code !== 'ECONNRESET' && socket.writable && !(inFlight?.headersSent ?? false)) {
    // As Node's default handler: the short answer fits the first write, and destroying stops the hostile stream.
    socket.write(err.code === 'HPE_HEADER_OVERFLOW' ? HEAD_TOO_LARGE_RESPONSE : MALFORMED_RESPONSE)
  }
  socket.destroy()
}
