/**
 * The policy grammar (docs/wire-contract.md §7), every problem reported at once. Three stages, each only as
 * trustworthy as the one before: the text (size first, so it bounds all later work); the YAML tree, converted
 * by this module itself (never `toJS()`, so no alias is expanded and no key lands on a live prototype); the data.
 */
import { Ajv, type ErrorObject } from 'ajv'
import { createHash } from 'node:crypto'
import { isAlias, isMap, isPair, isScalar, isSeq, LineCounter, parseDocument, type Document, type YAMLError } from 'yaml'
import { loadSchema } from '../json-schema.js'
import { compareSegments, formatPath, pointerToSegments, type Segment } from '../json-path.js'
import { isCapabilityClass } from '../capability-class.js'
import { isDid } from '../did.js'
import type { TrustCode } from '../trust-level.js'
import {
  MAX_CAPABILITY_CLASS_BYTES,
  MAX_PATTERN_BYTES,
  MAX_PATTERN_DOUBLE_STARS,
  MAX_PATTERN_SEGMENTS,
  MAX_PATTERN_WILDCARDS,
  MAX_POLICY_DID_BYTES,
  MAX_RULES_PER_DOCUMENT,
  MAX_TOOL_NAME_BYTES,
} from './limits.js'
import { isRecord } from '../json-objects.js'

export * from './limits.js'

/** One problem found in a policy document: a stable code, where (`$`-rooted JSON path) and a sentence. */
export interface PolicyIssue {
  code: string
  path: string
  message: string
}

/** A policy's minimum trust level: a trust code, or the empty string for "no minimum". */
export type MinimumTrustCode = TrustCode | ''

/** The fields shared by the top level and every operation, MCP tool and capability class entry. */
export interface PolicyRule {
  min_trust_level?: MinimumTrustCode
  allowed_dids?: string[]
  denied_dids?: string[]
}

/** A valid policy document, schema version "1". Absent keys are absent, never `undefined`. */
export interface PolicyDocument {
  version: '1'
  min_trust_level?: MinimumTrustCode
  allowed_dids?: string[]
  denied_dids?: string[]
  rate_limits?: { did: string; rpm: number }[]
  operations?: (PolicyRule & { pattern: string })[]
  /** `tool` is a pattern (`*` is any run of characters); `rpm` a per-tool budget, as in `rate_limits`. */
  mcp_tools?: (PolicyRule & { tool: string; rpm?: number })[]
  capability_classes?: (PolicyRule & { class: string })[]
}

/** Never an empty issue list. */
export type PolicyParseResult = { ok: true; document: PolicyDocument } | { ok: false; issues: PolicyIssue[] }

/** UTF-8 bytes. */
export const MAX_POLICY_BYTES = 64 * 1024

export const POLICY_SCHEMA_VERSION = '1'

/** A 64 KiB text can hold thousands of mistakes; past this a final `TOO_MANY_ISSUES` entry cuts the list. */
export const MAX_POLICY_ISSUES = 100

export const POLICY_SCHEMA: Readonly<Record<string, unknown>> = loadSchema('policy', 'v1.json')

// ownProperties: only keys the YAML actually contained count. No defaults, coercion or removal: validation
// only reads.
const ajv = new Ajv({ allErrors: true, ownProperties: true, strict: true })
const validateSchema = ajv.compile(POLICY_SCHEMA)

