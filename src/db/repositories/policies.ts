import type { Queryable } from '../database.js'
import { POLICY_CHANNEL } from '../../core/notify-channels.js'

export type PolicyScopeType = 'org' | 'group' | 'agent'
export type PolicyState = 'proposal' | 'active' | 'superseded' | 'rejected' | 'archived'
export type CreatorType = 'human' | 'api_key'

export interface PolicyDocumentRow {
  id: string
  org_id: string
  scope_type: PolicyScopeType
  scope_id: string
  state: PolicyState
  version: number
  yaml_content: string
  schema_version: string
  content_hash: string
  created_by_user_id: string | null
  created_by_type: CreatorType
  approved_by_user_id: string | null
  rejection_reason: string | null
  created_at: Date
  updated_at: Date
}

export interface PolicyScope {
  orgId: string
  scopeType: PolicyScopeType
  scopeId: string
}

export interface NewPolicyDocument extends PolicyScope {
  id: string
  version: number
  yamlContent: string
  schemaVersion: string
  contentHash: string
  createdByUserId: string | null
  createdByType: CreatorType
}

/** Tells listeners that an org's effective policy may have changed; delivered only if the transaction commits. */
export async function notifyPolicyChange(q: Queryable, orgId: string): Promise<void> {
  await q.query('SELECT pg_notify($1, $2)', [POLICY_CHANNEL, orgId])
}

export async function insertPolicyDocument(q: Queryable, doc: NewPolicyDocument): Promise<PolicyDocumentRow> {
  const rows = await q.query<PolicyDocumentRow>(
    `INSERT INTO policy_documents (id, org_id, scope_type, scope_id, state, version, yaml_content, schema_version,
                                   content_hash, created_by_user_id, created_by_type)
     VALUES ($1, $2, $3, $4, 'proposal', $5, $6, $7, $8, $9, $10) RETURNING *`,
    [doc.id, doc.orgId, doc.scopeType, doc.scopeId, doc.version, doc.yamlContent, doc.schemaVersion, doc.contentHash,
      doc.createdByUserId, doc.createdByType],
  )
  return rows[0] as PolicyDocumentRow
}

/**
 * The version a new proposal of a scope gets: the active document's version + 1, or, when the scope has
 * no active document, the highest version the scope ever had + 1 (1 for a fresh scope).
 */
export async function nextProposalVersion(q: Queryable, scope: PolicyScope): Promise<number> {
  const rows = await q.query<{ next: number }>(
    `SELECT COALESCE(
       (SELECT version FROM policy_documents
         WHERE org_id = $1 AND scope_type = $2 AND scope_id = $3 AND state = 'active'),
       (SELECT max(version) FROM policy_documents WHERE org_id = $1 AND scope_type = $2 AND scope_id = $3),
       0) + 1 AS next`,
    [scope.orgId, scope.scopeType, scope.scopeId],
  )
  return Number(rows[0]?.next ?? 1)
}

export async function findActiveDocument(q: Queryable, scope: PolicyScope): Promise<PolicyDocumentRow | null> {
  const rows = await q.query<PolicyDocumentRow>(
    `SELECT * FROM policy_documents WHERE org_id = $1 AND scope_type = $2 AND scope_id = $3 AND state = 'active'`,
    [scope.orgId, scope.scopeType, scope.scopeId],
  )
  return rows[0] ?? null
}

/** Active, superseded and rejected documents of one scope, newest first. */
export async function listScopeHistory(q: Queryable, scope: PolicyScope): Promise<PolicyDocumentRow[]> {
  return q.query<PolicyDocumentRow>(
    `SELECT * FROM policy_documents
     WHERE org_id = $1 AND scope_type = $2 AND scope_id = $3 AND state IN ('active', 'superseded', 'rejected')
     ORDER BY created_at DESC, version DESC, id DESC`,
    [scope.orgId, scope.scopeType, scope.scopeId],
  )
}

/** Pending proposals of every scope of an org, newest first. */
export async function listProposals(q: Queryable, orgId: string): Promise<PolicyDocumentRow[]> {
  return q.query<PolicyDocumentRow>(
    `SELECT * FROM policy_documents WHERE org_id = $1 AND state = 'proposal' ORDER BY created_at DESC, id DESC`,
    [orgId],
  )
}

