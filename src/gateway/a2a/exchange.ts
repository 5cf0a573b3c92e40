// What the A2A stage learns about one request on an A2A route, and the JSON-RPC codes of its refusals
// (docs/a2a.md, "Refusals"); allocated only there.
import type { A2aBinding, A2aCall } from '../../core/a2a-methods.js'
import type { GatewayErrorCode } from '../../core/gateway-errors.js'
import type { DecisionQuestion } from '../decision-question.js'
import { JsonRpcExchange } from '../json-rpc-exchange.js'
import { DECISION_ERROR_CODES, type JsonRpcErrorCodes } from '../json-rpc-refusal.js'

/** A2A's own ContentTypeNotSupportedError (spec 0.3 §8.2, 1.0 §5.4). */
const CONTENT_TYPE_NOT_SUPPORTED = -32005

export const A2A_ERROR_CODES: JsonRpcErrorCodes = Object.freeze({
  ...DECISION_ERROR_CODES,
  A2A_BODY_TOO_LARGE: -32600,
  A2A_CONTENT_TYPE_UNSUPPORTED: CONTENT_TYPE_NOT_SUPPORTED,
  A2A_OPERATION_UNKNOWN: -32601,
} satisfies Partial<Record<GatewayErrorCode, number>>)

/** A2A has no batches (an array body is refused), so `batch` stays false. */
export class A2aExchange extends JsonRpcExchange {
  readonly codes = A2A_ERROR_CODES
  /** Known from the method and path before any body is read. */
  binding: A2aBinding
  call: A2aCall | null = null
  /** The call as the PDP is asked about it: the task id, else the context id, is `addressed`. */
  question: DecisionQuestion | null = null

  constructor(binding: A2aBinding) {
    super()
    this.binding = binding
  }

  override answersInJsonRpc(): boolean {
    return this.binding === 'jsonrpc'
  }
}
