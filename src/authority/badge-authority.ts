/**
 * The badge authority (docs/api.md §2.4-2.5, §3.3, §4.4; docs/wire-contract.md §4): IAL-0 issuance, the issuance step
 * shared with IAL-1, verification with revocation, revocation and the public revocation list.
 * No Fastify here.
 */
import { randomUUID } from 'node:crypto'
import { buildBadgeClaims, signBadge, verifyBadge, type BadgeClaims, type BadgeVerification, type IssuedBadge } from '../core/badge.js'
import type { TrustLevel } from '../core/trust-level.js'
import { takeScopedEntry, type AuditScope } from '../core/audit.js'
import { isDid, ownAgentIdFromDid } from '../core/did.js'
import { ServiceError } from '../core/errors.js'
import { decodeCursor, encodeCursor, parseTimestamp } from '../core/pagination.js'
import type { Database, Queryable } from '../db/database.js'
import * as agents from '../db/repositories/agents.js'
import type { AgentRow } from '../db/repositories/agents.js'
import * as badges from '../db/repositories/badges.js'
import type { Principal } from '../core/principal.js'
import { parseTrustLevel } from './domain-validation.js'
import type { IssuanceBatcher } from './issuance-batcher.js'
import type { KeyRing, KeyRingSnapshot } from './key-ring.js'
import { isUuid } from '../core/uuid.js'
import { REVOCATION_CHANNEL } from '../core/notify-channels.js'
import { normalizeDomain } from '../core/domain-name.js'

export const MIN_BADGE_TTL = 60
export const MAX_BADGE_TTL = 3600
export const DEFAULT_BADGE_TTL = 300
export const MAX_AUDIENCES = 10

export interface AuthorityContext {
  readonly db: Database
  readonly keyRing: KeyRing
  /** CA_ISSUER_URL: `iss` of every badge. */
  readonly issuer: string
  readonly registryDidHost: string
  /** Groups concurrent IAL-0 issuances into one statement and commit. */
  readonly issuance: IssuanceBatcher
  /** Unix milliseconds; injectable for tests. */
  readonly now?: () => number
  /** The audit scope of the request issuing (its record joins the batch's statement). */
  readonly audit?: AuditScope | null
}

export type { IssuedBadge }

export interface Ial0Request {
  domain?: unknown
  trustLevel?: unknown
  audience?: unknown
  ttl?: unknown
  mode?: unknown
  badge_ttl?: unknown
  badge_aud?: unknown
}

const nowMs = (ctx: AuthorityContext): number => (ctx.now ?? Date.now)()

/** The own-registry did:web of an agent, spelled with `%3A` or (once URL-decoded) `:` before the port. */
function ownAgentId(registryDidHost: string, did: string): string | null {
  return ownAgentIdFromDid(registryDidHost, did) ?? ownAgentIdFromDid(registryDidHost.replace('%3A', ':'), did)
}

/** Finds the caller org's agent named by a UUID or a DID (explicit, or this registry's did:web). */
export async function findOrgAgent(q: Queryable, ctx: Pick<AuthorityContext, 'registryDidHost'>, orgId: string, idOrDid: string): Promise<AgentRow | null> {
  const ref = agentReference(ctx, idOrDid)
  if (ref === null) return null
  return ref.id !== null ? agents.findAgent(q, orgId, ref.id) : agents.findOrgAgentByDid(q, orgId, ref.did as string)
}

function pickAlias<T>(a: T | undefined, b: T | undefined, name: string, same: (x: T, y: T) => boolean): T | undefined {
  if (a !== undefined && b !== undefined && !same(a, b)) {
    throw new ServiceError('conflicting_fields', `${name} was given twice with different values.`)
  }
  return a ?? b
}

export function parseTtl(value: unknown, field: string): number {
  if (value === undefined) return DEFAULT_BADGE_TTL
  if (!Number.isInteger(value) || (value as number) < MIN_BADGE_TTL || (value as number) > MAX_BADGE_TTL) {
    throw new ServiceError('invalid_ttl', `${field} must be an integer between ${MIN_BADGE_TTL} and ${MAX_BADGE_TTL} seconds.`)
  }
  return value as number
}

export function parseAudience(value: unknown, field: string): string[] {
  if (value === undefined) return []
  if (!Array.isArray(value) || value.length > MAX_AUDIENCES || !value.every((a) => typeof a === 'string' && a.length > 0 && a.length <= 512)) {
    throw new ServiceError('invalid_request', `${field} must be an array of at most ${MAX_AUDIENCES} non-empty strings.`)
  }
  return [...new Set(value as string[])]
}

/** Validates an IAL-0 request body (both spellings of docs/api.md §4.4). */
export function parseIal0Request(body: Ial0Request): { domain: string; level: number; ttl: number; audience: string[] } {
  if (body.mode !== undefined && body.mode !== 'ial0') throw new ServiceError('invalid_mode')
  if (typeof body.domain !== 'string' || body.domain.trim() === '') throw new ServiceError('missing_domain')
  const domain = normalizeDomain(body.domain.trim())
  const level = body.trustLevel === undefined ? 1 : parseTrustLevel(body.trustLevel)
  const ttl = parseTtl(pickAlias(body.ttl, body.badge_ttl, 'ttl / badge_ttl', (x, y) => x === y), 'ttl')
  const audience = parseAudience(
    pickAlias(body.audience, body.badge_aud, 'audience / badge_aud', (x, y) => JSON.stringify(x) === JSON.stringify(y)),
    'audience',
  )
  return { domain, level, ttl, audience }
}

