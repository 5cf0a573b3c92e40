/**
 * MCP's streams through the gateway (docs/mcp.md, "Streams"), with the real SDK on both sides: a Streamable
 * HTTP server in this process (its SSE keep-alive comments off, so its silences are real) behind a gateway
 * whose upstream time-out is 300 ms. The SDK client's standing GET stream outlives that time-out and
 * receives a notification sent after a longer silence; a tool call whose SSE answer is silent longer still
 * gets its result; a JSON answer slower than the time-out is 504 UPSTREAM_TIMEOUT; and the head of a GET
 * stream reaches the client before any event, as the server sent it.
 */
import t, { type Test } from 'tap'
import { generateKeyPairSync, randomUUID, type KeyObject } from 'node:crypto'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { request } from 'undici'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js'
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js'
import { ResourceListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js'
import * as z from 'zod/v4'
import { buildBadgeClaims, signBadge } from '../../../../src/core/badge.js'
import { GATEWAY_ISSUER, startProtocolGateway } from '../../../helpers/protocol-gateway.js'

t.setTimeout(120_000)

const TIMEOUT_MS = 300
/** Longer than the upstream time-out, by far. */
const SILENCE_MS = 1_200
const key = generateKeyPairSync('ed25519')
const POLICY = { min_trust_level: null, allowed_dids: null, denied_dids: [], rate_limits: [], operations: [], mcp_tools: [], capability_classes: [] }

function token(): string {
  const now = Math.floor(Date.now() / 1000)
  return signBadge(buildBadgeClaims({
    jti: `jti-${randomUUID()}`, issuer: GATEWAY_ISSUER, subject: 'did:web:agents.example.com:client', issuedAt: now - 10, expiresAt: now + 3600, ial: '1', level: '2', domain: 'agents.example.com',
  }), { kid: 'k1', privateKey: key.privateKey as KeyObject })
}

interface SdkUpstream {
  readonly url: string
  /** Announces a resource-list change on every session's GET stream. */
  notifyAll(): void
}

/** The SDK's stateful Streamable HTTP server: `slow` answers after SILENCE_MS, `notify_later` announces a change after SILENCE_MS. */
async function sdkUpstream(t: Test, json: boolean): Promise<SdkUpstream> {
  const transports = new Map<string, StreamableHTTPServerTransport>()
  const servers: McpServer[] = []
  const build = (): McpServer => {
    const server = new McpServer({ name: 'streams', version: '1.0.0' }, { capabilities: { resources: { listChanged: true } } })
    server.registerTool('slow', { description: 'answers after a silence', inputSchema: {} }, async () => {
      await sleep(SILENCE_MS)
      return { content: [{ type: 'text', text: 'slow answer' }] }
    })
    server.registerTool('notify_later', { description: 'announces a change after a silence', inputSchema: { note: z.string().optional() } }, async () => {
      setTimeout(() => void server.server.sendResourceListChanged().catch(() => {}), SILENCE_MS).unref()
      return { content: [{ type: 'text', text: 'will notify' }] }
    })
    servers.push(server)
    return server
  }
  const http = createServer((req: IncomingMessage, res: ServerResponse) => {
    void (async () => {
      const sid = req.headers['mcp-session-id']
      let transport = typeof sid === 'string' ? transports.get(sid) : undefined
      if (transport === undefined) {
        const created: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(), enableJsonResponse: json, keepAliveMs: 0,
          onsessioninitialized: (id) => void transports.set(id, created),
        })
        await build().connect(created)
        transport = created
      }
      await transport.handleRequest(req, res)
    })().catch(() => res.destroy())
  })
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve))
  t.teardown(async () => {
    for (const server of servers) await server.close().catch(() => {})
    http.closeAllConnections()
    await new Promise<void>((resolve) => http.close(() => resolve()))
  })
  return {
    url: `http://127.0.0.1:${(http.address() as AddressInfo).port}`,
    notifyAll: () => {
      for (const server of servers) void server.server.sendResourceListChanged().catch(() => {})
    },
  }
}

