/**
 * The public agent card through the gateway (docs/a2a.md, "The public card"): fetched anonymously by the
 * real 0.3 and 1.x SDK clients, its interface URLs moved from the upstream to the gateway's public address
 * so the clients' calls come back through the gateway; URLs elsewhere left alone; a card the gateway cannot
 * read refused with 502 A2A_CARD_INVALID and nothing of it forwarded.
 */
import t, { type Test } from 'tap'
import fc from 'fast-check'
import { randomUUID, generateKeyPairSync, type KeyObject } from 'node:crypto'
import { createServer, type IncomingHttpHeaders } from 'node:http'
import type { AddressInfo } from 'node:net'
import { request as httpRequest } from 'undici'
import { createLocalJWKSet, decodeProtectedHeader, exportJWK, flattenedVerify } from 'jose'
import { Role } from 'a2a-sdk-v1'
import * as V1 from 'a2a-sdk-v1/client'
import * as V03 from 'a2a-sdk-v0.3/client'
import { canonicalCardPayload, signCard, verifyCardSignatures, type CardSignature } from '../../../../src/core/card-signatures.js'
import type { TrustLevel } from '../../../../src/core/trust-level.js'
import { didKeyVerificationMethodId, encodeDidKey } from '../../../../src/core/did-key.js'
import type { EnforcementMode } from '../../../../src/core/enforcement-mode.js'
import type { DidKeySource } from '../../../../src/gateway/identity/chain.js'
import type { CardAuthority } from '../../../../src/gateway/server.js'
import { cardLifetimeSeconds } from '../../../../src/gateway/a2a/card-cache.js'
import { startA2aUpstream, type A2aUpstream } from '../../../helpers/a2a-upstream.js'
import { propertyRuns } from '../../../helpers/property-runs.js'
import { GATEWAY_ISSUER, startProtocolGateway, type ProtocolGateway, authorityBadge } from '../../../helpers/protocol-gateway.js'
import { parseStrictJson } from '../../../../src/core/strict-json.js'

t.setTimeout(120_000)

const key = generateKeyPairSync('ed25519')
const OV: TrustLevel = '3'

const badge = (level: TrustLevel): string => authorityBadge(key.privateKey as KeyObject, level)

const POLICY = {
  min_trust_level: null, allowed_dids: null, denied_dids: [], rate_limits: [], mcp_tools: [], capability_classes: [],
  operations: [{ pattern: 'a2a.**', min_trust_level: 'OV' }],
}

interface GatewayOptions {
  readonly authority?: CardAuthority
  readonly requireCardSignature?: boolean
  readonly mode?: EnforcementMode
  readonly didWeb?: DidKeySource
  readonly cardSigner?: string
  /** SERVICE_A2A_CARD_CACHE_SECONDS; 0 unless a test is about the cache, so each fetch reaches the agent. */
  readonly cacheSeconds?: number
}

/** A gateway in EM-STRICT whose public URL is its own address; `/agent` and `/agent/rest` go to `upstreamUrl`. */
async function gateway(t: Test, upstreamUrl: string, options: GatewayOptions = {}): Promise<ProtocolGateway> {
  return startProtocolGateway(t, {
    upstreamUrl, authorityKey: key.publicKey, policy: POLICY, ownPublicUrl: true, env: { SERVICE_A2A_CARD_CACHE_SECONDS: String(options.cacheSeconds ?? 0) },
    deps: { cardAuthority: options.authority ?? null, didWeb: options.didWeb ?? null },
    routes: (pool) => {
      const route = { upstream: pool, mode: options.mode ?? null, protocol: 'a2a', requireCardSignature: options.requireCardSignature, cardSigner: options.cardSigner } as const
      return [{ prefix: '/agent', value: route }, { prefix: '/agent/rest', value: route }]
    },
  })
}

function authInterceptor(token: string) {
  return {
    async before(args: { options?: { serviceParameters?: Record<string, string> } }) {
      args.options = { ...args.options, serviceParameters: { ...args.options?.serviceParameters, Authorization: `Bearer ${token}` } }
    },
    async after() {},
  }
}

const v1Message = (said: string) => ({
  message: { role: Role.ROLE_USER, messageId: randomUUID(), parts: [{ content: { $case: 'text', value: said }, filename: '', mediaType: 'text/plain' }], contextId: '', taskId: '', metadata: {}, extensions: [], referenceTaskIds: [] },
}) as never
const v03Message = (said: string) => ({ message: { kind: 'message', role: 'user', messageId: randomUUID(), parts: [{ kind: 'text', text: said }] } }) as never

