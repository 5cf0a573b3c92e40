/**
 * Signed Agent Cards in the A2A form (A2A 1.0 §8.4, docs/api.md §2.13): `signatures: [{protected, signature,
 * header?}]`, each a detached JWS over the card's canonical form. Pure: keys come from the caller's trust
 * store, never from the card (a `jku` is carried, never fetched). Nothing here throws on what a peer sends.
 */
import canonicalize from 'canonicalize'
import { FlattenedSign, flattenedVerify } from 'jose'
import type { KeyObject } from 'node:crypto'
import { isRecord } from './json-objects.js'
import { decodeBase64Url, parseJsonObject } from './signed-agent-card.js'

export type CardSignatureAlg = 'EdDSA' | 'ES256'

/** One member of a card's `signatures`: a flattened JWS without its payload. */
export interface CardSignature {
  protected: string
  signature: string
  header?: Record<string, unknown>
}

export type CardSignatureErrorCode =
  | 'CARD_MALFORMED'
  | 'SIGNATURES_MALFORMED'
  | 'SIGNATURE_MALFORMED'
  | 'ALG_NOT_ALLOWED'
  | 'HEADER_NOT_ALLOWED'
  | 'KID_MISSING'
  | 'KEY_NOT_FOUND'
  | 'SIGNATURE_INVALID'

/** What became of one signature; `index` is its position in the card's `signatures`. */
export type SignatureCheck =
  | { index: number; valid: true; kid: string; alg: CardSignatureAlg }
  | { index: number; valid: false; error: CardSignatureErrorCode; message: string; kid?: string; alg?: string }

/** `valid` when at least one signature verifies (§8.4.3); every signature is reported either way. */
export type CardSignaturesResult =
  | { valid: boolean; signatures: SignatureCheck[]; verifiedKids: string[] }
  | { valid: false; error: 'CARD_MALFORMED' | 'SIGNATURES_MALFORMED'; message: string }

/** Maps a protected header's `kid` (and the header, for its `alg`) to a trusted public key, or null. */
export type CardKeyLookup = (kid: string, header: Readonly<Record<string, unknown>>) => Promise<KeyObject | null> | KeyObject | null

export interface CardSigner {
  privateKey: KeyObject
  kid: string
  alg: CardSignatureAlg
  /** Where verifiers may find the key set; informative only, this registry never fetches it. */
  jku?: string
}

export type SignCardResult =
  | { ok: true; card: Record<string, unknown>; signature: CardSignature }
  | { ok: false; error: 'CARD_MALFORMED' | 'SIGNATURES_MALFORMED'; message: string }

export const MAX_CARD_SIGNATURES = 16
/** Encoded length of one `protected` member, and of one unprotected `header` as JSON. */
export const MAX_SIGNATURE_HEADER_CHARS = 4096
/** Encoded length of one `signature` (ES256 and EdDSA need 86). */
export const MAX_SIGNATURE_CHARS = 512
/** Largest canonical payload: cards are small, and this bounds hashing and JSON work. */
export const MAX_CANONICAL_CARD_BYTES = 256 * 1024

const ALGORITHMS: readonly CardSignatureAlg[] = ['EdDSA', 'ES256']
// Parameters that would let a signature choose its own key or change how the payload is read.
const FORBIDDEN_PROTECTED = ['jwk', 'x5u', 'x5c', 'crit', 'b64'] as const
// An unprotected header is not signed, so it may carry nothing that decides trust or processing.
const FORBIDDEN_UNPROTECTED = ['alg', 'kid', 'typ', 'cty', 'jku', 'jwk', 'x5u', 'x5c', 'x5t', 'x5t#S256', 'crit', 'b64'] as const
const SIGNATURE_MEMBERS = new Set(['protected', 'signature', 'header'])

// ---- canonical form (§8.4.1) ----

/**
 * ProtoJSON presence of the A2A 1.0 AgentCard fields (a2a.proto): `required` (REQUIRED, always kept),
 * `optional` (explicit presence, kept when set), or the type whose default an implicit-presence field drops.
 * Members the table does not name (0.3 fields, this registry's own, extensions) are kept exactly as sent.
 */
