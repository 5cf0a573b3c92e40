/**
 * PoP challenges (RFC-003, table `pop_challenges` of migration 002). Every time comparison uses the
 * database clock, so the window count, the expiry check and the guarded redemption agree across
 * instances whatever their local clocks say.
 */
import type { Queryable } from '../database.js'

export interface PopChallengeRow {
  id: string
  did: string
  agent_id: string
  org_id: string
  nonce: string
  aud: string
  htu: string
  badge_aud: string[]
  badge_ttl: number
  created_at: Date
  expires_at: Date
  used_at: Date | null
  failed_attempts: number
}

/** A row as read for redemption, with its expiry judged by the database clock. */
export interface PopChallengeState extends PopChallengeRow {
  expired: boolean
}

export interface NewPopChallenge {
  id: string
  did: string
  agentId: string
  orgId: string
  nonce: string
  aud: string
  htu: string
  badgeAud: readonly string[]
  badgeTtl: number
  /** Seconds from now until the challenge expires. */
  challengeTtl: number
}

export interface ChallengeWindow {
  /** Challenges for the DID created inside the window. */
  count: number
  /** Creation time of the oldest of them; null when there are none. */
  oldest: Date | null
  /** The database's current time (transaction start). */
  now: Date
}

// Namespace of the two-key advisory lock, so these locks never meet another feature's hashtext(...) lock.
const CHALLENGE_LOCK_NAMESPACE = 0x706f70 // 'pop'

/**
 * Serializes challenge creation for one DID until the transaction ends, on every instance sharing the
 * database: the window count and the insert that follows it then act as one step.
 */
export async function lockChallengeWindow(q: Queryable, did: string): Promise<void> {
  await q.query('SELECT pg_advisory_xact_lock($1::int, hashtext($2))', [CHALLENGE_LOCK_NAMESPACE, did])
}

export async function challengeWindow(q: Queryable, did: string, windowSeconds: number): Promise<ChallengeWindow> {
  const rows = await q.query<{ count: number; oldest: Date | null; now: Date }>(
    `SELECT count(*)::int AS count, min(created_at) AS oldest, now() AS now
     FROM pop_challenges WHERE did = $1 AND created_at > now() - make_interval(secs => $2)`,
    [did, windowSeconds],
  )
  const row = rows[0] as { count: number; oldest: Date | null; now: Date }
  return { count: Number(row.count), oldest: row.oldest, now: row.now }
}

export async function insertChallenge(q: Queryable, c: NewPopChallenge): Promise<PopChallengeRow> {
  const rows = await q.query<PopChallengeRow>(
    `INSERT INTO pop_challenges (id, did, agent_id, org_id, nonce, aud, htu, badge_aud, badge_ttl, expires_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9, now() + make_interval(secs => $10))
     RETURNING *`,
    // jsonb goes in as JSON text: the pg driver would turn a JS array into a PostgreSQL array literal.
    [c.id, c.did, c.agentId, c.orgId, c.nonce, c.aud, c.htu, JSON.stringify(c.badgeAud), c.badgeTtl, c.challengeTtl],
  )
  return rows[0] as PopChallengeRow
}

export async function findChallenge(q: Queryable, id: string): Promise<PopChallengeState | null> {
  const rows = await q.query<PopChallengeState>(
    'SELECT *, expires_at <= now() AS expired FROM pop_challenges WHERE id = $1',
    [id],
  )
  return rows[0] ?? null
}

/**
 * Counts a failed proof; the `maxFailures`-th failure also marks the challenge used (burned). Guarded
 * by `used_at IS NULL` and applied as one row update, so concurrent failures each count once and a
 * challenge already consumed is left alone. Null when nothing was updated.
 */
export async function recordFailedProof(q: Queryable, id: string, maxFailures: number): Promise<{ failed_attempts: number; burned: boolean } | null> {
  const rows = await q.query<{ failed_attempts: number; burned: boolean }>(
    `UPDATE pop_challenges
     SET failed_attempts = failed_attempts + 1,
         used_at = CASE WHEN failed_attempts + 1 >= $2 THEN now() ELSE used_at END
     WHERE id = $1 AND used_at IS NULL
     RETURNING failed_attempts, used_at IS NOT NULL AS burned`,
    [id, maxFailures],
  )
  return rows[0] ?? null
}

/**
 * Consumes an unused, unexpired challenge. Concurrent callers queue on the row lock and re-check the
 * condition after the first commits, so exactly one of them gets the row; the rest get null.
 */
export async function redeemChallenge(q: Queryable, id: string): Promise<PopChallengeRow | null> {
  const rows = await q.query<PopChallengeRow>(
    'UPDATE pop_challenges SET used_at = now() WHERE id = $1 AND used_at IS NULL AND expires_at > now() RETURNING *',
    [id],
  )
  return rows[0] ?? null
}

/** Deletes challenges that expired more than `retentionSeconds` ago; returns how many. */
export async function deleteChallengesExpiredBefore(q: Queryable, retentionSeconds: number): Promise<number> {
  const rows = await q.query<{ n: number }>(
    `WITH deleted AS (DELETE FROM pop_challenges WHERE expires_at < now() - make_interval(secs => $1) RETURNING 1)
     SELECT count(*)::int AS n FROM deleted`,
    [retentionSeconds],
  )
  return Number(rows[0]?.n ?? 0)
}
