/**
 * The OAuth front door of the authority over HTTP (docs/api.md §4.10): RFC 8414 metadata, the refusing
 * authorization endpoint, the token endpoint (client_credentials with private_key_jwt) with every rule
 * refused on its own and nothing written by a refusal, the org's token-audience allow-list, and the
 * unmodified MCP SDK's client getting a token. Assertions are signed here with node:crypto, so nothing
 * of the code under test builds them; badges are checked with jose against the published JWKS.
 */
import t from 'tap'
import { createServer } from 'node:http'
import { once } from 'node:events'
import type { AddressInfo } from 'node:net'
import { createHmac, generateKeyPairSync, randomUUID, sign, type KeyObject } from 'node:crypto'
import { createLocalJWKSet, jwtVerify, type JWTPayload } from 'jose'
import { discoverAuthorizationServerMetadata, fetchToken } from '@modelcontextprotocol/sdk/client/auth.js'
import { PrivateKeyJwtProvider } from '@modelcontextprotocol/sdk/client/auth-extensions.js'
import { buildAdminApp } from '../../../src/admin/app.js'
import type { Database, Queryable } from '../../../src/db/database.js'
import { createLogger } from '../../../src/telemetry/logger.js'
import { createMetrics } from '../../../src/telemetry/metrics.js'
import { createOrg, startTestAdmin, type TestAdmin, type TestResponse } from '../../helpers/admin.js'
import { expectEnvelope, expectError, leaksInternals, type Asserts } from '../../helpers/expect.js'
import { startDnsServer } from '../../helpers/dns-server.js'
import { ed25519Identity, registryDidWeb, type Ed25519Identity } from '../../helpers/fixtures.js'

const ISSUER = 'http://registry.test:8080'
const TOKEN_ENDPOINT = `${ISSUER}/oauth/token`
const JWT_BEARER = 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer'
const METADATA_SUFFIX = '/.well-known/oauth-authorization-server'
const MCP_RESOURCE = 'https://mcp.example.com/mcp'
const OTHER_RESOURCE = 'https://tools.example.com/'

/** An agent and the key that controls its DID; `clientId` is what its assertions name as iss. */
interface Client {
  id: string
  did: string
  clientId: string
  kid: string
  identity: Ed25519Identity
}

type Form = [string, string][]

const nowSeconds = (): number => Math.floor(Date.now() / 1000)
const b64 = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString('base64url')

function signJws(privateKey: KeyObject, header: Record<string, unknown>, claims: Record<string, unknown>): string {
  const input = `${b64(header)}.${b64(claims)}`
  return `${input}.${sign(null, Buffer.from(input), privateKey).toString('base64url')}`
}

/** A correct assertion for the client, with any claim or header member overridden (undefined drops it). */
function makeAssertion(
  client: Client, claims: Record<string, unknown> = {}, header: Record<string, unknown> = {}, key: KeyObject = client.identity.privateKey,
): string {
  const iat = nowSeconds()
  const merged: Record<string, unknown> = { iss: client.clientId, sub: client.clientId, aud: ISSUER, iat, exp: iat + 300, jti: randomUUID(), ...claims }
  const head: Record<string, unknown> = { alg: 'EdDSA', typ: 'JWT', ...header }
  for (const record of [merged, head]) for (const [k, v] of Object.entries(record)) if (v === undefined) delete record[k]
  return signJws(key, head, merged)
}

function tokenForm(assertion: string, extra: Form = []): Form {
  return [['grant_type', 'client_credentials'], ['client_assertion_type', JWT_BEARER], ['client_assertion', assertion], ...extra]
}

function postToken(admin: TestAdmin, form: Form | string, headers: Record<string, string> = {}): Promise<TestResponse> {
  const body = typeof form === 'string' ? form : new URLSearchParams(form).toString()
  return admin.request('POST', '/oauth/token', {
    key: null, rawBody: body, headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers },
  })
}

async function badgeCount(admin: TestAdmin): Promise<number> {
  const rows = await admin.database.db.query<{ n: number }>('SELECT count(*)::int AS n FROM badges')
  return Number(rows[0]?.n ?? -1)
}

function expectNoStore(t: Asserts, res: TestResponse, label: string): void {
  t.equal(res.headers.get('cache-control'), 'no-store', `${label}: Cache-Control no-store`, {})
  t.equal(res.headers.get('pragma'), 'no-cache', `${label}: Pragma no-cache`, {})
}

/** An RFC 6749 §5.2 error: exactly error and error_description, never cached, nothing internal. */
function expectOAuthError(t: Asserts, res: TestResponse, status: number, code: string, label: string): void {
  t.equal(res.status, status, `${label}: status ${status}`, {})
  t.equal(res.body?.error, code, `${label}: error ${code}`, {})
  t.equal(typeof res.body?.error_description, 'string', `${label}: error_description is a string`, {})
  t.ok(res.body !== undefined && Object.keys(res.body).sort().join() === 'error,error_description', `${label}: only error and error_description`, {})
  t.notOk(res.headers.has('www-authenticate'), `${label}: no WWW-Authenticate`, {})
  t.notOk(leaksInternals(res.text), `${label}: nothing internal in the body`, {})
  expectNoStore(t, res, label)
}

/**
 * A refusal that must leave the badges table as it was; `why` must match the description, so that a
 * case refused by another rule than the one it tests fails.
 */
