import type { Queryable } from '../database.js'

export interface BadgeRow {
  jti: string
  agent_id: string | null
  org_id: string
  subject: string
  trust_level: number
  ial: '0' | '1'
  kid: string
  pop_challenge_id: string | null
  issued_at: Date
  expires_at: Date
  revoked_at: Date | null
  revoke_reason: string | null
}

export interface NewBadge {
  jti: string
  agentId: string
  orgId: string
  subject: string
  trustLevel: number
  ial: '0' | '1'
  kid: string
  popChallengeId: string | null
  issuedAt: Date
  expiresAt: Date
}

export async function insertBadge(q: Queryable, badge: NewBadge): Promise<void> {
  await q.query(
    `INSERT INTO badges (jti, agent_id, org_id, subject, trust_level, ial, kid, pop_challenge_id, issued_at, expires_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
    [badge.jti, badge.agentId, badge.orgId, badge.subject, badge.trustLevel, badge.ial, badge.kid, badge.popChallengeId, badge.issuedAt, badge.expiresAt],
  )
}

export async function findBadge(q: Queryable, jti: string): Promise<BadgeRow | null> {
  const rows = await q.query<BadgeRow>('SELECT * FROM badges WHERE jti = $1', [jti])
  return rows[0] ?? null
}

/**
 * Marks a badge of `orgId` revoked. Revoking twice keeps the first time and reason. Null when the
 * badge does not exist or belongs to another organization.
 */
export async function revokeBadge(q: Queryable, orgId: string, jti: string, reason: string | null): Promise<BadgeRow | null> {
  const rows = await q.query<BadgeRow>(
    `UPDATE badges SET revoked_at = COALESCE(revoked_at, date_trunc('milliseconds', now())), revoke_reason = CASE WHEN revoked_at IS NULL THEN $3 ELSE revoke_reason END
     WHERE jti = $1 AND org_id = $2 RETURNING *`,
    [jti, orgId, reason],
  )
  return rows[0] ?? null
}

/** Revocations in (revoked_at, jti) order, after `since` and after the cursor position. */
export async function listRevocations(
  q: Queryable, since: Date | null, after: { revokedAt: string; jti: string } | null, limit: number,
): Promise<BadgeRow[]> {
  return q.query<BadgeRow>(
    `SELECT * FROM badges
     WHERE revoked_at IS NOT NULL
       AND ($1::timestamptz IS NULL OR revoked_at >= $1::timestamptz)
       AND ($2::timestamptz IS NULL OR (revoked_at, jti) > ($2::timestamptz, $3::text))
     ORDER BY revoked_at, jti LIMIT $4`,
    [since, after?.revokedAt ?? null, after?.jti ?? null, limit + 1],
  )
}

export async function countUnexpiredBadgesByKid(q: Queryable, kid: string): Promise<number> {
  const rows = await q.query<{ n: number }>('SELECT count(*)::int AS n FROM badges WHERE kid = $1 AND expires_at > now()', [kid])
  return Number(rows[0]?.n ?? 0)
}
