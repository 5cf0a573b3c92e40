import type { PagePosition } from '../../core/pagination.js'
import type { Queryable } from '../database.js'

export interface OrganizationRow {
  id: string
  name: string
  external_id: string | null
  created_at: Date
}

export async function insertOrganization(q: Queryable, org: { id: string; name: string }): Promise<OrganizationRow> {
  const rows = await q.query<OrganizationRow>(
    'INSERT INTO organizations (id, name) VALUES ($1, $2) RETURNING *',
    [org.id, org.name],
  )
  return rows[0] as OrganizationRow
}

export async function findOrganizationByName(q: Queryable, name: string): Promise<OrganizationRow | null> {
  const rows = await q.query<OrganizationRow>(
    'SELECT * FROM organizations WHERE name = $1 ORDER BY created_at, id LIMIT 1',
    [name],
  )
  return rows[0] ?? null
}

export async function findOrganization(q: Queryable, id: string): Promise<OrganizationRow | null> {
  const rows = await q.query<OrganizationRow>('SELECT * FROM organizations WHERE id = $1', [id])
  return rows[0] ?? null
}

/** Every organization in (created_at, id) order, after the cursor position. */
export async function listOrganizations(q: Queryable, limit: number, after: PagePosition | null): Promise<OrganizationRow[]> {
  return q.query<OrganizationRow>(
    `SELECT * FROM organizations
     WHERE ($1::timestamptz IS NULL OR (created_at, id) > ($1::timestamptz, $2::uuid))
     ORDER BY created_at, id LIMIT $3`,
    [after?.createdAt ?? null, after?.id ?? null, limit + 1],
  )
}

export async function countOrganizations(q: Queryable): Promise<number> {
  const rows = await q.query<{ n: number }>('SELECT count(*)::int AS n FROM organizations')
  return Number(rows[0]?.n ?? 0)
}

export async function organizationExists(q: Queryable, id: string): Promise<boolean> {
  const rows = await q.query<{ id: string }>('SELECT id FROM organizations WHERE id = $1', [id])
  return rows.length > 0
}

/** The exact strings the organization's token audiences may take (migration 007); null without such an org. */
export async function findTokenAudiences(q: Queryable, orgId: string): Promise<string[] | null> {
  const rows = await q.query<{ token_audiences: string[] }>('SELECT token_audiences FROM organizations WHERE id = $1', [orgId])
  return rows[0] === undefined ? null : [...rows[0].token_audiences]
}

/** Replaces the allow-list; null without such an org. */
export async function setTokenAudiences(q: Queryable, orgId: string, audiences: readonly string[]): Promise<string[] | null> {
  const rows = await q.query<{ token_audiences: string[] }>(
    'UPDATE organizations SET token_audiences = $2::text[] WHERE id = $1 RETURNING token_audiences',
    [orgId, [...audiences]],
  )
  return rows[0] === undefined ? null : [...rows[0].token_audiences]
}
