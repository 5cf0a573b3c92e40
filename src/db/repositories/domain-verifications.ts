import type { Queryable } from '../database.js'
import type { AgentRow } from './agents.js'

/** One DNS TXT challenge of an agent for a domain (migration 002, PK (agent_id, domain)). */
export interface DomainVerificationRow {
  agent_id: string
  domain: string
  token: string
  created_at: Date
  verified_at: Date | null
}

export async function findDomainVerification(q: Queryable, agentId: string, domain: string): Promise<DomainVerificationRow | null> {
  const rows = await q.query<DomainVerificationRow>(
    'SELECT * FROM domain_verifications WHERE agent_id = $1 AND domain = $2',
    [agentId, domain],
  )
  return rows[0] ?? null
}

/**
 * Creates the challenge unless one exists, and returns the stored row either way: when two first calls
 * race, both answer with the single token that was kept, so the record the user publishes is the one
 * that will be checked.
 */
export async function createDomainVerification(
  q: Queryable, challenge: { agentId: string; domain: string; token: string },
): Promise<DomainVerificationRow> {
  const inserted = await q.query<DomainVerificationRow>(
    `INSERT INTO domain_verifications (agent_id, domain, token) VALUES ($1, $2, $3)
     ON CONFLICT (agent_id, domain) DO NOTHING RETURNING *`,
    [challenge.agentId, challenge.domain, challenge.token],
  )
  const row = inserted[0] ?? (await findDomainVerification(q, challenge.agentId, challenge.domain))
  if (row === null) throw new Error('domain verification row vanished after a conflicting insert')
  return row
}

/**
 * Marks a pending challenge verified. The token is part of the match so that only the challenge whose
 * record was found in DNS is marked; null when it is no longer pending (or no longer exists).
 */
export async function markDomainVerified(q: Queryable, agentId: string, domain: string, token: string): Promise<DomainVerificationRow | null> {
  const rows = await q.query<DomainVerificationRow>(
    `UPDATE domain_verifications SET verified_at = now()
     WHERE agent_id = $1 AND domain = $2 AND token = $3 AND verified_at IS NULL RETURNING *`,
    [agentId, domain, token],
  )
  return rows[0] ?? null
}

/**
 * Raises an agent's trust level to `level` when it is below it; never lowers it. Null when nothing
 * changed (already at or above the level, or the agent is gone). The condition is re-checked on the
 * locked row, so a concurrent operator change to a higher level is not overwritten.
 */
export async function raiseAgentTrustLevel(q: Queryable, agentId: string, level: number): Promise<AgentRow | null> {
  const rows = await q.query<AgentRow>(
    'UPDATE agents SET trust_level = $2, updated_at = now() WHERE id = $1 AND trust_level < $2 RETURNING *',
    [agentId, level],
  )
  return rows[0] ?? null
}

/** Sets an agent's trust level, in any organization (operator action); null when the agent does not exist. */
export async function setAgentTrustLevel(q: Queryable, agentId: string, level: number): Promise<AgentRow | null> {
  const rows = await q.query<AgentRow>(
    'UPDATE agents SET trust_level = $2, updated_at = now() WHERE id = $1 RETURNING *',
    [agentId, level],
  )
  return rows[0] ?? null
}