async function expectRefused(
  t: Asserts & { match(found: unknown, pattern: RegExp, message: string): boolean }, admin: TestAdmin, form: Form | string,
  status: number, code: string, why: RegExp, label: string, headers: Record<string, string> = {},
): Promise<TestResponse> {
  const before = await badgeCount(admin)
  const res = await postToken(admin, form, headers)
  expectOAuthError(t, res, status, code, label)
  t.match(res.body?.error_description, why, `${label}: refused for the rule it tests`)
  t.equal(await badgeCount(admin), before, `${label}: no badge written`, {})
  return res
}

async function createAgent(admin: TestAdmin, body: Record<string, unknown>, key?: string): Promise<{ id: string; did: string }> {
  const res = await admin.request('POST', '/v1/agents', { body: { name: `agent-${randomUUID().slice(0, 8)}`, ...body }, ...(key === undefined ? {} : { key }) })
  if (res.status !== 201) throw new Error(`agent creation failed: ${res.status} ${res.text}`)
  return { id: res.body.data.id, did: res.body.data.did }
}

async function didKeyClient(admin: TestAdmin, extra: Record<string, unknown> = {}, key?: string): Promise<Client> {
  const identity = ed25519Identity()
  const agent = await createAgent(admin, { did: identity.didKey, ...extra }, key)
  return { id: agent.id, did: identity.didKey, clientId: identity.didKey, kid: identity.didKeyKid, identity }
}

async function didWebClient(admin: TestAdmin): Promise<Client> {
  const identity = ed25519Identity()
  const agent = await createAgent(admin, { publicKeyJwk: identity.jwk })
  return { id: agent.id, did: agent.did, clientId: agent.did, kid: `${agent.did}#key-1`, identity }
}

async function setAudiences(admin: TestAdmin, audiences: string[], key?: string): Promise<void> {
  const res = await admin.request('PUT', '/v1/token-audiences', { body: { audiences }, ...(key === undefined ? {} : { key }) })
  if (res.status !== 200) throw new Error(`allow-list update failed: ${res.status} ${res.text}`)
}

/** Verifies a badge with jose against the JWKS the authority publishes. */
async function verifyWithJwks(admin: TestAdmin, token: string): Promise<JWTPayload & Record<string, any>> {
  const jwks = await admin.request('GET', '/.well-known/jwks.json', { key: null })
  const { payload, protectedHeader } = await jwtVerify(token, createLocalJWKSet(jwks.body), { issuer: ISSUER, algorithms: ['EdDSA'] })
  if (protectedHeader.alg !== 'EdDSA') throw new Error('badge not signed with EdDSA')
  return payload as JWTPayload & Record<string, any>
}

/** A fetch for the MCP SDK: URLs under the issuer go to the test server, which cannot be reached by its name. */
function issuerFetch(admin: TestAdmin, seen: string[] = []): typeof fetch {
  return async (input, init) => {
    const url = input instanceof Request ? input.url : String(input)
    seen.push(url)
    return fetch(url.startsWith(ISSUER) ? admin.url + url.slice(ISSUER.length) : url, init)
  }
}

/**
 * A did:web host on 127.0.0.1 for `identity`: `/.well-known/did.json` lists the key under authentication,
 * `/assertion-only/did.json` only under assertionMethod, `/broken/did.json` answers 500.
 */
