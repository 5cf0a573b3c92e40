/**
 * SDK delegation envelopes and chain headers: root and child payloads, the hash chain and shared txn_id,
 * chains the gateway's verifier (core/envelope.ts verifyChain) accepts, every local refusal of a child
 * that would widen its parent (with the gateway's code), and the headers' encoding round trip through the
 * gateway's decoder.
 */
import t from 'tap'
import { createHash, generateKeyPairSync } from 'node:crypto'
import { decodeChainHeaders, didKeyPublicKey, verifyChain, type EnvelopePayload } from '../../../src/core/envelope.js'
import { verifySelfSignedBadge } from '../../../src/core/self-signed-badge.js'
import { mintSelfSignedBadge } from '../../../src/sdk/badges.js'
import { SdkError } from '../../../src/sdk/errors.js'
import { inspectEnvelope, mintChildEnvelope, mintRootEnvelope, type RootEnvelopeOptions } from '../../../src/sdk/envelopes.js'
import { chainHeaders } from '../../../src/sdk/headers.js'
import { generateAgentKey, type AgentKey } from '../../../src/sdk/keys.js'

const NOW = Math.floor(Date.now() / 1000)
const A = generateAgentKey()
const B = generateAgentKey()
const C = generateAgentKey()
const badgeOf = (key: AgentKey): { token: string; jti: string } => mintSelfSignedBadge(key.privateKey, { now: NOW - 5, ttlSeconds: 600 })
const badgeA = badgeOf(A)
const badgeB = badgeOf(B)
const badgeC = badgeOf(C)

const rootOptions = (over: Partial<RootEnvelopeOptions> = {}): RootEnvelopeOptions => ({
  issuer: { did: A.did, privateKey: A.privateKey, badgeJti: badgeA.jti },
  subject: { did: B.did, badgeJti: badgeB.jti },
  capabilityClass: 'payments.refund',
  constraints: { max_amount: 100 },
  depthRemaining: 2,
  ttlSeconds: 600,
  enforcementModeMin: 'EM-GUARD',
  promptSummary: 'refund order 42',
  now: NOW,
  ...over,
})

const fromB = { did: B.did, privateKey: B.privateKey, badgeJti: badgeB.jti }
const toC = { did: C.did, badgeJti: badgeC.jti }

function code(fn: () => unknown): string | null {
  try {
    fn()
    return null
  } catch (error) {
    return error instanceof SdkError ? error.code : `not an SdkError: ${String(error)}`
  }
}

// The gateway's verifier, with did:key keys and self-signed badges.
function verifyAsGateway(envelopes: string[], badgeMap: Record<string, string>, caller: { did: string; jti: string }) {
  return verifyChain(envelopes, badgeMap, {
    now: NOW,
    maxDepth: 10,
    orgTrustBoundary: null,
    caller,
    resolveKey: didKeyPublicKey,
    verifyBadge: (token) => {
      const result = verifySelfSignedBadge(token, { now: NOW })
      return result.valid ? { did: result.claims.sub, jti: result.claims.jti } : null
    },
  })
}

t.test('root envelope: payload fields, header, signature the gateway accepts', async (t) => {
  const root = mintRootEnvelope(rootOptions())
  const { header, payload, verified } = inspectEnvelope(root.jws)
  t.equal(verified, false, 'inspect says it verified nothing')
  t.strictSame(header, { alg: 'EdDSA', typ: 'service-authority-envelope+jws', kid: A.kid })
  t.strictSame(payload, root.payload, 'the returned payload is the signed one')
  const p = root.payload
  t.match(p, {
    issuer_did: A.did, subject_did: B.did, parent_authority_hash: null, capability_class: 'payments.refund',
    constraints: { max_amount: 100 }, delegation_depth_remaining: 2, enforcement_mode_min: 'EM-GUARD',
    issued_at: NOW, expires_at: NOW + 600, issuer_badge_jti: badgeA.jti, subject_badge_jti: badgeB.jti, prompt_summary: 'refund order 42',
  })
  t.match(p.envelope_id, /^[0-9a-f-]{36}$/)
  t.match(p.txn_id, /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/, 'a UUIDv7 txn id by default')
  t.equal(mintRootEnvelope(rootOptions({ txnId: 'txn-7' })).payload.txn_id, 'txn-7', 'txnId given')
  t.not(mintRootEnvelope(rootOptions()).payload.envelope_id, p.envelope_id, 'fresh envelope ids')

  const verdict = await verifyAsGateway([root.jws], { [A.did]: badgeA.token }, { did: B.did, jti: badgeB.jti })
  t.ok(verdict.ok, `the gateway verifier accepts the root ${JSON.stringify(verdict)}`)
  const minimal = mintRootEnvelope({ issuer: { did: A.did, privateKey: A.privateKey, badgeJti: badgeA.jti }, subject: { did: B.did, badgeJti: null }, capabilityClass: 'read', depthRemaining: 0, ttlSeconds: 60 })
  t.match(minimal.payload, { constraints: {}, enforcement_mode_min: null, subject_badge_jti: null })
  t.notOk('prompt_summary' in minimal.payload, 'no prompt_summary unless given')
  t.ok((await verifyAsGateway([minimal.jws], { [A.did]: badgeA.token }, { did: B.did, jti: badgeB.jti })).ok, 'a null subject binding is fine at the root')
})

