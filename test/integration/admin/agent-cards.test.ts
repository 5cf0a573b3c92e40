/**
 * Agent Cards over HTTP (docs/api.md §2.13, §4.8; docs/wire-contract.md §13): cards on agents, the validate endpoint (with
 * and without the live check), signed-card verification and the public JSON Schema.
 */
import t from 'tap'
import { AGENT_CARD_SCHEMA } from '../../../src/core/agent-card.js'
import { generateKeyPairSync } from 'node:crypto'
import { signCard, verifyCardSignatures } from '../../../src/core/card-signatures.js'
import { signAgentCard, type SignedAgentCard } from '../../../src/core/signed-agent-card.js'
import { createOrg, startTestAdmin, type TestAdmin } from '../../helpers/admin.js'
import { agentRowSnapshot, countRows, expectEnvelope, expectError } from '../../helpers/expect.js'
import { ed25519Identity, fullAgentCard, minimalAgentCard, registryDidWeb } from '../../helpers/fixtures.js'

interface Issue {
  code: string
  path: string
  message: string
}

function b64url(value: unknown): string {
  return Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)).toString('base64url')
}

function hasIssue(issues: Issue[], code: string, path: string): boolean {
  return issues.some((issue) => issue.code === code && issue.path === path)
}

function wellFormedIssues(issues: unknown): boolean {
  return Array.isArray(issues) && issues.every((i: Record<string, unknown>) =>
    typeof i.code === 'string' && typeof i.path === 'string' && i.path.startsWith('$') && typeof i.message === 'string' && i.message !== '')
}

async function validate(admin: TestAdmin, body: unknown): Promise<{ status: number; data: any }> {
  const res = await admin.request('POST', '/v1/agent-cards/validate', { body })
  return { status: res.status, data: res.body?.data }
}