const calls = (upstream: A2aUpstream) => upstream.reached.filter((entry) => !entry.path.includes('.well-known'))

t.test('the SDK clients fetch the card anonymously and call the gateway address it names', async (t) => {
  const upstream = await startA2aUpstream(t)
  const gw = await gateway(t, upstream.url)
  // The agent names its own address; only the gateway's rewrite sends the clients back through it.
  await upstream.serve(upstream.url)
  const token = badge(OV)
  for (const binding of ['JSONRPC', 'HTTP+JSON'] as const) {
    const v1 = await new V1.ClientFactory(V1.ClientFactoryOptions.createFrom(V1.ClientFactoryOptions.default, {
      clientConfig: { interceptors: [authInterceptor(token) as never] }, preferredTransports: [binding],
    })).createFromUrl(`${gw.url}/agent/`)
    const before = calls(upstream).length
    const sent = await v1.sendMessage(v1Message('hello')) as { id: string }
    t.type(sent.id, 'string', `1.x over ${binding}: the message went through`)
    t.equal(calls(upstream).length, before + 1, `1.x over ${binding}: through the gateway`)
    t.ok(calls(upstream).at(-1)!.headers['x-service-subject'], 'with the verified identity the gateway adds')

    const v03 = await new V03.ClientFactory(V03.ClientFactoryOptions.createFrom(V03.ClientFactoryOptions.default, {
      clientConfig: { interceptors: [authInterceptor(token) as never] }, preferredTransports: [binding],
    })).createFromUrl(`${gw.url}/agent/`)
    const task = await v03.sendMessage(v03Message('hello')) as { kind: string }
    t.equal(task.kind, 'task', `0.3 over ${binding}: the message went through`)
    t.ok(calls(upstream).at(-1)!.headers['x-service-subject'], `0.3 over ${binding}: through the gateway`)
  }
  const cardFetches = upstream.reached.filter((entry) => entry.path.includes('.well-known'))
  t.ok(cardFetches.length >= 4, 'every card was fetched through the gateway')
  for (const entry of cardFetches) t.notOk(entry.headers.authorization ?? entry.headers['x-service-subject'], 'the agent sees an anonymous card request')
  const line = gw.logLines().find((entry) => entry['a2a.operation'] === 'a2a.card.get')
  t.match(line, { status: 200, 'a2a.method.name': '.well-known/agent-card.json' }, 'the card fetch is logged')
  t.notOk(line?.agent_did, 'with no caller')
})

t.test('the card answer: URLs under the upstream moved, others kept, A2A-Version passed, Vary kept', async (t) => {
  const upstream = await startA2aUpstream(t)
  const gw = await gateway(t, upstream.url)
  await upstream.serve(upstream.url)
  const get = async (headers: Record<string, string>) => {
    const answer = await httpRequest(`${gw.url}/agent/.well-known/agent-card.json`, { headers })
    return { status: answer.statusCode, vary: answer.headers.vary, card: await answer.body.json() as Record<string, unknown> }
  }
  const legacy = await get({})
  t.equal(legacy.status, 200, 'no badge needed')
  t.equal(legacy.vary, 'A2A-Version')
  t.match(legacy.card, {
    url: `${gw.url}/agent`, preferredTransport: 'JSONRPC',
    additionalInterfaces: [{ url: `${gw.url}/agent/rest`, transport: 'HTTP+JSON' }],
    supportedInterfaces: [{ url: `${gw.url}/agent` }, { url: `${gw.url}/agent/rest` }],
  }, 'the 0.3 card (and its embedded 1.0 interfaces) name the gateway')
  t.notOk(JSON.stringify(legacy.card).includes(upstream.url), 'nothing names the upstream')
  const v1 = await get({ 'a2a-version': '1.0' })
  t.notOk('url' in v1.card, 'A2A-Version: 1.0 reached the agent: the 1.0 card')
  t.match(v1.card, { supportedInterfaces: [{ url: `${gw.url}/agent` }, { url: `${gw.url}/agent/rest` }] })
  t.equal(upstream.reached.at(-1)!.headers['a2a-version'], '1.0')
  const head = await httpRequest(`${gw.url}/agent/.well-known/agent-card.json`, { method: 'HEAD' })
  t.equal(head.statusCode, 200, 'HEAD: the card head')
  t.equal((await head.body.text()).length, 0, 'HEAD: no body')
  const badBadge = await get({ authorization: 'Bearer not-a-badge' })
  t.equal(badBadge.status, 200, 'a badge is not read on the public card')
  const extended = await httpRequest(`${gw.url}/agent/rest/extendedAgentCard`, { headers: { 'a2a-version': '1.0' } })
  await extended.body.text()
  t.equal(extended.statusCode, 401, 'the extended card still needs a badge')
})

