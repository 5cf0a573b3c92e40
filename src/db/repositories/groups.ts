import type { Queryable } from '../database.js'

export interface GroupRow {
  id: string
  org_id: string
  name: string
  precedence: number
  created_at: Date
  updated_at: Date
  /** Member agent ids, sorted. */
  agent_ids: string[]
}

const GROUP_COLUMNS = `g.id, g.org_id, g.name, g.precedence, g.created_at, g.updated_at,
  COALESCE((SELECT array_agg(m.agent_id::text ORDER BY m.agent_id) FROM policy_group_members m WHERE m.group_id = g.id),
           ARRAY[]::text[]) AS agent_ids`

export async function insertGroup(q: Queryable, group: { id: string; orgId: string; name: string; precedence: number }): Promise<GroupRow> {
  const rows = await q.query<GroupRow>(
    `WITH g AS (INSERT INTO policy_groups (id, org_id, name, precedence) VALUES ($1, $2, $3, $4) RETURNING *)
     SELECT g.*, ARRAY[]::text[] AS agent_ids FROM g`,
    [group.id, group.orgId, group.name, group.precedence],
  )
  return rows[0] as GroupRow
}

/** A group of one organization; another org's group is simply not found. */
export async function findGroup(q: Queryable, orgId: string, id: string): Promise<GroupRow | null> {
  const rows = await q.query<GroupRow>(`SELECT ${GROUP_COLUMNS} FROM policy_groups g WHERE g.org_id = $1 AND g.id = $2`, [orgId, id])
  return rows[0] ?? null
}

/** Every group of an org, highest priority (lowest precedence) first. */
export async function listGroups(q: Queryable, orgId: string): Promise<GroupRow[]> {
  return q.query<GroupRow>(
    `SELECT ${GROUP_COLUMNS} FROM policy_groups g WHERE g.org_id = $1 ORDER BY g.precedence, g.name, g.id`,
    [orgId],
  )
}

/** Changes the given columns; `undefined` leaves a column as it is. */
export async function updateGroup(q: Queryable, orgId: string, id: string, patch: { name?: string; precedence?: number }): Promise<GroupRow | null> {
  const rows = await q.query<{ id: string }>(
    `UPDATE policy_groups SET name = COALESCE($3, name), precedence = COALESCE($4, precedence), updated_at = now()
     WHERE org_id = $1 AND id = $2 RETURNING id`,
    [orgId, id, patch.name ?? null, patch.precedence ?? null],
  )
  return rows.length === 0 ? null : findGroup(q, orgId, id)
}

export async function deleteGroup(q: Queryable, orgId: string, id: string): Promise<boolean> {
  const rows = await q.query('DELETE FROM policy_groups WHERE org_id = $1 AND id = $2 RETURNING id', [orgId, id])
  return rows.length === 1
}

/** Adds an agent to a group; true when it was not a member before. */
export async function addMember(q: Queryable, groupId: string, agentId: string): Promise<boolean> {
  const rows = await q.query(
    'INSERT INTO policy_group_members (group_id, agent_id) VALUES ($1, $2) ON CONFLICT DO NOTHING RETURNING group_id',
    [groupId, agentId],
  )
  return rows.length === 1
}

/** Removes an agent from a group; true when it was a member. */
export async function removeMember(q: Queryable, groupId: string, agentId: string): Promise<boolean> {
  const rows = await q.query('DELETE FROM policy_group_members WHERE group_id = $1 AND agent_id = $2 RETURNING group_id', [groupId, agentId])
  return rows.length === 1
}

/** The groups of an org an agent belongs to, highest priority (lowest precedence) first. */
export async function listGroupsOfAgent(q: Queryable, orgId: string, agentId: string): Promise<{ id: string; name: string; precedence: number }[]> {
  return q.query<{ id: string; name: string; precedence: number }>(
    `SELECT g.id, g.name, g.precedence FROM policy_groups g JOIN policy_group_members m ON m.group_id = g.id
     WHERE g.org_id = $1 AND m.agent_id = $2 ORDER BY g.precedence, g.name, g.id`,
    [orgId, agentId],
  )
}
