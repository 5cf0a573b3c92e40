// What the stage of a JSON-RPC protocol route (MCP, A2A) keeps about one request for its refusals: the ids an
// error answers, whether as a batch, the code of a malformed body, and the protocol's table of codes, so that
// refuse.ts writes every protocol's refusals one way.
import type { JsonRpcId } from '../core/json-rpc.js'
import type { JsonRpcErrorCodes } from './json-rpc-refusal.js'

const NO_IDS: readonly JsonRpcId[] = Object.freeze([])

export abstract class JsonRpcExchange {
  /** The JSON-RPC code of each gateway refusal on this protocol's routes (docs/mcp.md and docs/a2a.md, "Refusals"). */
  abstract readonly codes: JsonRpcErrorCodes
  /** The body was a batch: a refusal answers as one. */
  batch = false
  /** The request ids a refusal answers (none: one error with id null). */
  answerIds: readonly JsonRpcId[] = NO_IDS
  /** The JSON-RPC code of a malformed body's refusal (parse error, invalid request or invalid params). */
  rpcCode: number | undefined = undefined

  /** Whether refusals are JSON-RPC answers; A2A's REST binding gets the gateway's JSON error instead. */
  answersInJsonRpc(): boolean {
    return true
  }
}
