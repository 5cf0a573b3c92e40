/**
 * What the real MCP SDK client (Client over StreamableHTTPClientTransport, no auth provider) shows its
 * caller for each way the gateway could refuse an MCP call. A node:http stub stands in for the gateway:
 * it passes every message to a real SDK server, except the one it is told to refuse, which it answers
 * with the shape under test. The expected observations are the SDK's behaviour today, so an SDK upgrade
 * that changes what a caller sees fails here (docs/wire-contract.md then needs a look).
 */
import t from 'tap'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js'
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js'
import { McpError } from '@modelcontextprotocol/sdk/types.js'
import * as z from 'zod/v4'

t.setTimeout(120_000)

// ---------------------------------------------------------------------------------------------------
// The stub gateway: one refusal armed at a time, for the next message with the armed JSON-RPC method.

type JsonRpcId = string | number | null
type Refusal = (res: ServerResponse, id: JsonRpcId) => void
let armed: { method: string; refuse: Refusal } | null = null
const reached: string[] = []

function buildUpstream(): McpServer {
  const server = new McpServer({ name: 'upstream', version: '1.0.0' })
  server.registerTool('search', { inputSchema: { query: z.string() } }, async ({ query }) => ({ content: [{ type: 'text', text: `found ${query}` }] }))
  return server
}

async function readBody(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = []
  for await (const chunk of req) chunks.push(chunk as Buffer)
  return chunks.length === 0 ? undefined : JSON.parse(Buffer.concat(chunks).toString('utf8'))
}

const stub = createServer((req, res) => {
  reached.push(`${req.method} ${req.url}`)
  void (async () => {
    const body = await readBody(req) as { method?: unknown; id?: JsonRpcId } | undefined
    if (armed !== null && body?.method === armed.method) {
      const { refuse } = armed
      armed = null
      return refuse(res, body.id ?? null)
    }
    if (req.method !== 'POST') return res.writeHead(405, { allow: 'POST' }).end()
    const upstream = buildUpstream()
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true })
    res.on('close', () => void transport.close().then(() => upstream.close()))
    await upstream.connect(transport)
    await transport.handleRequest(req, res, body)
  })().catch((error: unknown) => {
    if (!res.headersSent) res.writeHead(500).end(String(error))
  })
})
await new Promise<void>((resolve) => stub.listen(0, '127.0.0.1', resolve))
t.teardown(() => new Promise<void>((resolve) => {
  stub.closeAllConnections()
  stub.close(() => resolve())
}))
const URL_MCP = new URL(`http://127.0.0.1:${(stub.address() as AddressInfo).port}/mcp`)

// ---------------------------------------------------------------------------------------------------
// The candidate answers.

const DENIAL = { error: 'POLICY_DENIED', decision_id: 'dec-1', reason: 'tool_not_allowed' }
const RPC_ERROR = { code: -32030, message: 'The policy denies this request.', data: DENIAL }
// The body the gateway writes today for every refusal (src/gateway/respond.ts).
const PLAIN_BODY = JSON.stringify({ error: 'POLICY_DENIED', message: 'The policy denies this request.', decision_id: 'dec-1', reason: 'tool_not_allowed' })
const BADGE_BODY = JSON.stringify({ error: 'BADGE_MISSING', message: 'A trust badge is required (Authorization: Bearer or X-Service-Badge).' })
const JSON_TYPE = 'application/json; charset=utf-8'

const rpcErrorBody = (id: JsonRpcId): string => JSON.stringify({ jsonrpc: '2.0', id, error: RPC_ERROR })

function answer(status: number, headers: Record<string, string>, body: (id: JsonRpcId) => string): Refusal {
  return (res, id) => {
    const text = body(id)
    res.writeHead(status, { ...headers, 'content-length': Buffer.byteLength(text) }).end(text)
  }
}

const isErrorResult = (id: JsonRpcId, extra: object = {}): string => JSON.stringify({
  jsonrpc: '2.0', id, result: { content: [{ type: 'text', text: 'denied: tool_not_allowed (decision dec-1)' }], isError: true, ...extra },
})
const httpError = (body: string): string => `Streamable HTTP error: Error POSTing to endpoint: ${body}`

// ---------------------------------------------------------------------------------------------------
// Recording what the caller sees.

interface Observation {
  readonly outcome: 'rejected' | 'resolved'
  readonly className?: string
  readonly code?: unknown
  readonly message?: string
  readonly data?: unknown
  readonly result?: unknown
  /** A later tools/call on the same client still succeeds. */
  readonly usableAfter?: boolean
}

