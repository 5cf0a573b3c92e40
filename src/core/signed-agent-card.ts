/**
 * Signed Agent Cards (docs/api.md §2.13), flattened JWS. The header is checked by hand before jose sees it: a
 * signer cannot bring its own key, switch algorithm, or change how the payload is read (`crit`, `b64`).
 */
import { FlattenedSign, flattenedVerify } from 'jose'
import { createPublicKey, type KeyObject } from 'node:crypto'
import { validateAgentCard, type CardValidation } from './agent-card.js'
import { decodeDidKey, publicKeyToJwk } from './did-key.js'
import { isRecord } from './json-objects.js'

/** The wire form of a Signed Agent Card; every member is unpadded base64url. */
export interface SignedAgentCard {
  payload: string
  protected: string
  signature: string
}

export type SignedCardErrorCode =
  | 'SIGNED_CARD_MALFORMED'
  | 'ALG_NOT_ALLOWED'
  | 'HEADER_NOT_ALLOWED'
  | 'KID_MISSING'
  | 'KEY_NOT_FOUND'
  | 'SIGNATURE_INVALID'

/** `valid` speaks for the signature only; the card's own validation is returned beside it. */
export type SignedCardResult =
  | { valid: true; kid: string; card: Record<string, unknown>; validation: CardValidation }
  | { valid: false; error: SignedCardErrorCode; message: string; kid?: string }

/** Largest accepted member (and decoded payload): cards are small, and this bounds parse and hash work. */
export const MAX_SIGNED_CARD_BYTES = 256 * 1024

// Header parameters that would let the token choose its own key or alter how it is processed.
const FORBIDDEN_HEADERS = ['jwk', 'jku', 'x5u', 'x5c', 'crit', 'b64'] as const
const BASE64URL = /^[A-Za-z0-9_-]*$/
const DID_KEY_PREFIX = 'did:key:'

function fail(error: SignedCardErrorCode, message: string, kid?: string): SignedCardResult {
  return kid === undefined ? { valid: false, error, message } : { valid: false, error, message, kid }
}

/** Canonical unpadded base64url, so one signature has exactly one accepted spelling. */
export function decodeBase64Url(text: string): Buffer | null {
  if (!BASE64URL.test(text) || text.length % 4 === 1) return null
  const bytes = Buffer.from(text, 'base64url')
  return bytes.toString('base64url') === text ? bytes : null
}

/** A JSON object from strict UTF-8 bytes, else null. */
export function parseJsonObject(bytes: Buffer): Record<string, unknown> | null {
  let value: unknown
  try {
    // fatal decoding: invalid UTF-8 must not be silently replaced and then "verified"
    value = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(bytes))
  } catch {
    return null
  }
  return isRecord(value) ? value : null
}

/** `resolveKey` is called only after the header passed every structural check. Never throws. */
export async function verifySignedAgentCard(
  signed: unknown,
  resolveKey: (kid: string) => Promise<Uint8Array | null>,
): Promise<SignedCardResult> {
  if (!isRecord(signed)) return fail('SIGNED_CARD_MALFORMED', 'A signed agent card must be a JSON object.')
  const own = (name: string): unknown => (Object.prototype.hasOwnProperty.call(signed, name) ? signed[name] : undefined)
  const members = { payload: own('payload'), protected: own('protected'), signature: own('signature') }
  for (const [name, value] of Object.entries(members)) {
    if (typeof value !== 'string' || value.length === 0) {
      return fail('SIGNED_CARD_MALFORMED', `The signed agent card needs a non-empty string '${name}'.`)
    }
    if (value.length > MAX_SIGNED_CARD_BYTES) {
      return fail('SIGNED_CARD_MALFORMED', `The '${name}' member exceeds ${MAX_SIGNED_CARD_BYTES} bytes.`)
    }
  }
  // an unprotected header is not covered by the signature, so nothing in it may be trusted or honoured
  if (own('header') !== undefined) {
    return fail('HEADER_NOT_ALLOWED', 'Unprotected JWS header parameters are not accepted; put them in the protected header.')
  }
  const jws = members as SignedAgentCard

  const headerBytes = decodeBase64Url(jws.protected)
  const payloadBytes = decodeBase64Url(jws.payload)
  const signatureBytes = decodeBase64Url(jws.signature)
  if (headerBytes === null || payloadBytes === null || signatureBytes === null) {
    return fail('SIGNED_CARD_MALFORMED', 'The protected header, payload and signature must be unpadded base64url.')
  }
  const header = parseJsonObject(headerBytes)
  if (header === null) return fail('SIGNED_CARD_MALFORMED', 'The protected header is not a JSON object.')

  const alg = Object.prototype.hasOwnProperty.call(header, 'alg') ? header['alg'] : undefined
  if (alg !== 'EdDSA') {
    return fail('ALG_NOT_ALLOWED', `The signature algorithm must be EdDSA, got ${typeof alg === 'string' ? `'${alg}'` : 'none'}.`)
  }
  for (const name of FORBIDDEN_HEADERS) {
    if (Object.prototype.hasOwnProperty.call(header, name)) {
      return fail('HEADER_NOT_ALLOWED', `The protected header parameter '${name}' is not allowed.`)
    }
  }
  const kid = Object.prototype.hasOwnProperty.call(header, 'kid') ? header['kid'] : undefined
  if (typeof kid !== 'string' || kid.length === 0) {
    return fail('KID_MISSING', "The protected header must carry a non-empty string 'kid'.")
  }

  const card = parseJsonObject(payloadBytes)
  if (card === null) return fail('SIGNED_CARD_MALFORMED', 'The payload is not a JSON object.', kid)

  let raw: Uint8Array | null
  try {
    raw = await resolveKey(kid)
  } catch {
    // a resolver failure (database, network) must not look like a bad signature, nor leak its details
    raw = null
  }
  if (raw === null) return fail('KEY_NOT_FOUND', `No public key is known for kid '${kid}'.`, kid)

  let key: KeyObject
  try {
    key = createPublicKey({ key: publicKeyToJwk(raw), format: 'jwk' })
  } catch {
    return fail('KEY_NOT_FOUND', `The key registered for kid '${kid}' is not a valid Ed25519 public key.`, kid)
  }

  try {
    await flattenedVerify(jws, key, { algorithms: ['EdDSA'] })
  } catch {
    return fail('SIGNATURE_INVALID', 'The signature does not verify with the key for this kid.', kid)
  }
  return { valid: true, kid, card, validation: validateAgentCard(card) }
}

/** For tests and the SDK. */
export async function signAgentCard(card: Record<string, unknown>, privateKey: KeyObject, kid: string): Promise<SignedAgentCard> {
  const jws = await new FlattenedSign(new TextEncoder().encode(JSON.stringify(card)))
    .setProtectedHeader({ alg: 'EdDSA', kid })
    .sign(privateKey)
  if (jws.protected === undefined) throw new Error('jose produced a JWS without a protected header')
  return { payload: jws.payload, protected: jws.protected, signature: jws.signature }
}

/** A fragment must name the DID's own verification method, since a did:key document has no other. */
export function resolveDidKeyKid(kid: string): Uint8Array | null {
  if (typeof kid !== 'string' || !kid.startsWith(DID_KEY_PREFIX)) return null
  const hash = kid.indexOf('#')
  const did = hash === -1 ? kid : kid.slice(0, hash)
  if (hash !== -1 && kid.slice(hash + 1) !== did.slice(DID_KEY_PREFIX.length)) return null
  try {
    return decodeDidKey(did)
  } catch {
    return null
  }
}
