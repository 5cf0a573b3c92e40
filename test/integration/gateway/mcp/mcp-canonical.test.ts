/**
 * What the gateway decides on an MCP route is what the real SDK server executes: resource URIs are decided
 * and forwarded in the form the SDK resolves them to, a batch whose request ids repeat is refused, and every
 * answer relayed (a POST's, a GET stream's, a resumed stream's) shows only the list items that may be used.
 */
import t, { type Test } from 'tap'
import { generateKeyPairSync, type KeyObject } from 'node:crypto'
import { request as httpRequest } from 'undici'
import { buildBadgeClaims, signBadge } from '../../../../src/core/badge.js'
import { createEmbeddedPdp } from '../../../../src/gateway/pdp/embedded-pdp.js'
import { resourceServer } from '../../../../src/gateway/ingress/resource-metadata.js'
import { GATEWAY_ISSUER, startProtocolGateway } from '../../../helpers/protocol-gateway.js'
import {
  DENIED_TOOLS, READER_POLICY, readerMay, recordingPdp, startRecordingServer, type Decided, type RecordingServer, type RecordingServerMode, messagesOf } from '../../../helpers/mcp-recording-server.js'

t.setTimeout(120_000)

const key = generateKeyPairSync('ed25519')
const READER = 'did:web:agents.example.com:reader'

function badge(): string {
  const now = Math.floor(Date.now() / 1000)
  return signBadge(buildBadgeClaims({
    jti: 'jti-reader', issuer: GATEWAY_ISSUER, subject: READER, issuedAt: now - 10, expiresAt: now + 3600, ial: '1', level: '2', domain: 'agents.example.com',
  }), { kid: 'k1', privateKey: key.privateKey as KeyObject })
}

interface Harness {
  readonly url: string
  readonly server: RecordingServer
  readonly decided: Decided[]
  /** The bodies that reached the upstream, in order. */
  readonly forwarded: string[]
}

async function harness(t: Test, mode: RecordingServerMode): Promise<Harness> {
  const server = await startRecordingServer(t, mode)
  const decided: Decided[] = []
  const gateway = await startProtocolGateway(t, {
    upstreamUrl: server.url, authorityKey: key.publicKey, policy: READER_POLICY, pdp: recordingPdp(createEmbeddedPdp(), decided),
    routes: (pool) => [{ prefix: '/mcp', value: { upstream: pool, mode: null, protocol: 'mcp', resourceServer: resourceServer('https://gw.example.com/mcp', false) } }],
  })
  return { url: gateway.url, server, decided, forwarded: [] }
}

interface Answer {
  readonly status: number
  readonly headers: Record<string, string | string[] | undefined>
  /** Every JSON-RPC message of the answer: the JSON body, or the data of each SSE event. */
  readonly messages: Record<string, unknown>[]
}