// The grammar, in ABNF with its further rules: policies/README.md, "Operation patterns".
const HTTP_METHODS: ReadonlySet<string> = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'CONNECT', 'TRACE'])
const PATH_CHAR = /^[A-Za-z0-9._~:@!$&'()+,;=-]$/
const NAME_CHAR = /^[A-Za-z0-9_-]$/

function segmentsProblem(segments: readonly string[], allowed: RegExp, kind: 'path' | 'name'): string | null {
  let afterDoubleStar = false
  for (const segment of segments) {
    if (segment === '') {
      return kind === 'path'
        ? 'path segments must not be empty (no "//" and no trailing "/")'
        : 'name segments must not be empty (no leading, trailing or doubled ".")'
    }
    if (segment === '**') {
      if (afterDoubleStar) return '"**" must not directly follow another "**"'
      afterDoubleStar = true
      continue
    }
    afterDoubleStar = false
    if (segment === '*') continue
    if (segment.includes('*')) return `"*" and "**" must be whole segments, unlike ${JSON.stringify(segment)}`
    if (segment === '.' || segment === '..') return '"." and ".." segments are not allowed'
    for (const char of segment) {
      if (!allowed.test(char)) return `character ${JSON.stringify(char)} is not allowed in a ${kind} segment`
    }
  }
  return null
}

interface PatternProblem {
  code: 'INVALID_PATTERN' | 'LIMIT_EXCEEDED'
  message: string
}

function limitMessage(found: string, limit: number, unit: string, name: string): string {
  return `${found}; at most ${limit} ${unit} are allowed (${name})`
}

function overLimit(found: string, limit: number, unit: string, name: string): PatternProblem {
  return { code: 'LIMIT_EXCEEDED', message: limitMessage(found, limit, unit, name) }
}

function patternLimitProblem(segments: readonly string[]): PatternProblem | null {
  if (segments.length > MAX_PATTERN_SEGMENTS) return overLimit(`has ${segments.length} segments`, MAX_PATTERN_SEGMENTS, 'segments', 'MAX_PATTERN_SEGMENTS')
  let wildcards = 0
  let doubleStars = 0
  for (const segment of segments) {
    if (segment === '*' || segment === '**') wildcards++
    if (segment === '**') doubleStars++
  }
  if (wildcards > MAX_PATTERN_WILDCARDS) return overLimit(`has ${wildcards} wildcard segments`, MAX_PATTERN_WILDCARDS, 'wildcard segments', 'MAX_PATTERN_WILDCARDS')
  if (doubleStars > MAX_PATTERN_DOUBLE_STARS) return overLimit(`has ${doubleStars} "**" segments`, MAX_PATTERN_DOUBLE_STARS, '"**" segments', 'MAX_PATTERN_DOUBLE_STARS')
  return null
}

function patternProblem(pattern: string): PatternProblem | null {
  if (pattern.length === 0) return { code: 'INVALID_PATTERN', message: 'must not be empty' }
  // The byte limit comes first so that no later check ever walks a long text.
  const bytes = Buffer.byteLength(pattern, 'utf8')
  if (bytes > MAX_PATTERN_BYTES) return overLimit(`is ${bytes} bytes long`, MAX_PATTERN_BYTES, 'bytes', 'MAX_PATTERN_BYTES')
  const invalid = (message: string | null): PatternProblem | null => (message === null ? null : { code: 'INVALID_PATTERN', message })
  const space = pattern.indexOf(' ')
  if (space === -1) {
    if (pattern.startsWith('/')) return invalid('a path pattern needs an HTTP method (or "*") and one space before it, as in "GET /v1/agents/*"')
    const segments = pattern.split('.')
    return invalid(segmentsProblem(segments, NAME_CHAR, 'name')) ?? patternLimitProblem(segments)
  }
  const method = pattern.slice(0, space)
  const path = pattern.slice(space + 1)
  if (method !== '*' && !HTTP_METHODS.has(method)) {
    return invalid(`method ${JSON.stringify(method)} must be "*" or one of ${[...HTTP_METHODS].join(', ')} (upper case)`)
  }
  if (!path.startsWith('/')) return invalid('the method must be followed by exactly one space and a path starting with "/"')
  if (path === '/') return null
  const segments = path.slice(1).split('/')
  return invalid(segmentsProblem(segments, PATH_CHAR, 'path')) ?? patternLimitProblem(segments)
}

/** Null when valid; the merge and the evaluator check patterns from other sources with it. */
export function operationPatternProblem(pattern: string): string | null {
  return patternProblem(pattern)?.message ?? null
}

interface Finding extends PolicyIssue {
  segments: Segment[]
  // source offset for findings from the YAML text, so equal paths and codes keep document order
  offset: number
}

function finding(code: string, segments: Segment[], message: string, offset = -1): Finding {
  return { code, path: formatPath(segments), message, segments, offset }
}

function compareText(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0
}

/** Sorted by path (indices numerically), then code, then source position, then message; then capped. */
function finish(findings: Finding[]): { ok: false; issues: PolicyIssue[] } {
  const seen = new Set<string>()
  const unique = findings.filter((f) => {
    const key = `${f.code}\u0000${f.path}\u0000${f.message}`
    if (seen.has(key)) return false
    seen.add(key)
    return true
  })
  unique.sort(
    (a, b) =>
      compareSegments(a.segments, b.segments) ||
      compareText(a.code, b.code) ||
      a.offset - b.offset ||
      compareText(a.message, b.message),
  )
  const issues = unique.slice(0, MAX_POLICY_ISSUES).map(({ code, path, message }) => ({ code, path, message }))
  if (unique.length > MAX_POLICY_ISSUES) {
    issues.push({
      code: 'TOO_MANY_ISSUES',
      path: '$',
      message: `${unique.length - MAX_POLICY_ISSUES} further issues were found but are not listed.`,
    })
  }
  return { ok: false, issues }
}

// --- stage 2: YAML tree to plain data ---------------------------------------------------------------------

// Only the YAML 1.2 core schema (YAML 1.2 §10.3). Anything else (!!js/function, !!binary, !foo, the
// non-specific "!") could mean a different type to another YAML reader, so the document is refused.
const CORE_TAG_PREFIX = 'tag:yaml.org,2002:'
const CORE_TAGS: ReadonlySet<string> = new Set(['str', 'int', 'float', 'bool', 'null', 'map', 'seq'].map((t) => CORE_TAG_PREFIX + t))

// Keys that would reach or replace a prototype if a consumer ever copied the data onto a plain object.
const PROTOTYPE_KEYS: ReadonlySet<string> = new Set(['__proto__', 'constructor', 'prototype'])

// A valid policy nests at most four levels deep ($.operations[0].allowed_dids[0]). Anything deeper is below
// a value of the wrong type, which the schema reports at a shallower path, so the walk can stop early and
// its recursion stays far from the stack limit whatever the input.
const MAX_WALK_DEPTH = 8

interface WalkContext {
  findings: Finding[]
  // paths whose value was replaced or is untrustworthy (alias, refused tag); shape and semantic findings at
  // or below them only repeat the cause
  poisoned: Segment[][]
  lines: LineCounter
}

function where(ctx: WalkContext, offset: number): string {
  if (offset < 0) return 'an unknown position'
  const { line, col } = ctx.lines.linePos(offset)
  return `line ${line}, column ${col}`
}

function rangeStart(node: unknown): number {
  const range = (node as { range?: readonly number[] | null }).range
  return range?.[0] ?? -1
}

/** Whether an explicit core tag fits the node it is on (`!!int abc` stays an unresolved string, for one). */
function tagFits(tag: string, node: unknown): boolean {
  switch (tag.slice(CORE_TAG_PREFIX.length)) {
    case 'map':
      return isMap(node)
    case 'seq':
      return isSeq(node)
    case 'str':
      return isScalar(node) && typeof node.value === 'string'
    case 'int':
      return isScalar(node) && typeof node.value === 'number' && Number.isInteger(node.value)
    case 'float':
      return isScalar(node) && typeof node.value === 'number'
    case 'bool':
      return isScalar(node) && typeof node.value === 'boolean'
    case 'null':
      return isScalar(node) && node.value === null
    default:
      return false
  }
}

/** Reports the anchor and a refused tag of one node; a refused tag also poisons its path. */
function checkProperties(node: unknown, segments: Segment[], ctx: WalkContext): void {
  const offset = rangeStart(node)
  const { anchor, tag } = node as { anchor?: string; tag?: string }
  if (typeof anchor === 'string') {
    ctx.findings.push(
      finding('ALIAS_NOT_ALLOWED', segments, `YAML anchor &${anchor} on the value at ${where(ctx, offset)} is not allowed; write values out in full.`, offset),
    )
  }
  if (typeof tag === 'string' && !(CORE_TAGS.has(tag) && tagFits(tag, node))) {
    const shown = tag.startsWith(CORE_TAG_PREFIX) ? `!!${tag.slice(CORE_TAG_PREFIX.length)}` : tag
    ctx.findings.push(
      finding('TAG_NOT_ALLOWED', segments, `YAML tag ${shown} on the value at ${where(ctx, offset)} is not allowed; only plain YAML 1.2 core values are.`, offset),
    )
    ctx.poisoned.push(segments)
  }
}

/**
 * Converts a YAML node into plain data for validation. Mappings become null-prototype objects so no key, not
 * even one the checks below miss, can touch Object.prototype; prototype keys are never stored at all.
 */
function toPlain(node: unknown, segments: Segment[], depth: number, ctx: WalkContext): unknown {
  if (node === null || node === undefined) return null
  if (isAlias(node)) {
    const offset = rangeStart(node)
    ctx.findings.push(
      finding('ALIAS_NOT_ALLOWED', segments, `YAML alias *${node.source} at ${where(ctx, offset)} is not allowed; write values out in full.`, offset),
    )
    ctx.poisoned.push(segments)
    return null
  }
  if (depth > MAX_WALK_DEPTH) return null
  checkProperties(node, segments, ctx)

  if (isScalar(node)) return node.value
  if (isSeq(node)) return node.items.map((item, index) => toPlain(item, [...segments, index], depth + 1, ctx))
  if (isMap(node)) {
    const out = Object.create(null) as Record<string, unknown>
    const firstLine = new Map<string, number>()
    for (const pair of node.items) {
      const keyNode: unknown = pair.key
      let key: string
      if (keyNode === null || keyNode === undefined) {
        key = ''
      } else if (isScalar(keyNode)) {
        key = keyNode.value === null || keyNode.value === undefined ? '' : String(keyNode.value)
        checkProperties(keyNode, [...segments, key], ctx)
      } else {
        // a collection or alias as a key: report it (and any alias inside it) and drop the pair
        toPlain(keyNode, segments, depth + 1, ctx)
        if (!isAlias(keyNode)) {
          const offset = rangeStart(keyNode)
          ctx.findings.push(finding('INVALID_TYPE', segments, `The key at ${where(ctx, offset)} must be a plain string.`, offset))
        }
        continue
      }
      const keySegments = [...segments, key]
      const offset = rangeStart(keyNode)
      if (PROTOTYPE_KEYS.has(key)) {
        ctx.findings.push(finding('UNKNOWN_KEY', keySegments, `Key ${JSON.stringify(key)} is not allowed anywhere in a policy.`, offset))
        continue
      }
      const first = firstLine.get(key)
      if (first !== undefined) {
        ctx.findings.push(
          finding('DUPLICATE_KEY', keySegments, `Key ${JSON.stringify(key)} at ${where(ctx, offset)} repeats the key on line ${first}; each key may appear once.`, offset),
        )
        // still walked so aliases or tags hidden in the repeat are reported too
        toPlain(pair.value, keySegments, depth + 1, ctx)
        continue
      }
      firstLine.set(key, offset >= 0 ? ctx.lines.linePos(offset).line : 0)
      out[key] = toPlain(pair.value, keySegments, depth + 1, ctx)
    }
    return out
  }
  // the core schema composes only scalars, sequences, mappings and aliases; a bare pair or anything else
  // means the tree is not what this module understands
  const offset = rangeStart(node)
  ctx.findings.push(finding(isPair(node) ? 'INVALID_TYPE' : 'YAML_SYNTAX', segments, `Unsupported YAML node at ${where(ctx, offset)}.`, offset))
  ctx.poisoned.push(segments)
  return null
}

// --- stage 3: schema and semantic checks ------------------------------------------------------------------

function own(record: Record<string, unknown>, key: string): unknown {
  return Object.prototype.hasOwnProperty.call(record, key) ? record[key] : undefined
}

const TYPE_NAMES: Readonly<Record<string, string>> = {
  string: 'a string',
  object: 'a mapping',
  array: 'a list',
  integer: 'an integer',
  number: 'a number',
  boolean: 'a boolean',
}

function schemaFinding(error: ErrorObject, data: unknown): Finding {
  const segments = pointerToSegments(error.instancePath, data)
  const params = error.params as Record<string, unknown>
  switch (error.keyword) {
    case 'additionalProperties': {
      const key = String(params['additionalProperty'])
      const keySegments = [...segments, key]
      return finding('UNKNOWN_KEY', keySegments, `Key ${JSON.stringify(key)} is not part of the policy grammar at ${formatPath(segments)}.`)
    }
    case 'required': {
      const keySegments = [...segments, String(params['missingProperty'])]
      return finding('MISSING_REQUIRED_FIELD', keySegments, `The required field ${formatPath(keySegments)} is missing.`)
    }
    case 'type': {
      const path = formatPath(segments)
      const expected = TYPE_NAMES[String(params['type'])] ?? String(params['type'])
      const hint = path === '$.version' ? ' (quote it: version: "1")' : ''
      return finding('INVALID_TYPE', segments, `${path} must be ${expected}${hint}.`)
    }
    case 'const':
      if (error.instancePath === '/version') {
        return finding('UNSUPPORTED_VERSION', segments, `Policy schema version must be "${POLICY_SCHEMA_VERSION}".`)
      }
      return finding('INVALID_VALUE', segments, `${formatPath(segments)} must be ${JSON.stringify(params['allowedValue'])}.`)
    case 'enum': {
      const allowed = (params['allowedValues'] as unknown[]).map((v) => JSON.stringify(v)).join(', ')
      return finding('INVALID_VALUE', segments, `${formatPath(segments)} must be one of ${allowed}.`)
    }
    case 'minimum':
      return finding('INVALID_VALUE', segments, `${formatPath(segments)} must be at least ${String(params['limit'])}.`)
    case 'minLength':
      return finding('INVALID_VALUE', segments, `${formatPath(segments)} must not be empty.`)
    case 'maxItems': {
      const count = Array.isArray(valueAt(data, segments)) ? (valueAt(data, segments) as unknown[]).length : Number.NaN
      return finding('LIMIT_EXCEEDED', segments, `${limitMessage(`${formatPath(segments)} has ${count} entries`, Number(params['limit']), 'entries', 'MAX_RULES_PER_LIST')}.`)
    }
    default:
      return finding('INVALID_VALUE', segments, `${formatPath(segments)} is not valid (${error.keyword}).`)
  }
}

function valueAt(data: unknown, segments: readonly Segment[]): unknown {
  let value = data
  for (const segment of segments) value = (value as Record<string | number, unknown> | null)?.[segment]
  return value
}

function schemaFindings(data: unknown): Finding[] {
  if (validateSchema(data)) return []
  // String lengths are checked in bytes by the semantic stage, which names the limit; the schema's
  // maxLength (in characters) can only fire where that check fires too.
  const errors = (validateSchema.errors ?? []).filter((error) => error.keyword !== 'maxLength')
  const mapped = errors.map((error) => schemaFinding(error, data))
  // a wrong type hides the other failures at the same path: they all follow from it
  const typed = new Set(mapped.filter((f) => f.code === 'INVALID_TYPE').map((f) => f.path))
  return mapped.filter((f) => f.code === 'INVALID_TYPE' || !typed.has(f.path))
}

/** A value as shown in a message: long values are cut, so a refused 64 KiB entry is not echoed whole. */
function shown(value: string): string {
  return JSON.stringify(value.length > 80 ? `${value.slice(0, 80)}…` : value)
}

function didFinding(value: string, segments: Segment[]): Finding | null {
  if (!value.startsWith('did:')) return finding('INVALID_DID', segments, `${shown(value)} must start with "did:".`)
  const bytes = Buffer.byteLength(value, 'utf8')
  if (bytes > MAX_POLICY_DID_BYTES) {
    return finding('LIMIT_EXCEEDED', segments, `DID ${shown(value)} ${limitMessage(`is ${bytes} bytes long`, MAX_POLICY_DID_BYTES, 'bytes', 'MAX_POLICY_DID_BYTES')}.`)
  }
  if (!isDid(value)) return finding('INVALID_DID', segments, `${shown(value)} is not a valid DID (did:<method>:<method-specific-id>).`)
  return null
}

/** DID syntax and duplicates of one list; returns the distinct string entries with their first index. */
function checkDidList(list: unknown, segments: Segment[], out: Finding[]): Map<string, number> {
  const firstIndex = new Map<string, number>()
  if (!Array.isArray(list)) return firstIndex
  list.forEach((entry: unknown, index) => {
    if (typeof entry !== 'string') return
    const entrySegments = [...segments, index]
    const problem = didFinding(entry, entrySegments)
    if (problem !== null) out.push(problem)
    const first = firstIndex.get(entry)
    if (first === undefined) firstIndex.set(entry, index)
    else out.push(finding('DUPLICATE_DID', entrySegments, `${JSON.stringify(entry)} is already listed at ${formatPath([...segments, first])}.`))
  })
  return firstIndex
}

/** The checks every rule scope shares: its DID lists, and that no DID is both allowed and denied there. */
function checkRuleScope(rule: Record<string, unknown>, segments: Segment[], out: Finding[]): void {
  const allowed = checkDidList(own(rule, 'allowed_dids'), [...segments, 'allowed_dids'], out)
  const denied = checkDidList(own(rule, 'denied_dids'), [...segments, 'denied_dids'], out)
  for (const [did, index] of denied) {
    const allowedAt = allowed.get(did)
    if (allowedAt === undefined) continue
    out.push(
      finding(
        'ALLOW_DENY_OVERLAP',
        [...segments, 'denied_dids', index],
        `${JSON.stringify(did)} is also allowed at ${formatPath([...segments, 'allowed_dids', allowedAt])}; a DID may be allowed or denied, not both.`,
      ),
    )
  }
}

/** Entries of a list keyed by `field`: each key once, and `validate` (when given) applied to each key. */
function checkKeyedEntries(
  root: Record<string, unknown>,
  list: string,
  field: string,
  out: Finding[],
  validate: (value: string, segments: Segment[]) => void,
  isRule: boolean,
): void {
  const entries = own(root, list)
  if (!Array.isArray(entries)) return
  const firstIndex = new Map<string, number>()
  entries.forEach((entry: unknown, index) => {
    if (!isRecord(entry)) return
    const entrySegments: Segment[] = [list, index]
    if (isRule) checkRuleScope(entry, entrySegments, out)
    const value = own(entry, field)
    if (typeof value !== 'string') return
    const fieldSegments = [...entrySegments, field]
    validate(value, fieldSegments)
    const first = firstIndex.get(value)
    if (first === undefined) firstIndex.set(value, index)
    else out.push(finding('DUPLICATE_ENTRY', fieldSegments, `${field} ${JSON.stringify(value)} already has an entry at ${formatPath([list, first])}.`))
  })
}

const RULE_LISTS = ['rate_limits', 'operations', 'mcp_tools', 'capability_classes'] as const

/** The four rule lists together; each list alone is bounded by the schema's maxItems. */
function checkRuleCount(root: Record<string, unknown>, out: Finding[]): void {
  let total = 0
  for (const list of RULE_LISTS) {
    const entries = own(root, list)
    if (Array.isArray(entries)) total += entries.length
  }
  if (total > MAX_RULES_PER_DOCUMENT) {
    out.push(finding('LIMIT_EXCEEDED', [], `${limitMessage(`The policy has ${total} rules in ${RULE_LISTS.join(', ')} together`, MAX_RULES_PER_DOCUMENT, 'rules', 'MAX_RULES_PER_DOCUMENT')}.`))
  }
}

function semanticFindings(root: Record<string, unknown>): Finding[] {
  const out: Finding[] = []
  checkRuleScope(root, [], out)
  checkRuleCount(root, out)
  checkKeyedEntries(root, 'rate_limits', 'did', out, (value, segments) => {
    const problem = didFinding(value, segments)
    if (problem !== null) out.push(problem)
  }, false)
  checkKeyedEntries(root, 'operations', 'pattern', out, (value, segments) => {
    const problem = patternProblem(value)
    if (problem !== null) out.push(finding(problem.code, segments, `Operation pattern ${shown(value)}: ${problem.message}.`))
  }, true)
  checkKeyedEntries(root, 'mcp_tools', 'tool', out, (value, segments) => {
    const bytes = Buffer.byteLength(value, 'utf8')
    if (bytes > MAX_TOOL_NAME_BYTES) {
      out.push(finding('LIMIT_EXCEEDED', segments, `MCP tool ${shown(value)} ${limitMessage(`is ${bytes} bytes long`, MAX_TOOL_NAME_BYTES, 'bytes', 'MAX_TOOL_NAME_BYTES')}.`))
      return
    }
    const stars = value.split('*').length - 1
    if (stars > MAX_PATTERN_WILDCARDS) {
      out.push(finding('LIMIT_EXCEEDED', segments, `MCP tool pattern ${shown(value)} ${limitMessage(`has ${stars} "*"`, MAX_PATTERN_WILDCARDS, '"*"', 'MAX_PATTERN_WILDCARDS')}.`))
    }
  }, true)
  checkKeyedEntries(root, 'capability_classes', 'class', out, (value, segments) => {
    const bytes = Buffer.byteLength(value, 'utf8')
    if (bytes > MAX_CAPABILITY_CLASS_BYTES) {
      out.push(
        finding('LIMIT_EXCEEDED', segments, `Capability class ${shown(value)} ${limitMessage(`is ${bytes} bytes long`, MAX_CAPABILITY_CLASS_BYTES, 'bytes', 'MAX_CAPABILITY_CLASS_BYTES')}.`),
      )
    } else if (!isCapabilityClass(value)) {
      out.push(
        finding('INVALID_CAPABILITY_CLASS', segments, `Capability class ${shown(value)} must be dot-separated segments of [a-z][a-z0-9_]* (for example "files.read").`),
      )
    }
  }, true)
  return out
}

function copyRule(source: Record<string, unknown>, target: PolicyRule): void {
  const level = own(source, 'min_trust_level')
  if (level !== undefined) target.min_trust_level = level as MinimumTrustCode
  const allowed = own(source, 'allowed_dids')
  if (allowed !== undefined) target.allowed_dids = [...(allowed as string[])]
  const denied = own(source, 'denied_dids')
  if (denied !== undefined) target.denied_dids = [...(denied as string[])]
}

function entries(root: Record<string, unknown>, key: string): Record<string, unknown>[] | undefined {
  return own(root, key) as Record<string, unknown>[] | undefined
}

/** The rules of one list, each its name member (`pattern`, `tool`, `class`) first, then the rule fields. */
function namedRules<K extends string>(root: Record<string, unknown>, list: string, name: K): (PolicyRule & Record<K, string>)[] | undefined {
  return entries(root, list)?.map((e) => {
    const rule = { [name]: e[name] as string } as PolicyRule & Record<K, string>
    copyRule(e, rule)
    return rule
  })
}

/** Rebuilds validated data as ordinary objects holding only grammar keys, in grammar order. */
function toDocument(root: Record<string, unknown>): PolicyDocument {
  const document: PolicyDocument = { version: POLICY_SCHEMA_VERSION }
  copyRule(root, document)
  const rateLimits = entries(root, 'rate_limits')
  if (rateLimits) document.rate_limits = rateLimits.map((e) => ({ did: e['did'] as string, rpm: e['rpm'] as number }))
  const operations = namedRules(root, 'operations', 'pattern')
  if (operations) document.operations = operations
  const tools = entries(root, 'mcp_tools')?.map((e) => {
    const rule: NonNullable<PolicyDocument['mcp_tools']>[number] = { tool: e['tool'] as string }
    copyRule(e, rule)
    const rpm = own(e, 'rpm')
    if (rpm !== undefined) rule.rpm = rpm as number
    return rule
  })
  if (tools) document.mcp_tools = tools
  const classes = namedRules(root, 'capability_classes', 'class')
  if (classes) document.capability_classes = classes
  return document
}

function isUnder(segments: readonly Segment[], prefix: readonly Segment[]): boolean {
  return prefix.length <= segments.length && prefix.every((segment, i) => segments[i] === segment)
}

// yaml error codes that name a refused feature rather than broken syntax
const YAML_ERROR_CODES: Readonly<Record<string, string>> = {
  MULTIPLE_DOCS: 'MULTIPLE_DOCUMENTS',
  BAD_ALIAS: 'ALIAS_NOT_ALLOWED',
  ALIAS_PROPS: 'ALIAS_NOT_ALLOWED',
  MULTIPLE_ANCHORS: 'ALIAS_NOT_ALLOWED',
  MULTIPLE_TAGS: 'TAG_NOT_ALLOWED',
}

function yamlFinding(error: YAMLError, lines: LineCounter): Finding {
  const offset = error.pos[0]
  const { line, col } = lines.linePos(offset)
  const code = YAML_ERROR_CODES[error.code] ?? 'YAML_SYNTAX'
  if (code === 'MULTIPLE_DOCUMENTS') {
    return finding(code, [], `A second YAML document starts at line ${line}, column ${col}; a policy is exactly one document.`, offset)
  }
  const prefix = code === 'YAML_SYNTAX' ? 'YAML syntax error' : 'YAML error'
  return finding(code, [], `${prefix} at line ${line}, column ${col}: ${error.message}`, offset)
}

function isEmptyRoot(document: Document.Parsed): boolean {
  const root: unknown = document.contents
  if (root === null || root === undefined) return true
  // "---" alone composes to an empty plain scalar; an explicit "null" or "~" is a (wrong) value instead
  return isScalar(root) && root.value === null && root.source === '' && root.tag === undefined && root.anchor === undefined
}

/** Hostile YAML costs at most one bounded parse: the size is checked first and no alias is ever expanded. */
export function parsePolicyYaml(text: string): PolicyParseResult {
  if (typeof text !== 'string') return finish([finding('INVALID_TYPE', [], 'The policy must be YAML text.')])
  const bytes = Buffer.byteLength(text, 'utf8')
  if (bytes > MAX_POLICY_BYTES) {
    return finish([finding('DOCUMENT_TOO_LARGE', [], `The policy is ${bytes} bytes; at most ${MAX_POLICY_BYTES} bytes (UTF-8) are accepted.`)])
  }
  if (text.trim() === '') return finish([finding('EMPTY_DOCUMENT', [], 'The policy is empty.')])

  const lines = new LineCounter()
  let document: Document.Parsed
  try {
    // uniqueKeys off: the yaml package's check is quadratic (a second for a 64 KiB mapping) and names no
    // path; toPlain finds duplicates in linear time. merge off: "<<" is an ordinary (unknown) key.
    document = parseDocument(text, {
      version: '1.2',
      schema: 'core',
      merge: false,
      uniqueKeys: false,
      prettyErrors: false,
      keepSourceTokens: false,
      lineCounter: lines,
    })
  } catch (error) {
    // the parser reports problems as errors on the document; reaching this is a defect or exhaustion
    const reason = error instanceof Error ? error.message : String(error)
    return finish([finding('YAML_SYNTAX', [], `The policy could not be parsed as YAML: ${reason}`)])
  }

  const findings: Finding[] = document.errors.map((error) => yamlFinding(error, lines))
  for (const warning of document.warnings) {
    // unresolved tags are reported with their path by toPlain; every other warning (an unknown directive,
    // say) means the text is not the plain YAML a policy must be
    if (warning.code !== 'TAG_RESOLVE_FAILED') findings.push(yamlFinding(warning, lines))
  }
  // a broken tree would only yield confusing follow-up findings; a second document leaves the first intact
  if (findings.some((f) => f.code !== 'MULTIPLE_DOCUMENTS')) return finish(findings)

  if (isEmptyRoot(document)) return finish([...findings, finding('EMPTY_DOCUMENT', [], 'The policy contains no YAML content.')])

  const ctx: WalkContext = { findings, poisoned: [], lines }
  const data = toPlain(document.contents, [], 0, ctx)
  if (!isRecord(data)) {
    if (!ctx.poisoned.some((p) => p.length === 0)) {
      const kind = data === null ? 'null' : Array.isArray(data) ? 'a list' : `a ${typeof data}`
      findings.push(finding('INVALID_TYPE', [], `A policy must be a YAML mapping, not ${kind}.`))
    }
    return finish(findings)
  }

  const derived = [...schemaFindings(data), ...semanticFindings(data)].filter(
    (f) => !ctx.poisoned.some((prefix) => isUnder(f.segments, prefix)),
  )
  findings.push(...derived)
  if (findings.length > 0) return finish(findings)
  return { ok: true, document: toDocument(data) }
}

/** docs/api.md §2.10: of the exact UTF-8 text. */
export function contentHash(text: string): string {
  return `sha256:${createHash('sha256').update(text, 'utf8').digest('hex')}`
}
