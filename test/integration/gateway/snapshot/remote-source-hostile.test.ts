/**
 * The remote snapshot source against a hostile registry (a plain HTTP server on 127.0.0.1 playing the
 * admin plane): an issuer that is not an absolute http(s) URL or disagrees with the configured one; JWKS with too many keys, duplicate or header-unsafe kids and malformed keys; revocation
 * pages that are too long, carry huge jtis or a `syncedAt` that would break or skip every later sync;
 * bundles whose revision cannot be sent back in If-None-Match or whose policies the evaluator would
 * misread. Each is refused, the last good part stays, and polling carries on with the next good answer.
 */
import t from 'tap'
import { generateKeyPairSync } from 'node:crypto'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { createRemoteSource, MAX_JWKS_KEYS, type RemotePart } from '../../../../src/gateway/snapshot/remote-source.js'
import { SnapshotHolder } from '../../../../src/gateway/snapshot/snapshot.js'

t.setTimeout(120_000)
const WORKSPACE = '0190a5e2-7b6c-7def-8abc-0123456789ab'

const jwk = (kid: string): Record<string, unknown> => ({
  ...generateKeyPairSync('ed25519').publicKey.export({ format: 'jwk' }), kid, use: 'sig', alg: 'EdDSA',
})
const GOOD_KEY = jwk('service-ca-1')
const goodPolicy = { min_trust_level: null, allowed_dids: null, denied_dids: ['did:web:evil.example'], rate_limits: [], operations: [], mcp_tools: [], capability_classes: [] }

const ISSUER = 'http://localhost:8080'

interface Registry {
  /** The authority metadata; `{issuer: ISSUER}` when not set, a 404 when null. */
  metadata?: unknown
  jwks: unknown
  revocations: () => unknown
  bundle: unknown
}

