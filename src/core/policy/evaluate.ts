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
import { TRUST_RANK, type TrustCode } from '../trust-level.js'

// This module and policies/service/policy.rego implement one decision; policies/decision-vectors.json
// is the contract both are tested against. Any change here needs the same change there, and a vector.

/** Seconds a PEP may cache an ALLOW; DENY gets 0 and is never cached (docs/wire-contract.md §8). */
export const ALLOW_TTL_SECONDS = 60

export const MCP_TOOL_CALL_OPERATION = 'mcp.tool.call'

/** Fails closed: an unknown minimum is met by nobody, a level outside SS…EV meets none. */
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

// A denial beats any allow-list entry; `[]` allows nobody.
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
  method: string | null
  // Empty for a pattern over a structural limit: its tokens are never needed, so they are not kept.
  tokens: string[]
  // Patterns only: the tokens prepared for matching, or null when the pattern is over a structural limit.
  glob: SegmentGlob | null
  // Operations only: for a path ending in `/` (other than `/`), its tokens without that empty last one.
  withoutTrailingSlash: string[] | null
}

/** Starts over when either bound would be passed: a stream of new policies holds bounded memory. */
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

// Patterns are memoised (every request meets the same few); an operation only while it is evaluated, so
// distinct request paths never accumulate (docs/policy-limits.md, "How matching is bounded").
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

// Counted only up to `limit + 1`: a pattern far over the limit costs no more than one at it.
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

// The query and fragment are cut off, so `GET /a?x=1` cannot dodge a rule for `GET /a`.
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
 * Such a pattern (from a bundle built elsewhere) matches nothing, and {@link evaluate} then denies at the
 * operation stage, so refusing to match it never lifts a restriction.
 */
export function patternOverLimit(pattern: string): boolean {
  const parsed = parsePattern(pattern)
  return parsed !== null && parsed.glob === null
}

/** The rules: policies/README.md, "Operation patterns". `work`, when given, is added to. */
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

/** Smaller is more specific, as the Rego module computes it: policies/README.md, "Operation patterns". */
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

/** Only the most specific match applies, so a narrow rule can relax a broad one. */
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

export function capabilityClassApplies(ruleClass: string, capability: string): boolean {
  return capability === ruleClass || capability.startsWith(`${ruleClass}.`)
}

/** The longest covering rule class; of duplicates the last wins. */
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

export function mcpToolOf(input: PdpRequest): string | null {
  const named = input.action.mcp_tool
  if (typeof named === 'string' && named !== '') return named
  if (input.action.operation === MCP_TOOL_CALL_OPERATION && typeof input.resource.identifier === 'string') {
    return input.resource.identifier
  }
  return null
}

/** A tool pattern cut at its `*`s, or `parts` null when it has more than MAX_PATTERN_WILDCARDS of them. */
interface ToolPattern {
  readonly parts: readonly string[] | null
  /** Smaller is more specific: `*` count, then literal prefix and literal characters (negated, in code points). */
  readonly key: readonly [number, number, number]
}

// Memoised like operation patterns; a request's tool name is never kept.
const toolPatterns = new BoundedMemo<ToolPattern>(MAX_MEMOISED_PATTERNS, MAX_MEMOISED_PATTERN_CHARS)

function parseToolPattern(pattern: string): ToolPattern {
  let parsed = toolPatterns.get(pattern)
  if (parsed === undefined) {
    parsed = toolPatternUncached(pattern)
    toolPatterns.set(pattern, parsed)
  }
  return parsed
}

// Code points, as OPA's count() reads strings: a character outside the BMP counts once.
function codePointLength(text: string): number {
  let length = text.length
  for (let i = 0; i < text.length - 1; i++) {
    const unit = text.charCodeAt(i)
    if (unit >= 0xd800 && unit <= 0xdbff) {
      const next = text.charCodeAt(i + 1)
      if (next >= 0xdc00 && next <= 0xdfff) {
        length--
        i++
      }
    }
  }
  return length
}

