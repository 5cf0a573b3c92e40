import type {
  CapabilityClassRule,
  LineageEntry,
  McpToolRule,
  MinimumTrustCode,
  OperationRule,
  PolicyLayer,
  PolicyResolution,
  PolicyRule,
  RateLimit,
  ScopeType,
} from './types.js'

const SCOPE_RANK: Readonly<Record<ScopeType, number>> = { org: 0, group: 1, agent: 2 }

/** OPA and PostgreSQL's C collation order by code point; `<` on JavaScript strings disagrees above U+FFFF. */
export function compareCodePoints(a: string, b: string): number {
  if (a === b) return 0
  let i = 0
  while (i < a.length && i < b.length) {
    const x = a.codePointAt(i) as number
    const y = b.codePointAt(i) as number
    if (x !== y) return x < y ? -1 : 1
    // Equal code points have equal widths, so one index serves both strings.
    i += x > 0xffff ? 2 : 1
  }
  return a.length - i === 0 ? -1 : 1
}

function applicationOrder(a: PolicyLayer, b: PolicyLayer): number {
  const byScope = scopeRank(a.scope_type) - scopeRank(b.scope_type)
  if (byScope !== 0) return byScope
  if (a.scope_type === 'group') {
    // Lower number = higher priority = applied later, so larger numbers go first. A group without a
    // precedence is treated as the lowest priority of all, so any ranked group overrides it.
    const pa = a.precedence ?? Number.POSITIVE_INFINITY
    const pb = b.precedence ?? Number.POSITIVE_INFINITY
    if (pa !== pb) return pa > pb ? -1 : 1
  }
  // Ties (equal precedence, or a caller passing two layers of one scope type) fall back to stable keys
  // so the result never depends on the order the database returned the rows in.
  return compareCodePoints(a.scope_id, b.scope_id) || a.version - b.version || compareCodePoints(a.document_id, b.document_id)
}

function scopeRank(scope: ScopeType): number {
  const rank = SCOPE_RANK[scope]
  if (rank === undefined) throw new TypeError(`unknown policy scope type: ${String(scope)}`)
  return rank
}

function sortedUnique(values: Iterable<string>): string[] {
  return [...new Set(values)].sort(compareCodePoints)
}

// A rule is copied field by field so a stored document's extra keys never leak into the resolved map,
// and its DID lists are deduplicated and sorted like the top-level ones.
function normalizeRule(rule: PolicyRule): PolicyRule {
  const out: PolicyRule = {}
  if (rule.min_trust_level !== undefined && rule.min_trust_level !== null) out.min_trust_level = rule.min_trust_level
  if (Array.isArray(rule.allowed_dids)) out.allowed_dids = sortedUnique(rule.allowed_dids)
  if (Array.isArray(rule.denied_dids)) out.denied_dids = sortedUnique(rule.denied_dids)
  return out
}

// The whole entry of the most specific scope, `rpm` included: a narrower scope's rule without one lifts it.
function toolRule(rule: McpToolRule): McpToolRule {
  const out: McpToolRule = { tool: rule.tool, ...normalizeRule(rule) }
  if (typeof rule.rpm === 'number') out.rpm = rule.rpm
  return out
}

// The first allow-list met is taken as is; each further one can only narrow it.
function intersect(current: ReadonlySet<string> | null, next: readonly string[]): Set<string> {
  return current === null ? new Set(next) : new Set(next.filter((did) => current.has(did)))
}

function sortedByKey<T>(entries: Map<string, T>): T[] {
  return [...entries.keys()].sort(compareCodePoints).map((key) => entries.get(key) as T)
}

/** The merge rules: docs/wire-contract.md §7. Layers are applied in scope order, whatever the order given. */
export function resolvePolicy(layers: readonly PolicyLayer[]): PolicyResolution {
  const ordered = [...layers].sort(applicationOrder)
  let minTrustLevel: MinimumTrustCode | null = null
  let allowed: Set<string> | null = null
  const denied = new Set<string>()
  const rateLimits = new Map<string, RateLimit>()
  const operations = new Map<string, OperationRule>()
  const mcpTools = new Map<string, McpToolRule>()
  const capabilityClasses = new Map<string, CapabilityClassRule>()
  const lineage: LineageEntry[] = []

  for (const layer of ordered) {
    const doc = layer.document
    if (doc.min_trust_level !== undefined && doc.min_trust_level !== null) minTrustLevel = doc.min_trust_level
    if (Array.isArray(doc.allowed_dids)) allowed = intersect(allowed, doc.allowed_dids)
    for (const did of doc.denied_dids ?? []) denied.add(did)
    for (const limit of doc.rate_limits ?? []) rateLimits.set(limit.did, { did: limit.did, rpm: limit.rpm })
    for (const rule of doc.operations ?? []) operations.set(rule.pattern, { pattern: rule.pattern, ...normalizeRule(rule) })
    for (const rule of doc.mcp_tools ?? []) mcpTools.set(rule.tool, toolRule(rule))
    for (const rule of doc.capability_classes ?? []) capabilityClasses.set(rule.class, { class: rule.class, ...normalizeRule(rule) })

    const entry: LineageEntry = {
      document_id: layer.document_id,
      scope_type: layer.scope_type,
      scope_id: layer.scope_id,
      version: layer.version,
    }
    if (layer.precedence !== undefined && layer.precedence !== null) entry.precedence = layer.precedence
    lineage.push(entry)
  }

  return {
    resolved: {
      min_trust_level: minTrustLevel,
      allowed_dids: allowed === null ? null : sortedUnique(allowed),
      denied_dids: sortedUnique(denied),
      rate_limits: sortedByKey(rateLimits),
      operations: sortedByKey(operations),
      mcp_tools: sortedByKey(mcpTools),
      capability_classes: sortedByKey(capabilityClasses),
    },
    lineage,
  }
}
