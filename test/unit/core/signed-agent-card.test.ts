import { createHmac, generateKeyPairSync, sign, type KeyObject } from 'node:crypto'
import t from 'tap'
import { decodeDidKey, didKeyVerificationMethodId, encodeDidKey } from '../../../src/core/did-key.js'
import {
  MAX_SIGNED_CARD_BYTES,
  resolveDidKeyKid,
  signAgentCard,
  verifySignedAgentCard,
  type SignedAgentCard,
} from '../../../src/core/signed-agent-card.js'
import { minimalAgentCard } from '../../helpers/fixtures.js'

const card = minimalAgentCard()

function rawOf(publicKey: KeyObject): Uint8Array {
  return new Uint8Array(Buffer.from(publicKey.export({ format: 'jwk' }).x!, 'base64url'))
}

const { publicKey, privateKey } = generateKeyPairSync('ed25519')
const other = generateKeyPairSync('ed25519')
const KID = 'key-1'
const resolve = async (kid: string): Promise<Uint8Array | null> => (kid === KID ? rawOf(publicKey) : null)

const b64 = (value: unknown): string => Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)).toString('base64url')

/** Builds a JWS by hand so tests can put anything in the header; signs with Ed25519 over the real input. */
function handSigned(header: Record<string, unknown>, payload: unknown = card, key: KeyObject = privateKey): SignedAgentCard {
  const protectedB64 = b64(header)
  const payloadB64 = b64(payload)
  const signature = sign(null, Buffer.from(`${protectedB64}.${payloadB64}`), key).toString('base64url')
  return { protected: protectedB64, payload: payloadB64, signature }
}

t.test('a card signed with signAgentCard verifies and is validated', async (t) => {
  const signed = await signAgentCard(card, privateKey, KID)
  t.same(Object.keys(signed).sort(), ['payload', 'protected', 'signature'])
  t.same(JSON.parse(Buffer.from(signed.protected, 'base64url').toString()), { alg: 'EdDSA', kid: KID })
  const result = await verifySignedAgentCard(signed, resolve)
  t.equal(result.valid, true)
  if (!result.valid) return
  t.equal(result.kid, KID)
  t.same(result.card, card)
  t.same(result.validation, { valid: true, errors: [], warnings: [] })
})

t.test('a valid signature over an invalid card stays valid and carries the validation', async (t) => {
  const { skills: _skills, ...withoutSkills } = card
  void _skills
  const result = await verifySignedAgentCard(await signAgentCard(withoutSkills, privateKey, KID), resolve)
  t.equal(result.valid, true)
  if (!result.valid) return
  t.equal(result.validation.valid, false)
  t.same(result.validation.errors.map((e) => `${e.code} ${e.path}`), ['MISSING_REQUIRED_FIELD $.skills'])
})

t.test('tampering breaks the signature', async (t) => {
  const signed = await signAgentCard(card, privateKey, KID)
  const tamperedPayload = { ...signed, payload: b64({ ...card, url: 'https://evil.example.com' }) }
  t.match(await verifySignedAgentCard(tamperedPayload, resolve), { valid: false, error: 'SIGNATURE_INVALID', kid: KID })

  const sig = Buffer.from(signed.signature, 'base64url')
  sig[0] = sig[0]! ^ 1
  t.match(await verifySignedAgentCard({ ...signed, signature: sig.toString('base64url') }, resolve), { valid: false, error: 'SIGNATURE_INVALID' })

  // signed by a different key than the one registered for the kid
  const wrongKey = await signAgentCard(card, other.privateKey, KID)
  t.match(await verifySignedAgentCard(wrongKey, resolve), { valid: false, error: 'SIGNATURE_INVALID' })

  // the hand-built path really produces verifiable tokens, so the header tests below test the header
  t.match(await verifySignedAgentCard(handSigned({ alg: 'EdDSA', kid: KID }), resolve), { valid: true })
})

