/**
 * IAL-1 badge issuance by proof of possession (RFC-003, docs/wire-contract.md §6) from the agent's side:
 * ask the registry for a challenge with an API key of the agent's organization, sign a `pop+jwt` proof
 * over it with the key that controls the DID, and redeem it (no credentials) for a badge.
 */
import { randomUUID, sign, type KeyObject } from 'node:crypto'
import { didKeyVerificationMethodId } from '../core/did-key.js'
import { POP_MAX_LIFETIME_SECONDS, POP_PROOF_TYP } from '../core/pop-proof.js'
import { SdkError } from './errors.js'
import { callRegistry, registryEndpoint } from './http.js'
import type { IssuedBadge } from '../core/badge.js'
import type { ChallengeView } from '../core/pop-proof.js'

/** The challenge the registry answers (docs/wire-contract.md §6; a bare object). */
export type PopChallenge = ChallengeView

/** A badge as the registry's issuance endpoints answer it (`data` of the envelope). */
export type { IssuedBadge }

/**
 * Proof lifetime. The registry allows at most 60 s (`exp_too_long`) and only 5 s of leeway on `exp`;
 * 30 s leaves room for a slow network without coming near the limit.
 */
export const POP_PROOF_LIFETIME_SECONDS = 30

/**
 * The `kid` a proof or envelope names for `did` when none is given: the did:key document's single
 * method, or `#key-1`, the method under which this registry publishes an agent's registered key in its
 * did:web document (docs/wire-contract.md §5). Other DIDs need an explicit kid.
 */
export function defaultKid(did: string): string {
  if (did.startsWith('did:key:')) return didKeyVerificationMethodId(did)
  if (did.startsWith('did:web:')) return `${did}#key-1`
  throw new SdkError('invalid_argument', `No default kid for ${did}; pass kid (a verification method id of the DID).`)
}

const b64json = (value: unknown): string => Buffer.from(JSON.stringify(value), 'utf8').toString('base64url')

/**
 * Signs the `pop+jwt` proof for a challenge exactly as the registry checks it (src/core/pop-proof.ts):
 * header `{alg: EdDSA, typ: pop+jwt, kid}`, claims `cid, nonce, sub, aud, htu, htm, iat, exp, jti` with
 * `exp` = `iat` + {@link POP_PROOF_LIFETIME_SECONDS}.
 */
export function buildPopProof(input: { challenge: Pick<PopChallenge, 'challenge_id' | 'nonce' | 'aud' | 'htu'>; did: string; privateKey: KeyObject; kid: string; now?: number }): string {
  const iat = input.now ?? Math.floor(Date.now() / 1000)
  const header = { alg: 'EdDSA', typ: POP_PROOF_TYP, kid: input.kid }
  const claims = {
    cid: input.challenge.challenge_id,
    nonce: input.challenge.nonce,
    sub: input.did,
    aud: input.challenge.aud,
    htu: input.challenge.htu,
    htm: 'POST',
    iat,
    exp: iat + Math.min(POP_PROOF_LIFETIME_SECONDS, POP_MAX_LIFETIME_SECONDS),
    jti: randomUUID(),
  }
  const signingInput = `${b64json(header)}.${b64json(claims)}`
  return `${signingInput}.${sign(null, Buffer.from(signingInput, 'ascii'), input.privateKey).toString('base64url')}`
}

/** Options of {@link requestPopBadge}. */
export interface PopBadgeRequest {
  /** Base URL of the registry's admin plane, e.g. `https://registry.example.com`. */
  registryUrl: string
  /** An API key of the organization that owns the agent holding `did`. Used for the challenge only. */
  apiKey: string
  /** The DID to prove control of (a did:key, or a did:web whose document lists the key). */
  did: string
  /** The Ed25519 private key controlling `did`. */
  privateKey: KeyObject
  /** Verification method id in the DID document (default: {@link defaultKid}). */
  kid?: string
  /** Challenge lifetime in seconds, 1-600 (registry default 300). */
  challengeTtl?: number
  /** Badge lifetime in seconds, 60-3600 (registry default 300). */
  badgeTtl?: number
  /** Audience(s) of the badge. */
  audience?: string | readonly string[]
  /** Time limit per registry call in milliseconds (default 10000). */
  timeoutMs?: number
}