export interface IssueInTransaction {
  agent: AgentRow
  subject: string
  level: number
  ial: '0' | '1'
  domain: string
  ttl: number
  audience: readonly string[]
  cnf?: BadgeClaims['cnf']
  popChallengeId?: string
  /** The client assertion a token-endpoint badge answers; recorded, not put in the token. */
  clientAssertionJti?: string
}

/** Builds and signs the token of a recorded badge: the one place claims are assembled. */
function signIssued(
  ctx: AuthorityContext,
  signing: KeyRingSnapshot['signing'],
  input: Omit<IssueInTransaction, 'agent'> & { jti: string; issuedAt: number },
): IssuedBadge {
  const expiresAt = input.issuedAt + input.ttl
  const claims = buildBadgeClaims({
    jti: input.jti,
    issuer: ctx.issuer,
    subject: input.subject,
    issuedAt: input.issuedAt,
    expiresAt,
    ial: input.ial,
    level: String(input.level) as TrustLevel,
    domain: input.domain,
    audience: input.audience,
    ...(input.cnf === undefined ? {} : { cnf: input.cnf }),
    ...(input.popChallengeId === undefined ? {} : { popChallengeId: input.popChallengeId }),
  })
  const issued: IssuedBadge = {
    token: signBadge(claims, signing),
    jti: input.jti,
    subject: input.subject,
    trustLevel: String(input.level),
    expiresAt: new Date(expiresAt * 1000).toISOString(),
    ial: input.ial,
  }
  if (input.cnf !== undefined) issued.cnf = input.cnf
  return issued
}

/**
 * Records and signs a badge inside the caller's transaction (the agent row must already be locked
 * with `lockAgentForIssuance`). The record is written first: a badge that could not be recorded is
 * never returned, so every token handed out can be revoked and audited.
 */
export async function issueBadgeInTransaction(tx: Queryable, ctx: AuthorityContext, input: IssueInTransaction): Promise<IssuedBadge> {
  const signing = ctx.keyRing.current.signing
  const issuedAt = Math.floor(nowMs(ctx) / 1000)
  const jti = randomUUID()
  await badges.insertBadge(tx, {
    jti,
    agentId: input.agent.id,
    orgId: input.agent.org_id,
    subject: input.subject,
    trustLevel: input.level,
    ial: input.ial,
    kid: signing.kid,
    popChallengeId: input.popChallengeId ?? null,
    clientAssertionJti: input.clientAssertionJti ?? null,
    issuedAt: new Date(issuedAt * 1000),
    expiresAt: new Date((issuedAt + input.ttl) * 1000),
  })
  const { agent: _agent, clientAssertionJti: _assertion, ...rest } = input
  return signIssued(ctx, signing, { ...rest, jti, issuedAt })
}

const CONTROL_CHARACTER = /[\u0000-\u001f\u007f]/

/**
 * Where a badge request points: an agent id (UUID, or this registry's own did:web) or an explicit DID.
 * Null when it can name no agent.
 */
function agentReference(ctx: Pick<AuthorityContext, 'registryDidHost'>, idOrDid: string): { id: string | null; did: string | null } | null {
  if (isUuid(idOrDid)) return { id: idOrDid.toLowerCase(), did: null }
  // No agent's DID holds a control character, and PostgreSQL text cannot hold NUL at all: such a
  // reference (`did:web:%00…` decoded from the path) must end as "not found", not as a failed statement
  // that would take the other issuances of the same batch down with it.
  if (CONTROL_CHARACTER.test(idOrDid)) return null
  if (!isDid(idOrDid) && !idOrDid.startsWith('did:web:')) return null
  const own = ownAgentId(ctx.registryDidHost, idOrDid)
  if (own !== null) return isUuid(own) ? { id: own.toLowerCase(), did: null } : null
  return { id: null, did: idOrDid }
}

/**
 * `POST /v1/agents/{id-or-did}/badge` (IAL-0). The checks and the record are one SQL statement, shared
 * with concurrent requests (see `IssuanceBatcher`); a refusal is explained from the agent row it returns,
 * in the order of docs/api.md §4.4.
 */
