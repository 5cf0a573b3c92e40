/**
 * Issue 6 end to end: an agent obtains an IAL-1 badge with the SDK, delegates to a second agent with an
 * envelope, and the second agent's request passes the gateway, whose PDP sees the leaf capability, the
 * depth and the constraints. Also: a chain failure is refused with its code outside EM-OBSERVE and let
 * through (logged) in EM-OBSERVE, and an envelope's enforcement_mode_min raises the mode. The deepest
 * chain SERVICE_MAX_CHAIN_DEPTH allows, with its badge map, fits the gateway's request head and passes;
 * one envelope more is ENVELOPE_CHAIN_TOO_DEEP before any signature is looked at.
 */
import t from 'tap'
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { adminCall, exitSafeTeardown, SLOW_START, startService } from '../helpers/appliance.js'
import { startPdpServer } from '../helpers/pdp-server.js'
import { startUpstream } from '../helpers/upstream-server.js'
import { chainHeaders, generateAgentKey, mintChildEnvelope, mintRootEnvelope, requestPopBadge } from '../../src/sdk/index.js'
import { delegationHeadBytes } from '../../src/config/index.js'
import { MAX_PROMPT_SUMMARY_CHARS } from '../../src/core/envelope.js'

t.setTimeout(240_000)

const upstream = await startUpstream(t)
const pdp = await startPdpServer(t)
const dir = mkdtempSync(path.join(tmpdir(), 'svc-e2e-delegation-'))
const routes = path.join(dir, 'routes.json')
writeFileSync(routes, JSON.stringify({
  routes: [
    { prefix: '/guard', upstream: upstream.url, mode: 'EM-GUARD' },
    { prefix: '/observe', upstream: upstream.url, mode: 'EM-OBSERVE' },
  ],
}))
const service = await startService(exitSafeTeardown(t), {
  SERVICE_ROUTES_FILE: routes,
  SERVICE_PDP_ENDPOINT: pdp.url,
  SERVICE_PDP_TIMEOUT_MS: '2000',
}, SLOW_START)
const gateway = service.gatewayUrl as string
const key = service.operatorKey

/** An agent registered with a did:key DID that proves its key (IAL-1) through the SDK. */
async function ial1Agent(name: string): Promise<{ did: string; kid: string; privateKey: import('node:crypto').KeyObject; token: string; jti: string }> {
  const agentKey = generateAgentKey()
  const created = await adminCall(service.adminUrl, key, 'POST', '/v1/agents', { name, domain: 'example.com', did: agentKey.did })
  if (created.status !== 201) throw new Error(`agent create: ${created.status} ${JSON.stringify(created.body)}`)
  const badge = await requestPopBadge({ registryUrl: service.adminUrl, apiKey: key, did: agentKey.did, privateKey: agentKey.privateKey, badgeTtl: 600 })
  return { did: agentKey.did, kid: agentKey.kid, privateKey: agentKey.privateKey, token: badge.token, jti: badge.jti }
}

const alice = await ial1Agent('alice')
const bob = await ial1Agent('bob')
const carol = await ial1Agent('carol')

// `object`: the SDK's ChainHeaders is a closed interface, not an index-signature record.
async function call(urlPath: string, token: string, headers: object): Promise<{ status: number; body: any }> {
  const res = await fetch(`${gateway}${urlPath}`, { headers: { authorization: `Bearer ${token}`, ...(headers as Record<string, string>) } })
  const text = await res.text()
  let body: unknown
  try {
    body = JSON.parse(text)
  } catch {
    body = text
  }
  return { status: res.status, body }
}

