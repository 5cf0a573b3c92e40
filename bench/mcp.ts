/**
 * The MCP configurations of bench/gateway.ts (docs/performance.md, "Method"): what the upstream answers on
 * `POST /mcp`, the two requests the load sends, the org policy whose `mcp_tools` rules the gateway enforces,
 * and the checks that a proxy answers as it should before it is measured.
 */
import { MCP_ERROR_CODES } from '../src/gateway/mcp/refusal.js'

export const MCP_PATH = '/mcp'
/** The tool every benchmarked `tools/call` names; the policy allows it by name. */
export const BENCH_TOOL = 'tool_07'

/** `tool_00` … `tool_49`, each with a short description and a small input schema. */
export const MCP_TOOLS: readonly { name: string; description: string; inputSchema: Record<string, unknown> }[] = Array.from({ length: 50 }, (_, i) => ({
  name: `tool_${String(i).padStart(2, '0')}`,
  description: `Looks up one record of collection ${i} by id.`,
  inputSchema: { type: 'object', properties: { id: { type: 'string' }, limit: { type: 'integer', minimum: 1 } }, required: ['id'] },
}))

export const MCP_TOOL_NAMES: readonly string[] = MCP_TOOLS.map((tool) => tool.name)

/** What the policy lets the benchmark agent see: everything but `tool_3*` (EV only) and `tool_4*` (nobody). */
export const VISIBLE_TOOL_NAMES: readonly string[] = MCP_TOOL_NAMES.filter((name) => !name.startsWith('tool_3') && !name.startsWith('tool_4'))

/** A tool the policy denies the benchmark agent, for the check that the gateway enforces it. */
export const DENIED_TOOL = 'tool_42'

const CALL_RESULT = JSON.stringify({ content: [{ type: 'text', text: '{"id":"a-17","status":"active","score":0.93}' }], isError: false })
const LIST_RESULT = JSON.stringify({ tools: MCP_TOOLS })

export interface McpAnswer {
  readonly status: number
  /** JSON text; empty for a notification (202). */
  readonly body: string
}

const jsonRpcError = (status: number, id: string, code: number, message: string): McpAnswer =>
  ({ status, body: `{"jsonrpc":"2.0","id":${id},"error":{"code":${code},"message":"${message}"}}` })

/**
 * The upstream's answer to one `POST /mcp` body: a fixed result for `tools/call` and the 50 tools for
 * `tools/list`, each for the request's id; JSON-RPC errors for anything else. Never throws.
 */
export function answerMcp(body: Buffer): McpAnswer {
  let message: unknown
  try {
    message = JSON.parse(body.toString('utf8'))
  } catch {
    return jsonRpcError(400, 'null', -32700, 'parse error')
  }
  if (typeof message !== 'object' || message === null || Array.isArray(message)) return jsonRpcError(400, 'null', -32600, 'not a single JSON-RPC message')
  const { jsonrpc, id, method, params } = message as Record<string, unknown>
  if (jsonrpc !== '2.0' || typeof method !== 'string') return jsonRpcError(400, 'null', -32600, 'not a JSON-RPC 2.0 request')
  if (id === undefined) return { status: 202, body: '' }
  if (typeof id !== 'string' && !Number.isSafeInteger(id)) return jsonRpcError(400, 'null', -32600, 'invalid id')
  const idText = JSON.stringify(id)
  if (method === 'tools/list') return { status: 200, body: `{"jsonrpc":"2.0","id":${idText},"result":${LIST_RESULT}}` }
  if (method !== 'tools/call') return jsonRpcError(200, idText, -32601, 'method not found')
  const name = typeof params === 'object' && params !== null ? (params as Record<string, unknown>).name : undefined
  if (typeof name !== 'string') return jsonRpcError(200, idText, -32602, 'tools/call needs params.name')
  return { status: 200, body: `{"jsonrpc":"2.0","id":${idText},"result":${CALL_RESULT}}` }
}

/** The benchmarked `tools/call` body: the bench tool with a small argument object. */
export function toolsCallBody(id: number | string, tool = BENCH_TOOL): string {
  return JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: tool, arguments: { id: 'a-17', limit: 5 } } })
}

export function toolsListBody(id: number | string): string {
  return JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/list', params: {} })
}

