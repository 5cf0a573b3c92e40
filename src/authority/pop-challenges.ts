// IAL-1 badge issuance by proof of possession: docs/wire-contract.md §6, docs/api.md §2.9 and §3.2.
import { randomBytes, randomUUID } from 'node:crypto'
import { agentDidWeb, ownAgentIdFromDid } from '../core/did.js'
import { ServiceError } from '../core/errors.js'
import { checkPopProofClaims, verifyPopProofKey, type ChallengeView, type PopClaimErrorCode, type PopKeyErrorCode } from '../core/pop-proof.js'
import type { ResolvedKeys } from '../core/did-document.js'
import type { Database } from '../db/database.js'
import * as agents from '../db/repositories/agents.js'
import type { AgentRow } from '../db/repositories/agents.js'
import * as challenges from '../db/repositories/pop-challenges.js'
import type { Principal } from '../core/principal.js'
import { findOrgAgent, issueBadgeInTransaction, parseAudience, parseTtl, type AuthorityContext, type IssuedBadge } from './badge-authority.js'
import { DidResolutionError } from './did-resolver.js'
import { isUuid } from '../core/uuid.js'

export const CHALLENGE_RATE_LIMIT = 10
export const CHALLENGE_RATE_WINDOW_SECONDS = 300
export const MIN_CHALLENGE_TTL = 1
export const MAX_CHALLENGE_TTL = 600
export const DEFAULT_CHALLENGE_TTL = 300
export const MAX_FAILED_PROOFS = 5
/** So that a late proof is still told `challenge_expired` rather than `challenge_not_found`. */
export const EXPIRED_CHALLENGE_RETENTION_SECONDS = 3600
/** A level of 2 or more vouches for a DNS-verified domain, which a key proof says nothing about. */
export const IAL1_TRUST_LEVEL = 1

const CHALLENGE_ID = /^ch-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/
// docs/wire-contract.md §6 asks for at least 32 random bytes.
const NONCE_BYTES = 32

export interface PopAuthorityContext extends AuthorityContext {
  readonly resolver: { resolve(did: string): Promise<ResolvedKeys> }
}

export interface ChallengeRequest {
  badge_ttl?: unknown
  challenge_ttl?: unknown
  badge_aud?: unknown
}

export type { ChallengeView }

export interface ChallengeRateLimit {
  limit: number
  remaining: number
  /** Seconds until the oldest challenge of the window leaves it (at least 1). */
  resetSeconds: number
}

export type ChallengeOutcome =
  | { ok: true; challenge: ChallengeView; rateLimit: ChallengeRateLimit }
  | { ok: false; rateLimit: ChallengeRateLimit; message: string }

export interface ProofRequest {
  challenge_id: string
  proof_jws: string
}

export function popEndpointUrl(issuer: string, did: string): string {
  return `${issuer}/v1/agents/${did}/badge/pop`
}

/** One spelling per DID: this registry's did:web in any port encoding and case becomes its canonical form. */
export function canonicalDid(registryDidHost: string, did: string): string {
  const own = ownAgentIdFromDid(registryDidHost, did) ?? ownAgentIdFromDid(registryDidHost.replace('%3A', ':'), did)
  return own !== null && isUuid(own) ? agentDidWeb(registryDidHost, own.toLowerCase()) : did
}

function agentHoldsDid(ctx: Pick<AuthorityContext, 'registryDidHost'>, agent: AgentRow, did: string): boolean {
  return did === agent.did || did === agentDidWeb(ctx.registryDidHost, agent.id)
}

function parseChallengeTtl(value: unknown): number {
  if (value === undefined) return DEFAULT_CHALLENGE_TTL
  if (!Number.isInteger(value) || (value as number) < MIN_CHALLENGE_TTL || (value as number) > MAX_CHALLENGE_TTL) {
    throw new ServiceError('invalid_challenge_ttl', `challenge_ttl must be an integer between ${MIN_CHALLENGE_TTL} and ${MAX_CHALLENGE_TTL} seconds.`)
  }
  return value as number
}