type Presence = 'required' | 'optional' | 'string' | 'bool' | 'repeated' | 'map' | 'message'
interface Field {
  presence: Presence
  /** The message type of a message field, or of each element of a repeated one. */
  shape?: Shape
}
type Shape = Readonly<Record<string, Field>>

const INTERFACE: Shape = {
  url: { presence: 'required' }, protocolBinding: { presence: 'required' }, protocolVersion: { presence: 'required' }, tenant: { presence: 'string' },
}
const PROVIDER: Shape = { url: { presence: 'required' }, organization: { presence: 'required' } }
const EXTENSION: Shape = {
  uri: { presence: 'string' }, description: { presence: 'string' }, required: { presence: 'bool' }, params: { presence: 'message' },
}
const CAPABILITIES: Shape = {
  streaming: { presence: 'optional' }, pushNotifications: { presence: 'optional' }, extendedAgentCard: { presence: 'optional' },
  extensions: { presence: 'repeated', shape: EXTENSION },
}
const SKILL: Shape = {
  id: { presence: 'required' }, name: { presence: 'required' }, description: { presence: 'required' }, tags: { presence: 'required' },
  examples: { presence: 'repeated' }, inputModes: { presence: 'repeated' }, outputModes: { presence: 'repeated' },
  securityRequirements: { presence: 'repeated' },
}
const AGENT_CARD: Shape = {
  name: { presence: 'required' }, description: { presence: 'required' }, version: { presence: 'required' },
  supportedInterfaces: { presence: 'required', shape: INTERFACE }, capabilities: { presence: 'required', shape: CAPABILITIES },
  defaultInputModes: { presence: 'required' }, defaultOutputModes: { presence: 'required' }, skills: { presence: 'required', shape: SKILL },
  provider: { presence: 'message', shape: PROVIDER }, documentationUrl: { presence: 'optional' }, iconUrl: { presence: 'optional' },
  securitySchemes: { presence: 'map' }, securityRequirements: { presence: 'repeated' },
}

function isDefault(presence: Presence, value: unknown): boolean {
  if (presence === 'required') return false
  // ProtoJSON reads null as "not set" for every field type
  if (value === null) return true
  switch (presence) {
    case 'string': return value === ''
    case 'bool': return value === false
    case 'repeated': return Array.isArray(value) && value.length === 0
    case 'map': return isRecord(value) && Object.keys(value).length === 0
    default: return false
  }
}

function withoutDefaults(value: Record<string, unknown>, shape: Shape): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  for (const key of Object.keys(value)) {
    const member = value[key]
    const field = Object.prototype.hasOwnProperty.call(shape, key) ? shape[key] : undefined
    if (field !== undefined && isDefault(field.presence, member)) continue
    let kept = member
    const inner = field?.shape
    if (inner !== undefined && isRecord(member)) kept = withoutDefaults(member, inner)
    else if (inner !== undefined && Array.isArray(member)) kept = member.map((item: unknown) => (isRecord(item) ? withoutDefaults(item, inner) : item))
    // defineProperty: a member named "__proto__" stays an own member instead of setting the prototype
    Object.defineProperty(out, key, { value: kept, enumerable: true, writable: true, configurable: true })
  }
  return out
}

export type CanonicalResult = { ok: true; canonical: string; bytes: Uint8Array } | { ok: false; error: 'CARD_MALFORMED'; message: string }

/**
 * The bytes a §8.4 signature covers: the card without `signatures`, default-valued fields of the A2A 1.0
 * AgentCard dropped by their ProtoJSON presence, then RFC 8785 (JCS).
 */
