// The one shape of what a protocol route decides on (docs/gateway-request-handling.md, "One exchange shape"):
// an MCP message and an A2A call are both asked as a DecisionQuestion, so the decision cache key, the PDP
// request and simulation read the same members whichever protocol carried them.

/** What a message (MCP) or call (A2A) is decided as; a plain HTTP request has none (null). */
export interface DecisionQuestion {
  /** `mcp.tool.call`, `a2a.message.send`, …: the PDP request's `action.operation`. */
  readonly operation: string
  /** The name, URI or id the question is about: `resource.identifier` (else the request target). */
  readonly addressed: string | undefined
  /** The MCP tool of a `tools/call`. */
  readonly tool: string | undefined
  /** An A2A message's skill (docs/a2a.md, "Skills"). */
  readonly skill?: string | undefined
}