async function startDidServer(t: { teardown(fn: () => unknown): void }, identity: Ed25519Identity): Promise<string> {
  let host = ''
  const server = createServer((request, response) => {
    const path = request.url ?? ''
    const did = path === '/.well-known/did.json' ? host : path === '/assertion-only/did.json' ? `${host}:assertion-only` : null
    if (did === null) {
      response.writeHead(path === '/broken/did.json' ? 500 : 404).end()
      return
    }
    const method = { id: `${did}#key-1`, type: 'Ed25519VerificationKey2020', controller: did, publicKeyMultibase: identity.multibase }
    response.writeHead(200, { 'content-type': 'application/did+json' })
    response.end(JSON.stringify({
      '@context': ['https://www.w3.org/ns/did/v1'], id: did, verificationMethod: [method],
      authentication: did === host ? [method.id] : [], assertionMethod: [method.id],
    }))
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => {
    server.closeAllConnections()
    server.close()
  })
  host = `did:web:127.0.0.1%3A${(server.address() as AddressInfo).port}`
  return host
}

t.test('OAuth token endpoint', async (t) => {
  const dns = await startDnsServer(t)
  const admin = await startTestAdmin(t, {
    SERVICE_DNS_SERVERS: dns.server, SERVICE_RATE_LIMIT_PER_MINUTE: '100000', SERVICE_DID_WEB_ALLOW_HOSTS: '127.0.0.1',
  })
  t.equal(admin.config.issuerUrl, ISSUER)
  await setAudiences(admin, [MCP_RESOURCE, OTHER_RESOURCE, 'billing'])

  await t.test('metadata (RFC 8414) and the authorization endpoint', async (t) => {
    const seen: string[] = []
    const res = await issuerFetch(admin, seen)(`${ISSUER}${METADATA_SUFFIX}`)
    t.equal(res.status, 200)
    t.equal(res.headers.get('access-control-allow-origin'), '*', 'readable cross-origin')
    const body = await res.json() as Record<string, unknown>
    t.same(Object.keys(body).sort(), [
      'authorization_endpoint', 'grant_types_supported', 'issuer', 'jwks_uri', 'response_types_supported', 'scopes_supported',
      'token_endpoint', 'token_endpoint_auth_methods_supported', 'token_endpoint_auth_signing_alg_values_supported',
    ], 'RFC 8414 member names, nothing else')
    t.equal(body.issuer, seen[0]!.slice(0, -METADATA_SUFFIX.length), 'issuer is the URL fetched minus the well-known suffix (RFC 8414 §3.3)')
    t.same(body, {
      issuer: ISSUER,
      authorization_endpoint: `${ISSUER}/oauth/authorize`,
      token_endpoint: TOKEN_ENDPOINT,
      jwks_uri: `${ISSUER}/.well-known/jwks.json`,
      response_types_supported: [],
      grant_types_supported: ['client_credentials'],
      token_endpoint_auth_methods_supported: ['private_key_jwt'],
      token_endpoint_auth_signing_alg_values_supported: ['EdDSA'],
      scopes_supported: ['trust:REG', 'trust:DV', 'trust:OV', 'trust:EV'],
    })
    // The MCP SDK's own discovery and schema accept it.
    const discovered = await discoverAuthorizationServerMetadata(ISSUER, { fetchFn: issuerFetch(admin) })
    t.equal(discovered?.token_endpoint, TOKEN_ENDPOINT, 'the MCP SDK discovers the token endpoint')

    const authorize = await admin.request('GET', '/oauth/authorize?response_type=code&client_id=x', { key: null })
    expectOAuthError(t, authorize, 400, 'unsupported_response_type', 'authorize')
    t.notOk(authorize.headers.has('location'), 'no redirect')
  })

  await t.test('success: a badge that verifies, bound to the agent key', async (t) => {
    const client = await didKeyClient(admin)
    const before = await badgeCount(admin)
    const assertionJti = randomUUID()
    const res = await postToken(admin, tokenForm(makeAssertion(client, { jti: assertionJti }), [['resource', MCP_RESOURCE]]))
    t.equal(res.status, 200, res.text)
    expectNoStore(t, res, 'token')
    t.same(Object.keys(res.body).sort(), ['access_token', 'expires_in', 'scope', 'token_type'], 'the RFC 6749 §5.1 members')
    t.equal(res.body.scope, 'trust:REG', 'the granted level is said even when no scope was asked for')
    t.equal(res.body.token_type, 'Bearer')
    t.equal(res.body.expires_in, 300)
    const claims = await verifyWithJwks(admin, res.body.access_token)
    t.equal(claims.sub, client.did)
    t.equal(claims.ial, '1')
    t.same(claims.aud, [MCP_RESOURCE], 'aud is the allowed resource')
    t.equal(claims.vc.credentialSubject.level, '1', 'REG by default')
    t.equal((claims.exp as number) - (claims.iat as number), 300)
    t.same(claims.cnf, { kid: client.kid, jwk: { kty: 'OKP', crv: 'Ed25519', x: client.identity.jwk.x, kid: client.kid } }, 'cnf is the agent key')
    t.equal(await badgeCount(admin), before + 1)
    const rows = await admin.database.db.query<Record<string, unknown>>('SELECT * FROM badges WHERE jti = $1', [claims.jti])
    t.match(rows[0], { ial: '1', subject: client.did, agent_id: client.id, client_assertion_jti: assertionJti, pop_challenge_id: null, trust_level: 1 })
    const verified = expectEnvelope(t, await admin.request('POST', '/v1/badges/verify', { body: { token: res.body.access_token } }), 200, 'verify')
    t.equal(verified.valid, true, 'the authority verifies it too')

    // The accepted spellings of aud and client_id, two resources, and an audience scope.
    const variants: [string, Form, string[]][] = [
      ['aud = token endpoint', tokenForm(makeAssertion(client, { aud: TOKEN_ENDPOINT })), []],
      ['aud = [issuer]', tokenForm(makeAssertion(client, { aud: [ISSUER] })), []],
      ['typ absent', tokenForm(makeAssertion(client, {}, { typ: undefined })), []],
      ['typ "jwt"', tokenForm(makeAssertion(client, {}, { typ: 'jwt' })), []],
      ['kid given', tokenForm(makeAssertion(client, {}, { kid: client.kid })), []],
      ['client_id = iss', tokenForm(makeAssertion(client), [['client_id', client.clientId]]), []],
      ['two resources', tokenForm(makeAssertion(client), [['resource', MCP_RESOURCE], ['resource', OTHER_RESOURCE]]), [MCP_RESOURCE, OTHER_RESOURCE]],
      ['unknown parameter ignored', tokenForm(makeAssertion(client), [['foo', 'bar']]), []],
    ]
    for (const [label, form, aud] of variants) {
      const ok = await postToken(admin, form)
      t.equal(ok.status, 200, `${label}: ${ok.text}`)
      const c = await verifyWithJwks(admin, ok.body.access_token)
      t.same(c.aud ?? [], aud, `${label}: aud`)
    }
  })

  await t.test('this registry\'s did:web and the agent UUID as client id', async (t) => {
    const web = await didWebClient(admin)
    const a = await postToken(admin, tokenForm(makeAssertion(web)))
    t.equal(a.status, 200, a.text)
    const claims = await verifyWithJwks(admin, a.body.access_token)
    t.equal(claims.sub, web.did)
    t.equal(claims.cnf.kid, `${web.did}#key-1`)
    t.equal(claims.vc.credentialSubject.domain, 'registry.test', 'without a registered domain: the did:web host')
    const byId = await postToken(admin, tokenForm(makeAssertion({ ...web, clientId: web.id })))
    t.equal(byId.status, 200, byId.text)
    t.equal((await verifyWithJwks(admin, byId.body.access_token)).sub, web.did, 'the subject is the agent\'s DID whatever the client id spelling')
    const colon = web.did.replace('%3A', ':')
    const spelled = await postToken(admin, tokenForm(makeAssertion({ ...web, clientId: colon })))
    t.equal(spelled.status, 200, 'the did:web with ":" before the port names the same agent')
  })

  await t.test('a did:web of another host: resolved, authentication keys only', async (t) => {
    const identity = ed25519Identity()
    const host = await startDidServer(t, identity)
    const client = async (did: string): Promise<Client> => {
      const agent = await createAgent(admin, { did })
      return { id: agent.id, did, clientId: did, kid: `${did}#key-1`, identity }
    }
    const web = await client(host)
    const res = await postToken(admin, tokenForm(makeAssertion(web)))
    t.equal(res.status, 200, res.text)
    const claims = await verifyWithJwks(admin, res.body.access_token)
    t.equal(claims.cnf.kid, `${host}#key-1`, 'cnf names the verification method')
    t.equal(claims.vc.credentialSubject.domain, '127.0.0.1', 'the did:web host as domain')
    await expectRefused(t, admin, tokenForm(makeAssertion(await client(`${host}:assertion-only`))), 400, 'invalid_client',
      /no Ed25519 authentication key/, 'a key listed only under assertionMethod')
    await expectRefused(t, admin, tokenForm(makeAssertion(await client(`${host}:broken`))), 400, 'invalid_client',
      /DID could not be resolved/, 'a DID document that cannot be fetched')
  })

  await t.test('trust scope: DV once verified, never above', async (t) => {
    const client = await didKeyClient(admin, { domain: 'bot.example.com' })
    await expectRefused(t, admin, tokenForm(makeAssertion(client), [['scope', 'trust:DV']]), 400, 'invalid_scope', /verified up to trust:REG/, 'DV before verification')
    const first = expectEnvelope(t, await admin.request('POST', `/v1/agents/${client.id}/verify-domain`), 200, 'challenge')
    dns.setTxt(first.record_name, [first.record_value])
    t.equal(expectEnvelope(t, await admin.request('POST', `/v1/agents/${client.id}/verify-domain`), 200, 'verified').status, 'verified')

    const res = await postToken(admin, tokenForm(makeAssertion(client), [['scope', 'trust:DV billing'], ['resource', MCP_RESOURCE]]))
    t.equal(res.status, 200, res.text)
    t.equal(res.body.scope, 'trust:DV billing', 'the granted scope')
    const claims = await verifyWithJwks(admin, res.body.access_token)
    t.equal(claims.vc.credentialSubject.level, '2')
    t.equal(claims.vc.credentialSubject.domain, 'bot.example.com')
    t.same(claims.aud, [MCP_RESOURCE, 'billing'], 'resources and audience scopes')
    const byDefault = await postToken(admin, tokenForm(makeAssertion(client), [['resource', MCP_RESOURCE]]))
    t.equal(byDefault.status, 200, byDefault.text)
    t.equal(byDefault.body.scope, 'trust:DV', 'without a trust scope: the level the registry verified, and said so')
    t.equal((await verifyWithJwks(admin, byDefault.body.access_token)).vc.credentialSubject.level, '2')
    const reg = await postToken(admin, tokenForm(makeAssertion(client), [['scope', 'trust:REG']]))
    t.equal(reg.status, 200)
    t.equal((await verifyWithJwks(admin, reg.body.access_token)).vc.credentialSubject.level, '1', 'a lower level on request')

    await expectRefused(t, admin, tokenForm(makeAssertion(client), [['scope', 'trust:OV']]), 400, 'invalid_scope', /verified up to trust:DV/, 'OV above the verified level')
    await expectRefused(t, admin, tokenForm(makeAssertion(client), [['scope', 'trust:EV']]), 400, 'invalid_scope', /verified up to trust:DV/, 'EV')
    await expectRefused(t, admin, tokenForm(makeAssertion(client), [['scope', 'trust:SS']]), 400, 'invalid_scope', /must be trust:REG/, 'SS is never issued')
    await expectRefused(t, admin, tokenForm(makeAssertion(client), [['scope', 'trust:DV trust:REG']]), 400, 'invalid_scope', /one trust level/, 'two trust scopes')
    await expectRefused(t, admin, tokenForm(makeAssertion(client), [['scope', 'trust:dv']]), 400, 'invalid_scope', /must be trust:REG/, 'unknown trust code')

    // A level the operator set without a verified domain vouches for nothing: no DV badge.
    const unverified = await didKeyClient(admin, { domain: 'other.example.com' })
    t.equal((await admin.request('PUT', `/v1/agents/${unverified.id}/trust-level`, { body: { trustLevel: '2' } })).status, 200)
    await expectRefused(t, admin, tokenForm(makeAssertion(unverified), [['scope', 'trust:DV']]), 400, 'invalid_scope', /needs a verified domain/, 'level 2 without a verified domain')
    const fallback = await postToken(admin, tokenForm(makeAssertion(unverified)))
    t.equal(fallback.body.scope, 'trust:REG', 'without a trust scope such an agent gets REG')
    t.equal((await verifyWithJwks(admin, fallback.body.access_token)).vc.credentialSubject.level, '1')
  })

  await t.test('the unmodified MCP SDK client gets a token', async (t) => {
    const client = await didKeyClient(admin)
    const fetchFn = issuerFetch(admin)
    const metadata = await discoverAuthorizationServerMetadata(ISSUER, { fetchFn })
    const provider = new PrivateKeyJwtProvider({
      clientId: client.clientId,
      privateKey: client.identity.privateKey.export({ format: 'jwk' }) as Record<string, unknown>,
      algorithm: 'EdDSA',
      expectedIssuer: ISSUER,
    })
    const tokens = await fetchToken(provider, ISSUER, { metadata, resource: new URL(MCP_RESOURCE), fetchFn })
    t.equal(tokens.token_type, 'Bearer')
    const claims = await verifyWithJwks(admin, tokens.access_token)
    t.equal(claims.sub, client.did)
    t.same(claims.aud, [MCP_RESOURCE])
  })

  await t.test('every assertion rule refused on its own', async (t) => {
    const client = await didKeyClient(admin)
    const other = await didKeyClient(admin)
    const now = nowSeconds()
    const cases: [string, Form, RegExp][] = [
      ['wrong aud', tokenForm(makeAssertion(client, { aud: 'registry.test' })), /aud must be the issuer/],
      ['multi-valued aud', tokenForm(makeAssertion(client, { aud: [ISSUER, 'https://other.example'] })), /exactly one audience/],
      ['multi-valued aud, both accepted values', tokenForm(makeAssertion(client, { aud: [ISSUER, TOKEN_ENDPOINT] })), /exactly one audience/],
      ['aud = another URL of the authority', tokenForm(makeAssertion(client, { aud: `${ISSUER}/.well-known/jwks.json` })), /aud must be the issuer/],
      ['aud = the issuer with a trailing slash', tokenForm(makeAssertion(client, { aud: `${ISSUER}/` })), /aud must be the issuer/],
      ['aud missing', tokenForm(makeAssertion(client, { aud: undefined })), /aud is missing/],
      ['expired', tokenForm(makeAssertion(client, { iat: now - 400, exp: now - 100 })), /has expired/],
      ['exp - iat > 300', tokenForm(makeAssertion(client, { iat: now, exp: now + 301 })), /at most 300 seconds after iat/],
      ['iat in the future', tokenForm(makeAssertion(client, { iat: now + 120, exp: now + 180 })), /iat lies in the future/],
      ['nbf in the future', tokenForm(makeAssertion(client, { nbf: now + 120 })), /not valid yet/],
      ['nbf not a number', tokenForm(makeAssertion(client, { nbf: 'soon' })), /nbf must be integer/],
      ['exp missing', tokenForm(makeAssertion(client, { exp: undefined })), /exp and iat are required/],
      ['iat a string', tokenForm(makeAssertion(client, { iat: String(now) })), /exp and iat are required/],
      ['missing jti', tokenForm(makeAssertion(client, { jti: undefined })), /jti must be/],
      ['empty jti', tokenForm(makeAssertion(client, { jti: '' })), /jti must be/],
      ['jti over 256 characters', tokenForm(makeAssertion(client, { jti: 'j'.repeat(257) })), /jti must be/],
      ['jti with U+0000', tokenForm(makeAssertion(client, { jti: 'a\u0000b' })), /jti must be/],
      ['bad signature (another key)', tokenForm(makeAssertion(client, {}, {}, other.identity.privateKey)), /does not verify/],
      ['wrong client_assertion_type', [['grant_type', 'client_credentials'], ['client_assertion_type', 'urn:ietf:params:oauth:client-assertion-type:saml2-bearer'], ['client_assertion', makeAssertion(client)]], /client_assertion_type must be/],
      ['missing client_assertion_type', [['grant_type', 'client_credentials'], ['client_assertion', makeAssertion(client)]], /client_assertion_type must be/],
      ['missing client_assertion', [['grant_type', 'client_credentials'], ['client_assertion_type', JWT_BEARER]], /client_assertion is required/],
      ['garbage client_assertion', tokenForm('not.a.jws'), /not a compact JWS/],
      ['typ pop+jwt', tokenForm(makeAssertion(client, {}, { typ: 'pop+jwt' })), /typ must be/],
      ['typ JOSE', tokenForm(makeAssertion(client, {}, { typ: 'JOSE' })), /typ must be/],
      ['crit header', tokenForm(makeAssertion(client, {}, { crit: ['exp'] })), /"crit"/],
      ['embedded jwk header', tokenForm(makeAssertion(client, {}, { jwk: client.identity.jwk })), /"jwk"/],
      ['kid of another DID', tokenForm(makeAssertion(client, {}, { kid: other.kid })), /kid is not an Ed25519 authentication key/],
      ['iss ≠ sub', tokenForm(makeAssertion(client, { sub: other.clientId })), /iss and sub must be the same/],
      ['client_id ≠ iss', tokenForm(makeAssertion(client), [['client_id', other.clientId]]), /client_id is not/],
      ['assertion for another agent (signed by A, claiming B)', tokenForm(makeAssertion({ ...client, clientId: other.clientId })), /does not verify/],
      ['unknown agent (unregistered did:key)', tokenForm(makeAssertion({ ...client, clientId: ed25519Identity().didKey })), /No agent is registered/],
      ['unknown agent (UUID)', tokenForm(makeAssertion({ ...client, clientId: randomUUID() })), /No agent is registered/],
      ['client id that is no DID', tokenForm(makeAssertion({ ...client, clientId: 'agent-42' })), /No agent is registered/],
      ['unsupported DID method', tokenForm(makeAssertion({ ...client, clientId: 'did:example:123' })), /No agent is registered/],
      ['oversized client_assertion', tokenForm(`${makeAssertion(client)}${'A'.repeat(9000)}`), /exceeds 8192 bytes/],
    ]
    for (const [label, form, why] of cases) await expectRefused(t, admin, form, 400, 'invalid_client', why, label)

    // alg none, and HS256 keyed with the agent's public key (the classic confusion attacks).
    const iat = nowSeconds()
    const claims = { iss: client.clientId, sub: client.clientId, aud: ISSUER, iat, exp: iat + 300, jti: randomUUID() }
    await expectRefused(t, admin, tokenForm(`${b64({ alg: 'none', typ: 'JWT' })}.${b64(claims)}.`), 400, 'invalid_client', /EdDSA/, 'alg none')
    for (const [label, secret] of [['raw key', Buffer.from(client.identity.raw)], ['JWK x', Buffer.from(client.identity.jwk.x)], ['multibase', Buffer.from(client.identity.multibase)]] as const) {
      const input = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64(claims)}`
      const hs = `${input}.${createHmac('sha256', secret).update(input).digest('base64url')}`
      const res = await expectRefused(t, admin, tokenForm(hs), 400, 'invalid_client', /EdDSA/, `alg HS256 with the public key (${label}) as secret`)
      t.notOk(res.body.error_description.includes(client.identity.jwk.x), 'the key is not echoed')
    }
    const { privateKey: rsa } = generateKeyPairSync('rsa', { modulusLength: 2048 })
    const rsInput = `${b64({ alg: 'RS256', typ: 'JWT' })}.${b64(claims)}`
    await expectRefused(t, admin, tokenForm(`${rsInput}.${sign('sha256', Buffer.from(rsInput), rsa).toString('base64url')}`), 400, 'invalid_client', /EdDSA/, 'alg RS256')
    const flipped = makeAssertion(client)
    const lastChar = flipped.at(-2) === 'A' ? 'B' : 'A'
    await expectRefused(t, admin, tokenForm(`${flipped.slice(0, -2)}${lastChar}${flipped.slice(-1)}`), 400, 'invalid_client', /does not verify/, 'signature byte changed')
  })

  await t.test('replay, disabled agent, rotated key', async (t) => {
    const client = await didKeyClient(admin)
    const assertion = makeAssertion(client)
    const first = await postToken(admin, tokenForm(assertion))
    t.equal(first.status, 200, first.text)
    await expectRefused(t, admin, tokenForm(assertion), 400, 'invalid_client', /already used/, 'replayed jti')
    // A different assertion with the same jti is a replay too (the jti is per subject).
    const jti = randomUUID()
    t.equal((await postToken(admin, tokenForm(makeAssertion(client, { jti })))).status, 200)
    await expectRefused(t, admin, tokenForm(makeAssertion(client, { jti, iat: nowSeconds() - 1, exp: nowSeconds() + 200 })), 400, 'invalid_client', /already used/, 'same jti, new assertion')
    const peer = await didKeyClient(admin)
    t.equal((await postToken(admin, tokenForm(makeAssertion(peer, { jti })))).status, 200, 'another agent may use the same jti')

    const disabled = await didKeyClient(admin)
    t.equal((await admin.request('POST', `/v1/agents/${disabled.id}/disable`)).status, 200)
    await expectRefused(t, admin, tokenForm(makeAssertion(disabled)), 400, 'unauthorized_client', /disabled/, 'disabled agent')
    // Only an authenticated client hears that it is disabled.
    await expectRefused(t, admin, tokenForm(makeAssertion(disabled, {}, {}, client.identity.privateKey)), 400, 'invalid_client', /does not verify/, 'disabled agent, bad signature')

    const web = await didWebClient(admin)
    const rotated = ed25519Identity()
    t.equal((await admin.request('PUT', `/v1/agents/${web.id}`, { body: { publicKeyJwk: rotated.jwk } })).status, 200)
    await expectRefused(t, admin, tokenForm(makeAssertion(web)), 400, 'invalid_client', /does not verify/, 'key no longer in the DID document')
    const fresh = await postToken(admin, tokenForm(makeAssertion({ ...web, identity: rotated })))
    t.equal(fresh.status, 200, 'the new key works')
    const keyless = await createAgent(admin, {})
    await expectRefused(t, admin, tokenForm(makeAssertion({ ...web, clientId: registryDidWeb(keyless.id) })), 400, 'invalid_client', /no Ed25519 authentication key/, 'did:web agent without a key')
  })

  await t.test('request rules: grant, parameters, body', async (t) => {
    const client = await didKeyClient(admin)
    const assertion = (): string => makeAssertion(client)
    await expectRefused(t, admin, [['grant_type', 'authorization_code'], ['client_assertion_type', JWT_BEARER], ['client_assertion', assertion()]], 400, 'unsupported_grant_type', /client_credentials/, 'unsupported grant_type')
    await expectRefused(t, admin, [['client_assertion_type', JWT_BEARER], ['client_assertion', assertion()]], 400, 'invalid_request', /grant_type is required/, 'missing grant_type')
    for (const name of ['grant_type', 'client_assertion', 'client_assertion_type', 'scope', 'client_id', 'foo']) {
      const form = tokenForm(assertion(), [['scope', 'billing'], ['client_id', client.clientId], ['foo', 'x']])
      const value = form.find(([n]) => n === name)![1]
      await expectRefused(t, admin, [...form, [name, value]], 400, 'invalid_request', new RegExp(`${name} was given more than once`), `duplicated ${name}`)
    }
    await expectRefused(t, admin, tokenForm(assertion(), [['client_secret', 's3cret']]), 400, 'invalid_request', /client_secret is not accepted/, 'client_secret present')
    await expectRefused(t, admin, tokenForm(assertion()), 400, 'invalid_request', /Authorization header/, 'Authorization header present', { authorization: 'Basic YTpi' })

    const json = await admin.request('POST', '/oauth/token', {
      key: null, body: { grant_type: 'client_credentials', client_assertion_type: JWT_BEARER, client_assertion: assertion() },
    })
    expectOAuthError(t, json, 415, 'invalid_request', 'JSON body instead of form')
    const text = new URLSearchParams(tokenForm(assertion())).toString()
    for (const type of ['text/plain', 'application/x-www-form-urlencoded; charset=iso-8859-1', 'multipart/form-data; boundary=x']) {
      expectOAuthError(t, await postToken(admin, text, { 'content-type': type }), 415, 'invalid_request', `content type ${type}`)
    }
    const utf8 = await postToken(admin, text, { 'content-type': 'application/x-www-form-urlencoded; charset=UTF-8' })
    t.equal(utf8.status, 200, 'charset=UTF-8 is accepted')
    expectOAuthError(t, await postToken(admin, `${text}&pad=${'x'.repeat(16 * 1024)}`), 413, 'invalid_request', 'oversized body')
    await expectRefused(t, admin, `${text}&x=%zz`, 400, 'invalid_request', /percent-encoding/, 'malformed percent-encoding')
    await expectRefused(t, admin, `${text}&x=%C3%28`, 400, 'invalid_request', /not UTF-8/, 'percent-encoded bytes that are not UTF-8')
    await expectRefused(t, admin, `${text}&x=caf\u00e9`, 400, 'invalid_request', /printable ASCII/, 'raw non-ASCII')
    await expectRefused(t, admin, `${text}&scope=a%00b`, 400, 'invalid_request', /U\+0000/, 'U+0000 in a parameter')
    await expectRefused(t, admin, '', 400, 'invalid_request', /grant_type is required/, 'empty form')
    const none = await admin.request('POST', '/oauth/token', { key: null })
    expectOAuthError(t, none, 400, 'invalid_request', 'no body at all')
    const get = await admin.request('GET', '/oauth/token', { key: null })
    t.equal(get.status, 404, 'GET /oauth/token is no route')
  })

  await t.test('audiences: resource and scope against the allow-list', async (t) => {
    const client = await didKeyClient(admin)
    const cases: [string, Form, string, RegExp][] = [
      ['resource not allowed', [['resource', 'https://evil.example.com/mcp']], 'invalid_target', /allow-list/],
      ['resource allowed with a trailing slash only', [['resource', `${MCP_RESOURCE}/`]], 'invalid_target', /allow-list/],
      ['one of two resources not allowed', [['resource', MCP_RESOURCE], ['resource', 'https://evil.example.com/']], 'invalid_target', /allow-list/],
      ['resource with fragment', [['resource', `${MCP_RESOURCE}#frag`]], 'invalid_target', /without a fragment/],
      ['relative resource', [['resource', '/mcp']], 'invalid_target', /absolute http/],
      ['resource of another scheme', [['resource', 'urn:example:mcp']], 'invalid_target', /absolute http/],
      ['scope name not allowed', [['scope', 'payroll']], 'invalid_scope', /allow-list/],
      ['allowed and refused scope names', [['scope', 'billing payroll']], 'invalid_scope', /allow-list/],
      ['scope with two spaces', [['scope', 'billing  trust:REG']], 'invalid_scope', /single spaces/],
      ['scope with a quote', [['scope', 'bill"ing']], 'invalid_scope', /single spaces/],
      ['eleven scope tokens', [['scope', Array.from({ length: 11 }, (_, i) => `s${i}`).join(' ')]], 'invalid_scope', /at most 10 tokens/],
    ]
    for (const [label, extra, code, why] of cases) await expectRefused(t, admin, tokenForm(makeAssertion(client), extra), 400, code, why, label)

    // The allow-list is the agent's organization's: another org's list does not open it.
    const org = await createOrg(admin, 'oauth-other-org')
    const foreign = await didKeyClient(admin, {}, org.key)
    await expectRefused(t, admin, tokenForm(makeAssertion(foreign), [['resource', MCP_RESOURCE]]), 400, 'invalid_target', /allow-list/, 'another org\'s allow-list')
    const unscoped = await postToken(admin, tokenForm(makeAssertion(foreign)))
    t.equal(unscoped.status, 200, 'an empty allow-list still allows tokens without an audience')
    await setAudiences(admin, [MCP_RESOURCE], org.key)
    const opened = await postToken(admin, tokenForm(makeAssertion(foreign), [['resource', MCP_RESOURCE]]))
    t.equal(opened.status, 200, 'once the org allows it')
  })

  await t.test('per-DID rate limit: the 11th token in 5 minutes is 429', async (t) => {
    const client = await didKeyClient(admin)
    for (let i = 0; i < 10; i++) {
      const res = await postToken(admin, tokenForm(makeAssertion(client)))
      t.equal(res.status, 200, `token ${i + 1}`)
    }
    const res = await expectRefused(t, admin, tokenForm(makeAssertion(client)), 429, 'temporarily_unavailable', /At most 10 tokens/, '11th token')
    const retry = Number(res.headers.get('retry-after'))
    t.ok(Number.isInteger(retry) && retry >= 1 && retry <= 300, `Retry-After in seconds (${retry})`)
    const peer = await didKeyClient(admin)
    t.equal((await postToken(admin, tokenForm(makeAssertion(peer)))).status, 200, 'another DID has its own budget')
  })

  await t.test('the allow-list routes', async (t) => {
    const org = await createOrg(admin, 'allow-list-org')
    const empty = expectEnvelope(t, await admin.request('GET', '/v1/token-audiences', { key: org.key }), 200, 'default')
    t.same(empty, { audiences: [] }, 'closed by default')
    const put = await admin.request('PUT', '/v1/token-audiences', { key: org.key, body: { audiences: [MCP_RESOURCE, 'billing', MCP_RESOURCE] } })
    t.same(expectEnvelope(t, put, 200, 'put'), { audiences: [MCP_RESOURCE, 'billing'] }, 'duplicates kept once')
    t.same(expectEnvelope(t, await admin.request('GET', '/v1/token-audiences', { key: org.key }), 200, 'get').audiences, [MCP_RESOURCE, 'billing'])

    const member = await admin.request('POST', '/v1/keys', { key: org.key, body: { name: 'member', role: 'member' } })
    const memberKey = member.body.data.key as string
    t.equal((await admin.request('GET', '/v1/token-audiences', { key: memberKey })).status, 200, 'a member key reads')
    expectError(t, await admin.request('PUT', '/v1/token-audiences', { key: memberKey, body: { audiences: [] } }), 403, 'forbidden', 'a member key cannot write')
    expectError(t, await admin.request('GET', '/v1/token-audiences', { key: null }), 401, 'unauthorized', 'no credentials')
    for (const [label, body] of [
      ['51 entries', { audiences: Array.from({ length: 51 }, (_, i) => `a${i}`) }],
      ['empty entry', { audiences: [''] }],
      ['513 characters', { audiences: ['a'.repeat(513)] }],
      ['a space', { audiences: ['a b'] }],
      ['a tab', { audiences: ['a\tb'] }],
      ['a newline', { audiences: ['ab\n'] }],
      ['U+0085', { audiences: ['a\u0085b'] }],
      ['a number', { audiences: [5] }],
      ['no audiences', {}],
      ['unknown field', { audiences: [], extra: 1 }],
    ] as const) {
      expectError(t, await admin.request('PUT', '/v1/token-audiences', { key: org.key, body }), 400, 'invalid_request', label)
    }
    t.same(expectEnvelope(t, await admin.request('GET', '/v1/token-audiences', { key: org.key }), 200, 'unchanged').audiences, [MCP_RESOURCE, 'billing'], 'refusals changed nothing')
    t.same(expectEnvelope(t, await admin.request('PUT', '/v1/token-audiences', { key: org.key, body: { audiences: [] } }), 200, 'clear'), { audiences: [] })
    t.same(expectEnvelope(t, await admin.request('GET', '/v1/token-audiences'), 200, 'default org').audiences, [MCP_RESOURCE, OTHER_RESOURCE, 'billing'], 'each org its own list')
  })

  await t.test('documented in the API description, as a form', async (t) => {
    const doc = (await admin.request('GET', '/swagger/doc.json', { key: null })).body
    const token = doc.paths['/oauth/token']?.post
    t.same(token?.consumes, ['application/x-www-form-urlencoded'])
    t.ok(token?.parameters?.some((p: { in: string; name: string }) => p.in === 'formData' && p.name === 'client_assertion'), 'form parameters')
    t.ok(doc.paths['/.well-known/oauth-authorization-server']?.get, 'metadata')
    t.ok(doc.paths['/v1/token-audiences']?.put, 'allow-list')
    // Only the token route takes a form: elsewhere a form is still 415 in the project's shape.
    const form = await admin.request('POST', '/v1/agents', { rawBody: 'name=x', headers: { 'content-type': 'application/x-www-form-urlencoded' } })
    expectError(t, form, 415, 'unsupported_media_type', 'a form on another route')
  })
})

