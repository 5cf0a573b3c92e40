// What the MCP stage learns about one POST on an MCP route; allocated only there.
import type { JsonRpcId } from '../../core/json-rpc.js'
import { JsonRpcExchange } from '../json-rpc-exchange.js'
import type { McpRequestHeaders } from './headers.js'
import type { ListFilter } from './list-filter.js'
import type { McpMessageInfo } from './methods.js'
import { MCP_ERROR_CODES } from './refusal.js'

export class McpExchange extends JsonRpcExchange implements McpRequestHeaders {
  readonly codes = MCP_ERROR_CODES
  contentType: string | undefined = undefined
  contentEncoding: string | undefined = undefined
  mcpMethod: string | undefined = undefined
  mcpName: string | undefined = undefined
  protocolVersion: string | undefined = undefined
  sessionId: string | undefined = undefined
  /** The body forwarded: as received, or written again with canonical resource URIs; what was decided on is what is forwarded. */
  body: Buffer | null = null
  messages: readonly McpMessageInfo[] = []
  /** Index of the next message to decide. */
  next = 0
  /** The filter the list answer went through, for the count of removed items in the log line. */
  listFilter: ListFilter | null = null

  /** Every request id of the body, in order (a refused batch is refused for each of them). */
  requestIds(): JsonRpcId[] {
    const ids: JsonRpcId[] = []
    for (const info of this.messages) if (info.message?.kind === 'request') ids.push(info.message.id)
    return ids
  }
}
