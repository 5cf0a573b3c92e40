// What the A2A stage learns about one request on an A2A route, and the JSON-RPC codes of its refusals
// (docs/a2a.md, "Refusals"); allocated only there.
import type { A2aBinding, A2aCall } from '../../core/a2a-methods.js'
import type { GatewayErrorCode } from '../../core/gateway-errors.js'
import type { JsonRpcId } from '../../core/json-rpc.js'
import { DECISION_ERROR_CODES, type JsonRpcErrorCodes } from '../json-rpc-refusal.js'

/** A2A's own ContentTypeNotSupportedError (spec 0.3 §8.2, 1.0 §5.4). */
const CONTENT_TYPE_NOT_SUPPORTED = -32005

export const A2A_ERROR_CODES: JsonRpcErrorCodes = Object.freeze({
  ...DECISION_ERROR_CODES,
  A2A_BODY_TOO_LARGE: -32600,
  A2A_CONTENT_TYPE_UNSUPPORTED: CONTENT_TYPE_NOT_SUPPORTED,
  A2A_OPERATION_UNKNOWN: -32601,
} satisfies Partial<Record<GatewayErrorCode, number>>)

const NO_IDS: readonly JsonRpcId[] = Object.freeze([])

/** The question the PDP is asked about an A2A call (decide.ts reads the same members of an MCP message). */
export interface A2aQuestion {
  readonly operation: string
  /** The task id, else the context id: `resource.identifier`; undefined: the request target. */
  readonly addressed: string | undefined
  readonly tool: undefined
  readonly skill: string | undefined
}

export class A2aExchange {
  /** Known from the method and path before any body is read. */
  binding: A2aBinding
  call: A2aCall | null = null
  question: A2aQuestion | null = null
  /** Always false: A2A has no batches (an array body is refused). */
  readonly batch = false
  /** The request id a JSON-RPC refusal answers (none: one error with id null). */
  answerIds: readonly JsonRpcId[] = NO_IDS
  /** The JSON-RPC code of an A2A_MESSAGE_INVALID refusal. */
  rpcCode: number | undefined = undefined

  constructor(binding: A2aBinding) {
    this.binding = binding
  }
}
