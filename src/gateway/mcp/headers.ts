// The request headers an MCP route reads before the body, and the Mcp-Method / Mcp-Name check against it
// (docs/mcp.md, "What the gateway refuses").
import type { GatewayErrorCode } from '../../core/gateway-errors.js'
import { lowerHeaderName } from '../ingress/header-names.js'
import { isIdentityCoding, jsonMediaType } from '../ingress/media-type.js'
import type { McpMessageInfo } from './methods.js'

export interface McpRequestHeaders {
  contentType: string | undefined
  contentEncoding: string | undefined
  /** Each present once at most: a repeated one is refused before the body is read. */
  mcpMethod: string | undefined
  mcpName: string | undefined
  protocolVersion: string | undefined
  sessionId: string | undefined
}

/** The one protocol version whose JSON-RPC batches MCP allowed; a request without the header is assumed to speak it. */
const BATCH_VERSION = '2025-03-26'

/** Each header the stage reads, the field it fills, and the refusal when it comes twice. */
const READ: ReadonlyMap<string, readonly [keyof McpRequestHeaders, GatewayErrorCode]> = new Map([
  ['content-type', ['contentType', 'MCP_CONTENT_TYPE_UNSUPPORTED']],
  ['content-encoding', ['contentEncoding', 'MCP_CONTENT_ENCODING_UNSUPPORTED']],
  ['mcp-method', ['mcpMethod', 'MCP_HEADER_MISMATCH']],
  ['mcp-name', ['mcpName', 'MCP_HEADER_MISMATCH']],
  ['mcp-protocol-version', ['protocolVersion', 'MCP_HEADER_MISMATCH']],
  ['mcp-session-id', ['sessionId', 'MCP_HEADER_MISMATCH']],
])

/** Reads the headers in one pass over `rawHeaders`; the code of a refusal, or null. */
export function readMcpHeaders(raw: readonly string[], into: McpRequestHeaders): GatewayErrorCode | null {
  for (let i = 0; i < raw.length; i += 2) {
    const read = READ.get(lowerHeaderName(raw[i]!))
    if (read === undefined) continue
    const [field, repeated] = read
    if (into[field] !== undefined) return repeated
    into[field] = raw[i + 1]!
  }
  if (jsonMediaType(into.contentType) !== 'json') return 'MCP_CONTENT_TYPE_UNSUPPORTED'
  if (!isIdentityCoding(into.contentEncoding)) return 'MCP_CONTENT_ENCODING_UNSUPPORTED'
  return null
}

export function batchesAllowed(headers: McpRequestHeaders): boolean {
  return headers.protocolVersion === undefined || headers.protocolVersion.trim() === BATCH_VERSION
}

const BASE64_FORM = /^=\?base64\?([A-Za-z0-9+/]*={0,2})\?=$/

/** A header value as SEP-2243 writes it: printable ASCII as is, anything else as `=?base64?…?=` of its UTF-8. */
export function decodeHeaderValue(value: string): string | null {
  const match = BASE64_FORM.exec(value)
  if (match === null) return value
  const bytes = Buffer.from(match[1]!, 'base64')
  if (bytes.toString('base64') !== match[1]) return null
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes)
  } catch {
    return null
  }
}

/** Whether Mcp-Method and Mcp-Name, when sent, say what the body says (a batch can carry neither). */
export function headersMatchBody(headers: McpRequestHeaders, messages: readonly McpMessageInfo[], batch: boolean): boolean {
  if (headers.mcpMethod === undefined && headers.mcpName === undefined) return true
  if (batch || messages.length !== 1) return false
  const only = messages[0]!
  if (headers.mcpMethod !== undefined && (only.method === '' || headers.mcpMethod.trim() !== only.method)) return false
  if (headers.mcpName !== undefined) {
    if (only.addressed === undefined) return false
    return decodeHeaderValue(headers.mcpName.trim()) === only.addressed
  }
  return true
}