export function canonicalCardPayload(card: unknown): CanonicalResult {
  if (!isRecord(card)) return { ok: false, error: 'CARD_MALFORMED', message: 'The agent card must be a JSON object.' }
  let canonical: string | undefined
  try {
    const { signatures: _excluded, ...content } = withoutDefaults(card, AGENT_CARD)
    void _excluded
    canonical = canonicalize(content)
  } catch (error) {
    // lone surrogates and non-finite numbers have no JCS form
    return { ok: false, error: 'CARD_MALFORMED', message: `The agent card has no canonical JSON form (${error instanceof Error ? error.message : 'unknown'}).` }
  }
  if (canonical === undefined) return { ok: false, error: 'CARD_MALFORMED', message: 'The agent card has no canonical JSON form.' }
  const bytes = new TextEncoder().encode(canonical)
  if (bytes.length > MAX_CANONICAL_CARD_BYTES) {
    return { ok: false, error: 'CARD_MALFORMED', message: `The canonical agent card exceeds ${MAX_CANONICAL_CARD_BYTES} bytes.` }
  }
  return { ok: true, canonical, bytes }
}

// ---- structure of `signatures` ----

type Parsed = { ok: true; signatures: unknown[] } | { ok: false; error: 'SIGNATURES_MALFORMED'; message: string }

/** The card's `signatures` as a bounded array; absent is an empty list. */
function signaturesOf(card: Record<string, unknown>): Parsed {
  if (!Object.prototype.hasOwnProperty.call(card, 'signatures')) return { ok: true, signatures: [] }
  const list = card['signatures']
  if (!Array.isArray(list)) return { ok: false, error: 'SIGNATURES_MALFORMED', message: '$.signatures must be an array.' }
  if (list.length > MAX_CARD_SIGNATURES) {
    return { ok: false, error: 'SIGNATURES_MALFORMED', message: `$.signatures holds ${list.length} entries; at most ${MAX_CARD_SIGNATURES} are accepted.` }
  }
  return { ok: true, signatures: list }
}

type Checked =
  | { ok: true; jws: CardSignature; header: Record<string, unknown>; kid: string; alg: CardSignatureAlg }
  | { ok: false; error: CardSignatureErrorCode; message: string; kid?: string; alg?: string }

function own(record: Record<string, unknown>, name: string): unknown {
  return Object.prototype.hasOwnProperty.call(record, name) ? record[name] : undefined
}

