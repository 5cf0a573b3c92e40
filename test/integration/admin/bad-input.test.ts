/**
 * Hostile and malformed input on the agent routes (docs/wire-contract.md §3, docs/api.md §7): every refusal carries the
 * right status and stable lower-snake code, leaks nothing internal, and writes nothing.
 */
import t from 'tap'
import { createOrg, startTestAdmin, type RequestOptions, type TestAdmin } from '../../helpers/admin.js'
import { agentRowSnapshot, countRows, expectEnvelope, expectError } from '../../helpers/expect.js'
import { ed25519Identity, minimalAgentCard, registryDidWeb } from '../../helpers/fixtures.js'

interface Case {
  label: string
  body?: unknown
  rawBody?: string | Buffer
  headers?: Record<string, string>
  status: number
  code: string
}

function optionsOf(c: Case): RequestOptions {
  const options: RequestOptions = {}
  if (c.rawBody !== undefined) options.rawBody = c.rawBody
  else if (c.body !== undefined) options.body = c.body
  if (c.headers !== undefined) options.headers = c.headers
  return options
}

const UNKNOWN_ID = '6f1c1a52-93a4-4f4e-9b5d-3d2d1c0b7a11'
const X25519_MULTIBASE = 'z6LSbysY2xFMRpGMhb7tFTLMpeuPRaqaWM1yECx2AtzE3KCc'

