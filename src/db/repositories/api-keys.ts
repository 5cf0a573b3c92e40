import type { PagePosition } from '../../core/pagination.js'
import type { Queryable } from '../database.js'
import type { Role } from './users.js'

export interface ApiKeyRow {
  id: string
  org_id: string
  name: string
  key_hash: Buffer
  key_prefix: string
  role: Role
  is_operator: boolean
  created_by_user_id: string | null
  created_at: Date
  last_used_at: Date | null
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
}

export async function insertApiKey(q: Queryable, key: NewApiKey): Promise<ApiKeyRow> {
  const rows = await q.query<ApiKeyRow>(
    `INSERT INTO api_keys (id, org_id, name, key_hash, key_prefix, role, is_operator, created_by_user_id)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING *`,
    [key.id, key.orgId, key.name, key.keyHash, key.keyPrefix, key.role, key.isOperator, key.createdByUserId],
  )
  return rows[0] as ApiKeyRow
}

/** Looks a key up by the digest of the presented secret (an index lookup; the caller compares again). */
export async function findApiKeyByHash(q: Queryable, keyHash: Buffer): Promise<ApiKeyRow | null> {
  const rows = await q.query<ApiKeyRow>('SELECT * FROM api_keys WHERE key_hash = $1', [keyHash])
  return rows[0] ?? null
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
