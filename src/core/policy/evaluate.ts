import { randomUUID } from 'node:crypto'
import { MAX_PATTERN_DOUBLE_STARS, MAX_PATTERN_SEGMENTS, MAX_PATTERN_WILDCARDS } from './limits.js'
import { compareCodePoints } from './merge.js'
import { compileSegmentGlob, globMatches, type GlobWork, type SegmentGlob } from './segment-glob.js'
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
import { TRUST_RANK } from '../trust-level.js'

// This module and policies/service/policy.rego implement one decision; policies/decision-vectors.json
// is the contract both are tested against. Any change here needs the same change there, and a vector.

/** Seconds a PEP may cache an ALLOW; DENY gets 0 and is never cached (docs/wire-contract.md §8). */
export const ALLOW_TTL_SECONDS = 60

/** The operation under which `resource.identifier` names the MCP tool when `action.mcp_tool` is absent. */
export const MCP_TOOL_CALL_OPERATION = 'mcp.tool.call'

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
  // Empty for a pattern over a structural limit: its tokens are never needed, so they are not kept.
  tokens: string[]
  // Patterns only: the tokens prepared for matching, or null when the pattern is over a structural limit.
  glob: SegmentGlob | null
  // Operations only: for a path ending in `/` (other than `/`), its tokens without that empty last one.
  withoutTrailingSlash: string[] | null
}

/**
 * A memo bounded in entries and in key characters; when either bound would be passed it starts over.
 * The keys are pattern texts from policies, so a stream of new policies (simulations, bundle updates) can
 * only ever hold a bounded amount of memory here.
 */
class BoundedMemo<V> {
  private readonly entries = new Map<string, V>()
  private chars = 0
  constructor(
    private readonly maxEntries: number,
    private readonly maxChars: number,
  ) {}

  get(key: string): V | undefined {
    return this.entries.get(key)
  }

  set(key: string, value: V): void {
    if (key.length > this.maxChars) return
    if (this.entries.size >= this.maxEntries || this.chars + key.length > this.maxChars) {
      this.entries.clear()
      this.chars = 0
    }
    this.entries.set(key, value)
    this.chars += key.length
  }

  get size(): number {
    return this.entries.size
  }

  get keyChars(): number {
    return this.chars
  }
}

// The two forms are told apart by a space: `METHOD /path` has one, a dotted name never does. For an
// operation (not a pattern) the query and fragment are cut off the path, so `GET /a?x=1` cannot dodge a
// rule for `GET /a`. An HTTP path must start with `/`; one that does not matches no pattern.
//
// Parsing is memoised: the gateway evaluates every request against the same few patterns, and
// re-splitting each rule's pattern per request was a measurable share of the embedded PDP's time.
// An operation is parsed once per evaluation through the one-entry memo below, so a stream of distinct
// request paths never accumulates.
const MAX_MEMOISED_PATTERNS = 4096
const MAX_MEMOISED_PATTERN_CHARS = 1 << 20
const parsedPatterns = new BoundedMemo<ParsedOperation | null>(MAX_MEMOISED_PATTERNS, MAX_MEMOISED_PATTERN_CHARS)
let lastOperation: string | null = null
let lastParsedOperation: ParsedOperation | null = null

function parsePattern(text: string): ParsedOperation | null {
  let parsed = parsedPatterns.get(text)
  if (parsed === undefined) {
    parsed = parsePatternUncached(text)
    parsedPatterns.set(text, parsed)
  }
  return parsed
}

function parseOperation(text: string): ParsedOperation | null {
  if (text !== lastOperation) {
    lastParsedOperation = parseOperationUncached(text)
    lastOperation = text
  }
  return lastParsedOperation
}

// How many segments `body` has, counted only up to `limit + 1`: a pattern far over the limit costs no
// more than one at it. A path body counts its "/" separators, a dotted name its "." separators plus one.
function segmentCountUpTo(body: string, separator: string, leading: boolean, limit: number): number {
  let count = leading ? 0 : 1
  let at = body.indexOf(separator)
  while (at >= 0 && count <= limit) {
    count++
    at = body.indexOf(separator, at + 1)
  }
  return count
}

