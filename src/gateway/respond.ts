/**
 * The one writer of gateway-made responses (protocol.md §9): JSON `{"error", "message"}`, marked with
 * `X-Service-Gateway: error` so a client can tell them from the upstream's own answers, and
 * `X-Service-Decision-Id` when a decision was made.
 */
import type { ServerResponse } from 'node:http'

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
  METHOD_NOT_ALLOWED: 'The gateway does not tunnel CONNECT requests.',
  ROUTE_NOT_FOUND: 'No upstream route matches this path.',
  GATEWAY_NOT_READY: 'The gateway has not loaded its first snapshot yet.',
  GATEWAY_ERROR: 'The gateway failed to handle the request.',
}

/** The message for a gateway code (envelope codes and others fall back to a generic text). */
export function gatewayMessage(code: string): string {
  return MESSAGES[code] ?? 'The request was refused by the gateway.'
}

/**
 * Writes a gateway-made error. A response whose headers already went out (an upstream failing mid-body)
 * cannot be turned into an error any more: its connection is cut instead, so the client sees a
 * truncated response rather than a well-formed lie.
 */
export function sendGatewayError(
  res: ServerResponse,
  status: number,
  code: string,
  extraHeaders?: Readonly<Record<string, string>>,
): void {
  if (res.headersSent) {
    res.destroy()
    return
  }
  const body = JSON.stringify({ error: code, message: gatewayMessage(code) })
  const headers: Record<string, string | number> = {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(body),
    'cache-control': 'no-store',
    'x-service-gateway': 'error',
    ...extraHeaders,
  }
  res.writeHead(status, headers)
  res.end(body)
}