/** A document of one org (any state); another org's document is simply not found. */
export async function findDocument(q: Queryable, orgId: string, id: string, options: { forUpdate?: boolean } = {}): Promise<PolicyDocumentRow | null> {
  const rows = await q.query<PolicyDocumentRow>(
    `SELECT * FROM policy_documents WHERE org_id = $1 AND id = $2${options.forUpdate === true ? ' FOR UPDATE' : ''}`,
    [orgId, id],
  )
  return rows[0] ?? null
}

/**
 * Serializes approvals within one scope until the transaction ends. Without it, two approvals of
 * different proposals of one scope could each supersede the old active document and then collide on
 * the one-active index.
 */
export async function lockScope(q: Queryable, scope: PolicyScope): Promise<void> {
  await q.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`policy:${scope.orgId}:${scope.scopeType}:${scope.scopeId}`])
}

/** Moves the scope's active document (if any) to superseded; must run before a new one is activated. */
export async function supersedeActive(q: Queryable, scope: PolicyScope): Promise<void> {
  await q.query(
    `UPDATE policy_documents SET state = 'superseded', updated_at = now()
     WHERE org_id = $1 AND scope_type = $2 AND scope_id = $3 AND state = 'active'`,
    [scope.orgId, scope.scopeType, scope.scopeId],
  )
}

/** Activates a proposal; null when it is no longer a proposal (the guard that makes approval single-winner). */
export async function activateProposal(q: Queryable, orgId: string, id: string, approvedByUserId: string | null): Promise<PolicyDocumentRow | null> {
  const rows = await q.query<PolicyDocumentRow>(
    `UPDATE policy_documents SET state = 'active', approved_by_user_id = $3, updated_at = now()
     WHERE org_id = $1 AND id = $2 AND state = 'proposal' RETURNING *`,
    [orgId, id, approvedByUserId],
  )
  return rows[0] ?? null
}

/** Rejects a proposal; null when it is not (or no longer) a proposal. */
export async function rejectProposal(q: Queryable, orgId: string, id: string, reason: string): Promise<PolicyDocumentRow | null> {
  const rows = await q.query<PolicyDocumentRow>(
    `UPDATE policy_documents SET state = 'rejected', rejection_reason = $3, updated_at = now()
     WHERE org_id = $1 AND id = $2 AND state = 'proposal' RETURNING *`,
    [orgId, id, reason],
  )
  return rows[0] ?? null
}

/** Archives the live (active or proposed) documents of a scope whose group or agent is going away. */
export async function archiveScope(q: Queryable, scope: PolicyScope): Promise<number> {
  const rows = await q.query(
    `UPDATE policy_documents SET state = 'archived', updated_at = now()
     WHERE org_id = $1 AND scope_type = $2 AND scope_id = $3 AND state IN ('active', 'proposal') RETURNING id`,
    [scope.orgId, scope.scopeType, scope.scopeId],
  )
  return rows.length
}

/** A contributing active document of an agent, with its group's precedence for group scopes. */
export interface ActiveLayerRow extends PolicyDocumentRow {
  precedence: number | null
}

/**
 * The active documents that apply to an agent: the org's, those of the groups the agent belongs to
 * (with each group's precedence) and the agent's own. Order is left to the merge.
 */
export async function listActiveLayers(q: Queryable, orgId: string, agentId: string): Promise<ActiveLayerRow[]> {
  return q.query<ActiveLayerRow>(
    `SELECT d.*, NULL::integer AS precedence FROM policy_documents d
      WHERE d.org_id = $1 AND d.state = 'active' AND d.scope_type = 'org' AND d.scope_id = $1
     UNION ALL
     SELECT d.*, g.precedence FROM policy_documents d
       JOIN policy_groups g ON g.id = d.scope_id AND g.org_id = d.org_id
       JOIN policy_group_members m ON m.group_id = g.id AND m.agent_id = $2
      WHERE d.org_id = $1 AND d.state = 'active' AND d.scope_type = 'group'
     UNION ALL
     SELECT d.*, NULL::integer AS precedence FROM policy_documents d
      WHERE d.org_id = $1 AND d.state = 'active' AND d.scope_type = 'agent' AND d.scope_id = $2`,
    [orgId, agentId],
  )
}