t.test('only EdDSA is accepted', async (t) => {
  const none = { ...handSigned({ alg: 'none', kid: KID }), signature: '' }
  t.match(await verifySignedAgentCard(none, resolve), { valid: false, error: 'SIGNED_CARD_MALFORMED' }, 'empty signature is malformed')
  t.match(await verifySignedAgentCard(handSigned({ alg: 'none', kid: KID }), resolve), { valid: false, error: 'ALG_NOT_ALLOWED' })
  t.match(await verifySignedAgentCard(handSigned({ kid: KID }), resolve), { valid: false, error: 'ALG_NOT_ALLOWED' })
  for (const alg of ['Ed25519', 'ES256', 'RS256', 'eddsa', 'EdDSA ']) {
    t.match(await verifySignedAgentCard(handSigned({ alg, kid: KID }), resolve), { valid: false, error: 'ALG_NOT_ALLOWED' }, alg)
  }
  // HS256 keyed with the public key bytes: the classic algorithm-confusion forgery
  const protectedB64 = b64({ alg: 'HS256', kid: KID })
  const payloadB64 = b64(card)
  const mac = createHmac('sha256', Buffer.from(rawOf(publicKey))).update(`${protectedB64}.${payloadB64}`).digest('base64url')
  const result = await verifySignedAgentCard({ protected: protectedB64, payload: payloadB64, signature: mac }, resolve)
  t.match(result, { valid: false, error: 'ALG_NOT_ALLOWED' })
  if (!result.valid) t.match(result.message, /HS256/)
})

t.test('headers that bring their own key or change processing are refused', async (t) => {
  const jwk = publicKey.export({ format: 'jwk' })
  const cases: Array<[string, unknown]> = [
    ['jwk', jwk],
    ['jku', 'https://evil.example.com/jwks.json'],
    ['x5u', 'https://evil.example.com/cert.pem'],
    ['x5c', ['MIIB']],
    ['crit', ['exp']],
    ['b64', false],
  ]
  for (const [name, value] of cases) {
    const result = await verifySignedAgentCard(handSigned({ alg: 'EdDSA', kid: KID, [name]: value }), resolve)
    t.match(result, { valid: false, error: 'HEADER_NOT_ALLOWED' }, name)
    if (!result.valid) t.match(result.message, new RegExp(`'${name}'`))
  }
  // an embedded key never substitutes for the registered one, even when the kid is unknown
  const selfKeyed = handSigned({ alg: 'EdDSA', kid: 'unknown', jwk: other.publicKey.export({ format: 'jwk' }) }, card, other.privateKey)
  t.match(await verifySignedAgentCard(selfKeyed, resolve), { valid: false, error: 'HEADER_NOT_ALLOWED' })
  // unprotected header member
  const withHeader = { ...handSigned({ alg: 'EdDSA', kid: KID }), header: { kid: 'other' } }
  t.match(await verifySignedAgentCard(withHeader, resolve), { valid: false, error: 'HEADER_NOT_ALLOWED' })
})

t.test('kid handling', async (t) => {
  t.match(await verifySignedAgentCard(handSigned({ alg: 'EdDSA' }), resolve), { valid: false, error: 'KID_MISSING' })
  t.match(await verifySignedAgentCard(handSigned({ alg: 'EdDSA', kid: '' }), resolve), { valid: false, error: 'KID_MISSING' })
  t.match(await verifySignedAgentCard(handSigned({ alg: 'EdDSA', kid: 5 }), resolve), { valid: false, error: 'KID_MISSING' })

  t.match(await verifySignedAgentCard(await signAgentCard(card, privateKey, 'key-2'), resolve), { valid: false, error: 'KEY_NOT_FOUND', kid: 'key-2' })
  const throwing = async (): Promise<Uint8Array | null> => {
    throw new Error('database down: secret detail')
  }
  const thrown = await verifySignedAgentCard(await signAgentCard(card, privateKey, KID), throwing)
  t.match(thrown, { valid: false, error: 'KEY_NOT_FOUND' })
  if (!thrown.valid) t.notMatch(thrown.message, /secret detail/)
  const garbage = async (): Promise<Uint8Array | null> => new Uint8Array(5)
  t.match(await verifySignedAgentCard(await signAgentCard(card, privateKey, KID), garbage), { valid: false, error: 'KEY_NOT_FOUND' })

  let called = false
  const spy = async (): Promise<Uint8Array | null> => {
    called = true
    return rawOf(publicKey)
  }
  await verifySignedAgentCard(handSigned({ alg: 'HS256', kid: KID }), spy)
  t.equal(called, false, 'the key resolver is not consulted for a refused header')
})

