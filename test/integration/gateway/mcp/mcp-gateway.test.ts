/**
 * The gateway on an MCP route, end to end with the real MCP SDK: the example server (stateful and stateless,
 * JSON and SSE answers) behind the gateway (embedded PDP, EM-STRICT), and the SDK's Client through it.
 * Allowed calls return the tool's result, denied ones surface the reason in the client, lists show only
 * what may be used, sessions, notifications and the GET stream work; every refusal of the body and of the
 * Mcp-Method / Mcp-Name headers is answered by the gateway and the upstream receives nothing for it.
 */
import t, { type Test } from 'tap'
import { generateKeyPairSync, type KeyObject } from 'node:crypto'
import { createServer, type ServerResponse } from 'node:http'
import { gzipSync } from 'node:zlib'
import { readFileSync } from 'node:fs'
import type { AddressInfo } from 'node:net'
import { Readable } from 'node:stream'
import { request as httpRequest } from 'undici'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { McpError, ResourceListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js'
import { projectPath } from '../../../../src/core/paths.js'
import { buildBadgeClaims, signBadge } from '../../../../src/core/badge.js'
import type { TrustLevel } from '../../../../src/core/trust-level.js'
import { createEmbeddedPdp } from '../../../../src/gateway/pdp/embedded-pdp.js'
import { createHttpPdp } from '../../../../src/gateway/pdp/http-pdp.js'
import type { PolicyDecisionPoint } from '../../../../src/gateway/pdp/pdp.js'
import type { SnapshotHolder } from '../../../../src/gateway/snapshot/snapshot.js'
import { resourceServer } from '../../../../src/gateway/ingress/resource-metadata.js'
import { startOpaServer } from '../../../helpers/opa-server.js'
import { GATEWAY_ISSUER, GATEWAY_WORKSPACE, startProtocolGateway } from '../../../helpers/protocol-gateway.js'
import { startMcpUpstream, type McpUpstream, type McpUpstreamMode, type Reached } from '../../../helpers/mcp-upstream.js'

t.setTimeout(300_000)

/** The route's resource: an MCP route is a resource server by default (docs/mcp.md, "Authorization"). */
const RESOURCE = 'https://gw.example.com/mcp'
const READER = 'did:web:agents.example.com:reader'
const JANITOR = 'did:web:agents.example.com:janitor'
const key = generateKeyPairSync('ed25519')

function badgeFor(subject: string, level: TrustLevel = '2'): string {
  const now = Math.floor(Date.now() / 1000)
  return signBadge(buildBadgeClaims({
    jti: `jti-${subject}-${level}`, issuer: GATEWAY_ISSUER, subject, issuedAt: now - 10, expiresAt: now + 3600, ial: '1', level, domain: 'agents.example.com',
  }), { kid: 'k1', privateKey: key.privateKey as KeyObject })
}

// The walkthrough's policy: reading is for everyone, deleting for the janitor only, paying for OV and above.
const POLICY = {
  min_trust_level: null, allowed_dids: null, denied_dids: [], rate_limits: [], operations: [], capability_classes: [],
  mcp_tools: [
    { tool: 'delete_*', allowed_dids: [JANITOR] },
    { tool: 'pay', min_trust_level: 'OV' },
    { tool: 'read_file', rpm: 2 },
  ],
}

interface Harness {
  readonly gatewayUrl: string
  readonly upstream: McpUpstream
  logLines(): Record<string, unknown>[]
  readonly holder: SnapshotHolder
  metricsText(): Promise<string>
}

async function harness(
  t: Test, mode: McpUpstreamMode | McpUpstream, env: Record<string, string> = {}, policy: Record<string, unknown> = POLICY,
  pdp: PolicyDecisionPoint = createEmbeddedPdp(),
): Promise<Harness> {
  const upstream = 'url' in mode ? mode : await startMcpUpstream(t, mode)
  const gateway = await startProtocolGateway(t, {
    upstreamUrl: upstream.url, authorityKey: key.publicKey, policy, pdp, env: { SERVICE_MCP_METRIC_TOOLS: 'search', ...env },
    routes: (pool) => [{ prefix: '/mcp', value: { upstream: pool, mode: null, protocol: 'mcp', resourceServer: resourceServer(RESOURCE, false) } }],
  })
  return { gatewayUrl: gateway.url, upstream, logLines: gateway.logLines, holder: gateway.holder, metricsText: gateway.metricsText }
}

async function connect(t: Test, h: Harness, token: string): Promise<{ client: Client; transport: StreamableHTTPClientTransport }> {
  const client = new Client({ name: 'gateway-test', version: '1.0.0' }, { capabilities: { roots: { listChanged: true } } })
  const transport = new StreamableHTTPClientTransport(new URL(`${h.gatewayUrl}/mcp`), { requestInit: { headers: { authorization: `Bearer ${token}` } } })
  await client.connect(transport)
  t.teardown(() => client.close())
  return { client, transport }
}

async function refusalOf(t: Test, promise: Promise<unknown>): Promise<McpError> {
  const error = await promise.then(() => null, (caught: unknown) => caught)
  t.ok(error instanceof McpError, `rejected with an McpError (${String(error)})`)
  return error as McpError
}

const MODES: readonly (McpUpstreamMode & { name: string })[] = [
  { name: 'stateful, SSE answers', stateless: false, json: false },
  { name: 'stateful, JSON answers', stateless: false, json: true },
  { name: 'stateless, SSE answers', stateless: true, json: false },
  { name: 'stateless, JSON answers', stateless: true, json: true },
]

for (const mode of MODES) {
  t.test(`the SDK client through the gateway (${mode.name})`, async (t) => {
    const h = await harness(t, mode)
    const { client, transport } = await connect(t, h, badgeFor(READER))
    if (mode.stateless) t.equal(transport.sessionId, undefined, 'no session')
    else t.match(transport.sessionId, /^[0-9a-f-]{36}$/, 'the upstream\'s session id passed through')

    const tools = await client.listTools()
    t.strictSame(tools.tools.map((tool) => tool.name).sort(), ['read_file', 'search'], 'tools/list shows only the tools this agent may call')

    const found = await client.callTool({ name: 'search', arguments: { query: 'payments' } })
    t.match((found.content as { text: string }[])[0]!.text, /hits for "payments"/, 'an allowed call returns the tool\'s result')

    const before = h.upstream.rpcMethods().length
    const denied = await refusalOf(t, client.callTool({ name: 'delete_file', arguments: { path: '/src/index.js' } }))
    t.equal(denied.code, -32030)
    t.match(denied.data, { error: 'POLICY_DENIED', reason: 'mcp_tool_not_in_allow_list', decision_id: /\S/ }, 'the client sees the code, reason and decision id')
    // The badge is not bound to a key, so its holder cannot ask the token endpoint for more: the trust-level
    // denial stays a JSON-RPC error, not an insufficient_scope challenge.
    const poor = await refusalOf(t, client.callTool({ name: 'pay', arguments: { amount: 5, to: 'someone' } }))
    t.match(poor.data, { error: 'POLICY_DENIED', reason: 'mcp_tool_trust_level_below_minimum' })
    t.equal(h.upstream.rpcMethods().length, before, 'the upstream received neither denied call')

    await client.sendRootsListChanged()
    t.equal(h.upstream.rpcMethods().at(-1), 'notifications/roots/list_changed', 'a notification passes')

    const prompts = await client.listPrompts()
    t.strictSame(prompts.prompts.map((prompt) => prompt.name), ['summarize'])
    const readme = await client.readResource({ uri: 'file:///readme.md' })
    t.match((readme.contents[0] as { text: string }).text, /Example project/)

    const line = h.logLines().filter((entry) => entry.msg === 'gateway request' && entry['gen_ai.tool.name'] === 'delete_file')[0]
    t.match(line, {
      status: 200, error_code: 'POLICY_DENIED', 'service.policy.decision': 'DENY', 'mcp.method.name': 'tools/call',
      'service.policy.reason': 'mcp_tool_not_in_allow_list', 'jsonrpc.request.id': /\S/,
    }, 'the log line names the MCP method, tool and JSON-RPC id')
    if (!mode.stateless) t.equal(line?.['mcp.session.id'], transport.sessionId, 'and the session')
    const listed = h.logLines().filter((entry) => entry['mcp.method.name'] === 'tools/list')[0]
    t.equal(listed?.['mcp.list.removed'], 2, 'the log line counts the tools removed from the list')
  })
}

t.test('the GET stream and the end of a session (stateful)', async (t) => {
  const h = await harness(t, { stateless: false, json: false })
  const { client, transport } = await connect(t, h, badgeFor(JANITOR))
  const changed = new Promise<void>((resolve) => client.setNotificationHandler(ResourceListChangedNotificationSchema, () => resolve()))
  // The janitor may delete; the example server announces the change on the session's GET stream.
  const result = await client.callTool({ name: 'delete_file', arguments: { path: '/src/index.js' } })
  t.match((result.content as { text: string }[])[0]!.text, 'deleted')
  await changed
  t.ok(h.upstream.reached.some((entry) => entry.method === 'GET'), 'the GET stream went through the gateway')
  const session = transport.sessionId
  await transport.terminateSession()
  t.ok(h.upstream.reached.some((entry) => entry.method === 'DELETE' && entry.headers['mcp-session-id'] === session), 'DELETE ended the session upstream')
  const lines = h.logLines().filter((entry) => entry.msg === 'gateway request')
  t.ok(lines.some((entry) => entry.method === 'GET' && entry['mcp.session.id'] === session), 'the GET is logged with its session')
})

t.test('refusals of the body and headers, before anything reaches the upstream', async (t) => {
  const h = await harness(t, { stateless: true, json: true }, { SERVICE_MCP_MAX_BODY_BYTES: '65536' })
  const token = badgeFor(READER)
  const call = (id: number | string, name: string): Record<string, unknown> => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: { query: 'x' } } })
  async function post(body: string | Buffer, headers: Record<string, string> = {}): Promise<{ status: number; headers: Record<string, unknown>; json: unknown }> {
    const res = await httpRequest(`${h.gatewayUrl}/mcp`, {
      method: 'POST', body,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
    })
    const text = await res.body.text()
    return { status: res.statusCode, headers: res.headers, json: text === '' ? null : JSON.parse(text) as unknown }
  }
  const refusals: [string, string | Buffer, Record<string, string>, number, Record<string, unknown>][] = [
    ['text/plain', JSON.stringify(call(1, 'search')), { 'content-type': 'text/plain' }, 415, { id: null, error: { code: -32600, data: { error: 'MCP_CONTENT_TYPE_UNSUPPORTED' } } }],
    ['a charset other than UTF-8', JSON.stringify(call(1, 'search')), { 'content-type': 'application/json; charset=latin1' }, 415, { error: { data: { error: 'MCP_CONTENT_TYPE_UNSUPPORTED' } } }],
    ['gzip', JSON.stringify(call(1, 'search')), { 'content-encoding': 'gzip' }, 415, { error: { data: { error: 'MCP_CONTENT_ENCODING_UNSUPPORTED' } } }],
    ['invalid UTF-8', Buffer.concat([Buffer.from('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search\xff"}}', 'latin1')]), {}, 400, { id: null, error: { code: -32700, data: { error: 'MCP_MESSAGE_INVALID' } } }],
    ['a duplicate key', '{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call","params":{"name":"delete_file"}}', {}, 400, { error: { code: -32700 } }],
    ['a duplicate key spelt with an escape', '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","na\\u006de":"delete_file"}}', {}, 400, { error: { code: -32700 } }],
    ['not JSON-RPC', '{"hello":"world"}', {}, 400, { error: { code: -32600, data: { error: 'MCP_MESSAGE_INVALID' } } }],
    ['a tools/call without a tool name', '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{}}', {}, 400, { id: 7, error: { code: -32602 } }],
    ['a batch after 2025-03-26', JSON.stringify([call(1, 'search'), call(2, 'read_file')]), { 'mcp-protocol-version': '2025-06-18' }, 400, { error: { data: { error: 'MCP_BATCH_NOT_ALLOWED' } } }],
    ['a body over the limit', JSON.stringify({ ...call(1, 'search'), params: { name: 'search', arguments: { query: 'x'.repeat(70_000) } } }), {}, 413, { error: { data: { error: 'MCP_BODY_TOO_LARGE' } } }],
    ['Mcp-Method unlike the body', JSON.stringify(call(3, 'search')), { 'mcp-method': 'tools/list' }, 400, { id: 3, error: { code: -32020, data: { error: 'MCP_HEADER_MISMATCH' } } }],
    ['Mcp-Name unlike the body', JSON.stringify(call(4, 'delete_file')), { 'mcp-method': 'tools/call', 'mcp-name': 'search' }, 400, { id: 4, error: { code: -32020 } }],
    ['Mcp-Name in base64 unlike the body', JSON.stringify(call(5, 'delete_file')), { 'mcp-name': `=?base64?${Buffer.from('search').toString('base64')}?=` }, 400, { id: 5, error: { code: -32020 } }],
    ['a batch with one denied element', JSON.stringify([call(8, 'search'), call(9, 'delete_file')]), {}, 200, [{ id: 8, error: { code: -32030 } }, { id: 9, error: { code: -32030, data: { reason: 'mcp_tool_not_in_allow_list' } } }] as unknown as Record<string, unknown>],
  ]
  for (const [name, body, headers, status, shape] of refusals) {
    const before = h.upstream.reached.length
    const answer = await post(body, headers)
    t.equal(answer.status, status, `${name}: ${status}`)
    t.match(answer.json, shape, `${name}: the JSON-RPC error`)
    t.equal(answer.headers['x-service-gateway'], 'error', `${name}: gateway-made`)
    t.equal(h.upstream.reached.length, before, `${name}: nothing reached the upstream`)
  }

  const unicode = await post(JSON.stringify(call(10, 'search')), { 'mcp-method': 'tools/call', 'mcp-name': `=?base64?${Buffer.from('search').toString('base64')}?=` })
  t.equal(unicode.status, 200, 'matching headers (Mcp-Name in base64) pass')
  t.match(unicode.json, { id: 10, result: { content: [{ type: 'text' }] } })
  const batch = await post(JSON.stringify([call(11, 'search'), call(12, 'read_file')]), { 'mcp-protocol-version': '2025-03-26' })
  t.equal(batch.status, 200, 'an allowed batch in 2025-03-26 passes')

  const noBadge = await httpRequest(`${h.gatewayUrl}/mcp`, { method: 'POST', body: JSON.stringify(call(1, 'search')), headers: { 'content-type': 'application/json' } })
  await noBadge.body.text()
  t.equal(noBadge.statusCode, 401)
  t.equal(noBadge.headers['www-authenticate'], 'Bearer resource_metadata="https://gw.example.com/.well-known/oauth-protected-resource/mcp"',
    'a missing badge is 401 with a Bearer challenge naming the protected-resource metadata')
})