async function through(t: Test, upstream: SdkUpstream, timeoutMs = TIMEOUT_MS): Promise<string> {
  const gw = await startProtocolGateway(t, {
    upstreamUrl: upstream.url, authorityKey: key.publicKey, policy: POLICY, upstream: { timeoutMs },
    routes: (pool) => [{ prefix: '/mcp', value: { upstream: pool, mode: null, protocol: 'mcp' } }],
  })
  return `${gw.url}/mcp`
}

async function connect(t: Test, url: string): Promise<Client> {
  const client = new Client({ name: 'streams-test', version: '1.0.0' })
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { authorization: `Bearer ${token()}` } } })
  await client.connect(transport)
  t.teardown(() => client.close())
  return client
}

t.test('the SDK client\'s standing stream outlives the upstream time-out and gets a late notification', async (t) => {
  const url = await through(t, await sdkUpstream(t, false))
  const client = await connect(t, url)
  const errors: Error[] = []
  client.onerror = (error) => void errors.push(error)
  let notified = 0
  const changed = new Promise<void>((resolve) => client.setNotificationHandler(ResourceListChangedNotificationSchema, () => {
    notified++
    resolve()
  }))
  const result = await client.callTool({ name: 'notify_later', arguments: {} })
  t.match(result.content, [{ text: 'will notify' }])
  const late = await Promise.race([changed.then(() => 'notified'), sleep(SILENCE_MS * 4).then(() => 'lost')])
  t.equal(late, 'notified', `the notification sent after ${SILENCE_MS} ms of silence arrived`)
  t.equal(notified, 1)
  t.strictSame(errors.map((error) => error.message), [], 'the client\'s stream never failed')
})

t.test('a tool call whose SSE answer is silent longer than the time-out gets its result', async (t) => {
  const url = await through(t, await sdkUpstream(t, false))
  const client = await connect(t, url)
  const result = await client.callTool({ name: 'slow', arguments: {} })
  t.match(result.content, [{ text: 'slow answer' }])
})

t.test('a JSON answer slower than the time-out is 504 UPSTREAM_TIMEOUT', async (t) => {
  const url = await through(t, await sdkUpstream(t, true))
  const client = await connect(t, url)
  const failed = await client.callTool({ name: 'slow', arguments: {} }).then(() => null, (error: unknown) => error as Error & { code?: unknown })
  t.ok(failed !== null, 'the call failed')
  t.equal(failed?.code, 504, 'with the gateway\'s 504 (the SDK\'s transport error carries the status)')
  t.match(failed?.message, /UPSTREAM_TIMEOUT/)
})

t.test('the head of a GET stream reaches the client before any event', async (t) => {
  const upstream = await sdkUpstream(t, false)
  // A long time-out: only the head's delivery is under test here.
  const url = await through(t, upstream, 10_000)
  const authorization = `Bearer ${token()}`
  const post = async (body: unknown, session?: string): Promise<string | undefined> => {
    const answer = await request(url, {
      method: 'POST', body: JSON.stringify(body),
      headers: { authorization, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18', ...(session === undefined ? {} : { 'mcp-session-id': session }) },
    })
    await answer.body.text()
    const id = answer.headers['mcp-session-id']
    return typeof id === 'string' ? id : session
  }
  const session = await post({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } })
  t.type(session, 'string', 'a session')
  await post({ jsonrpc: '2.0', method: 'notifications/initialized' }, session)
  const opened = request(url, { headers: { authorization, accept: 'text/event-stream', 'mcp-protocol-version': '2025-06-18', 'mcp-session-id': session! } })
  const head = await Promise.race([opened, sleep(2_000).then(() => null)])
  t.ok(head !== null, 'the head arrived while the server had sent no event')
  if (head === null) {
    upstream.notifyAll()
    await opened.then((answer) => answer.body.destroy(), () => {})
    return
  }
  t.equal(head.statusCode, 200)
  t.match(head.headers['content-type'], /^text\/event-stream/)
  upstream.notifyAll()
  const iterator = head.body[Symbol.asyncIterator]()
  const first = await iterator.next()
  t.match(String(first.value), /notifications\/resources\/list_changed/, 'then the event')
  head.body.destroy()
})