function toolPatternUncached(pattern: string): ToolPattern {
  // Counted only up to the limit + 1, so a pattern far over it costs no more than one at it.
  let stars = 0
  for (let at = pattern.indexOf('*'); at >= 0 && stars <= MAX_PATTERN_WILDCARDS; at = pattern.indexOf('*', at + 1)) stars++
  if (stars > MAX_PATTERN_WILDCARDS) return { parts: null, key: [stars, 0, 0] }
  const parts = pattern.split('*')
  return { parts, key: [stars, -codePointLength(parts[0] as string), stars - codePointLength(pattern)] }
}

// The fixed parts in order: the first at the start, the last at the end, each middle one at its leftmost
// place after the one before (safe, since a `*` follows it), so nothing backtracks.
function toolPartsMatch(parts: readonly string[], tool: string): boolean {
  const first = parts[0] as string
  if (parts.length === 1) return tool === first
  const last = parts[parts.length - 1] as string
  const end = tool.length - last.length
  if (end < first.length || !tool.startsWith(first) || !tool.endsWith(last)) return false
  let at = first.length
  for (let i = 1; i < parts.length - 1; i++) {
    const part = parts[i] as string
    const found = tool.indexOf(part, at)
    if (found < 0 || found + part.length > end) return false
    at = found + part.length
  }
  return true
}

/** `*` is any run of characters; everything else is literal and case-sensitive (policies/README.md). */
export function toolPatternMatches(pattern: string, tool: string): boolean {
  const parts = parseToolPattern(pattern).parts
  return parts !== null && toolPartsMatch(parts, tool)
}

/** Such a pattern (from a bundle built elsewhere) matches nothing, and {@link evaluate} then denies. */
export function toolPatternOverLimit(pattern: string): boolean {
  return parseToolPattern(pattern).parts === null
}

/** The most specific matching rule (policies/README.md, "MCP tool patterns"); of duplicates the last. */
export function selectMcpToolRule(rules: readonly McpToolRule[], tool: string): McpToolRule | undefined {
  let best: McpToolRule | undefined
  let bestKey: readonly number[] = []
  for (const rule of rules) {
    if (typeof rule.tool !== 'string') continue
    const pattern = parseToolPattern(rule.tool)
    if (pattern.parts === null || !toolPartsMatch(pattern.parts, tool)) continue
    // `<=` on ties lets a later rule with the same pattern replace an earlier one.
    if (best === undefined || (compareKeys(pattern.key, bestKey) || compareCodePoints(rule.tool, best.tool)) <= 0) {
      best = rule
      bestKey = pattern.key
    }
  }
  return best
}

/** The bucket of a per-tool rate limit: a DID has no space, so the key never equals a subject-wide one. */
export function mcpToolRateLimitKey(did: string, tool: string): string {
  return `${did} mcp_tool ${tool}`
}

function list<T>(value: readonly T[] | null | undefined): readonly T[] {
  return Array.isArray(value) ? value : []
}

/** Where {@link decide} leaves the rule whose check failed, for `required_trust_level`. */
interface Failing {
  rule: RuleChecks | null
}

function operationFailure(
  input: PdpRequest, rules: readonly OperationRule[], operation: string, work: GlobWork | undefined, failing: Failing,
): RuleCheckFailure | null {
  const rule = selectOperationRule(rules, operation, work, input.resource?.case_insensitive === true)
  return rule === undefined ? null : ruleFailure(input, rule, failing)
}

function ruleFailure(input: PdpRequest, rule: RuleChecks, failing: Failing): RuleCheckFailure | null {
  const failure = checkRule(input, rule)
  if (failure !== null) failing.rule = rule
  return failure
}

