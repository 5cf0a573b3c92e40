/**
 * Delegation envelopes (RFC-008, docs/wire-contract.md §10) from the delegating agent's side: mint a root
 * envelope, mint a child under a parent, and look inside one. The child is checked locally against the
 * narrowing rules the gateway enforces, so a delegation that the gateway would refuse fails here, at
 * the party that made it, with the gateway's code and a message that says which rule it breaks.
 */
import { createPublicKey, randomUUID, type KeyObject } from 'node:crypto'
import { isCapabilityClass } from '../core/capability-class.js'
import { decodeDidKey } from '../core/did-key.js'
import { ENFORCEMENT_MODES, isEnforcementMode, type EnforcementMode } from '../core/enforcement-mode.js'
import {
  authorityHash,
  MAX_ENVELOPE_PAYLOAD_BYTES,
  MAX_PROMPT_SUMMARY_CHARS,
  signEnvelope,
  type EnvelopePayload,
} from '../core/envelope.js'
import { uuidv7 } from '../core/uuid.js'
import { SdkError, type SdkLocalErrorCode } from './errors.js'
import { defaultKid } from './pop.js'

// The modes an envelope may require as a minimum (the effective mode is the strictest in the chain).
export { ENFORCEMENT_MODES, type EnforcementMode }
// The gateway bounds ids (jtis, txn_id) to 128 characters (core/envelope.ts); longer ones are refused here.
const MAX_ID_LENGTH = 128

/** The delegating party: it signs the envelope. */
export interface EnvelopeIssuer {
  did: string
  privateKey: KeyObject
  /** DID URL of the signing key (default: the did:key method, or `#key-1` of a did:web). */
  kid?: string
  /** `jti` of the issuer's badge, which the gateway finds in the badge map. */
  badgeJti: string
}

/** The party the authority is delegated to. */
export interface EnvelopeSubject {
  did: string
  /** `jti` of the subject's badge; may be null only at the root (docs/wire-contract.md §10). */
  badgeJti: string | null
}

/** Options of {@link mintRootEnvelope}. */
export interface RootEnvelopeOptions {
  issuer: EnvelopeIssuer
  subject: EnvelopeSubject
  /** Dot-separated capability class, e.g. `payments.refund`. */
  capabilityClass: string
  constraints?: Record<string, unknown>
  /** How many further delegations the subject may make (integer ≥ 0). */
  depthRemaining: number
  /** Lifetime in seconds. */
  ttlSeconds: number
  enforcementModeMin?: EnforcementMode | null
  /** The transaction id the whole chain carries (default: a fresh UUIDv7, as the gateway makes them). */
  txnId?: string
  promptSummary?: string
  /** Unix seconds (default: the clock). */
  now?: number
}

/** Options of {@link mintChildEnvelope}: the parent fixes the transaction and bounds everything else. */
export interface ChildEnvelopeOptions {
  /** Must be the parent's subject. */
  issuer: EnvelopeIssuer
  subject: EnvelopeSubject & { badgeJti: string }
  /** Default: the parent's class. Must equal it or extend it with more segments. */
  capabilityClass?: string
  /** Default: the parent's constraints, so restrictions are carried down unless replaced on purpose. */
  constraints?: Record<string, unknown>
  /** Default: one less than the parent's; must be at most that. */
  depthRemaining?: number
  /** Default: until the parent expires; must not outlive it. */
  ttlSeconds?: number
  enforcementModeMin?: EnforcementMode | null
  promptSummary?: string
  now?: number
}

/** A minted envelope: the compact JWS and what it says. */
export interface MintedEnvelope {
  jws: string
  payload: EnvelopePayload
}

/** An envelope opened without any check of its signature. */
export interface InspectedEnvelope {
  /** Always false: nothing about the envelope was verified. */
  verified: false
  header: Record<string, unknown>
  payload: Record<string, unknown>
}

const isInt = (v: unknown): v is number => Number.isSafeInteger(v)
const isText = (v: unknown): v is string => typeof v === 'string' && v !== ''
const isId = (v: unknown): v is string => isText(v) && v.length <= MAX_ID_LENGTH

