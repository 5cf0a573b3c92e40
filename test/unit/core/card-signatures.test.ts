/**
 * A2A §8.4 signed Agent Cards (src/core/card-signatures.ts): the canonical form against the spec's own example,
 * cross-implementation with jose and the 1.3.0 SDK, tampering, hostile entries, a jku that is never fetched,
 * and a property test over arbitrary cards.
 */
import canonicalize from 'canonicalize'
import { canonicalizeAgentCard, generateAgentCardSignature, verifyAgentCardSignature } from 'a2a-sdk-v1'
import fc from 'fast-check'
import { FlattenedSign, GeneralSign, flattenedVerify, generalVerify } from 'jose'
import { createServer } from 'node:http'
import { generateKeyPairSync, type KeyObject } from 'node:crypto'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import {
  MAX_CARD_SIGNATURES,
  authorityJku,
  canonicalCardPayload,
  countersignCard,
  signCard,
  verifyCardSignatures,
  type CardSignatureAlg,
  type CardSignaturesResult,
  type SignatureCheck,
} from '../../../src/core/card-signatures.js'
import { propertyRuns } from '../../helpers/property-runs.js'

interface Pair { privateKey: KeyObject; publicKey: KeyObject; alg: CardSignatureAlg }
const ed = (): Pair => ({ ...generateKeyPairSync('ed25519'), alg: 'EdDSA' })
const p256 = (): Pair => ({ ...generateKeyPairSync('ec', { namedCurve: 'P-256' }), alg: 'ES256' })
const PAIRS: Array<[string, () => Pair]> = [['EdDSA', ed], ['ES256', p256]]

const b64 = (value: unknown): string => Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)).toString('base64url')
const decode = (text: string): unknown => JSON.parse(Buffer.from(text, 'base64url').toString('utf8'))

/** A 1.0-shaped card with no empty or default values, so every implementation canonicalises it alike. */
function v1Card(): Record<string, unknown> {
  return {
    name: 'Weather Agent',
    description: 'Answers questions about the weather.',
    version: '1.2.0',
    supportedInterfaces: [{ url: 'https://weather.example.com/a2a', protocolBinding: 'JSONRPC', protocolVersion: '1.0' }],
    provider: { organization: 'Example Org', url: 'https://example.com' },
    capabilities: { streaming: true, pushNotifications: false },
    defaultInputModes: ['text/plain'],
    defaultOutputModes: ['application/json'],
    skills: [{ id: 'forecast', name: 'Forecast', description: 'Forecasts the weather.', tags: ['weather'] }],
  }
}

function trust(kid: string, key: KeyObject): (k: string) => KeyObject | null {
  return (k) => (k === kid ? key : null)
}

function verified(result: CardSignaturesResult): boolean {
  return 'signatures' in result && result.valid
}

function checks(result: CardSignaturesResult): SignatureCheck[] {
  return 'signatures' in result ? result.signatures : []
}

t.test('§8.4.1: the spec\'s canonicalization example, verbatim', async (t) => {
  const fragment = JSON.parse(`{
  "name": "Example Agent",
  "description": "",
  "capabilities": {
    "streaming": false,
    "pushNotifications": false,
    "extensions": []
  },
  "skills": []
}`)
  const result = canonicalCardPayload(fragment)
  t.ok(result.ok)
  if (!result.ok) return
  t.equal(result.canonical, '{"capabilities":{"pushNotifications":false,"streaming":false},"description":"","name":"Example Agent","skills":[]}')
  t.same(Buffer.from(result.bytes).toString('utf8'), result.canonical, 'the signed bytes are the UTF-8 of that string')
})

