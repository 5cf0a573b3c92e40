/**
 * The one writer of gateway-made responses (docs/wire-contract.md §9): JSON `{"error", "message"}`, marked with
 * `X-Service-Gateway: error` so a client can tell them from the upstream's own answers, and
 * `X-Service-Decision-Id` when a decision was made. A policy denial adds `decision_id` and, unless its
 * route hides it, the PDP's `reason` to the body.
 */
import type { ServerResponse } from 'node:http'
import { HEADER_NAME, HEADER_VALUE } from '../http/header-syntax.js'

/** Human messages per gateway code; the code itself is the stable part. */
const MESSAGES: Readonly<Record<string, string>> = {
  BADGE_MISSING: 'A trust badge is required (Authorization: Bearer or X-Service-Badge).',
  BADGE_MALFORMED: 'The trust badge is malformed.',
  BADGE_SIGNATURE_INVALID: 'The trust badge signature does not verify.',
  BADGE_EXPIRED: 'The trust badge has expired.',
  BADGE_NOT_YET_VALID: 'The trust badge is not valid yet.',
  BADGE_ISSUER_UNTRUSTED: 'The trust badge was not issued by a trusted authority.',
  BADGE_AUDIENCE_MISMATCH: 'The trust badge is not meant for this audience.',
  BADGE_REVOKED: 'The trust badge has been revoked.',
  BADGE_CLAIMS_INVALID: 'The trust badge claims are not valid.',
  BADGE_CONFLICT: 'Authorization and X-Service-Badge carry different badges.',
  POLICY_DENIED: 'The policy denies this request.',
  PDP_UNAVAILABLE: 'The policy decision point is unavailable.',
  OBLIGATION_FAILED: 'A policy obligation could not be met.',
  BUNDLE_STALE: 'The policy bundle is stale.',
  rate_limit_exceeded: 'Too many requests.',
  UPSTREAM_UNAVAILABLE: 'The upstream could not be reached.',
  UPSTREAM_TIMEOUT: 'The upstream did not answer in time.',
  REQUEST_MALFORMED: 'The request is malformed or ambiguous (framing, request target or headers).',
  REQUEST_HEADER_FIELDS_TOO_LARGE: 'The request line and headers together exceed the size the gateway accepts.',
  METHOD_NOT_ALLOWED: 'The gateway does not tunnel CONNECT requests.',
  ROUTE_NOT_FOUND: 'No upstream route matches this path.',
  GATEWAY_NOT_READY: 'The gateway has not loaded its first snapshot yet.',
  GATEWAY_ERROR: 'The gateway failed to handle the request.',
}

function stringOrUndefined(value: unknown): string | undefined {
  return typeof value === 'string' ? value : undefined
}

/** The message for a gateway code (envelope codes and others fall back to a generic text). */
export function gatewayMessage(code: string): string {
  return MESSAGES[code] ?? 'The request was refused by the gateway.'
}

/** Body members after `error` and `message`; values that are not strings are left out. */
export interface RefusalDetails {
  readonly decision_id?: string
  readonly reason?: string
}

/** A code goes into the JSON body and the log; one that is not code-shaped is a bug upstream of here. */
const CODE = /^[A-Za-z0-9_]{1,64}$/

/**
 * Writes a gateway-made error. Never throws, whatever it is handed: a status outside 400-599 becomes
 * 500, a code that is not code-shaped becomes `GATEWAY_ERROR`, and an extra header whose name or value
 * could not be written is left out (the answer goes out without it). A response whose headers already
 * went out (an upstream failing mid-body) cannot be turned into an error any more: its connection is
 * cut instead, so the client sees a truncated response rather than a well-formed lie.
 */
export function sendGatewayError(
  res: ServerResponse,
  status: number,
  code: string,
  extraHeaders?: Readonly<Record<string, string>>,
  details?: RefusalDetails,
): void {
  try {
    if (res.headersSent) {
      res.destroy()
      return
    }
    const safeStatus = Number.isInteger(status) && status >= 400 && status <= 599 ? status : 500
    const safeCode = typeof code === 'string' && CODE.test(code) ? code : 'GATEWAY_ERROR'
    // JSON.stringify leaves undefined members out and escapes whatever a string holds.
    const body = JSON.stringify(details === undefined || details === null
      ? { error: safeCode, message: gatewayMessage(safeCode) }
      : { error: safeCode, message: gatewayMessage(safeCode), decision_id: stringOrUndefined(details.decision_id), reason: stringOrUndefined(details.reason) })
    // A null prototype: a hostile name such as `__proto__` is then an ordinary (refused) key.
    const headers = Object.assign(Object.create(null) as Record<string, string | number>, {
      'content-type': 'application/json; charset=utf-8',
      'content-length': Buffer.byteLength(body),
      'cache-control': 'no-store',
      'x-service-gateway': 'error',
    })
    if (extraHeaders !== undefined && extraHeaders !== null) {
      for (const name of Object.keys(extraHeaders)) {
        const value = extraHeaders[name]
        // A header Node would refuse would make writeHead throw: it is left out rather than risk the
        // whole answer. The framing headers above are the gateway's own and are never replaced.
        if (typeof value !== 'string' || !HEADER_NAME.test(name) || !HEADER_VALUE.test(value)) continue
        const lower = name.toLowerCase()
        if (lower === 'content-type' || lower === 'content-length' || lower === 'x-service-gateway') continue
        headers[name] = value
      }
    }
    res.writeHead(safeStatus, headers)
    res.end(body)
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
