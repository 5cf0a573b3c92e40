/**
 * Storage of the identity provider's view of users, organizations and memberships (filled by the
 * user-sync webhook) and the lookups session tokens are resolved with.
 */
import { randomUUID } from 'node:crypto'
import type { Queryable } from '../database.js'
import type { Role } from '../../core/principal.js'

/** What a session token's user may do in one organization. */
export interface SessionMembership {
  orgId: string
  role: Role
  isOperator: boolean
}

/**
 * Records a webhook delivery id; false when it was recorded before (a replay). Under concurrency the
 * second insert of an id waits for the first transaction and then reports the conflict.
 */
export async function recordDelivery(q: Queryable, svixId: string, eventType: string): Promise<boolean> {
  const rows = await q.query(
    'INSERT INTO webhook_deliveries (svix_id, event_type) VALUES ($1, $2) ON CONFLICT (svix_id) DO NOTHING RETURNING svix_id',
    [svixId, eventType],
  )
  return rows.length === 1
}

export async function pruneDeliveries(q: Queryable, olderThanDays: number): Promise<void> {
  await q.query("DELETE FROM webhook_deliveries WHERE received_at < now() - make_interval(days => $1)", [olderThanDays])
}

/** Creates or replaces the profile of a synced user; the operator flag is never touched by sync. */
export async function putUserProfile(q: Queryable, user: { id: string; email: string | null; displayName: string | null }): Promise<void> {
  await q.query(
    `INSERT INTO users (id, email, display_name) VALUES ($1, $2, $3)
     ON CONFLICT (id) DO UPDATE SET email = EXCLUDED.email, display_name = EXCLUDED.display_name, updated_at = now()`,
    [user.id, user.email, user.displayName],
  )
}

/** Makes sure a user row exists (a membership event may arrive before the user's own event). */
export async function ensureUser(q: Queryable, id: string, displayName: string | null): Promise<void> {
  await q.query('INSERT INTO users (id, display_name) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING', [id, displayName])
}

/**
 * Deletes a user; memberships go with it (ON DELETE CASCADE). Keys they created stay with the org, as a
 * record, and stop working (the caller revokes them in the same transaction).
 */
export async function deleteUser(q: Queryable, id: string): Promise<void> {
  await q.query('DELETE FROM users WHERE id = $1', [id])
}

/**
 * The organization linked to `externalId`, created with a new UUID when unknown. `rename` decides
 * whether an existing organization takes the given name (organization events) or keeps its own
 * (membership events, whose embedded name may be older).
 */
export async function putOrganization(q: Queryable, externalId: string, name: string, rename: boolean): Promise<string> {
  const rows = await q.query<{ id: string }>(
    `INSERT INTO organizations (id, name, external_id) VALUES ($1, $2, $3)
     ON CONFLICT (external_id) DO UPDATE SET name = CASE WHEN $4 THEN EXCLUDED.name ELSE organizations.name END
     RETURNING id`,
    [randomUUID(), name, externalId, rename],
  )
  return (rows[0] as { id: string }).id
}

export async function findOrganizationIdByExternalId(q: Queryable, externalId: string): Promise<string | null> {
  const rows = await q.query<{ id: string }>('SELECT id FROM organizations WHERE external_id = $1', [externalId])
  return rows[0]?.id ?? null
}

/**
 * Detaches an organization from the identity provider: its memberships go (nobody signs in to it any
 * more) but the tenant and its agents, keys and policies stay, for an operator to export or delete.
 * Returns the organization's id, or null when no organization was linked to `externalId`.
 */
export async function unlinkOrganization(q: Queryable, externalId: string): Promise<string | null> {
  const id = await findOrganizationIdByExternalId(q, externalId)
  if (id === null) return null
  await q.query('DELETE FROM memberships WHERE org_id = $1', [id])
  await q.query('UPDATE organizations SET external_id = NULL WHERE id = $1', [id])
  return id
}

export async function findMembershipRole(q: Queryable, orgId: string, userId: string): Promise<Role | null> {
  const rows = await q.query<{ role: Role }>('SELECT role FROM memberships WHERE org_id = $1 AND user_id = $2', [orgId, userId])
  return rows[0]?.role ?? null
}

export async function deleteMembership(q: Queryable, orgId: string, userId: string): Promise<void> {
  await q.query('DELETE FROM memberships WHERE org_id = $1 AND user_id = $2', [orgId, userId])
}

/**
 * The membership a session acts in: in the organization linked to `externalOrgId`, or, without one,
 * the user's only membership. Null when the user is unknown, not a member, or the choice is ambiguous.
 */
export async function findSessionMembership(q: Queryable, userId: string, externalOrgId: string | null): Promise<SessionMembership | null> {
  const rows = externalOrgId === null
    ? await q.query<{ org_id: string; role: Role; is_operator: boolean }>(
      `SELECT m.org_id, m.role, u.is_operator FROM users u JOIN memberships m ON m.user_id = u.id
       WHERE u.id = $1 LIMIT 2`,
      [userId],
    )
    : await q.query<{ org_id: string; role: Role; is_operator: boolean }>(
      `SELECT m.org_id, m.role, u.is_operator FROM users u
       JOIN memberships m ON m.user_id = u.id JOIN organizations o ON o.id = m.org_id
       WHERE u.id = $1 AND o.external_id = $2`,
      [userId, externalOrgId],
    )
  if (rows.length !== 1) return null
  const row = rows[0] as { org_id: string; role: Role; is_operator: boolean }
  return { orgId: row.org_id, role: row.role, isOperator: row.is_operator }
}

/** A user's live role in one organization and their operator flag; null when not a member (or unknown). */
export async function findMemberAccess(q: Queryable, orgId: string, userId: string): Promise<{ role: Role; isOperator: boolean } | null> {
  const rows = await q.query<{ role: Role; is_operator: boolean }>(
    'SELECT m.role, u.is_operator FROM memberships m JOIN users u ON u.id = m.user_id WHERE m.org_id = $1 AND m.user_id = $2',
    [orgId, userId],
  )
  const row = rows[0]
  return row === undefined ? null : { role: row.role, isOperator: row.is_operator }
}
