import type { PagePosition } from '../../core/pagination.js'
import type { Queryable } from '../database.js'
import type { Role } from '../../core/principal.js'

export interface ApiKeyRow {
  id: string
  org_id: string
  name: string
  key_hash: Buffer
  key_prefix: string
  role: Role
  is_operator: boolean
  /** The user the key acts for: its creator, or the creator of the key that created it. */
  created_by_user_id: string | null
  created_by_type: CreatorType
  created_by_key_id: string | null
  created_at: Date
  last_used_at: Date | null
  revoked_at: Date | null
  revoke_reason: RevokeReason | null
}

/** How a key was made (see migration 006). */
export type CreatorType = 'user' | 'key' | 'operator' | 'bootstrap' | 'legacy'

/** Why a key stopped working; stored on the key, shown in listings and logged. */
export type RevokeReason = 'creator_unknown' | 'creator_deleted' | 'membership_removed' | 'organization_unlinked'

/** A key with what authentication needs to know about the user it acts for. */
export interface ApiKeyAuthRow extends ApiKeyRow {
  creator_exists: boolean
  /** The creator's current role in the key's organization; null when not a member. */
  creator_role: Role | null
}

export interface NewApiKey {
  id: string
  orgId: string
  name: string
  keyHash: Buffer
  keyPrefix: string
  role: Role
  isOperator: boolean
  createdByUserId: string | null
  createdByType: CreatorType
  createdByKeyId: string | null
}

export async function insertApiKey(q: Queryable, key: NewApiKey): Promise<ApiKeyRow> {
  const rows = await q.query<ApiKeyRow>(
    `INSERT INTO api_keys (id, org_id, name, key_hash, key_prefix, role, is_operator, created_by_user_id, created_by_type, created_by_key_id)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING *`,
    [key.id, key.orgId, key.name, key.keyHash, key.keyPrefix, key.role, key.isOperator, key.createdByUserId, key.createdByType, key.createdByKeyId],
  )
  return rows[0] as ApiKeyRow
}

/** Looks a key up by the digest of the presented secret (an index lookup; the caller compares again). */
export async function findApiKeyByHash(q: Queryable, keyHash: Buffer): Promise<ApiKeyRow | null> {
  const rows = await q.query<ApiKeyRow>('SELECT * FROM api_keys WHERE key_hash = $1', [keyHash])
  return rows[0] ?? null
}

/** A key joined with its creator's user row and membership in the key's org; the caller adds the WHERE. */
const KEY_FOR_AUTH = `SELECT k.*, (u.id IS NOT NULL) AS creator_exists, m.role AS creator_role
     FROM api_keys k
     LEFT JOIN users u ON u.id = k.created_by_user_id
     LEFT JOIN memberships m ON m.org_id = k.org_id AND m.user_id = k.created_by_user_id`

/** The key of a presented secret, for authentication. */
export async function findApiKeyForAuth(q: Queryable, keyHash: Buffer): Promise<ApiKeyAuthRow | null> {
  const rows = await q.query<ApiKeyAuthRow>(`${KEY_FOR_AUTH} WHERE k.key_hash = $1`, [keyHash])
  return rows[0] ?? null
}

/** The same as findApiKeyForAuth, by key id: a console session re-checks the key it was made from. */
export async function findApiKeyForAuthById(q: Queryable, id: string): Promise<ApiKeyAuthRow | null> {
  const rows = await q.query<ApiKeyAuthRow>(`${KEY_FOR_AUTH} WHERE k.id = $1`, [id])
  return rows[0] ?? null
}

/**
 * Revokes the live, non-operator keys that act for `userId` (in `orgId`, or in every org when null),
 * keeping the first reason a key was revoked for. Returns the keys revoked by this call.
 */
export async function revokeKeysOfCreator(
  q: Queryable, userId: string, orgId: string | null, reason: RevokeReason,
): Promise<{ id: string; org_id: string }[]> {
  return q.query<{ id: string; org_id: string }>(
    `UPDATE api_keys SET revoked_at = date_trunc('milliseconds', now()), revoke_reason = $3
     WHERE created_by_user_id = $1 AND ($2::uuid IS NULL OR org_id = $2::uuid) AND NOT is_operator AND revoked_at IS NULL
     RETURNING id, org_id`,
    [userId, orgId, reason],
  )
}

/** Revokes every live, non-operator key of an organization. Returns the keys revoked by this call. */
export async function revokeKeysOfOrganization(q: Queryable, orgId: string, reason: RevokeReason): Promise<{ id: string; org_id: string }[]> {
  return q.query<{ id: string; org_id: string }>(
    `UPDATE api_keys SET revoked_at = date_trunc('milliseconds', now()), revoke_reason = $2
     WHERE org_id = $1 AND NOT is_operator AND revoked_at IS NULL RETURNING id, org_id`,
    [orgId, reason],
  )
}

/** The live, non-operator keys that act for `userId` in `orgId`. */
export async function liveKeysOfCreator(q: Queryable, userId: string, orgId: string): Promise<{ id: string; org_id: string; role: Role }[]> {
  return q.query<{ id: string; org_id: string; role: Role }>(
    'SELECT id, org_id, role FROM api_keys WHERE created_by_user_id = $1 AND org_id = $2 AND NOT is_operator AND revoked_at IS NULL',
    [userId, orgId],
  )
}

export async function listApiKeys(q: Queryable, orgId: string, limit: number, after: PagePosition | null): Promise<ApiKeyRow[]> {
  return q.query<ApiKeyRow>(
    `SELECT * FROM api_keys
     WHERE org_id = $1 AND ($2::timestamptz IS NULL OR (created_at, id) > ($2::timestamptz, $3::uuid))
     ORDER BY created_at, id LIMIT $4`,
    [orgId, after?.createdAt ?? null, after?.id ?? null, limit + 1],
  )
}

export async function findApiKey(q: Queryable, orgId: string, id: string): Promise<ApiKeyRow | null> {
  const rows = await q.query<ApiKeyRow>('SELECT * FROM api_keys WHERE org_id = $1 AND id = $2', [orgId, id])
  return rows[0] ?? null
}

export async function deleteApiKey(q: Queryable, orgId: string, id: string): Promise<boolean> {
  const rows = await q.query('DELETE FROM api_keys WHERE org_id = $1 AND id = $2 RETURNING id', [orgId, id])
  return rows.length === 1
}
