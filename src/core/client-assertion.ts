/**
 * Client assertions of the token endpoint (RFC 7523 §3, private_key_jwt; docs/api.md §4.10): the header
 * and claim checks, in the documented order, then the key check against an already resolved DID
 * document. Pure: the clock and the accepted audiences come from the caller.
 */
import { createPublicKey, verify } from 'node:crypto'
import { decodeEdDsaJws, FORBIDDEN_HEADER_PARAMS } from './badge.js'
import type { ResolvedKeys } from './did-document.js'
import { isSafeText } from './safe-text.js'

export const CLIENT_ASSERTION_TYPE = 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer'
/** An assertion is a few hundred bytes; this only bounds hostile input. */
export const MAX_CLIENT_ASSERTION_BYTES = 8 * 1024
/** An assertion may be dated this far ahead of the server clock (iat, nbf). */
export const ASSERTION_IAT_LEEWAY_SECONDS = 60
/** Assertions live minutes, so the badges' 60 s leeway on exp would be a large share of their life. */
export const ASSERTION_EXP_LEEWAY_SECONDS = 5
export const ASSERTION_MAX_LIFETIME_SECONDS = 300
export const MAX_ASSERTION_JTI_LENGTH = 256
/** Without a kid, at most this many authentication keys of the DID are tried. */
export const MAX_ASSERTION_KEYS_TRIED = 16

const MAX_CLAIM_LENGTH = 2048

export interface ClientAssertionExpectations {
  /** The values `aud` may take: the issuer and the token endpoint URL. */
  readonly audiences: readonly string[]
  /** Unix seconds. */
  readonly now: number
}

/** An assertion whose header and claims passed; its signature is still unchecked. */
export interface CheckedClientAssertion {
  /** `iss` (= `sub`): the client id. */
  readonly clientId: string
  readonly kid: string | null
  readonly jti: string
  readonly signingInput: Buffer
  readonly signature: Buffer
}

export type ClientAssertionCheck =
  | { ok: true; assertion: CheckedClientAssertion }
  | { ok: false; message: string }

export type ClientAssertionKeyCheck =
  | { ok: true; kid: string; publicKey: Uint8Array }
  | { ok: false; message: string }

const fail = (message: string): { ok: false; message: string } => ({ ok: false, message })

const isText = (value: unknown): value is string => typeof value === 'string' && value.length > 0 && value.length <= MAX_CLAIM_LENGTH

const ALG_MESSAGE = 'The client assertion must be signed with EdDSA (Ed25519); none, HMAC, RSA and ECDSA are refused.'

// Only to word the refusal of an undecodable token: nothing read here is trusted.
function peekHeader(token: string): Record<string, unknown> | null {
  try {
    const value: unknown = JSON.parse(Buffer.from(token.slice(0, token.indexOf('.')), 'base64url').toString('utf8'))
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : null
  } catch {
    return null
  }
}

function describeUndecodable(token: string, error: 'MALFORMED' | 'ALG'): string {
  const header = token.includes('.') ? peekHeader(token) : null
  if (header !== null) {
    if (header.alg !== 'EdDSA') return ALG_MESSAGE
    const forbidden = FORBIDDEN_HEADER_PARAMS.find((param) => param in header)
    if (forbidden !== undefined) return `The client assertion header carries "${forbidden}", which is not accepted.`
    if (error === 'ALG') return 'The client assertion signature is not a 64-byte Ed25519 signature.'
  }
  return 'The client assertion is not a compact JWS (three base64url parts: JSON header, JSON claims, signature).'
}

function audienceMatches(aud: unknown, accepted: readonly string[]): string | null {
  if (typeof aud === 'string') return accepted.includes(aud) ? null : 'The client assertion aud must be the issuer or the token endpoint URL.'
  if (!Array.isArray(aud)) return 'The client assertion aud is missing or not a string.'
  // A second audience would let the assertion be replayed at another server (audience injection).
  if (aud.length !== 1) return 'The client assertion aud must name exactly one audience; several are refused.'
  return typeof aud[0] === 'string' && accepted.includes(aud[0]) ? null : 'The client assertion aud must be the issuer or the token endpoint URL.'
}