/** An agent answering every card request with `body` (and `status`), recording the requests' headers. */
async function cardServer(t: Test, answer: (origin: string) => { status?: number; body: string | Buffer }) {
  const seen: IncomingHttpHeaders[] = []
  const server = createServer((req, res) => {
    seen.push(req.headers)
    const { status, body } = answer(origin)
    res.writeHead(status ?? 200, { 'content-type': 'application/json' })
    res.end(body)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    server.closeAllConnections()
    server.close()
  })
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  return { origin, seen }
}

t.test('URLs elsewhere, and under the upstream but not routed back to it, stay as the agent wrote them', async (t) => {
  const agent = await cardServer(t, (origin) => ({
    body: JSON.stringify({
      name: 'x', url: `${origin}/agent?x=1`,
      additionalInterfaces: [{ url: 'https://elsewhere.example/agent', transport: 'JSONRPC' }, { url: `${origin}/unrouted/a2a`, transport: 'JSONRPC' }, 'not an object', { url: 7 }],
      supportedInterfaces: [{ url: `${origin}/agent/rest/t1`, protocolBinding: 'HTTP+JSON' }, { url: `http://user:pw@${origin.slice(7)}/agent` }, { url: 'not a url' }],
      skills: [{ id: 's', url: `${origin}/agent` }],
    }),
  }))
  const gw = await gateway(t, agent.origin)
  const answer = await httpRequest(`${gw.url}/agent/.well-known/agent.json`)
  t.equal(answer.statusCode, 200, 'the legacy card path too')
  t.same(await answer.body.json(), {
    name: 'x', url: `${gw.url}/agent?x=1`,
    additionalInterfaces: [{ url: 'https://elsewhere.example/agent', transport: 'JSONRPC' }, { url: `${agent.origin}/unrouted/a2a`, transport: 'JSONRPC' }, 'not an object', { url: 7 }],
    supportedInterfaces: [{ url: `${gw.url}/agent/rest/t1`, protocolBinding: 'HTTP+JSON' }, { url: `http://user:pw@${agent.origin.slice(7)}/agent` }, { url: 'not a url' }],
    skills: [{ id: 's', url: `${agent.origin}/agent` }],
  })
  t.equal(agent.seen.length, 1)
  t.notOk(agent.seen[0]!.authorization, 'no credentials reach the agent')
})

t.test('a card the gateway cannot read is 502 A2A_CARD_INVALID and none of it is forwarded', async (t) => {
  const bodies: (string | Buffer)[] = [
    '{"name":"secret-a","url":',
    '{"name":"secret-b","name":"twice"}',
    '["secret-c"]',
    Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('{"name":"secret-d"}')]),
    JSON.stringify({ name: 'secret-e', description: 'x'.repeat(300 * 1024) }),
  ]
  let next = 0
  const agent = await cardServer(t, () => ({ body: bodies[next++]! }))
  const gw = await gateway(t, agent.origin)
  for (let i = 0; i < bodies.length; i++) {
    const answer = await httpRequest(`${gw.url}/agent/.well-known/agent-card.json`)
    const text = await answer.body.text()
    t.equal(answer.statusCode, 502, `card ${i}: 502`)
    t.equal(JSON.parse(text).error, 'A2A_CARD_INVALID')
    t.notOk(text.includes('secret'), `card ${i}: nothing of it reaches the client`)
  }
})

t.test('an answer other than 200 is relayed as it came', async (t) => {
  const agent = await cardServer(t, () => ({ status: 404, body: '{"error":"no card here"}' }))
  const gw = await gateway(t, agent.origin)
  const answer = await httpRequest(`${gw.url}/agent/.well-known/agent-card.json`)
  t.equal(answer.statusCode, 404)
  t.same(await answer.body.json(), { error: 'no card here' })
})