t.test('child envelope: txn copied, parent hash, defaults inherited, a chain the gateway accepts', async (t) => {
  const root = mintRootEnvelope(rootOptions())
  const child = mintChildEnvelope(root.jws, { issuer: fromB, subject: toC, now: NOW + 1 })
  const p: EnvelopePayload = child.payload
  t.equal(p.txn_id, root.payload.txn_id, 'the txn id is the parent\'s')
  t.equal(p.parent_authority_hash, createHash('sha256').update(root.jws).digest('hex'), 'lower-case hex SHA-256 of the parent JWS')
  t.match(p, {
    issuer_did: B.did, subject_did: C.did, capability_class: 'payments.refund', constraints: { max_amount: 100 },
    delegation_depth_remaining: 1, expires_at: root.payload.expires_at, issued_at: NOW + 1,
    issuer_badge_jti: badgeB.jti, subject_badge_jti: badgeC.jti, enforcement_mode_min: null,
  })
  t.strictSame(inspectEnvelope(child.jws).header.kid, B.kid)

  const narrower = mintChildEnvelope(root.jws, {
    issuer: fromB, subject: toC, capabilityClass: 'payments.refund.small', constraints: { max_amount: 10 },
    depthRemaining: 0, ttlSeconds: 100, enforcementModeMin: 'EM-STRICT', now: NOW + 1,
  })
  t.match(narrower.payload, { capability_class: 'payments.refund.small', constraints: { max_amount: 10 }, delegation_depth_remaining: 0, expires_at: NOW + 101, enforcement_mode_min: 'EM-STRICT' })

  const badges = { [A.did]: badgeA.token, [B.did]: badgeB.token }
  for (const [label, leaf] of [['defaults', child], ['narrowed', narrower]] as const) {
    const verdict = await verifyAsGateway([root.jws, leaf.jws], badges, { did: C.did, jti: badgeC.jti })
    t.ok(verdict.ok, `${label}: the gateway verifier accepts the chain ${JSON.stringify(verdict)}`)
    if (verdict.ok) t.equal(verdict.leaf.subject_did, C.did)
  }

  // Three levels: C delegates on to a fourth agent.
  const D = generateAgentKey()
  const badgeD = badgeOf(D)
  const grandchild = mintChildEnvelope(child.jws, { issuer: { did: C.did, privateKey: C.privateKey, badgeJti: badgeC.jti }, subject: { did: D.did, badgeJti: badgeD.jti }, now: NOW + 2 })
  t.equal(grandchild.payload.txn_id, root.payload.txn_id, 'txn id constant down the chain')
  t.equal(grandchild.payload.delegation_depth_remaining, 0)
  const three = await verifyAsGateway([root.jws, child.jws, grandchild.jws], { ...badges, [C.did]: badgeC.token }, { did: D.did, jti: badgeD.jti })
  t.ok(three.ok, 'a three-envelope chain verifies')
  t.equal(code(() => mintChildEnvelope(grandchild.jws, { issuer: { did: D.did, privateKey: D.privateKey, badgeJti: badgeD.jti }, subject: toC, now: NOW + 3 })),
    'ENVELOPE_DEPTH_EXCEEDED', 'no delegation below depth 0')
})