/** Cases that are wrong on create and on update alike. `otherId` is another agent of the registry. */
function commonCases(otherId: string): Case[] {
  const key = ed25519Identity()
  const otherKey = ed25519Identity()
  const invalidCard = { ...minimalAgentCard(), skills: [] }
  const bad = (label: string, body: unknown, code = 'invalid_request', status = 400): Case => ({ label, body, status, code })
  const raw = (label: string, rawBody: string | Buffer, code: string, status = 400, headers?: Record<string, string>): Case =>
    headers === undefined ? { label, rawBody, status, code } : { label, rawBody, status, code, headers }
  return [
    // wrong types (no coercion: a number is not a string)
    bad('name is a number', { name: 5 }),
    bad('name is null', { name: null }),
    bad('name is an array', { name: ['x'] }),
    bad('domain is a number', { name: 'x', domain: 5 }),
    bad('did is a number', { name: 'x', did: 5 }),
    bad('did is an object', { name: 'x', did: { id: 'did:key:z' } }),
    bad('description is a boolean', { name: 'x', description: true }),
    bad('agent_card is a string', { name: 'x', agent_card: 'card' }),
    bad('agent_card is an array', { name: 'x', agent_card: [minimalAgentCard()] }),
    bad('publicKeyJwk is a string', { name: 'x', publicKeyJwk: 'jwk' }),
    bad('publicKeyMultibase is a number', { name: 'x', publicKeyMultibase: 42 }),
    // unknown fields, including ones that must never be client-settable
    bad('unknown field', { name: 'x', colour: 'blue' }),
    bad('trustLevel is not writable', { name: 'x', trustLevel: '4' }),
    bad('status is not writable', { name: 'x', status: 'disabled' }),
    bad('id is not writable', { name: 'x', id: UNKNOWN_ID }),
    bad('org_id is not writable', { name: 'x', org_id: UNKNOWN_ID }),
    bad('createdAt is not writable', { name: 'x', createdAt: '2020-01-01T00:00:00Z' }),
    // lengths and shapes
    bad('empty name', { name: '' }),
    bad('name of 201 characters', { name: 'n'.repeat(201) }),
    bad('domain with whitespace', { name: 'x', domain: 'evil example.com' }),
    bad('domain too long', { name: 'x', domain: 'd'.repeat(254) }),
    bad('description too long', { name: 'x', description: 'd'.repeat(2001) }),
    bad('did too long', { name: 'x', did: `did:key:z${'a'.repeat(520)}` }),
    // DIDs
    bad('did not-a-did', { name: 'x', did: 'not-a-did' }, 'invalid_did'),
    bad('did "did:"', { name: 'x', did: 'did:' }, 'invalid_did'),
    bad('did "did:web:"', { name: 'x', did: 'did:web:' }, 'invalid_did'),
    bad('did with an upper-case method', { name: 'x', did: 'did:WEB:example.com' }, 'invalid_did'),
    bad('did with a path', { name: 'x', did: 'did:web:example.com/agents/1' }, 'invalid_did'),
    bad('did with whitespace', { name: 'x', did: 'did:web:example .com' }, 'invalid_did'),
    bad('empty did', { name: 'x', did: '' }, 'invalid_did'),
    bad('did in this registry naming another agent', { name: 'x', did: registryDidWeb(otherId) }, 'invalid_did'),
    bad('did in this registry naming another agent, host in other case', { name: 'x', did: `did:web:REGISTRY.TEST%3a8080:agents:${otherId}` }, 'invalid_did'),
    bad('did in this registry naming an unknown agent', { name: 'x', did: registryDidWeb(UNKNOWN_ID) }, 'invalid_did'),
    // public keys
    bad('publicKeyJwk with the wrong curve', { name: 'x', publicKeyJwk: { ...key.jwk, crv: 'X25519' } }, 'invalid_public_key'),
    bad('publicKeyJwk with the wrong kty', { name: 'x', publicKeyJwk: { ...key.jwk, kty: 'EC' } }, 'invalid_public_key'),
    bad('publicKeyJwk with x too short', { name: 'x', publicKeyJwk: { ...key.jwk, x: key.jwk.x.slice(0, 20) } }, 'invalid_public_key'),
    bad('publicKeyJwk with padded x', { name: 'x', publicKeyJwk: { ...key.jwk, x: `${key.jwk.x}=` } }, 'invalid_public_key'),
    bad('publicKeyJwk containing d', { name: 'x', publicKeyJwk: { ...key.jwk, d: key.jwk.x } }, 'invalid_public_key'),
    bad('publicKeyJwk without x', { name: 'x', publicKeyJwk: { kty: 'OKP', crv: 'Ed25519' } }, 'invalid_public_key'),
    bad('publicKeyMultibase without the z prefix', { name: 'x', publicKeyMultibase: key.multibase.slice(1) }, 'invalid_public_key'),
    bad('publicKeyMultibase with non-base58 characters', { name: 'x', publicKeyMultibase: 'z0OIl' }, 'invalid_public_key'),
    bad('publicKeyMultibase of an X25519 key', { name: 'x', publicKeyMultibase: X25519_MULTIBASE }, 'invalid_public_key'),
    bad('publicKeyJwk and publicKeyMultibase of different keys', { name: 'x', publicKeyJwk: key.jwk, publicKeyMultibase: otherKey.multibase }, 'invalid_public_key'),
    // agent card
    bad('invalid agent card', { name: 'x', agent_card: invalidCard }, 'invalid_agent_card'),
    // body encoding
    raw('invalid JSON (truncated)', '{"name":', 'invalid_json'),
    raw('invalid JSON (trailing comma)', '{"name":"x",}', 'invalid_json'),
    raw('invalid JSON (single quotes)', "{'name':'x'}", 'invalid_json'),
    raw('a JSON array', '[{"name":"x"}]', 'invalid_request'),
    raw('JSON null', 'null', 'invalid_request'),
    raw('a JSON string', '"x"', 'invalid_request'),
    raw('body over 1 MiB', JSON.stringify({ name: 'x', description: 'a'.repeat(1024 * 1024) }), 'payload_too_large', 413),
    raw('__proto__ at the top level', '{"name":"x","__proto__":{"polluted":"yes"}}', 'invalid_request'),
    raw('__proto__ inside agent_card', JSON.stringify({ name: 'x', agent_card: minimalAgentCard() }).replace('{"name":"Echo"', '{"__proto__":{"polluted":"yes"},"name":"Echo"'), 'invalid_request'),
    raw('constructor.prototype at the top level', '{"name":"x","constructor":{"prototype":{"polluted":"yes"}}}', 'invalid_request'),
    raw('constructor.prototype inside agent_card', '{"name":"x","agent_card":{"constructor":{"prototype":{"polluted":"yes"}}}}', 'invalid_request'),
    raw('text/plain body', '{"name":"x"}', 'unsupported_media_type', 415, { 'content-type': 'text/plain' }),
    raw('form-encoded body', 'name=x', 'unsupported_media_type', 415, { 'content-type': 'application/x-www-form-urlencoded' }),
    raw('XML body', '<agent><name>x</name></agent>', 'unsupported_media_type', 415, { 'content-type': 'application/xml' }),
  ]
}

async function createAgent(admin: TestAdmin, body: Record<string, unknown>, key?: string): Promise<{ id: string; did: string }> {
  const res = await admin.request('POST', '/v1/agents', key === undefined ? { body } : { key, body })
  if (res.status !== 201) throw new Error(`agent creation failed: ${res.status} ${res.text}`)
  return res.body.data
}