t.test('canonical form: presence rules, signatures excluded, unknown members kept', async (t) => {
  const card = {
    ...v1Card(),
    signatures: [{ protected: 'x', signature: 'y' }],
    supportedInterfaces: [{ url: 'https://a.example', protocolBinding: 'JSONRPC', protocolVersion: '1.0', tenant: '' }],
    capabilities: { streaming: false, extensions: [{ uri: 'urn:x', description: '', required: false, params: {} }] },
    skills: [{ id: 's', name: 'S', description: 'd', tags: [], examples: [], inputModes: [] }],
    securitySchemes: {},
    securityRequirements: [],
    documentationUrl: null,
    url: 'https://legacy.example/a2a',
    'x-vendor': { empty: [], blank: '' },
  }
  const result = canonicalCardPayload(card)
  if (!result.ok) return t.fail(result.message)
  const parsed = JSON.parse(result.canonical)
  t.notOk('signatures' in parsed, 'signatures are not signed')
  t.same(parsed.supportedInterfaces, [{ url: 'https://a.example', protocolBinding: 'JSONRPC', protocolVersion: '1.0' }], 'tenant "" is a default')
  t.same(parsed.capabilities, { streaming: false, extensions: [{ uri: 'urn:x', params: {} }] }, 'optional false kept; implicit defaults dropped; a Struct message kept')
  t.same(parsed.skills, [{ id: 's', name: 'S', description: 'd', tags: [] }], 'REQUIRED tags kept empty; empty repeated fields dropped')
  t.notOk('securitySchemes' in parsed, 'an empty map is dropped')
  t.notOk('securityRequirements' in parsed)
  t.notOk('documentationUrl' in parsed, 'null means not set')
  t.equal(parsed.url, 'https://legacy.example/a2a', 'a 0.3 member is kept, so it is covered')
  t.same(parsed['x-vendor'], { empty: [], blank: '' }, 'members outside the A2A 1.0 schema are kept verbatim')

  const proto = JSON.parse('{"name":"n","__proto__":{"polluted":true}}')
  const withProto = canonicalCardPayload(proto)
  t.ok(withProto.ok && withProto.canonical.includes('"__proto__":{"polluted":true}'), 'a "__proto__" member stays a member')
  t.equal(({} as Record<string, unknown>)['polluted'], undefined)

  t.match(canonicalCardPayload([]), { ok: false, error: 'CARD_MALFORMED' })
  t.match(canonicalCardPayload(null), { ok: false, error: 'CARD_MALFORMED' })
  t.match(canonicalCardPayload({ name: '\ud800' }), { ok: false, error: 'CARD_MALFORMED', message: /canonical/ }, 'a lone surrogate has no JCS form')
  t.match(canonicalCardPayload({ name: 'x'.repeat(300 * 1024) }), { ok: false, error: 'CARD_MALFORMED', message: /exceeds/ })
  // canonicalize 4 recurses: nesting deeper than the stack is a malformed card, never a thrown RangeError
  let deep: Record<string, unknown> = {}
  for (let i = 0; i < 200_000; i++) deep = { x: deep }
  t.match(canonicalCardPayload({ name: 'n', capabilities: { extensions: [{ params: deep }] } }), { ok: false, error: 'CARD_MALFORMED', message: /canonical/ })
})

t.test('§8.4.2: the spec\'s signature example is a shape fixture only', async (t) => {
  // The example gives neither the key nor the card it signed, so it cannot verify with anything; it shows
  // that its members decode and pass every structural check, and that verification reaches the key lookup.
  const example = {
    protected: 'eyJhbGciOiJFUzI1NiIsInR5cCI6IkpPU0UiLCJraWQiOiJrZXktMSIsImprdSI6Imh0dHBzOi8vZXhhbXBsZS5jb20vYWdlbnQvandrcy5qc29uIn0',
    signature: 'QFdkNLNszlGj3z3u0YQGt_T9LixY3qtdQpZmsTdDHDe3fXV9y9-B3m2-XgCpzuhiLt8E0tV6HXoZKHv4GtHgKQ',
  }
  t.same(decode(example.protected), { alg: 'ES256', typ: 'JOSE', kid: 'key-1', jku: 'https://example.com/agent/jwks.json' })
  t.equal(Buffer.from(example.signature, 'base64url').length, 64, 'an ES256 signature is 64 bytes')
  const asked: Array<[string, unknown]> = []
  const result = await verifyCardSignatures({ ...v1Card(), signatures: [example] }, (kid, header) => {
    asked.push([kid, header['jku']])
    return p256().publicKey
  })
  t.same(asked, [['key-1', 'https://example.com/agent/jwks.json']], 'the lookup gets the kid and sees the jku')
  t.match(checks(result), [{ index: 0, valid: false, error: 'SIGNATURE_INVALID', kid: 'key-1', alg: 'ES256' }])
  const unknown = await verifyCardSignatures({ ...v1Card(), signatures: [example] }, () => null)
  t.match(checks(unknown), [{ error: 'KEY_NOT_FOUND', kid: 'key-1' }])
})

