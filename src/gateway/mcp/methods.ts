// What each MCP message asks for, in the PDP's words: its operation, the tool and what it addresses
// (docs/mcp.md, "Operations").
import type { JsonObject } from '../../core/strict-json.js'
import type { JsonRpcMessage } from '../../core/json-rpc.js'

/** Which list a `*\/list` request asks for: its answer is filtered (docs/mcp.md, "Lists"). */
export type ListKind = 'tools' | 'prompts' | 'resources' | 'resourceTemplates'

/** What a message's params must name, and where. */
type Addressed = 'name' | 'uri' | null

interface MethodSpec {
  readonly operation: string
  readonly addressed: Addressed
  readonly list: ListKind | null
}

const spec = (operation: string, addressed: Addressed = null, list: ListKind | null = null): MethodSpec =>
  Object.freeze({ operation, addressed, list })

/** The client-to-server methods of MCP 2025-11-25; any other method is `mcp.method.other`. */
const METHODS: ReadonlyMap<string, MethodSpec> = new Map([
  ['initialize', spec('mcp.initialize')],
  ['ping', spec('mcp.ping')],
  ['tools/list', spec('mcp.tools.list', null, 'tools')],
  ['tools/call', spec('mcp.tool.call', 'name')],
  ['resources/list', spec('mcp.resources.list', null, 'resources')],
  ['resources/templates/list', spec('mcp.resources.templates.list', null, 'resourceTemplates')],
  ['resources/read', spec('mcp.resource.read', 'uri')],
  ['resources/subscribe', spec('mcp.resource.subscribe', 'uri')],
  ['resources/unsubscribe', spec('mcp.resource.unsubscribe', 'uri')],
  ['prompts/list', spec('mcp.prompts.list', null, 'prompts')],
  ['prompts/get', spec('mcp.prompt.get', 'name')],
  ['completion/complete', spec('mcp.completion.complete')],
  ['logging/setLevel', spec('mcp.logging.set_level')],
  ['tasks/get', spec('mcp.tasks.get')],
  ['tasks/list', spec('mcp.tasks.list')],
  ['tasks/result', spec('mcp.tasks.result')],
  ['tasks/cancel', spec('mcp.tasks.cancel')],
  ['notifications/initialized', spec('mcp.notification.initialized')],
  ['notifications/cancelled', spec('mcp.notification.cancelled')],
  ['notifications/progress', spec('mcp.notification.progress')],
  ['notifications/roots/list_changed', spec('mcp.notification.roots.list_changed')],
  ['notifications/tasks/status', spec('mcp.notification.tasks.status')],
])

const OTHER_METHOD = spec('mcp.method.other')
const OTHER_NOTIFICATION = spec('mcp.notification.other')

/** A JSON-RPC response the client sends back (to sampling, elicitation, roots/list or ping). */
export const RESPONSE_OPERATION = 'mcp.response'

/** The longest tool name, prompt name or resource URI the gateway accepts in a message. */
export const MAX_ADDRESSED_CHARS = 8192

/** One message as the stages decide on it. */
export interface McpMessageInfo {
  /** Null for the GET and DELETE of an MCP route, which carry no message. */
  readonly message: JsonRpcMessage | null
  /** The method, `''` for a response. */
  readonly method: string
  /** Bounded: the method when MCP defines it, else `other` (a metric label). */
  readonly methodLabel: string
  readonly operation: string
  /** The tool of a tools/call. */
  readonly tool: string | undefined
  /** The tool or prompt name, or the resource URI, the message addresses; undefined when it addresses none. */
  readonly addressed: string | undefined
  readonly list: ListKind | null
  /** UTF-8 bytes of `params.arguments` as sent (tools/call), for the enhanced log; never its content. */
  readonly argumentsBytes: number | undefined
}

function jsonBytes(value: unknown): number {
  return Buffer.byteLength(JSON.stringify(value), 'utf8')
}

/** The message's description, or a sentence saying which member is missing (answered as invalid params). */
export function describeMessage(message: JsonRpcMessage): McpMessageInfo | string {
  if (message.kind === 'response') {
    return { message, method: '', methodLabel: 'response', operation: RESPONSE_OPERATION, tool: undefined, addressed: undefined, list: null, argumentsBytes: undefined }
  }
  const method = message.method
  const known = METHODS.get(method)
  const info = known ?? (method.startsWith('notifications/') ? OTHER_NOTIFICATION : OTHER_METHOD)
  let addressed: string | undefined
  if (info.addressed !== null) {
    const value = (message.params as JsonObject | undefined)?.[info.addressed]
    if (typeof value !== 'string' || value === '') return `${method} needs a non-empty string params.${info.addressed}`
    if (value.length > MAX_ADDRESSED_CHARS) return `params.${info.addressed} of ${method} is longer than ${MAX_ADDRESSED_CHARS} characters`
    addressed = value
  }
  const isCall = info.operation === 'mcp.tool.call'
  const args = isCall ? (message.params as JsonObject | undefined)?.['arguments'] : undefined
  return {
    message,
    method,
    methodLabel: known === undefined ? 'other' : method,
    operation: info.operation,
    tool: isCall ? addressed : undefined,
    addressed,
    list: info.list,
    argumentsBytes: isCall ? (args === undefined ? 0 : jsonBytes(args)) : undefined,
  }
}

const bodiless = (method: string, operation: string): McpMessageInfo =>
  Object.freeze({ message: null, method, methodLabel: method, operation, tool: undefined, addressed: undefined, list: null, argumentsBytes: undefined })

/** GET opens the server's event stream; DELETE ends a session. */
export const STREAM_OPEN: McpMessageInfo = bodiless('GET', 'mcp.stream.open')
export const SESSION_END: McpMessageInfo = bodiless('DELETE', 'mcp.session.end')