function secondsUntilLeaving(window: challenges.ChallengeWindow, oldest: Date): number {
  const leavesAt = oldest.getTime() + CHALLENGE_RATE_WINDOW_SECONDS * 1000
  return Math.max(1, Math.ceil((leavesAt - window.now.getTime()) / 1000))
}

/** The per-DID limit is counted under an advisory lock, so concurrent requests cannot both take the last slot. */
export async function createChallenge(
  ctx: PopAuthorityContext, principal: Principal, pathDid: string, body: ChallengeRequest,
): Promise<ChallengeOutcome> {
  const badgeTtl = parseTtl(body.badge_ttl, 'badge_ttl')
  const challengeTtl = parseChallengeTtl(body.challenge_ttl)
  const badgeAud = parseAudience(body.badge_aud, 'badge_aud')
  // The path names a DID (docs/wire-contract.md §6); the agent-UUID spelling of the IAL-0 route is not offered.
  if (!pathDid.startsWith('did:')) throw new ServiceError('agent_not_found', 'No agent of this organization holds that DID.')
  const did = canonicalDid(ctx.registryDidHost, pathDid)

  return ctx.db.transaction(async (tx) => {
    const agent = await findOrgAgent(tx, ctx, principal.orgId, did)
    if (agent === null || !agentHoldsDid(ctx, agent, did)) {
      throw new ServiceError('agent_not_found', 'No agent of this organization holds that DID.')
    }
    if (agent.status !== 'enabled') throw new ServiceError('agent_disabled')

    await challenges.lockChallengeWindow(tx, did)
    const window = await challenges.challengeWindow(tx, did, CHALLENGE_RATE_WINDOW_SECONDS)
    if (window.count >= CHALLENGE_RATE_LIMIT) {
      const retryAfter = secondsUntilLeaving(window, window.oldest ?? window.now)
      return {
        ok: false,
        rateLimit: { limit: CHALLENGE_RATE_LIMIT, remaining: 0, resetSeconds: retryAfter },
        message: `At most ${CHALLENGE_RATE_LIMIT} challenges per DID per ${CHALLENGE_RATE_WINDOW_SECONDS / 60} minutes; retry in ${retryAfter} seconds.`,
      }
    }

    const row = await challenges.insertChallenge(tx, {
      id: `ch-${randomUUID()}`,
      did,
      agentId: agent.id,
      orgId: agent.org_id,
      nonce: randomBytes(NONCE_BYTES).toString('base64url'),
      aud: ctx.issuer,
      htu: popEndpointUrl(ctx.issuer, did),
      badgeAud,
      badgeTtl,
      challengeTtl,
    })
    const expiresAt = row.expires_at.toISOString()
    return {
      ok: true,
      challenge: {
        challenge_id: row.id,
        nonce: row.nonce,
        challenge_expires_at: expiresAt,
        expires_at: expiresAt,
        aud: row.aud,
        htu: row.htu,
        htm: 'POST',
        badge_aud: row.badge_aud,
        badge_ttl: row.badge_ttl,
      },
      rateLimit: {
        limit: CHALLENGE_RATE_LIMIT,
        remaining: CHALLENGE_RATE_LIMIT - window.count - 1,
        resetSeconds: secondsUntilLeaving(window, window.oldest ?? row.created_at),
      },
    }
  })
}

// Without a registered domain, what the proven DID itself establishes: a did:web's host, else the DID.
export function ial1Domain(agent: AgentRow, did: string): string {
  if (agent.domain !== null && agent.domain !== '') return agent.domain.toLowerCase()
  const web = /^did:web:([^:]+)/.exec(did)
  if (web === null) return did
  try {
    return decodeURIComponent(web[1] as string).toLowerCase().replace(/:\d+$/, '')
  } catch {
    // a percent sequence that is not UTF-8 (the DID resolved, so this is theoretical): keep the DID
    return did
  }
}