for (const [name, make] of PAIRS) {
  t.test(`${name}: cross-implementation with jose`, async (t) => {
    const pair = make()
    const card = v1Card()
    const canonical = canonicalize(card)!
    t.equal((canonicalCardPayload(card) as { canonical: string }).canonical, canonical, 'no defaults: our form is plain JCS')
    const bytes = new TextEncoder().encode(canonical)

    const flat = await new FlattenedSign(bytes).setProtectedHeader({ alg: pair.alg, kid: 'k1', typ: 'JOSE' }).sign(pair.privateKey)
    const general = await new GeneralSign(bytes)
      .addSignature(pair.privateKey).setProtectedHeader({ alg: pair.alg, kid: 'k2', typ: 'JOSE' })
      .addSignature(pair.privateKey).setProtectedHeader({ alg: pair.alg, kid: 'k3' })
      .sign()
    const fromJose = { ...card, signatures: [{ protected: flat.protected!, signature: flat.signature }, ...general.signatures.map((s) => ({ protected: s.protected!, signature: s.signature }))] }
    const ours = await verifyCardSignatures(fromJose, () => pair.publicKey)
    t.ok(verified(ours), 'FlattenedSign and GeneralSign signatures verify with ours')
    t.same('signatures' in ours ? ours.verifiedKids : [], ['k1', 'k2', 'k3'])

    const signed = await signCard(card, { privateKey: pair.privateKey, kid: 'mine', alg: pair.alg, jku: 'https://issuer.example/.well-known/jwks.json' })
    if (!signed.ok) return t.fail(signed.message)
    t.same(decode(signed.signature.protected), { alg: pair.alg, kid: 'mine', typ: 'JOSE', jku: 'https://issuer.example/.well-known/jwks.json' })
    const payload = Buffer.from(bytes).toString('base64url')
    const viaFlat = await flattenedVerify({ ...signed.signature, payload }, pair.publicKey)
    t.equal(new TextDecoder().decode(viaFlat.payload), canonical, 'jose flattenedVerify accepts ours over the JCS bytes')
    const viaGeneral = await generalVerify({ payload, signatures: [signed.signature] }, pair.publicKey)
    t.equal(viaGeneral.protectedHeader?.kid, 'mine', 'and generalVerify')
  })

  t.test(`${name}: cross-implementation with the 1.3.0 SDK`, async (t) => {
    const pair = make()
    const card = v1Card()
    t.equal(canonicalizeAgentCard(card as never), (canonicalCardPayload(card) as { canonical: string }).canonical, 'same canonical form for this card')

    const sdkSigned = await generateAgentCardSignature(pair.privateKey, { alg: pair.alg, kid: 'sdk', typ: 'JOSE' })(card as never)
    t.ok(verified(await verifyCardSignatures(sdkSigned, trust('sdk', pair.publicKey))), 'an SDK signature verifies with ours')

    const signed = await signCard(card, { privateKey: pair.privateKey, kid: 'ours', alg: pair.alg })
    if (!signed.ok) return t.fail(signed.message)
    await t.resolves(verifyAgentCardSignature(async () => pair.publicKey)(signed.card as never), 'ours verifies with the SDK')

    // Where the forms differ: the SDK drops every empty value (REQUIRED ones too) and every member outside the
    // v1 schema, so a card with either verifies on one side only.
    const spec = { ...card, description: '', skills: [] }
    t.not(canonicalizeAgentCard(spec as never), (canonicalCardPayload(spec) as { canonical: string }).canonical, 'required empty values: forms differ')
    const oursOnSpec = await signCard(spec, { privateKey: pair.privateKey, kid: 'ours', alg: pair.alg })
    if (!oursOnSpec.ok) return t.fail(oursOnSpec.message)
    await t.rejects(verifyAgentCardSignature(async () => pair.publicKey)(oursOnSpec.card as never), 'the SDK rejects ours there')
    const legacy = { ...card, url: 'https://weather.example.com/a2a', protocolVersion: '0.3.0' }
    const sdkOnLegacy = await generateAgentCardSignature(pair.privateKey, { alg: pair.alg, kid: 'sdk', typ: 'JOSE' })(legacy as never)
    const tamperedLegacy = { ...sdkOnLegacy, url: 'https://evil.example/a2a' }
    await t.resolves(verifyAgentCardSignature(async () => pair.publicKey)(tamperedLegacy as never), 'the SDK does not cover a 0.3 url')
    t.notOk(verified(await verifyCardSignatures(tamperedLegacy, () => pair.publicKey)), 'ours does: the changed url breaks it')
  })

  t.test(`${name}: tampering with the card, the protected header or the signature fails`, async (t) => {
    const pair = make()
    const other = make()
    const signed = await signCard(v1Card(), { privateKey: pair.privateKey, kid: 'k', alg: pair.alg })
    if (!signed.ok) return t.fail(signed.message)
    const lookup = trust('k', pair.publicKey)
    t.ok(verified(await verifyCardSignatures(signed.card, lookup)), 'untouched, it verifies')
    const sig = signed.signature
    const header = decode(sig.protected) as Record<string, unknown>
    const cases: Array<[string, Record<string, unknown>]> = [
      ['name', { ...signed.card, name: 'Other' }],
      ['a nested member', { ...signed.card, capabilities: { streaming: false, pushNotifications: false } }],
      ['a skill', { ...signed.card, skills: [{ id: 'forecast', name: 'Forecast', description: 'Forecasts.', tags: ['weather'] }] }],
      ['an added member', { ...signed.card, iconUrl: 'https://evil.example/i.png' }],
      ['a removed member', Object.fromEntries(Object.entries(signed.card).filter(([k]) => k !== 'provider'))],
      ['the protected header', { ...signed.card, signatures: [{ ...sig, protected: b64({ ...header, jku: 'https://evil.example/jwks.json' }) }] }],
      ['the signature', { ...signed.card, signatures: [{ ...sig, signature: Buffer.from(Buffer.from(sig.signature, 'base64url').map((b, i) => (i === 5 ? b ^ 1 : b))).toString('base64url') }] }],
    ]
    for (const [label, tampered] of cases) {
      const result = await verifyCardSignatures(tampered, lookup)
      t.notOk(verified(result), `${label}: does not verify`)
      t.match(checks(result), [{ valid: false, error: 'SIGNATURE_INVALID' }], `${label}: SIGNATURE_INVALID`)
    }
    t.match(checks(await verifyCardSignatures(signed.card, () => other.publicKey)), [{ error: 'SIGNATURE_INVALID' }], 'another key of the same type')
    const wrongType = pair.alg === 'EdDSA' ? p256() : ed()
    t.match(checks(await verifyCardSignatures(signed.card, () => wrongType.publicKey)), [{ error: 'KEY_NOT_FOUND', message: new RegExp(`not an ${pair.alg}`) }], 'a key of the other algorithm')
    t.match(checks(await verifyCardSignatures(signed.card, () => pair.privateKey)), [{ error: 'KEY_NOT_FOUND' }], 'a private key is not a public key')
  })
}