t.test('IAL-1 badges from the SDK, a delegation to bob, and the PDP sees the chain', async (t) => {
  t.match(alice.token.split('.').length, 3)
  const root = mintRootEnvelope({
    issuer: { did: alice.did, privateKey: alice.privateKey, badgeJti: alice.jti },
    subject: { did: bob.did, badgeJti: bob.jti },
    capabilityClass: 'orders.read',
    constraints: { max_items: 10 },
    depthRemaining: 1,
    ttlSeconds: 300,
  })
  pdp.respond({ decision: 'ALLOW', ttl: 0 })
  const before = pdp.requests.length
  const res = await call('/guard/orders/42', bob.token, chainHeaders([root.jws], { [alice.did]: alice.token }))
  t.equal(res.status, 200, `bob's delegated request passes: ${JSON.stringify(res.body)}`)
  const seen = pdp.requests.slice(before)
  t.equal(seen.length, 1, 'the PDP was asked once')
  const context = seen[0]?.body.context
  t.equal(seen[0]?.body.subject.did, bob.did, 'the subject is the caller')
  t.equal(seen[0]?.body.subject.ial, '1', 'an IAL-1 badge')
  t.equal(context.leaf_capability, 'orders.read', 'leaf capability reaches the PDP')
  t.equal(context.delegation_depth, 1, 'depth = number of envelopes')
  t.same(context.leaf_constraints, { max_items: 10 }, 'the leaf constraints reach the PDP')
  t.equal(context.parent_constraints, null, 'no parent at depth 1')

  // A second hop: bob delegates a narrower class to carol.
  const child = mintChildEnvelope(root.jws, {
    issuer: { did: bob.did, privateKey: bob.privateKey, badgeJti: bob.jti },
    subject: { did: carol.did, badgeJti: carol.jti },
    capabilityClass: 'orders.read.summary',
    constraints: { max_items: 3 },
  })
  const before2 = pdp.requests.length
  const two = await call('/guard/orders/42', carol.token, chainHeaders([root.jws, child.jws], { [alice.did]: alice.token, [bob.did]: bob.token }))
  t.equal(two.status, 200, `carol's request through two envelopes passes: ${JSON.stringify(two.body)}`)
  const ctx2 = pdp.requests[before2]?.body.context
  t.equal(ctx2?.leaf_capability, 'orders.read.summary')
  t.equal(ctx2?.delegation_depth, 2)
  t.same(ctx2?.parent_constraints, { max_items: 10 }, "the parent's constraints reach the PDP too")
  const upstreamSaw = upstream.requests[upstream.requests.length - 1]
  t.ok(upstreamSaw?.headers['x-service-authority'], 'envelope headers are forwarded unchanged')
  t.equal(upstreamSaw?.headers['x-service-subject'], carol.did)
})

t.test('chain failures: refused with their code outside EM-OBSERVE, logged and let through in EM-OBSERVE', async (t) => {
  pdp.respond({ decision: 'ALLOW', ttl: 0 })
  const root = mintRootEnvelope({
    issuer: { did: alice.did, privateKey: alice.privateKey, badgeJti: alice.jti },
    subject: { did: bob.did, badgeJti: bob.jti },
    capabilityClass: 'orders.read',
    depthRemaining: 0,
    ttlSeconds: 300,
  })
  // Carol presents an envelope addressed to bob: the leaf subject is not the caller.
  const stolen = chainHeaders([root.jws], { [alice.did]: alice.token })
  const before = upstream.requests.length
  const refused = await call('/guard/x', carol.token, stolen)
  t.equal(refused.status, 403)
  t.equal(refused.body.error, 'ENVELOPE_BADGE_BINDING_FAILED')
  t.equal(upstream.requests.length, before, 'nothing reached the upstream')

  // The issuer's badge is missing from the map.
  const noBadge = await call('/guard/x', bob.token, chainHeaders([root.jws], {}))
  t.equal(noBadge.status, 403)
  t.equal(noBadge.body.error, 'ENVELOPE_BADGE_BINDING_FAILED')

  // Garbage in the chain header.
  const garbage = await call('/guard/x', bob.token, { 'x-service-authority-chain': 'not-base64url-json!' })
  t.equal(garbage.status, 400)
  t.equal(garbage.body.error, 'ENVELOPE_MALFORMED')

  // The same stolen envelope on an EM-OBSERVE route: logged, not refused (docs/wire-contract.md §10).
  const observed = await call('/observe/x', carol.token, stolen)
  t.equal(observed.status, 200, 'EM-OBSERVE lets the request through')
  await new Promise((r) => setTimeout(r, 200))
  const line = service.logLines().reverse().find((l) => l.msg === 'gateway request' && l.chain_error === 'ENVELOPE_BADGE_BINDING_FAILED')
  t.ok(line, 'and the request line names the chain error')
})

t.test('enforcement_mode_min raises the mode on an EM-OBSERVE route', async (t) => {
  const strict = mintRootEnvelope({
    issuer: { did: alice.did, privateKey: alice.privateKey, badgeJti: alice.jti },
    subject: { did: bob.did, badgeJti: bob.jti },
    capabilityClass: 'orders.write',
    depthRemaining: 0,
    ttlSeconds: 300,
    enforcementModeMin: 'EM-STRICT',
  })
  pdp.respond({ decision: 'DENY', ttl: 0 })
  const headers = chainHeaders([strict.jws], { [alice.did]: alice.token })
  const res = await call('/observe/orders', bob.token, headers)
  t.equal(res.status, 403, 'a DENY now blocks although the route observes')
  t.equal(res.body.error, 'POLICY_DENIED')
  t.equal(pdp.requests[pdp.requests.length - 1]?.body.context.enforcement_mode, 'EM-STRICT', 'the PDP is told the raised mode')
  const plain = await call('/observe/orders', bob.token, {})
  t.equal(plain.status, 200, 'without the envelope the route still observes')
})