t.test('per-tool rate limits, path rules, prompt rules and the metrics', async (t) => {
  const policy = {
    ...POLICY,
    // Nobody may read prompts; the MCP messages of this path keep the path rule of the HTTP request.
    operations: [{ pattern: 'mcp.prompt.get', allowed_dids: [] }, { pattern: 'POST /mcp/**', denied_dids: [JANITOR] }],
  }
  const h = await harness(t, { stateless: true, json: false }, {}, policy)
  const { client } = await connect(t, h, badgeFor(READER))
  for (let i = 0; i < 2; i++) await client.callTool({ name: 'read_file', arguments: { path: '/docs/readme.md' } })
  const limited = await refusalOf(t, client.callTool({ name: 'read_file', arguments: { path: '/docs/readme.md' } }))
  t.equal(limited.code, -32034, 'the tool\'s own limit (2 a minute) refuses the third call')
  t.match(limited.data, { error: 'rate_limit_exceeded', retry_after: Number })
  await client.callTool({ name: 'search', arguments: { query: 'still fine' } })
  t.pass('another tool has its own bucket')

  t.strictSame((await client.listPrompts()).prompts, [], 'prompts/list shows no prompt the agent may not get')
  const prompt = await refusalOf(t, client.getPrompt({ name: 'summarize', arguments: { text: 'x' } }))
  t.match(prompt.data, { reason: 'operation_not_in_allow_list' })

  const janitor = await connect(t, h, badgeFor(JANITOR)).then(() => null, (error: unknown) => error)
  t.match(String(janitor), /-32030/, 'the path rule of POST /mcp holds for the MCP initialize')

  const text = await h.metricsText()
  t.match(text, /service_gateway_mcp_messages_total\{method="tools\/call",decision="ALLOW",tool="search"\} 1/, 'a listed tool is counted by name')
  t.match(text, /service_gateway_mcp_messages_total\{method="tools\/call",decision="DENY",tool=""\} 1/, 'other tools only by method')
  t.match(text, /service_gateway_mcp_messages_total\{method="initialize",decision="ALLOW",tool=""\}/)
})

