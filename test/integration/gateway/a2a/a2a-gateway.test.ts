/**
 * The gateway on A2A routes, end to end with the real SDKs: the @a2a-js/sdk 1.x agent (0.3 compatibility on)
 * behind the gateway (embedded PDP: tasks/get for REG and above, messages and the extended card for OV and
 * above), and the 0.3 and 1.x SDK clients through it over JSON-RPC and REST. Denials arrive in the protocol's
 * shape, event streams flow unbuffered, an extended card is never served anonymously nor on an EM-OBSERVE
 * denial, every malformed body is refused by the gateway and the upstream receives nothing for a refusal.
 */
import t, { type Test } from 'tap'
import fc from 'fast-check'
import { randomUUID, generateKeyPairSync, type KeyObject } from 'node:crypto'
import { Readable } from 'node:stream'
import { request as httpRequest } from 'undici'
import { Role } from 'a2a-sdk-v1'
import * as V1 from 'a2a-sdk-v1/client'
import * as V03 from 'a2a-sdk-v0.3/client'
import type { PdpRequest } from '../../../../src/core/policy/types.js'
import { parseStrictJson } from '../../../../src/core/strict-json.js'
import type { TrustLevel } from '../../../../src/core/trust-level.js'
import { createEmbeddedPdp } from '../../../../src/gateway/pdp/embedded-pdp.js'
import type { PdpObligation } from '../../../../src/core/enforcement.js'
import type { PolicyDecisionPoint } from '../../../../src/gateway/pdp/pdp.js'
import { startA2aUpstream, type A2aUpstream } from '../../../helpers/a2a-upstream.js'
import { startProtocolGateway, authorityBadge } from '../../../helpers/protocol-gateway.js'
import { propertyRuns } from '../../../helpers/property-runs.js'

t.setTimeout(300_000)

const key = generateKeyPairSync('ed25519')
const REG: TrustLevel = '1'
const OV: TrustLevel = '3'

const badge = (level: TrustLevel): string => authorityBadge(key.privateKey as KeyObject, level)

const POLICY = {
  min_trust_level: null, allowed_dids: null, denied_dids: [], rate_limits: [], mcp_tools: [], capability_classes: [],
  operations: [
    { pattern: 'a2a.tasks.get', min_trust_level: 'REG' },
    { pattern: 'a2a.message.*', min_trust_level: 'OV' },
    { pattern: 'a2a.card.get_extended', min_trust_level: 'OV' },
  ],
}

interface Harness {
  readonly gatewayUrl: string
  readonly upstream: A2aUpstream
  logLines(): Record<string, unknown>[]
  /** What the PDP was asked, in order. */
  readonly pdpRequests: PdpRequest[]
  metricsText(): Promise<string>
}

/** The gateway in front of the SDK's agent; `obligations` are added to every ALLOW the embedded PDP answers. */
/** `caseInsensitive`: both routes are, or (`'jsonrpc'`) only the shorter `/agent`. */
async function harness(t: Test, env: Record<string, string> = {}, obligations: PdpObligation[] = [], caseInsensitive: boolean | 'jsonrpc' = false): Promise<Harness> {
  const upstream = await startA2aUpstream(t)
  const embedded = createEmbeddedPdp()
  const pdpRequests: PdpRequest[] = []
  const pdp: PolicyDecisionPoint = {
    kind: 'embedded',
    async decide(request, snapshot) {
      pdpRequests.push(request)
      const answer = await embedded.decide(request, snapshot)
      return answer.outcome === 'ALLOW' ? { ...answer, obligations: [...answer.obligations, ...obligations] } : answer
    },
    close: () => embedded.close(),
  }
  const gateway = await startProtocolGateway(t, {
    upstreamUrl: upstream.url, authorityKey: key.publicKey, policy: POLICY, pdp, env: { SERVICE_MCP_MAX_BODY_BYTES: '65536', ...env },
    routes: (pool) => {
      const shorter = caseInsensitive !== false
      const longer = caseInsensitive === true
      return [
        { prefix: '/agent', value: { upstream: pool, mode: null, protocol: 'a2a', caseInsensitive: shorter }, caseInsensitive: shorter },
        { prefix: '/agent/rest', value: { upstream: pool, mode: null, protocol: 'a2a', caseInsensitive: longer }, caseInsensitive: longer },
      ]
    },
  })
  await upstream.serve(gateway.url)
  return { gatewayUrl: gateway.url, upstream, logLines: gateway.logLines, pdpRequests, metricsText: gateway.metricsText }
}