// ---- countersigning (inside the appliance) ----

const authorityKey = generateKeyPairSync('ed25519')
const AUTHORITY: CardAuthority = { signingKey: () => ({ privateKey: authorityKey.privateKey, kid: 'authority-1' }) }
const agentKey = generateKeyPairSync('ed25519')

/** The authority's JWKS, as the registry publishes it at the jku. */
async function authorityJwks() {
  return createLocalJWKSet({ keys: [{ ...await exportJWK(authorityKey.publicKey), kid: 'authority-1', alg: 'EdDSA' }] })
}

/** Checks the card's last signature is the authority's, over its canonical payload; returns the others. */
async function authoritySigned(t: Test, card: Record<string, unknown>, what: string): Promise<CardSignature[]> {
  const signatures = card.signatures as CardSignature[]
  const last = signatures.at(-1)!
  t.same(decodeProtectedHeader(last), { alg: 'EdDSA', kid: 'authority-1', typ: 'JOSE', jku: `${GATEWAY_ISSUER}/.well-known/jwks.json` }, `${what}: the authority's protected header`)
  const payload = canonicalCardPayload(card)
  if (!payload.ok) throw new Error(payload.message)
  const verified = await flattenedVerify({ ...last, payload: Buffer.from(payload.bytes).toString('base64url') }, await authorityJwks())
  t.ok(verified.payload.length > 0, `${what}: the countersignature verifies over the canonical card with the authority JWKS`)
  return signatures.slice(0, -1)
}

t.test('inside the appliance the rewritten SDK card is countersigned by the authority (0.3 and 1.0 shapes)', async (t) => {
  const upstream = await startA2aUpstream(t)
  const gw = await gateway(t, upstream.url, { authority: AUTHORITY })
  await upstream.serve(upstream.url)
  for (const version of [undefined, '1.0']) {
    const answer = await httpRequest(`${gw.url}/agent/.well-known/agent-card.json`, { headers: version === undefined ? {} : { 'a2a-version': version } })
    const card = await answer.body.json() as Record<string, unknown>
    t.match(card, { supportedInterfaces: [{ url: `${gw.url}/agent` }] }, `${version ?? '0.3'}: rewritten`)
    t.same(await authoritySigned(t, card, version ?? '0.3'), [], 'the only signature')
  }
  // The 1.x SDK client resolves the countersigned card and calls through the gateway.
  const client = await new V1.ClientFactory(V1.ClientFactoryOptions.createFrom(V1.ClientFactoryOptions.default, {
    clientConfig: { interceptors: [authInterceptor(badge(OV)) as never] }, preferredTransports: ['JSONRPC'],
  })).createFromUrl(`${gw.url}/agent/`)
  t.type((await client.sendMessage(v1Message('signed')) as { id: string }).id, 'string', 'the client works with the countersigned card')
})

/** A card naming `urlBase` for its interfaces, signed by the agent's key. */
async function agentSignedCard(urlBase: string): Promise<Record<string, unknown>> {
  const card = {
    name: 'signed', description: 'd', version: '1', capabilities: {}, defaultInputModes: ['text/plain'], defaultOutputModes: ['text/plain'], skills: [],
    supportedInterfaces: [{ url: `${urlBase}/agent`, protocolBinding: 'JSONRPC', protocolVersion: '1.0' }],
  }
  const signed = await signCard(card, { privateKey: agentKey.privateKey, kid: 'agent-key-1', alg: 'EdDSA' })
  if (!signed.ok) throw new Error(signed.message)
  return signed.card
}

const agentKeys = (kid: string) => (kid === 'agent-key-1' ? agentKey.publicKey : null)