t.test('a revoked delegator badge fails the binding', async (t) => {
  pdp.respond({ decision: 'ALLOW', ttl: 0 })
  const dave = await ial1Agent('dave')
  const root = mintRootEnvelope({
    issuer: { did: dave.did, privateKey: dave.privateKey, badgeJti: dave.jti },
    subject: { did: bob.did, badgeJti: bob.jti },
    capabilityClass: 'orders.read',
    depthRemaining: 0,
    ttlSeconds: 300,
  })
  const headers = chainHeaders([root.jws], { [dave.did]: dave.token })
  t.equal((await call('/guard/y', bob.token, headers)).status, 200, 'passes while dave\'s badge is good')
  const revoked = await adminCall(service.adminUrl, key, 'POST', `/v1/badges/${dave.jti}/revoke`, { reason: 'test' })
  t.equal(revoked.status, 200)
  const deadline = Date.now() + 3000
  let res = await call('/guard/y', bob.token, headers)
  while (res.status === 200 && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 50))
    res = await call('/guard/y', bob.token, headers)
  }
  t.equal(res.status, 403)
  t.equal(res.body.error, 'ENVELOPE_BADGE_BINDING_FAILED')
})

t.test('a did:web issuer of this registry: its key comes from the registry, bound by kid', async (t) => {
  pdp.respond({ decision: 'ALLOW', ttl: 0 })
  const webKey = generateAgentKey()
  const created = await adminCall(service.adminUrl, key, 'POST', '/v1/agents', { name: 'web-issuer', domain: 'example.com', publicKeyJwk: webKey.publicJwk })
  t.equal(created.status, 201)
  const did = created.body.data.did as string
  t.match(did, /^did:web:registry\.test:agents:/)
  const badge = await requestPopBadge({ registryUrl: service.adminUrl, apiKey: key, did, privateKey: webKey.privateKey, badgeTtl: 600 })
  const root = mintRootEnvelope({
    issuer: { did, privateKey: webKey.privateKey, kid: `${did}#key-1`, badgeJti: badge.jti },
    subject: { did: bob.did, badgeJti: bob.jti },
    capabilityClass: 'orders.read',
    depthRemaining: 0,
    ttlSeconds: 300,
  })
  const ok = await call('/guard/web', bob.token, chainHeaders([root.jws], { [did]: badge.token }))
  t.equal(ok.status, 200, `a did:web issuer's envelope verifies: ${JSON.stringify(ok.body)}`)

  // Signed with another key under the same kid: the registry's document does not bind it.
  const impostor = generateAgentKey()
  const forged = mintRootEnvelope({
    issuer: { did, privateKey: impostor.privateKey, kid: `${did}#key-1`, badgeJti: badge.jti },
    subject: { did: bob.did, badgeJti: bob.jti },
    capabilityClass: 'orders.read',
    depthRemaining: 0,
    ttlSeconds: 300,
  })
  const refused = await call('/guard/web', bob.token, chainHeaders([forged.jws], { [did]: badge.token }))
  t.equal(refused.status, 401)
  t.equal(refused.body.error, 'ENVELOPE_SIGNATURE_INVALID')
})

// --- the deepest chain the gateway accepts (SERVICE_MAX_CHAIN_DEPTH, default 10) ---------------------

type Agent = Awaited<ReturnType<typeof ial1Agent>>
const DEFAULT_MAX_DEPTH = 10
// One more than the deepest chain, so the same agents make the too-deep chain.
const hops: Agent[] = []
for (let i = 0; i <= DEFAULT_MAX_DEPTH + 1; i++) hops.push(await ial1Agent(`hop-${i}`))

/**
 * `length` envelopes from hops[0] down to hops[length] (the caller), each with a short prompt summary
 * and constraints, as a delegating agent would send them, and the badge map of every issuer.
 */
function deepChain(length: number, summaryChars = 0): { headers: Record<string, string>; caller: Agent } {
  const constraints = { max_items: 10, region: 'eu-west-1', currency: 'EUR' }
  const summary = (i: number): string => (summaryChars === 0 ? `Step ${i}: gather the open orders of the week and pass the summary on` : `Step ${i}: ${'gather the open orders of the week. '.repeat(20)}`.slice(0, summaryChars))
  const issuer = (a: Agent): { did: string; privateKey: import('node:crypto').KeyObject; badgeJti: string } => ({ did: a.did, privateKey: a.privateKey, badgeJti: a.jti })
  const envelopes = [mintRootEnvelope({
    issuer: issuer(hops[0] as Agent),
    subject: { did: (hops[1] as Agent).did, badgeJti: (hops[1] as Agent).jti },
    capabilityClass: 'orders.read',
    constraints,
    depthRemaining: length - 1,
    ttlSeconds: 300,
    promptSummary: summary(0),
  }).jws]
  for (let i = 1; i < length; i++) {
    envelopes.push(mintChildEnvelope(envelopes[i - 1] as string, {
      issuer: issuer(hops[i] as Agent),
      subject: { did: (hops[i + 1] as Agent).did, badgeJti: (hops[i + 1] as Agent).jti },
      constraints,
      promptSummary: summary(i),
    }).jws)
  }
  const badgeMap = Object.fromEntries(hops.slice(0, length).map((a) => [a.did, a.token]))
  return { headers: chainHeaders(envelopes, badgeMap) as unknown as Record<string, string>, caller: hops[length] as Agent }
}

