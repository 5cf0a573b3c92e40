/**
 * Delegation envelopes, pure (key resolution and badge checks come through {@link ChainContext}). Which code a
 * chain with several faults gets is decided by the order of the phases below: docs/wire-contract.md §10.
 */
import { createHash, createPublicKey, sign, verify, type KeyObject } from 'node:crypto'
import { CLOCK_LEEWAY_SECONDS, decodeEdDsaJws, type DecodedJws } from './badge.js'
import { decodeDidKey, didKeyVerificationMethodId, publicKeyToJwk } from './did-key.js'
import { isDid } from './did.js'
import { isCapabilityClass } from './capability-class.js'
import { isEnforcementMode, type EnforcementMode } from './enforcement-mode.js'
import { GATEWAY_ERRORS } from './gateway-errors.js'

export const ENVELOPE_TYP = 'service-authority-envelope+jws'
export const MAX_ENVELOPE_PAYLOAD_BYTES = 8 * 1024
/** Bounds the work one envelope can ask for: an 8 KiB payload in base64url, a long did:web kid, the signature. */
export const MAX_ENVELOPE_JWS_BYTES = 16 * 1024
/** In code points. */
export const MAX_PROMPT_SUMMARY_CHARS = 512

export const ENVELOPE_ERROR_CODES = [
  'ENVELOPE_MALFORMED',
  'ENVELOPE_CAPABILITY_INVALID',
  'ENVELOPE_PAYLOAD_TOO_LARGE',
  'ENVELOPE_SIGNATURE_INVALID',
  'ENVELOPE_EXPIRED',
  'ENVELOPE_NOT_YET_VALID',
  'ENVELOPE_CHAIN_BROKEN',
  'ENVELOPE_CHAIN_TOO_DEEP',
  'ENVELOPE_NARROWING_VIOLATION',
  'ENVELOPE_DEPTH_EXCEEDED',
  'ENVELOPE_BADGE_BINDING_FAILED',
  'ENVELOPE_KEY_NOT_BOUND',
  'ENVELOPE_ORG_BOUNDARY',
] as const
export type EnvelopeErrorCode = (typeof ENVELOPE_ERROR_CODES)[number]

export const ENVELOPE_ERROR_STATUS: Readonly<Record<EnvelopeErrorCode, number>> = Object.freeze(
  Object.fromEntries(ENVELOPE_ERROR_CODES.map((code) => [code, GATEWAY_ERRORS[code].status])) as Record<EnvelopeErrorCode, number>,
)

/** Member rules: docs/wire-contract.md §10; times in Unix seconds. */
export interface EnvelopePayload {
  envelope_id: string
  issuer_did: string
  subject_did: string
  txn_id: string
  parent_authority_hash: string | null
  capability_class: string
  constraints: Record<string, unknown>
  delegation_depth_remaining: number
  enforcement_mode_min: EnforcementMode | null
  issued_at: number
  expires_at: number
  issuer_badge_jti: string
  subject_badge_jti: string | null
  prompt_summary?: string
}

export interface ChainFailure {
  ok: false
  code: EnvelopeErrorCode
  status: number
  /** Index in the chain, root first; null for a failure of the chain or headers as a whole. */
  index: number | null
  /** Human text for logs; never carries claim values or tokens. */
  detail: string
}

export interface ChainContext {
  /** Unix seconds. */
  now: number
  maxDepth: number
  /** A DID prefix; null or '' accepts every issuer. */
  orgTrustBoundary: string | null
  /** The caller's verified badge. */
  caller: { did: string; jti: string }
  /** The key `kid` names if it is bound to `issuerDid`, else null; a throw or rejection counts as null. */
  resolveKey(kid: string, issuerDid: string): KeyObject | null | Promise<KeyObject | null>
  /** Verifies a badge from the badge map: the verified {did (sub), jti}, or null when invalid, expired or revoked. */
  verifyBadge(token: string): { did: string; jti: string } | null
}

