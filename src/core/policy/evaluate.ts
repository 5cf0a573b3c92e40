import { randomUUID } from 'node:crypto'
import { compareCodePoints } from './merge.js'
import type {
  CapabilityClassRule,
  DecisionReason,
  McpToolRule,
  Obligation,
  OperationRule,
  PdpDecision,
  PdpRequest,
  ResolvedPolicy,
  RuleCheckFailure,
} from './types.js'

// This module and policies/service/policy.rego implement one decision; policies/decision-vectors.json
// is the contract both are tested against. Any change here needs the same change there, and a vector.

/** Seconds a PEP may cache an ALLOW; DENY gets 0 and is never cached (protocol.md §8). */
export const ALLOW_TTL_SECONDS = 60

/** The operation under which `resource.identifier` names the MCP tool when `action.mcp_tool` is absent. */
export const MCP_TOOL_CALL_OPERATION = 'mcp.tool.call'

const TRUST_RANK: ReadonlyMap<string, number> = new Map([
  ['SS', 0],
  ['REG', 1],
  ['DV', 2],
  ['OV', 3],
  ['EV', 4],
])

/**
 * Whether a subject's trust level satisfies a minimum. `null`, `undefined` and `""` mean no minimum. A
 * subject level outside SS…EV (including `""`) satisfies no minimum, and an unknown minimum is satisfied
 * by nobody: a malformed policy or request fails closed.
 */
export function meetsMinimumTrust(level: string, minimum: string | null | undefined): boolean {
  if (minimum === null || minimum === undefined || minimum === '') return true
  const need = TRUST_RANK.get(minimum)
  const have = TRUST_RANK.get(level)
  return need !== undefined && have !== undefined && have >= need
}

interface RuleChecks {
  min_trust_level?: string | null
  allowed_dids?: string[] | null
  denied_dids?: string[] | null
}

// The three checks every scope-wide policy and every selected rule applies, in this order:
// 1. denied_did: the subject is listed in denied_dids (a denial beats any allow-list entry);
// 2. not_in_allow_list: allowed_dids is present and not null and the subject is not in it ([] = nobody);
// 3. trust_level_below_minimum: the subject's level is below min_trust_level.
function checkRule(input: PdpRequest, rule: RuleChecks): RuleCheckFailure | null {
  const did = input.subject.did
  if (Array.isArray(rule.denied_dids) && rule.denied_dids.includes(did)) return 'denied_did'
  const allowed = rule.allowed_dids
  // Anything other than null/absent that is not an array containing the subject restricts, so that a
  // malformed allow-list fails closed, as it does in the Rego module.
  if (allowed !== null && allowed !== undefined && !(Array.isArray(allowed) && allowed.includes(did))) return 'not_in_allow_list'
  if (!meetsMinimumTrust(input.subject.trust_level, rule.min_trust_level)) return 'trust_level_below_minimum'
  return null
}

interface ParsedOperation {
  // null for a dotted name; the method (or `*` in a pattern) for the HTTP form.
  method: string | null
  tokens: string[]
  // Whether a `**` segment occurs: without one, matching is a plain segment-by-segment comparison.
  doubleStar: boolean
}

// The two forms are told apart by a space: `METHOD /path` has one, a dotted name never does. For an
// operation (not a pattern) the query and fragment are cut off the path, so `GET /a?x=1` cannot dodge a
// rule for `GET /a`. An HTTP path must start with `/`; one that does not matches no pattern.
//
// Parsing is memoised: the gateway evaluates every request against the same few patterns, and
// re-splitting each rule's pattern per request was a measurable share of the embedded PDP's time
// (bench/gateway.ts profile). Patterns come from policy documents, so the memo is bounded and simply
// dropped when full; an operation is parsed once per evaluation through the one-entry memo below.
const MAX_MEMOISED_PATTERNS = 10_000
const parsedPatterns = new Map<string, ParsedOperation | null>()
let lastOperation: string | null = null
let lastParsedOperation: ParsedOperation | null = null