export async function issueIal0Badge(ctx: AuthorityContext, principal: Principal, idOrDid: string, body: Ial0Request): Promise<IssuedBadge> {
  const request = parseIal0Request(body)
  const ref = agentReference(ctx, idOrDid)
  if (ref === null) throw new ServiceError('agent_not_found')
  const signing = ctx.keyRing.current.signing
  const issuedAt = Math.floor(nowMs(ctx) / 1000)
  const jti = randomUUID()
  const result = await ctx.issuance.submit({
    audit: takeScopedEntry(ctx.audit ?? null),
    orgId: principal.orgId,
    agentId: ref.id,
    agentDid: ref.did,
    jti,
    kid: signing.kid,
    level: request.level,
    domain: request.domain,
    issuedAt: new Date(issuedAt * 1000),
    expiresAt: new Date((issuedAt + request.ttl) * 1000),
  })
  if (result === null) throw new ServiceError('agent_not_found')
  if (!result.inserted) {
    const { agent } = result
    if (agent.status !== 'enabled') throw new ServiceError('agent_disabled')
    if (request.level > agent.trust_level) {
      throw new ServiceError('trust_level_not_verified', `The agent is verified up to level ${agent.trust_level}; level ${request.level} was asked for.`)
    }
    throw new ServiceError('domain_not_verified')
  }
  return signIssued(ctx, signing, {
    jti,
    issuedAt,
    subject: result.agent.subject,
    level: request.level,
    ial: '0',
    domain: request.domain,
    ttl: request.ttl,
    audience: request.audience,
  })
}

/** Verification against the current keys and the database's revocations (docs/wire-contract.md §4). */
export async function verifyBadgeToken(ctx: AuthorityContext, token: string, audience?: readonly string[]): Promise<BadgeVerification> {
  const result = verifyBadge(token, {
    keys: ctx.keyRing.current.verificationKeys,
    issuer: ctx.issuer,
    now: Math.floor(nowMs(ctx) / 1000),
    ...(audience === undefined ? {} : { audience }),
  })
  if (!result.valid) return result
  const record = await badges.findBadge(ctx.db, result.claims.jti)
  if (record?.revoked_at != null) return { valid: false, error: 'BADGE_REVOKED' }
  return result
}

export interface RevocationView {
  jti: string
  revoked: true
  revokedAt: string
  reason?: string
}

/** `POST /v1/badges/{jti}/revoke`: only the organization that owns the badge. */
export async function revokeBadge(ctx: AuthorityContext, principal: Principal, jti: string, reason: string | undefined): Promise<RevocationView> {
  const row = await ctx.db.transaction(async (tx) => {
    const revoked = await badges.revokeBadge(tx, principal.orgId, jti, reason ?? null)
    // Same transaction: gateways listening for revocations learn of it the moment it commits.
    if (revoked !== null) await tx.query('SELECT pg_notify($1, $2)', [REVOCATION_CHANNEL, jti])
    return revoked
  })
  if (row === null || row.revoked_at === null) throw new ServiceError('badge_not_found')
  const view: RevocationView = { jti: row.jti, revoked: true, revokedAt: row.revoked_at.toISOString() }
  if (row.revoke_reason !== null) view.reason = row.revoke_reason
  return view
}

export interface BadgeStatusView {
  jti: string
  revoked: boolean
  revokedAt?: string
  reason?: string
  expiresAt: string
}

/** Public `GET /v1/badges/{jti}/status`. */
export async function badgeStatus(ctx: AuthorityContext, jti: string): Promise<BadgeStatusView> {
  const row = await badges.findBadge(ctx.db, jti)
  if (row === null) throw new ServiceError('badge_not_found')
  const view: BadgeStatusView = { jti: row.jti, revoked: row.revoked_at !== null, expiresAt: row.expires_at.toISOString() }
  if (row.revoked_at !== null) view.revokedAt = row.revoked_at.toISOString()
  if (row.revoke_reason !== null) view.reason = row.revoke_reason
  return view
}

function revocationCursor(row: badges.BadgeRow): string {
  return encodeCursor('revocations', { createdAt: (row.revoked_at as Date).toISOString(), id: row.jti })
}

// A badge id as the badge routes accept it in a path; the jtis this authority writes are UUIDs.
const JTI_SHAPE = /^[A-Za-z0-9._:-]{1,128}$/

/** Public `GET /v1/revocations?since=&limit=&cursor=` (docs/wire-contract.md §4). */
export async function listRevocations(
  ctx: AuthorityContext, since: string | undefined, limit: number, cursor: string | undefined,
): Promise<{ revocations: { jti: string; revokedAt: string; reason?: string }[]; nextCursor: string | null; syncedAt: string }> {
  const syncedAt = new Date(nowMs(ctx)).toISOString()
  let sinceDate: Date | null = null
  if (since !== undefined) {
    sinceDate = parseTimestamp(since)
    if (sinceDate === null) throw new ServiceError('invalid_request', 'since must be an RFC 3339 time (or a date) in the years 0001 to 9999.')
  }
  const after = decodeCursor(cursor, 'revocations', (jti) => JTI_SHAPE.test(jti))
  const rows = await badges.listRevocations(ctx.db, sinceDate, after === null ? null : { revokedAt: after.createdAt, jti: after.id }, limit)
  const page = rows.slice(0, limit)
  return {
    revocations: page.map((r) => ({
      jti: r.jti,
      revokedAt: (r.revoked_at as Date).toISOString(),
      ...(r.revoke_reason === null ? {} : { reason: r.revoke_reason }),
    })),
    nextCursor: rows.length > limit ? revocationCursor(page[page.length - 1] as badges.BadgeRow) : null,
    syncedAt,
  }
}