/** The resolver sends the badge with the card fetch too; the gateway does not read it there (a2a-card.test.ts fetches anonymously). */
function authFetch(token: string): typeof fetch {
  return (input, init) => {
    const headers = new Headers(init?.headers)
    headers.set('authorization', `Bearer ${token}`)
    return fetch(input, { ...init, headers })
  }
}

function authInterceptor(token: string) {
  return {
    async before(args: { options?: { serviceParameters?: Record<string, string> } }) {
      args.options = { ...args.options, serviceParameters: { ...args.options?.serviceParameters, Authorization: `Bearer ${token}` } }
    },
    async after() {},
  }
}

type Binding = 'JSONRPC' | 'HTTP+JSON'

/** What the two SDKs' client modules share: a factory over options with a card resolver. */
type ClientSdk = Pick<typeof V1, 'ClientFactory' | 'ClientFactoryOptions' | 'DefaultAgentCardResolver'>

/** A client of `sdk` for the agent behind the gateway, preferring `binding`, with the badge on every call and card fetch. */
function sdkClient(sdk: ClientSdk, h: Harness, token: string, binding: Binding) {
  const factory = new sdk.ClientFactory(sdk.ClientFactoryOptions.createFrom(sdk.ClientFactoryOptions.default, {
    cardResolver: new sdk.DefaultAgentCardResolver({ fetchImpl: authFetch(token) }),
    clientConfig: { interceptors: [authInterceptor(token) as never] },
    preferredTransports: [binding],
  }))
  return factory.createFromUrl(`${h.gatewayUrl}/agent/`)
}

const v1Client = (h: Harness, token: string, binding: Binding) => sdkClient(V1, h, token, binding)
const v03Client = (h: Harness, token: string, binding: Binding) => sdkClient(V03 as unknown as ClientSdk, h, token, binding) as unknown as Promise<V03.Client>

const v1Message = (said: string) => ({
  message: { role: Role.ROLE_USER, messageId: randomUUID(), parts: [{ content: { $case: 'text', value: said }, filename: '', mediaType: 'text/plain' }], contextId: '', taskId: '', metadata: { skill: 'echo' }, extensions: [], referenceTaskIds: [] },
}) as never
const v03Message = (said: string) => ({ message: { kind: 'message', role: 'user', messageId: randomUUID(), parts: [{ kind: 'text', text: said }], metadata: { skill: 'echo' } } }) as never

/** Requests that reached the upstream other than card fetches. */
const calls = (h: Harness) => h.upstream.reached.filter((entry) => !entry.path.includes('.well-known'))

async function rejection(promise: Promise<unknown>): Promise<Error> {
  const error = await promise.then(() => null, (caught: unknown) => caught)
  if (!(error instanceof Error)) throw new Error(`expected a rejection, got ${JSON.stringify(error)}`)
  return error
}

