// Shapes of resolved policies and the PDP exchange (docs/api.md §2.12). The document shapes are the grammar
// module's (one declaration); the per-entry rule names below are views of them.
import type { TrustCode } from '../trust-level.js'
import type { MinimumTrustCode, PolicyDocument, PolicyRule } from './grammar.js'

export type { MinimumTrustCode, PolicyDocument, PolicyRule, TrustCode }

/** A per-DID request budget, in requests per minute. */
export type RateLimit = NonNullable<PolicyDocument['rate_limits']>[number]

/** A rule for the operations matching `pattern` (dotted name or `METHOD /path/glob`). */
export type OperationRule = NonNullable<PolicyDocument['operations']>[number]

/** A rule for one MCP tool, matched by exact, case-sensitive name. */
export type McpToolRule = NonNullable<PolicyDocument['mcp_tools']>[number]

/** A rule for a capability class and its dot-descendants. */
export type CapabilityClassRule = NonNullable<PolicyDocument['capability_classes']>[number]

/** The scope a policy document belongs to. */
export type ScopeType = 'org' | 'group' | 'agent'

/** One active policy document contributing to an agent's resolved policy. */
export interface PolicyLayer {
  scope_type: ScopeType
  scope_id: string
  document_id: string
  version: number
  /** Group precedence: lower number = higher priority. Only meaningful for groups. */
  precedence?: number
  document: PolicyDocument
}

/** A contributing document, listed in the order the merge applied it (docs/wire-contract.md §13). */
export interface LineageEntry {
  document_id: string
  scope_type: ScopeType
  scope_id: string
  version: number
  precedence?: number
}

/**
 * The merged policy of one agent (docs/wire-contract.md §7). `min_trust_level` is `null` when no scope sets it and
 * `''` when the most specific scope that sets it explicitly says "no minimum"; both mean no minimum.
 * `allowed_dids` is `null` when no scope restricts, `[]` when the intersection is empty (nobody).
 * Every list is sorted by its key in code-point order, so equal inputs serialize identically.
 */
export interface ResolvedPolicy {
  min_trust_level: MinimumTrustCode | null
  allowed_dids: string[] | null
  denied_dids: string[]
  rate_limits: RateLimit[]
  operations: OperationRule[]
  mcp_tools: McpToolRule[]
  capability_classes: CapabilityClassRule[]
}

/** The output of `resolvePolicy`: the merged map and the documents that made it, in applied order. */
export interface PolicyResolution {
  resolved: ResolvedPolicy
  lineage: LineageEntry[]
}

/**
 * The PDP request of docs/api.md §2.12. `action.mcp_tool` is this service's addition: the gateway names the
 * MCP tool there; when it is absent and `action.operation` is `mcp.tool.call`, `resource.identifier`
 * names the tool instead.
 */
export interface PdpRequest {
  pip_version: 'service.pip.v1'
  subject: { did: string; badge_jti: string; ial: string; trust_level: TrustCode | '' }
  action: { operation: string; capability_class: string | null; mcp_tool?: string }
  /**
   * `case_insensitive`: present (true) only when the gateway route's upstream ignores path case; the path
   * is then lower-cased and operation patterns compare case-insensitively.
   */
  resource: { identifier: string; case_insensitive?: true }
  context: {
    txn_id: string
    enforcement_mode: string
    /** Present only with a verified delegation chain (docs/api.md §4.9): the leaf envelope's class. */
    leaf_capability?: string
    /** Present only with a verified delegation chain: the number of envelopes. */
    delegation_depth?: number
    /** With a verified chain: the leaf envelope's constraints, and its parent's (null at depth 1). */
    leaf_constraints?: Record<string, unknown>
    parent_constraints?: Record<string, unknown> | null
  }
  environment: { workspace?: string; pep_id: string; time: string }
}

/** An obligation the PEP must meet before forwarding (docs/wire-contract.md §8 lists the built-in types). */
export interface Obligation {
  type: string
  params: Record<string, unknown>
}

/** The PDP response of docs/api.md §2.12. */
export interface PdpDecision {
  decision: 'ALLOW' | 'DENY'
  decision_id: string
  obligations: Obligation[]
  reason: string
  ttl: number
}

/** The failure of one rule's three checks, in the order they are tried. */
export type RuleCheckFailure = 'denied_did' | 'not_in_allow_list' | 'trust_level_below_minimum'

/**
 * The stable reason codes of the built-in evaluator and the Rego module: `allowed`, a bare check failure
 * for the policy-wide checks, or the check failure prefixed by the rule family that failed it.
 */
export type DecisionReason =
  | 'allowed'
  | RuleCheckFailure
  | 'operation_pattern_over_limit'
  | `operation_${RuleCheckFailure}`
  | `mcp_tool_${RuleCheckFailure}`
  | `capability_class_${RuleCheckFailure}`
  | `leaf_capability_${RuleCheckFailure}`