function parseOperation(text: string, isPattern: boolean): ParsedOperation | null {
  if (isPattern) {
    let parsed = parsedPatterns.get(text)
    if (parsed === undefined) {
      if (parsedPatterns.size >= MAX_MEMOISED_PATTERNS) parsedPatterns.clear()
      parsed = parseUncached(text, true)
      parsedPatterns.set(text, parsed)
    }
    return parsed
  }
  if (text !== lastOperation) {
    lastParsedOperation = parseUncached(text, false)
    lastOperation = text
  }
  return lastParsedOperation
}

// The parsed values are shared through the memo: callers only read them.
function parseUncached(text: string, isPattern: boolean): ParsedOperation | null {
  const space = text.indexOf(' ')
  if (space < 0) {
    const tokens = text.split('.')
    return { method: null, tokens, doubleStar: isPattern && tokens.includes('**') }
  }
  let path = text.slice(space + 1)
  if (!isPattern) path = (path.split('?')[0] as string).split('#')[0] as string
  if (!path.startsWith('/')) return null
  const tokens = path.split('/').slice(1)
  return { method: text.slice(0, space), tokens, doubleStar: isPattern && tokens.includes('**') }
}

// The two rows of tokensMatch's table, kept between calls (the evaluator runs per request): 1 = reachable.
let reachableRow = new Uint8Array(64)
let nextRow = new Uint8Array(64)

// Segment matching: `*` matches exactly one segment (any text, the empty segment included), `**`
// matches any number of segments including none, anything else matches itself exactly. `reachable[j]`
// says whether the pattern tokens seen so far can consume exactly the first j target segments.
function tokensMatch(pattern: ParsedOperation, target: readonly string[]): boolean {
  const tokens = pattern.tokens
  if (!pattern.doubleStar) {
    // Without `**` every pattern segment consumes exactly one target segment.
    if (tokens.length !== target.length) return false
    for (let i = 0; i < tokens.length; i++) {
      const token = tokens[i] as string
      if (token !== '*' && token !== target[i]) return false
    }
    return true
  }
  const width = target.length + 1
  if (reachableRow.length < width) {
    reachableRow = new Uint8Array(width * 2)
    nextRow = new Uint8Array(width * 2)
  }
  let reachable = reachableRow
  let next = nextRow
  reachable.fill(0, 0, width)
  reachable[0] = 1
  for (const token of tokens) {
    for (let j = 0; j < width; j++) {
      if (token === '**') next[j] = reachable[j]! | (j > 0 ? next[j - 1]! : 0)
      else next[j] = j > 0 && reachable[j - 1] === 1 && (token === '*' || token === target[j - 1]) ? 1 : 0
    }
    const swap = reachable
    reachable = next
    next = swap
  }
  return reachable[target.length] === 1
}

/**
 * Whether an operation pattern matches an operation (grammar agreed with the policy grammar module).
 * Dotted patterns match dotted names only and `METHOD /path` patterns match HTTP operations only. The
 * method compares case-insensitively and `*` matches any method; path and dotted segments compare
 * case-sensitively; wildcards are whole segments only (`a*` is a literal). The operation's query string
 * and fragment are ignored.
 */
export function operationMatches(pattern: string, operation: string): boolean {
  const p = parseOperation(pattern, true)
  const o = parseOperation(operation, false)
  if (p === null || o === null) return false
  if (p.method === null || o.method === null) {
    if (p.method !== o.method) return false
  } else if (p.method !== '*' && p.method.toUpperCase() !== o.method.toUpperCase()) {
    return false
  }
  return tokensMatch(p, o.tokens)
}

/**
 * How specific an operation pattern is, as a key compared element by element, smaller first:
 * 1. fewer wildcards (each `*` or `**` segment, plus a `*` method);
 * 2. longer literal prefix: more literal path (or dotted) segments before the first wildcard segment;
 * 3. a literal method before a `*` method;
 * 4. fewer `**` segments (a `*` is narrower than a `**`);
 * 5. more segments in all.
 * Remaining ties go to the pattern text in code-point order, then to the later rule (see
 * `selectOperationRule`). The Rego module computes the same key.
 */