/** The request head `headers` and the caller's badge make: header lines, plus the request line and fetch's own headers. */
function headBytes(headers: Record<string, string>, token: string): number {
  const lines = Object.entries({ ...headers, authorization: `Bearer ${token}` })
  return lines.reduce((sum, [name, value]) => sum + name.length + value.length + 4, 0) + 256
}

t.test('a chain of the maximum depth with its badge map fits the request head and passes', async (t) => {
  pdp.respond({ decision: 'ALLOW', ttl: 0 })
  for (const summaryChars of [0, MAX_PROMPT_SUMMARY_CHARS]) {
    const label = summaryChars === 0 ? 'short summaries' : `${summaryChars}-character summaries`
    const { headers, caller } = deepChain(DEFAULT_MAX_DEPTH, summaryChars)
    const bytes = headBytes(headers, caller.token)
    t.ok(bytes > 16 * 1024, `${label}: the head (${bytes} bytes) is over node's default 16 KiB limit`)
    t.ok(bytes <= delegationHeadBytes(DEFAULT_MAX_DEPTH), `${label}: and within what the start-up check reserves for ${DEFAULT_MAX_DEPTH} envelopes (${delegationHeadBytes(DEFAULT_MAX_DEPTH)})`)
    const before = upstream.requests.length
    const res = await call('/guard/deep', caller.token, headers)
    t.equal(res.status, 200, `${label}: the ${DEFAULT_MAX_DEPTH}-envelope chain passes (${res.body?.error ?? 'forwarded'})`)
    t.equal(upstream.requests.length, before + 1, `${label}: it reached the upstream`)
    t.equal(pdp.requests[pdp.requests.length - 1]?.body.context.delegation_depth, DEFAULT_MAX_DEPTH, `${label}: the PDP sees the full depth`)
  }
})

/** The chain headers with every envelope's signature replaced by bytes that are no signature at all. */
function withGarbageSignatures(headers: Record<string, string>): Record<string, string> {
  const decode = (value: string | undefined): unknown => JSON.parse(Buffer.from(value as string, 'base64url').toString('utf8'))
  const garbage = Buffer.from('garbage signature bytes, not Ed25519 at all').toString('base64url')
  const chain = (decode(headers['X-Service-Authority-Chain']) as string[]).map((jws) => `${jws.slice(0, jws.lastIndexOf('.'))}.${garbage}`)
  return chainHeaders(chain, decode(headers['X-Service-Badge-Map']) as Record<string, string>) as unknown as Record<string, string>
}

t.test('a chain one envelope too deep is ENVELOPE_CHAIN_TOO_DEEP before any signature is checked', async (t) => {
  pdp.respond({ decision: 'ALLOW', ttl: 0 })
  // Control: at the maximum depth the garbage signatures are what is refused.
  const atMax = deepChain(DEFAULT_MAX_DEPTH)
  const forgedAtMax = await call('/guard/too-deep', atMax.caller.token, withGarbageSignatures(atMax.headers))
  t.equal(forgedAtMax.status, 401, 'garbage signatures within the depth: 401')
  t.equal(forgedAtMax.body.error, 'ENVELOPE_SIGNATURE_INVALID', 'for the signatures')

  const { headers, caller } = deepChain(DEFAULT_MAX_DEPTH + 1)
  const forged = withGarbageSignatures(headers)
  t.ok(headBytes(forged, caller.token) < 64 * 1024, 'the too-deep chain fits the default head limit')
  const before = upstream.requests.length
  const pdpBefore = pdp.requests.length
  const res = await call('/guard/too-deep', caller.token, forged)
  t.equal(res.status, 403, 'one envelope more, all signatures garbage: 403')
  t.equal(res.body.error, 'ENVELOPE_CHAIN_TOO_DEEP', 'for its depth, not its signatures')
  // The same chain with valid signatures is refused for the same reason.
  const valid = await call('/guard/too-deep', caller.token, headers)
  t.equal(valid.status, 403)
  t.equal(valid.body.error, 'ENVELOPE_CHAIN_TOO_DEEP', 'valid signatures change nothing')
  t.equal(upstream.requests.length, before, 'nothing reached the upstream')
  t.equal(pdp.requests.length, pdpBefore, 'the PDP was not asked')
})
