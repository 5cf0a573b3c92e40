import type { AuditEntry } from '../../core/audit.js'
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
  client_assertion_jti: string | null
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
  /** The jti of the client assertion a token-endpoint badge was issued for; null for the other routes. */
  clientAssertionJti: string | null
  issuedAt: Date
  expiresAt: Date
}

export async function insertBadge(q: Queryable, badge: NewBadge): Promise<void> {
  await q.query(
    `INSERT INTO badges (jti, agent_id, org_id, subject, trust_level, ial, kid, pop_challenge_id, client_assertion_jti, issued_at, expires_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
    [
      badge.jti, badge.agentId, badge.orgId, badge.subject, badge.trustLevel, badge.ial, badge.kid, badge.popChallengeId,
      badge.clientAssertionJti, badge.issuedAt, badge.expiresAt,
    ],
  )
}

export interface IssuanceWindow {
  /** Token-endpoint badges of the subject issued inside the window. */
  count: number
  /** Issue time of the oldest of them; null when there are none. */
  oldest: Date | null
  /** The database's current time (transaction start). */
  now: Date
}

// Namespace of the two-key advisory lock, apart from the PoP challenge window's ('pop').
const CLIENT_CREDENTIALS_LOCK_NAMESPACE = 0x6f6175 // 'oau'

/**
 * Serializes token-endpoint issuance for one subject until the transaction ends, on every instance
 * sharing the database: the replay check, the window count and the insert then act as one step.
 */
export async function lockClientCredentialsIssuance(q: Queryable, subject: string): Promise<void> {
  await q.query('SELECT pg_advisory_xact_lock($1::int, hashtext($2))', [CLIENT_CREDENTIALS_LOCK_NAMESPACE, subject])
}

/** Badges the token endpoint issued for `subject` in the last `windowSeconds` of the database clock. */
export async function clientCredentialsWindow(q: Queryable, subject: string, windowSeconds: number): Promise<IssuanceWindow> {
  const rows = await q.query<{ count: number; oldest: Date | null; now: Date }>(
    `SELECT count(*)::int AS count, min(issued_at) AS oldest, now() AS now
     FROM badges
     WHERE subject = $1 AND client_assertion_jti IS NOT NULL AND issued_at > now() - make_interval(secs => $2)`,
    [subject, windowSeconds],
  )
  const row = rows[0] as { count: number; oldest: Date | null; now: Date }
  return { count: Number(row.count), oldest: row.oldest, now: row.now }
}

/** The organization each of the badges was issued for (jtis the authority never issued are absent). */
export async function badgeOrgs(q: Queryable, jtis: readonly string[]): Promise<{ jti: string; org_id: string }[]> {
  if (jtis.length === 0) return []
  return q.query<{ jti: string; org_id: string }>('SELECT jti, org_id FROM badges WHERE jti = ANY($1::text[])', [jtis])
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

/** Revokes every unexpired badge of an agent that is being deleted; returns their jtis. */
export async function revokeAgentBadges(q: Queryable, orgId: string, agentId: string, reason: string): Promise<string[]> {
  const rows = await q.query<{ jti: string }>(
    `UPDATE badges SET revoked_at = date_trunc('milliseconds', now()), revoke_reason = $3
     WHERE org_id = $1 AND agent_id = $2 AND revoked_at IS NULL AND expires_at > now() RETURNING jti`,
    [orgId, agentId, reason],
  )
  return rows.map((row) => row.jti)
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

/** An agent's badges, newest first, after the cursor position (`createdAt` is the issue time, `id` the jti). */
export async function listAgentBadges(
  q: Queryable, orgId: string, agentId: string, limit: number, after: { createdAt: string; id: string } | null,
): Promise<BadgeRow[]> {
  return q.query<BadgeRow>(
    `SELECT * FROM badges
     WHERE agent_id = $1 AND org_id = $2 AND ($3::timestamptz IS NULL OR (issued_at, jti) < ($3::timestamptz, $4::text))
     ORDER BY issued_at DESC, jti DESC LIMIT $5`,
    [agentId, orgId, after?.createdAt ?? null, after?.id ?? null, limit + 1],
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
  jti: string
  kid: string
  level: number
  domain: string
  issuedAt: Date
  expiresAt: Date
  /** The audit record of this issuance, written by the same statement when the badge is; null: none. */
  audit?: AuditEntry | null
}

/** What issuance needs to know of the agent (only these columns travel back: this runs per badge). */
export interface Ial0AgentRow {
  id: string
  status: import('./agents.js').AgentStatus
  trust_level: number
  subject: string
  domain_ok: boolean
}

export interface Ial0InsertResult {
  agent: Ial0AgentRow
  inserted: boolean
}

/**
 * IAL-0 issuance for a batch of requests in ONE statement (one lock pass, one commit): each request's
 * agent row is share-locked, the rules are checked and the badge recorded together. Under READ COMMITTED
 * a lock waits for a concurrent disable and then re-reads the row, so no badge is recorded after a
 * disable commits. Rows are locked in id order, so two batches cannot deadlock each other.
 *
 * Returns, per request (same order), the agent (null when not found) and whether a badge was recorded;
 * the caller explains a refusal from the row. `didWebPrefix` (`did:web:<host>:agents:`) makes the subject
 * of agents without an explicit DID.
 */
export async function insertIal0Badges(q: Queryable, didWebPrefix: string, requests: readonly Ial0Insert[]): Promise<(Ial0InsertResult | null)[]> {
  const column = <T>(pick: (r: Ial0Insert) => T): T[] => requests.map(pick)
  const rows = await q.query<Ial0AgentRow & { idx: number; inserted: boolean }>(
    `WITH req AS (
       -- A DID-addressed request is resolved to its agent id here (unique index on did), so the lock
       -- below joins by primary key: index lookups, never a scan of the registry.
       SELECT r.*, COALESCE(r.agent_id, (SELECT x.id FROM agents x WHERE x.did = r.agent_did AND x.org_id = r.org_id)) AS target_id
       FROM unnest($2::int[], $3::uuid[], $4::uuid[], $5::text[], $6::text[], $7::text[], $8::int[], $9::text[], $10::timestamptz[], $11::timestamptz[],
                   $12::text[], $13::text[], $14::text[], $15::text[], $16::text[])
         AS r(idx, org_id, agent_id, agent_did, jti, kid, level, domain, issued_at, expires_at, actor_type, actor_id, action, request_id, digest)
     ), agent AS (
       SELECT req.idx, a.*,
              COALESCE(a.did, $1 || a.id::text) AS subject,
              (req.level < 2
                OR EXISTS (SELECT 1 FROM domain_verifications d
                           WHERE d.agent_id = a.id AND d.verified_at IS NOT NULL AND d.domain = req.domain)
                OR (a.trust_level >= 3 AND lower(a.domain) = req.domain)) AS domain_ok
       FROM req JOIN agents a ON a.id = req.target_id AND a.org_id = req.org_id
       ORDER BY a.id
       FOR SHARE OF a
     ), recorded AS (
       INSERT INTO badges (jti, agent_id, org_id, subject, trust_level, ial, kid, issued_at, expires_at)
       SELECT req.jti, agent.id, agent.org_id, agent.subject, req.level, '0', req.kid, req.issued_at, req.expires_at
       FROM agent JOIN req USING (idx)
       WHERE agent.status = 'enabled' AND agent.trust_level >= req.level AND agent.domain_ok
       RETURNING jti
     ), audited AS (
       -- The batch's audit records, in its own statement and commit (docs/audit.md): no badge, no record.
       INSERT INTO audit_pending (actor_type, actor_id, org_id, action, target, outcome, request_id, digest)
       SELECT req.actor_type, req.actor_id, req.org_id, req.action, recorded.jti, 'success', req.request_id, req.digest
       FROM recorded JOIN req ON req.jti = recorded.jti
       WHERE req.actor_type IS NOT NULL
     )
     SELECT agent.idx, agent.id, agent.status, agent.trust_level, agent.subject, agent.domain_ok,
            EXISTS (SELECT 1 FROM recorded JOIN req ON req.jti = recorded.jti WHERE req.idx = agent.idx) AS inserted
     FROM agent`,
    [
      didWebPrefix,
      requests.map((_, i) => i),
      column((r) => r.orgId), column((r) => r.agentId), column((r) => r.agentDid), column((r) => r.jti),
      column((r) => r.kid), column((r) => r.level), column((r) => r.domain), column((r) => r.issuedAt), column((r) => r.expiresAt),
      column((r) => r.audit?.actorType ?? null), column((r) => r.audit?.actorId ?? null), column((r) => r.audit?.action ?? null),
      column((r) => r.audit?.requestId ?? null), column((r) => r.audit?.digest ?? null),
    ],
    // Hot: prepared once per connection instead of parsed and planned for every batch.
    { name: 'badges-insert-ial0-batch-audited' },
  )
  const results: (Ial0InsertResult | null)[] = requests.map(() => null)
  for (const { idx, inserted, ...agent } of rows) results[Number(idx)] = { agent, inserted }
  return results
}

/**
 * jtis of revoked badges that a verifier could still accept: unexpired, with the verifiers' 60 s
 * clock leeway. The gateway's snapshot holds exactly these.
 */
export async function listLiveRevokedJtis(q: Queryable): Promise<string[]> {
  const rows = await q.query<{ jti: string }>(
    `SELECT jti FROM badges WHERE revoked_at IS NOT NULL AND expires_at > now() - interval '60 seconds'`,
  )
  return rows.map((row) => row.jti)
}