export function patternSpecificity(pattern: string): [number, number, number, number, number] {
  // A copy: callers may keep or change the key they were given.
  return [...rankOf(pattern)] as [number, number, number, number, number]
}

// Memoised like parsed patterns (the evaluator ranks the same few patterns on every request).
const specificities = new Map<string, readonly [number, number, number, number, number]>()

/** patternSpecificity without the defensive copy, for selectOperationRule (which only reads it). */
function rankOf(pattern: string): readonly [number, number, number, number, number] {
  let key = specificities.get(pattern)
  if (key === undefined) {
    if (specificities.size >= MAX_MEMOISED_PATTERNS) specificities.clear()
    key = specificityUncached(pattern)
    specificities.set(pattern, key)
  }
  return key
}

function specificityUncached(pattern: string): [number, number, number, number, number] {
  const parsed = parseOperation(pattern, true) ?? { method: null, tokens: [] }
  const methodWildcard = parsed.method === '*' ? 1 : 0
  let wildcards = methodWildcard
  let doubleStars = 0
  let literalPrefix = -1
  parsed.tokens.forEach((token, index) => {
    if (token !== '*' && token !== '**') return
    wildcards += 1
    if (token === '**') doubleStars += 1
    if (literalPrefix < 0) literalPrefix = index
  })
  if (literalPrefix < 0) literalPrefix = parsed.tokens.length
  return [wildcards, -literalPrefix, methodWildcard, doubleStars, -parsed.tokens.length]
}

function compareKeys(a: readonly number[], b: readonly number[]): number {
  for (let i = 0; i < a.length; i++) {
    const d = (a[i] as number) - (b[i] as number)
    if (d !== 0) return d
  }
  return 0
}

/**
 * The one operation rule that governs an operation: the most specific matching pattern (see
 * `patternSpecificity`), or undefined when none matches. Only that rule is applied, so a narrow rule can
 * relax a broad one. Of rules with the same pattern (possible only in an unmerged document) the last wins,
 * as in the merge.
 */
export function selectOperationRule(rules: readonly OperationRule[], operation: string): OperationRule | undefined {
  let best: { rule: OperationRule; key: readonly number[] } | undefined
  for (const rule of rules) {
    if (typeof rule.pattern !== 'string' || !operationMatches(rule.pattern, operation)) continue
    const key = rankOf(rule.pattern)
    // `<=` on ties lets a later rule with the same pattern replace an earlier one.
    if (best === undefined || (compareKeys(key, best.key) || compareCodePoints(rule.pattern, best.rule.pattern)) <= 0) {
      best = { rule, key }
    }
  }
  return best?.rule
}

/** Whether a capability class rule covers a class: the class itself and its dot-descendants. */
export function capabilityClassApplies(ruleClass: string, capability: string): boolean {
  return capability === ruleClass || capability.startsWith(`${ruleClass}.`)
}

/**
 * The one capability class rule that governs a class: the longest (most specific) rule class that
 * covers it; of duplicates the last wins.
 */
export function selectCapabilityClassRule(
  rules: readonly CapabilityClassRule[],
  capability: string,
): CapabilityClassRule | undefined {
  let best: CapabilityClassRule | undefined
  for (const rule of rules) {
    if (typeof rule.class !== 'string' || !capabilityClassApplies(rule.class, capability)) continue
    // Every covering class is a prefix of `capability`, so a longer one is a descendant of a shorter one.
    if (best === undefined || rule.class.length >= best.class.length) best = rule
  }
  return best
}

/**
 * The MCP tool a request calls, or null: `action.mcp_tool` when it is a non-empty string, otherwise
 * `resource.identifier` when `action.operation` is `mcp.tool.call`.
 */
export function mcpToolOf(input: PdpRequest): string | null {
  const named = input.action.mcp_tool
  if (typeof named === 'string' && named !== '') return named
  if (input.action.operation === MCP_TOOL_CALL_OPERATION && typeof input.resource.identifier === 'string') {
    return input.resource.identifier
  }
  return null
}