/** Every structural and header rule for one entry, before any key is looked up. */
function checkEntry(entry: unknown, index: number): Checked {
  const at = `$.signatures[${index}]`
  const malformed = (message: string): Checked => ({ ok: false, error: 'SIGNATURE_MALFORMED', message })
  if (!isRecord(entry)) return malformed(`${at} must be an object.`)
  const extra = Object.keys(entry).find((key) => !SIGNATURE_MEMBERS.has(key))
  if (extra !== undefined) return malformed(`${at} has the member ${JSON.stringify(extra)}; only protected, signature and header are allowed.`)
  const protectedB64 = own(entry, 'protected')
  const signature = own(entry, 'signature')
  if (typeof protectedB64 !== 'string' || protectedB64.length === 0) return malformed(`${at}.protected must be a non-empty string.`)
  if (protectedB64.length > MAX_SIGNATURE_HEADER_CHARS) return malformed(`${at}.protected exceeds ${MAX_SIGNATURE_HEADER_CHARS} characters.`)
  if (typeof signature !== 'string' || signature.length === 0) return malformed(`${at}.signature must be a non-empty string.`)
  if (signature.length > MAX_SIGNATURE_CHARS) return malformed(`${at}.signature exceeds ${MAX_SIGNATURE_CHARS} characters.`)
  if (decodeBase64Url(signature) === null) return malformed(`${at}.signature must be unpadded base64url.`)
  const headerBytes = decodeBase64Url(protectedB64)
  if (headerBytes === null) return malformed(`${at}.protected must be unpadded base64url.`)
  const header = parseJsonObject(headerBytes)
  if (header === null) return malformed(`${at}.protected is not a base64url-encoded JSON object.`)

  const unprotected = own(entry, 'header')
  if (unprotected !== undefined) {
    if (!isRecord(unprotected)) return malformed(`${at}.header must be an object.`)
    if (JSON.stringify(unprotected).length > MAX_SIGNATURE_HEADER_CHARS) return malformed(`${at}.header exceeds ${MAX_SIGNATURE_HEADER_CHARS} characters as JSON.`)
    const bad = FORBIDDEN_UNPROTECTED.find((name) => Object.prototype.hasOwnProperty.call(unprotected, name))
    if (bad !== undefined) return { ok: false, error: 'HEADER_NOT_ALLOWED', message: `${at}.header must not carry '${bad}': it is not covered by the signature.` }
  }

  const alg = own(header, 'alg')
  if (typeof alg !== 'string' || !(ALGORITHMS as readonly string[]).includes(alg)) {
    const named = typeof alg === 'string' ? `'${alg}'` : 'none'
    return { ok: false, error: 'ALG_NOT_ALLOWED', message: `${at}: the algorithm must be EdDSA or ES256, got ${named}.`, ...(typeof alg === 'string' ? { alg } : {}) }
  }
  const forbidden = FORBIDDEN_PROTECTED.find((name) => Object.prototype.hasOwnProperty.call(header, name))
  if (forbidden !== undefined) return { ok: false, error: 'HEADER_NOT_ALLOWED', message: `${at}: the protected header parameter '${forbidden}' is not allowed.`, alg }
  const typ = own(header, 'typ')
  if (typ !== undefined && typ !== 'JOSE') return { ok: false, error: 'HEADER_NOT_ALLOWED', message: `${at}: the protected header 'typ' must be "JOSE" when present.`, alg }
  const jku = own(header, 'jku')
  if (jku !== undefined && typeof jku !== 'string') return { ok: false, error: 'HEADER_NOT_ALLOWED', message: `${at}: the protected header 'jku' must be a string.`, alg }
  const kid = own(header, 'kid')
  if (typeof kid !== 'string' || kid.length === 0) return { ok: false, error: 'KID_MISSING', message: `${at}: the protected header must carry a non-empty string 'kid'.`, alg }

  const jws: CardSignature = { protected: protectedB64, signature }
  if (unprotected !== undefined) jws.header = unprotected as Record<string, unknown>
  return { ok: true, jws, header, kid, alg: alg as CardSignatureAlg }
}

function keyFits(key: KeyObject, alg: CardSignatureAlg): boolean {
  if (key.type !== 'public') return false
  if (alg === 'EdDSA') return key.asymmetricKeyType === 'ed25519'
  return key.asymmetricKeyType === 'ec' && key.asymmetricKeyDetails?.namedCurve === 'prime256v1'
}

async function verifyEntry(entry: unknown, index: number, payloadB64: string, lookup: CardKeyLookup): Promise<SignatureCheck> {
  const checked = checkEntry(entry, index)
  if (!checked.ok) {
    const { ok: _ok, ...failure } = checked
    void _ok
    return { index, valid: false, ...failure }
  }
  const { jws, header, kid, alg } = checked
  const at = `$.signatures[${index}]`
  let key: KeyObject | null
  try {
    key = await lookup(kid, header)
  } catch {
    // a failing trust store (database, network) must not look like a bad signature, nor leak its details
    key = null
  }
  if (key === null) return { index, valid: false, error: 'KEY_NOT_FOUND', message: `${at}: no trusted key is known for kid '${kid}'.`, kid, alg }
  if (!keyFits(key, alg)) return { index, valid: false, error: 'KEY_NOT_FOUND', message: `${at}: the trusted key for kid '${kid}' is not an ${alg} public key.`, kid, alg }
  try {
    await flattenedVerify({ ...jws, payload: payloadB64 }, key, { algorithms: [alg] })
  } catch {
    return { index, valid: false, error: 'SIGNATURE_INVALID', message: `${at}: the signature does not verify with the key for kid '${kid}'.`, kid, alg }
  }
  return { index, valid: true, kid, alg }
}

/**
 * Checks every signature of `card` against keys from `lookup`. Never throws; a card without signatures is
 * `valid: false` with an empty report.
 */