function isChallenge(value: unknown): value is PopChallenge {
  const c = value as Record<string, unknown>
  return typeof value === 'object' && value !== null &&
    typeof c.challenge_id === 'string' && typeof c.nonce === 'string' && typeof c.aud === 'string' && typeof c.htu === 'string'
}

function isIssuedBadge(value: unknown): value is IssuedBadge {
  const b = value as Record<string, unknown>
  return typeof value === 'object' && value !== null && typeof b.token === 'string' && typeof b.jti === 'string' && typeof b.subject === 'string'
}

/** `POST /v1/agents/{did}/badge/challenge` with the API key; resolves to the challenge. */
export async function requestPopChallenge(options: Pick<PopBadgeRequest, 'registryUrl' | 'apiKey' | 'did' | 'challengeTtl' | 'badgeTtl' | 'audience' | 'timeoutMs'>): Promise<PopChallenge> {
  const body: Record<string, unknown> = {}
  if (options.badgeTtl !== undefined) body.badge_ttl = options.badgeTtl
  if (options.challengeTtl !== undefined) body.challenge_ttl = options.challengeTtl
  if (options.audience !== undefined) body.badge_aud = typeof options.audience === 'string' ? [options.audience] : [...options.audience]
  const answer = await callRegistry({
    method: 'POST',
    url: registryEndpoint(options.registryUrl, `/v1/agents/${encodeURIComponent(options.did)}/badge/challenge`),
    apiKey: options.apiKey,
    body,
    ...(options.timeoutMs === undefined ? {} : { timeoutMs: options.timeoutMs }),
  })
  if (!isChallenge(answer)) throw new SdkError('invalid_response', 'The registry answered the challenge request with something that is not a challenge.')
  if (answer.htm !== undefined && answer.htm !== 'POST') throw new SdkError('invalid_response', 'The challenge names an htm other than POST.')
  // The proof is signed over whatever htu the registry names; make sure it is a badge/pop endpoint, so
  // the key is never used to sign a proof meant for something else. (The DID in it may be spelled
  // canonically by the registry, e.g. %3A for a did:web port, so it is not compared byte for byte.)
  if (!/^https?:\/\/[^/]+(?:\/[^?#]*)?\/v1\/agents\/did:[^/?#]+\/badge\/pop$/.test(answer.htu)) {
    throw new SdkError('invalid_response', 'The challenge htu is not a badge/pop endpoint.')
  }
  return answer
}

/**
 * Runs the whole IAL-1 flow: challenge (with the API key), proof, redemption (without credentials).
 * Resolves to the issued badge (`ial` `'1'`, `cnf` naming the proven key). Any refusal rejects with
 * {@link SdkError} carrying the registry's code and status, e.g. `agent_not_found` 404,
 * `proof_verification_failed` 403, `rate_limit_exceeded` 429 (with `retryAfterSeconds`).
 */
export async function requestPopBadge(options: PopBadgeRequest): Promise<IssuedBadge> {
  if (typeof options.apiKey !== 'string' || options.apiKey.trim() === '') throw new SdkError('invalid_argument', 'apiKey is required.')
  if (typeof options.did !== 'string' || !options.did.startsWith('did:')) throw new SdkError('invalid_argument', 'did must be a DID.')
  if (options.privateKey.type !== 'private' || options.privateKey.asymmetricKeyType !== 'ed25519') {
    throw new SdkError('invalid_argument', 'privateKey must be an Ed25519 private key.')
  }
  const kid = options.kid ?? defaultKid(options.did)
  const challenge = await requestPopChallenge(options)
  const proof = buildPopProof({ challenge, did: options.did, privateKey: options.privateKey, kid })
  const answer = await callRegistry({
    method: 'POST',
    url: registryEndpoint(options.registryUrl, `/v1/agents/${encodeURIComponent(options.did)}/badge/pop`),
    body: { challenge_id: challenge.challenge_id, proof_jws: proof },
    ...(options.timeoutMs === undefined ? {} : { timeoutMs: options.timeoutMs }),
  })
  const data = (answer as { data?: unknown }).data
  if (!isIssuedBadge(data)) throw new SdkError('invalid_response', 'The registry answered the proof with something that is not a badge.')
  return data
}
