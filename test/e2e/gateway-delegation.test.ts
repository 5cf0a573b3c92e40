/**
 * Issue 6 end to end: an agent obtains an IAL-1 badge with the SDK, delegates to a second agent with an
 * envelope, and the second agent's request passes the gateway, whose PDP sees the leaf capability, the
 * depth and the constraints. Also: a chain failure is refused with its code outside EM-OBSERVE and let
 * through (logged) in EM-OBSERVE, and an envelope's enforcement_mode_min raises the mode.
 */
import t from 'tap'
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { adminCall, exitSafeTeardown, SLOW_START, startService } from '../helpers/appliance.js'
import { startPdpServer } from '../helpers/pdp-server.js'
import { startUpstream } from '../helpers/upstream-server.js'
import { chainHeaders, generateAgentKey, mintChildEnvelope, mintRootEnvelope, requestPopBadge } from '../../src/sdk/index.js'

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

  // The same stolen envelope on an EM-OBSERVE route: logged, not refused (protocol.md §10).
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