export interface VerifiedChain {
  ok: true
  envelopes: EnvelopePayload[]
  leaf: EnvelopePayload
  /** Number of envelopes (the PDP's `delegation_depth`, docs/api.md §4.9). */
  depth: number
  /** Every envelope's `enforcement_mode_min`, root first, for `effectiveMode` (enforcement.ts). */
  modeMinimums: (string | null)[]
}

const fail = (code: EnvelopeErrorCode, index: number | null, detail: string): ChainFailure => ({
  ok: false,
  code,
  status: ENVELOPE_ERROR_STATUS[code],
  index,
  detail,
})

const encodeJson = (value: unknown): string => Buffer.from(JSON.stringify(value), 'utf8').toString('base64url')

/** The payload is not validated here (tests and tools sign deliberately bad envelopes); {@link verifyChain} judges. */
export function signEnvelope(payload: EnvelopePayload, key: { privateKey: KeyObject; kid: string }): string {
  const signingInput = `${encodeJson({ alg: 'EdDSA', typ: ENVELOPE_TYP, kid: key.kid })}.${encodeJson(payload)}`
  return `${signingInput}.${sign(null, Buffer.from(signingInput, 'ascii'), key.privateKey).toString('base64url')}`
}

/** Lower-case hex SHA-256 of a compact JWS (the child's `parent_authority_hash`, docs/wire-contract.md §10). */
export function authorityHash(compactJws: string): string {
  return createHash('sha256').update(compactJws, 'utf8').digest('hex')
}

/** A ready-made `resolveKey` for did:key issuers; cache its answers (each costs a few µs). */
export function didKeyPublicKey(kid: string, issuerDid: string): KeyObject | null {
  if (!issuerDid.startsWith('did:key:') || kid !== didKeyVerificationMethodId(issuerDid)) return null
  try {
    return createPublicKey({ key: { ...publicKeyToJwk(decodeDidKey(issuerDid)) }, format: 'jwk' })
  } catch {
    return null
  }
}

const BASE64URL_PADDED = /^[A-Za-z0-9_-]*={0,2}$/

/** Strict base64url (padding tolerated, nothing else): the canonical bytes, or null. */
function decodeBase64Url(text: string): Buffer | null {
  if (!BASE64URL_PADDED.test(text)) return null
  const bare = text.replace(/=+$/, '')
  if (bare.length % 4 === 1) return null
  const bytes = Buffer.from(bare, 'base64url')
  return bytes.toString('base64url') === bare ? bytes : null
}

const utf8 = new TextDecoder('utf-8', { fatal: true })

function parseJson(bytes: Buffer | string): { value: unknown } | null {
  try {
    return { value: JSON.parse(typeof bytes === 'string' ? bytes : utf8.decode(bytes)) as unknown }
  } catch {
    return null
  }
}

/**
 * Null without an envelope header (a badge map alone means nothing). The length is checked as soon as the array
 * is parsed, before its elements, the leaf header or the badge map (docs/wire-contract.md §10).
 */