for (const binding of ['JSONRPC', 'HTTP+JSON'] as const) {
  t.test(`1.0 client over ${binding}: tasks for REG, messages only for OV`, async (t) => {
    const h = await harness(t)
    const ov = await v1Client(h, badge(OV), binding)
    const sent = await ov.sendMessage(v1Message('hello')) as { id: string; status?: { state: unknown } }
    t.type(sent.id, 'string', 'OV may send a message')
    const reg = await v1Client(h, badge(REG), binding)
    const task = await reg.getTask({ id: sent.id, historyLength: 1, tenant: '' } as never) as { id: string }
    t.equal(task.id, sent.id, 'REG may get the task')
    const before = calls(h).length
    const denied = await rejection(reg.sendMessage(v1Message('not for you')))
    t.match(denied.message, /policy denies|POLICY_DENIED|403/i, `REG may not send a message (${denied.message.slice(0, 120)})`)
    t.equal(calls(h).length, before, 'the upstream received nothing for the denied message')
    const line = h.logLines().find((entry) => entry['a2a.operation'] === 'a2a.message.send' && entry['service.policy.decision'] === 'DENY')
    t.match(line, { 'a2a.protocol.version': '1.0', 'a2a.method.name': 'SendMessage', 'a2a.skill': 'echo' }, 'the denial is logged with the A2A method and version')
    const get = h.logLines().find((entry) => entry['a2a.operation'] === 'a2a.tasks.get')
    t.match(get, { 'a2a.task.id': sent.id, 'a2a.protocol.version': '1.0' }, 'the task id is in the log line')
    const asked = h.pdpRequests.find((request) => request.action.operation === 'a2a.tasks.get')
    t.match(asked, { resource: { identifier: sent.id }, action: { http_operation: binding === 'JSONRPC' ? 'POST /agent' : `GET /agent/rest/tasks/${sent.id}` } }, 'the PDP is asked about the task')
    t.match(h.pdpRequests.find((request) => request.action.operation === 'a2a.message.send'), { action: { a2a_skill: 'echo' } }, 'the skill of the message convention')
    const metrics = await h.metricsText()
    t.match(metrics, /service_gateway_a2a_calls_total\{operation="a2a\.tasks\.get",version="1\.0",decision="ALLOW"\} 1/)
    t.match(metrics, /service_gateway_a2a_calls_total\{operation="a2a\.message\.send",version="1\.0",decision="DENY"\} 1/)
    t.notOk(metrics.includes(sent.id), 'no task id in the metrics')
  })

  t.test(`0.3 client over ${binding}: the same decisions`, async (t) => {
    const h = await harness(t)
    const ov = await v03Client(h, badge(OV), binding)
    const sent = await ov.sendMessage(v03Message('hello')) as { kind: string; id: string }
    t.equal(sent.kind, 'task', 'OV may send a message')
    const reg = await v03Client(h, badge(REG), binding)
    const task = await reg.getTask({ id: sent.id }) as { id: string }
    t.equal(task.id, sent.id, 'REG may get the task')
    const before = calls(h).length
    const denied = await rejection(reg.sendMessage(v03Message('not for you')))
    t.match(denied.message, /policy denies|POLICY_DENIED|403/i, `REG may not send a message (${denied.message.slice(0, 120)})`)
    t.equal(calls(h).length, before, 'the upstream received nothing for the denied message')
    t.match(h.logLines().find((entry) => entry['a2a.operation'] === 'a2a.message.send' && entry['service.policy.decision'] === 'DENY'),
      { 'a2a.protocol.version': '0.3', 'a2a.method.name': 'message/send' })
    t.match(await h.metricsText(), /service_gateway_a2a_calls_total\{operation="a2a\.tasks\.get",version="0\.3",decision="ALLOW"\} 1/)
  })

  t.test(`streaming over ${binding} flows through unbuffered (1.0 and 0.3 clients)`, async (t) => {
    const h = await harness(t)
    const streams = [[await v1Client(h, badge(OV), binding), v1Message('gated')], [await v03Client(h, badge(OV), binding), v03Message('gated')]] as const
    for (const [client, message] of streams) {
      let timedOut = false
      const fallback = setTimeout(() => {
        timedOut = true
        h.upstream.openGates()
      }, 5000)
      const events: unknown[] = []
      for await (const event of (client as { sendMessageStream(p: never): AsyncIterable<unknown> }).sendMessageStream(message)) {
        // The agent holds the rest of the stream until the first event has reached the client.
        if (events.length === 0) h.upstream.openGates()
        events.push(event)
      }
      clearTimeout(fallback)
      t.notOk(timedOut, 'the first event arrived while the agent was still holding the stream')
      t.ok(events.length >= 3, `every event arrived (${events.length})`)
    }
  })
}

t.test('a log.enhanced obligation logs the A2A call: method, version, ids and skill, never the message', async (t) => {
  const h = await harness(t, {}, [{ type: 'log.enhanced', params: { level: 'info' } }])
  const client = await v03Client(h, badge(OV), 'JSONRPC')
  const sent = await client.sendMessage(v03Message('a secret said once')) as { id: string; contextId: string }
  const line = h.logLines().find((entry) => entry.msg === 'gateway enhanced request log' && entry['a2a.operation'] === 'a2a.message.send')
  t.match(line, { 'a2a.method.name': 'message/send', 'a2a.protocol.version': '0.3', 'a2a.skill': 'echo' }, 'the call is named')
  t.notOk(JSON.stringify(h.logLines()).includes('a secret said once'), 'the message text is logged nowhere')
  await client.getTask({ id: sent.id })
  t.match(h.logLines().find((entry) => entry.msg === 'gateway enhanced request log' && entry['a2a.operation'] === 'a2a.tasks.get'), { 'a2a.task.id': sent.id })
})

