/**
 * examples/mcp-server.mjs, the MCP server of the walkthrough, answers the real SDK client in each of its four
 * modes (stateful or stateless, event streams or JSON): initialize, the four tools, a tool call, the prompt,
 * the resource and a client notification; a stateful session also carries the server's GET stream and ends
 * with DELETE. Its stderr log names what reached it, one line per request.
 */
import t, { type Test } from 'tap'
import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { createInterface } from 'node:readline'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { LATEST_PROTOCOL_VERSION, ResourceListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js'
import { projectPath } from '../../src/core/paths.js'

t.setTimeout(120_000)
const WAIT_MS = 10_000

interface ExampleServer {
  readonly url: string
  readonly log: string[]
  /** Resolves with the first log line that `matches`, already logged or still to come. */
  logLine(matches: (line: string) => boolean): Promise<string>
}

async function startExample(t: Test, env: Record<string, string>): Promise<ExampleServer> {
  const child: ChildProcess = spawn(process.execPath, [projectPath('examples', 'mcp-server.mjs')], {
    env: { ...process.env, PORT: '0', ...env }, stdio: ['ignore', 'pipe', 'pipe'],
  })
  t.teardown(async () => {
    if (child.exitCode !== null) return
    child.kill('SIGTERM')
    await once(child, 'exit')
  })
  const log: string[] = []
  const waiters: Array<{ matches: (line: string) => boolean; resolve: (line: string) => void }> = []
  createInterface({ input: child.stderr! }).on('line', (line) => {
    log.push(line)
    for (const waiter of waiters.filter((w) => w.matches(line))) {
      waiters.splice(waiters.indexOf(waiter), 1)
      waiter.resolve(line)
    }
  })
  const [banner] = await within(once(createInterface({ input: child.stdout! }), 'line') as Promise<[string]>, 'the start-up line')
  const url = /(http:\/\/127\.0\.0\.1:\d+\/mcp)/.exec(banner)?.[1]
  if (url === undefined) throw new Error(`unexpected start-up line: ${banner}`)
  return {
    url,
    log,
    logLine(matches) {
      const found = log.find(matches)
      if (found !== undefined) return Promise.resolve(found)
      return within(new Promise<string>((resolve) => waiters.push({ matches, resolve })), 'a log line')
    },
  }
}

function within<T>(promise: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not come within ${WAIT_MS} ms`)), WAIT_MS)
  })
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer))
}

/** A raw POST of one JSON-RPC message, for what the client hides (the content type, a refused session). */
function post(url: string, message: unknown, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
    body: JSON.stringify(message),
  })
}

const INITIALIZE = {
  jsonrpc: '2.0', id: 1, method: 'initialize',
  params: { protocolVersion: LATEST_PROTOCOL_VERSION, capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
}

const MODES = [
  { name: 'stateful, event streams', env: {}, stateful: true, contentType: 'text/event-stream' },
  { name: 'stateful, JSON', env: { MCP_JSON: '1' }, stateful: true, contentType: 'application/json' },
  { name: 'stateless, event streams', env: { MCP_STATELESS: '1' }, stateful: false, contentType: 'text/event-stream' },
  { name: 'stateless, JSON', env: { MCP_STATELESS: '1', MCP_JSON: '1' }, stateful: false, contentType: 'application/json' },
] as const

for (const mode of MODES) {
  t.test(`examples/mcp-server.mjs ${mode.name}`, async (t) => {
    const server = await startExample(t, mode.env)
    const client = new Client({ name: 'examples-test', version: '1.0.0' }, { capabilities: { roots: { listChanged: true } } })
    const transport = new StreamableHTTPClientTransport(new URL(server.url))
    let listChanged!: () => void
    const resourceListChanged = new Promise<void>((resolve) => { listChanged = resolve })
    client.setNotificationHandler(ResourceListChangedNotificationSchema, () => listChanged())
    await client.connect(transport)
    t.teardown(() => client.close())
    const session = transport.sessionId
    if (mode.stateful) t.match(session, /^[0-9a-f-]{36}$/, 'initialize opened a session')
    else t.equal(session, undefined, 'no session id when stateless')
    const sessionInLog = session ?? '-'

    const tools = await client.listTools()
    t.same(tools.tools.map((tool) => tool.name).sort(), ['delete_file', 'pay', 'read_file', 'search'], 'four tools')
    t.same(Object.keys(tools.tools.find((tool) => tool.name === 'pay')?.inputSchema.properties ?? {}).sort(), ['amount', 'to'])
    const found = await client.callTool({ name: 'search', arguments: { query: 'payments' } })
    t.match(found.content, [{ type: 'text', text: /hits for "payments":\n1\. \/docs\/readme\.md/ }], 'search lists fake hits')
    const refused = await client.callTool({ name: 'pay', arguments: { amount: -5, to: 'mallory' } })
    t.equal(refused.isError, true, 'arguments outside the input schema are refused')
    t.match(await client.callTool({ name: 'pay', arguments: { amount: 5, to: 'bob' } }), { content: [{ type: 'text', text: 'paid' }] })
    const prompts = await client.listPrompts()
    t.same(prompts.prompts.map((prompt) => prompt.name), ['summarize'])
    const prompt = await client.getPrompt({ name: 'summarize', arguments: { text: 'a long story' } })
    t.match(prompt.messages, [{ role: 'user', content: { type: 'text', text: /a long story/ } }])
    const resource = await client.readResource({ uri: 'file:///readme.md' })
    t.match(resource.contents, [{ uri: 'file:///readme.md', mimeType: 'text/markdown', text: /^# Example project/ }])
    await client.sendRootsListChanged()

    for (const rpc of ['initialize', 'notifications/initialized', 'tools/list', 'tools/call', 'prompts/list', 'prompts/get', 'resources/read', 'notifications/roots/list_changed']) {
      const session = rpc === 'initialize' ? '-' : sessionInLog
      await server.logLine((line) => line === `POST /mcp session=${session} rpc=${rpc}`)
    }
    t.pass('the log names every request that reached the server')
    const initialized = await post(server.url, INITIALIZE)
    t.equal(initialized.headers.get('content-type'), mode.contentType, `POST is answered with ${mode.contentType}`)
    await initialized.body?.cancel()

    if (mode.stateful) {
      // The client opens the server's stream once initialized; the notification travels on it.
      await server.logLine((line) => line === `GET /mcp session=${session} rpc=-`)
      t.match(await client.callTool({ name: 'delete_file', arguments: { path: '/src/index.js' } }), { content: [{ text: 'deleted' }] })
      await within(resourceListChanged, 'the notification on the GET stream')
      t.pass('a server notification arrived on the GET stream')
      await transport.terminateSession()
      await server.logLine((line) => line === `DELETE /mcp session=${session} rpc=-`)
      const after = await post(server.url, { jsonrpc: '2.0', id: 9, method: 'tools/list' }, { 'mcp-session-id': session! })
      t.equal(after.status, 404, 'the session ended with DELETE')
      await after.body?.cancel()
    } else {
      for (const method of ['GET', 'DELETE']) {
        const answer = await fetch(server.url, { method, headers: { accept: 'text/event-stream' } })
        t.equal(answer.status, 405, `${method} is not allowed when stateless`)
        await answer.body?.cancel()
      }
    }
  })
}

t.test('examples/mcp-server.mjs refuses what is not an MCP request and logs only visible characters', async (t) => {
  const server = await startExample(t, {})
  const forged = await post(server.url, { jsonrpc: '2.0', id: 1, method: 'tools/list\nPOST /mcp session=- rpc=pay' }, { 'mcp-session-id': 'x y' })
  t.equal(forged.status, 404, 'an unknown session is not found')
  await forged.body?.cancel()
  await server.logLine((line) => line === 'POST /mcp session=x?y rpc=tools/list?POST?/mcp?session=-?rpc=pay')
  t.notOk(server.log.includes('POST /mcp session=- rpc=pay'), 'a peer cannot add a log line')
  const batch = await post(server.url, [{ jsonrpc: '2.0', id: 1, result: {} }, ...Array.from({ length: 11 }, () => ({ jsonrpc: '2.0', method: 'n' }))])
  await batch.body?.cancel()
  await server.logLine((line) => line === `POST /mcp session=- rpc=(response),${'n,'.repeat(8)}n,...(12)`)
  t.pass('a batch is logged by its first ten methods and its length')

  const noSession = await post(server.url, { jsonrpc: '2.0', id: 1, method: 'tools/list' })
  t.equal(noSession.status, 400, 'a request other than initialize needs a session')
  t.match(await noSession.json(), { jsonrpc: '2.0', error: { code: -32000 }, id: null })
  const notJson = await fetch(server.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{' })
  t.equal(notJson.status, 400)
  t.match(await notJson.json(), { error: { code: -32700 } })
  const tooLarge = await fetch(server.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: 'a'.repeat(2 * 1024 * 1024) })
  t.equal(tooLarge.status, 413, 'a body over 1 MiB is refused')
  await tooLarge.body?.cancel()
  const elsewhere = await fetch(server.url.replace('/mcp', '/other'))
  t.equal(elsewhere.status, 404, 'only /mcp is served')
  await elsewhere.body?.cancel()
  const put = await fetch(server.url, { method: 'PUT' })
  t.equal(put.status, 405)
  t.equal(put.headers.get('allow'), 'GET, POST, DELETE')
  await put.body?.cancel()
  const alive = await post(server.url, INITIALIZE)
  t.equal(alive.status, 200, 'and still answers an MCP client')
  await alive.body?.cancel()
})

t.test('examples/mcp-server.mjs keeps 100 sessions and closes the oldest to open another', async (t) => {
  const server = await startExample(t, { MCP_JSON: '1' })
  const sessions: string[] = []
  const statuses = new Set<number>()
  for (let i = 0; i <= 100; i++) {
    const opened = await post(server.url, INITIALIZE)
    statuses.add(opened.status)
    await opened.body?.cancel()
    sessions.push(opened.headers.get('mcp-session-id') ?? '')
  }
  t.same([...statuses], [200], 'every initialize opened a session')
  const list = { jsonrpc: '2.0', id: 2, method: 'tools/list' }
  const headers = (session: string): Record<string, string> => ({ 'mcp-session-id': session, 'mcp-protocol-version': LATEST_PROTOCOL_VERSION })
  const oldest = await post(server.url, list, headers(sessions[0]!))
  t.equal(oldest.status, 404, 'the oldest session is gone')
  await oldest.body?.cancel()
  for (const session of [sessions[1]!, sessions[100]!]) {
    const kept = await post(server.url, list, headers(session))
    t.equal(kept.status, 200, 'the others are kept')
    await kept.body?.cancel()
  }
})

t.test('examples/mcp-server.mjs refuses a PORT that is not a port number', async (t) => {
  const child = spawn(process.execPath, [projectPath('examples', 'mcp-server.mjs')], { env: { ...process.env, PORT: '80; rm' }, stdio: 'ignore' })
  const [code] = await within(once(child, 'exit') as Promise<[number | null]>, 'the exit')
  t.equal(code, 2)
})
