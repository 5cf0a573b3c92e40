/**
 * The real MCP SDK server as the oracle: random bodies (batches, repeated ids, extra and decoy members, URI
 * spellings, unknown methods) and header variants go through the gateway (EM-GUARD, the embedded PDP with a
 * policy that denies some tools, resources and prompts) to an SDK server whose handlers record what they
 * executed. For every request: either the gateway refused it and nothing was executed, or everything
 * executed was decided, and allowed, under the identity the SDK executed it as; and no list answer the
 * client received shows an item the policy denies.
 */
import t from 'tap'
import assert from 'node:assert/strict'
import { generateKeyPairSync, type KeyObject } from 'node:crypto'
import fc from 'fast-check'
import { request as httpRequest } from 'undici'
import { buildBadgeClaims, signBadge } from '../../../../src/core/badge.js'
import { createEmbeddedPdp } from '../../../../src/gateway/pdp/embedded-pdp.js'
import { resourceServer } from '../../../../src/gateway/ingress/resource-metadata.js'
import { GATEWAY_ISSUER, startProtocolGateway } from '../../../helpers/protocol-gateway.js'
import { propertyRuns } from '../../../helpers/property-runs.js'
import {
  DENIED_PROMPTS, DENIED_RESOURCE_PREFIX, DENIED_TOOLS, READER_POLICY, readerMay, recordingPdp, startRecordingServer,
  type Decided, type Executed, type RecordingServer, messagesOf } from '../../../helpers/mcp-recording-server.js'

t.setTimeout(120_000)

const key = generateKeyPairSync('ed25519')
const now = Math.floor(Date.now() / 1000)
const BADGE = signBadge(buildBadgeClaims({
  jti: 'jti-differential', issuer: GATEWAY_ISSUER, subject: 'did:web:agents.example.com:reader', issuedAt: now - 10, expiresAt: now + 3600,
  ial: '1', level: '2', domain: 'agents.example.com',
}), { kid: 'k1', privateKey: key.privateKey as KeyObject })

const OPERATION_OF: Readonly<Record<Executed['kind'], string>> = {
  tool: 'mcp.tool.call', resource: 'mcp.resource.read', prompt: 'mcp.prompt.get', subscribe: 'mcp.resource.subscribe', unsubscribe: 'mcp.resource.unsubscribe',
}

// --- what the client sends ---

const idArb = fc.constantFrom<number | string>(1, 2, '1', 'a')
const uriArb = fc.oneof(
  { weight: 4, arbitrary: fc.record({
    scheme: fc.constantFrom('file', 'FILE', 'File'),
    authority: fc.constantFrom('//', '//localhost', '//LOCALHOST', ''),
    dots: fc.constantFrom('', './', 'x/../', 'x/%2e%2e/', 'docs/../', 'docs/./'),
    target: fc.constantFrom('secret.md', 'readme.md', 'secret-listed.md', 'docs/a.md', 'docs/secret.md', '%73ecret.md', 'S%65cret.md', 'docs/%7Eb'),
    slash: fc.constantFrom('/', '\\'),
    noise: fc.constantFrom('', ' ', '\t', '\n'),
    at: fc.nat(),
  }).map(({ scheme, authority, dots, target, slash, noise, at }) => {
    const uri = `${scheme}:${authority}/${dots}${target}`.replace(/\//g, (s, i: number) => (i > scheme.length + 3 ? slash : s))
    const cut = at % (uri.length + 1)
    return noise === ' ' ? (at % 2 === 0 ? ` ${uri}` : `${uri} `) : uri.slice(0, cut) + noise + uri.slice(cut)
  }) },
  { weight: 1, arbitrary: fc.constantFrom('memo://Box/notes', 'MEMO://Box/./notes', 'memo://box/notes', 'not a uri', '', 'file:///secret.md#x', 'file:///secret.md?', 'file:///secretX') },
)
const toolArb = fc.constantFrom('search', 'delete_file', 'pay', 'Delete_file', 'search ')
const requestArb = fc.oneof(
  fc.record({ method: fc.constant('tools/call'), params: fc.record({ name: toolArb, arguments: fc.constant({ query: 'q' }), tool: fc.constant('search') }, { requiredKeys: ['name'] }) }),
  fc.record({ method: fc.constantFrom('resources/read', 'resources/subscribe', 'resources/unsubscribe'), params: fc.record({ uri: uriArb, name: fc.constant('file:///readme.md') }, { requiredKeys: ['uri'] }) }),
  fc.record({ method: fc.constant('prompts/get'), params: fc.record({ name: fc.constantFrom('summarize', 'secret_prompt', 'Secret_prompt') }) }),
  fc.record({ method: fc.constantFrom('tools/list', 'prompts/list', 'resources/list', 'resources/templates/list', 'ping') }),
  fc.record({ method: fc.constantFrom('tools/Call', 'Resources/read', 'x/y'), params: fc.constant({ name: 'delete_file', uri: 'file:///secret.md' }) }),
)
const messageArb = fc.oneof(
  { weight: 5, arbitrary: fc.record({ request: requestArb, id: idArb, extra: fc.oneof({ weight: 5, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.constantFrom({ name: 'delete_file' }, { uri: 'file:///secret.md' }, { _meta: 1 }) }) })
    .map(({ request, id, extra }) => ({ jsonrpc: '2.0', id, ...request, ...extra })) },
  { weight: 1, arbitrary: fc.constantFrom({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 1 } }, { jsonrpc: '2.0', method: 'notifications/initialized' }) },
)
const caseArb = fc.record({
  body: fc.oneof({ weight: 2, arbitrary: messageArb }, { weight: 1, arbitrary: fc.array(messageArb, { minLength: 1, maxLength: 4 }) }),
  json: fc.boolean(),
  version: fc.constantFrom(undefined, undefined, '2025-03-26', '2025-06-18'),
  mcpMethod: fc.oneof({ weight: 4, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.constantFrom('first', 'tools/list') }),
  contentType: fc.oneof({ weight: 8, arbitrary: fc.constantFrom('application/json', 'application/json; charset=utf-8') }, { weight: 1, arbitrary: fc.constant('text/plain') }),
})