t.test('hostile signatures: each a precise error, nothing throws', async (t) => {
  const pair = ed()
  const good = await signCard(v1Card(), { privateKey: pair.privateKey, kid: 'k', alg: 'EdDSA' })
  if (!good.ok) return t.fail(good.message)
  const sig = good.signature
  const header = decode(sig.protected) as Record<string, unknown>
  const withHeader = (h: Record<string, unknown>): Record<string, unknown> => ({ ...sig, protected: b64(h) })
  const cases: Array<[string, unknown, string, RegExp]> = [
    ['a string', 'nope', 'SIGNATURE_MALFORMED', /\$\.signatures\[0\] must be an object/],
    ['an extra member', { ...sig, payload: 'x' }, 'SIGNATURE_MALFORMED', /"payload"/],
    ['no protected', { signature: sig.signature }, 'SIGNATURE_MALFORMED', /protected must be a non-empty string/],
    ['no signature', { protected: sig.protected }, 'SIGNATURE_MALFORMED', /signature must be a non-empty string/],
    ['a huge protected', { ...sig, protected: 'A'.repeat(5000) }, 'SIGNATURE_MALFORMED', /exceeds 4096/],
    ['a huge signature', { ...sig, signature: 'A'.repeat(600) }, 'SIGNATURE_MALFORMED', /exceeds 512/],
    ['padded base64', { ...sig, protected: `${sig.protected}=` }, 'SIGNATURE_MALFORMED', /unpadded base64url/],
    ['standard base64', { ...sig, signature: `${sig.signature.slice(0, -1)}+` }, 'SIGNATURE_MALFORMED', /signature must be unpadded base64url/],
    ['a JSON array header', { ...sig, protected: b64([1]) }, 'SIGNATURE_MALFORMED', /JSON object/],
    ['invalid UTF-8 in the header', { ...sig, protected: Buffer.from([0x7b, 0xff, 0x7d]).toString('base64url') }, 'SIGNATURE_MALFORMED', /JSON object/],
    ['alg none', withHeader({ ...header, alg: 'none' }), 'ALG_NOT_ALLOWED', /got 'none'/],
    ['alg HS256', withHeader({ ...header, alg: 'HS256' }), 'ALG_NOT_ALLOWED', /got 'HS256'/],
    ['alg RS256', withHeader({ ...header, alg: 'RS256' }), 'ALG_NOT_ALLOWED', /EdDSA or ES256/],
    ['no alg', withHeader({ kid: 'k' }), 'ALG_NOT_ALLOWED', /got none/],
    ['an embedded jwk', withHeader({ ...header, jwk: { kty: 'OKP' } }), 'HEADER_NOT_ALLOWED', /'jwk'/],
    ['crit', withHeader({ ...header, crit: ['b64'], b64: false }), 'HEADER_NOT_ALLOWED', /'crit'/],
    ['x5u', withHeader({ ...header, x5u: 'https://evil.example' }), 'HEADER_NOT_ALLOWED', /'x5u'/],
    ['typ JWT', withHeader({ ...header, typ: 'JWT' }), 'HEADER_NOT_ALLOWED', /typ/],
    ['jku a number', withHeader({ ...header, jku: 7 }), 'HEADER_NOT_ALLOWED', /jku/],
    ['no kid', withHeader({ alg: 'EdDSA', typ: 'JOSE' }), 'KID_MISSING', /kid/],
    ['an empty kid', withHeader({ ...header, kid: '' }), 'KID_MISSING', /kid/],
    ['kid in the unprotected header', { ...sig, header: { kid: 'k' } }, 'HEADER_NOT_ALLOWED', /header must not carry 'kid'/],
    ['alg in the unprotected header', { ...sig, header: { alg: 'none' } }, 'HEADER_NOT_ALLOWED', /'alg'/],
    ['an unprotected header array', { ...sig, header: [] }, 'SIGNATURE_MALFORMED', /header must be an object/],
    ['a huge unprotected header', { ...sig, header: { note: 'x'.repeat(5000) } }, 'SIGNATURE_MALFORMED', /header exceeds/],
  ]
  for (const [label, entry, code, message] of cases) {
    const result = await verifyCardSignatures({ ...good.card, signatures: [entry] }, () => pair.publicKey)
    t.equal(result.valid, false, `${label}: not valid`)
    t.match(checks(result), [{ index: 0, valid: false, error: code, message }], `${label}: ${code}`)
  }

  const informative = await verifyCardSignatures({ ...good.card, signatures: [{ ...sig, header: { note: 'hello' } }] }, () => pair.publicKey)
  t.ok(verified(informative), 'an unprotected header with only informative members is allowed')

  const mixed = await verifyCardSignatures({ ...good.card, signatures: ['junk', { ...sig, protected: b64({ alg: 'none' }) }, sig] }, () => pair.publicKey)
  t.ok(verified(mixed), 'one good signature among bad ones verifies (§8.4.3)')
  t.same(checks(mixed).map((c) => c.valid), [false, false, true])

  t.match(await verifyCardSignatures({ ...good.card, signatures: {} }, () => pair.publicKey), { valid: false, error: 'SIGNATURES_MALFORMED', message: /must be an array/ })
  t.match(await verifyCardSignatures({ ...good.card, signatures: Array(MAX_CARD_SIGNATURES + 1).fill(sig) }, () => pair.publicKey), { valid: false, error: 'SIGNATURES_MALFORMED', message: /at most 16/ })
  t.same(await verifyCardSignatures(v1Card(), () => pair.publicKey), { valid: false, signatures: [], verifiedKids: [] }, 'no signatures: nothing verifies')
  t.match(await verifyCardSignatures('card', () => pair.publicKey), { valid: false, error: 'CARD_MALFORMED' })
  const throwing = await verifyCardSignatures(good.card, () => { throw new Error('database down: secret detail') })
  t.match(checks(throwing), [{ error: 'KEY_NOT_FOUND' }], 'a failing lookup is KEY_NOT_FOUND')
  t.notMatch(JSON.stringify(throwing), /secret detail/, 'without its details')
})