function selectMcpToolRule(rules: readonly McpToolRule[], tool: string): McpToolRule | undefined {
  let best: McpToolRule | undefined
  for (const rule of rules) if (rule.tool === tool) best = rule
  return best
}

function list<T>(value: readonly T[] | null | undefined): readonly T[] {
  return Array.isArray(value) ? value : []
}

// The decision, as the first failing check in this order; the first failure is the reason:
// 1. the policy-wide checks (denied_did, not_in_allow_list, trust_level_below_minimum);
// 2. the most specific matching operation rule → operation_<check>;
// 3. the rule for the MCP tool, when the request names one → mcp_tool_<check>;
// 4. the most specific rule covering action.capability_class, when not null → capability_class_<check>;
// 5. the most specific rule covering context.leaf_capability, when present → leaf_capability_<check>.
// Rules add restrictions on top of the policy-wide checks; they never grant what those deny.
function decide(input: PdpRequest, policy: ResolvedPolicy): DecisionReason {
  const global = checkRule(input, policy)
  if (global !== null) return global

  const operation = selectOperationRule(list(policy.operations), input.action.operation)
  const operationFailure = operation === undefined ? null : checkRule(input, operation)
  if (operationFailure !== null) return `operation_${operationFailure}`

  const tool = mcpToolOf(input)
  const toolRule = tool === null ? undefined : selectMcpToolRule(list(policy.mcp_tools), tool)
  const toolFailure = toolRule === undefined ? null : checkRule(input, toolRule)
  if (toolFailure !== null) return `mcp_tool_${toolFailure}`

  const capability = input.action.capability_class
  const classRule = typeof capability === 'string' ? selectCapabilityClassRule(list(policy.capability_classes), capability) : undefined
  const classFailure = classRule === undefined ? null : checkRule(input, classRule)
  if (classFailure !== null) return `capability_class_${classFailure}`

  const leaf = input.context.leaf_capability
  const leafRule = typeof leaf === 'string' ? selectCapabilityClassRule(list(policy.capability_classes), leaf) : undefined
  const leafFailure = leafRule === undefined ? null : checkRule(input, leafRule)
  if (leafFailure !== null) return `leaf_capability_${leafFailure}`

  return 'allowed'
}

// An ALLOW carries `rate_limit.apply` when the policy budgets the subject's DID (the last entry wins,
// as in the merge). A DENY carries no obligation: there is nothing left for the PEP to enforce.
function obligationsFor(input: PdpRequest, policy: ResolvedPolicy): Obligation[] {
  let limit: { rpm: number } | undefined
  for (const entry of list(policy.rate_limits)) if (entry.did === input.subject.did) limit = entry
  return limit === undefined ? [] : [{ type: 'rate_limit.apply', params: { rpm: limit.rpm, key: input.subject.did } }]
}

/**
 * The built-in PDP: decides a request against an agent's resolved policy, exactly as the Rego module
 * `service.policy` does. The checks run in a fixed order and the first failure is the DENY reason:
 * policy-wide denied / allow-list / minimum level, then the most specific operation rule, the MCP tool
 * rule, the capability class rule for `action.capability_class` and the one for
 * `context.leaf_capability`. An ALLOW carries a `rate_limit.apply {rpm, key}` obligation when the
 * policy has a rate limit for the subject DID and a TTL of 60 s; a DENY has no obligations and TTL 0.
 * The enforcement mode is not consulted: modes are applied by the gateway.
 *
 * Pure apart from the decision id, which is `options.decisionId()` when given, else a random UUID.
 */
export function evaluate(input: PdpRequest, policy: ResolvedPolicy, options: { decisionId?: () => string } = {}): PdpDecision {
  const reason = decide(input, policy)
  const allowed = reason === 'allowed'
  return {
    decision: allowed ? 'ALLOW' : 'DENY',
    decision_id: options.decisionId?.() ?? randomUUID(),
    obligations: allowed ? obligationsFor(input, policy) : [],
    reason,
    ttl: allowed ? ALLOW_TTL_SECONDS : 0,
  }
}