t.test('a subscription to a running task streams through unbuffered (1.0 and 0.3 clients, both bindings)', async (t) => {
  const h = await harness(t)
  for (const binding of ['JSONRPC', 'HTTP+JSON'] as const) {
    const v1 = await v1Client(h, badge(OV), binding)
    const v03 = await v03Client(h, badge(OV), binding)
    // One gated task at a time: opening the gate lets every waiting task go on.
    const starts = [
      async () => [v1, await v1.sendMessage({ ...(v1Message('gated') as object), configuration: { returnImmediately: true, acceptedOutputModes: [] } } as never) as { id: string }, { tenant: '' }] as const,
      async () => [v03, await v03.sendMessage({ ...(v03Message('gated') as object), configuration: { blocking: false } } as never) as { id: string }, {}] as const,
    ]
    for (const start of starts) {
      const [client, task, extra] = await start()
      let timedOut = false
      const fallback = setTimeout(() => {
        timedOut = true
        h.upstream.openGates()
      }, 5000)
      const events: unknown[] = []
      for await (const event of (client as { resubscribeTask(p: never): AsyncIterable<unknown> }).resubscribeTask({ id: task.id, ...extra } as never)) {
        if (events.length === 0) h.upstream.openGates()
        events.push(event)
      }
      clearTimeout(fallback)
      t.notOk(timedOut, `${binding}: the task arrived while the agent was still holding it`)
      t.ok(events.length >= 2, `${binding}: the rest followed (${events.length} events)`)
    }
  }
  t.ok(h.logLines().some((entry) => entry['a2a.operation'] === 'a2a.tasks.subscribe' && entry['a2a.protocol.version'] === '0.3'), 'decided as a2a.tasks.subscribe (0.3)')
  t.ok(h.logLines().some((entry) => entry['a2a.operation'] === 'a2a.tasks.subscribe' && entry['a2a.protocol.version'] === '1.0'), 'and (1.0)')
})

t.test('extended cards: never anonymous, a REG denial enforced in EM-OBSERVE, an OV answer never cached for others', async (t) => {
  const h = await harness(t, { SERVICE_ENFORCEMENT_MODE: 'EM-OBSERVE' })
  const get = (path: string, headers: Record<string, string>) => httpRequest(`${h.gatewayUrl}${path}`, { headers })
  const rpcCard = (headers: Record<string, string>) => httpRequest(`${h.gatewayUrl}/agent`, {
    method: 'POST', headers: { 'content-type': 'application/json', 'a2a-version': '1.0', ...headers },
    body: JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'GetExtendedAgentCard' }),
  })

  for (const answer of [await get('/agent/rest/extendedAgentCard', { 'a2a-version': '1.0' }), await get('/agent/rest/v1/card', {}), await rpcCard({})]) {
    t.equal(answer.statusCode, 401, 'anonymous: 401')
    t.equal(answer.headers['www-authenticate'], 'Bearer', 'with a bearer challenge')
    t.match(await answer.body.json(), { error: 'BADGE_MISSING' })
  }
  const reg = `Bearer ${badge(REG)}`
  const rest = await get('/agent/rest/extendedAgentCard', { 'a2a-version': '1.0', authorization: reg })
  t.equal(rest.statusCode, 403, 'REG over REST: denied although the mode is EM-OBSERVE')
  t.match(await rest.body.json(), { error: 'POLICY_DENIED' })
  const rpc = await rpcCard({ authorization: reg })
  t.equal(rpc.statusCode, 200, 'REG over JSON-RPC: the denial is the call\'s answer')
  t.match(await rpc.body.json(), { jsonrpc: '2.0', id: 7, error: { code: -32030, data: { error: 'POLICY_DENIED' } } })
  t.equal(calls(h).length, 0, 'the upstream received no extended card request')

  // EM-OBSERVE still forwards what it would deny for any other operation.
  const observed = await httpRequest(`${h.gatewayUrl}/agent`, {
    method: 'POST', headers: { 'content-type': 'application/json', authorization: reg },
    body: JSON.stringify({ jsonrpc: '2.0', id: 8, method: 'tasks/get', params: { id: 'none' } }),
  })
  await observed.body.text()
  t.equal(calls(h).length, 1, 'a tasks/get in EM-OBSERVE is forwarded')

  const ov = `Bearer ${badge(OV)}`
  for (const answer of [await get('/agent/rest/extendedAgentCard', { 'a2a-version': '1.0', authorization: ov }), await rpcCard({ authorization: ov })]) {
    t.equal(answer.statusCode, 200, 'OV: the extended card')
    t.equal(answer.headers['cache-control'], 'private, no-store', 'no shared cache keeps it')
    t.match(String(answer.headers['vary']), /Authorization/, 'it varies by caller')
    t.match(await answer.body.text(), /echo-extended/)
  }
  const client = await v1Client(h, badge(OV), 'JSONRPC')
  t.equal((await client.getAgentCard() as { name: string }).name, 'echo-extended', 'the SDK client gets the extended card')
})