// --- what the client receives ---


/** How the SDK resolves a listed URI; null when it would not. */
function resolved(uri: unknown): string | null {
  try {
    return typeof uri === 'string' ? new URL(uri).href : null
  } catch {
    return null
  }
}

/** The items of any list in a received message that the policy denies. */
function deniedListed(message: Record<string, unknown>): string[] {
  const result = message.result as Record<string, unknown> | undefined
  if (typeof result !== 'object' || result === null) return []
  const names = (member: string, field: string): unknown[] => (Array.isArray(result[member]) ? (result[member] as Record<string, unknown>[]).map((item) => item?.[field]) : [])
  const denied: string[] = []
  for (const name of names('tools', 'name')) if (typeof name !== 'string' || DENIED_TOOLS.has(name)) denied.push(`tool ${String(name)}`)
  for (const name of names('prompts', 'name')) if (typeof name !== 'string' || DENIED_PROMPTS.has(name)) denied.push(`prompt ${String(name)}`)
  for (const uri of names('resources', 'uri')) {
    const href = resolved(uri)
    if (href === null || href.startsWith(DENIED_RESOURCE_PREFIX)) denied.push(`resource ${String(uri)}`)
  }
  for (const template of names('resourceTemplates', 'uriTemplate')) {
    if (typeof template !== 'string' || template.toLowerCase().startsWith(DENIED_RESOURCE_PREFIX)) denied.push(`template ${String(template)}`)
  }
  return denied
}

t.test('what the SDK server executes is what the gateway decided and allowed', async (t) => {
  const decided: Decided[] = []
  const pdp = recordingPdp(createEmbeddedPdp(), decided)
  const gateways = new Map<boolean, { url: string; server: RecordingServer }>()
  for (const json of [true, false]) {
    const server = await startRecordingServer(t, { stateless: true, json })
    const gateway = await startProtocolGateway(t, {
      upstreamUrl: server.url, authorityKey: key.publicKey, policy: READER_POLICY, pdp, env: { SERVICE_ENFORCEMENT_MODE: 'EM-GUARD' },
      routes: (pool) => [{ prefix: '/mcp', value: { upstream: pool, mode: null, protocol: 'mcp', resourceServer: resourceServer('https://gw.example.com/mcp', false) } }],
    })
    gateways.set(json, { url: gateway.url, server })
  }
  /** Every (operation, identifier) the PDP allowed: a decision served from the gateway's cache was asked once before. */
  const allowed = new Set<string>()
  let refused = 0
  let executedAny = 0
  await fc.assert(fc.asyncProperty(caseArb, async ({ body, json, version, mcpMethod, contentType }) => {
    const { url, server } = gateways.get(json)!
    server.executed.length = 0
    decided.length = 0
    const first = Array.isArray(body) ? body[0] : body
    const headers: Record<string, string> = { authorization: `Bearer ${BADGE}`, 'content-type': contentType, accept: 'application/json, text/event-stream' }
    if (version !== undefined) headers['mcp-protocol-version'] = version
    if (mcpMethod !== undefined) headers['mcp-method'] = mcpMethod === 'first' ? String(first?.method ?? '') : mcpMethod
    const res = await httpRequest(`${url}/mcp`, { method: 'POST', body: JSON.stringify(body), headers })
    const text = await res.body.text()
    for (const decision of decided) if (decision.outcome === 'ALLOW') allowed.add(`${decision.operation} ${decision.identifier}`)
    const executed = [...server.executed]
    if (res.headers['x-service-gateway'] === 'error') {
      refused++
      assert.deepEqual(executed, [], `refused (${res.statusCode}), yet executed ${JSON.stringify(executed)}`)
      return
    }
    if (executed.length > 0) executedAny++
    for (const done of executed) {
      const operation = OPERATION_OF[done.kind]
      assert.ok(readerMay(operation, done.name), `executed ${operation} ${done.name}, which the policy denies`)
      assert.ok(allowed.has(`${operation} ${done.name}`), `executed ${operation} ${done.name}, which was never decided as such (decided: ${JSON.stringify(decided)})`)
    }
    const type = String(res.headers['content-type'] ?? '')
    if (res.statusCode === 200 && text !== '') {
      for (const message of messagesOf(type, text)) {
        assert.deepEqual(deniedListed(message), [], `a list answer showed what the policy denies: ${JSON.stringify(message)}`)
      }
    }
  }), propertyRuns(200))
  t.ok(refused > 0, `some requests were refused (${refused})`)
  t.ok(executedAny > 0, `some requests executed something (${executedAny})`)
})
