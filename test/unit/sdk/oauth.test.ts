/**
 * SDK OAuth client: the assertion is what RFC 7523 and the authority ask for, the metadata is checked
 * before the assertion goes anywhere (issuer mix-up, missing token endpoint, grant or method not offered),
 * the form carries the grant, the assertion and each resource, and OAuth refusals and malformed token
 * answers become SdkErrors with the server's code. The authority here is a local HTTP server.
 */
import t, { type Test } from 'tap'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { once } from 'node:events'
import { verify } from 'node:crypto'
import type { AddressInfo } from 'node:net'
import { SdkError } from '../../../src/sdk/errors.js'
import { generateAgentKey } from '../../../src/sdk/keys.js'
import {
  buildClientAssertion, CLIENT_ASSERTION_LIFETIME_SECONDS, CLIENT_ASSERTION_TYPE, discoverAuthorizationServer, requestClientCredentialsBadge,
} from '../../../src/sdk/oauth.js'

const key = generateAgentKey()

function decode(jws: string): { header: Record<string, unknown>; claims: Record<string, unknown>; valid: boolean } {
  const [h, p, s] = jws.split('.') as [string, string, string]
  return {
    header: JSON.parse(Buffer.from(h, 'base64url').toString('utf8')) as Record<string, unknown>,
    claims: JSON.parse(Buffer.from(p, 'base64url').toString('utf8')) as Record<string, unknown>,
    valid: verify(null, Buffer.from(`${h}.${p}`, 'ascii'), key.publicKey, Buffer.from(s, 'base64url')),
  }
}

t.test('buildClientAssertion: EdDSA JWT, iss = sub = client id, aud the issuer, short life, fresh jti', async (t) => {
  const jws = buildClientAssertion({ clientId: key.did, audience: 'https://registry.example.com', privateKey: key.privateKey, now: 1_800_000_000 })
  const { header, claims, valid } = decode(jws)
  t.ok(valid, 'signed by the agent key')
  t.same(header, { alg: 'EdDSA', typ: 'JWT' }, 'no kid unless asked for')
  t.match(claims, { iss: key.did, sub: key.did, aud: 'https://registry.example.com', iat: 1_800_000_000, exp: 1_800_000_000 + CLIENT_ASSERTION_LIFETIME_SECONDS })
  t.not(decode(buildClientAssertion({ clientId: key.did, audience: 'x', privateKey: key.privateKey })).claims.jti, claims.jti, 'a new jti each time')
  t.equal(decode(buildClientAssertion({ clientId: key.did, audience: 'x', privateKey: key.privateKey, kid: key.kid })).header.kid, key.kid)
})

interface FakeAuthority {
  url: string
  metadata: Record<string, unknown>
  tokenAnswer: { status: number; body: unknown }
  forms: URLSearchParams[]
}

async function fakeAuthority(t: Test): Promise<FakeAuthority> {
  const state: FakeAuthority = { url: '', metadata: {}, tokenAnswer: { status: 200, body: {} }, forms: [] }
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let body = ''
    req.on('data', (chunk: Buffer) => { body += chunk.toString('utf8') })
    req.on('end', () => {
      const send = (status: number, value: unknown): void => {
        res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(value))
      }
      if (req.method === 'GET' && req.url === '/.well-known/oauth-authorization-server') return send(200, state.metadata)
      if (req.method === 'POST' && req.url === '/oauth/token' && req.headers['content-type'] === 'application/x-www-form-urlencoded') {
        state.forms.push(new URLSearchParams(body))
        return send(state.tokenAnswer.status, state.tokenAnswer.body)
      }
      send(404, { error: 'not_found' })
    })
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => server.close())
  state.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  state.metadata = {
    issuer: state.url, token_endpoint: `${state.url}/oauth/token`,
    grant_types_supported: ['client_credentials'], token_endpoint_auth_methods_supported: ['private_key_jwt'],
  }
  return state
}

const codeOf = async (promise: Promise<unknown>): Promise<string> => promise.then(() => 'resolved', (error: unknown) => (error instanceof SdkError ? error.code : 'other'))