t.test('agent cards', async (t) => {
  const admin = await startTestAdmin(t)

  await t.test('a full valid card is stored and returned on create', async (t) => {
    const card = fullAgentCard()
    const res = await admin.request('POST', '/v1/agents', { body: { name: 'weather', agent_card: card } })
    const data = expectEnvelope(t, res, 201, 'create with card')
    t.same(data.agent_card, card, 'returned as agent_card')
    const read = await admin.request('GET', `/v1/agents/${data.id}`)
    t.same(read.body.data.agent_card, card, 'read back unchanged')
    const stored = await admin.database.db.query<{ agent_card: unknown }>('SELECT agent_card FROM agents WHERE id = $1', [data.id])
    t.same(stored[0]?.agent_card, card, 'stored in the agent_card column')
    t.notOk('stateTransitionHistory' in (minimalAgentCard().capabilities as object), 'fixture sanity')

    const minimal = await admin.request('POST', '/v1/agents', { body: { name: 'echo', agent_card: minimalAgentCard() } })
    t.equal(minimal.status, 201)
    t.same(minimal.body.data.agent_card, minimalAgentCard(), 'defaults are not written into the stored card')

    const withExtension = { ...minimalAgentCard(), 'x-vendor': { tier: 'gold' } }
    const extended = await admin.request('POST', '/v1/agents', { body: { name: 'extended', agent_card: withExtension } })
    t.equal(extended.status, 201, 'unknown top-level card fields are only warnings')
    t.same(extended.body.data.agent_card, withExtension, 'and are kept')

    const privateUrl = await admin.request('POST', '/v1/agents', { body: { name: 'private url', agent_card: { ...minimalAgentCard(), url: 'https://127.0.0.1/x' } } })
    t.equal(privateUrl.status, 201, 'create never checks reachability (only validate with live:true does)')

    const noCard = await admin.request('POST', '/v1/agents', { body: { name: 'no card' } })
    t.equal(noCard.body.data.agent_card, null, 'an agent without a card has agent_card null')
  })

  await t.test('an invalid card on create is 400 invalid_agent_card with paths, and writes nothing', async (t) => {
    const { capabilities: _dropped, ...noCapabilities } = minimalAgentCard()
    void _dropped
    const cases: [string, Record<string, unknown>, [string, string][]][] = [
      ['missing capabilities', noCapabilities, [['MISSING_REQUIRED_FIELD', '$.capabilities']]],
      ['streaming is a string', { ...minimalAgentCard(), capabilities: { streaming: 'yes', pushNotifications: false } }, [['INVALID_TYPE', '$.capabilities.streaming']]],
      ['no skills', { ...minimalAgentCard(), skills: [] }, [['EMPTY_ARRAY', '$.skills']]],
      ['duplicate skill ids', { ...minimalAgentCard(), skills: [{ id: 'a', name: 'A', description: 'a' }, { id: 'a', name: 'B', description: 'b' }] }, [['DUPLICATE_SKILL_ID', '$.skills[1].id']]],
      ['http url', { ...minimalAgentCard(), url: 'http://agent.example.com' }, [['INVALID_URL', '$.url']]],
      ['unknown mode', { ...minimalAgentCard(), defaultInputModes: ['smell'] }, [['INVALID_ENUM_VALUE', '$.defaultInputModes[0]']]],
      ['empty name', { ...minimalAgentCard(), name: '' }, [['EMPTY_VALUE', '$.name']]],
      ['skill without a description', { ...minimalAgentCard(), skills: [{ id: 'a', name: 'A' }] }, [['MISSING_REQUIRED_FIELD', '$.skills[0].description']]],
      ['several problems at once', { ...noCapabilities, url: 'ftp://x', skills: 'none' }, [
        ['MISSING_REQUIRED_FIELD', '$.capabilities'], ['INVALID_URL', '$.url'], ['INVALID_TYPE', '$.skills'],
      ]],
    ]
    for (const [label, card, expected] of cases) {
      const before = await countRows(admin, 'agents')
      const res = await admin.request('POST', '/v1/agents', { body: { name: 'bad card', agent_card: card } })
      expectError(t, res, 400, 'invalid_agent_card', label)
      t.ok(wellFormedIssues(res.body?.errors), `${label}: errors is an array of {code, path, message}`)
      for (const [code, path] of expected) t.ok(hasIssue(res.body?.errors ?? [], code, path), `${label}: ${code} at ${path}`)
      t.equal(await countRows(admin, 'agents'), before, `${label}: no agent row written`)
    }
  })

  await t.test('an invalid card on PUT is 400 and the stored card is unchanged', async (t) => {
    const original = fullAgentCard()
    const created = await admin.request('POST', '/v1/agents', { body: { name: 'put target', agent_card: original } })
    const id: string = created.body.data.id
    const before = await agentRowSnapshot(admin, id)
    const res = await admin.request('PUT', `/v1/agents/${id}`, {
      body: { name: 'renamed', agent_card: { ...original, capabilities: { streaming: 'sometimes', pushNotifications: false } } },
    })
    expectError(t, res, 400, 'invalid_agent_card', 'PUT invalid card')
    t.ok(hasIssue(res.body?.errors ?? [], 'INVALID_TYPE', '$.capabilities.streaming'), 'INVALID_TYPE at $.capabilities.streaming')
    t.equal(await agentRowSnapshot(admin, id), before, 'the row (card and name) is unchanged')
    const read = await admin.request('GET', `/v1/agents/${id}`)
    t.same(read.body.data.agent_card, original, 'the card reads back as before')
    t.equal(read.body.data.name, 'put target', 'the other fields of the refused update were not applied')

    const replacement = { ...minimalAgentCard(), name: 'Replacement' }
    const updated = await admin.request('PUT', `/v1/agents/${id}`, { body: { agent_card: replacement } })
    t.equal(updated.status, 200, 'a valid card replaces the old one')
    t.same(updated.body.data.agent_card, replacement)
    const cleared = await admin.request('PUT', `/v1/agents/${id}`, { body: { agent_card: null } })
    t.equal(cleared.status, 200)
    t.equal(cleared.body.data.agent_card, null, 'null clears the card')
  })

  await t.test('POST /v1/agent-cards/validate', async (t) => {
    const before = await countRows(admin, 'agents')
    const wrapped = await admin.request('POST', '/v1/agent-cards/validate', { body: { card: fullAgentCard() } })
    const data = expectEnvelope(t, wrapped, 200, 'validate {card}')
    t.same(data, { valid: true, errors: [], warnings: [] }, 'a full card is valid without warnings')

    const bare = await validate(admin, fullAgentCard())
    t.equal(bare.status, 200)
    t.same(bare.data, { valid: true, errors: [], warnings: [] }, 'a bare card is accepted too')

    const kebab = await validate(admin, { ...minimalAgentCard(), skills: [{ id: 'MySkill', name: 'S', description: 'd' }] })
    t.equal(kebab.data.valid, true, 'a non-kebab-case skill id is only a warning')
    t.ok(hasIssue(kebab.data.warnings, 'SKILL_ID_NOT_KEBAB_CASE', '$.skills[0].id'), 'SKILL_ID_NOT_KEBAB_CASE at $.skills[0].id')
    t.ok(wellFormedIssues(kebab.data.warnings), 'warnings are {code, path, message}')

    const semver = await validate(admin, { card: { ...minimalAgentCard(), version: 'v1' } })
    t.equal(semver.data.valid, true)
    t.ok(hasIssue(semver.data.warnings, 'VERSION_NOT_SEMVER', '$.version'), 'VERSION_NOT_SEMVER warning')

    const unknown = await validate(admin, { card: { ...minimalAgentCard(), extra: 1 } })
    t.equal(unknown.data.valid, true)
    t.ok(hasIssue(unknown.data.warnings, 'UNKNOWN_FIELD', '$.extra'), 'UNKNOWN_FIELD warning')

    const { capabilities: _c, ...noCapabilities } = minimalAgentCard()
    void _c
    const invalid = await validate(admin, { card: noCapabilities })
    t.equal(invalid.status, 200, 'an invalid card is still a 200 answer')
    t.equal(invalid.data.valid, false)
    t.ok(hasIssue(invalid.data.errors, 'MISSING_REQUIRED_FIELD', '$.capabilities'), 'MISSING_REQUIRED_FIELD at $.capabilities')
    t.ok(wellFormedIssues(invalid.data.errors))
    const invalidBare = await validate(admin, { ...minimalAgentCard(), capabilities: { streaming: 'no', pushNotifications: true } })
    t.equal(invalidBare.data.valid, false)
    t.ok(hasIssue(invalidBare.data.errors, 'INVALID_TYPE', '$.capabilities.streaming'), 'INVALID_TYPE at $.capabilities.streaming')

    const privateUrl = await validate(admin, { card: { ...minimalAgentCard(), url: 'https://127.0.0.1/x' } })
    t.equal(privateUrl.data.valid, true, 'without live:true the URL is not fetched')
    t.notOk('live' in privateUrl.data, 'and no live result is reported')
    const liveFalse = await validate(admin, { card: minimalAgentCard(), live: false })
    t.notOk('live' in liveFalse.data, 'live:false reports no live result')

    expectError(t, await admin.request('POST', '/v1/agent-cards/validate', { body: { card: minimalAgentCard(), live: 'yes' } }), 400, 'invalid_request', 'live is not a boolean')
    expectError(t, await admin.request('POST', '/v1/agent-cards/validate', { body: { card: minimalAgentCard(), extra: 1 } }), 400, 'invalid_request', 'unknown field beside card')
    expectError(t, await admin.request('POST', '/v1/agent-cards/validate', { body: { card: 'a card' } }), 400, 'invalid_request', 'card is a string')
    expectError(t, await admin.request('POST', '/v1/agent-cards/validate', { rawBody: '[]' }), 400, 'invalid_request', 'an array body')
    expectError(t, await admin.request('POST', '/v1/agent-cards/validate', { rawBody: '{"card":' }), 400, 'invalid_json', 'invalid JSON')
    t.equal(await countRows(admin, 'agents'), before, 'validation writes nothing')
  })

  await t.test('validate live:true refuses private addresses quickly', { timeout: 5000 }, async (t) => {
    const started = Date.now()
    const res = await admin.request('POST', '/v1/agent-cards/validate', { body: { card: { ...minimalAgentCard(), url: 'https://127.0.0.1/x' }, live: true } })
    const data = expectEnvelope(t, res, 200, 'live validate')
    t.equal(data.valid, false, 'an unreachable URL makes the card invalid')
    t.equal(data.live?.reachable, false, 'live.reachable is false')
    t.equal(data.live?.error, 'ADDRESS_NOT_ALLOWED', 'refused by the address guard')
    t.type(data.live?.message, 'string')
    t.ok(hasIssue(data.errors, 'URL_UNREACHABLE', '$.url'), 'URL_UNREACHABLE at $.url')
    t.ok(Date.now() - started < 3000, `answered quickly (${Date.now() - started} ms)`)

    for (const url of ['https://10.0.0.1/x', 'https://169.254.169.254/latest/meta-data/', 'https://[::1]/x', 'https://[::ffff:127.0.0.1]/x', 'https://localhost/x', 'https://0.0.0.0/x']) {
      const r = await validate(admin, { ...minimalAgentCard(), url, live: true })
      t.equal(r.status, 200)
      t.equal(r.data.valid, false, `${url}: invalid`)
      t.equal(r.data.live?.reachable, false, `${url}: not reachable`)
      t.equal(r.data.live?.error, 'ADDRESS_NOT_ALLOWED', `${url}: address guard`)
    }
    t.ok(Date.now() - started < 4500, 'all answered well within the time-out')
  })

  await t.test('POST /v1/agent-cards/verify', async (t) => {
    const card = fullAgentCard()
    const signer = ed25519Identity()
    const signed = await signAgentCard(card, signer.privateKey, signer.didKeyKid)

    const res = await admin.request('POST', '/v1/agent-cards/verify', { body: signed })
    const data = expectEnvelope(t, res, 200, 'verify did:key signed card')
    t.equal(data.valid, true, 'the signature verifies')
    t.same(data.card, card, 'data.card equals the signed card')
    t.equal(data.kid, signer.didKeyKid)
    t.equal(data.validation?.valid, true, 'the card itself is valid too')

    const wrapped = await admin.request('POST', '/v1/agent-cards/verify', { body: { signed_card: signed } })
    t.equal(wrapped.status, 200)
    t.equal(wrapped.body.data.valid, true, '{signed_card} wrapper verifies')
    t.same(wrapped.body.data.card, card)

    const tampered: SignedAgentCard = { ...signed, payload: b64url({ ...card, url: 'https://evil.example.com' }) }
    const bad = await admin.request('POST', '/v1/agent-cards/verify', { body: tampered })
    t.equal(bad.status, 200, 'a bad signature is a 200 answer')
    t.equal(bad.body.data.valid, false)
    t.equal(bad.body.data.error, 'SIGNATURE_INVALID')
    t.notOk('card' in bad.body.data, 'an unverified card is not echoed')
    const wrappedBad = await admin.request('POST', '/v1/agent-cards/verify', { body: { signed_card: tampered } })
    t.equal(wrappedBad.body.data.error, 'SIGNATURE_INVALID', 'also in the wrapper')

    const impostor = ed25519Identity()
    const forged = await signAgentCard(card, impostor.privateKey, signer.didKeyKid)
    const forgedRes = await admin.request('POST', '/v1/agent-cards/verify', { body: forged })
    t.equal(forgedRes.body.data.valid, false, 'signed by another key than the kid names')
    t.equal(forgedRes.body.data.error, 'SIGNATURE_INVALID')

    const swappedKid: SignedAgentCard = { ...signed, protected: b64url({ alg: 'EdDSA', kid: impostor.didKeyKid }) }
    t.equal((await admin.request('POST', '/v1/agent-cards/verify', { body: swappedKid })).body.data.error, 'SIGNATURE_INVALID', 'a replaced header breaks the signature')

    const none: SignedAgentCard = { ...signed, protected: b64url({ alg: 'none', kid: signer.didKeyKid }) }
    const noneRes = await admin.request('POST', '/v1/agent-cards/verify', { body: none })
    t.equal(noneRes.body.data.valid, false)
    t.equal(noneRes.body.data.error, 'ALG_NOT_ALLOWED', 'alg none is refused')
    const embedded: SignedAgentCard = { ...signed, protected: b64url({ alg: 'EdDSA', kid: signer.didKeyKid, jwk: impostor.jwk }) }
    t.equal((await admin.request('POST', '/v1/agent-cards/verify', { body: embedded })).body.data.error, 'HEADER_NOT_ALLOWED', 'a key embedded in the header is refused')

    const invalidCard = { ...minimalAgentCard(), skills: [] }
    const signedInvalid = await signAgentCard(invalidCard, signer.privateKey, signer.didKeyKid)
    const invalidRes = await admin.request('POST', '/v1/agent-cards/verify', { body: signedInvalid })
    t.equal(invalidRes.body.data.valid, true, 'the signature of an invalid card still verifies')
    t.equal(invalidRes.body.data.validation?.valid, false, 'and the card\'s own validation says it is invalid')

    const explicit = await signAgentCard(card, signer.privateKey, 'key-1')
    const explicitRes = await admin.request('POST', '/v1/agent-cards/verify', { body: { signed_card: explicit, publicKeyJwk: signer.jwk } })
    t.equal(explicitRes.body.data.valid, true, 'an explicit publicKeyJwk verifies a card with a plain kid')
    expectError(t, await admin.request('POST', '/v1/agent-cards/verify', { body: { signed_card: explicit, publicKeyJwk: { ...signer.jwk, d: signer.jwk.x } } }), 400, 'invalid_public_key', 'explicit JWK with d')
    const unknownKid = await admin.request('POST', '/v1/agent-cards/verify', { body: explicit })
    t.equal(unknownKid.body.data.valid, false)
    t.equal(unknownKid.body.data.error, 'KEY_NOT_FOUND', 'a kid that names no key')
  })

  await t.test('verify resolves this registry\'s did:web from the database', async (t) => {
    const signer = ed25519Identity()
    const created = await admin.request('POST', '/v1/agents', { body: { name: 'card signer', publicKeyJwk: signer.jwk } })
    const id: string = created.body.data.id
    const kid = `${registryDidWeb(id)}#key-1`
    const card = minimalAgentCard()
    const res = await admin.request('POST', '/v1/agent-cards/verify', { body: await signAgentCard(card, signer.privateKey, kid) })
    t.equal(res.status, 200)
    t.equal(res.body.data.valid, true, 'valid with the key registered for the agent')
    t.equal(res.body.data.kid, kid)
    t.same(res.body.data.card, card)

    const other = await createOrg(admin, 'verifier org')
    const fromOtherOrg = await admin.request('POST', '/v1/agent-cards/verify', { key: other.key, body: await signAgentCard(card, signer.privateKey, kid) })
    t.equal(fromOtherOrg.body.data.valid, true, 'any org can verify (DID documents are public)')

    const impostor = ed25519Identity()
    const forged = await admin.request('POST', '/v1/agent-cards/verify', { body: await signAgentCard(card, impostor.privateKey, kid) })
    t.equal(forged.body.data.valid, false, 'another key claiming the agent\'s kid fails')
    t.equal(forged.body.data.error, 'SIGNATURE_INVALID')

    const keyless = await admin.request('POST', '/v1/agents', { body: { name: 'no key' } })
    const keylessRes = await admin.request('POST', '/v1/agent-cards/verify', { body: await signAgentCard(card, signer.privateKey, `${registryDidWeb(keyless.body.data.id)}#key-1`) })
    t.equal(keylessRes.body.data.valid, false)
    t.equal(keylessRes.body.data.error, 'KEY_NOT_FOUND', 'an agent without a registered key has no key-1')
    const ghost = await admin.request('POST', '/v1/agent-cards/verify', { body: await signAgentCard(card, signer.privateKey, `${registryDidWeb('6f1c1a52-93a4-4f4e-9b5d-3d2d1c0b7a11')}#key-1`) })
    t.equal(ghost.body.data.error, 'KEY_NOT_FOUND', 'an unknown agent')
    t.equal((await admin.request('POST', '/v1/agent-cards/verify', { body: await signAgentCard(card, signer.privateKey, `${registryDidWeb(id)}#key-2`) })).body.data.error, 'KEY_NOT_FOUND', 'an unknown fragment')

    // Changing the agent's key takes effect at once (own agents are read from the database).
    const rotated = ed25519Identity()
    t.equal((await admin.request('PUT', `/v1/agents/${id}`, { body: { publicKeyJwk: rotated.jwk } })).status, 200)
    t.equal((await admin.request('POST', '/v1/agent-cards/verify', { body: await signAgentCard(card, signer.privateKey, kid) })).body.data.valid, false, 'the old key no longer verifies')
    t.equal((await admin.request('POST', '/v1/agent-cards/verify', { body: await signAgentCard(card, rotated.privateKey, kid) })).body.data.valid, true, 'the new key does')

    // Regression (security): an explicit publicKeyJwk must not replace the key a resolvable kid names,
    // or anyone could get valid:true under another agent's kid by sending their own key along.
    const spoof = await admin.request('POST', '/v1/agent-cards/verify', { body: { signed_card: await signAgentCard(card, impostor.privateKey, kid), publicKeyJwk: impostor.jwk } })
    t.equal(spoof.status, 200)
    t.equal(spoof.body.data.valid, false, 'an explicit key does not make a card valid under another agent\'s did:web kid')
    t.equal(spoof.body.data.error, 'KEY_NOT_FOUND')
  })

  await t.test('verify: the A2A §8.4 signatures form', async (t) => {
    const card = fullAgentCard()
    const signer = ed25519Identity()
    const signed = await signCard(card, { privateKey: signer.privateKey, kid: signer.didKeyKid, alg: 'EdDSA' })
    if (!signed.ok) return t.fail(signed.message)

    const res = await admin.request('POST', '/v1/agent-cards/verify', { body: { card: signed.card } })
    const data = expectEnvelope(t, res, 200, 'verify {card} with a did:key signature')
    t.equal(data.valid, true)
    t.equal(data.kid, signer.didKeyKid)
    t.same(data.card, signed.card, 'the card as sent')
    t.equal(data.validation?.valid, true)
    t.same(data.signatures, [{ index: 0, valid: true, kid: signer.didKeyKid, alg: 'EdDSA' }])
    const viaWrapper = await admin.request('POST', '/v1/agent-cards/verify', { body: { signed_card: signed.card } })
    t.equal(viaWrapper.body.data.valid, true, '{signed_card: card with signatures} is the §8.4 form too')

    const tampered = await admin.request('POST', '/v1/agent-cards/verify', { body: { card: { ...signed.card, url: 'https://evil.example.com' } } })
    t.equal(tampered.status, 200)
    t.match(tampered.body.data, { valid: false, error: 'SIGNATURE_INVALID', signatures: [{ index: 0, valid: false, error: 'SIGNATURE_INVALID' }] })
    t.notOk('card' in tampered.body.data, 'an unverified card is not echoed')

    // ES256 with an explicit P-256 key for an opaque kid
    const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' })
    const ecJwk = ec.publicKey.export({ format: 'jwk' })
    const es = await signCard(card, { privateKey: ec.privateKey, kid: 'agent-es256', alg: 'ES256', jku: 'https://127.0.0.1:1/never.json' })
    if (!es.ok) return t.fail(es.message)
    const esRes = await admin.request('POST', '/v1/agent-cards/verify', { body: { card: es.card, publicKeyJwk: ecJwk } })
    t.match(esRes.body.data, { valid: true, kid: 'agent-es256', signatures: [{ valid: true, alg: 'ES256' }] }, 'ES256 with publicKeyJwk')
    const noKey = await admin.request('POST', '/v1/agent-cards/verify', { body: { card: es.card } })
    t.match(noKey.body.data, { valid: false, error: 'KEY_NOT_FOUND' }, 'without a key the jku is not followed')
    expectError(t, await admin.request('POST', '/v1/agent-cards/verify', { body: { card: es.card, publicKeyJwk: { ...ecJwk, d: ecJwk.x } } }), 400, 'invalid_public_key', 'a private EC JWK')
    expectError(t, await admin.request('POST', '/v1/agent-cards/verify', { body: { card: es.card, publicKeyJwk: { ...ecJwk, crv: 'P-384' } } }), 400, 'invalid_public_key', 'another curve')
    expectError(t, await admin.request('POST', '/v1/agent-cards/verify', { body: { card: es.card, publicKeyJwk: { ...ecJwk, y: ecJwk.x } } }), 400, 'invalid_public_key', 'not a point on the curve')

    // a registered agent's key through this registry's did:web; an explicit key may not replace it
    const created = await admin.request('POST', '/v1/agents', { body: { name: 'a2a signer', publicKeyJwk: signer.jwk } })
    const kid = `${registryDidWeb(created.body.data.id)}#key-1`
    const byAgent = await signCard(card, { privateKey: signer.privateKey, kid, alg: 'EdDSA' })
    if (!byAgent.ok) return t.fail(byAgent.message)
    t.equal((await admin.request('POST', '/v1/agent-cards/verify', { body: { card: byAgent.card } })).body.data.valid, true, 'did:web of a registered agent')
    const impostor = ed25519Identity()
    const spoofed = await signCard(card, { privateKey: impostor.privateKey, kid, alg: 'EdDSA' })
    if (!spoofed.ok) return t.fail(spoofed.message)
    const spoof = await admin.request('POST', '/v1/agent-cards/verify', { body: { card: spoofed.card, publicKeyJwk: impostor.jwk } })
    t.match(spoof.body.data, { valid: false, error: 'KEY_NOT_FOUND' }, 'an explicit key does not stand in for a did:web kid')

    // one good signature among bad ones (§8.4.3), each reported
    const mixed = { ...byAgent.card, signatures: [{ protected: b64url({ alg: 'none', kid: 'x' }), signature: 'AA' }, ...(byAgent.card.signatures as unknown[])] }
    t.match((await admin.request('POST', '/v1/agent-cards/verify', { body: { card: mixed } })).body.data, {
      valid: true, kid, signatures: [{ index: 0, valid: false, error: 'ALG_NOT_ALLOWED' }, { index: 1, valid: true }],
    })

    const malformed: [string, unknown, number, string][] = [
      ['no signatures', { card }, 400, 'invalid_signed_card'],
      ['signatures not an array', { card: { ...card, signatures: 'x' } }, 400, 'invalid_signed_card'],
      ['too many signatures', { card: { ...card, signatures: Array(17).fill(signed.signature) } }, 400, 'invalid_signed_card'],
      ['both forms at once', { card: signed.card, payload: 'x' }, 400, 'invalid_request'],
      ['card is a string', { card: 'x' }, 400, 'invalid_request'],
    ]
    for (const [label, body, status, code] of malformed) expectError(t, await admin.request('POST', '/v1/agent-cards/verify', { body }), status, code, label)
  })

  await t.test('POST /v1/agent-cards/sign countersigns a registered agent\'s card', async (t) => {
    const signer = ed25519Identity()
    const card = fullAgentCard()
    const created = await admin.request('POST', '/v1/agents', { body: { name: 'to be countersigned', publicKeyJwk: signer.jwk, agent_card: card } })
    const id: string = created.body.data.id
    const before = await agentRowSnapshot(admin, id)

    const res = await admin.request('POST', '/v1/agent-cards/sign', { body: { agentId: id } })
    const data = expectEnvelope(t, res, 200, 'sign')
    const signing = admin.keyRing.current.signing
    t.equal(data.kid, signing.kid, 'the authority\'s current signing key')
    t.equal(data.jku, 'http://registry.test:8080/.well-known/jwks.json')
    const signatures = data.card.signatures as Array<{ protected: string }>
    t.equal(signatures.length, 1)
    t.same(JSON.parse(Buffer.from(signatures[0]!.protected, 'base64url').toString()), { alg: 'EdDSA', kid: signing.kid, typ: 'JOSE', jku: data.jku })
    const { signatures: _s, ...content } = data.card
    void _s
    t.same(content, card, 'the card content is the registered card')
    const direct = await verifyCardSignatures(data.card, (kid) => (kid === signing.kid ? signing.publicKey : null))
    t.ok(direct.valid, 'verifies with the authority\'s public key')
    const jwks = await admin.request('GET', '/.well-known/jwks.json', { key: null })
    t.ok((jwks.body.keys as Array<{ kid: string }>).some((k) => k.kid === signing.kid), 'the kid is in the published JWKS the jku names')
    const viaRoute = await admin.request('POST', '/v1/agent-cards/verify', { body: { card: data.card } })
    t.match(viaRoute.body.data, { valid: true, kid: signing.kid }, 'and /verify trusts the authority\'s own keys')
    t.equal(await agentRowSnapshot(admin, id), before, 'signing stores nothing')

    // the agent's own signature over the registered card is kept; an earlier countersignature is replaced
    const bySelf = await signCard(card, { privateKey: signer.privateKey, kid: `${registryDidWeb(id)}#key-1`, alg: 'EdDSA' })
    if (!bySelf.ok) return t.fail(bySelf.message)
    const again = await admin.request('POST', '/v1/agent-cards/sign', { body: { agentId: id, card: { ...data.card, signatures: [...(bySelf.card.signatures as unknown[]), ...signatures] } } })
    const both = expectEnvelope(t, again, 200, 'sign with the agent\'s signature')
    t.equal((both.card.signatures as unknown[]).length, 2, 'agent + one countersignature')
    const verifiedBoth = await admin.request('POST', '/v1/agent-cards/verify', { body: { card: both.card } })
    t.same(verifiedBoth.body.data.signatures.map((c: { valid: boolean }) => c.valid), [true, true], 'both verify')

    // what may be signed: only the registered card, of an enabled agent of the caller's org
    expectError(t, await admin.request('POST', '/v1/agent-cards/sign', { body: { agentId: id, card: { ...card, name: 'Something else' } } }), 409, 'agent_card_mismatch', 'a different card')
    const bare = await admin.request('POST', '/v1/agents', { body: { name: 'no card' } })
    expectError(t, await admin.request('POST', '/v1/agent-cards/sign', { body: { agentId: bare.body.data.id } }), 409, 'agent_card_missing', 'an agent without a card')
    const other = await createOrg(admin, 'signing other org')
    expectError(t, await admin.request('POST', '/v1/agent-cards/sign', { key: other.key, body: { agentId: id } }), 404, 'agent_not_found', 'another org\'s agent')
    expectError(t, await admin.request('POST', '/v1/agent-cards/sign', { body: { agentId: '6f1c1a52-93a4-4f4e-9b5d-3d2d1c0b7a11' } }), 404, 'agent_not_found', 'an unknown agent')
    expectError(t, await admin.request('POST', '/v1/agent-cards/sign', { body: { agentId: 'not-a-uuid' } }), 400, 'invalid_request', 'not a UUID')
    expectError(t, await admin.request('POST', '/v1/agent-cards/sign', { body: { agentId: id, card: { ...card, signatures: [{ protected: 'x' }] } } }), 400, 'invalid_agent_card', 'a malformed signature in the card sent')
    expectError(t, await admin.request('POST', '/v1/agent-cards/sign', { key: null, body: { agentId: id } }), 401, 'unauthorized', 'needs credentials')
    const member = await admin.request('POST', '/v1/keys', { body: { name: 'card member', role: 'member' } })
    t.equal((await admin.request('POST', '/v1/agent-cards/sign', { key: member.body.data.key, body: { agentId: id } })).status, 200, 'an org member may sign')
    t.equal((await admin.request('POST', `/v1/agents/${id}/disable`)).status, 200)
    expectError(t, await admin.request('POST', '/v1/agent-cards/sign', { body: { agentId: id } }), 403, 'agent_disabled', 'a disabled agent')
  })

  await t.test('verify refuses malformed signed cards with 400', async (t) => {
    const signer = ed25519Identity()
    const signed = await signAgentCard(minimalAgentCard(), signer.privateKey, signer.didKeyKid)
    const cases: [string, unknown, string][] = [
      ['missing protected', { payload: signed.payload, signature: signed.signature }, 'invalid_signed_card'],
      ['empty object', {}, 'invalid_signed_card'],
      ['empty signature', { ...signed, signature: '' }, 'invalid_signed_card'],
      ['payload not base64url', { ...signed, payload: 'not base64url!' }, 'invalid_signed_card'],
      ['padded payload', { ...signed, payload: `${signed.payload}==` }, 'invalid_signed_card'],
      ['header not JSON', { ...signed, protected: b64url('not json') }, 'invalid_signed_card'],
      ['payload not a JSON object', await signAgentCardRaw(signer, '[1,2,3]'), 'invalid_signed_card'],
      ['wrapper with a malformed card', { signed_card: { payload: 'x' } }, 'invalid_signed_card'],
      ['signed_card is a string', { signed_card: 'abc' }, 'invalid_request'],
      ['payload is a number', { ...signed, payload: 5 }, 'invalid_request'],
      ['unknown member', { ...signed, header: { kid: 'x' }, extra: true }, 'invalid_request'],
      ['invalid JSON', undefined, 'invalid_json'],
    ]
    for (const [label, body, code] of cases) {
      const res = body === undefined
        ? await admin.request('POST', '/v1/agent-cards/verify', { rawBody: '{"payload":' })
        : await admin.request('POST', '/v1/agent-cards/verify', { body })
      expectError(t, res, 400, code, label)
    }
  })

  await t.test('the Agent Card JSON Schema is public', async (t) => {
    const res = await admin.request('GET', '/schemas/agent-card/v1.json', { key: null })
    t.equal(res.status, 200, 'no credentials needed')
    t.match(res.headers.get('content-type') ?? '', /json/, 'a JSON media type')
    t.equal(res.body.type, 'object')
    t.match(String(res.body.$schema), /json-schema\.org/, 'a JSON Schema document')
    for (const field of ['name', 'url', 'skills', 'description', 'version', 'capabilities', 'defaultInputModes', 'defaultOutputModes']) {
      t.ok((res.body.required as string[]).includes(field), `required includes ${field}`)
    }
    t.same(res.body, AGENT_CARD_SCHEMA, 'the same schema the validator uses')
    t.equal((await admin.request('GET', '/schemas/agent-card/v1.json')).status, 200, 'with credentials too')
  })

  await t.test('validate and verify need credentials', async (t) => {
    const signer = ed25519Identity()
    const signed = await signAgentCard(minimalAgentCard(), signer.privateKey, signer.didKeyKid)
    expectError(t, await admin.request('POST', '/v1/agent-cards/validate', { key: null, body: { card: minimalAgentCard() } }), 401, 'unauthorized', 'validate without credentials')
    expectError(t, await admin.request('POST', '/v1/agent-cards/verify', { key: null, body: signed }), 401, 'unauthorized', 'verify without credentials')
    expectError(t, await admin.request('POST', '/v1/agent-cards/validate', { key: 'garbage', body: { card: minimalAgentCard() } }), 401, 'unauthorized', 'validate with a bad key')
    expectError(t, await admin.request('POST', '/v1/agent-cards/verify', { key: 'garbage', body: signed }), 401, 'unauthorized', 'verify with a bad key')
    expectError(t, await admin.request('POST', '/v1/agent-cards/validate', { key: null, rawBody: '{"card":' }), 401, 'unauthorized', 'credentials are checked before the body is parsed')
  })
})

/** A flattened JWS over arbitrary payload text, signed properly (for "payload is not a card object"). */
async function signAgentCardRaw(signer: ReturnType<typeof ed25519Identity>, payloadText: string): Promise<SignedAgentCard> {
  const { sign } = await import('node:crypto')
  const protectedHeader = b64url({ alg: 'EdDSA', kid: signer.didKeyKid })
  const payload = b64url(payloadText)
  const signature = sign(null, Buffer.from(`${protectedHeader}.${payload}`), signer.privateKey).toString('base64url')
  return { protected: protectedHeader, payload, signature }
}