export function decodeChainHeaders(
  headers: { authority?: string; chain?: string; badgeMap?: string },
  maxDepth: number,
): null | { ok: true; envelopes: string[]; badgeMap: Record<string, string> } | ChainFailure {
  const { authority, chain, badgeMap } = headers
  if (authority === undefined && chain === undefined) return null

  let envelopes: string[]
  if (chain !== undefined) {
    const bytes = decodeBase64Url(chain)
    if (bytes === null) return fail('ENVELOPE_MALFORMED', null, 'X-Service-Authority-Chain is not base64url')
    const parsed = parseJson(bytes)
    if (parsed === null || !Array.isArray(parsed.value)) {
      return fail('ENVELOPE_MALFORMED', null, 'X-Service-Authority-Chain is not a JSON array')
    }
    const list: unknown[] = parsed.value
    if (list.length > maxDepth) {
      return fail('ENVELOPE_CHAIN_TOO_DEEP', null, `chain of ${list.length} envelopes exceeds the maximum depth ${maxDepth}`)
    }
    if (list.length === 0) return fail('ENVELOPE_MALFORMED', null, 'X-Service-Authority-Chain is an empty array')
    for (let i = 0; i < list.length; i++) {
      if (typeof list[i] !== 'string') return fail('ENVELOPE_MALFORMED', i, `chain element ${i} is not a string`)
    }
    envelopes = list as string[]
    if (authority !== undefined && authority !== envelopes[envelopes.length - 1]) {
      return fail('ENVELOPE_CHAIN_BROKEN', envelopes.length - 1, 'X-Service-Authority differs from the last element of X-Service-Authority-Chain')
    }
  } else {
    if (maxDepth < 1) return fail('ENVELOPE_CHAIN_TOO_DEEP', null, `chain of 1 envelope exceeds the maximum depth ${maxDepth}`)
    envelopes = [authority as string]
  }

  let map: Record<string, string> = {}
  if (badgeMap !== undefined) {
    // Raw JSON starts with `{` (after optional whitespace); base64url never contains `{`.
    const raw = badgeMap.trimStart().startsWith('{')
    const bytes = raw ? null : decodeBase64Url(badgeMap.trim())
    if (!raw && bytes === null) return fail('ENVELOPE_MALFORMED', null, 'X-Service-Badge-Map is neither JSON nor base64url')
    const parsed = parseJson(raw ? badgeMap : (bytes as Buffer))
    const value = parsed?.value
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
      return fail('ENVELOPE_MALFORMED', null, 'X-Service-Badge-Map is not a JSON object')
    }
    // JSON.parse defines `__proto__` as an own data property, so `value` is safe to keep as it is.
    for (const token of Object.values(value)) {
      if (typeof token !== 'string') return fail('ENVELOPE_MALFORMED', null, 'X-Service-Badge-Map values must be badge strings')
    }
    map = value as Record<string, string>
  }
  return { ok: true, envelopes, badgeMap: map }
}

const PAYLOAD_FIELDS = new Set([
  'envelope_id', 'issuer_did', 'subject_did', 'txn_id', 'parent_authority_hash', 'capability_class', 'constraints',
  'delegation_depth_remaining', 'enforcement_mode_min', 'issued_at', 'expires_at', 'issuer_badge_jti',
  'subject_badge_jti', 'prompt_summary',
])
const REQUIRED_FIELDS = [...PAYLOAD_FIELDS].filter((f) => f !== 'prompt_summary')
const HASH = /^[0-9a-f]{64}$/
// Identifiers: bounded like badge jtis (badge.ts claimsShapeValid) so they are safe to log and cache-key.
const MAX_ID_LENGTH = 128

const isId = (v: unknown): v is string => typeof v === 'string' && v.length > 0 && v.length <= MAX_ID_LENGTH
const isDidString = (v: unknown): v is string => typeof v === 'string' && isDid(v)
const isTime = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 0

function codePointsAtMost(text: string, max: number): boolean {
  if (text.length <= max) return true
  let count = 0
  for (const _ of text) if (++count > max) return false
  return true
}

interface DecodedEnvelope {
  readonly jws: string
  readonly kid: string
  readonly payload: EnvelopePayload
  readonly signingInput: Buffer
  readonly signature: Buffer
}

