import type { PagePosition } from '../../core/pagination.js'
import type { Queryable } from '../database.js'

export type AgentStatus = 'enabled' | 'disabled'

export interface AgentRow {
  id: string
  org_id: string
  name: string
  domain: string | null
  description: string | null
  did: string | null
  status: AgentStatus
  trust_level: number
  public_key_jwk: Record<string, unknown> | null
  agent_card: Record<string, unknown> | null
  created_at: Date
  updated_at: Date
}

export interface NewAgent {
  id: string
  orgId: string
  name: string
  domain: string | null
  description: string | null
  did: string | null
  publicKeyJwk: Record<string, unknown> | null
  agentCard: Record<string, unknown> | null
}

/** Columns an update may change; `undefined` leaves a column as it is, `null` clears it. */
export interface AgentPatch {
  name?: string
  domain?: string | null
  description?: string | null
  did?: string | null
  publicKeyJwk?: Record<string, unknown> | null
  agentCard?: Record<string, unknown> | null
}

const PATCH_COLUMNS: Record<keyof AgentPatch, string> = {
  name: 'name',
  domain: 'domain',
  description: 'description',
  did: 'did',
  publicKeyJwk: 'public_key_jwk',
  agentCard: 'agent_card',
}

export async function insertAgent(q: Queryable, agent: NewAgent): Promise<AgentRow> {
  const rows = await q.query<AgentRow>(
    `INSERT INTO agents (id, org_id, name, domain, description, did, public_key_jwk, agent_card)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING *`,
    [agent.id, agent.orgId, agent.name, agent.domain, agent.description, agent.did, agent.publicKeyJwk, agent.agentCard],
  )
  return rows[0] as AgentRow
}

/** An agent of one organization: another org's agent is simply not found. */
export async function findAgent(q: Queryable, orgId: string, id: string): Promise<AgentRow | null> {
  const rows = await q.query<AgentRow>('SELECT * FROM agents WHERE org_id = $1 AND id = $2', [orgId, id])
  return rows[0] ?? null
}

/** Any organization's agent, for public endpoints (status, DID documents). */
export async function findAgentById(q: Queryable, id: string): Promise<AgentRow | null> {
  const rows = await q.query<AgentRow>('SELECT * FROM agents WHERE id = $1', [id])
  return rows[0] ?? null
}

export async function listAgents(q: Queryable, orgId: string, limit: number, after: PagePosition | null): Promise<AgentRow[]> {
  return q.query<AgentRow>(
    `SELECT * FROM agents
     WHERE org_id = $1 AND ($2::timestamptz IS NULL OR (created_at, id) > ($2::timestamptz, $3::uuid))
     ORDER BY created_at, id LIMIT $4`,
    [orgId, after?.createdAt ?? null, after?.id ?? null, limit + 1],
  )
}

/** `text` as a LIKE pattern that matches it literally anywhere: `%`, `_` and the escape character (backslash) escaped. */
export function containsPattern(text: string): string {
  return `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`
}

/**
 * listAgents narrowed to agents whose name, domain or DID contains `text`, ignoring case. The DID is the
 * one the API shows: the explicit DID, else `didWebPrefix` and the id.
 */
export async function searchAgents(
  q: Queryable, orgId: string, text: string, didWebPrefix: string, limit: number, after: PagePosition | null,
): Promise<AgentRow[]> {
  return q.query<AgentRow>(
    `SELECT * FROM agents
     WHERE org_id = $1 AND ($2::timestamptz IS NULL OR (created_at, id) > ($2::timestamptz, $3::uuid))
       AND (name ILIKE $5 ESCAPE '\\' OR domain ILIKE $5 ESCAPE '\\' OR COALESCE(did, $6 || id::text) ILIKE $5 ESCAPE '\\')
     ORDER BY created_at, id LIMIT $4`,
    [orgId, after?.createdAt ?? null, after?.id ?? null, limit + 1, containsPattern(text), didWebPrefix],
  )
}

export async function updateAgent(q: Queryable, orgId: string, id: string, patch: AgentPatch): Promise<AgentRow | null> {
  const sets: string[] = []
  const params: unknown[] = [orgId, id]
  for (const [field, column] of Object.entries(PATCH_COLUMNS) as [keyof AgentPatch, string][]) {
    if (patch[field] === undefined) continue
    params.push(patch[field])
    sets.push(`${column} = $${params.length}`)
  }
  sets.push('updated_at = now()')
  const rows = await q.query<AgentRow>(
    `UPDATE agents SET ${sets.join(', ')} WHERE org_id = $1 AND id = $2 RETURNING *`,
    params,
  )
  return rows[0] ?? null
}

export async function setAgentStatus(q: Queryable, orgId: string, id: string, status: AgentStatus): Promise<AgentRow | null> {
  const rows = await q.query<AgentRow>(
    'UPDATE agents SET status = $3, updated_at = now() WHERE org_id = $1 AND id = $2 RETURNING *',
    [orgId, id, status],
  )
  return rows[0] ?? null
}

export async function deleteAgent(q: Queryable, orgId: string, id: string): Promise<boolean> {
  const rows = await q.query('DELETE FROM agents WHERE org_id = $1 AND id = $2 RETURNING id', [orgId, id])
  return rows.length === 1
}

/**
 * Reads an agent for badge issuance with a share lock held to the end of the transaction: a concurrent
 * disable (an UPDATE) waits for the issuance to commit, and an issuance that starts after a disable
 * committed sees the disabled status. So no badge is issued after a disable commits.
 */
export async function lockAgentForIssuance(q: Queryable, orgId: string, id: string): Promise<AgentRow | null> {
  const rows = await q.query<AgentRow>('SELECT * FROM agents WHERE org_id = $1 AND id = $2 FOR SHARE', [orgId, id])
  return rows[0] ?? null
}

/** The agent of an org holding an explicit DID. */
export async function findOrgAgentByDid(q: Queryable, orgId: string, did: string): Promise<AgentRow | null> {
  const rows = await q.query<AgentRow>('SELECT * FROM agents WHERE org_id = $1 AND did = $2', [orgId, did])
  return rows[0] ?? null
}

/** The agent of any organization holding an explicit DID (unique across organizations). */
export async function findAgentByDid(q: Queryable, did: string): Promise<AgentRow | null> {
  const rows = await q.query<AgentRow>('SELECT * FROM agents WHERE did = $1', [did])
  return rows[0] ?? null
}
