/**
 * The filtered tools/list answers the gateway keeps (src/gateway/mcp/list-cache.ts): the same upstream answer
 * to the same caller under the same bundle is served from the cache with the same bytes and the same
 * removed-item counts in the log, while a policy change (a new revision), another upstream answer or
 * another caller is filtered afresh and never served a stale list.
 */
import t from 'tap'
import { generateKeyPairSync, type KeyObject } from 'node:crypto'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { request } from 'undici'
import { authorityBadge, startProtocolGateway } from '../../../helpers/protocol-gateway.js'

const key = generateKeyPairSync('ed25519')
const CALLER = 'did:web:agents.example.com:caller'
const OTHER = 'did:web:agents.example.com:other'
const POLICY = {
  min_trust_level: null, allowed_dids: null, denied_dids: [], rate_limits: [], operations: [], capability_classes: [],
  mcp_tools: [{ tool: 'secret_*', allowed_dids: [OTHER] }],
}

// The upstream lists `tools`; the test changes it between requests.
let tools = ['read', 'write', 'secret_a', 'secret_b']
let listed = 0
const upstream = createServer((req, res) => {
  const chunks: Buffer[] = []
  req.on('data', (c: Buffer) => chunks.push(c))
  req.on('end', () => {
    const message = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { id: unknown }
    listed++
    const body = JSON.stringify({ jsonrpc: '2.0', id: message.id, result: { tools: tools.map((name) => ({ name, inputSchema: { type: 'object' } })) } })
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) })
    res.end(body)
  })
})
await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve))
t.teardown(() => new Promise<void>((resolve) => upstream.close(() => resolve())))
const upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`

const gateway = await startProtocolGateway(t, {
  upstreamUrl, authorityKey: key.publicKey, policy: POLICY,
  routes: (pool) => [{ prefix: '/mcp', value: { upstream: pool, mode: null, protocol: 'mcp' } }],
})
const callerBadge = authorityBadge(key.privateKey as KeyObject, '2', CALLER)
const otherBadge = authorityBadge(key.privateKey as KeyObject, '2', OTHER)

async function list(badge: string, id = 1): Promise<{ text: string; names: string[] }> {
  const res = await request(`${gateway.url}/mcp`, {
    method: 'POST',
    headers: { authorization: `Bearer ${badge}`, 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-06-18' },
    body: JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/list', params: {} }),
  })
  const text = await res.body.text()
  t.equal(res.statusCode, 200, `tools/list answered 200: ${text.slice(0, 200)}`)
  return { text, names: (JSON.parse(text) as { result: { tools: { name: string }[] } }).result.tools.map((tool) => tool.name) }
}

/** The `removed` counts of the request log lines of tools/list so far. */
function removedCounts(): unknown[] {
  return gateway.logLines().filter((line) => line.msg === 'gateway request').map((line) => line['mcp.list.removed'])
}

/** Decision-cache lookups so far: every listed item judged asks the cache once. */
async function lookups(): Promise<number> {
  let sum = 0
  for (const line of (await gateway.metricsText()).split('\n')) {
    if (line.startsWith('service_gateway_cache_lookups_total{') && line.includes('cache="decision"')) sum += Number(line.slice(line.lastIndexOf(' ') + 1))
  }
  return sum
}

t.test('the same answer to the same caller is served from the cache, identically', async (t) => {
  const first = await list(callerBadge)
  t.strictSame(first.names, ['read', 'write'], 'the secret tools are hidden')
  const judged = await lookups()
  const second = await list(callerBadge)
  t.equal(second.text, first.text, 'the same bytes the second time')
  // Judging the list again would look up the two visible items (the hidden ones are remembered as denied).
  t.equal(await lookups() - judged, 1, 'only the tools/list itself was decided: its items were not judged again')
  t.equal(listed, 2, 'the upstream was asked both times (only its answer is cached)')
  const removed = removedCounts()
  t.strictSame([removed.at(-2), removed.at(-1)], [2, 2], 'the log reports the same two removed items for the cached answer')
})

t.test('another caller is filtered for itself', async (t) => {
  t.strictSame((await list(otherBadge)).names, ['read', 'write', 'secret_a', 'secret_b'], 'the other caller sees the secret tools')
  t.strictSame((await list(callerBadge)).names, ['read', 'write'], 'the first caller still does not')
})

t.test('another upstream answer is filtered afresh', async (t) => {
  tools = ['read', 'secret_a', 'delete']
  t.strictSame((await list(callerBadge)).names, ['read', 'delete'], 'the new list, filtered')
  t.strictSame((await list(callerBadge, 2)).names, ['read', 'delete'], 'another request id is another answer, filtered the same')
})

t.test('a policy change is never served the old list', async (t) => {
  const before = await list(callerBadge)
  t.strictSame(before.names, ['read', 'delete'])
  const current = gateway.holder.current
  gateway.holder.swap({ ...current, bundle: { revision: 'r2', data: { config: { ...POLICY, mcp_tools: [{ tool: 'delete', allowed_dids: [] }] } }, confirmedAt: Date.now() } })
  t.strictSame((await list(callerBadge)).names, ['read', 'secret_a'], 'the new revision decides: delete hidden, secret_a visible')
  gateway.holder.swap({ ...current, bundle: { revision: 'r1', data: { config: POLICY }, confirmedAt: Date.now() } })
  t.strictSame((await list(callerBadge)).names, ['read', 'delete'], 'and back again')
})
