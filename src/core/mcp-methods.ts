// The MCP methods a client sends and the PDP operations they are decided as (docs/mcp.md, "Operations"):
// shared by the gateway and the policy simulation, so both ask the same question.
import { MCP_TOOL_CALL_OPERATION } from './policy/evaluate.js'

/** Which list a `…/list` request asks for; also the member of its result that holds the items. */
export type ListKind = 'tools' | 'prompts' | 'resources' | 'resourceTemplates'

/** What a message's params must name, and where. */
export type Addressed = 'name' | 'uri' | null

export interface MethodSpec {
  /** False for the catch-alls: a method MCP does not define. */
  readonly known: boolean
  readonly operation: string
  readonly addressed: Addressed
  readonly list: ListKind | null
}

const spec = (operation: string, addressed: Addressed = null, list: ListKind | null = null, known = true): MethodSpec =>
  Object.freeze({ known, operation, addressed, list })

/** The client-to-server methods of MCP 2025-11-25; any other method is `mcp.method.other`. */
const MCP_METHODS: ReadonlyMap<string, MethodSpec> = new Map([
  ['initialize', spec('mcp.initialize')],
  ['ping', spec('mcp.ping')],
  ['tools/list', spec('mcp.tools.list', null, 'tools')],
  ['tools/call', spec(MCP_TOOL_CALL_OPERATION, 'name')],
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

const OTHER_METHOD = spec('mcp.method.other', null, null, false)
const OTHER_NOTIFICATION = spec('mcp.notification.other', null, null, false)

/** The spec of any method: MCP's own, or the catch-all for other notifications and other methods. */
export function mcpMethodSpec(method: string): MethodSpec {
  return MCP_METHODS.get(method) ?? (method.startsWith('notifications/') ? OTHER_NOTIFICATION : OTHER_METHOD)
}
