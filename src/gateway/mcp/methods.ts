// What each MCP message asks for, in the PDP's words: its operation, the tool and what it addresses
// (docs/mcp.md, "Operations").
import type { JsonRpcMessage } from '../../core/json-rpc.js'
import type { JsonObject } from '../../core/strict-json.js'
import { mcpMethodSpec, type ListKind } from '../../core/mcp-methods.js'
import { MCP_TOOL_CALL_OPERATION } from '../../core/policy/evaluate.js'
import { canonicalResourceUri } from '../../core/resource-uri.js'
import type { DecisionQuestion } from '../decision-question.js'

export type { ListKind }

/** A JSON-RPC response the client sends back (to sampling, elicitation, roots/list or ping). */
export const RESPONSE_OPERATION = 'mcp.response'

/** The longest tool name, prompt name or resource URI the gateway accepts in a message. */
export const MAX_ADDRESSED_CHARS = 8192

/** One message as the stages decide on it: the question, and what the MCP stage and telemetry read besides. */
export interface McpMessageInfo extends DecisionQuestion {
  /** Null for the GET and DELETE of an MCP route, which carry no message. */
  readonly message: JsonRpcMessage | null
  /** The method, `''` for a response. */
  readonly method: string
  /** Bounded: the method when MCP defines it, else `other` (a metric label). */
  readonly methodLabel: string
  /** The tool or prompt name, or the resource URI (canonical), the message addresses; undefined when it addresses none. */
  readonly addressed: string | undefined
  /** True when `params.uri` was not in its canonical form: the body forwarded must carry `addressed` instead. */
  readonly rewritten?: true
  readonly list: ListKind | null
}

/** UTF-8 bytes of a tools/call's `params.arguments` (0 without), for the enhanced log: never its content. */
export function argumentsBytes(info: McpMessageInfo): number | undefined {
  if (info.tool === undefined || info.message === null || info.message.kind === 'response') return undefined
  const args = info.message.params?.['arguments']
  return args === undefined ? 0 : Buffer.byteLength(JSON.stringify(args), 'utf8')
}

/** The message's description, or a sentence saying which member is missing (answered as invalid params). */
export function describeMessage(message: JsonRpcMessage): McpMessageInfo | string {
  if (message.kind === 'response') {
    return { message, method: '', methodLabel: 'response', operation: RESPONSE_OPERATION, tool: undefined, addressed: undefined, list: null }
  }
  const method = message.method
  const info = mcpMethodSpec(method)
  let addressed: string | undefined
  let rewritten = false
  if (info.addressed !== null) {
    const value = (message.params as JsonObject | undefined)?.[info.addressed]
    if (typeof value !== 'string' || value === '') return `${method} needs a non-empty string params.${info.addressed}`
    if (value.length > MAX_ADDRESSED_CHARS) return `params.${info.addressed} of ${method} is longer than ${MAX_ADDRESSED_CHARS} characters`
    addressed = value
    if (info.addressed === 'uri') {
      const canonical = canonicalResourceUri(value)
      if (canonical === null) return `params.uri of ${method} is not a URL the server can resolve`
      if (canonical.length > MAX_ADDRESSED_CHARS) return `params.uri of ${method} is longer than ${MAX_ADDRESSED_CHARS} characters`
      if (canonical !== value) rewritten = true
      addressed = canonical
    }
  }
  const isCall = info.operation === MCP_TOOL_CALL_OPERATION
  const described: McpMessageInfo = {
    message,
    method,
    methodLabel: info.known ? method : 'other',
    operation: info.operation,
    tool: isCall ? addressed : undefined,
    addressed,
    list: info.list,
  }
  return rewritten ? { ...described, rewritten: true } : described
}

const bodiless = (method: string, operation: string): McpMessageInfo =>
  Object.freeze({ message: null, method, methodLabel: method, operation, tool: undefined, addressed: undefined, list: null })

/** GET opens the server's event stream; DELETE ends a session. */
export const STREAM_OPEN: McpMessageInfo = bodiless('GET', 'mcp.stream.open')
export const SESSION_END: McpMessageInfo = bodiless('DELETE', 'mcp.session.end')