for (const authority of [AUTHORITY, null]) {
  const mode = authority === null ? 'gateway-only' : 'appliance'
  t.test(`${mode}: an agent signature is kept when the rewrite left the signed content alone, dropped when it did not`, async (t) => {
    let body = ''
    const agent = await cardServer(t, () => ({ body }))
    const gw = await gateway(t, agent.origin, { authority: authority ?? undefined })
    const fetchCard = async () => (await (await httpRequest(`${gw.url}/agent/.well-known/agent-card.json`)).body.json()) as Record<string, unknown>

    body = JSON.stringify(await agentSignedCard('https://agent.example'))
    const elsewhere = await fetchCard()
    t.equal((elsewhere.supportedInterfaces as { url: string }[])[0]!.url, 'https://agent.example/agent', 'not the upstream: not moved')
    const kept = authority === null ? elsewhere.signatures as CardSignature[] : await authoritySigned(t, elsewhere, 'unchanged card')
    t.equal(kept.length, 1, "the agent's signature is kept")
    t.ok((await verifyCardSignatures({ ...elsewhere, signatures: kept }, agentKeys)).valid, 'and still verifies with the agent key')

    body = JSON.stringify(await agentSignedCard(agent.origin))
    const moved = await fetchCard()
    t.equal((moved.supportedInterfaces as { url: string }[])[0]!.url, `${gw.url}/agent`, 'moved to the gateway')
    if (authority === null) t.notOk('signatures' in moved, "gateway-only: the agent's signature, now invalid, is dropped and nothing signs")
    else t.same(await authoritySigned(t, moved, 'rewritten card'), [], "the agent's signature, now invalid, is dropped")

    body = JSON.stringify({ ...JSON.parse(body), signatures: [{ protected: 'x' }] })
    const malformed = await fetchCard()
    t.equal(malformed.name, 'signed', 'a malformed signature list does not stop the card')
    if (authority !== null) t.same(await authoritySigned(t, malformed, 'malformed signatures'), [], 'and is not kept')
  })
}

// ---- requireCardSignature ----

const rawKey = (publicKey: KeyObject): Uint8Array => Buffer.from(publicKey.export({ format: 'jwk' }).x as string, 'base64url')
const didKeyAgent = generateKeyPairSync('ed25519')
const DID_KEY = encodeDidKey(rawKey(didKeyAgent.publicKey))
const didWebAgent = generateKeyPairSync('ed25519')
const DID_WEB_KID = 'did:web:agents.example.com:echo#key-1'
/** The gateway's did:web resolution (the registry's resolver in the appliance): this one DID URL only. */
const DID_WEB: DidKeySource = { resolveKey: async (kid) => (kid === DID_WEB_KID ? rawKey(didWebAgent.publicKey) : null) }

async function cardSignedBy(privateKey: KeyObject, kid: string, urlBase = 'https://agent.example'): Promise<string> {
  const card = {
    name: 'required', description: 'd', version: '1', capabilities: {}, defaultInputModes: [], defaultOutputModes: [], skills: [],
    supportedInterfaces: [{ url: `${urlBase}/agent`, protocolBinding: 'JSONRPC', protocolVersion: '1.0' }],
  }
  const signed = await signCard(card, { privateKey, kid, alg: 'EdDSA' })
  if (!signed.ok) throw new Error(signed.message)
  return JSON.stringify(signed.card)
}

