/**
 * The OAuth front door from the agent's side (docs/oauth.md): discover the authority's RFC 8414 metadata
 * and obtain a badge at its token endpoint with the `client_credentials` grant, the client authenticated
 * by an RFC 7523 assertion signed with the agent's own Ed25519 key (`private_key_jwt`). No API key.
 */
import { randomUUID, sign, type KeyObject } from 'node:crypto'
import { SdkError } from './errors.js'
import { callRegistry, registryEndpoint } from './http.js'

export const CLIENT_ASSERTION_TYPE = 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer'
/** Assertion lifetime: the authority accepts at most 300 s; a short one is worth less to a thief. */
export const CLIENT_ASSERTION_LIFETIME_SECONDS = 60

/** The members of the authority's metadata this client relies on, checked on the way in. */
export interface AuthorizationServerMetadata {
  readonly issuer: string
  readonly token_endpoint: string
  readonly grant_types_supported?: readonly string[]
  readonly token_endpoint_auth_methods_supported?: readonly string[]
}

/** The token endpoint's answer: `accessToken` is the badge (a JWT). */
export interface ClientCredentialsBadge {
  readonly accessToken: string
  readonly tokenType: 'Bearer'
  /** Seconds the badge is valid from issuance. */
  readonly expiresIn: number
  /** The granted scope as the authority states it (this one always does: `trust:<level>` and audience names). */
  readonly scope?: string
}

/** Options of {@link requestClientCredentialsBadge}. */
export interface ClientCredentialsRequest {
  /** The authority's issuer URL (a badge's `iss`, the admin plane's base URL). */
  issuer: string
  /** The agent: its DID (did:key, did:web) or its registry id. Becomes the assertion's `iss` and `sub`. */
  clientId: string
  /** The Ed25519 private key listed under `authentication` in the agent's DID document. */
  privateKey: KeyObject
  /** Verification method id for the JWS header; without it the authority tries each authentication key. */
  kid?: string
  /** RFC 8707 resource indicator(s): the badge's audience. */
  resource?: string | readonly string[]
  /** Space-separated scope, e.g. `trust:DV`. */
  scope?: string
  /** Time limit per call in milliseconds (default 10000). */
  timeoutMs?: number
}

const b64json = (value: unknown): string => Buffer.from(JSON.stringify(value), 'utf8').toString('base64url')

/** Signs an RFC 7523 client assertion: `iss` = `sub` = the client id, `aud` the authority's issuer. */
export function buildClientAssertion(input: { clientId: string; audience: string; privateKey: KeyObject; kid?: string; now?: number }): string {
  const iat = input.now ?? Math.floor(Date.now() / 1000)
  const header = input.kid === undefined ? { alg: 'EdDSA', typ: 'JWT' } : { alg: 'EdDSA', typ: 'JWT', kid: input.kid }
  const claims = {
    iss: input.clientId,
    sub: input.clientId,
    aud: input.audience,
    iat,
    exp: iat + CLIENT_ASSERTION_LIFETIME_SECONDS,
    jti: randomUUID(),
  }
  const signingInput = `${b64json(header)}.${b64json(claims)}`
  return `${signingInput}.${sign(null, Buffer.from(signingInput, 'ascii'), input.privateKey).toString('base64url')}`
}

const stringList = (value: unknown): value is string[] => Array.isArray(value) && value.every((v) => typeof v === 'string')

function httpUrl(value: unknown): boolean {
  if (typeof value !== 'string') return false
  try {
    const url = new URL(value)
    return url.protocol === 'https:' || url.protocol === 'http:'
  } catch {
    return false
  }
}

/**
 * Fetches `<issuer>/.well-known/oauth-authorization-server` and checks it before use: the document's
 * `issuer` must be the one asked for (RFC 8414 §3.3, so a mix-up cannot send the assertion elsewhere),
 * and it must offer the client_credentials grant with private_key_jwt when it lists what it offers.
 */
export async function discoverAuthorizationServer(issuer: string, timeoutMs?: number): Promise<AuthorizationServerMetadata> {
  const expected = registryEndpoint(issuer, '')
  const answer = await callRegistry({
    method: 'GET',
    url: registryEndpoint(issuer, '/.well-known/oauth-authorization-server'),
    ...(timeoutMs === undefined ? {} : { timeoutMs }),
  })
  const metadata = answer as Record<string, unknown>
  if (typeof answer !== 'object' || answer === null) throw new SdkError('invalid_response', 'The authorization server metadata is not a JSON object.')
  if (metadata.issuer !== expected) throw new SdkError('invalid_response', `The authorization server metadata names issuer ${JSON.stringify(metadata.issuer)}, not ${expected}.`)
  if (!httpUrl(metadata.token_endpoint)) throw new SdkError('invalid_response', 'The authorization server metadata has no http(s) token_endpoint.')
  const grants = metadata.grant_types_supported
  if (grants !== undefined && !(stringList(grants) && grants.includes('client_credentials'))) {
    throw new SdkError('invalid_response', 'The authorization server does not offer the client_credentials grant.')
  }
  const methods = metadata.token_endpoint_auth_methods_supported
  if (methods !== undefined && !(stringList(methods) && methods.includes('private_key_jwt'))) {
    throw new SdkError('invalid_response', 'The authorization server does not accept private_key_jwt client authentication.')
  }
  return metadata as unknown as AuthorizationServerMetadata
}

/**
 * Discovers the token endpoint, signs a fresh assertion and exchanges it for a badge. A refusal rejects
 * with {@link SdkError} carrying the OAuth error code (`invalid_client`, `invalid_target`, …).
 */
export async function requestClientCredentialsBadge(options: ClientCredentialsRequest): Promise<ClientCredentialsBadge> {
  if (typeof options.clientId !== 'string' || options.clientId.trim() === '') throw new SdkError('invalid_argument', 'clientId is required.')
  if (options.privateKey.type !== 'private' || options.privateKey.asymmetricKeyType !== 'ed25519') {
    throw new SdkError('invalid_argument', 'privateKey must be an Ed25519 private key.')
  }
  const timeout = options.timeoutMs === undefined ? {} : { timeoutMs: options.timeoutMs }
  const metadata = await discoverAuthorizationServer(options.issuer, options.timeoutMs)
  const assertion = buildClientAssertion({
    clientId: options.clientId,
    audience: metadata.issuer,
    privateKey: options.privateKey,
    ...(options.kid === undefined ? {} : { kid: options.kid }),
  })
  const form = new URLSearchParams({
    grant_type: 'client_credentials',
    client_assertion_type: CLIENT_ASSERTION_TYPE,
    client_assertion: assertion,
  })
  const resources = options.resource === undefined ? [] : typeof options.resource === 'string' ? [options.resource] : options.resource
  for (const resource of resources) form.append('resource', resource)
  if (options.scope !== undefined) form.set('scope', options.scope)
  const answer = await callRegistry({ method: 'POST', url: metadata.token_endpoint, form, ...timeout }) as Record<string, unknown>
  const { access_token: token, token_type: type, expires_in: expiresIn, scope } = answer
  if (typeof token !== 'string' || token === '' || typeof type !== 'string' || type.toLowerCase() !== 'bearer') {
    throw new SdkError('invalid_response', 'The token endpoint answered without a bearer access_token.')
  }
  if (!Number.isSafeInteger(expiresIn) || (expiresIn as number) <= 0) throw new SdkError('invalid_response', 'The token endpoint answered without expires_in.')
  return { accessToken: token, tokenType: 'Bearer', expiresIn: expiresIn as number, ...(typeof scope === 'string' ? { scope } : {}) }
}