export async function verifyCardSignatures(card: unknown, lookup: CardKeyLookup): Promise<CardSignaturesResult> {
  const payload = canonicalCardPayload(card)
  if (!payload.ok) return { valid: false, error: payload.error, message: payload.message }
  const parsed = signaturesOf(card as Record<string, unknown>)
  if (!parsed.ok) return { valid: false, error: parsed.error, message: parsed.message }
  const payloadB64 = Buffer.from(payload.bytes).toString('base64url')
  const signatures: SignatureCheck[] = []
  for (const [index, entry] of parsed.signatures.entries()) signatures.push(await verifyEntry(entry, index, payloadB64, lookup))
  const verifiedKids = signatures.flatMap((check) => (check.valid ? [check.kid] : []))
  return { valid: verifiedKids.length > 0, signatures, verifiedKids }
}

/**
 * Appends a signature with protected header `{alg, kid, typ: "JOSE", jku?}`, keeping the signatures already
 * there (each must be well formed). `replaceJku`: earlier signatures whose protected `jku` equals it are
 * dropped first, so re-signing by the same authority does not pile up.
 */
export async function signCard(card: unknown, signer: CardSigner, options: { replaceJku?: string } = {}): Promise<SignCardResult> {
  const payload = canonicalCardPayload(card)
  if (!payload.ok) return { ok: false, error: payload.error, message: payload.message }
  const parsed = signaturesOf(card as Record<string, unknown>)
  if (!parsed.ok) return { ok: false, error: parsed.error, message: parsed.message }
  const kept: CardSignature[] = []
  for (const [index, entry] of parsed.signatures.entries()) {
    const checked = checkEntry(entry, index)
    if (!checked.ok) return { ok: false, error: 'SIGNATURES_MALFORMED', message: checked.message }
    if (options.replaceJku !== undefined && own(checked.header, 'jku') === options.replaceJku) continue
    kept.push(checked.jws)
  }
  if (kept.length >= MAX_CARD_SIGNATURES) {
    return { ok: false, error: 'SIGNATURES_MALFORMED', message: `$.signatures already holds ${kept.length} entries; at most ${MAX_CARD_SIGNATURES} are accepted.` }
  }
  const protectedHeader = { alg: signer.alg, kid: signer.kid, typ: 'JOSE', ...(signer.jku === undefined ? {} : { jku: signer.jku }) }
  const jws = await new FlattenedSign(payload.bytes).setProtectedHeader(protectedHeader).sign(signer.privateKey)
  const signature: CardSignature = { protected: jws.protected as string, signature: jws.signature }
  const signed: Record<string, unknown> = {}
  for (const key of Object.keys(card as Record<string, unknown>)) {
    if (key === 'signatures') continue
    Object.defineProperty(signed, key, { value: (card as Record<string, unknown>)[key], enumerable: true, writable: true, configurable: true })
  }
  signed['signatures'] = [...kept, signature]
  return { ok: true, card: signed, signature }
}

/** The authority's key as the key ring holds it: Ed25519, named by kid, published at `<issuer>/.well-known/jwks.json`. */
export interface AuthoritySigningKey {
  privateKey: KeyObject
  kid: string
  issuer: string
}

/** `<issuer>/.well-known/jwks.json`, the `jku` an authority countersignature names. */
export function authorityJku(issuer: string): string {
  return `${issuer.replace(/\/+$/, '')}/.well-known/jwks.json`
}

/**
 * Countersigns a card by the authority (the registry's `/v1/agent-cards/sign`, and the gateway for cards
 * it serves): the agent's own signatures stay, an earlier countersignature by the same authority is replaced.
 */
export function countersignCard(card: unknown, authority: AuthoritySigningKey): Promise<SignCardResult> {
  const jku = authorityJku(authority.issuer)
  return signCard(card, { privateKey: authority.privateKey, kid: authority.kid, alg: 'EdDSA', jku }, { replaceJku: jku })
}