/** The headers of every MCP request, as an MCP client sends them after `initialize`, with the badge. */
export function mcpHeaders(token: string): Record<string, string> {
  return {
    'x-service-badge': token,
    'content-type': 'application/json',
    accept: 'application/json, text/event-stream',
    'mcp-protocol-version': '2025-06-18',
  }
}

/**
 * The MCP organization's policy for its agent `did`: path and operation rules the HTTP request and the MCP
 * operation are checked against, and `mcp_tools` rules that allow the bench tool by name, keep `tool_3*` for
 * EV agents and `tool_4*` for nobody, so a `tools/list` answer loses 20 of its 50 tools.
 */
export function mcpPolicy(did: string): string {
  return [
    'version: "1"',
    'denied_dids: ["did:web:blocked.example.com", "did:web:revoked.example.org"]',
    `allowed_dids: ["${did}", "did:web:partner.example.com"]`,
    'operations:',
    `  - pattern: "POST ${MCP_PATH}"`,
    `    allowed_dids: ["${did}", "did:web:partner.example.com"]`,
    '  - pattern: "DELETE /**"',
    '    min_trust_level: EV',
    '  - pattern: "mcp.resource.*"',
    '    min_trust_level: OV',
    'mcp_tools:',
    '  - tool: "tool_*"',
    '    denied_dids: ["did:web:partner.example.com"]',
    `  - tool: "${BENCH_TOOL}"`,
    `    allowed_dids: ["${did}"]`,
    '  - tool: "tool_3*"',
    '    min_trust_level: EV',
    '  - tool: "tool_4*"',
    '    allowed_dids: []',
    '',
  ].join('\n')
}

async function post(config: string, url: string, headers: Record<string, string>, body: string): Promise<string> {
  const res = await fetch(url, { method: 'POST', headers, body })
  const text = await res.text()
  if (res.status !== 200) throw new Error(`${config}: POST ${url} answered ${res.status}: ${text.slice(0, 300)}`)
  const type = res.headers.get('content-type') ?? ''
  if (!type.startsWith('application/json')) throw new Error(`${config}: POST ${url} answered ${type}, expected application/json`)
  return text
}

/**
 * Through the proxy at `base`: a `tools/call` answers exactly what the upstream answers for its id, and a
 * `tools/list` lists `expected` (all 50 tools through the floor, the allowed ones through the gateway), so
 * the benchmark measures answers and not refusals.
 */
export async function checkMcp(config: string, base: string, headers: Record<string, string>, expected: readonly string[]): Promise<void> {
  const url = `${base}${MCP_PATH}`
  const callBody = toolsCallBody('check-call')
  const answer = await post(config, url, headers, callBody)
  if (answer !== answerMcp(Buffer.from(callBody)).body) throw new Error(`${config}: tools/call answered ${answer.slice(0, 300)}, not the upstream's result`)
  const list = JSON.parse(await post(config, url, headers, toolsListBody('check-list'))) as { id?: unknown; result?: { tools?: { name?: unknown }[] } }
  const names = list.result?.tools?.map((tool) => tool.name)
  if (list.id !== 'check-list' || names === undefined || names.join(',') !== expected.join(',')) {
    throw new Error(`${config}: tools/list listed ${names === undefined ? 'no tools' : `${names.length} tools (${names.join(', ')})`}, expected ${expected.length}`)
  }
}

/** The gateway at `base` enforces the policy: a denied tool is refused as a JSON-RPC error, and no badge is 401. */
export async function checkMcpEnforced(config: string, base: string, headers: Record<string, string>): Promise<void> {
  const url = `${base}${MCP_PATH}`
  const denied = JSON.parse(await post(config, url, headers, toolsCallBody('check-denied', DENIED_TOOL))) as { id?: unknown; error?: { code?: unknown } }
  if (denied.id !== 'check-denied' || denied.error?.code !== MCP_ERROR_CODES.POLICY_DENIED) {
    throw new Error(`${config}: tools/call of ${DENIED_TOOL} was not refused with POLICY_DENIED: ${JSON.stringify(denied).slice(0, 300)}`)
  }
  const anonymous = { ...headers }
  delete anonymous['x-service-badge']
  const res = await fetch(url, { method: 'POST', headers: anonymous, body: toolsCallBody('check-anonymous') })
  await res.arrayBuffer()
  if (res.status !== 401) throw new Error(`${config}: tools/call without a badge answered ${res.status}, expected 401`)
}