t.test('a child that would widen or break the chain is refused locally with the gateway\'s code', async (t) => {
  const root = mintRootEnvelope(rootOptions())
  const child = (over: Record<string, unknown>) => () => mintChildEnvelope(root.jws, { issuer: fromB, subject: toC, now: NOW + 1, ...over })
  t.equal(code(child({ capabilityClass: 'payments' })), 'ENVELOPE_NARROWING_VIOLATION', 'a wider class')
  t.equal(code(child({ capabilityClass: 'payments.refundall' })), 'ENVELOPE_NARROWING_VIOLATION', 'a sibling that only shares a prefix')
  t.equal(code(child({ capabilityClass: 'admin' })), 'ENVELOPE_NARROWING_VIOLATION', 'an unrelated class')
  t.equal(code(child({ ttlSeconds: 600 })), 'ENVELOPE_NARROWING_VIOLATION', 'outliving the parent')
  t.equal(code(child({ ttlSeconds: 599 })), null, 'exactly until the parent expires is fine')
  t.equal(code(child({ depthRemaining: 2 })), 'ENVELOPE_NARROWING_VIOLATION', 'depth not one less')
  t.equal(code(child({ depthRemaining: -1 })), 'invalid_argument', 'negative depth')
  t.equal(code(child({ issuer: { did: C.did, privateKey: C.privateKey, badgeJti: badgeC.jti } })), 'ENVELOPE_CHAIN_BROKEN', 'an issuer that is not the parent\'s subject')
  t.equal(code(child({ issuer: { ...fromB, badgeJti: 'another-badge' } })), 'ENVELOPE_BADGE_BINDING_FAILED', 'an issuer badge other than the parent binds')
  t.equal(code(child({ subject: { did: C.did, badgeJti: null } })), 'invalid_argument', 'a null subject badge below the root')
  t.equal(code(child({ now: NOW + 601 })), 'ENVELOPE_EXPIRED', 'an expired parent')
  t.equal(code(child({ capabilityClass: 'payments.refund.Bad' })), 'ENVELOPE_CAPABILITY_INVALID', 'a class the grammar refuses')
  const leaf = mintRootEnvelope(rootOptions({ depthRemaining: 0 }))
  t.equal(code(() => mintChildEnvelope(leaf.jws, { issuer: fromB, subject: toC, now: NOW + 1 })), 'ENVELOPE_DEPTH_EXCEEDED', 'a parent with no depth left')
  t.equal(code(() => mintChildEnvelope('garbage', { issuer: fromB, subject: toC })), 'ENVELOPE_MALFORMED', 'a parent that is no JWS')
  const noFields = `${Buffer.from('{"alg":"EdDSA"}').toString('base64url')}.${Buffer.from('{"foo":1}').toString('base64url')}.sig`
  t.equal(code(() => mintChildEnvelope(noFields, { issuer: fromB, subject: toC })), 'ENVELOPE_MALFORMED', 'a parent without the fields')

  // A parent from a clock slightly ahead: the child is dated no earlier than the parent.
  const ahead = mintRootEnvelope(rootOptions({ now: NOW + 30 }))
  const skewed = mintChildEnvelope(ahead.jws, { issuer: fromB, subject: toC, now: NOW })
  t.equal(skewed.payload.issued_at, NOW + 30, 'issued_at raised to the parent\'s')
})

