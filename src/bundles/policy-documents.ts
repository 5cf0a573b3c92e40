/**
 * Stored policy documents as they leave the process and as they are resolved: the policy API shows
 * them, and the bundle builder resolves every agent's active documents and carries their lineage.
 */
import { ServiceError } from '../core/errors.js'
import { parsePolicyYaml } from '../core/policy/grammar.js'
import { resolvePolicy } from '../core/policy/merge.js'
import type { PolicyLayer, ResolvedPolicy } from '../core/policy/types.js'
import type { ActiveLayerRow, PolicyDocumentRow, PolicyScopeType } from '../db/repositories/policies.js'

/** A policy document as it leaves the process. */
export interface PolicyDocumentView {
  id: string
  org_id: string
  scope_type: PolicyScopeType
  scope_id: string
  state: PolicyDocumentRow['state']
  version: number
  yaml_content: string
  schema_version: string
  content_hash: string
  created_by_user_id: string | null
  created_by_type: PolicyDocumentRow['created_by_type']
  approved_by_user_id: string | null
  rejection_reason: string | null
  created_at: string
  updated_at: string
}

/** A lineage entry: the contributing document, plus its group's precedence for group scopes. */
export type LineageView = PolicyDocumentView & { precedence?: number }

function iso(value: Date | string): string {
  return (value instanceof Date ? value : new Date(value)).toISOString()
}

export function toDocumentView(row: PolicyDocumentRow): PolicyDocumentView {
  return {
    id: row.id,
    org_id: row.org_id,
    scope_type: row.scope_type,
    scope_id: row.scope_id,
    state: row.state,
    version: Number(row.version),
    yaml_content: row.yaml_content,
    schema_version: row.schema_version,
    content_hash: row.content_hash,
    created_by_user_id: row.created_by_user_id,
    created_by_type: row.created_by_type,
    approved_by_user_id: row.approved_by_user_id,
    rejection_reason: row.rejection_reason,
    created_at: iso(row.created_at),
    updated_at: iso(row.updated_at),
  }
}

/** A stored active document as a merge layer. */
export function layerOf(row: PolicyDocumentRow, precedence: number | null): PolicyLayer {
  const parsed = parsePolicyYaml(row.yaml_content)
  // Stored documents were validated on the way in, so a failure means the grammar got stricter since (a
  // size limit, say). Resolving without the document would drop its restrictions, so the resolution fails
  // with a code an admin can act on; approving a valid replacement for the scope repairs it.
  if (!parsed.ok) {
    const first = parsed.issues[0] as { code: string; path: string }
    throw new ServiceError(
      'stored_policy_invalid',
      `The active ${row.scope_type} policy document ${row.id} (version ${Number(row.version)}) no longer passes the policy grammar ` +
        `(${first.code} at ${first.path}, ${parsed.issues.length} problem(s)); approve a valid replacement for its scope.`,
    )
  }
  const layer: PolicyLayer = { scope_type: row.scope_type, scope_id: row.scope_id, document_id: row.id, version: Number(row.version), document: parsed.document }
  if (precedence !== null) layer.precedence = Number(precedence)
  return layer
}

export interface Resolution {
  resolved: ResolvedPolicy
  lineage: LineageView[]
}

/** Resolved map and lineage views of an agent's active layers. */
export function resolveRows(rows: readonly ActiveLayerRow[]): Resolution {
  const byId = new Map(rows.map((row) => [row.id, row]))
  const { resolved, lineage } = resolvePolicy(rows.map((row) => layerOf(row, row.precedence)))
  return {
    resolved,
    lineage: lineage.map((entry) => {
      const row = byId.get(entry.document_id) as ActiveLayerRow
      const view: LineageView = toDocumentView(row)
      if (entry.precedence !== undefined) view.precedence = entry.precedence
      return view
    }),
  }
}