/** Phase 1, checks in the order written. */
function decodeEnvelope(jws: string, index: number): DecodedEnvelope | ChainFailure {
  // Size before any decoding, so an oversized token costs nothing.
  if (typeof jws !== 'string') return fail('ENVELOPE_MALFORMED', index, `envelope ${index} is not a string`)
  if (jws.length > MAX_ENVELOPE_JWS_BYTES) return fail('ENVELOPE_PAYLOAD_TOO_LARGE', index, `envelope ${index} is too large`)
  const first = jws.indexOf('.')
  const second = first < 0 ? -1 : jws.indexOf('.', first + 1)
  // Unpadded base64url of n bytes is ceil(4n/3) characters, so this is the decoded payload's length.
  if (second > first && Math.floor(((second - first - 1) * 3) / 4) > MAX_ENVELOPE_PAYLOAD_BYTES) {
    return fail('ENVELOPE_PAYLOAD_TOO_LARGE', index, `envelope ${index} payload exceeds ${MAX_ENVELOPE_PAYLOAD_BYTES} bytes`)
  }
  const decoded: DecodedJws | { error: 'MALFORMED' | 'ALG' } = decodeEdDsaJws(jws, MAX_ENVELOPE_JWS_BYTES)
  if ('error' in decoded) {
    // As for badges (docs/wire-contract.md §4), a non-EdDSA alg or a signature of the wrong size is a signature failure.
    return decoded.error === 'ALG'
      ? fail('ENVELOPE_SIGNATURE_INVALID', index, `envelope ${index} is not an EdDSA signature`)
      : fail('ENVELOPE_MALFORMED', index, `envelope ${index} is not a compact JWS`)
  }
  const { header, payload: p } = decoded
  if (header.typ !== ENVELOPE_TYP) return fail('ENVELOPE_MALFORMED', index, `envelope ${index} typ is not ${ENVELOPE_TYP}`)
  if (typeof header.kid !== 'string' || header.kid.length === 0) return fail('ENVELOPE_MALFORMED', index, `envelope ${index} has no kid`)

  const bad = (what: string): ChainFailure => fail('ENVELOPE_MALFORMED', index, `envelope ${index}: ${what}`)
  // A closed field set (docs/wire-contract.md §10): every signed member is one the verifier understands.
  for (const field of Object.keys(p)) if (!PAYLOAD_FIELDS.has(field)) return bad('unknown payload field')
  for (const field of REQUIRED_FIELDS) if (!(field in p)) return bad(`missing ${field}`)
  if (!isId(p.envelope_id)) return bad('envelope_id must be a string of 1-128 characters')
  if (!isDidString(p.issuer_did)) return bad('issuer_did is not a DID')
  if (!isDidString(p.subject_did)) return bad('subject_did is not a DID')
  if (!isId(p.txn_id)) return bad('txn_id must be a string of 1-128 characters')
  if (p.parent_authority_hash !== null && !(typeof p.parent_authority_hash === 'string' && HASH.test(p.parent_authority_hash))) {
    return bad('parent_authority_hash must be lower-case hex SHA-256 or null')
  }
  if (typeof p.constraints !== 'object' || p.constraints === null || Array.isArray(p.constraints)) return bad('constraints must be an object')
  // Any integer here: a negative one is the more specific ENVELOPE_DEPTH_EXCEEDED (docs/api.md §7), in the depth phase.
  if (!Number.isSafeInteger(p.delegation_depth_remaining)) return bad('delegation_depth_remaining must be an integer')
  if (p.enforcement_mode_min !== null && !isEnforcementMode(p.enforcement_mode_min)) {
    return bad('enforcement_mode_min must be a mode or null')
  }
  if (!isTime(p.issued_at) || !isTime(p.expires_at)) return bad('issued_at and expires_at must be Unix seconds')
  if (p.expires_at < p.issued_at) return bad('expires_at precedes issued_at')
  if (!isId(p.issuer_badge_jti)) return bad('issuer_badge_jti must be a string of 1-128 characters')
  if (!(isId(p.subject_badge_jti) || (p.subject_badge_jti === null && index === 0))) {
    return bad(index === 0 ? 'subject_badge_jti must be a jti or null' : 'subject_badge_jti may be null only at the root')
  }
  if (p.prompt_summary !== undefined && !(typeof p.prompt_summary === 'string' && codePointsAtMost(p.prompt_summary, MAX_PROMPT_SUMMARY_CHARS))) {
    return bad(`prompt_summary must be a string of at most ${MAX_PROMPT_SUMMARY_CHARS} characters`)
  }
  if (typeof p.capability_class !== 'string') return bad('capability_class must be a string')
  if (!isCapabilityClass(p.capability_class)) {
    return fail('ENVELOPE_CAPABILITY_INVALID', index, `envelope ${index} capability_class is not dot segments of [a-z][a-z0-9_]*`)
  }
  return { jws, kid: header.kid, payload: p as unknown as EnvelopePayload, signingInput: decoded.signingInput, signature: decoded.signature }
}