t.test('requestClientCredentialsBadge: posts the grant, the assertion and every resource; returns the badge', async (t) => {
  const as = await fakeAuthority(t)
  as.tokenAnswer = { status: 200, body: { access_token: 'the.badge.jwt', token_type: 'Bearer', expires_in: 300, scope: 'trust:DV' } }
  const badge = await requestClientCredentialsBadge({
    issuer: `${as.url}/`, clientId: key.did, privateKey: key.privateKey, resource: ['https://gw.example.com/mcp', 'https://gw.example.com/a2a'], scope: 'trust:DV',
  })
  t.same(badge, { accessToken: 'the.badge.jwt', tokenType: 'Bearer', expiresIn: 300, scope: 'trust:DV' })
  const form = as.forms[0] as URLSearchParams
  t.equal(form.get('grant_type'), 'client_credentials')
  t.equal(form.get('client_assertion_type'), CLIENT_ASSERTION_TYPE)
  t.same(form.getAll('resource'), ['https://gw.example.com/mcp', 'https://gw.example.com/a2a'], 'each resource sent')
  t.equal(form.get('scope'), 'trust:DV')
  t.equal(form.get('client_id'), null, 'the client id travels in the assertion only')
  const { claims, valid } = decode(form.get('client_assertion') as string)
  t.ok(valid, 'the assertion is signed by the agent key')
  t.equal(claims.aud, as.url, 'aud is the issuer the metadata names')
})

t.test('the metadata is checked before any assertion is sent', async (t) => {
  const as = await fakeAuthority(t)
  const original = { ...as.metadata }
  const cases: [string, Record<string, unknown>][] = [
    ['another issuer (mix-up)', { ...original, issuer: 'https://evil.example.com' }],
    ['no token endpoint', { ...original, token_endpoint: undefined }],
    ['a token endpoint that is not http(s)', { ...original, token_endpoint: 'javascript:alert(1)' }],
    ['client_credentials not offered', { ...original, grant_types_supported: ['authorization_code'] }],
    ['private_key_jwt not accepted', { ...original, token_endpoint_auth_methods_supported: ['client_secret_basic'] }],
  ]
  for (const [name, metadata] of cases) {
    as.metadata = metadata
    t.equal(await codeOf(discoverAuthorizationServer(as.url)), 'invalid_response', name)
    t.equal(await codeOf(requestClientCredentialsBadge({ issuer: as.url, clientId: key.did, privateKey: key.privateKey })), 'invalid_response', `${name}: no token request`)
  }
  t.equal(as.forms.length, 0, 'the token endpoint was never called')
})

t.test('refusals and malformed answers', async (t) => {
  const as = await fakeAuthority(t)
  as.tokenAnswer = { status: 400, body: { error: 'invalid_target', error_description: 'The resource is not allowed.' } }
  const refused = await requestClientCredentialsBadge({ issuer: as.url, clientId: key.did, privateKey: key.privateKey }).catch((e: unknown) => e)
  t.ok(refused instanceof SdkError, 'an SdkError')
  t.match(refused, { code: 'invalid_target', status: 400, message: 'The resource is not allowed.' }, 'with the OAuth code and description')
  for (const body of [{ token_type: 'Bearer', expires_in: 300 }, { access_token: 'x', token_type: 'mac', expires_in: 300 }, { access_token: 'x', token_type: 'Bearer' }, { access_token: 'x', token_type: 'Bearer', expires_in: -1 }]) {
    as.tokenAnswer = { status: 200, body }
    t.equal(await codeOf(requestClientCredentialsBadge({ issuer: as.url, clientId: key.did, privateKey: key.privateKey })), 'invalid_response', JSON.stringify(body))
  }
  const rsa = (await import('node:crypto')).generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey
  t.equal(await codeOf(requestClientCredentialsBadge({ issuer: as.url, clientId: key.did, privateKey: rsa })), 'invalid_argument', 'only Ed25519 keys')
  t.equal(await codeOf(requestClientCredentialsBadge({ issuer: as.url, clientId: ' ', privateKey: key.privateKey })), 'invalid_argument', 'a client id is required')
})