async function post(h: Harness, body: unknown, headers: Record<string, string> = {}): Promise<Answer> {
  const res = await httpRequest(`${h.url}/mcp`, {
    method: 'POST', body: typeof body === 'string' ? body : JSON.stringify(body),
    headers: { authorization: `Bearer ${badge()}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
  })
  const text = await res.body.text()
  return { status: res.statusCode, headers: res.headers, messages: messagesOf(String(res.headers['content-type'] ?? ''), text) }
}

const read = (id: number, uri: string, method = 'resources/read'): Record<string, unknown> => ({ jsonrpc: '2.0', id, method, params: { uri } })

/** The spellings the SDK resolves to `file:///secret.md`. */
const SECRET_SPELLINGS = [
  'file:///secret.md', 'file:///./secret.md', 'FILE:///secret.md', 'file:/secret.md', 'file://localhost/secret.md', 'file://LOCALHOST/secret.md',
  'file:///x/../secret.md', 'file:///x/%2e%2e/secret.md', 'file:///sec\tret.md', 'file:///secret\n.md', ' file:///secret.md', 'file:///secret.md ',
  'file:\\\\\\secret.md', 'file:///%73ecret.md', 'File:///docs/../secret.md',
]

for (const mode of [{ stateless: true, json: true }, { stateless: true, json: false }] as const) {
  t.test(`a resource is decided and read under the URI the SDK resolves (${mode.json ? 'JSON' : 'SSE'} answers)`, async (t) => {
    const h = await harness(t, mode)
    for (const method of ['resources/read', 'resources/subscribe', 'resources/unsubscribe']) {
      for (const spelling of SECRET_SPELLINGS) {
        h.server.executed.length = 0
        const answer = await post(h, read(1, spelling, method))
        t.match(answer.messages, [{ id: 1, error: { code: -32030, data: { error: 'POLICY_DENIED' } } }], `${method} ${JSON.stringify(spelling)}: denied`)
        t.strictSame(h.server.executed, [], `${method} ${JSON.stringify(spelling)}: nothing executed`)
      }
    }
    h.server.executed.length = 0
    const decidedBefore = h.decided.length
    const readme = await post(h, read(2, 'FILE://localhost/x/../readme.md'))
    t.match(readme.messages, [{ id: 2, result: { contents: [{ uri: 'file:///readme.md' }] } }], 'an allowed spelling is read')
    t.strictSame(h.server.executed, [{ kind: 'resource', name: 'file:///readme.md' }])
    t.match(h.decided.slice(decidedBefore), [{ operation: 'mcp.resource.read', identifier: 'file:///readme.md', outcome: 'ALLOW' }], 'decided on the canonical URI')
    h.server.executed.length = 0
    await post(h, read(3, ' MEMO://Box/a/../notes'))
    t.strictSame(h.server.executed, [{ kind: 'resource', name: 'memo://Box/notes' }], 'another scheme: lower-cased scheme, dot segments removed, host as written')
    h.server.executed.length = 0
    await post(h, { jsonrpc: '2.0', id: 4, method: 'resources/subscribe', params: { uri: 'file:/readme.md', extra: 1 } })
    t.strictSame(h.server.executed, [{ kind: 'subscribe', name: 'file:///readme.md' }], 'the subscribe handler receives the canonical URI, not the one sent')

    for (const bad of ['not a url', 'file', '://x', 'http://exa mple.com/']) {
      h.server.executed.length = 0
      const answer = await post(h, read(5, bad))
      t.equal(answer.status, 400, `${JSON.stringify(bad)}: 400`)
      t.match(answer.messages, [{ id: 5, error: { code: -32602, data: { error: 'MCP_MESSAGE_INVALID' } } }], `${JSON.stringify(bad)}: invalid params`)
      t.strictSame(h.server.executed, [], `${JSON.stringify(bad)}: nothing executed`)
    }
    const header = await post(h, read(6, 'FILE:///readme.md'), { 'mcp-name': 'FILE:///readme.md' })
    t.match(header.messages, [{ id: 6, error: { code: -32020 } }], 'Mcp-Name must name the canonical URI the body is forwarded with')
    const canonicalHeader = await post(h, read(7, 'FILE:///readme.md'), { 'mcp-name': 'file:///readme.md' })
    t.match(canonicalHeader.messages, [{ id: 7, result: {} }])
  })
}

t.test('resource and template lists are decided on the canonical form', async (t) => {
  const h = await harness(t, { stateless: true, json: true })
  const resources = await post(h, { jsonrpc: '2.0', id: 1, method: 'resources/list' })
  const uris = ((resources.messages[0]!.result as { resources: { uri: string }[] }).resources).map((r) => r.uri)
  t.strictSame(uris.sort(), ['file:///readme.md', 'memo://Box/notes'], 'FILE:///secret-listed.md is hidden as file:///secret-listed.md is')
  const templates = await post(h, { jsonrpc: '2.0', id: 2, method: 'resources/templates/list' })
  const listed = ((templates.messages[0]!.result as { resourceTemplates: { uriTemplate: string }[] }).resourceTemplates).map((r) => r.uriTemplate)
  t.strictSame(listed, ['file:///docs/{name}'], 'FILE:///secret{suffix} is hidden as file:///secret{suffix} is')
})

t.test('a batch whose request ids repeat is refused before anything is forwarded', async (t) => {
  for (const json of [true, false]) {
    const h = await harness(t, { stateless: true, json })
    const repeats: [string, unknown[]][] = [
      ['1 and 1', [{ jsonrpc: '2.0', id: 1, method: 'tools/list' }, { jsonrpc: '2.0', id: 1, method: 'prompts/list' }]],
      ['1 and 1.0', [{ jsonrpc: '2.0', id: 1, method: 'tools/list' }, { jsonrpc: '2.0', id: 1, method: 'ping' }]],
      ['"a" and "a"', [{ jsonrpc: '2.0', id: 'a', method: 'prompts/list' }, { jsonrpc: '2.0', id: 'a', method: 'tools/list' }]],
    ]
    for (const [label, batch] of repeats) {
      h.server.executed.length = 0
      const body = label === '1 and 1.0' ? JSON.stringify(batch).replace('"id":1,"method":"ping"', '"id":1.0,"method":"ping"') : JSON.stringify(batch)
      const answer = await post(h, body)
      t.equal(answer.status, 400, `${label}: 400`)
      t.match(answer.messages, [{ id: null, error: { code: -32600, data: { error: 'MCP_MESSAGE_INVALID' } } }], `${label}: one invalid-request error`)
      t.equal(answer.headers['x-service-gateway'], 'error', `${label}: gateway-made`)
    }
    const distinct = await post(h, [{ jsonrpc: '2.0', id: 1, method: 'tools/list' }, { jsonrpc: '2.0', id: '1', method: 'prompts/list' }])
    t.equal(distinct.status, 200, `${json ? 'JSON' : 'SSE'}: 1 and "1" are two ids`)
    const tools = distinct.messages.find((m) => m.id === 1)?.result as { tools: { name: string }[] }
    t.strictSame(tools.tools.map((tool) => tool.name), ['search'], 'and the tools answer is filtered')
  }
})

/** Reads an SSE body until `until` holds for the messages so far, then stops reading. */
async function readEvents(body: AsyncIterable<Buffer> & { destroy(): void }, until: (messages: Record<string, unknown>[], raw: string) => boolean): Promise<string> {
  let text = ''
  for await (const chunk of body) {
    text += chunk.toString('utf8')
    const complete = text.slice(0, Math.max(text.lastIndexOf('\n\n'), 0))
    if (until(messagesOf('text/event-stream', complete), complete)) break
  }
  body.destroy()
  return text
}

t.test('a resumed GET stream replays a list answer only as filtered', async (t) => {
  const h = await harness(t, { stateless: false, json: false })
  const version = '2025-11-25'
  const base = { authorization: `Bearer ${badge()}`, accept: 'application/json, text/event-stream', 'mcp-protocol-version': version }
  const init = await httpRequest(`${h.url}/mcp`, {
    method: 'POST', headers: { ...base, 'content-type': 'application/json' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: version, capabilities: {}, clientInfo: { name: 't', version: '1' } } }),
  })
  await init.body.text()
  const session = String(init.headers['mcp-session-id'])
  t.match(session, /^[0-9a-f-]{36}$/, 'a session')
  const headers = { ...base, 'mcp-session-id': session }
  await (await httpRequest(`${h.url}/mcp`, { method: 'POST', headers: { ...headers, 'content-type': 'application/json' }, body: '{"jsonrpc":"2.0","method":"notifications/initialized"}' })).body.text()
  const list = await httpRequest(`${h.url}/mcp`, { method: 'POST', headers: { ...headers, 'content-type': 'application/json' }, body: '{"jsonrpc":"2.0","id":7,"method":"tools/list"}' })
  const listed = await list.body.text()
  const priming = /^id: *(\S+)/m.exec(listed)
  t.ok(priming, 'the POST stream opened with an event id to resume from')
  const names = (text: string): string[] => messagesOf('text/event-stream', text)
    .flatMap((m) => ((m.result as { tools?: { name: string }[] } | undefined)?.tools ?? []).map((tool) => tool.name))
  t.strictSame(names(listed), ['search'], 'the POST answer was filtered')

  const resumed = await httpRequest(`${h.url}/mcp`, { method: 'GET', headers: { ...headers, 'last-event-id': priming![1]! } })
  t.equal(resumed.statusCode, 200)
  const replayed = await readEvents(resumed.body, (messages) => messages.some((m) => m.id === 7))
  t.ok(messagesOf('text/event-stream', replayed).some((m) => m.id === 7), 'the tools/list answer was replayed')
  t.strictSame(names(replayed), ['search'], 'the replayed answer is filtered too')
  for (const tool of DENIED_TOOLS) t.notOk(replayed.includes(tool), `${tool} never reaches the client`)
  t.ok(readerMay('mcp.tool.call', 'search'))
})