// The first failing check is the reason (policies/README.md, "The decision"); rules never grant what the
// policy-wide checks deny.
function decide(
  input: PdpRequest, policy: ResolvedPolicy, toolRule: McpToolRule | undefined, work: GlobWork | undefined, failing: Failing,
): DecisionReason {
  const global = ruleFailure(input, policy, failing)
  if (global !== null) return global

  const operations = list(policy.operations)
  for (const rule of operations) if (typeof rule.pattern === 'string' && patternOverLimit(rule.pattern)) return 'operation_pattern_over_limit'
  for (const rule of list(policy.mcp_tools)) if (typeof rule.tool === 'string' && toolPatternOverLimit(rule.tool)) return 'mcp_tool_pattern_over_limit'

  // On an MCP message the HTTP request's own operation is checked too, so path rules hold on MCP routes.
  const httpOperation = input.action.http_operation
  const httpFailure = typeof httpOperation === 'string' ? operationFailure(input, operations, httpOperation, work, failing) : null
  if (httpFailure !== null) return `operation_${httpFailure}`
  const operationFailed = operationFailure(input, operations, input.action.operation, work, failing)
  if (operationFailed !== null) return `operation_${operationFailed}`

  const toolFailure = toolRule === undefined ? null : ruleFailure(input, toolRule, failing)
  if (toolFailure !== null) return `mcp_tool_${toolFailure}`

  const capability = input.action.capability_class
  const classRule = typeof capability === 'string' ? selectCapabilityClassRule(list(policy.capability_classes), capability) : undefined
  const classFailure = classRule === undefined ? null : ruleFailure(input, classRule, failing)
  if (classFailure !== null) return `capability_class_${classFailure}`

  const leaf = input.context.leaf_capability
  const leafRule = typeof leaf === 'string' ? selectCapabilityClassRule(list(policy.capability_classes), leaf) : undefined
  const leafFailure = leafRule === undefined ? null : ruleFailure(input, leafRule, failing)
  if (leafFailure !== null) return `leaf_capability_${leafFailure}`

  return 'allowed'
}

// The subject's limit (the last entry wins, as in the merge), then the tool's own bucket.
function obligationsFor(input: PdpRequest, policy: ResolvedPolicy, tool: string | null, toolRule: McpToolRule | undefined): Obligation[] {
  let limit: { rpm: number } | undefined
  for (const entry of list(policy.rate_limits)) if (entry.did === input.subject.did) limit = entry
  const obligations: Obligation[] = limit === undefined ? [] : [{ type: 'rate_limit.apply', params: { rpm: limit.rpm, key: input.subject.did } }]
  if (tool !== null && toolRule !== undefined && toolRule.rpm !== undefined) {
    obligations.push({ type: 'rate_limit.apply', params: { rpm: toolRule.rpm, key: mcpToolRateLimitKey(input.subject.did, tool) } })
  }
  return obligations
}

/** The built-in PDP. Pure apart from the decision id (`options.decisionId`, else a random UUID). */
export function evaluate(
  input: PdpRequest, policy: ResolvedPolicy, options: { decisionId?: () => string; work?: GlobWork } = {},
): PdpDecision {
  const tool = mcpToolOf(input)
  const toolRule = tool === null ? undefined : selectMcpToolRule(list(policy.mcp_tools), tool)
  const failing: Failing = { rule: null }
  const reason = decide(input, policy, toolRule, options.work, failing)
  const allowed = reason === 'allowed'
  const decision: PdpDecision = {
    decision: allowed ? 'ALLOW' : 'DENY',
    decision_id: options.decisionId?.() ?? randomUUID(),
    obligations: allowed ? obligationsFor(input, policy, tool, toolRule) : [],
    reason,
    ttl: allowed ? ALLOW_TTL_SECONDS : 0,
  }
  // A minimum outside the five codes (met by nobody) names no level a caller could obtain.
  const minimum = failing.rule?.min_trust_level
  if (reason.endsWith('trust_level_below_minimum') && typeof minimum === 'string' && TRUST_RANK.has(minimum)) {
    decision.required_trust_level = minimum as TrustCode
  }
  return decision
}

/** Sizes of the evaluator's pattern memos, for tests that check they stay bounded. */
export function memoStats(): {
  patterns: number; patternChars: number; specificities: number; specificityChars: number; toolPatterns: number; toolPatternChars: number
} {
  return {
    patterns: parsedPatterns.size,
    patternChars: parsedPatterns.keyChars,
    specificities: specificities.size,
    specificityChars: specificities.keyChars,
    toolPatterns: toolPatterns.size,
    toolPatternChars: toolPatterns.keyChars,
  }
}