function fail(code: SdkLocalErrorCode, message: string): never {
  throw new SdkError(code, message)
}

function nowSeconds(now: number | undefined): number {
  return now ?? Math.floor(Date.now() / 1000)
}

function checkIssuerKey(issuer: EnvelopeIssuer): string {
  if (typeof issuer.did !== 'string' || !issuer.did.startsWith('did:')) fail('invalid_argument', 'issuer.did must be a DID.')
  if (issuer.privateKey.type !== 'private' || issuer.privateKey.asymmetricKeyType !== 'ed25519') {
    fail('invalid_argument', 'issuer.privateKey must be an Ed25519 private key.')
  }
  const kid = issuer.kid ?? defaultKid(issuer.did)
  // The gateway binds the key to the issuer by the kid's DID (docs/wire-contract.md §10, ENVELOPE_KEY_NOT_BOUND).
  if (!kid.startsWith(`${issuer.did}#`)) fail('ENVELOPE_KEY_NOT_BOUND', `The kid ${kid} is not a key of the issuer ${issuer.did}.`)
  // For a did:key the key is in the DID: a mismatch is certain to fail at the gateway, so catch it here.
  if (issuer.did.startsWith('did:key:')) {
    const ownX = (createPublicKey(issuer.privateKey).export({ format: 'jwk' }) as { x?: string }).x
    let didX: string | null = null
    try {
      didX = Buffer.from(decodeDidKey(issuer.did)).toString('base64url')
    } catch {
      didX = null
    }
    if (didX === null || didX !== ownX) fail('ENVELOPE_KEY_NOT_BOUND', `The private key is not the key of ${issuer.did}.`)
  }
  if (!isText(issuer.badgeJti)) fail('invalid_argument', 'issuer.badgeJti is required.')
  return kid
}

function checkCommon(payload: EnvelopePayload): void {
  if (typeof payload.subject_did !== 'string' || !payload.subject_did.startsWith('did:')) fail('invalid_argument', 'subject.did must be a DID.')
  if (typeof payload.capability_class !== 'string' || !isCapabilityClass(payload.capability_class)) {
    fail('ENVELOPE_CAPABILITY_INVALID', `The capability class "${payload.capability_class}" is not dot segments of [a-z][a-z0-9_]*.`)
  }
  if (typeof payload.constraints !== 'object' || payload.constraints === null || Array.isArray(payload.constraints)) {
    fail('invalid_argument', 'constraints must be a JSON object.')
  }
  if (!Number.isSafeInteger(payload.delegation_depth_remaining) || payload.delegation_depth_remaining < 0) {
    fail('invalid_argument', 'depthRemaining must be an integer of at least 0.')
  }
  if (payload.enforcement_mode_min !== null && !isEnforcementMode(payload.enforcement_mode_min)) {
    fail('invalid_argument', `enforcementModeMin must be one of ${ENFORCEMENT_MODES.join(', ')}.`)
  }
  // Counted in code points, as the gateway counts them.
  if (payload.prompt_summary !== undefined && (typeof payload.prompt_summary !== 'string' || [...payload.prompt_summary].length > MAX_PROMPT_SUMMARY_CHARS)) {
    fail('invalid_argument', `promptSummary must be a string of at most ${MAX_PROMPT_SUMMARY_CHARS} characters.`)
  }
  if (!isId(payload.txn_id)) fail('invalid_argument', `txnId must be a string of 1-${MAX_ID_LENGTH} characters.`)
  if (!isId(payload.issuer_badge_jti)) fail('invalid_argument', `issuer.badgeJti must be a string of 1-${MAX_ID_LENGTH} characters.`)
  if (payload.subject_badge_jti !== null && !isId(payload.subject_badge_jti)) {
    fail('invalid_argument', `subject.badgeJti must be a string of 1-${MAX_ID_LENGTH} characters.`)
  }
  if (payload.expires_at <= payload.issued_at) fail('invalid_argument', 'The envelope must expire after it is issued.')
  const size = Buffer.byteLength(JSON.stringify(payload), 'utf8')
  if (size > MAX_ENVELOPE_PAYLOAD_BYTES) {
    fail('ENVELOPE_PAYLOAD_TOO_LARGE', `The envelope payload is ${size} bytes; at most ${MAX_ENVELOPE_PAYLOAD_BYTES} are accepted.`)
  }
}