/** A registry whose three answers the test sets; it never sends an ETag, so the source derives one from the revision. */
async function startRegistry(t: { teardown(fn: () => unknown): void }, registry: Registry): Promise<string> {
  const server = createServer((req, res) => {
    const path = (req.url ?? '').split('?')[0]
    const body = path === '/.well-known/service-authority' ? (registry.metadata === undefined ? { issuer: ISSUER } : registry.metadata)
      : path === '/.well-known/jwks.json' ? registry.jwks : path === '/v1/revocations' ? registry.revocations() : path === `/v1/bundles/${WORKSPACE}` ? registry.bundle : null
    if (body === null) {
      res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":"not_found","message":"no"}')
      return
    }
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => {
    server.closeAllConnections()
    server.close(() => resolve())
  }))
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

const page = (jtis: string[], syncedAt = new Date().toISOString()): unknown => ({
  success: true, data: { revocations: jtis.map((jti) => ({ jti, revokedAt: syncedAt })), nextCursor: null, syncedAt },
})

async function startSource(t: { teardown(fn: () => unknown): void }, registry: Registry, configuredIssuer: string | null = null) {
  const url = await startRegistry(t, registry)
  const errors: [RemotePart, string][] = []
  const holder = new SnapshotHolder()
  const source = createRemoteSource({
    registryUrl: url, registryKey: 'sk_test', configuredIssuer, workspace: WORKSPACE,
    pollIntervalMs: 30, revocationPollMs: 30, requestTimeoutMs: 2000,
    onError: (what, error) => errors.push([what, error instanceof Error ? error.message : String(error)]),
  })
  t.teardown(() => source.close())
  return { source, holder, errors }
}

async function waitFor(condition: () => boolean, timeoutMs = 5000): Promise<boolean> {
  const deadline = Date.now() + timeoutMs
  while (!condition()) {
    if (Date.now() > deadline) return false
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  return true
}

const goodParts = (): Registry => ({ jwks: { keys: [GOOD_KEY] }, revocations: () => page([]), bundle: { revision: 'r1', modules: {}, data: {} } })

t.test('the issuer is the one the registry names, not the URL it is reached by', async (t) => {
  const { source, holder } = await startSource(t, goodParts())
  await source.start(holder)
  t.equal(holder.current.issuer, ISSUER, 'localhost, although the registry was reached as 127.0.0.1')
})

t.test('hostile or missing issuers are refused at start; no issuer is made up', async (t) => {
  const cases: [string, unknown, RegExp][] = [
    ['no metadata document (404)', null, /issuer: GET \/\.well-known\/service-authority answered 404/],
    ['not an object', ['http://localhost:8080'], /no issuer/],
    ['no issuer member', { jwks_uri: 'http://localhost:8080/.well-known/jwks.json' }, /no issuer/],
    ['an issuer that is a number', { issuer: 8080 }, /no issuer/],
    ['a relative issuer', { issuer: '/registry' }, /not an absolute URL/],
    ['an empty issuer', { issuer: '' }, /not visible ASCII/],
    ['an issuer with CR LF', { issuer: 'http://localhost:8080\r\nx-evil: 1' }, /not visible ASCII/],
    ['an issuer with a space', { issuer: 'http://local host' }, /not visible ASCII/],
    ['a non-ASCII issuer', { issuer: 'http://régistry.example' }, /not visible ASCII/],
    ['an overlong issuer', { issuer: `http://localhost/${'a'.repeat(1024)}` }, /longer than 1024/],
    ['another scheme', { issuer: 'ftp://localhost' }, /not an http or https URL/],
    ['javascript:', { issuer: 'javascript:alert(1)' }, /not an http or https URL/],
    ['credentials', { issuer: 'http://user:pw@localhost:8080' }, /credentials, a query or a fragment/],
    ['a query', { issuer: 'http://localhost:8080?x=1' }, /credentials, a query or a fragment/],
    ['a fragment', { issuer: 'http://localhost:8080#x' }, /credentials, a query or a fragment/],
  ]
  for (const [label, metadata, message] of cases) {
    const { source, holder } = await startSource(t, { ...goodParts(), metadata })
    await t.rejects(source.start(holder), message, label)
    t.notOk(holder.ready, `${label}: no snapshot`)
  }
})

t.test('a configured issuer the registry does not name: no start, both spellings named', async (t) => {
  const { source, holder } = await startSource(t, goodParts(), 'http://127.0.0.1:8080')
  const error = await source.start(holder).then(() => null, (e: unknown) => e as Error)
  t.ok(error !== null, 'start rejected')
  t.match(error?.message, /"http:\/\/localhost:8080"/, 'names the registry\'s spelling')
  t.match(error?.message, /CA_ISSUER_URL is "http:\/\/127\.0\.0\.1:8080"/, 'names the configured spelling')
  t.match(error?.message, /BADGE_ISSUER_UNTRUSTED/, 'says what it would cause')
  t.notOk(holder.ready, 'no snapshot')
  const agreeing = await startSource(t, goodParts(), ISSUER)
  await agreeing.source.start(agreeing.holder)
  t.equal(agreeing.holder.current.issuer, ISSUER, 'the same spelling starts')
})

t.test('issuer changes: followed when valid, refused (last good kept) when hostile or against the configured one', async (t) => {
  const registry = goodParts()
  const { source, holder, errors } = await startSource(t, registry)
  await source.start(holder)
  registry.metadata = { issuer: 'https://ca.example.com' }
  t.ok(await waitFor(() => holder.current.issuer === 'https://ca.example.com'), 'a new issuer is followed')
  const before = errors.length
  registry.metadata = { issuer: 'not a url' }
  t.ok(await waitFor(() => errors.slice(before).some(([what, m]) => what === 'issuer' && /not visible ASCII/.test(m))), 'a hostile one is refused')
  t.equal(holder.current.issuer, 'https://ca.example.com', 'the last good issuer stays')

  const pinnedRegistry = goodParts()
  const pinned = await startSource(t, pinnedRegistry, ISSUER)
  await pinned.source.start(pinned.holder)
  pinnedRegistry.metadata = { issuer: 'https://ca.example.com' }
  t.ok(await waitFor(() => pinned.errors.some(([what, m]) => what === 'issuer' && /CA_ISSUER_URL is "http:\/\/localhost:8080"/.test(m))), 'pinned: another issuer is refused')
  t.equal(pinned.holder.current.issuer, ISSUER, 'pinned: the configured issuer stays')
})

t.test('hostile JWKS answers are refused at start', async (t) => {
  const cases: [string, unknown, RegExp][] = [
    ['too many keys', { keys: Array.from({ length: MAX_JWKS_KEYS + 1 }, (_, i) => ({ ...GOOD_KEY, kid: `k${i}` })) }, /more than 100 keys/],
    ['two keys under one kid', { keys: [GOOD_KEY, { ...jwk('x'), kid: 'service-ca-1' }] }, /two different keys/],
    ['x of the wrong length', { keys: [{ ...GOOD_KEY, x: 'A'.repeat(10_000) }] }, /not a valid Ed25519 public key/],
    ['only a kid with CR LF', { keys: [{ ...GOOD_KEY, kid: 'k\r\n1' }] }, /no Ed25519 signing key/],
    ['only a non-ASCII kid', { keys: [{ ...GOOD_KEY, kid: 'clé€' }] }, /no Ed25519 signing key/],
    ['only an overlong kid', { keys: [{ ...GOOD_KEY, kid: 'k'.repeat(257) }] }, /no Ed25519 signing key/],
    ['keys not an array', { keys: 'all' }, /no keys array/],
  ]
  for (const [label, jwks, message] of cases) {
    const { source, holder } = await startSource(t, { jwks, revocations: () => page([]), bundle: { revision: 'r1', modules: {}, data: {} } })
    await t.rejects(source.start(holder), message, label)
    t.notOk(holder.ready, `${label}: no snapshot`)
  }
  const { source, holder } = await startSource(t, { jwks: { keys: [GOOD_KEY, { ...GOOD_KEY, kid: 'k\r\n1' }, GOOD_KEY] }, revocations: () => page([]), bundle: { revision: 'r1', modules: {}, data: {} } })
  await source.start(holder)
  t.same([...holder.current.keys.keys()], ['service-ca-1'], 'a bad kid beside a good key is skipped; a repeated identical key is one key')
})

t.test('hostile revocation pages are refused; the next good page still arrives', async (t) => {
  let next: () => unknown = () => page(['jti-1'])
  const registry: Registry = { jwks: { keys: [GOOD_KEY] }, revocations: () => next(), bundle: { revision: 'r1', modules: {}, data: {} } }
  const { source, holder, errors } = await startSource(t, registry)
  await source.start(holder)
  t.ok(holder.current.revoked.has('jti-1'), 'first page')

  const hostile: [string, unknown, RegExp][] = [
    ['syncedAt at the start of the Date range', page(['jti-a'], '-271821-04-20T00:00:00.000Z'), /syncedAt/],
    ['syncedAt a century ahead', page(['jti-b'], '2125-01-01T00:00:00.000Z'), /syncedAt/],
    ['syncedAt not a date', page(['jti-c'], 'yesterday'), /syncedAt/],
    ['a page longer than asked for', page(Array.from({ length: 501 }, (_, i) => `j${i}`)), /more than 500 entries/],
    ['a huge jti', page(['j'.repeat(100_000)]), /jti/],
    ['a jti with CR LF', page(['jti\r\nx']), /jti/],
    ['an overlong cursor', { success: true, data: { revocations: [], nextCursor: 'c'.repeat(2000), syncedAt: new Date().toISOString() } }, /nextCursor/],
  ]
  let round = 0
  for (const [label, answer, message] of hostile) {
    const before = errors.length
    next = () => answer
    t.ok(await waitFor(() => errors.slice(before).some(([what, m]) => what === 'revocations' && message.test(m))), `${label}: refused`)
    // a good page after the bad one is still read, so the sync position was not corrupted
    const jti = `jti-good-${++round}`
    next = () => page([jti])
    t.ok(await waitFor(() => holder.current.revoked.has(jti)), `${label}: the next good page arrives`)
  }
  t.notOk(holder.current.revoked.has('jti-a'), 'nothing of a refused page was applied')
  t.notOk(holder.current.revoked.has('j0'), 'nothing of the long page was applied')
})

t.test('hostile bundles are refused; the last good bundle stays and polling carries on', async (t) => {
  const registry: Registry = { jwks: { keys: [GOOD_KEY] }, revocations: () => page([]), bundle: { revision: 'good-1', modules: {}, data: { config: goodPolicy } } }
  const { source, holder, errors } = await startSource(t, registry)
  await source.start(holder)
  t.equal(holder.current.bundle?.revision, 'good-1', 'first bundle')

  const hostile: [string, unknown, RegExp][] = [
    ['a revision with CR LF', { revision: 'r\r\nx-evil: 1', modules: {}, data: {} }, /revision/],
    ['a non-ASCII revision', { revision: 'révision', modules: {}, data: {} }, /revision/],
    ['denied_dids not a list', { revision: 'bad-2', modules: {}, data: { config: { ...goodPolicy, denied_dids: 5 } } }, /denied_dids/],
    ['an operation without pattern', { revision: 'bad-3', modules: {}, data: { config: { ...goodPolicy, operations: [null] } } }, /operations/],
    ['an unknown trust code', { revision: 'bad-4', modules: {}, data: { resolved_policies: { by_agent_did: { 'did:web:a': { ...goodPolicy, min_trust_level: 'ROOT' } } } } }, /min_trust_level/],
    ['a rate limit of zero', { revision: 'bad-5', modules: {}, data: { config: { ...goodPolicy, rate_limits: [{ did: 'did:web:a', rpm: 0 }] } } }, /rate_limits/],
    ['by_agent_did an array', { revision: 'bad-6', modules: {}, data: { resolved_policies: { by_agent_did: [] } } }, /by_agent_did/],
  ]
  let round = 0
  for (const [label, bundle, message] of hostile) {
    const before = errors.length
    registry.bundle = bundle
    t.ok(await waitFor(() => errors.slice(before).some(([what, m]) => what === 'bundle' && message.test(m))), `${label}: refused`)
    t.match(holder.current.bundle?.revision, /^good-/, `${label}: the last good bundle stays`)
    const revision = `good-${++round + 1}`
    registry.bundle = { revision, modules: {}, data: { config: goodPolicy } }
    t.ok(await waitFor(() => holder.current.bundle?.revision === revision), `${label}: the next good bundle is loaded`)
  }
})
