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

export interface Ial0Insert {
  orgId: string
  /** The agent by id, or by explicit DID (exactly one is set). */
  agentId: string | null
  agentDid: string | null
  /** `did:web:<host>:agents:` — the subject prefix of agents without an explicit DID. */
  didWebPrefix: string
  jti: string
  kid: string
  level: number
  domain: string
  issuedAt: Date
  expiresAt: Date
}

export interface Ial0InsertResult {
  agent: import('./agents.js').AgentRow & { domain_ok: boolean; subject: string }
  inserted: boolean
}

/**
 * IAL-0 issuance in ONE statement (one round trip instead of five): the agent row is share-locked, the
 * rules are checked and the badge recorded together. Under READ COMMITTED the lock waits for a concurrent
 * disable and then re-reads the row, so no badge is recorded after a disable commits. Returns the agent
 * (null when not found) and whether a badge was recorded; the caller explains a refusal from the row.
 */
export async function insertIal0Badge(q: Queryable, input: Ial0Insert): Promise<Ial0InsertResult | null> {
  const rows = await q.query<Ial0InsertResult['agent'] & { inserted: number }>(
    `WITH agent AS (
       SELECT a.*,
              COALESCE(a.did, $4 || a.id::text) AS subject,
              ($7::int < 2
                OR EXISTS (SELECT 1 FROM domain_verifications d
                           WHERE d.agent_id = a.id AND d.verified_at IS NOT NULL AND d.domain = $8)
                OR (a.trust_level >= 3 AND lower(a.domain) = $8)) AS domain_ok
       FROM agents a
       WHERE a.org_id = $1 AND (a.id = $2::uuid OR a.did = $3::text)
       FOR SHARE OF a
     ), recorded AS (
       INSERT INTO badges (jti, agent_id, org_id, subject, trust_level, ial, kid, issued_at, expires_at)
       SELECT $5, agent.id, agent.org_id, agent.subject, $7, '0', $6, $9, $10
       FROM agent
       WHERE agent.status = 'enabled' AND agent.trust_level >= $7 AND agent.domain_ok
       RETURNING jti
     )
     SELECT agent.*, (SELECT count(*)::int FROM recorded) AS inserted FROM agent`,
    [input.orgId, input.agentId, input.agentDid, input.didWebPrefix, input.jti, input.kid, input.level, input.domain, input.issuedAt, input.expiresAt],
  )
  const row = rows[0]
  if (row === undefined) return null
  const { inserted, ...agent } = row
  return { agent, inserted: Number(inserted) === 1 }
}