t.test('malformed input', async (t) => {
  const good = await signAgentCard(card, privateKey, KID)
  const cases: Array<[string, unknown]> = [
    ['null', null],
    ['string', 'a.b.c'],
    ['array', [good]],
    ['missing payload', { protected: good.protected, signature: good.signature }],
    ['missing protected', { payload: good.payload, signature: good.signature }],
    ['numeric signature', { ...good, signature: 5 }],
    ['padding', { ...good, payload: `${good.payload}=` }],
    ['standard base64 characters', { ...good, signature: good.signature.replace(/^./, '+') }],
    ['impossible length', { ...good, payload: 'AAAAA' }],
    ['non-canonical trailing bits', { ...good, signature: 'AB' }],
    ['header not JSON', { ...good, protected: b64('{alg:EdDSA') }],
    ['header not an object', { ...good, protected: b64(['EdDSA']) }],
    ['oversized member', { ...good, payload: 'A'.repeat(MAX_SIGNED_CARD_BYTES + 4) }],
  ]
  for (const [name, value] of cases) {
    t.match(await verifySignedAgentCard(value, resolve), { valid: false, error: 'SIGNED_CARD_MALFORMED' }, name)
  }
  // properly signed, but the payload is not a JSON object
  for (const payload of ['not json', '[1,2]', '"card"', 'null']) {
    const signed = handSigned({ alg: 'EdDSA', kid: KID }, payload)
    t.match(await verifySignedAgentCard(signed, resolve), { valid: false, error: 'SIGNED_CARD_MALFORMED' }, payload)
  }
  // invalid UTF-8 in the payload
  const protectedB64 = b64({ alg: 'EdDSA', kid: KID })
  const payloadB64 = Buffer.from([0x7b, 0xff, 0x7d]).toString('base64url')
  const sig = sign(null, Buffer.from(`${protectedB64}.${payloadB64}`), privateKey).toString('base64url')
  t.match(await verifySignedAgentCard({ protected: protectedB64, payload: payloadB64, signature: sig }, resolve), {
    valid: false,
    error: 'SIGNED_CARD_MALFORMED',
  })
})

t.test('payload __proto__ does not pollute', async (t) => {
  const payload = JSON.stringify(card).replace(/^\{/, '{"__proto__":{"polluted":true},')
  const result = await verifySignedAgentCard(handSigned({ alg: 'EdDSA', kid: KID }, payload), resolve)
  t.equal(result.valid, true)
  t.equal(({} as Record<string, unknown>)['polluted'], undefined)
  if (result.valid) t.same(result.validation.warnings.map((w) => w.code), ['UNKNOWN_FIELD'])
})

t.test('resolveDidKeyKid', async (t) => {
  const did = encodeDidKey(rawOf(publicKey))
  const vm = didKeyVerificationMethodId(did)
  t.same(Buffer.from(resolveDidKeyKid(did)!), Buffer.from(rawOf(publicKey)))
  t.same(Buffer.from(resolveDidKeyKid(vm)!), Buffer.from(rawOf(publicKey)))
  t.equal(resolveDidKeyKid(`${did}#key-1`), null, 'fragment must be the DID own key id')
  t.equal(resolveDidKeyKid('key-1'), null)
  t.equal(resolveDidKeyKid('did:web:example.com#key-1'), null)
  t.equal(resolveDidKeyKid('did:key:zNotAKey'), null)

  // end to end: a card signed by the DID's own key verifies with the DID resolver
  const signed = await signAgentCard(card, privateKey, vm)
  const result = await verifySignedAgentCard(signed, async (kid) => resolveDidKeyKid(kid))
  t.match(result, { valid: true, kid: vm })
  t.same(Buffer.from(decodeDidKey(did)), Buffer.from(rawOf(publicKey)))
  // a did:key kid naming someone else's key fails on the signature
  const otherVm = didKeyVerificationMethodId(encodeDidKey(rawOf(other.publicKey)))
  const forged = await signAgentCard(card, privateKey, otherVm)
  t.match(await verifySignedAgentCard(forged, async (kid) => resolveDidKeyKid(kid)), { valid: false, error: 'SIGNATURE_INVALID' })
})
