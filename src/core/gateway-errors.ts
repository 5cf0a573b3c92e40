/**
 * Every answer the gateway makes itself takes its status and message from here, socket answers included
 * (docs/gateway-request-handling.md, "Error codes"). Codes are upper case except `rate_limit_exceeded`,
 * spelt as every rate-limit error (docs/api.md §7); the SDK re-exports them.
 */
import type { BadgeErrorCode } from './badge.js'
import type { EnvelopeErrorCode } from './envelope.js'

export interface GatewayErrorDefinition {
  readonly code: GatewayErrorCode
  readonly status: number
  readonly message: string
  readonly metricLabel: string
}

/** The message of a code without a text of its own: the code says what went wrong. */
const REFUSED = 'The request was refused by the gateway.'

type Definition = Pick<GatewayErrorDefinition, 'status' | 'message'>

const DEFINITIONS = {
  // the caller's badge
  BADGE_MISSING: { status: 401, message: 'A trust badge is required (Authorization: Bearer or X-Service-Badge).' },
  BADGE_CONFLICT: { status: 401, message: 'Authorization and X-Service-Badge carry different badges.' },
  BADGE_MALFORMED: { status: 401, message: 'The trust badge is malformed.' },
  BADGE_SIGNATURE_INVALID: { status: 401, message: 'The trust badge signature does not verify.' },
  BADGE_EXPIRED: { status: 401, message: 'The trust badge has expired.' },
  BADGE_NOT_YET_VALID: { status: 401, message: 'The trust badge is not valid yet.' },
  BADGE_ISSUER_UNTRUSTED: { status: 401, message: 'The trust badge was not issued by a trusted authority.' },
  BADGE_AUDIENCE_MISMATCH: { status: 401, message: 'The trust badge is not meant for this audience.' },
  BADGE_REVOKED: { status: 401, message: 'The trust badge has been revoked.' },
  BADGE_CLAIMS_INVALID: { status: 401, message: 'The trust badge claims are not valid.' },

  // delegation envelopes
  ENVELOPE_MALFORMED: { status: 400, message: REFUSED },
  ENVELOPE_CAPABILITY_INVALID: { status: 400, message: REFUSED },
  ENVELOPE_PAYLOAD_TOO_LARGE: { status: 400, message: REFUSED },
  ENVELOPE_SIGNATURE_INVALID: { status: 401, message: REFUSED },
  ENVELOPE_EXPIRED: { status: 401, message: REFUSED },
  ENVELOPE_NOT_YET_VALID: { status: 401, message: REFUSED },
  ENVELOPE_CHAIN_BROKEN: { status: 401, message: REFUSED },
  ENVELOPE_CHAIN_TOO_DEEP: { status: 403, message: REFUSED },
  ENVELOPE_NARROWING_VIOLATION: { status: 403, message: REFUSED },
  ENVELOPE_DEPTH_EXCEEDED: { status: 403, message: REFUSED },
  ENVELOPE_BADGE_BINDING_FAILED: { status: 403, message: REFUSED },
  ENVELOPE_KEY_NOT_BOUND: { status: 403, message: REFUSED },
  ENVELOPE_ORG_BOUNDARY: { status: 403, message: REFUSED },

  // the decision and the mode table
  POLICY_DENIED: { status: 403, message: 'The policy denies this request.' },
  PDP_UNAVAILABLE: { status: 503, message: 'The policy decision point is unavailable.' },
  OBLIGATION_FAILED: { status: 403, message: 'A policy obligation could not be met.' },
  BUNDLE_STALE: { status: 403, message: 'The policy bundle is stale.' },
  rate_limit_exceeded: { status: 429, message: 'Too many requests.' },

  // the upstream
  UPSTREAM_UNAVAILABLE: { status: 502, message: 'The upstream could not be reached.' },
  UPSTREAM_TIMEOUT: { status: 504, message: 'The upstream did not answer in time.' },

  // an MCP route's POST body (docs/mcp.md)
  MCP_BODY_TOO_LARGE: { status: 413, message: 'The MCP request body is larger than the gateway reads.' },
  MCP_CONTENT_TYPE_UNSUPPORTED: { status: 415, message: 'An MCP request body must be JSON (Content-Type: application/json).' },
  MCP_CONTENT_ENCODING_UNSUPPORTED: { status: 415, message: 'The gateway does not decode this Content-Encoding on an MCP route.' },
  MCP_MESSAGE_INVALID: { status: 400, message: 'The body is not a valid JSON-RPC request, notification or response.' },
  MCP_BATCH_NOT_ALLOWED: { status: 400, message: 'The negotiated MCP protocol version does not allow JSON-RPC batches.' },
  MCP_HEADER_MISMATCH: { status: 400, message: 'The MCP request headers do not match the body.' },
  // an MCP route's Host, Origin and session (docs/mcp.md, "Host and Origin", "Sessions")
  MCP_HOST_NOT_ALLOWED: { status: 403, message: 'The Host of this request is not one this MCP route answers to.' },
  MCP_ORIGIN_NOT_ALLOWED: { status: 403, message: 'The Origin of this request is not allowed on this MCP route.' },
  MCP_SESSION_FORBIDDEN: { status: 403, message: 'This MCP session belongs to another subject.' },
  MCP_SESSION_UNKNOWN: { status: 404, message: 'The gateway knows no such MCP session: start a new one with initialize.' },

  // an A2A route's request body (docs/a2a.md)
  A2A_BODY_TOO_LARGE: { status: 413, message: 'The A2A request body is larger than the gateway reads.' },
  A2A_CONTENT_TYPE_UNSUPPORTED: { status: 415, message: 'An A2A request body must be JSON in the binding\'s media type and identity coding.' },
  A2A_MESSAGE_INVALID: { status: 400, message: 'The body is not a valid A2A request.' },
  A2A_OPERATION_UNKNOWN: { status: 400, message: 'The request names no A2A operation the gateway decides on.' },
  // the upstream's public agent card (docs/a2a.md, "The public card")
  A2A_CARD_INVALID: { status: 502, message: 'The upstream agent card is not a JSON object the gateway can read.' },
  A2A_CARD_SIGNATURE_INVALID: { status: 502, message: 'The upstream agent card carries no signature by a key the gateway trusts.' },

  // the request itself, and the gateway
  CHECK_PEER_NOT_ALLOWED: { status: 403, message: 'This peer may not ask the check service.' },
  CHECK_BODY_MISSING: { status: 403, message: 'The route decides on the request body, which the proxy did not send whole.' },
  CHECK_BODY_NOT_CANONICAL: { status: 403, message: 'The body names a resource in a form only the gateway itself could rewrite.' },
  REQUEST_MALFORMED: { status: 400, message: 'The request is malformed or ambiguous (framing, request target or headers).' },
  REQUEST_HEADER_FIELDS_TOO_LARGE: { status: 431, message: 'The request line and headers together exceed the size the gateway accepts.' },
  REQUEST_TIMEOUT: { status: 408, message: 'The request was not received in time.' },
  METHOD_NOT_ALLOWED: { status: 405, message: 'The gateway does not allow this method here.' },
  ROUTE_NOT_FOUND: { status: 404, message: 'No upstream route matches this path.' },
  GATEWAY_NOT_READY: { status: 503, message: 'The gateway has not loaded its first snapshot yet.' },
  GATEWAY_ERROR: { status: 500, message: 'The gateway failed to handle the request.' },
} as const satisfies Record<BadgeErrorCode | EnvelopeErrorCode, Definition> & Record<string, Definition>

export type GatewayErrorCode = keyof typeof DEFINITIONS

export const GATEWAY_ERRORS: Readonly<Record<GatewayErrorCode, GatewayErrorDefinition>> = Object.freeze(Object.fromEntries(
  Object.entries(DEFINITIONS).map(([code, { status, message }]) => [code, Object.freeze({ code, status, message, metricLabel: code })]),
) as Record<GatewayErrorCode, GatewayErrorDefinition>)

export const GATEWAY_ERROR_CODES: readonly GatewayErrorCode[] = Object.freeze(Object.keys(GATEWAY_ERRORS) as GatewayErrorCode[])

// A Map, so that a name such as `constructor` is never found on a prototype.
const BY_CODE: ReadonlyMap<string, GatewayErrorDefinition> = new Map(Object.entries(GATEWAY_ERRORS))

/** The definition of `code`; a code outside the catalogue is a bug and answers as `GATEWAY_ERROR`. */
export function gatewayError(code: string): GatewayErrorDefinition {
  return BY_CODE.get(code) ?? GATEWAY_ERRORS.GATEWAY_ERROR
}