t.test('agent routes refuse bad input and write nothing', async (t) => {
  const admin = await startTestAdmin(t)
  const targetKey = ed25519Identity()
  const target = await createAgent(admin, {
    name: 'target',
    domain: 'target.example.com',
    description: 'the agent every PUT case aims at',
    did: targetKey.didKey,
    publicKeyJwk: targetKey.jwk,
    agent_card: minimalAgentCard(),
  })
  const other = await createAgent(admin, { name: 'other' })
  const cases = commonCases(other.id)

  await t.test('POST /v1/agents', async (t) => {
    const postOnly: Case[] = [
      { label: 'missing name', body: { domain: 'x.example.com' }, status: 400, code: 'invalid_request' },
      { label: 'empty object', body: {}, status: 400, code: 'invalid_request' },
      { label: 'empty body with a JSON content type', rawBody: '', status: 400, code: 'invalid_request' },
    ]
    for (const c of [...cases, ...postOnly]) {
      const before = await countRows(admin, 'agents')
      const res = await admin.request('POST', '/v1/agents', optionsOf(c))
      expectError(t, res, c.status, c.code, `POST ${c.label}`)
      t.equal(await countRows(admin, 'agents'), before, `POST ${c.label}: no agent row written`)
    }
  })

  await t.test('PUT /v1/agents/:id', async (t) => {
    const putOnly: Case[] = [
      { label: 'empty object', body: {}, status: 400, code: 'invalid_request' },
      { label: 'empty body with a JSON content type', rawBody: '', status: 400, code: 'invalid_request' },
    ]
    const viewBefore = (await admin.request('GET', `/v1/agents/${target.id}`)).body.data
    for (const c of [...cases, ...putOnly]) {
      const before = await agentRowSnapshot(admin, target.id)
      const count = await countRows(admin, 'agents')
      const res = await admin.request('PUT', `/v1/agents/${target.id}`, optionsOf(c))
      expectError(t, res, c.status, c.code, `PUT ${c.label}`)
      t.equal(await agentRowSnapshot(admin, target.id), before, `PUT ${c.label}: the stored row is unchanged`)
      t.equal(await countRows(admin, 'agents'), count, `PUT ${c.label}: no row added or removed`)
    }
    t.same((await admin.request('GET', `/v1/agents/${target.id}`)).body.data, viewBefore, 'the agent reads back exactly as before')
  })

  await t.test('no prototype was polluted in the server process', async (t) => {
    const probe: Record<string, unknown> = {}
    t.equal(probe.polluted, undefined, 'Object.prototype.polluted is not set')
    t.equal(Object.prototype.hasOwnProperty.call(Object.prototype, 'polluted'), false)
  })

  await t.test('malformed ids in every :id path are 400 invalid_id', async (t) => {
    const routes: [string, (id: string) => string, RequestOptions][] = [
      ['GET', (id) => `/v1/agents/${id}`, {}],
      ['PUT', (id) => `/v1/agents/${id}`, { body: { name: 'renamed' } }],
      ['DELETE', (id) => `/v1/agents/${id}`, {}],
      ['POST', (id) => `/v1/agents/${id}/enable`, {}],
      ['POST', (id) => `/v1/agents/${id}/disable`, {}],
      ['GET', (id) => `/v1/agents/${id}/status`, { key: null }],
      ['DELETE', (id) => `/v1/keys/${id}`, {}],
    ]
    const malformed = [
      'not-a-uuid',
      '123',
      '00000000-0000-4000-8000-00000000000G',
      '00000000000040008000000000000000',
      `${UNKNOWN_ID}0`,
      `%7B${UNKNOWN_ID}%7D`,
      "1'%20OR%20'1'%3D'1",
      '%00',
      'x'.repeat(500),
      '..%2F..%2Fetc',
    ]
    // dot segments are resolved by the client (URL rules) and may land on another route: 400 or 404.
    const traversal = ['..%2F..%2Fetc%2Fpasswd', '%2e%2e', '..', '%2e%2e%2f%2e%2e', '....%2F%2F']
    const agentsBefore = await countRows(admin, 'agents')
    const keysBefore = await countRows(admin, 'api_keys')
    const targetBefore = await agentRowSnapshot(admin, target.id)
    for (const [method, path, options] of routes) {
      for (const id of malformed) {
        const res = await admin.request(method, path(id), options)
        expectError(t, res, 400, 'invalid_id', `${method} ${path(id.length > 40 ? 'x…' : id)}`)
      }
      for (const id of traversal) {
        const res = await admin.request(method, path(id), options)
        const label = `${method} ${path(id)}`
        t.ok(res.status === 400 || res.status === 404, `${label}: 400 or 404 (got ${res.status})`)
        t.ok(res.status < 500, `${label}: never 5xx`)
        t.ok(['invalid_id', 'not_found', 'agent_not_found', 'key_not_found', 'invalid_request'].includes(res.body?.error), `${label}: a client error code (${String(res.body?.error)})`)
        t.type(res.body?.message, 'string')
        t.notOk(/root:|"stack"/.test(res.text), `${label}: nothing from the file system or a stack`)
      }
    }
    t.equal(await countRows(admin, 'agents'), agentsBefore, 'no agent added or removed')
    t.equal(await countRows(admin, 'api_keys'), keysBefore, 'no key added or removed')
    t.equal(await agentRowSnapshot(admin, target.id), targetBefore, 'the target agent is unchanged')
  })

  await t.test('a urn:uuid: id is refused as 400, not a 500', async (t) => {
    // Regression: ajv's "uuid" format accepts an optional "urn:uuid:" prefix that PostgreSQL's uuid type
    // refuses; path ids are matched with a plain pattern instead. The public status route made this
    // reachable without credentials.
    const urn = `urn:uuid:${UNKNOWN_ID}`
    for (const [method, path, options] of [
      ['GET', `/v1/agents/${urn}`, {}],
      ['PUT', `/v1/agents/${urn}`, { body: { name: 'x' } }],
      ['DELETE', `/v1/agents/${urn}`, {}],
      ['POST', `/v1/agents/${urn}/enable`, {}],
      ['POST', `/v1/agents/${urn}/disable`, {}],
      ['GET', `/v1/agents/${urn}/status`, { key: null }],
      ['DELETE', `/v1/keys/${urn}`, {}],
    ] as [string, string, RequestOptions][]) {
      const res = await admin.request(method, path, options)
      t.ok(res.status < 500, `${method} ${path}: not a 5xx`)
      expectError(t, res, 400, 'invalid_id', `${method} ${path}`)
    }
  })

  await t.test('unknown and foreign ids are 404 and change nothing', async (t) => {
    const agentsBefore = await countRows(admin, 'agents')
    const targetBefore = await agentRowSnapshot(admin, target.id)
    for (const [method, path, options] of [
      ['GET', `/v1/agents/${UNKNOWN_ID}`, {}],
      ['PUT', `/v1/agents/${UNKNOWN_ID}`, { body: { name: 'ghost' } }],
      ['DELETE', `/v1/agents/${UNKNOWN_ID}`, {}],
      ['POST', `/v1/agents/${UNKNOWN_ID}/enable`, {}],
      ['POST', `/v1/agents/${UNKNOWN_ID}/disable`, {}],
      ['GET', `/v1/agents/${UNKNOWN_ID}/status`, { key: null }],
    ] as [string, string, RequestOptions][]) {
      expectError(t, await admin.request(method, path, options), 404, 'agent_not_found', `${method} ${path}`)
    }
    expectError(t, await admin.request('DELETE', `/v1/keys/${UNKNOWN_ID}`), 404, 'key_not_found', 'DELETE unknown key')

    const stranger = await createOrg(admin, 'stranger')
    for (const [method, path, options] of [
      ['GET', `/v1/agents/${target.id}`, {}],
      ['PUT', `/v1/agents/${target.id}`, { body: { name: 'hijacked', did: 'did:web:evil.example.com' } }],
      ['DELETE', `/v1/agents/${target.id}`, {}],
      ['POST', `/v1/agents/${target.id}/disable`, {}],
    ] as [string, string, RequestOptions][]) {
      expectError(t, await admin.request(method, path, { ...options, key: stranger.key }), 404, 'agent_not_found', `another org: ${method} ${path}`)
    }
    t.equal(await countRows(admin, 'agents'), agentsBefore, 'no agent added or removed')
    t.equal(await agentRowSnapshot(admin, target.id), targetBefore, 'the target agent is unchanged')
  })

  await t.test('an explicit DID belongs to one agent only, across orgs', async (t) => {
    const shared = ed25519Identity().didKey
    const first = await createAgent(admin, { name: 'first holder', did: shared })
    const stranger = await createOrg(admin, 'did squatter')
    const before = await countRows(admin, 'agents')
    expectError(t, await admin.request('POST', '/v1/agents', { body: { name: 'second', did: shared } }), 409, 'did_already_registered', 'same org, same DID')
    expectError(t, await admin.request('POST', '/v1/agents', { key: stranger.key, body: { name: 'squatter', did: shared } }), 409, 'did_already_registered', 'another org, same DID')
    t.equal(await countRows(admin, 'agents'), before, 'no agent row written')

    const otherBefore = await agentRowSnapshot(admin, other.id)
    expectError(t, await admin.request('PUT', `/v1/agents/${other.id}`, { body: { name: 'renamed too', did: shared } }), 409, 'did_already_registered', 'update to a taken DID')
    t.equal(await agentRowSnapshot(admin, other.id), otherBefore, 'the updated agent is unchanged (name too)')
    const strangerAgent = await createAgent(admin, { name: 'stranger agent' }, stranger.key)
    const strangerBefore = await agentRowSnapshot(admin, strangerAgent.id)
    expectError(t, await admin.request('PUT', `/v1/agents/${strangerAgent.id}`, { key: stranger.key, body: { did: shared } }), 409, 'did_already_registered', 'another org updates to a taken DID')
    t.equal(await agentRowSnapshot(admin, strangerAgent.id), strangerBefore)

    const same = await admin.request('PUT', `/v1/agents/${first.id}`, { body: { did: shared, description: 'kept' } })
    t.equal(same.status, 200, 'the holder may restate its own DID')
    t.equal(same.body.data.did, shared)
    const own = await admin.request('PUT', `/v1/agents/${other.id}`, { body: { did: registryDidWeb(other.id) } })
    t.equal(own.status, 200, 'an agent may name its own registry did:web')
    t.equal(own.body.data.did, registryDidWeb(other.id))

    // freeing the DID makes it available again
    t.equal((await admin.request('DELETE', `/v1/agents/${first.id}`)).status, 204)
    const reuse = await admin.request('POST', '/v1/agents', { key: stranger.key, body: { name: 'new holder', did: shared } })
    t.equal(reuse.status, 201, 'a DID is free again once its agent is deleted')
  })

  await t.test('public keys: multibase and JWK are stored as one JWK', async (t) => {
    const key = ed25519Identity()
    const expected = { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(key.raw).toString('base64url') }
    const viaMultibase = await admin.request('POST', '/v1/agents', { body: { name: 'multibase', publicKeyMultibase: key.multibase } })
    const created = expectEnvelope(t, viaMultibase, 201, 'create with publicKeyMultibase')
    t.same(created.publicKeyJwk, expected, 'returned as publicKeyJwk')
    t.notOk('publicKeyMultibase' in created, 'the multibase form is not echoed')
    t.same((await admin.request('GET', `/v1/agents/${created.id}`)).body.data.publicKeyJwk, expected, 'read back as publicKeyJwk')
    const stored = await admin.database.db.query<{ public_key_jwk: unknown }>('SELECT public_key_jwk FROM agents WHERE id = $1', [created.id])
    t.same(stored[0]?.public_key_jwk, expected, 'stored as the JWK')

    const both = await admin.request('POST', '/v1/agents', { body: { name: 'both forms', publicKeyJwk: key.jwk, publicKeyMultibase: key.multibase } })
    t.equal(both.status, 201, 'both forms of the same key are accepted')
    t.same(both.body.data.publicKeyJwk, expected)

    const jwkWithExtras = await admin.request('POST', '/v1/agents', { body: { name: 'jwk extras', publicKeyJwk: { ...key.jwk, kid: 'k1', use: 'sig' } } })
    t.equal(jwkWithExtras.status, 201, 'extra public JWK members are tolerated')
    t.same(jwkWithExtras.body.data.publicKeyJwk, expected, 'and only kty/crv/x are kept')

    const cleared = await admin.request('PUT', `/v1/agents/${created.id}`, { body: { publicKeyMultibase: null } })
    t.equal(cleared.status, 200)
    t.equal(cleared.body.data.publicKeyJwk, null, 'null clears the key')
    const replaced = await admin.request('PUT', `/v1/agents/${created.id}`, { body: { publicKeyMultibase: key.multibase } })
    t.same(replaced.body.data.publicKeyJwk, expected, 'a PUT sets it again')
  })

  await t.test('size limit boundaries', async (t) => {
    // A body just under 1 MiB is read (the limit is not lower than promised); the validate endpoint
    // writes nothing, and unknown card fields are only warnings.
    const card = { ...minimalAgentCard(), padding: '' }
    const overhead = Buffer.byteLength(JSON.stringify(card))
    card.padding = 'p'.repeat(1024 * 1024 - overhead - 16)
    const under = await admin.request('POST', '/v1/agent-cards/validate', { body: card })
    t.equal(under.status, 200, `a ${Buffer.byteLength(JSON.stringify(card))}-byte body is accepted`)
    card.padding = 'p'.repeat(1024 * 1024 - overhead + 16)
    expectError(t, await admin.request('POST', '/v1/agent-cards/validate', { body: card }), 413, 'payload_too_large', 'just over 1 MiB')
    const named = await admin.request('POST', '/v1/agents', { body: { name: 'n'.repeat(200) } })
    t.equal(named.status, 201, 'a name of exactly 200 characters is accepted')
  })
})