/** The method (null for a dotted name) and segments of a pattern, or null when the HTTP path lacks "/". */
function patternParts(text: string): { method: string | null; body: string } | null {
  const space = text.indexOf(' ')
  if (space < 0) return { method: null, body: text }
  const body = text.slice(space + 1)
  return body.startsWith('/') ? { method: text.slice(0, space), body } : null
}

function splitBody(parts: { method: string | null; body: string }): string[] {
  return parts.method === null ? parts.body.split('.') : parts.body.split('/').slice(1)
}

// The parsed values are shared through the memo: callers only read them.
function parsePatternUncached(text: string): ParsedOperation | null {
  const parts = patternParts(text)
  if (parts === null) return null
  const separator = parts.method === null ? '.' : '/'
  if (segmentCountUpTo(parts.body, separator, parts.method !== null, MAX_PATTERN_SEGMENTS) > MAX_PATTERN_SEGMENTS) {
    return { method: parts.method, tokens: [], glob: null, withoutTrailingSlash: null }
  }
  const tokens = splitBody(parts)
  let wildcards = 0
  let doubleStars = 0
  for (const token of tokens) {
    if (token === '*' || token === '**') wildcards++
    if (token === '**') doubleStars++
  }
  if (wildcards > MAX_PATTERN_WILDCARDS || doubleStars > MAX_PATTERN_DOUBLE_STARS) return { method: parts.method, tokens: [], glob: null, withoutTrailingSlash: null }
  return { method: parts.method, tokens, glob: compileSegmentGlob(tokens), withoutTrailingSlash: null }
}

function parseOperationUncached(text: string): ParsedOperation | null {
  const space = text.indexOf(' ')
  if (space < 0) return { method: null, tokens: text.split('.'), glob: null, withoutTrailingSlash: null }
  const path = (text.slice(space + 1).split('?')[0] as string).split('#')[0] as string
  if (!path.startsWith('/')) return null
  const tokens = path.split('/').slice(1)
  const trailingSlash = tokens.length > 1 && tokens[tokens.length - 1] === ''
  return { method: text.slice(0, space), tokens, glob: null, withoutTrailingSlash: trailingSlash ? tokens.slice(0, -1) : null }
}

/** `METHOD /Path` with the path lower-cased (a dotted name as it is): how a case-insensitive route compares. */
function lowerCasePathOf(text: string): string {
  const space = text.indexOf(' ')
  return space < 0 ? text : text.slice(0, space + 1) + text.slice(space + 1).toLowerCase()
}

/**
 * Whether a pattern passes one of the grammar's structural limits: more than {@link MAX_PATTERN_SEGMENTS}
 * segments, more than {@link MAX_PATTERN_WILDCARDS} wildcard segments or more than
 * {@link MAX_PATTERN_DOUBLE_STARS} `**`. The grammar refuses such patterns; one that reaches the evaluator
 * anyway (a bundle built elsewhere, a document stored before the limits) matches nothing, and
 * {@link evaluate} denies every request that reaches the operation stage of its policy
 * (`operation_pattern_over_limit`), so refusing to match it never lifts a restriction. With these limits
 * held, matching one pattern compares at most its own segments, whatever the path. (The byte length is
 * not checked here: it only costs a linear scan once per memoised pattern.)
 */
export function patternOverLimit(pattern: string): boolean {
  const parsed = parsePattern(pattern)
  return parsed !== null && parsed.glob === null
}

/**
 * Whether an operation pattern matches an operation (grammar agreed with the policy grammar module).
 * Dotted patterns match dotted names only and `METHOD /path` patterns match HTTP operations only. The
 * method compares case-insensitively and `*` matches any method; path and dotted segments compare
 * case-sensitively; wildcards are whole segments only (`a*` is a literal). The operation's query string
 * and fragment are ignored. An operation path ending in `/` is matched with and without that slash, so
 * `GET /secret` governs `GET /secret/`; with `caseInsensitive` (a gateway route whose upstream ignores
 * case) paths compare in lower case. A pattern over a structural limit matches nothing (see
 * {@link patternOverLimit}), so the work is at most one comparison per pattern segment; `work`, when
 * given, is added to.
 */
