// The JSON-RPC codes of an MCP route's refusals (docs/mcp.md, "Refusals"); json-rpc-refusal.ts writes them.
import type { GatewayErrorCode } from '../../core/gateway-errors.js'
import { DECISION_ERROR_CODES, type JsonRpcErrorCodes } from '../json-rpc-refusal.js'

export { INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR } from '../json-rpc-refusal.js'

export const MCP_ERROR_CODES: JsonRpcErrorCodes = Object.freeze({
  ...DECISION_ERROR_CODES,
  MCP_HEADER_MISMATCH: -32020,
  MCP_BODY_TOO_LARGE: -32600,
  MCP_CONTENT_TYPE_UNSUPPORTED: -32600,
  MCP_CONTENT_ENCODING_UNSUPPORTED: -32600,
  MCP_BATCH_NOT_ALLOWED: -32600,
  // -32000, as the SDK's own Host check and session lookup answer.
  MCP_HOST_NOT_ALLOWED: -32000,
  MCP_ORIGIN_NOT_ALLOWED: -32000,
  MCP_SESSION_FORBIDDEN: -32000,
  MCP_SESSION_UNKNOWN: -32001,
} satisfies Partial<Record<GatewayErrorCode, number>>)
