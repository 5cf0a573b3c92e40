import type { PdpRequest } from './types.js'

/** What a protocol message (an MCP message, an A2A call) names besides its operation. */
export interface MessageSubjects {
  /** The MCP tool of a `tools/call`. */
  readonly tool?: string | undefined
  /** The skill an A2A message names (docs/a2a.md, "Skills"). */
  readonly skill?: string | undefined
}

/**
 * The PDP request's action for a message read from a protocol route (MCP or A2A): its operation, the HTTP
 * request that carried it, and the tool or skill it names. The gateway and policy simulation both build it
 * here, so a simulated question is the one the gateway asks.
 */
export function messagePdpAction(operation: string, httpOperation: string, named: MessageSubjects): PdpRequest['action'] {
  const action: PdpRequest['action'] = named.tool === undefined
    ? { operation, capability_class: null, http_operation: httpOperation }
    : { operation, capability_class: null, mcp_tool: named.tool, http_operation: httpOperation }
  if (named.skill !== undefined) action.a2a_skill = named.skill
  return action
}