function checkTtl(ttl: number): void {
  if (!Number.isSafeInteger(ttl) || ttl < 1) fail('invalid_argument', 'ttlSeconds must be a positive integer.')
}

/**
 * Mints the root envelope of a chain (`parent_authority_hash` null): the issuer delegates
 * `capabilityClass` to the subject for `ttlSeconds`.
 */
export function mintRootEnvelope(options: RootEnvelopeOptions): MintedEnvelope {
  const kid = checkIssuerKey(options.issuer)
  checkTtl(options.ttlSeconds)
  const now = nowSeconds(options.now)
  const payload: EnvelopePayload = {
    envelope_id: randomUUID(),
    issuer_did: options.issuer.did,
    subject_did: options.subject.did,
    txn_id: options.txnId ?? uuidv7(now * 1000),
    parent_authority_hash: null,
    capability_class: options.capabilityClass,
    constraints: options.constraints ?? {},
    delegation_depth_remaining: options.depthRemaining,
    enforcement_mode_min: options.enforcementModeMin ?? null,
    issued_at: now,
    expires_at: now + options.ttlSeconds,
    issuer_badge_jti: options.issuer.badgeJti,
    subject_badge_jti: options.subject.badgeJti,
    ...(options.promptSummary === undefined ? {} : { prompt_summary: options.promptSummary }),
  }
  checkCommon(payload)
  return { jws: signEnvelope(payload, { privateKey: options.issuer.privateKey, kid }), payload }
}


/** The parent's payload, with the fields a child depends on checked for type (not for signature). */
function parentPayload(parentJws: string): EnvelopePayload {
  const { payload } = inspectEnvelope(parentJws)
  const p = payload
  const constraintsOk = typeof p.constraints === 'object' && p.constraints !== null && !Array.isArray(p.constraints)
  if (
    !isText(p.subject_did) || !isText(p.txn_id) || !isText(p.capability_class) || !constraintsOk ||
    !isInt(p.delegation_depth_remaining) || !isInt(p.issued_at) || !isInt(p.expires_at) ||
    !(p.subject_badge_jti === null || isText(p.subject_badge_jti))
  ) {
    fail('ENVELOPE_MALFORMED', 'The parent envelope lacks or mistypes subject_did, txn_id, capability_class, constraints, delegation_depth_remaining, issued_at, expires_at or subject_badge_jti.')
  }
  return p as unknown as EnvelopePayload
}

/**
 * Mints a child envelope under `parentJws`: same `txn_id`, `parent_authority_hash` = SHA-256 of the
 * parent JWS, issued now. Refuses, with the code the gateway would answer, a child that would not
 * verify: an issuer other than the parent's subject or a different issuer badge (`ENVELOPE_CHAIN_BROKEN`,
 * `ENVELOPE_BADGE_BINDING_FAILED`), a parent with no depth left (`ENVELOPE_DEPTH_EXCEEDED`), and a
 * wider class, a longer life or more remaining depth than the parent allows
 * (`ENVELOPE_NARROWING_VIOLATION`). The parent's signature is not verified here (its issuer's key is
 * not at hand); the gateway verifies the whole chain.
 */