t.test('requireCardSignature: in EM-GUARD and stricter only a card signed by a trusted key is served', async (t) => {
  let body = ''
  const agent = await cardServer(t, () => ({ body }))
  const unsigned = JSON.stringify({ name: 'unsigned-secret', supportedInterfaces: [] })
  const stranger = generateKeyPairSync('ed25519')
  const tampered = JSON.stringify({ ...JSON.parse(await cardSignedBy(didKeyAgent.privateKey, didKeyVerificationMethodId(DID_KEY))), name: 'changed-secret' })
  const cases: readonly (readonly [string, () => Promise<string>, number])[] = [
    ['unsigned', async () => unsigned, 502],
    ['signed by an unknown opaque kid', () => cardSignedBy(stranger.privateKey, 'agent-key-1'), 502],
    ['signed by a did:web the resolver does not know', () => cardSignedBy(stranger.privateKey, 'did:web:evil.example#key-1'), 502],
    ["signed by another key under the did:key's kid", () => cardSignedBy(stranger.privateKey, didKeyVerificationMethodId(DID_KEY)), 502],
    ['tampered after signing', async () => tampered, 502],
    ['signed by its did:key', () => cardSignedBy(didKeyAgent.privateKey, didKeyVerificationMethodId(DID_KEY)), 200],
    ['signed by its did:web key', () => cardSignedBy(didWebAgent.privateKey, DID_WEB_KID), 200],
    ["countersigned by the authority's badge key", () => cardSignedBy(key.privateKey as KeyObject, 'k1'), 200],
    ['signed by its did:key, URLs moved by the gateway', () => cardSignedBy(didKeyAgent.privateKey, didKeyVerificationMethodId(DID_KEY), agent.origin), 200],
  ]
  for (const mode of ['EM-GUARD', 'EM-STRICT'] as const) {
    const gw = await gateway(t, agent.origin, { requireCardSignature: true, mode, didWeb: DID_WEB })
    for (const [name, make, status] of cases) {
      body = await make()
      const answer = await httpRequest(`${gw.url}/agent/.well-known/agent-card.json`)
      const text = await answer.body.text()
      t.equal(answer.statusCode, status, `${mode}, ${name}: ${status}`)
      if (status === 502) {
        t.equal(JSON.parse(text).error, 'A2A_CARD_SIGNATURE_INVALID')
        t.notOk(text.includes('secret') || text.includes('required'), 'nothing of the card is forwarded')
      }
    }
  }
  const observe = await gateway(t, agent.origin, { requireCardSignature: true, mode: 'EM-OBSERVE' })
  body = unsigned
  const served = await httpRequest(`${observe.url}/agent/.well-known/agent-card.json`)
  t.equal(served.statusCode, 200, 'EM-OBSERVE: an unsigned card is served')
  t.match(await served.body.json(), { name: 'unsigned-secret' })
  t.ok(observe.logLines().some((line) => String(line.msg).includes('EM-OBSERVE')), 'and the log says so')
  const pinned = await gateway(t, agent.origin, { requireCardSignature: true, mode: 'EM-GUARD', didWeb: DID_WEB, cardSigner: 'did:web:agents.example.com:echo' })
  for (const [name, make, status] of [
    ['its pinned did:web', () => cardSignedBy(didWebAgent.privateKey, DID_WEB_KID), 200],
    ['a did:key, valid but not the pinned signer', () => cardSignedBy(didKeyAgent.privateKey, didKeyVerificationMethodId(DID_KEY)), 502],
    ["the authority's key", () => cardSignedBy(key.privateKey as KeyObject, 'k1'), 200],
  ] as const) {
    body = await make()
    const answer = await httpRequest(`${pinned.url}/agent/.well-known/agent-card.json`)
    await answer.body.text()
    t.equal(answer.statusCode, status, `cardSigner pinned, ${name}: ${status}`)
  }
  const off = await gateway(t, agent.origin, { mode: 'EM-STRICT' })
  const plain = await httpRequest(`${off.url}/agent/.well-known/agent-card.json`)
  await plain.body.text()
  t.equal(plain.statusCode, 200, 'without the option an unsigned card is served in EM-STRICT')
})

t.test('property: whatever the upstream answers as its card, the client gets a strict JSON object or 502 A2A_CARD_INVALID', async (t) => {
  let body: Buffer = Buffer.alloc(0)
  const agent = await cardServer(t, () => ({ body }))
  const gw = await gateway(t, agent.origin, { authority: AUTHORITY })
  const url = fc.oneof(fc.constant(`${agent.origin}/agent`), fc.constant(`${agent.origin}/agent/rest`), fc.webUrl(), fc.string({ maxLength: 12 }), fc.jsonValue({ maxDepth: 1 }))
  const iface = fc.oneof(fc.record({ url, protocolBinding: fc.constantFrom('JSONRPC', 'HTTP+JSON') }), fc.jsonValue({ maxDepth: 1 }))
  const card = fc.record({
    name: fc.jsonValue({ maxDepth: 1 }), url, supportedInterfaces: fc.oneof(fc.array(iface, { maxLength: 3 }), fc.jsonValue({ maxDepth: 1 })),
    additionalInterfaces: fc.array(iface, { maxLength: 3 }), signatures: fc.oneof(fc.constant([]), fc.jsonValue({ maxDepth: 2 })),
  }, { requiredKeys: ['name'] }).map((value) => JSON.stringify(value))
  const bytes = fc.uint8Array({ maxLength: 64 }).map((array) => Buffer.from(array).toString('latin1'))
  await fc.assert(fc.asyncProperty(fc.oneof(card, fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.stringify(v)), bytes), async (text) => {
    body = Buffer.from(text, 'latin1')
    const answer = await httpRequest(`${gw.url}/agent/.well-known/agent-card.json`)
    const got = Buffer.from(await answer.body.arrayBuffer())
    if (answer.statusCode === 502) return JSON.parse(got.toString()).error === 'A2A_CARD_INVALID'
    if (answer.statusCode !== 200) return false
    const served = parseStrictJson(got)
    return typeof served === 'object' && served !== null && !Array.isArray(served)
  }), propertyRuns(80))
})