t.test('signing keeps existing signatures; countersigning replaces its own', async (t) => {
  const agent = p256()
  const authority = ed()
  const issuer = 'https://registry.example/'
  t.equal(authorityJku(issuer), 'https://registry.example/.well-known/jwks.json')
  const bySelf = await signCard(v1Card(), { privateKey: agent.privateKey, kid: 'agent-key', alg: 'ES256' })
  if (!bySelf.ok) return t.fail(bySelf.message)
  const first = await countersignCard(bySelf.card, { privateKey: authority.privateKey, kid: 'service-ca-1', issuer })
  if (!first.ok) return t.fail(first.message)
  t.same(decode(first.signature.protected), { alg: 'EdDSA', kid: 'service-ca-1', typ: 'JOSE', jku: 'https://registry.example/.well-known/jwks.json' })
  const second = await countersignCard(first.card, { privateKey: authority.privateKey, kid: 'service-ca-2', issuer })
  if (!second.ok) return t.fail(second.message)
  const list = second.card['signatures'] as Array<{ protected: string }>
  t.same(list.map((s) => (decode(s.protected) as { kid: string }).kid), ['agent-key', 'service-ca-2'], 'the agent\'s signature kept, the older countersignature replaced')
  const keys = new Map([['agent-key', agent.publicKey], ['service-ca-2', authority.publicKey]])
  const result = await verifyCardSignatures(second.card, (kid) => keys.get(kid) ?? null)
  t.same('signatures' in result ? result.verifiedKids : [], ['agent-key', 'service-ca-2'], 'both verify over the same canonical card')
  t.same(Object.keys(bySelf.card).filter((k) => k !== 'signatures'), Object.keys(v1Card()), 'the card itself is unchanged')

  t.match(await signCard({ ...v1Card(), signatures: [{ protected: 'x' }] }, { privateKey: agent.privateKey, kid: 'k', alg: 'ES256' }), { ok: false, error: 'SIGNATURES_MALFORMED', message: /signature must be a non-empty string/ })
  t.match(await signCard({ ...v1Card(), signatures: Array(MAX_CARD_SIGNATURES).fill(bySelf.signature) }, { privateKey: agent.privateKey, kid: 'k', alg: 'ES256' }), { ok: false, error: 'SIGNATURES_MALFORMED', message: /already holds 16/ })
  t.match(await signCard(7, { privateKey: agent.privateKey, kid: 'k', alg: 'ES256' }), { ok: false, error: 'CARD_MALFORMED' })
})