t.test('the admin rate limit on the token route answers in the OAuth shape', async (t) => {
  const admin = await startTestAdmin(t, { SERVICE_RATE_LIMIT_PER_MINUTE: '3' })
  let last: TestResponse | null = null
  for (let i = 0; i < 4; i++) last = await postToken(admin, [['grant_type', 'client_credentials']])
  expectOAuthError(t, last!, 429, 'temporarily_unavailable', '4th request in a minute')
  t.ok(Number(last!.headers.get('retry-after')) >= 1, 'Retry-After')
})

/** A database that can be made unreachable: every statement then fails as a refused connection does. */
function breakableDatabase(db: Database): { db: Database; broken: { on: boolean } } {
  const broken = { on: false }
  const refuse = (): Promise<never> => Promise.reject(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' }))
  const wrap = (q: Queryable): Queryable => ({
    query: (text, params, options) => (broken.on ? refuse() : q.query(text, params, options)),
    exec: (script) => (broken.on ? refuse() : q.exec(script)),
  })
  const wrapped: Database = {
    ...wrap(db),
    kind: db.kind,
    transaction: (work) => (broken.on ? refuse() : db.transaction((tx) => work(wrap(tx)))),
    listen: (channel, onNotify, onResync) => db.listen(channel, onNotify, onResync),
    ping: () => db.ping(),
    close: async () => {},
  }
  return { db: wrapped, broken }
}

t.test('the database away: 503 temporarily_unavailable, nothing internal', async (t) => {
  const admin = await startTestAdmin(t)
  const client = await didKeyClient(admin)
  const { db, broken } = breakableDatabase(admin.database.db)
  const app = await buildAdminApp({
    keyRing: admin.keyRing, config: admin.config, db, logger: createLogger('silent'), metrics: createMetrics(), redis: null,
    readiness: async () => ({ ready: true, checks: { database: true } }),
  })
  t.teardown(() => app.close())
  broken.on = true
  const res = await app.inject({
    method: 'POST', url: '/oauth/token',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    payload: new URLSearchParams(tokenForm(makeAssertion(client))).toString(),
  })
  expectOAuthError(t, { status: res.statusCode, headers: new Headers(res.headers as Record<string, string>), body: res.json(), text: res.body }, 503, 'temporarily_unavailable', 'database down')
})
