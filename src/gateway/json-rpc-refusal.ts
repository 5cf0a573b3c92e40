// Gateway-made answers on a JSON-RPC route (MCP and A2A): a JSON-RPC error the client's SDK surfaces
// (docs/mcp.md and docs/a2a.md, "Refusals"); each protocol brings its table of codes.
import type { ServerResponse } from 'node:http'
import { gatewayError, type GatewayErrorCode } from '../core/gateway-errors.js'
import { jsonRpcErrorResponse, type JsonRpcId } from '../core/json-rpc.js'
import { writeGatewayMade, type RefusalDetails } from './respond.js'

export type JsonRpcErrorCodes = Readonly<Partial<Record<GatewayErrorCode, number>>>

/** The JSON-RPC codes of decisions, the same on every JSON-RPC route; the gateway code itself is in `error.data.error`. */
export const DECISION_ERROR_CODES: JsonRpcErrorCodes = Object.freeze({
  POLICY_DENIED: -32030,
  OBLIGATION_FAILED: -32031,
  BUNDLE_STALE: -32032,
  PDP_UNAVAILABLE: -32033,
  rate_limit_exceeded: -32034,
})

export const PARSE_ERROR = -32700
export const INVALID_REQUEST = -32600
export const INVALID_PARAMS = -32602
const SERVER_ERROR = -32000

/**
 * A decision about a request message is that request's answer (HTTP 200, as a server's own error would be);
 * what stops the body before any decision keeps its HTTP status (docs/mcp.md says why).
 */
const DECISION_CODES: ReadonlySet<string> = new Set(Object.keys(DECISION_ERROR_CODES))

export interface JsonRpcRefusal {
  readonly code: GatewayErrorCode
  /** The ids of the request messages the answer is for; empty: one error with id null. */
  readonly ids: readonly JsonRpcId[]
  /** JSON-RPC code of a malformed body (parse error, invalid request or invalid params). */
  readonly rpcCode: number | undefined
  /** Answer as a batch (an array), as the client sent one. */
  readonly batch: boolean
  readonly details: RefusalDetails | undefined
  readonly retryAfterSeconds: number | undefined
  /** A decision's answer keeps its HTTP status too (an insufficient_scope challenge is read only on a 403). */
  readonly keepStatus?: boolean
}

function errorBody(refusal: JsonRpcRefusal, codes: JsonRpcErrorCodes, message: string): string {
  const rpcCode = refusal.rpcCode ?? codes[refusal.code] ?? SERVER_ERROR
  const data: Record<string, unknown> = { error: refusal.code }
  if (refusal.details?.decision_id !== undefined) data['decision_id'] = refusal.details.decision_id
  if (refusal.details?.reason !== undefined) data['reason'] = refusal.details.reason
  if (refusal.retryAfterSeconds !== undefined) data['retry_after'] = refusal.retryAfterSeconds
  if (refusal.ids.length === 0) return jsonRpcErrorResponse(null, rpcCode, message, data)
  const answers = refusal.ids.map((id) => jsonRpcErrorResponse(id, rpcCode, message, data))
  return refusal.batch ? `[${answers.join(',')}]` : answers[0]!
}

/** Never throws; returns the status written (the log line's). */
export function sendJsonRpcRefusal(
  res: ServerResponse, refusal: JsonRpcRefusal, codes: JsonRpcErrorCodes, extraHeaders: Readonly<Record<string, string>>,
): number {
  const { status: httpStatus, message } = gatewayError(refusal.code)
  const status = refusal.keepStatus !== true && DECISION_CODES.has(refusal.code) && refusal.ids.length > 0 ? 200 : httpStatus
  writeGatewayMade(res, status, 'application/json', () => errorBody(refusal, codes, message), extraHeaders)
  return status
}