t.test('a client that leaves while the card is fetched is logged as 499', async (t) => {
  const slow = createServer((_req, res) => {
    setTimeout(() => {
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end('{"name":"slow"}')
    }, 300)
  })
  await new Promise<void>((resolve) => slow.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    slow.closeAllConnections()
    slow.close()
  })
  const gw = await gateway(t, `http://127.0.0.1:${(slow.address() as AddressInfo).port}`)
  const abort = new AbortController()
  setTimeout(() => abort.abort(), 50)
  await httpRequest(`${gw.url}/agent/.well-known/agent-card.json`, { signal: abort.signal }).then(() => null, () => null)
  await new Promise((resolve) => setTimeout(resolve, 500))
  t.match(gw.logLines().find((line) => line['a2a.operation'] === 'a2a.card.get'), { status: 499 })
})

t.test('a served card is kept for its lifetime: anonymous callers reach the agent once, whatever query or version spelling they send', async (t) => {
  let cacheControl: string | undefined
  let release: () => void = () => {}
  let held = false
  const seen: { url: string | undefined; version: string | string[] | undefined }[] = []
  const server = createServer((req, res) => {
    seen.push({ url: req.url, version: req.headers['a2a-version'] })
    const answer = () => {
      res.writeHead(200, { 'content-type': 'application/json', ...(cacheControl === undefined ? {} : { 'cache-control': cacheControl }) })
      res.end(JSON.stringify({ name: 'kept', url: `${origin}/agent`, served: seen.length }))
    }
    if (held) release = answer
    else answer()
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => {
    server.closeAllConnections()
    server.close()
  })
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  const gw = await gateway(t, origin, { cacheSeconds: 60, authority: AUTHORITY })
  const fetchCard = async (query = '', headers: Record<string, string> = {}) => {
    const answer = await httpRequest(`${gw.url}/agent/.well-known/agent-card.json${query}`, { headers })
    return { status: answer.statusCode, cacheControl: answer.headers['cache-control'], card: await answer.body.json() as Record<string, unknown> }
  }

  // Concurrent first requests share one fetch.
  held = true
  const first = Array.from({ length: 20 }, (_, i) => fetchCard(`?n=${i}`))
  await new Promise((resolve) => setTimeout(resolve, 200))
  held = false
  release()
  const cards = await Promise.all(first)
  t.equal(seen.length, 1, '20 concurrent requests, one fetch')
  t.ok(cards.every((c) => c.status === 200 && c.card.served === 1 && c.card.url === `${gw.url}/agent`), 'all got the rewritten card')
  t.equal(seen[0]!.url, '/agent/.well-known/agent-card.json', 'the query is not forwarded')
  t.ok(Array.isArray(cards[0]!.card.signatures), 'countersigned')
  for (const [query, version] of [['?other', '0.3'], ['', 'anything'], ['?x=1', '']] as const) {
    const again = await fetchCard(query, version === '' ? {} : { 'a2a-version': version })
    t.equal(again.card.served, 1, `${query || 'no query'}, version ${version || 'absent'}: the stored card`)
  }
  t.equal(seen.length, 1, 'still one fetch')
  const v1 = await fetchCard('', { 'a2a-version': '1' })
  t.equal(v1.card.served, 2, 'A2A-Version 1 is another card')
  t.equal(seen[1]!.version, '1.0', 'asked for as 1.0')
  await fetchCard('', { 'a2a-version': '1.0' })
  t.equal(seen.length, 2, '1 and 1.0 are one card')

  // An agent that says not to keep it is asked every time.
  const direct = await gateway(t, origin, { cacheSeconds: 60, authority: AUTHORITY })
  cacheControl = 'no-store'
  for (let i = 0; i < 3; i++) await httpRequest(`${direct.url}/agent/.well-known/agent.json`).then((answer) => answer.body.text())
  t.equal(seen.length, 5, 'Cache-Control: no-store: fetched per request')
})

t.test("a card's lifetime follows the agent's Cache-Control, within the gateway's ceiling", async (t) => {
  t.equal(cardLifetimeSeconds(undefined, 60, 60), 60, 'nothing said: the ceiling')
  t.equal(cardLifetimeSeconds('public, max-age=30', 60, 60), 30)
  t.equal(cardLifetimeSeconds('max-age=3000', 60, 60), 60, 'never more than the ceiling')
  t.equal(cardLifetimeSeconds('max-age=300, s-maxage=10', 60, 60), 10, 's-maxage wins for a shared cache')
  t.equal(cardLifetimeSeconds('max-age="20"', 60, 60), 20, 'a quoted value')
  for (const header of ['no-store', 'No-Cache', 'private, max-age=60', 'max-age=10, no-store']) t.equal(cardLifetimeSeconds(header, 60, 60), 0, header)
  t.equal(cardLifetimeSeconds('max-age=-1', 60, 60), 60, 'an invalid max-age is ignored')
  t.equal(cardLifetimeSeconds('max-age=5', 60, 0), 0, 'a ceiling of 0 keeps nothing')
})

t.test('the extended card comes back with its interface URLs on the gateway, countersigned, over REST, JSON-RPC and the SDK', async (t) => {
  const upstream = await startA2aUpstream(t)
  const gw = await gateway(t, upstream.url, { authority: AUTHORITY })
  // The agent names its own address in both cards.
  await upstream.serve(upstream.url)
  const authorization = `Bearer ${badge(OV)}`
  const rest = await httpRequest(`${gw.url}/agent/rest/extendedAgentCard`, { headers: { 'a2a-version': '1.0', authorization } })
  t.equal(rest.statusCode, 200)
  const restCard = await rest.body.json() as Record<string, unknown>
  const rpc = await httpRequest(`${gw.url}/agent`, {
    method: 'POST', headers: { 'content-type': 'application/json', 'a2a-version': '1.0', authorization },
    body: JSON.stringify({ jsonrpc: '2.0', id: 'x-1', method: 'GetExtendedAgentCard' }),
  })
  const rpcAnswer = await rpc.body.json() as { jsonrpc: string; id: string; result: Record<string, unknown> }
  t.match(rpcAnswer, { jsonrpc: '2.0', id: 'x-1' }, 'the JSON-RPC envelope is kept')
  for (const [what, card] of [['REST', restCard], ['JSON-RPC', rpcAnswer.result]] as const) {
    t.equal(card.name, 'echo-extended', `${what}: the extended card`)
    t.match(card, { supportedInterfaces: [{ url: `${gw.url}/agent` }, { url: `${gw.url}/agent/rest` }] }, `${what}: interfaces on the gateway`)
    t.notOk(JSON.stringify(card).includes(upstream.url), `${what}: nothing names the agent's own address`)
    await authoritySigned(t, card, `${what} extended card`)
  }
  const client = await new V1.ClientFactory(V1.ClientFactoryOptions.createFrom(V1.ClientFactoryOptions.default, {
    clientConfig: { interceptors: [authInterceptor(badge(OV)) as never] }, preferredTransports: ['JSONRPC'],
  })).createFromUrl(`${gw.url}/agent/`)
  const extended = await client.getAgentCard() as unknown as { name: string; supportedInterfaces: { url: string }[] }
  t.equal(extended.name, 'echo-extended', 'the SDK client gets the extended card')
  t.ok(extended.supportedInterfaces.every((i) => i.url.startsWith(gw.url)), 'and is sent back through the gateway')
  const before = calls(upstream).length
  await client.sendMessage(v1Message('after the extended card'))
  t.equal(calls(upstream).length, before + 1, 'its next call goes through the gateway')
})

t.test('an extended card the gateway cannot read is cut off, never passed on', async (t) => {
  const bodies = ['{"name":"secret-a","supportedInterfaces":[{"url":', '{"name":"secret-b","name":"twice"}', JSON.stringify({ name: 'secret-c', description: 'x'.repeat(300 * 1024) })]
  let next = 0
  const agent = await cardServer(t, () => ({ body: bodies[next++]! }))
  const gw = await gateway(t, agent.origin)
  for (let i = 0; i < bodies.length; i++) {
    const received = await httpRequest(`${gw.url}/agent/rest/extendedAgentCard`, { headers: { 'a2a-version': '1.0', authorization: `Bearer ${badge(OV)}` } })
      .then(async (answer) => answer.body.text())
      .then((text) => text, () => '')
    t.notOk(received.includes('secret'), `card ${i}: none of it reaches the client`)
  }
  t.equal(agent.seen.length, bodies.length, 'each was asked of the agent')
})