t.test('a body split anywhere across packets reaches the upstream whole and is decided the same', async (t) => {
  const h = await harness(t, { stateless: true, json: true })
  const url = new URL(h.gatewayUrl)
  const token = badgeFor(READER)
  const fc = (await import('fast-check')).default
  const { propertyRuns } = await import('../../../helpers/property-runs.js')
  const net = await import('node:net')
  async function rawPost(body: Buffer, cuts: number[]): Promise<string> {
    const head = `POST /mcp HTTP/1.1\r\nhost: ${url.host}\r\nauthorization: Bearer ${token}\r\ncontent-type: application/json\r\n` +
      `accept: application/json, text/event-stream\r\ncontent-length: ${body.length}\r\nconnection: close\r\n\r\n`
    const socket = net.connect(Number(url.port), url.hostname)
    socket.setNoDelay(true)
    const answer = new Promise<string>((resolve, reject) => {
      const chunks: Buffer[] = []
      socket.on('data', (chunk: Buffer) => chunks.push(chunk))
      socket.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')))
      socket.on('error', reject)
    })
    await new Promise<void>((resolve) => socket.once('connect', () => resolve()))
    socket.write(head)
    let at = 0
    for (const cut of [...cuts, body.length]) {
      socket.write(body.subarray(at, cut))
      at = cut
      await new Promise((resolve) => setTimeout(resolve, 1))
    }
    return answer
  }
  // read_file is left out: its own rate limit would refuse it after two calls.
  const names = fc.constantFrom('search', 'delete_file', 'pay')
  await fc.assert(fc.asyncProperty(names, fc.integer({ min: 1, max: 1000 }), fc.string({ unit: 'grapheme', maxLength: 40 }), fc.array(fc.nat(), { maxLength: 8 }), async (name, id, query, rawCuts) => {
    const body = Buffer.from(JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: name === 'pay' ? { amount: 1, to: query } : { query, path: query } } }), 'utf8')
    const cuts = [...new Set(rawCuts.map((cut) => cut % body.length))].filter((cut) => cut > 0).sort((a, b) => a - b)
    const before = h.upstream.reached.length
    const answer = await rawPost(body, cuts)
    const allowed = name === 'search'
    if (allowed) {
      t.equal(h.upstream.reached.length, before + 1)
      t.equal(h.upstream.reached.at(-1)!.body, body.toString('utf8'), 'the upstream received the body byte for byte')
    } else {
      t.equal(h.upstream.reached.length, before, 'a denied call never reaches the upstream')
      t.match(answer, /"code":-32030/)
    }
    t.match(answer, new RegExp(`"id":${id}[,}]`), 'the answer is for this request')
  }), { ...propertyRuns(25), interruptAfterTimeLimit: 60_000 })
})

