import type { Role } from '../../core/principal.js'
import type { Queryable } from '../database.js'

export type ConsoleSessionKind = 'api_key' | 'session'

export interface ConsoleSessionRow {
  /** Hex SHA-256 of the cookie secret. */
  id: string
  org_id: string
  role: Role
  operator: boolean
  kind: ConsoleSessionKind
  api_key_id: string | null
  user_id: string | null
  csrf_token: string
  created_at: Date
  last_seen_at: Date
  expires_at: Date
  idp_expires_at: Date | null
}

/** A session as a request finds it, judged against the database clock. */
export interface ConsoleSessionLookup extends ConsoleSessionRow {
  /** Past its absolute end, its idle limit or its identity-provider token's `exp`. */
  expired: boolean
  /** last_seen_at is old enough to be written again. */
  stale: boolean
}

export interface NewConsoleSession {
  id: string
  orgId: string
  role: Role
  operator: boolean
  kind: ConsoleSessionKind
  apiKeyId: string | null
  userId: string | null
  csrfToken: string
  /** Absolute lifetime from now. */
  maxMs: number
  idpExpiresAt: Date | null
}

export async function insertConsoleSession(q: Queryable, session: NewConsoleSession): Promise<ConsoleSessionRow> {
  const rows = await q.query<ConsoleSessionRow>(
    `INSERT INTO console_sessions (id, org_id, role, operator, kind, api_key_id, user_id, csrf_token, expires_at, idp_expires_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, date_trunc('milliseconds', now() + make_interval(secs => $9::double precision)), $10)
     RETURNING *`,
    [session.id, session.orgId, session.role, session.operator, session.kind, session.apiKeyId, session.userId, session.csrfToken,
      session.maxMs / 1000, session.idpExpiresAt],
  )
  return rows[0] as ConsoleSessionRow
}

/** The session named by `id`, with its expiry and whether last_seen_at is older than `touchAfterMs`. */
export async function findConsoleSession(q: Queryable, id: string, idleMs: number, touchAfterMs: number): Promise<ConsoleSessionLookup | null> {
  const rows = await q.query<ConsoleSessionLookup>(
    `SELECT s.*,
            (s.expires_at <= now()
              OR s.last_seen_at <= now() - make_interval(secs => $2::double precision)
              OR (s.idp_expires_at IS NOT NULL AND s.idp_expires_at <= now())) AS expired,
            s.last_seen_at <= now() - make_interval(secs => $3::double precision) AS stale
     FROM console_sessions s WHERE s.id = $1`,
    [id, idleMs / 1000, touchAfterMs / 1000],
  )
  return rows[0] ?? null
}

export async function touchConsoleSession(q: Queryable, id: string): Promise<void> {
  await q.query(`UPDATE console_sessions SET last_seen_at = date_trunc('milliseconds', now()) WHERE id = $1`, [id])
}

export async function deleteConsoleSession(q: Queryable, id: string): Promise<boolean> {
  const rows = await q.query('DELETE FROM console_sessions WHERE id = $1 RETURNING id', [id])
  return rows.length === 1
}

/** Drops sessions past their absolute end (idle ones are dropped when next presented). */
export async function deleteExpiredConsoleSessions(q: Queryable): Promise<number> {
  const rows = await q.query(
    'DELETE FROM console_sessions WHERE expires_at <= now() OR (idp_expires_at IS NOT NULL AND idp_expires_at <= now()) RETURNING id',
  )
  return rows.length
}
