// The MCP server of the README walkthrough and the gateway's end-to-end tests: four fake tools (two that
// read, two that change things), a prompt and a resource, over Streamable HTTP at /mcp. It logs one line
// per request to stderr so you can see what reached it.
// Usage: [PORT=9300] [MCP_STATELESS=1] [MCP_JSON=1] node examples/mcp-server.mjs
//   MCP_STATELESS=1  no sessions: every POST gets a fresh server, GET and DELETE answer 405
//   MCP_JSON=1       answer each POST with one JSON body instead of an event stream
import { createServer } from 'node:http'
import { randomUUID } from 'node:crypto'
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js'
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js'
import * as z from 'zod/v4'

const PORT_TEXT = process.env.PORT ?? '9300'
const port = Number(PORT_TEXT)
if (!/^\d{1,5}$/.test(PORT_TEXT) || port > 65535) {
  console.error(`PORT must be a port number (0 for any free port), not ${JSON.stringify(PORT_TEXT)}`)
  process.exit(2)
}
const stateless = process.env.MCP_STATELESS === '1'
const json = process.env.MCP_JSON === '1'
const MAX_BODY_BYTES = 1024 * 1024
const MAX_SESSIONS = 100
const TEXT = 10_000

const FILES = new Map([
  ['/docs/readme.md', '# Example project\n\nA fake repository the example MCP server pretends to hold.\n'],
  ['/docs/payments.md', '# Payments\n\nThe pay tool pretends to transfer money.\n'],
  ['/src/index.js', 'console.log("hello")\n'],
])

function text(value) {
  return { content: [{ type: 'text', text: value }] }
}

function buildServer() {
  const server = new McpServer({ name: 'example-mcp-server', version: '1.0.0' })
  server.registerTool('search', {
    description: 'Searches the fake repository and lists the hits.',
    inputSchema: { query: z.string().max(TEXT) },
    annotations: { readOnlyHint: true },
  }, async ({ query }) => {
    const hits = [...FILES.keys()].map((path, index) => `${index + 1}. ${path} (matches "${query}")`)
    return text(`${hits.length} hits for "${query}":\n${hits.join('\n')}`)
  })
  server.registerTool('read_file', {
    description: 'Reads a file of the fake repository.',
    inputSchema: { path: z.string().max(TEXT) },
    annotations: { readOnlyHint: true },
  }, async ({ path }) => text(FILES.get(path) ?? `fake content of ${path}\n`))
  server.registerTool('delete_file', {
    description: 'Pretends to delete a file.',
    inputSchema: { path: z.string().max(TEXT) },
    annotations: { destructiveHint: true },
  }, async () => {
    // Announced on the session's GET stream (dropped when stateless), so a client can watch that stream work.
    server.server.sendResourceListChanged().catch(() => {})
    return text('deleted')
  })
  server.registerTool('pay', {
    description: 'Pretends to pay an amount to someone.',
    inputSchema: { amount: z.number().positive().finite(), to: z.string().max(TEXT) },
    annotations: { destructiveHint: true, openWorldHint: true },
  }, async () => text('paid'))
  server.registerPrompt('summarize', {
    description: 'Asks the model to summarize a text.',
    argsSchema: { text: z.string().max(TEXT) },
  }, ({ text: input }) => ({
    messages: [{ role: 'user', content: { type: 'text', text: `Summarize in three sentences:\n\n${input}` } }],
  }))
  server.registerResource('readme', 'file:///readme.md', { mimeType: 'text/markdown', description: 'The project README.' }, async (uri) => ({
    contents: [{ uri: uri.href, mimeType: 'text/markdown', text: FILES.get('/docs/readme.md') }],
  }))
  return server
}

/** Anything a peer sent, cut short and reduced to visible ASCII, so that it cannot forge log lines. */
function printable(value) {
  if (typeof value !== 'string' || value === '') return '-'
  return value.slice(0, 80).replace(/[^\x21-\x7e]/g, '?')
}

function rpcMethods(body) {
  const messages = Array.isArray(body) ? body : [body]
  const named = messages.slice(0, 10).map((message) => (typeof message?.method === 'string' ? printable(message.method) : '(response)'))
  return messages.length > 10 ? `${named.join(',')},...(${messages.length})` : named.join(',')
}