/** Cheap checks first (docs/wire-contract.md §6): the DID is resolved only for a proof whose claims all hold. */
export async function redeemProof(ctx: PopAuthorityContext, pathDid: string, body: ProofRequest): Promise<IssuedBadge> {
  if (!CHALLENGE_ID.test(body.challenge_id)) throw new ServiceError('invalid_challenge_id')
  const challenge = await challenges.findChallenge(ctx.db, body.challenge_id)
  if (challenge === null) throw new ServiceError('challenge_not_found')
  if (canonicalDid(ctx.registryDidHost, pathDid) !== challenge.did) {
    throw new ServiceError('subject_mismatch', 'The DID in the path is not the DID of the challenge.')
  }
  if (challenge.used_at !== null) throw new ServiceError('challenge_used')
  if (challenge.expired) throw new ServiceError('challenge_expired')

  // The fifth failed proof burns the challenge, so a party that learnt its id cannot keep guessing at it.
  const failed = async (code: PopClaimErrorCode | PopKeyErrorCode, message: string): Promise<never> => {
    await challenges.recordFailedProof(ctx.db, challenge.id, MAX_FAILED_PROOFS)
    throw new ServiceError(code, message)
  }

  const checked = checkPopProofClaims(body.proof_jws, {
    challengeId: challenge.id,
    nonce: challenge.nonce,
    did: challenge.did,
    audience: challenge.aud,
    htu: challenge.htu,
    challengeCreatedAt: Math.floor(challenge.created_at.getTime() / 1000),
    now: Math.floor((ctx.now ?? Date.now)() / 1000),
  })
  if (!checked.ok) return failed(checked.code, checked.message)

  let resolved: ResolvedKeys
  try {
    resolved = await ctx.resolver.resolve(challenge.did)
  } catch (error) {
    // Not counted as a failed proof: the proof was never judged, and an outage of the DID's host is
    // no evidence against the prover.
    if (error instanceof DidResolutionError) {
      throw new ServiceError('did_resolution_failed', `The DID could not be resolved: ${error.message}`, undefined, { cause: error })
    }
    throw error
  }
  const key = verifyPopProofKey(checked.proof, resolved)
  if (!key.ok) return failed(key.code, key.message)

  const kid = checked.proof.kid
  return ctx.db.transaction(async (tx) => {
    const redeemed = await challenges.redeemChallenge(tx, challenge.id)
    if (redeemed === null) {
      // Lost the race to a concurrent redemption (or a burn), or expired while the proof was checked.
      const current = await challenges.findChallenge(tx, challenge.id)
      if (current !== null && current.used_at === null && current.expired) throw new ServiceError('challenge_expired')
      throw new ServiceError('challenge_used')
    }
    const agent = await agents.lockAgentForIssuance(tx, redeemed.org_id, redeemed.agent_id)
    if (agent === null) throw new ServiceError('agent_not_found')
    // The DID may have been taken off the agent since the challenge was made: the badge would then
    // bind the agent to an identity the registry no longer gives it.
    if (!agentHoldsDid(ctx, agent, redeemed.did)) throw new ServiceError('subject_mismatch', 'The agent no longer holds the DID of the challenge.')
    // Throwing rolls the redemption back, so the challenge stays usable once the agent is enabled again.
    if (agent.status !== 'enabled') throw new ServiceError('agent_disabled')
    return issueBadgeInTransaction(tx, ctx, {
      agent,
      subject: redeemed.did,
      level: IAL1_TRUST_LEVEL,
      ial: '1',
      domain: ial1Domain(agent, redeemed.did),
      ttl: redeemed.badge_ttl,
      audience: redeemed.badge_aud,
      cnf: { kid, jwk: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(key.publicKey).toString('base64url'), kid } },
      popChallengeId: redeemed.id,
    })
  })
}

export async function deleteExpiredChallenges(db: Database): Promise<number> {
  return challenges.deleteChallengesExpiredBefore(db, EXPIRED_CHALLENGE_RETENTION_SECONDS)
}

/** Sweeps never overlap and the timer does not keep the process alive; returns the stop function. */
export function startChallengeCleanup(db: Database, intervalMs: number, onError?: (e: unknown) => void): () => void {
  let running = false
  let stopped = false
  const timer = setInterval(() => {
    if (running || stopped) return
    running = true
    deleteExpiredChallenges(db)
      .catch((error: unknown) => {
        if (!stopped) onError?.(error)
      })
      .finally(() => {
        running = false
      })
  }, intervalMs)
  timer.unref()
  return () => {
    stopped = true
    clearInterval(timer)
  }
}