t.test('a jku in the card is never fetched', async (t) => {
  let requests = 0
  const server = createServer((_req, res) => {
    requests++
    res.end('{"keys":[]}')
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  const jku = `http://127.0.0.1:${(server.address() as AddressInfo).port}/jwks.json`
  const pair = ed()
  const signed = await signCard(v1Card(), { privateKey: pair.privateKey, kid: 'k', alg: 'EdDSA', jku })
  if (!signed.ok) return t.fail(signed.message)
  t.ok(verified(await verifyCardSignatures(signed.card, trust('k', pair.publicKey))), 'verifies with the trusted key')
  t.notOk(verified(await verifyCardSignatures(signed.card, () => null)), 'no trusted key: not valid')
  t.equal(requests, 0, 'the jku was never fetched')
  await fetch(jku).then((r) => r.text())
  t.equal(requests, 1, 'the counting server works (one request: this test\'s own)')
})

/** JSON values fast-check builds with integers only, so a changed number is a changed canonical number. */
const json = fc.letrec<{ value: unknown }>((tie) => ({
  value: fc.oneof({ depthSize: 'small', withCrossShrink: true },
    fc.string(), fc.integer(), fc.boolean(), fc.constant(null),
    fc.array(tie('value'), { maxLength: 4 }),
    fc.dictionary(fc.string({ maxLength: 6 }), tie('value'), { maxKeys: 4 })),
}))

/** One change to a card: a member's value replaced, a member removed, or a member added. */
function mutate(card: Record<string, unknown>, choice: number, replacement: unknown): Record<string, unknown> {
  const keys = Object.keys(card)
  const copy = { ...card }
  const same = (a: unknown, b: unknown): boolean => canonicalize(a) === canonicalize(b)
  if (keys.length === 0 || choice % 3 === 0) {
    const key = `x-added-${choice}`
    copy[key] = key in card && same(card[key], replacement) ? [replacement] : replacement
    return copy
  }
  const key = keys[choice % keys.length]!
  if (choice % 3 === 1) delete copy[key]
  else copy[key] = same(copy[key], replacement) ? [replacement] : replacement
  return copy
}

t.test('property: sign-then-verify holds, and any single change breaks it', async (t) => {
  const pair = ed()
  // keys outside the A2A schema, so every value is signed exactly as given and every change is visible
  const cards = fc.dictionary(fc.string({ maxLength: 8 }).map((k) => `x-${k}`), json.value, { maxKeys: 6 })
  await fc.assert(fc.asyncProperty(cards, fc.nat(), json.value, async (card, choice, replacement) => {
    const signed = await signCard(card, { privateKey: pair.privateKey, kid: 'k', alg: 'EdDSA' })
    if (!signed.ok) return false
    if (!verified(await verifyCardSignatures(signed.card, trust('k', pair.publicKey)))) return false
    const changed = mutate(card, choice, replacement)
    const tampered = { ...changed, signatures: signed.card['signatures'] }
    return !verified(await verifyCardSignatures(tampered, trust('k', pair.publicKey)))
  }), propertyRuns(150))
  t.pass('held')
})