function sendRpcError(res, status, code, message) {
  if (res.headersSent) return res.destroy()
  res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null }))
}

/** The body as parsed JSON; undefined when it has been answered already (too large, not JSON) or the peer left. */
function readJson(req, res) {
  return new Promise((resolve) => {
    const chunks = []
    let size = 0
    req.on('data', (chunk) => {
      size += chunk.length
      if (size <= MAX_BODY_BYTES) return void chunks.push(chunk)
      if (res.headersSent) return
      // The rest is read and dropped, and the connection closed after the answer.
      res.setHeader('connection', 'close')
      sendRpcError(res, 413, -32000, 'Request body too large')
      resolve(undefined)
    })
    req.on('error', () => resolve(undefined))
    req.on('end', () => {
      if (size > MAX_BODY_BYTES) return
      try {
        resolve(JSON.parse(Buffer.concat(chunks).toString('utf8')))
      } catch {
        sendRpcError(res, 400, -32700, 'Parse error: Invalid JSON')
        resolve(undefined)
      }
    })
  })
}

function isInitialize(body) {
  return !Array.isArray(body) && body?.method === 'initialize'
}

async function handleStateless(req, res, body) {
  if (req.method !== 'POST') {
    res.setHeader('allow', 'POST')
    return sendRpcError(res, 405, -32000, 'Method not allowed: this server is stateless')
  }
  const server = buildServer()
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: json })
  res.on('close', () => {
    transport.close().catch(() => {})
    server.close().catch(() => {})
  })
  await server.connect(transport)
  await transport.handleRequest(req, res, body)
}

const sessions = new Map()

async function handleStateful(req, res, body, sessionId) {
  if (sessionId !== undefined) {
    const transport = sessions.get(sessionId)
    if (transport === undefined) return sendRpcError(res, 404, -32001, 'Session not found')
    return transport.handleRequest(req, res, body)
  }
  if (req.method !== 'POST' || !isInitialize(body)) return sendRpcError(res, 400, -32000, 'Bad Request: Mcp-Session-Id header is required')
  // Clients that never send DELETE would otherwise fill the table: the oldest session makes room.
  if (sessions.size >= MAX_SESSIONS) await sessions.values().next().value.close()
  const transport = new StreamableHTTPServerTransport({
    sessionIdGenerator: () => randomUUID(),
    enableJsonResponse: json,
    onsessioninitialized: (id) => sessions.set(id, transport),
  })
  const server = buildServer()
  // DELETE (or the eviction above) closes the transport.
  transport.onclose = () => {
    if (transport.sessionId !== undefined) sessions.delete(transport.sessionId)
    server.close().catch(() => {})
  }
  await server.connect(transport)
  await transport.handleRequest(req, res, body)
}

createServer(async (req, res) => {
  const sessionHeader = req.headers['mcp-session-id']
  const sessionId = typeof sessionHeader === 'string' ? sessionHeader : undefined
  const path = (req.url ?? '').split('?')[0]
  try {
    const hasMessage = req.method === 'POST' && path === '/mcp'
    const body = hasMessage ? await readJson(req, res) : undefined
    console.error(`${printable(req.method)} ${printable(path)} session=${printable(sessionId)} rpc=${body === undefined ? '-' : rpcMethods(body)}`)
    if (!hasMessage) req.resume()
    else if (body === undefined) return
    if (path !== '/mcp') return res.writeHead(404, { 'content-type': 'text/plain' }).end('not found: the MCP endpoint is /mcp\n')
    if (req.method !== 'GET' && req.method !== 'POST' && req.method !== 'DELETE') {
      res.setHeader('allow', stateless ? 'POST' : 'GET, POST, DELETE')
      return sendRpcError(res, 405, -32000, 'Method not allowed')
    }
    await (stateless ? handleStateless(req, res, body) : handleStateful(req, res, body, sessionId))
  } catch (error) {
    console.error(`error: ${error instanceof Error ? error.message : String(error)}`)
    sendRpcError(res, 500, -32603, 'Internal server error')
  }
}).listen(port, '127.0.0.1', function () {
  const mode = `${stateless ? 'stateless' : 'stateful'}, ${json ? 'JSON' : 'SSE'}`
  console.log(`example MCP server on http://127.0.0.1:${this.address().port}/mcp (${mode})`)
})
