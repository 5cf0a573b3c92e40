/**
 * The real MCP SDK server (McpServer over Streamable HTTP) in this process, whose handlers record what they
 * executed: the tool called, the resource read (the URL the SDK resolved and handed to the read callback),
 * the prompt rendered, the URI a subscribe or unsubscribe handler received. Stateless (a fresh server per
 * POST) or stateful with an event store, so that a GET with `Last-Event-ID` replays a session's answers.
 */
import type { Test } from 'tap'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { randomUUID } from 'node:crypto'
import { McpServer, ResourceTemplate } from '@modelcontextprotocol/sdk/server/mcp.js'
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js'
import type { EventStore } from '@modelcontextprotocol/sdk/server/streamableHttp.js'
import type { JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js'
import { SubscribeRequestSchema, UnsubscribeRequestSchema } from '@modelcontextprotocol/sdk/types.js'
import * as z from 'zod/v4'
import type { PdpRequest } from '../../src/core/policy/types.js'
import type { PdpAnswer, PolicyDecisionPoint } from '../../src/gateway/pdp/pdp.js'

export interface Executed {
  readonly kind: 'tool' | 'resource' | 'prompt' | 'subscribe' | 'unsubscribe'
  /** The tool or prompt name, the resolved URL's href, or the URI string the handler got. */
  readonly name: string
}

export interface RecordingServerMode {
  readonly stateless: boolean
  readonly json: boolean
}

export interface RecordingServer {
  readonly url: string
  /** Everything executed so far, in order; the test may empty it. */
  readonly executed: Executed[]
}

/** The tools, prompts, resources and templates the server offers (the list answers show them all). */
export const SERVER_TOOLS = ['search', 'delete_file', 'pay'] as const
export const SERVER_PROMPTS = ['summarize', 'secret_prompt'] as const
export const SERVER_RESOURCES = ['file:///readme.md', 'file:///secret.md', 'FILE:///secret-listed.md', 'memo://Box/notes'] as const
export const SERVER_TEMPLATES = ['file:///docs/{name}', 'FILE:///secret{suffix}'] as const

/**
 * Events in the order they were stored, by a counter: the SDK's example store sorts ids that start with a
 * millisecond clock and end in random letters, so two events of one millisecond replay in random order.
 */
class OrderedEventStore implements EventStore {
  readonly #events: { id: string; streamId: string; message: JSONRPCMessage }[] = []

  async storeEvent(streamId: string, message: JSONRPCMessage): Promise<string> {
    const id = `${streamId}-${this.#events.length}`
    this.#events.push({ id, streamId, message })
    return id
  }

  async replayEventsAfter(lastEventId: string, { send }: { send: (eventId: string, message: JSONRPCMessage) => Promise<void> }): Promise<string> {
    const at = this.#events.findIndex((event) => event.id === lastEventId)
    if (at < 0) return ''
    const { streamId } = this.#events[at]!
    for (const event of this.#events.slice(at + 1)) if (event.streamId === streamId) await send(event.id, event.message)
    return streamId
  }
}

function buildServer(executed: Executed[]): McpServer {
  const server = new McpServer({ name: 'recording-mcp-server', version: '1.0.0' })
  const text = (value: string): { content: { type: 'text'; text: string }[] } => ({ content: [{ type: 'text', text: value }] })
  for (const name of SERVER_TOOLS) {
    server.registerTool(name, { description: `the ${name} tool`, inputSchema: { query: z.string().optional() } }, async () => {
      executed.push({ kind: 'tool', name })
      return text(`${name} ran`)
    })
  }
  for (const name of SERVER_PROMPTS) {
    server.registerPrompt(name, { description: `the ${name} prompt` }, () => {
      executed.push({ kind: 'prompt', name })
      return { messages: [{ role: 'user', content: { type: 'text', text: name } }] }
    })
  }
  for (const uri of SERVER_RESOURCES) {
    server.registerResource(uri, uri, { mimeType: 'text/plain' }, async (url) => {
      executed.push({ kind: 'resource', name: url.href })
      return { contents: [{ uri: url.href, text: `content of ${url.href}` }] }
    })
  }
  for (const template of SERVER_TEMPLATES) {
    server.registerResource(template, new ResourceTemplate(template, { list: undefined }), { mimeType: 'text/plain' }, async (url) => {
      executed.push({ kind: 'resource', name: url.href })
      return { contents: [{ uri: url.href, text: `content of ${url.href}` }] }
    })
  }
  server.server.registerCapabilities({ resources: { subscribe: true } })
  server.server.setRequestHandler(SubscribeRequestSchema, async (request) => {
    executed.push({ kind: 'subscribe', name: request.params.uri })
    return {}
  })
  server.server.setRequestHandler(UnsubscribeRequestSchema, async (request) => {
    executed.push({ kind: 'unsubscribe', name: request.params.uri })
    return {}
  })
  return server
}

export async function startRecordingServer(t: Test, mode: RecordingServerMode): Promise<RecordingServer> {
  const executed: Executed[] = []
  const sessions = new Map<string, StreamableHTTPServerTransport>()
  const http = createServer((req, res) => {
    void (async () => {
      if (mode.stateless) {
        const server = buildServer(executed)
        const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: mode.json })
        res.on('close', () => {
          void transport.close()
          void server.close()
        })
        await server.connect(transport)
        await transport.handleRequest(req, res)
        return
      }
      const sessionId = req.headers['mcp-session-id']
      if (typeof sessionId === 'string') {
        const transport = sessions.get(sessionId)
        if (transport === undefined) {
          res.writeHead(404, { 'content-type': 'application/json' }).end('{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Session not found"}}')
          return
        }
        await transport.handleRequest(req, res)
        return
      }
      const server = buildServer(executed)
      const transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(), enableJsonResponse: mode.json, eventStore: new OrderedEventStore(),
        onsessioninitialized: (id) => { sessions.set(id, transport) },
      })
      await server.connect(transport)
      await transport.handleRequest(req, res)
    })().catch(() => {
      if (!res.headersSent) res.writeHead(500).end()
      else res.destroy()
    })
  })
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve))
  t.teardown(async () => {
    for (const transport of sessions.values()) await transport.close()
    http.closeAllConnections()
    await new Promise<void>((resolve) => http.close(() => resolve()))
  })
  return { url: `http://127.0.0.1:${(http.address() as AddressInfo).port}`, executed }
}