t.test('malformed bodies are refused and the upstream receives nothing', async (t) => {
  const h = await harness(t)
  const token = `Bearer ${badge(OV)}`
  const send = (path: string, body: string, headers: Record<string, string> = {}) => httpRequest(`${h.gatewayUrl}${path}`, {
    method: 'POST', headers: { 'content-type': 'application/json', authorization: token, ...headers }, body,
  })
  const message = { jsonrpc: '2.0', id: 1, method: 'message/send', params: { message: { kind: 'message', role: 'user', messageId: 'm', parts: [] } } }
  const cases: readonly (readonly [string, string, string, Record<string, string>, number, Record<string, unknown>])[] = [
    ['not JSON', '/agent', '{"jsonrpc":', {}, 400, { id: null, error: { code: -32700, data: { error: 'A2A_MESSAGE_INVALID' } } }],
    ['a duplicate member', '/agent', '{"jsonrpc":"2.0","id":1,"method":"tasks/get","method":"message/send","params":{}}', {}, 400, { error: { code: -32700 } }],
    ['an array (A2A has no batches)', '/agent', JSON.stringify([message]), {}, 400, { error: { code: -32600, data: { error: 'A2A_MESSAGE_INVALID' } } }],
    ['a notification', '/agent', JSON.stringify({ jsonrpc: '2.0', method: 'message/send', params: {} }), {}, 400, { error: { code: -32600 } }],
    ['a task id that is not a string', '/agent', JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'tasks/get', params: { id: 5 } }), {}, 400, { id: 3, error: { code: -32602 } }],
    ['text/plain', '/agent', JSON.stringify(message), { 'content-type': 'text/plain' }, 415, { error: { code: -32005, data: { error: 'A2A_CONTENT_TYPE_UNSUPPORTED' } } }],
    ['application/a2a+json on JSON-RPC', '/agent', JSON.stringify(message), { 'content-type': 'application/a2a+json' }, 415, { error: { code: -32005 } }],
    ['gzip', '/agent', JSON.stringify(message), { 'content-encoding': 'gzip' }, 415, { error: { code: -32005 } }],
    ['too large', '/agent', JSON.stringify({ ...message, params: { message: { ...message.params.message, parts: [{ kind: 'text', text: 'x'.repeat(70_000) }] } } }), {}, 413, { error: { code: -32600, data: { error: 'A2A_BODY_TOO_LARGE' } } }],
    ['REST: not JSON', '/agent/rest/message:send', '{', { 'a2a-version': '1.0' }, 400, { error: 'A2A_MESSAGE_INVALID' }],
    ['REST: a duplicate member', '/agent/rest/message:send', '{"message":{"taskId":"a","taskId":"b"}}', { 'a2a-version': '1.0' }, 400, { error: 'A2A_MESSAGE_INVALID' }],
    ['REST: text/plain', '/agent/rest/message:send', '{}', { 'content-type': 'text/plain', 'a2a-version': '1.0' }, 415, { error: 'A2A_CONTENT_TYPE_UNSUPPORTED' }],
    ['REST: an array', '/agent/rest/v1/message:send', '[]', {}, 400, { error: 'A2A_MESSAGE_INVALID' }],
  ]
  for (const [name, path, body, headers, status, shape] of cases) {
    const answer = await send(path, body, headers)
    t.equal(answer.statusCode, status, `${name}: ${status}`)
    t.match(await answer.body.json(), shape, `${name}: answered in the binding's shape`)
  }
  const untyped = (body: string) => httpRequest(`${h.gatewayUrl}/agent/rest/tasks/t-none:cancel`, {
    method: 'POST', headers: { authorization: token, 'a2a-version': '1.0' }, body: Readable.from([Buffer.from(body)]),
  })
  const typeless = await untyped('{"id":"t-none"}')
  t.equal(typeless.statusCode, 415, 'REST: a chunked body without a content type')
  t.match(await typeless.body.json(), { error: 'A2A_CONTENT_TYPE_UNSUPPORTED' })
  t.equal(calls(h).length, 0, 'the upstream received none of them')
  const empty = await untyped('')
  await empty.body.text()
  t.equal(calls(h).length, 1, 'REST: an empty chunked body needs no content type and is forwarded')
  t.match(calls(h)[0], { method: 'POST', path: '/agent/rest/tasks/t-none:cancel', body: '' })
  t.equal(h.pdpRequests.at(-1)?.action.operation, 'a2a.tasks.cancel', 'decided as a cancel of its task')
  h.upstream.reached.length = 0
  const accepted = await send('/agent/rest/message:send', JSON.stringify({ message: { role: 'ROLE_USER', messageId: 'ok', parts: [{ text: 'x' }] } }), { 'content-type': 'application/a2a+json', 'a2a-version': '1.0' })
  t.equal(accepted.statusCode, 200, 'REST takes application/a2a+json')
  await accepted.body.text()
  t.equal(calls(h).length, 1, 'and forwards it')
  t.equal(calls(h)[0]!.body, JSON.stringify({ message: { role: 'ROLE_USER', messageId: 'ok', parts: [{ text: 'x' }] } }), 'byte for byte as read')
})