t.test('EM-OBSERVE forwards what it would deny and lists everything, logging the decision', async (t) => {
  const h = await harness(t, { stateless: true, json: true }, { SERVICE_ENFORCEMENT_MODE: 'EM-OBSERVE' })
  const { client } = await connect(t, h, badgeFor(READER))
  t.equal((await client.listTools()).tools.length, 4, 'nothing is removed')
  const result = await client.callTool({ name: 'delete_file', arguments: { path: '/src/index.js' } })
  t.match((result.content as { text: string }[])[0]!.text, 'deleted', 'the denied call went through')
  t.ok(h.upstream.rpcMethods().includes('tools/call'))
  const line = h.logLines().find((entry) => entry['gen_ai.tool.name'] === 'delete_file')
  t.match(line, { 'service.policy.decision': 'ALLOW_OBSERVE', 'service.policy.reason': 'mcp_tool_not_in_allow_list' })
})

t.test('a streamed body is stopped as soon as it passes the limit', async (t) => {
  const h = await harness(t, { stateless: true, json: true }, { SERVICE_MCP_MAX_BODY_BYTES: '4096' })
  async function* chunks(): AsyncGenerator<Buffer> {
    yield Buffer.from('{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{"query":"')
    for (let i = 0; i < 64; i++) yield Buffer.alloc(1024, 0x61)
    yield Buffer.from('"}}}')
  }
  const before = h.upstream.reached.length
  const res = await httpRequest(`${h.gatewayUrl}/mcp`, {
    method: 'POST', body: Readable.from(chunks()),
    headers: { authorization: `Bearer ${badgeFor(READER)}`, 'content-type': 'application/json' },
  }).catch((error: unknown) => error)
  if (res instanceof Error) {
    // The gateway may close before the client has sent everything; the answer was still a refusal.
    t.match(res.message, /socket|closed|reset|other side/i, `the connection closed: ${res.message}`)
  } else {
    const answer = res as Awaited<ReturnType<typeof httpRequest>>
    t.equal(answer.statusCode, 413)
    t.match(await answer.body.json(), { error: { data: { error: 'MCP_BODY_TOO_LARGE' } } })
  }
  t.equal(h.upstream.reached.length, before, 'nothing reached the upstream')
  t.match(h.logLines().find((entry) => entry.error_code === 'MCP_BODY_TOO_LARGE'), { status: 413 }, 'logged as a 413')
})