export function mintChildEnvelope(parentJws: string, options: ChildEnvelopeOptions): MintedEnvelope {
  const parent = parentPayload(parentJws)
  const kid = checkIssuerKey(options.issuer)
  const now = nowSeconds(options.now)
  if (options.issuer.did !== parent.subject_did) {
    fail('ENVELOPE_CHAIN_BROKEN', `Only the parent's subject (${parent.subject_did}) may delegate under it, not ${options.issuer.did}.`)
  }
  // The badge map holds one badge per DID, so both bindings of this DID must name the same badge.
  if (parent.subject_badge_jti !== null && parent.subject_badge_jti !== options.issuer.badgeJti) {
    fail('ENVELOPE_BADGE_BINDING_FAILED', `The parent binds ${parent.subject_did} to badge ${parent.subject_badge_jti}, not ${options.issuer.badgeJti}.`)
  }
  if (!isText(options.subject.badgeJti)) fail('invalid_argument', 'subject.badgeJti is required below the root.')
  if (parent.delegation_depth_remaining < 1) {
    fail('ENVELOPE_DEPTH_EXCEEDED', 'The parent allows no further delegation (delegation_depth_remaining is 0).')
  }
  if (parent.expires_at <= now) fail('ENVELOPE_EXPIRED', 'The parent envelope has expired.')

  const capabilityClass = options.capabilityClass ?? parent.capability_class
  if (capabilityClass !== parent.capability_class && !capabilityClass.startsWith(`${parent.capability_class}.`)) {
    fail('ENVELOPE_NARROWING_VIOLATION', `The class ${capabilityClass} is not ${parent.capability_class} or a narrower ${parent.capability_class}.* class.`)
  }
  const depth = options.depthRemaining ?? parent.delegation_depth_remaining - 1
  if (isInt(depth) && depth > parent.delegation_depth_remaining - 1) {
    fail('ENVELOPE_NARROWING_VIOLATION', `The remaining depth may be at most ${parent.delegation_depth_remaining - 1} under this parent, not ${depth}.`)
  }
  // A parent minted on a clock slightly ahead would make "now" look earlier than the parent; a child
  // issued before its parent is refused, so it is dated no earlier than the parent.
  const issuedAt = Math.max(now, parent.issued_at)
  let expiresAt = parent.expires_at
  if (options.ttlSeconds !== undefined) {
    checkTtl(options.ttlSeconds)
    expiresAt = issuedAt + options.ttlSeconds
    if (expiresAt > parent.expires_at) {
      fail('ENVELOPE_NARROWING_VIOLATION', `The child would expire ${expiresAt - parent.expires_at} s after its parent; at most ${parent.expires_at - issuedAt} s are left.`)
    }
  }
  const payload: EnvelopePayload = {
    envelope_id: randomUUID(),
    issuer_did: options.issuer.did,
    subject_did: options.subject.did,
    txn_id: parent.txn_id,
    parent_authority_hash: authorityHash(parentJws),
    capability_class: capabilityClass,
    constraints: options.constraints ?? parent.constraints,
    delegation_depth_remaining: depth,
    enforcement_mode_min: options.enforcementModeMin ?? null,
    issued_at: issuedAt,
    expires_at: expiresAt,
    issuer_badge_jti: options.issuer.badgeJti,
    subject_badge_jti: options.subject.badgeJti,
    ...(options.promptSummary === undefined ? {} : { prompt_summary: options.promptSummary }),
  }
  checkCommon(payload)
  return { jws: signEnvelope(payload, { privateKey: options.issuer.privateKey, kid }), payload }
}

function decodeJsonSegment(segment: string, what: string): Record<string, unknown> {
  let value: unknown
  try {
    value = JSON.parse(Buffer.from(segment, 'base64url').toString('utf8'))
  } catch {
    return fail('ENVELOPE_MALFORMED', `The envelope ${what} is not base64url JSON.`)
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) fail('ENVELOPE_MALFORMED', `The envelope ${what} is not a JSON object.`)
  return value as Record<string, unknown>
}

/**
 * Decodes an envelope's header and payload WITHOUT verifying anything: not the signature, not the
 * issuer's key, not the times. For display and debugging only; never base a decision on the result.
 */
export function inspectEnvelope(jws: string): InspectedEnvelope {
  if (typeof jws !== 'string') return fail('ENVELOPE_MALFORMED', 'An envelope is a compact JWS string.')
  const parts = jws.trim().split('.')
  if (parts.length !== 3 || parts.some((p) => !/^[A-Za-z0-9_-]*$/.test(p)) || parts[0] === '' || parts[1] === '') {
    fail('ENVELOPE_MALFORMED', 'An envelope is a compact JWS: three base64url parts separated by dots.')
  }
  return { verified: false, header: decodeJsonSegment(parts[0] as string, 'header'), payload: decodeJsonSegment(parts[1] as string, 'payload') }
}