t.test('property: whatever body, type and path a caller sends, the gateway answers without a 5xx and forwards only strict JSON', async (t) => {
  const h = await harness(t)
  const token = `Bearer ${badge(OV)}`
  const path = fc.constantFrom('/agent', '/agent/rest/message:send', '/agent/rest/v1/message:send', '/agent/rest/tasks/x:cancel', '/agent/rest/acme/tasks/x/pushNotificationConfigs')
  const type = fc.constantFrom('application/json', 'application/a2a+json', 'text/plain', 'application/json; charset=latin1', 'application/json;charset=utf-8')
  const json = fc.jsonValue({ maxDepth: 4 }).map((value) => JSON.stringify(value))
  const rpc = fc.record({
    jsonrpc: fc.constantFrom('2.0', '1.0'), id: fc.oneof(fc.integer(), fc.string({ maxLength: 8 })),
    method: fc.constantFrom('message/send', 'SendMessage', 'tasks/get', 'GetTask', 'GetExtendedAgentCard', 'nope'),
    params: fc.record({ id: fc.jsonValue({ maxDepth: 1 }), message: fc.record({ taskId: fc.jsonValue({ maxDepth: 1 }), metadata: fc.record({ skill: fc.jsonValue({ maxDepth: 1 }) }) }) }),
  }).map((value) => JSON.stringify(value))
  const bytes = fc.uint8Array({ maxLength: 64 }).map((array) => Buffer.from(array).toString('latin1'))
  const body = fc.oneof(json, rpc, bytes, rpc.map((text) => text.replace('"method"', '"method":"x","method"')))
  await fc.assert(fc.asyncProperty(path, type, body, async (p, contentType, text) => {
    const before = calls(h).length
    const answer = await httpRequest(`${h.gatewayUrl}${p}`, { method: 'POST', headers: { 'content-type': contentType, authorization: token, 'a2a-version': '1.0' }, body: Buffer.from(text, 'latin1') })
    await answer.body.text()
    if (answer.statusCode >= 500) return false
    const forwarded = calls(h).slice(before)
    if (answer.headers['x-service-gateway'] === 'error') return forwarded.length === 0
    if (forwarded.length !== 1) return false
    // An empty REST body is no body (decided on the path alone); any other is strict JSON.
    if (forwarded[0]!.body !== '') parseStrictJson(Buffer.from(forwarded[0]!.body, 'utf8'))
    return true
  }), propertyRuns(60))
})