t.test('a list answer is filtered whatever its media type, and asked for uncompressed', async (t) => {
  const reached: Reached[] = []
  const tools = { jsonrpc: '2.0', id: 1, result: { tools: [{ name: 'search', inputSchema: { type: 'object' } }, { name: 'delete_file', inputSchema: { type: 'object' } }] } }
  let answer: (res: ServerResponse) => void = () => {}
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', () => {
      reached.push({ method: req.method ?? '', path: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks).toString('utf8') })
      answer(res)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  const upstream: McpUpstream = { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, reached, rpcMethods: () => [] }
  const h = await harness(t, upstream)
  const list = async (): Promise<unknown> => {
    const res = await httpRequest(`${h.gatewayUrl}/mcp`, {
      method: 'POST', body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
      headers: { authorization: `Bearer ${badgeFor(READER)}`, 'content-type': 'application/json', 'accept-encoding': 'gzip, br' },
    })
    return res.body.json()
  }
  answer = (res) => res.writeHead(200, { 'content-type': 'text/plain' }).end(JSON.stringify(tools))
  t.strictSame(await list(), { jsonrpc: '2.0', id: 1, result: { tools: [{ name: 'search', inputSchema: { type: 'object' } }] } }, 'text/plain is read as JSON and filtered')
  t.equal(reached.at(-1)?.headers['accept-encoding'], undefined, 'the upstream was not offered compression')
  answer = (res) => res.writeHead(200).end(JSON.stringify(tools))
  t.match(await list(), { result: { tools: [{ name: 'search' }] } }, 'so is an answer without a content type')
  answer = (res) => res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'gzip' }).end(gzipSync(JSON.stringify(tools)))
  t.match(await list(), { id: null, error: { code: -32603 } }, 'a compressed list is replaced by an error, never passed unread')
})

