import type { Role } from '../../core/principal.js'
import type { Queryable } from '../database.js'

export interface UserRow {
  id: string
  email: string | null
  display_name: string | null
  is_operator: boolean
  created_at: Date
  updated_at: Date
}

export async function upsertUser(
  q: Queryable,
  user: { id: string; email?: string | null; displayName?: string | null; isOperator?: boolean },
): Promise<UserRow> {
  const rows = await q.query<UserRow>(
    `INSERT INTO users (id, email, display_name, is_operator) VALUES ($1, $2, $3, $4)
     ON CONFLICT (id) DO UPDATE SET
       email = COALESCE(EXCLUDED.email, users.email),
       display_name = COALESCE(EXCLUDED.display_name, users.display_name),
       is_operator = users.is_operator OR EXCLUDED.is_operator,
       updated_at = now()
     RETURNING *`,
    [user.id, user.email ?? null, user.displayName ?? null, user.isOperator ?? false],
  )
  return rows[0] as UserRow
}

export async function setMembership(q: Queryable, orgId: string, userId: string, role: Role): Promise<void> {
  await q.query(
    `INSERT INTO memberships (org_id, user_id, role) VALUES ($1, $2, $3)
     ON CONFLICT (org_id, user_id) DO UPDATE SET role = EXCLUDED.role`,
    [orgId, userId, role],
  )
}