function rejected(error: unknown): Observation {
  const fields = error as { code?: unknown; message?: unknown; data?: unknown }
  return {
    outcome: 'rejected',
    className: (error as object)?.constructor?.name,
    code: fields.code,
    message: typeof fields.message === 'string' ? fields.message : undefined,
    data: fields.data,
  }
}

async function connectClient(): Promise<{ client: Client; transport: StreamableHTTPClientTransport }> {
  const client = new Client({ name: 'refusal-shapes', version: '1.0.0' })
  // Transport errors also reach onerror; the rejection of the call is what this test reads.
  client.onerror = () => {}
  const transport = new StreamableHTTPClientTransport(URL_MCP)
  await client.connect(transport)
  return { client, transport }
}

async function observeToolCall(refuse: Refusal): Promise<Observation> {
  const { client } = await connectClient()
  try {
    armed = { method: 'tools/call', refuse }
    let observation: Observation
    try {
      observation = { outcome: 'resolved', result: await client.callTool({ name: 'search', arguments: { query: 'q' } }, undefined, { timeout: 2_000 }) }
    } catch (error) {
      observation = rejected(error)
    }
    const next = await client.callTool({ name: 'search', arguments: { query: 'again' } }, undefined, { timeout: 2_000 }).catch(() => null)
    return { ...observation, usableAfter: next !== null && (next.content as Array<{ text?: string }>)[0]?.text === 'found again' }
  } finally {
    armed = null
    await client.close()
  }
}

async function observeInitialize(refuse: Refusal): Promise<Observation> {
  armed = { method: 'initialize', refuse }
  try {
    const { client } = await connectClient()
    await client.close()
    return { outcome: 'resolved' }
  } catch (error) {
    return rejected(error)
  } finally {
    armed = null
  }
}

// ---------------------------------------------------------------------------------------------------
// The observations.

t.test('the stub passes an unrefused call to the real server', async (t) => {
  const { client } = await connectClient()
  t.same(await client.callTool({ name: 'search', arguments: { query: 'q' } }), { content: [{ type: 'text', text: 'found q' }] })
  await client.close()
})

// (a) Only a JSON-RPC error in a 2xx answer reaches the caller as McpError with code and data intact: the
// caller reads error.code, error.data.reason and error.data.decision_id.
t.test('a: HTTP 200, JSON-RPC error', async (t) => {
  for (const contentType of ['application/json', JSON_TYPE]) {
    const seen = await observeToolCall(answer(200, { 'content-type': contentType }, rpcErrorBody))
    t.same(seen, { outcome: 'rejected', className: 'McpError', code: -32030, message: 'MCP error -32030: The policy denies this request.', data: DENIAL, usableAfter: true }, contentType)
  }
})

// An id other than the request's (here null) fails the SDK's message schema: the caller gets the ZodError.
t.test('a, answered with id null instead of the request id', async (t) => {
  const seen = await observeToolCall(answer(200, { 'content-type': JSON_TYPE }, () => rpcErrorBody(null)))
  t.match(seen, { outcome: 'rejected', className: 'ZodError', code: undefined, data: undefined, usableAfter: true })
  t.match(seen.message, /"path": \[\s*"id"\s*\]/, 'the message is the schema failure on id')
})

// (b) A non-2xx status hides the JSON-RPC body: the caller gets StreamableHTTPError whose code is the HTTP
// status and whose message embeds the body text (parseable only by cutting the prefix off); no data, and
// Retry-After is not exposed.
for (const [status, headers] of [[403, {}], [429, { 'retry-after': '7' }], [503, {}]] as const) {
  t.test(`b: HTTP ${status}, JSON-RPC error body`, async (t) => {
    const seen = await observeToolCall(answer(status, { 'content-type': JSON_TYPE, ...headers }, rpcErrorBody))
    const id = 1 // the initialize request is 0, this call 1
    t.same(seen, { outcome: 'rejected', className: 'StreamableHTTPError', code: status, message: httpError(rpcErrorBody(id)), data: undefined, usableAfter: true })
  })
}

// (c) As (b): the status as code, the gateway's plain body only inside the message text.
t.test('c: HTTP 403, the gateway\'s plain JSON body', async (t) => {
  const seen = await observeToolCall(answer(403, { 'content-type': JSON_TYPE }, () => PLAIN_BODY))
  t.same(seen, { outcome: 'rejected', className: 'StreamableHTTPError', code: 403, message: httpError(PLAIN_BODY), data: undefined, usableAfter: true })
})