/** The first failure is reported, in the order of docs/api.md §4.10. */
export function checkClientAssertion(token: string, expected: ClientAssertionExpectations): ClientAssertionCheck {
  if (token.length > MAX_CLIENT_ASSERTION_BYTES) return fail(`The client assertion exceeds ${MAX_CLIENT_ASSERTION_BYTES} bytes.`)
  const decoded = decodeEdDsaJws(token, MAX_CLIENT_ASSERTION_BYTES)
  if ('error' in decoded) return fail(describeUndecodable(token, decoded.error))
  const { header, payload } = decoded
  if (header.typ !== undefined && (typeof header.typ !== 'string' || header.typ.toLowerCase() !== 'jwt')) {
    return fail('The client assertion header typ must be "JWT" or absent; a pop+jwt proof or other token is not a client assertion.')
  }
  if (header.kid !== undefined && !isText(header.kid)) return fail('The client assertion header kid must be a non-empty string.')

  if (!isText(payload.iss) || !isText(payload.sub)) return fail('The client assertion claims iss and sub must be non-empty strings.')
  if (payload.iss !== payload.sub) return fail('The client assertion iss and sub must be the same client id.')
  const audienceProblem = audienceMatches(payload.aud, expected.audiences)
  if (audienceProblem !== null) return fail(audienceProblem)
  if (!Number.isSafeInteger(payload.exp) || !Number.isSafeInteger(payload.iat)) {
    return fail('The client assertion claims exp and iat are required, in integer Unix seconds.')
  }
  const iat = payload.iat as number
  const exp = payload.exp as number
  if (iat > expected.now + ASSERTION_IAT_LEEWAY_SECONDS) return fail('The client assertion iat lies in the future.')
  if (exp < expected.now - ASSERTION_EXP_LEEWAY_SECONDS) return fail('The client assertion has expired.')
  if (exp - iat > ASSERTION_MAX_LIFETIME_SECONDS) {
    return fail(`The client assertion exp must be at most ${ASSERTION_MAX_LIFETIME_SECONDS} seconds after iat.`)
  }
  if (payload.nbf !== undefined) {
    if (!Number.isSafeInteger(payload.nbf)) return fail('The client assertion nbf must be integer Unix seconds.')
    if ((payload.nbf as number) > expected.now + ASSERTION_IAT_LEEWAY_SECONDS) return fail('The client assertion is not valid yet (nbf).')
  }
  const jti = payload.jti
  // PostgreSQL text cannot hold U+0000, and the jti is stored to refuse replays.
  if (typeof jti !== 'string' || jti.length === 0 || jti.length > MAX_ASSERTION_JTI_LENGTH || !isSafeText(jti)) {
    return fail(`The client assertion jti must be a string of 1-${MAX_ASSERTION_JTI_LENGTH} characters.`)
  }
  return {
    ok: true,
    assertion: {
      clientId: payload.iss,
      kid: header.kid === undefined ? null : (header.kid as string),
      jti,
      signingInput: decoded.signingInput,
      signature: decoded.signature,
    },
  }
}

function verifiesWith(assertion: CheckedClientAssertion, key: Uint8Array): boolean {
  try {
    const publicKey = createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(key).toString('base64url') }, format: 'jwk' })
    return verify(null, assertion.signingInput, publicKey, assertion.signature)
  } catch {
    // a key node cannot import verifies nothing
    return false
  }
}

/**
 * Only keys listed under `authentication` count: the assertion authenticates the client, which is what
 * that relationship means. With a kid only that key is tried, else each authentication key in turn.
 */
export function verifyClientAssertionKey(assertion: CheckedClientAssertion, resolved: ResolvedKeys): ClientAssertionKeyCheck {
  if (assertion.kid !== null) {
    const kid = assertion.kid.startsWith('#') ? `${resolved.did}${assertion.kid}` : assertion.kid
    const key = resolved.keys.get(kid)
    if (key === undefined || !resolved.authentication.has(kid)) {
      return fail('The client assertion kid is not an Ed25519 authentication key of the client\'s DID.')
    }
    return verifiesWith(assertion, key) ? { ok: true, kid, publicKey: key } : fail('The client assertion signature does not verify with the key named by kid.')
  }
  let tried = 0
  for (const kid of resolved.authentication) {
    const key = resolved.keys.get(kid)
    if (key === undefined) continue
    if (tried++ >= MAX_ASSERTION_KEYS_TRIED) break
    if (verifiesWith(assertion, key)) return { ok: true, kid, publicKey: key }
  }
  return fail(tried === 0
    ? 'The client\'s DID document lists no Ed25519 authentication key.'
    : 'The client assertion signature does not verify with any authentication key of the client\'s DID.')
}