export function operationMatches(pattern: string, operation: string, work?: GlobWork, caseInsensitive = false): boolean {
  const p = parsePattern(caseInsensitive ? lowerCasePathOf(pattern) : pattern)
  const o = parseOperation(caseInsensitive ? lowerCasePathOf(operation) : operation)
  if (p === null || o === null || p.glob === null) return false
  if (p.method === null || o.method === null) {
    if (p.method !== o.method) return false
  } else if (p.method !== '*' && p.method.toUpperCase() !== o.method.toUpperCase()) {
    return false
  }
  if (globMatches(p.glob, o.tokens, work)) return true
  // `/secret/` is governed by the rules for `/secret` too (the gateway forwards the trailing slash).
  return o.withoutTrailingSlash !== null && globMatches(p.glob, o.withoutTrailingSlash, work)
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
const specificities = new BoundedMemo<readonly [number, number, number, number, number]>(MAX_MEMOISED_PATTERNS, MAX_MEMOISED_PATTERN_CHARS)

/** patternSpecificity without the defensive copy, for selectOperationRule (which only reads it). */
function rankOf(pattern: string): readonly [number, number, number, number, number] {
  let key = specificities.get(pattern)
  if (key === undefined) {
    key = specificityUncached(pattern)
    specificities.set(pattern, key)
  }
  return key
}

function specificityUncached(pattern: string): [number, number, number, number, number] {
  const parts = patternParts(pattern)
  // Only ever ranked when it matched, so never over a limit outside direct calls.
  const parsed = parts === null ? { method: null, tokens: [] } : { method: parts.method, tokens: splitBody(parts) }
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
export function selectOperationRule(
  rules: readonly OperationRule[], operation: string, work?: GlobWork, caseInsensitive = false,
): OperationRule | undefined {
  let best: { rule: OperationRule; key: readonly number[] } | undefined
  for (const rule of rules) {
    if (typeof rule.pattern !== 'string' || !operationMatches(rule.pattern, operation, work, caseInsensitive)) continue
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
// 2. operation_pattern_over_limit when any operation rule's pattern is over a structural limit;
// 3. the most specific matching operation rule → operation_<check>;
// 4. the rule for the MCP tool, when the request names one → mcp_tool_<check>;
// 5. the most specific rule covering action.capability_class, when not null → capability_class_<check>;
// 6. the most specific rule covering context.leaf_capability, when present → leaf_capability_<check>.
// Rules add restrictions on top of the policy-wide checks; they never grant what those deny.
function decide(input: PdpRequest, policy: ResolvedPolicy, work: GlobWork | undefined): DecisionReason {
  const global = checkRule(input, policy)
  if (global !== null) return global

  const operations = list(policy.operations)
  for (const rule of operations) if (typeof rule.pattern === 'string' && patternOverLimit(rule.pattern)) return 'operation_pattern_over_limit'
  const operation = selectOperationRule(operations, input.action.operation, work, input.resource?.case_insensitive === true)
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
 * policy-wide denied / allow-list / minimum level, then a pattern over a structural limit anywhere in the
 * operation rules (fail closed), then the most specific operation rule, the MCP tool
 * rule, the capability class rule for `action.capability_class` and the one for
 * `context.leaf_capability`. An ALLOW carries a `rate_limit.apply {rpm, key}` obligation when the
 * policy has a rate limit for the subject DID and a TTL of 60 s; a DENY has no obligations and TTL 0.
 * The enforcement mode is not consulted: modes are applied by the gateway.
 *
 * Pure apart from the decision id, which is `options.decisionId()` when given, else a random UUID, and
 * `options.work`, which when given is added the matching work (for tests and measurements).
 */
export function evaluate(
  input: PdpRequest, policy: ResolvedPolicy, options: { decisionId?: () => string; work?: GlobWork } = {},
): PdpDecision {
  const reason = decide(input, policy, options.work)
  const allowed = reason === 'allowed'
  return {
    decision: allowed ? 'ALLOW' : 'DENY',
    decision_id: options.decisionId?.() ?? randomUUID(),
    obligations: allowed ? obligationsFor(input, policy) : [],
    reason,
    ttl: allowed ? ALLOW_TTL_SECONDS : 0,
  }
}

/** Sizes of the evaluator's pattern memos, for tests that check they stay bounded. */
export function memoStats(): { patterns: number; patternChars: number; specificities: number; specificityChars: number } {
  return { patterns: parsedPatterns.size, patternChars: parsedPatterns.keyChars, specificities: specificities.size, specificityChars: specificities.keyChars }
}