for (const caseInsensitive of [false, true]) {
  t.test(`REST spellings the SDK routes alike are the operation it runs, never a JSON-RPC body (${caseInsensitive ? 'case-insensitive' : 'case-sensitive'} route)`, async (t) => {
    const h = await harness(t, {}, [], caseInsensitive)
    const reg = `Bearer ${badge(REG)}`
    const post = (path: string, body: unknown, token = reg) => httpRequest(`${h.gatewayUrl}${path}`, {
      method: 'POST', headers: { 'content-type': 'application/json', 'a2a-version': '1.0', authorization: token }, body: JSON.stringify(body),
    })
    const message = { role: 'ROLE_USER', messageId: randomUUID(), parts: [{ text: 'hi' }] }
    const both = { jsonrpc: '2.0', id: 1, method: 'GetTask', params: { id: 'none' }, message }
    const spellings = ['/agent/rest/message:send/', '/agent/rest/Message:Send', '/agent/rest/v1/MESSAGE:SEND/', '/agent/rest/acme/Message:send', '/agent/rest/message%3Asend', '/agent/rest/%6Dessage:send']
    for (const path of spellings) {
      const twoThings = await post(path, both)
      t.equal(twoThings.statusCode, 400, `${path} with a body that is a JSON-RPC request too: refused`)
      t.match(await twoThings.body.json(), { error: 'A2A_MESSAGE_INVALID' })
      const plain = await post(path, { message })
      t.equal(plain.statusCode, 403, `${path}: a message, denied to REG`)
      t.match(await plain.body.json(), { error: 'POLICY_DENIED' })
      t.equal(h.pdpRequests.at(-1)?.action.operation, 'a2a.message.send', `${path} is decided as a2a.message.send`)
    }
    t.equal(calls(h).length, 0, 'the agent ran none of them')
    const allowed = await post('/agent/rest/Message:Send/', { message }, `Bearer ${badge(OV)}`)
    t.equal(allowed.statusCode, 200, 'OV may send through any spelling')
    await allowed.body.text()
    t.equal(calls(h).length, 1, 'and the agent runs it')

    // Every spelling of the extended card is the extended card.
    for (const path of ['/agent/rest/extendedAgentCard/', '/agent/rest/ExtendedAgentCard', '/agent/rest/tasks/extendedAgentCard']) {
      const denied = await httpRequest(`${h.gatewayUrl}${path}`, { headers: { 'a2a-version': '1.0', authorization: reg } })
      t.equal(denied.statusCode, 403, `${path}: the extended card needs OV`)
      await denied.body.text()
      const card = await httpRequest(`${h.gatewayUrl}${path}`, { headers: { 'a2a-version': '1.0', authorization: `Bearer ${badge(OV)}` } })
      t.equal(card.statusCode, 200, `${path}: OV gets it`)
      t.equal(card.headers['cache-control'], 'private, no-store', `${path}: never kept by a shared cache`)
      const served = await card.body.json() as { name: string; supportedInterfaces: { url: string }[] }
      t.equal(served.name, 'echo-extended')
      t.ok(served.supportedInterfaces.every((entry) => entry.url.startsWith(h.gatewayUrl)), `${path}: its interfaces name the gateway`)
    }
    for (const path of ['/agent/.well-known/agent-card.json/', '/agent/.Well-Known/Agent-Card.json']) {
      const card = await httpRequest(`${h.gatewayUrl}${path}`, {})
      t.equal(card.statusCode, 200, `${path}: the public card, anonymously`)
      t.equal((await card.body.json() as { name: string }).name, 'echo')
    }
    t.ok(h.upstream.reached.filter((entry) => entry.path.includes('.well-known')).every((entry) => entry.path === '/agent/.well-known/agent-card.json'), 'fetched in its one spelling')
  })
}

for (const shorter of [false, 'jsonrpc'] as const) t.test(`a path that spells a longer A2A route in another case is refused where the two readings differ (${shorter === false ? 'case-sensitive routes' : 'a case-insensitive /agent'})`, async (t) => {
  const h = await harness(t, {}, [], shorter)
  const get = (path: string) => httpRequest(`${h.gatewayUrl}${path}`, { headers: { authorization: `Bearer ${badge(REG)}`, 'a2a-version': '1.0' } })
  // Under /agent this is task "extendedAgentCard" of tenant REST; the agent mounts /agent/rest whatever the case.
  const ambiguous = await get('/agent/REST/tasks/extendedAgentCard')
  t.equal(ambiguous.statusCode, 400)
  t.match(await ambiguous.body.json(), { error: 'A2A_MESSAGE_INVALID' })
  t.equal(calls(h).length, 0, 'the agent served no extended card')
  const alike = await get('/agent/REST/tasks/no-such-task')
  await alike.body.text()
  t.equal(alike.statusCode, 404, 'a path both readings name alike goes on (the agent knows no such task)')
  t.equal(h.pdpRequests.at(-1)?.action.operation, 'a2a.tasks.get')
})