// Matched at a DID segment edge: `did:web:org.example` admits `did:web:org.example:agents:1` but not
// `did:web:org.example.evil.com` or `did:web:org.example%3A8443`.
function withinBoundary(did: string, prefix: string): boolean {
  if (!did.startsWith(prefix)) return false
  return did.length === prefix.length || prefix.endsWith(':') || did.charCodeAt(prefix.length) === 0x3a
}

const isPromiseLike = <T>(value: T | PromiseLike<T>): value is PromiseLike<T> =>
  typeof value === 'object' && value !== null && typeof (value as { then?: unknown }).then === 'function'

/** Root first. Awaits only when `ctx.resolveKey` returns a promise; did:web issuers resolve concurrently. */
export async function verifyChain(
  envelopes: readonly string[],
  badgeMap: Readonly<Record<string, string>>,
  ctx: ChainContext,
): Promise<VerifiedChain | ChainFailure> {
  const n = envelopes.length
  if (n > ctx.maxDepth) return fail('ENVELOPE_CHAIN_TOO_DEEP', null, `chain of ${n} envelopes exceeds the maximum depth ${ctx.maxDepth}`)
  if (n === 0) return fail('ENVELOPE_MALFORMED', null, 'empty chain')

  // Phase 1: decoding and shape, leaf first.
  const decoded = new Array<DecodedEnvelope>(n)
  for (let i = n - 1; i >= 0; i--) {
    const result = decodeEnvelope(envelopes[i] as string, i)
    if ('ok' in result) return result
    decoded[i] = result
  }
  const payloads = decoded.map((d) => d.payload)

  // Phase 2: org boundary (an issuer outside SERVICE_ORG_TRUST_BOUNDARY), before any key is resolved.
  const boundary = ctx.orgTrustBoundary
  if (boundary !== null && boundary !== '') {
    for (let i = n - 1; i >= 0; i--) {
      if (!withinBoundary(payloads[i]!.issuer_did, boundary)) return fail('ENVELOPE_ORG_BOUNDARY', i, `envelope ${i} issuer is outside the org trust boundary`)
    }
  }

  // Phase 3: signatures with a key bound to each issuer. A kid that is not a DID URL of issuer_did is
  // refused without asking the resolver (it could only be another DID's key).
  const keys = new Array<KeyObject | null>(n).fill(null)
  let pending: PromiseLike<unknown>[] | null = null
  for (let i = 0; i < n; i++) {
    const { kid, payload } = decoded[i]!
    if (!(kid.length > payload.issuer_did.length + 1 && kid.startsWith(payload.issuer_did) && kid.charCodeAt(payload.issuer_did.length) === 0x23)) continue
    let answer: KeyObject | null | Promise<KeyObject | null>
    try {
      answer = ctx.resolveKey(kid, payload.issuer_did)
    } catch {
      continue
    }
    if (isPromiseLike(answer)) {
      ;(pending ??= []).push(answer.then((key) => { keys[i] = key }, () => { keys[i] = null }))
    } else {
      keys[i] = answer
    }
  }
  if (pending !== null) await Promise.all(pending)
  for (let i = n - 1; i >= 0; i--) {
    const key = keys[i]
    // Only an Ed25519 public key: with `null` as the algorithm node would verify with other key types too.
    if (key === null || key === undefined || key.type !== 'public' || key.asymmetricKeyType !== 'ed25519') {
      return fail('ENVELOPE_KEY_NOT_BOUND', i, `envelope ${i} kid is not a key of its issuer`)
    }
    const { signingInput, signature } = decoded[i]!
    let valid = false
    try {
      valid = verify(null, signingInput, key, signature)
    } catch {
      valid = false
    }
    if (!valid) return fail('ENVELOPE_SIGNATURE_INVALID', i, `envelope ${i} signature is invalid`)
  }

  // Phase 4: time, with the badges' leeway (docs/wire-contract.md §4).
  const now = ctx.now
  for (let i = n - 1; i >= 0; i--) {
    const p = payloads[i]!
    if (p.expires_at + CLOCK_LEEWAY_SECONDS < now) return fail('ENVELOPE_EXPIRED', i, `envelope ${i} has expired`)
    if (p.issued_at - CLOCK_LEEWAY_SECONDS > now) return fail('ENVELOPE_NOT_YET_VALID', i, `envelope ${i} is not yet valid`)
  }

  // Phase 5: links.
  for (let i = n - 1; i >= 1; i--) {
    const p = payloads[i]!
    const parent = payloads[i - 1]!
    if (p.parent_authority_hash !== authorityHash(decoded[i - 1]!.jws)) return fail('ENVELOPE_CHAIN_BROKEN', i, `envelope ${i} does not name its parent's hash`)
    if (p.txn_id !== parent.txn_id) return fail('ENVELOPE_CHAIN_BROKEN', i, `envelope ${i} txn_id differs from its parent's`)
    if (p.issuer_did !== parent.subject_did) return fail('ENVELOPE_CHAIN_BROKEN', i, `envelope ${i} issuer is not its parent's subject`)
  }
  if (payloads[0]!.parent_authority_hash !== null) return fail('ENVELOPE_CHAIN_BROKEN', 0, 'the root names a parent the chain does not carry')

  // Phase 6: depth. "Not at least one less than the parent" is a narrowing rule, phase 7.
  for (let i = n - 1; i >= 0; i--) {
    if (payloads[i]!.delegation_depth_remaining < 0) return fail('ENVELOPE_DEPTH_EXCEEDED', i, `envelope ${i} remaining depth is negative`)
    if (i > 0 && payloads[i - 1]!.delegation_depth_remaining === 0) return fail('ENVELOPE_DEPTH_EXCEEDED', i, `envelope ${i - 1} allows no further delegation`)
  }

  // Phase 7: narrowing, a child never wider than its parent.
  for (let i = n - 1; i >= 1; i--) {
    const p = payloads[i]!
    const parent = payloads[i - 1]!
    const narrowing = (what: string): ChainFailure => fail('ENVELOPE_NARROWING_VIOLATION', i, `envelope ${i} ${what}`)
    if (p.capability_class !== parent.capability_class && !p.capability_class.startsWith(`${parent.capability_class}.`)) {
      return narrowing("capability_class is neither its parent's nor an extension of it")
    }
    if (p.expires_at > parent.expires_at) return narrowing('expires after its parent')
    if (p.issued_at < parent.issued_at) return narrowing('was issued before its parent')
    if (p.delegation_depth_remaining > parent.delegation_depth_remaining - 1) return narrowing("remaining depth is not at least one less than its parent's")
  }

  // Phase 8: the leaf's subject is the caller.
  const leaf = payloads[n - 1]!
  const caller = ctx.caller
  if (leaf.subject_did !== caller.did) return fail('ENVELOPE_BADGE_BINDING_FAILED', n - 1, "the leaf's subject is not the caller")

  // Phase 9: badge bindings, each DID's badge verified once.
  const verifiedJti = new Map<string, string | null>()
  const jtiOf = (did: string): string | null => {
    if (did === caller.did) return caller.jti
    let jti = verifiedJti.get(did)
    if (jti === undefined) {
      const token = Object.hasOwn(badgeMap, did) ? badgeMap[did] : undefined
      const badge = typeof token === 'string' ? ctx.verifyBadge(token) : null
      jti = badge !== null && badge.did === did ? badge.jti : null
      verifiedJti.set(did, jti)
    }
    return jti
  }
  for (let i = n - 1; i >= 0; i--) {
    const p = payloads[i]!
    const subjectJti = jtiOf(p.subject_did)
    if (subjectJti === null || (p.subject_badge_jti !== null && p.subject_badge_jti !== subjectJti)) {
      return fail('ENVELOPE_BADGE_BINDING_FAILED', i, `envelope ${i} subject has no verified badge matching subject_badge_jti`)
    }
    const issuerJti = jtiOf(p.issuer_did)
    if (issuerJti === null || p.issuer_badge_jti !== issuerJti) {
      return fail('ENVELOPE_BADGE_BINDING_FAILED', i, `envelope ${i} issuer has no verified badge matching issuer_badge_jti`)
    }
  }

  return { ok: true, envelopes: payloads, leaf, depth: n, modeMinimums: payloads.map((p) => p.enforcement_mode_min) }
}