// (d) Not an error at all for the caller: the call resolves and only the text says why, unless the
// result also carries structuredContent or _meta, which the client passes through untouched.
t.test('d: HTTP 200, a tool result with isError', async (t) => {
  const seen = await observeToolCall(answer(200, { 'content-type': JSON_TYPE }, (id) => isErrorResult(id)))
  t.same(seen, { outcome: 'resolved', result: { content: [{ type: 'text', text: 'denied: tool_not_allowed (decision dec-1)' }], isError: true }, usableAfter: true })
  const extra = { structuredContent: DENIAL, _meta: { 'io.agent-trust/refusal': DENIAL } }
  const withData = await observeToolCall(answer(200, { 'content-type': JSON_TYPE }, (id) => isErrorResult(id, extra)))
  t.same(withData, { outcome: 'resolved', result: { content: [{ type: 'text', text: 'denied: tool_not_allowed (decision dec-1)' }], isError: true, ...extra }, usableAfter: true })
})

// (e) The same as (a): an event stream carrying the JSON-RPC error gives McpError with code and data.
t.test('e: HTTP 200, one event carrying the JSON-RPC error', async (t) => {
  const seen = await observeToolCall(answer(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' }, (id) => `event: message\ndata: ${rpcErrorBody(id)}\n\n`))
  t.same(seen, { outcome: 'rejected', className: 'McpError', code: -32030, message: 'MCP error -32030: The policy denies this request.', data: DENIAL, usableAfter: true })
})

// (f) Without an auth provider a 401 is a StreamableHTTPError like any other status: connect() rejects,
// WWW-Authenticate (and its resource_metadata) is not read and nothing else is fetched.
t.test('f: HTTP 401 on initialize, with WWW-Authenticate: Bearer', async (t) => {
  for (const challenge of ['Bearer', `Bearer resource_metadata="http://127.0.0.1:${URL_MCP.port}/.well-known/oauth-protected-resource"`]) {
    reached.length = 0
    const seen = await observeInitialize(answer(401, { 'content-type': JSON_TYPE, 'www-authenticate': challenge }, () => BADGE_BODY))
    t.same(seen, { outcome: 'rejected', className: 'StreamableHTTPError', code: 401, message: httpError(BADGE_BODY), data: undefined }, challenge)
    t.same(reached, ['POST /mcp'], 'no other request follows the 401')
  }
})

t.test('f, on a tools/call after initialize: the same error, and the client stays usable', async (t) => {
  const seen = await observeToolCall(answer(401, { 'content-type': JSON_TYPE, 'www-authenticate': 'Bearer' }, () => BADGE_BODY))
  t.same(seen, { outcome: 'rejected', className: 'StreamableHTTPError', code: 401, message: httpError(BADGE_BODY), data: undefined, usableAfter: true })
})

t.test('the classes a caller would test with instanceof', async (t) => {
  let caught: unknown
  armed = { method: 'tools/call', refuse: answer(200, { 'content-type': JSON_TYPE }, rpcErrorBody) }
  const first = await connectClient()
  await first.client.callTool({ name: 'search', arguments: { query: 'q' } }).catch((error: unknown) => { caught = error })
  await first.client.close()
  t.ok(caught instanceof McpError, 'a JSON-RPC error is an McpError')
  armed = { method: 'tools/call', refuse: answer(403, { 'content-type': JSON_TYPE }, rpcErrorBody) }
  const second = await connectClient()
  await second.client.callTool({ name: 'search', arguments: { query: 'q' } }).catch((error: unknown) => { caught = error })
  await second.client.close()
  t.ok(caught instanceof StreamableHTTPError, 'a non-2xx status is a StreamableHTTPError')
  t.equal((caught as Error).name, 'Error', 'whose name is not set, so only instanceof or constructor.name tell it apart')
})

// Retry-After of a 429 is visible only to a caller that hands the transport its own fetch.
t.test('a caller wrapping fetch sees the status and Retry-After of a 429', async (t) => {
  const statuses: Array<{ status: number; retryAfter: string | null }> = []
  const client = new Client({ name: 'refusal-shapes', version: '1.0.0' })
  client.onerror = () => {}
  const transport = new StreamableHTTPClientTransport(URL_MCP, {
    fetch: async (url, init) => {
      const response = await fetch(url, init)
      statuses.push({ status: response.status, retryAfter: response.headers.get('retry-after') })
      return response
    },
  })
  await client.connect(transport)
  armed = { method: 'tools/call', refuse: answer(429, { 'content-type': JSON_TYPE, 'retry-after': '7' }, rpcErrorBody) }
  await t.rejects(client.callTool({ name: 'search', arguments: { query: 'q' } }), { code: 429 })
  t.same(statuses.at(-1), { status: 429, retryAfter: '7' })
  await client.close()
})