t.test('an unknown operation is refused outside EM-OBSERVE, and forwarded there', async (t) => {
  const token = `Bearer ${badge(OV)}`
  const strict = await harness(t)
  const rest = await httpRequest(`${strict.gatewayUrl}/agent/rest/nothing/here`, { headers: { authorization: token, 'a2a-version': '1.0' } })
  t.equal(rest.statusCode, 400)
  t.match(await rest.body.json(), { error: 'A2A_OPERATION_UNKNOWN' })
  const rpcAnswer = await httpRequest(`${strict.gatewayUrl}/agent`, {
    method: 'POST', headers: { 'content-type': 'application/json', authorization: token }, body: JSON.stringify({ jsonrpc: '2.0', id: 4, method: 'tasks/frobnicate', params: {} }),
  })
  t.equal(rpcAnswer.statusCode, 400)
  t.match(await rpcAnswer.body.json(), { id: 4, error: { code: -32601, data: { error: 'A2A_OPERATION_UNKNOWN' } } })
  t.equal(calls(strict).length, 0, 'nothing reached the agent')
  t.equal(strict.pdpRequests.length, 0, 'nor the PDP')
  const observe = await harness(t, { SERVICE_ENFORCEMENT_MODE: 'EM-OBSERVE' })
  const observed = await httpRequest(`${observe.gatewayUrl}/agent/rest/nothing/here`, { headers: { authorization: token, 'a2a-version': '1.0' } })
  await observed.body.text()
  t.equal(calls(observe).length, 1, 'EM-OBSERVE forwards it')
  t.equal(observe.pdpRequests.at(-1)?.action.operation, 'a2a.method.other', 'decided as a2a.method.other')
})

t.test('decoy ids: a message is decided on the task the agent continues, and ids that disagree are refused', async (t) => {
  const h = await harness(t)
  const ov = `Bearer ${badge(OV)}`
  const rpcPost = (body: unknown, version?: string) => httpRequest(`${h.gatewayUrl}/agent`, {
    method: 'POST', headers: { 'content-type': 'application/json', authorization: ov, ...(version === undefined ? {} : { 'a2a-version': version }) }, body: JSON.stringify(body),
  })
  const v1 = (extra: Record<string, unknown>, message: Record<string, unknown>) => ({ jsonrpc: '2.0', id: 9, method: 'SendMessage', params: { ...extra, message: { role: 'ROLE_USER', messageId: randomUUID(), parts: [{ text: 'x' }], ...message } } })
  const v03 = (extra: Record<string, unknown>, message: Record<string, unknown>) => ({ jsonrpc: '2.0', id: 9, method: 'message/send', params: { ...extra, message: { kind: 'message', role: 'user', messageId: randomUUID(), parts: [{ kind: 'text', text: 'x' }], ...message } } })
  const cases: readonly (readonly [string, unknown, string | undefined])[] = [
    ['SendMessage: params.id beside message.taskId', v1({ id: 'decoy' }, { taskId: 'real' }), '1.0'],
    ['SendMessage: params.taskId beside message.taskId', v1({ taskId: 'decoy' }, { taskId: 'real' }), '1.0'],
    ['SendMessage: params.id and no task in the message', v1({ id: 'decoy' }, {}), '1.0'],
    ['SendMessage: task_id beside taskId', v1({}, { taskId: '', task_id: 'real' }), '1.0'],
    ['message/send: params.id beside message.taskId', v03({ id: 'decoy' }, { taskId: 'real' }), undefined],
    ['message/send: params.taskId beside message.taskId', v03({ taskId: 'decoy' }, { taskId: 'real' }), undefined],
    ['message/send: a context decoy', v03({ contextId: 'decoy' }, { contextId: 'real' }), undefined],
    ['tasks/pushNotificationConfig/get: taskId beside the id 0.3 acts on', { jsonrpc: '2.0', id: 9, method: 'tasks/pushNotificationConfig/get', params: { id: 'real', taskId: 'decoy' } }, undefined],
    ['GetTask: taskId beside id', { jsonrpc: '2.0', id: 9, method: 'GetTask', params: { id: 'real', taskId: 'decoy' } }, '1.0'],
  ]
  for (const [name, body, version] of cases) {
    const answer = await rpcPost(body, version)
    t.equal(answer.statusCode, 400, name)
    t.match(await answer.body.json(), { id: 9, error: { code: -32602, data: { error: 'A2A_MESSAGE_INVALID' } } }, `${name}: invalid params`)
  }
  t.equal(calls(h).length, 0, 'the agent received none of them')
  // The 1.0 proto JSON reader takes task_id when taskId is absent: the gateway decides on it too.
  const snake = await rpcPost(v1({}, { task_id: 'no-such-task' }), '1.0')
  await snake.body.text()
  t.match(h.pdpRequests.at(-1), { action: { operation: 'a2a.message.send' }, resource: { identifier: 'no-such-task' } }, 'decided on the task the agent looks up')
})
