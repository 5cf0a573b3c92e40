// Shapes of resolved policies and the PDP exchange (docs/api.md §2.12). The document shapes are the grammar
// module's (one declaration); the per-entry rule names below are views of them.
import type { TrustCode } from '../trust-level.js'
import type { MinimumTrustCode, PolicyDocument, PolicyRule } from './grammar.js'

export type { MinimumTrustCode, PolicyDocument, PolicyRule, TrustCode }

export type RateLimit = NonNullable<PolicyDocument['rate_limits']>[number]

export type OperationRule = NonNullable<PolicyDocument['operations']>[number]

export type McpToolRule = NonNullable<PolicyDocument['mcp_tools']>[number]

export type CapabilityClassRule = NonNullable<PolicyDocument['capability_classes']>[number]

export type ScopeType = 'org' | 'group' | 'agent'

export interface PolicyLayer {
  scope_type: ScopeType
  scope_id: string
  document_id: string
  version: number
  /** Group precedence: lower number = higher priority. Only meaningful for groups. */
  precedence?: number
  document: PolicyDocument
}

export interface LineageEntry {
  document_id: string
  scope_type: ScopeType
  scope_id: string
  version: number
  precedence?: number
}

/** docs/wire-contract.md §7: `null` and `''` both mean no minimum; `allowed_dids: []` allows nobody. */
export interface ResolvedPolicy {
  min_trust_level: MinimumTrustCode | null
  allowed_dids: string[] | null
  denied_dids: string[]
  rate_limits: RateLimit[]
  operations: OperationRule[]
  mcp_tools: McpToolRule[]
  capability_classes: CapabilityClassRule[]
}

export interface PolicyResolution {
  resolved: ResolvedPolicy
  lineage: LineageEntry[]
}

/** docs/wire-contract.md §8; `action.mcp_tool`, `action.http_operation` and `action.a2a_skill` are this service's additions. */
export interface PdpRequest {
  pip_version: 'service.pip.v1'
  subject: { did: string; badge_jti: string; ial: string; trust_level: TrustCode | '' }
  /** On an MCP message `operation` names the MCP method and `http_operation` the HTTP request (`METHOD /path`). */
  action: { operation: string; capability_class: string | null; mcp_tool?: string; http_operation?: string; a2a_skill?: string }
  /** `case_insensitive` only on a route whose upstream ignores path case. */
  resource: { identifier: string; case_insensitive?: true }
  context: {
    txn_id: string
    enforcement_mode: string
    /** The chain members only with a verified delegation chain; `parent_constraints` null at depth 1. */
    leaf_capability?: string
    delegation_depth?: number
    leaf_constraints?: Record<string, unknown>
    parent_constraints?: Record<string, unknown> | null
  }
  environment: { workspace?: string; pep_id: string; time: string }
}

export interface Obligation {
  type: string
  params: Record<string, unknown>
}

export interface PdpDecision {
  decision: 'ALLOW' | 'DENY'
  decision_id: string
  obligations: Obligation[]
  reason: string
  ttl: number
  /** Only on a DENY for the trust level (reason `…trust_level_below_minimum`): the minimum the failing check wanted. */
  required_trust_level?: TrustCode
}

/** The failure of one rule's three checks, in the order they are tried. */
export type RuleCheckFailure = 'denied_did' | 'not_in_allow_list' | 'trust_level_below_minimum'

/** Shared by the built-in evaluator and the Rego module; a rule family prefixes a rule's check failure. */
export type DecisionReason =
  | 'allowed'
  | RuleCheckFailure
  | 'operation_pattern_over_limit'
  | 'mcp_tool_pattern_over_limit'
  | `operation_${RuleCheckFailure}`
  | `mcp_tool_${RuleCheckFailure}`
  | `capability_class_${RuleCheckFailure}`
  | `leaf_capability_${RuleCheckFailure}`
