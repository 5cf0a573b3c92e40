// The one writer of gateway-made responses (docs/wire-contract.md §9), marked `X-Service-Gateway: error`
// so a client can tell them from the upstream's own answers.
import type { ServerResponse } from 'node:http'
import { gatewayError, type GatewayErrorCode } from '../core/gateway-errors.js'
import { HEADER_NAME, HEADER_VALUE } from '../http/header-syntax.js'

function stringOrUndefined(value: unknown): string | undefined {
  return typeof value === 'string' ? value : undefined
}

/** Body members after `error` and `message`; values that are not strings are left out. */
export interface RefusalDetails {
  readonly decision_id?: string
  readonly reason?: string
}

/**
 * The head of a gateway-made answer: its framing headers, then the extra ones Node would accept (a header
 * Node would refuse would make writeHead throw, so it is left out rather than risk the whole answer).
 */
export function gatewayMadeHeaders(contentType: string, body: string, extraHeaders: Readonly<Record<string, string>> | undefined): Record<string, string | number> {
  // A null prototype: a hostile name such as `__proto__` is then an ordinary (refused) key.
  const headers = Object.assign(Object.create(null) as Record<string, string | number>, {
    'content-type': contentType,
    'content-length': Buffer.byteLength(body),
    'cache-control': 'no-store',
    'x-service-gateway': 'error',
  })
  if (extraHeaders === undefined || extraHeaders === null) return headers
  for (const name of Object.keys(extraHeaders)) {
    const value = extraHeaders[name]
    if (typeof value !== 'string' || !HEADER_NAME.test(name) || !HEADER_VALUE.test(value)) continue
    const lower = name.toLowerCase()
    // The framing headers above are the gateway's own and are never replaced.
    if (lower === 'content-type' || lower === 'content-length' || lower === 'x-service-gateway') continue
    headers[name] = value
  }
  return headers
}

/**
 * Writes a gateway-made answer; never throws, whatever it is handed (docs/peer-input-validation.md,
 * "Gateway-made responses"). A response already under way has its connection cut: the client sees a
 * truncated answer rather than a well-formed lie.
 */
export function writeGatewayMade(
  res: ServerResponse, status: number, contentType: string, body: () => string, extraHeaders: Readonly<Record<string, string>> | undefined,
): void {
  try {
    if (res.headersSent) {
      res.destroy()
      return
    }
    const text = body()
    res.writeHead(status, gatewayMadeHeaders(contentType, text, extraHeaders))
    res.end(text)
  } catch {
    // Nothing above should throw; if something still does (a response in a state Node refuses), the
    // client gets a cut connection and the process carries on.
    try {
      res.destroy()
    } catch {
      // already destroyed
    }
  }
}

/** The documented `{error, message, …}` answer with the catalogue's status for `code`; returns that status. */
export function sendGatewayError(
  res: ServerResponse,
  code: GatewayErrorCode,
  extraHeaders?: Readonly<Record<string, string>>,
  details?: RefusalDetails,
): number {
  const { code: safeCode, status, message } = gatewayError(code)
  // JSON.stringify leaves undefined members out and escapes whatever a string holds.
  writeGatewayMade(res, status, 'application/json; charset=utf-8', () => JSON.stringify(details === undefined || details === null
    ? { error: safeCode, message }
    : { error: safeCode, message, decision_id: stringOrUndefined(details.decision_id), reason: stringOrUndefined(details.reason) }), extraHeaders)
  return status
}