/** What the gateway asked its PDP, and the answer. */
export interface Decided {
  readonly operation: string
  readonly identifier: string
  readonly outcome: string
}

/** Resources whose canonical URI starts with this are denied (reads, subscriptions, list items). */
export const DENIED_RESOURCE_PREFIX = 'file:///secret'
export const DENIED_PROMPTS: ReadonlySet<string> = new Set(['secret_prompt'])
/** The tools the policy below keeps from a reader: deleting is the janitor's, paying needs OV. */
export const DENIED_TOOLS: ReadonlySet<string> = new Set(['delete_file', 'pay'])
export const READER_POLICY = {
  min_trust_level: null, allowed_dids: null, denied_dids: [], rate_limits: [], operations: [], capability_classes: [],
  mcp_tools: [{ tool: 'delete_*', allowed_dids: ['did:web:agents.example.com:janitor'] }, { tool: 'pay', min_trust_level: 'OV' }],
}

/** Whether the policy lets the reader do this: the oracle the tests compare executions with. */
export function readerMay(operation: string, identifier: string): boolean {
  if (operation.startsWith('mcp.resource.')) return !identifier.startsWith(DENIED_RESOURCE_PREFIX)
  if (operation === 'mcp.prompt.get') return !DENIED_PROMPTS.has(identifier)
  if (operation === 'mcp.tool.call') return !DENIED_TOOLS.has(identifier)
  return true
}

/**
 * The embedded PDP with {@link READER_POLICY} (tools), which also denies resources under
 * {@link DENIED_RESOURCE_PREFIX} and the prompts of {@link DENIED_PROMPTS}; every question is recorded.
 */
export function recordingPdp(inner: PolicyDecisionPoint, decided: Decided[]): PolicyDecisionPoint {
  const deny = (request: PdpRequest): PdpAnswer | null => {
    const { operation } = request.action
    const identifier = request.resource.identifier
    if ((operation.startsWith('mcp.resource.') || operation === 'mcp.prompt.get') && !readerMay(operation, identifier)) {
      return { outcome: 'DENY', decisionId: randomUUID(), obligations: [], ttl: 0, reason: 'test_resource_denied' }
    }
    return null
  }
  const record = (request: PdpRequest, answer: PdpAnswer): PdpAnswer => {
    decided.push({ operation: request.action.operation, identifier: request.resource.identifier, outcome: answer.outcome })
    return answer
  }
  return {
    kind: inner.kind,
    decide(request, snapshot) {
      const denied = deny(request)
      if (denied !== null) return record(request, denied)
      const answer = inner.decide(request, snapshot)
      return answer instanceof Promise ? answer.then((settled) => record(request, settled)) : record(request, answer)
    },
    close: () => inner.close(),
  }
}

/** The JSON-RPC messages in an answer body of either media type. */
export function messagesOf(contentType: string, text: string): Record<string, unknown>[] {
  const values: unknown[] = []
  if (contentType.startsWith('text/event-stream')) {
    for (const event of text.split(/\r?\n\r?\n/)) {
      const data = event.split(/\r?\n/).filter((line) => line.startsWith('data:')).map((line) => line.slice(5).replace(/^ /, '')).join('\n')
      if (data.trim() !== '') values.push(JSON.parse(data))
    }
  } else if (text !== '') {
    values.push(JSON.parse(text))
  }
  return values.flatMap((value) => (Array.isArray(value) ? value : [value])) as Record<string, unknown>[]
}