t.test('OPA decides MCP messages from the same request, with the Rego module users deploy', async (t) => {
  const opa = await startOpaServer(t, [{ name: 'policies/service/policy.rego', text: readFileSync(projectPath('policies', 'service', 'policy.rego'), 'utf8') }])
  opa.load(GATEWAY_WORKSPACE, { config: POLICY })
  const pdp = createHttpPdp({ endpoint: opa.url, protocol: 'opa', timeoutMs: 120_000, pepId: 'pep-mcp' })
  t.teardown(() => pdp.close())
  const h = await harness(t, { stateless: true, json: true }, { SERVICE_EMBEDDED_PDP: 'false', SERVICE_PDP_ENDPOINT: opa.url, SERVICE_PDP_PROTOCOL: 'opa' }, POLICY, pdp)
  const { client } = await connect(t, h, badgeFor(READER))
  t.strictSame((await client.listTools()).tools.map((tool) => tool.name).sort(), ['read_file', 'search'], 'OPA filters the list')
  const denied = await refusalOf(t, client.callTool({ name: 'delete_file', arguments: { path: '/x' } }))
  t.match(denied.data, { error: 'POLICY_DENIED', reason: 'mcp_tool_not_in_allow_list' }, 'and denies the call, for the same reason')
  t.match((await client.callTool({ name: 'search', arguments: { query: 'q' } })).content, [{ type: 'text' }])
})