t.test('root refusals: bad key binding, class, sizes, ttl', async (t) => {
  t.equal(code(() => mintRootEnvelope(rootOptions({ issuer: { did: A.did, privateKey: B.privateKey, badgeJti: 'j' } }))), 'ENVELOPE_KEY_NOT_BOUND', 'a key that is not the did:key\'s')
  t.equal(code(() => mintRootEnvelope(rootOptions({ issuer: { did: A.did, privateKey: A.privateKey, kid: `${B.did}#x`, badgeJti: 'j' } }))), 'ENVELOPE_KEY_NOT_BOUND', 'a kid of another DID')
  t.equal(code(() => mintRootEnvelope(rootOptions({ issuer: { did: A.did, privateKey: generateKeyPairSync('ed25519').publicKey, badgeJti: 'j' } }))), 'invalid_argument', 'a public key')
  t.equal(code(() => mintRootEnvelope(rootOptions({ capabilityClass: 'Payments' }))), 'ENVELOPE_CAPABILITY_INVALID')
  t.equal(code(() => mintRootEnvelope(rootOptions({ capabilityClass: 'payments..refund' }))), 'ENVELOPE_CAPABILITY_INVALID')
  t.equal(code(() => mintRootEnvelope(rootOptions({ constraints: { blob: 'x'.repeat(9000) } }))), 'ENVELOPE_PAYLOAD_TOO_LARGE')
  t.equal(code(() => mintRootEnvelope(rootOptions({ promptSummary: 'é'.repeat(512) }))), null, '512 characters are fine')
  t.equal(code(() => mintRootEnvelope(rootOptions({ promptSummary: 'x'.repeat(513) }))), 'invalid_argument', 'prompt summary over 512')
  t.equal(code(() => mintRootEnvelope(rootOptions({ ttlSeconds: 0 }))), 'invalid_argument')
  t.equal(code(() => mintRootEnvelope(rootOptions({ depthRemaining: 1.5 }))), 'invalid_argument')
  t.equal(code(() => mintRootEnvelope(rootOptions({ txnId: 'x'.repeat(129) }))), 'invalid_argument', 'txn id over 128')
  t.equal(code(() => mintRootEnvelope(rootOptions({ enforcementModeMin: 'EM-LOOSE' as never }))), 'invalid_argument')
  t.equal(code(() => mintRootEnvelope(rootOptions({ issuer: { did: 'did:example:1', privateKey: A.privateKey, badgeJti: 'j' } }))), 'invalid_argument', 'no default kid for other DID methods')
  const web = 'did:web:registry.example.com:agents:1'
  const webRoot = mintRootEnvelope(rootOptions({ issuer: { did: web, privateKey: A.privateKey, badgeJti: 'j' } }))
  t.equal(inspectEnvelope(webRoot.jws).header.kid, `${web}#key-1`, 'a did:web issuer defaults to #key-1')
})

t.test('inspectEnvelope refuses what is no JWS', async (t) => {
  t.equal(code(() => inspectEnvelope('a.b')), 'ENVELOPE_MALFORMED')
  t.equal(code(() => inspectEnvelope('!!.??.x')), 'ENVELOPE_MALFORMED')
  t.equal(code(() => inspectEnvelope(`${Buffer.from('[1]').toString('base64url')}.${Buffer.from('{}').toString('base64url')}.x`)), 'ENVELOPE_MALFORMED', 'header not an object')
  t.equal(code(() => inspectEnvelope(`${Buffer.from('{}').toString('base64url')}.bm90IGpzb24.x`)), 'ENVELOPE_MALFORMED', 'payload not JSON')
})

t.test('chainHeaders: leaf, chain and badge map, decoded back by the gateway', async (t) => {
  const root = mintRootEnvelope(rootOptions())
  const child = mintChildEnvelope(root.jws, { issuer: fromB, subject: toC, now: NOW + 1 })
  const badgeMap = { [A.did]: badgeA.token, [B.did]: badgeB.token }
  const headers = chainHeaders([root.jws, child.jws], badgeMap)
  t.strictSame(Object.keys(headers).sort(), ['X-Service-Authority', 'X-Service-Authority-Chain', 'X-Service-Badge-Map'])
  t.equal(headers['X-Service-Authority'], child.jws, 'the leaf is the last envelope')
  t.match(headers['X-Service-Authority-Chain'], /^[A-Za-z0-9_-]+$/, 'unpadded base64url')
  t.strictSame(JSON.parse(Buffer.from(headers['X-Service-Authority-Chain'], 'base64url').toString()), [root.jws, child.jws], 'root first')
  t.strictSame(JSON.parse(Buffer.from(headers['X-Service-Badge-Map'], 'base64url').toString()), badgeMap)
  const decoded = decodeChainHeaders({ authority: headers['X-Service-Authority'], chain: headers['X-Service-Authority-Chain'], badgeMap: headers['X-Service-Badge-Map'] }, 10)
  t.match(decoded, { ok: true, envelopes: [root.jws, child.jws], badgeMap })
  if (decoded !== null && decoded.ok) {
    t.ok((await verifyAsGateway(decoded.envelopes, decoded.badgeMap, { did: C.did, jti: badgeC.jti })).ok, 'and the decoded chain verifies')
  }
  t.equal(chainHeaders([root.jws], {})['X-Service-Authority'], root.jws, 'a one-envelope chain')
  t.equal(code(() => chainHeaders([], {})), 'invalid_argument', 'an empty chain')
  t.equal(code(() => chainHeaders(['nope'], {})), 'invalid_argument', 'not a JWS')
  t.equal(code(() => chainHeaders([root.jws], { 'not-a-did': badgeA.token })), 'invalid_argument', 'a badge map key that is no DID')
})