t.test('a list remembers what the embedded PDP hid until the bundle changes; a call is always decided', async (t) => {
  const embedded = createEmbeddedPdp()
  const asked: string[] = []
  const counting: PolicyDecisionPoint = {
    kind: 'embedded',
    decide(request, snapshot) {
      asked.push(`${request.action.operation} ${request.action.mcp_tool ?? ''}`)
      return embedded.decide(request, snapshot)
    },
    close: () => embedded.close(),
  }
  const h = await harness(t, { stateless: true, json: true }, {}, POLICY, counting)
  const { client } = await connect(t, h, badgeFor(READER))
  await client.listTools()
  const hidden = (): number => asked.filter((entry) => entry === 'mcp.tool.call delete_file' || entry === 'mcp.tool.call pay').length
  t.equal(hidden(), 2, 'the first list asks about both hidden tools')
  await client.listTools()
  t.equal(hidden(), 2, 'the second list remembers them')
  await client.callTool({ name: 'delete_file', arguments: { path: '/x' } }).catch(() => {})
  t.equal(hidden(), 3, 'a call to a hidden tool is still decided by the PDP')
  const current = h.holder.current
  h.holder.swap({ ...current, bundle: { revision: 'r2', data: { config: { ...POLICY, mcp_tools: [] } }, confirmedAt: Date.now() } })
  t.strictSame((await client.listTools()).tools.map((tool) => tool.name).sort(), ['delete_file', 'pay', 'read_file', 'search'], 'a new revision forgets them')
})
