/**
 * Bounded policy work: the grammar's size limits, and the evaluator's matching work counted in units
 * (segment comparisons and start positions tried), never timed. Property runs use a fixed seed; set
 * FC_NUM_RUNS for a longer local run.
 */
import fc from 'fast-check'
import t from 'tap'
import { stringify } from 'yaml'
import {
  evaluate,
  memoStats,
  operationMatches,
  patternOverLimit,
  patternSpecificity,
  toolPatternMatches,
  toolPatternOverLimit,
} from '../../../../src/core/policy/evaluate.js'
import {
  MAX_CAPABILITY_CLASS_BYTES,
  MAX_PATTERN_BYTES,
  MAX_PATTERN_DOUBLE_STARS,
  MAX_PATTERN_SEGMENTS,
  MAX_PATTERN_WILDCARDS,
  MAX_POLICY_BYTES,
  MAX_POLICY_DID_BYTES,
  MAX_RULES_PER_DOCUMENT,
  MAX_RULES_PER_LIST,
  MAX_TOOL_NAME_BYTES,
  operationPatternProblem,
  parsePolicyYaml,
  POLICY_SCHEMA,
  type PolicyIssue,
} from '../../../../src/core/policy/grammar.js'
import { compileSegmentGlob, globMatches, type GlobWork } from '../../../../src/core/policy/segment-glob.js'
import type { PdpRequest, ResolvedPolicy } from '../../../../src/core/policy/types.js'

const NUM_RUNS = Number(process.env.FC_NUM_RUNS ?? '') || 1000
const SEED = 18

const ALICE = 'did:web:agents.example.com:alice'
// The longest request path the gateway accepts: 8 KiB, every segment one character.
const LONGEST_PATH = '/a'.repeat(4096)

function issuesOf(text: string): PolicyIssue[] {
  const result = parsePolicyYaml(text)
  return result.ok ? [] : result.issues
}

function policyWith(fields: Record<string, unknown>): string {
  return stringify({ version: '1', ...fields })
}

function request(operation: string): PdpRequest {
  return {
    pip_version: 'service.pip.v1',
    subject: { did: ALICE, badge_jti: 'jti-1', ial: 'IAL-1', trust_level: 'DV' },
    action: { operation, capability_class: null },
    resource: { identifier: '/' },
    context: { txn_id: 'txn-1', enforcement_mode: 'EM-GUARD' },
    environment: { pep_id: 'pep-1', time: '2026-03-01T12:00:00Z' },
  }
}

function emptyPolicy(over: Partial<ResolvedPolicy> = {}): ResolvedPolicy {
  return { min_trust_level: null, allowed_dids: null, denied_dids: [], rate_limits: [], operations: [], mcp_tools: [], capability_classes: [], ...over }
}

// The bound documented in segment-glob.ts for a pattern without two "**" in a row.
const workBound = (n: number, p: number): number => (n + 2) * (p + 1)
// With at most one "**" there is nothing to search for: at most one comparison per pattern segment.
const singleDoubleStarBound = (p: number): number => p

/**
 * The costliest pattern the grammar accepts: the most segments and a "**", with every fixed segment
 * compared (a literal last segment that differs from the path's, so nothing fails early).
 * `variant` makes distinct patterns.
 */
function worstAcceptedPattern(variant = 0): string {
  const half = MAX_PATTERN_SEGMENTS / 2
  return `GET /${Array<string>(half - 1).fill('a').join('/')}/**/${[...Array<string>(half - 1).fill('a'), `b${variant}`].join('/')}`
}

// The bound documented in segment-glob.ts for several "**" in any order (patterns from other sources).
const anyGlobBound = (n: number, pattern: readonly string[]): number => {
  const k = pattern.filter((s) => s === '**').length
  return (n + 1 + k) * (pattern.length + 1) + pattern.length
}

t.test('the limits and the schema agree', async (t) => {
  t.same(
    [MAX_PATTERN_BYTES, MAX_PATTERN_SEGMENTS, MAX_PATTERN_WILDCARDS, MAX_PATTERN_DOUBLE_STARS, MAX_RULES_PER_LIST, MAX_RULES_PER_DOCUMENT],
    [1024, 32, 8, 1, 256, 512],
  )
  t.same([MAX_POLICY_DID_BYTES, MAX_TOOL_NAME_BYTES, MAX_CAPABILITY_CLASS_BYTES], [512, 128, 128])
  const schema = JSON.parse(JSON.stringify(POLICY_SCHEMA))
  for (const list of ['rate_limits', 'operations', 'mcp_tools', 'capability_classes']) {
    t.equal(schema.properties[list].maxItems, MAX_RULES_PER_LIST, `${list} maxItems`)
  }
  const definitions = schema.definitions
  t.equal(definitions.operation_rule.properties.pattern.maxLength, MAX_PATTERN_BYTES)
  t.equal(definitions.mcp_tool_rule.properties.tool.maxLength, MAX_TOOL_NAME_BYTES)
  t.equal(definitions.capability_class_rule.properties.class.maxLength, MAX_CAPABILITY_CLASS_BYTES)
  t.equal(definitions.did_list.items.maxLength, MAX_POLICY_DID_BYTES)
  t.equal(definitions.rate_limit.properties.did.maxLength, MAX_POLICY_DID_BYTES)
  const { description: _tool, ...toolRpm } = definitions.mcp_tool_rule.properties.rpm
  const { description: _limit, ...limitRpm } = definitions.rate_limit.properties.rpm
  t.same(toolRpm, limitRpm, "a tool rule's rpm has the type and bounds of rate_limits[].rpm")
})

t.test('pattern limits: accepted at the limit, refused one past it with the limit named', async (t) => {
  const atBytes = `GET /${'x'.repeat(MAX_PATTERN_BYTES - 5)}`
  t.equal(Buffer.byteLength(atBytes), MAX_PATTERN_BYTES)
  t.equal(operationPatternProblem(atBytes), null, 'exactly MAX_PATTERN_BYTES')
  t.match(operationPatternProblem(`${atBytes}y`), /is 1025 bytes long; at most 1024 bytes are allowed \(MAX_PATTERN_BYTES\)/)

  const segments = (n: number): string => `GET /${Array.from({ length: n }, (_, i) => `s${i}`).join('/')}`
  t.equal(operationPatternProblem(segments(MAX_PATTERN_SEGMENTS)), null, 'exactly MAX_PATTERN_SEGMENTS')
  t.match(operationPatternProblem(segments(MAX_PATTERN_SEGMENTS + 1)), /has 33 segments; at most 32 segments are allowed \(MAX_PATTERN_SEGMENTS\)/)
  const dotted = (n: number): string => Array.from({ length: n }, () => 'n').join('.')
  t.equal(operationPatternProblem(dotted(MAX_PATTERN_SEGMENTS)), null, 'dotted names count their segments too')
  t.match(operationPatternProblem(dotted(MAX_PATTERN_SEGMENTS + 1)), /MAX_PATTERN_SEGMENTS/)

  const eightWildcards = 'GET /*/*/*/*/a/*/*/*/**'
  t.equal(operationPatternProblem(eightWildcards), null, 'eight wildcards, one of them **')
  t.match(operationPatternProblem('GET /*/*/*/*/a/*/*/*/*/**'), /has 9 wildcard segments; at most 8 wildcard segments are allowed \(MAX_PATTERN_WILDCARDS\)/)
  t.match(operationPatternProblem('a.**.b.**'), /has 2 "\*\*" segments; at most 1 "\*\*" segments are allowed \(MAX_PATTERN_DOUBLE_STARS\)/)
  t.equal(operationPatternProblem('GET /v1/**/status'), null, 'one ** anywhere: prefix, suffix or both')
  t.equal(operationPatternProblem('* /**'), null, 'a method * is not a wildcard segment')
  t.equal(operationPatternProblem(worstAcceptedPattern()), null, 'the worst pattern used below is accepted')
})

t.test('the pattern from the review (60 KB) is refused cheaply, without being echoed', async (t) => {
  const huge = `GET /${Array.from({ length: 12_000 }, () => '**/a').join('/')}`
  t.ok(huge.length > 60_000 && huge.length < MAX_POLICY_BYTES - 100)
  const issues = issuesOf(policyWith({ operations: [{ pattern: huge }] }))
  t.same(issues.map((i) => [i.code, i.path]), [['LIMIT_EXCEEDED', '$.operations[0].pattern']])
  t.match(issues[0]?.message, /MAX_PATTERN_BYTES/)
  t.ok((issues[0]?.message.length ?? 0) < 300, 'the message quotes only the start of the pattern')
})

t.test('list, document, DID, tool and class limits', async (t) => {
  const rules = (n: number, key: string, value: (i: number) => string): Record<string, string>[] =>
    Array.from({ length: n }, (_, i) => ({ [key]: value(i) }))
  const didOf = (i: number): string => `did:web:e.example:${i}`

  t.same(issuesOf(policyWith({ operations: rules(MAX_RULES_PER_LIST, 'pattern', (i) => `op.n${i}`) })), [], '256 operations')
  const tooMany = issuesOf(policyWith({ operations: rules(MAX_RULES_PER_LIST + 1, 'pattern', (i) => `op.n${i}`) }))
  t.same(tooMany.map((i) => [i.code, i.path]), [['LIMIT_EXCEEDED', '$.operations']])
  t.match(tooMany[0]?.message, /\$\.operations has 257 entries; at most 256 entries are allowed \(MAX_RULES_PER_LIST\)/)
  for (const [list, key, value] of [
    ['mcp_tools', 'tool', (i: number) => `tool${i}`],
    ['capability_classes', 'class', (i: number) => `c.n${i}`],
  ] as const) {
    const issues = issuesOf(policyWith({ [list]: rules(MAX_RULES_PER_LIST + 1, key, value) }))
    t.same(issues.map((i) => [i.code, i.path]), [['LIMIT_EXCEEDED', `$.${list}`]], `${list} is limited`)
  }
  const limits = Array.from({ length: MAX_RULES_PER_LIST + 1 }, (_, i) => ({ did: didOf(i), rpm: 1 }))
  t.same(issuesOf(policyWith({ rate_limits: limits })).map((i) => i.path), ['$.rate_limits'], 'rate_limits is limited')

  const quarter = MAX_RULES_PER_DOCUMENT / 4
  const document = (n: number): string =>
    policyWith({
      rate_limits: Array.from({ length: n }, (_, i) => ({ did: didOf(i), rpm: 1 })),
      operations: rules(n, 'pattern', (i) => `op.n${i}`),
      mcp_tools: rules(n, 'tool', (i) => `tool${i}`),
      capability_classes: rules(n, 'class', (i) => `c.n${i}`),
    })
  t.same(issuesOf(document(quarter)), [], `${MAX_RULES_PER_DOCUMENT} rules in all`)
  const total = issuesOf(document(quarter + 1))
  t.same(total.map((i) => [i.code, i.path]), [['LIMIT_EXCEEDED', '$']])
  t.match(total[0]?.message, /516 rules .*; at most 512 rules are allowed \(MAX_RULES_PER_DOCUMENT\)/)

  const didOfBytes = (bytes: number): string => `did:web:${'d'.repeat(bytes - 8)}`
  t.same(issuesOf(policyWith({ allowed_dids: [didOfBytes(MAX_POLICY_DID_BYTES)] })), [], 'a DID of exactly 512 bytes')
  const longDid = didOfBytes(MAX_POLICY_DID_BYTES + 1)
  const didIssues = issuesOf(policyWith({ allowed_dids: [longDid], operations: [{ pattern: 'a.b', denied_dids: [longDid] }], rate_limits: [{ did: longDid, rpm: 1 }] }))
  t.same(
    didIssues.map((i) => [i.code, i.path]),
    [['LIMIT_EXCEEDED', '$.allowed_dids[0]'], ['LIMIT_EXCEEDED', '$.operations[0].denied_dids[0]'], ['LIMIT_EXCEEDED', '$.rate_limits[0].did']],
    'every DID list and the rate limits, all reported together',
  )
  t.match(didIssues[0]?.message, /is 513 bytes long; at most 512 bytes are allowed \(MAX_POLICY_DID_BYTES\)/)

  t.same(issuesOf(policyWith({ mcp_tools: [{ tool: 't'.repeat(MAX_TOOL_NAME_BYTES) }] })), [], 'a tool name of 128 bytes')
  const wideTool = 'é'.repeat(65)
  const toolIssues = issuesOf(policyWith({ mcp_tools: [{ tool: wideTool }] }))
  t.same(toolIssues.map((i) => [i.code, i.path]), [['LIMIT_EXCEEDED', '$.mcp_tools[0].tool']], '65 characters but 130 bytes: refused')
  t.match(toolIssues[0]?.message, /is 130 bytes long; at most 128 bytes are allowed \(MAX_TOOL_NAME_BYTES\)/)

  const classOf = (bytes: number): string => `c.${'x'.repeat(bytes - 2)}`
  t.same(issuesOf(policyWith({ capability_classes: [{ class: classOf(MAX_CAPABILITY_CLASS_BYTES) }] })), [], 'a class of 128 bytes')
  const classIssues = issuesOf(policyWith({ capability_classes: [{ class: classOf(MAX_CAPABILITY_CLASS_BYTES + 1) }] }))
  t.same(classIssues.map((i) => [i.code, i.path]), [['LIMIT_EXCEEDED', '$.capability_classes[0].class']])
  t.match(classIssues[0]?.message, /MAX_CAPABILITY_CLASS_BYTES/)
})

t.test('every problem is reported together, limits beside grammar problems', async (t) => {
  const issues = issuesOf(
    policyWith({
      operations: [
        { pattern: `GET /${'x'.repeat(MAX_PATTERN_BYTES)}` },
        { pattern: 'a.**.b.**' },
        { pattern: 'GET /a//b' },
        { pattern: Array.from({ length: 40 }, () => 'n').join('.') },
      ],
      mcp_tools: [{ tool: 't'.repeat(200) }],
    }),
  )
  t.same(
    issues.map((i) => [i.code, i.path]),
    [
      ['LIMIT_EXCEEDED', '$.mcp_tools[0].tool'],
      ['LIMIT_EXCEEDED', '$.operations[0].pattern'],
      ['LIMIT_EXCEEDED', '$.operations[1].pattern'],
      ['INVALID_PATTERN', '$.operations[2].pattern'],
      ['LIMIT_EXCEEDED', '$.operations[3].pattern'],
    ],
  )
})

t.test('tool patterns: at most MAX_PATTERN_WILDCARDS "*", in the grammar and in the evaluator', async (t) => {
  const stars = (n: number): string => Array.from({ length: n + 1 }, (_, i) => `p${i}`).join('*')
  t.same(issuesOf(policyWith({ mcp_tools: [{ tool: stars(MAX_PATTERN_WILDCARDS) }] })), [], 'exactly 8 "*"')
  const issues = issuesOf(policyWith({ mcp_tools: [{ tool: stars(MAX_PATTERN_WILDCARDS + 1) }] }))
  t.same(issues.map((i) => [i.code, i.path]), [['LIMIT_EXCEEDED', '$.mcp_tools[0].tool']])
  t.match(issues[0]?.message, /^MCP tool pattern "p0\*p1.*" has 9 "\*"; at most 8 "\*" are allowed \(MAX_PATTERN_WILDCARDS\)\.$/)
  const tooLong = issuesOf(policyWith({ mcp_tools: [{ tool: '*'.repeat(MAX_TOOL_NAME_BYTES + 1) }] }))
  t.same(tooLong.map((i) => i.code), ['LIMIT_EXCEEDED'], 'a name over the byte limit is reported once')
  t.match(tooLong[0]?.message, /MAX_TOOL_NAME_BYTES/)

  t.notOk(toolPatternOverLimit(stars(MAX_PATTERN_WILDCARDS)))
  t.equal(toolPatternMatches(stars(MAX_PATTERN_WILDCARDS), 'p0p1p2p3p4p5p6p7p8'), true)
  // From a bundle built elsewhere, where nothing bounds the pattern's length.
  for (const pattern of [stars(MAX_PATTERN_WILDCARDS + 1), '*'.repeat(60_000)]) {
    t.ok(toolPatternOverLimit(pattern), `${pattern.length} characters: over the limit`)
    t.equal(toolPatternMatches(pattern, 'p0p1p2p3p4p5p6p7p8p9'), false, 'never matched')
    const policy = emptyPolicy({ mcp_tools: [{ tool: 'other' }, { tool: pattern, min_trust_level: 'SS' }] })
    const decision = evaluate(request('GET /x'), policy, { decisionId: () => 'd' })
    t.same([decision.decision, decision.reason, decision.ttl], ['DENY', 'mcp_tool_pattern_over_limit', 0], 'and the decision fails closed')
  }
})

t.test('tool pattern matching does not backtrack: 8 "*" against a 1 MiB tool name', async (t) => {
  // A backtracking matcher tries every way to split the name among the "*" (about n^8 for n characters)
  // and would not finish; this one searches for each literal part once, left to right.
  const name = `${'a'.repeat(1 << 20)}c`
  t.equal(toolPatternMatches('*a*a*a*a*a*a*a*b', name), false, 'the suffix fails')
  t.equal(toolPatternMatches('*a*a*a*a*a*a*b*c', name), false, 'a middle part is missing')
  t.equal(toolPatternMatches('a*a*a*a*a*a*a*ac', name), true, 'and a match')
  t.equal(toolPatternMatches('*ab*ab*ab*ab*ab*ab*ab*c', `${'ab'.repeat(1 << 19)}c`), true)
})

t.test("the evaluator's work on the worst accepted pattern does not grow with the path", async (t) => {
  const pattern = worstAcceptedPattern()
  t.equal(operationPatternProblem(pattern), null, 'accepted by the grammar')
  const p = MAX_PATTERN_SEGMENTS
  for (const path of ['/a', '/a'.repeat(64), LONGEST_PATH, `${LONGEST_PATH}/b0`]) {
    const n = path.split('/').length - 1
    const work: GlobWork = { units: 0 }
    const matched = operationMatches(pattern, `GET ${path}`, work)
    t.equal(matched, path.endsWith('/b0'), `${n} segments: ${matched ? 'matches' : 'no match'}`)
    t.ok(work.units <= singleDoubleStarBound(p), `${n} segments: ${work.units} units <= ${p}`)
    t.ok(work.units <= workBound(n, p), 'and within the general bound')
  }
  const full: GlobWork = { units: 0 }
  operationMatches(pattern, `GET ${LONGEST_PATH}`, full)
  t.equal(full.units, p - 1, 'every fixed segment is compared: the pattern really is the worst case')

  // The usual shapes fail at their first differing segment.
  for (const [usual, most] of [['GET /v1/**', 1], ['* /**/status', 1], ['GET /a/*/c', 0]] as const) {
    const cheap: GlobWork = { units: 0 }
    operationMatches(usual, `GET ${LONGEST_PATH}`, cheap)
    t.ok(cheap.units <= most, `${usual}: ${cheap.units} units`)
  }
})

t.test('a whole document of worst patterns against the longest path: at most rules x segments units', async (t) => {
  const operations = Array.from({ length: MAX_RULES_PER_LIST }, (_, i) => ({ pattern: worstAcceptedPattern(i), min_trust_level: 'EV' as const }))
  const text = policyWith({ operations })
  t.ok(Buffer.byteLength(text) <= MAX_POLICY_BYTES, 'the document is within the size limit')
  t.ok(parsePolicyYaml(text).ok, 'and the grammar accepts it')
  const work: GlobWork = { units: 0 }
  const decision = evaluate(request(`GET ${LONGEST_PATH}/b7`), emptyPolicy({ operations }), { decisionId: () => 'd', work })
  t.equal(decision.reason, 'operation_trust_level_below_minimum', 'the matching rule still applies')
  const bound = MAX_RULES_PER_LIST * MAX_PATTERN_SEGMENTS
  t.ok(work.units <= bound, `${work.units} units <= ${bound}`)
})

t.test('patterns from another source are held to the same structural limits', async (t) => {
  // Two "**" with a fixed block between them: the greedy search would try the block at every position.
  const twoDoubleStars = `GET /**/${[...Array<string>(MAX_PATTERN_SEGMENTS - 3).fill('a'), 'b'].join('/')}/**`
  const nineWildcards = 'GET /*/*/*/*/a/*/*/*/*/*'
  for (const pattern of [twoDoubleStars, nineWildcards]) {
    t.ok(operationPatternProblem(pattern) !== null, `the grammar refuses ${pattern.slice(0, 20)}…`)
    t.ok(patternOverLimit(pattern), 'and so does the evaluator')
    const work: GlobWork = { units: 0 }
    t.equal(operationMatches(pattern, `GET ${LONGEST_PATH}/b`, work), false, 'never matched')
    t.equal(work.units, 0, 'at no cost')
  }
  // The segment glob itself stays linear for such a token list: the bound the evaluator no longer needs.
  const tokens = twoDoubleStars.slice(5).split('/')
  const work: GlobWork = { units: 0 }
  t.equal(globMatches(compileSegmentGlob(tokens), LONGEST_PATH.slice(1).split('/'), work), false)
  t.ok(work.units <= workBound(4096, tokens.length), `${work.units} units <= (n + 2) x (p + 1)`)
  t.ok(work.units >= (4096 - MAX_PATTERN_SEGMENTS) * (MAX_PATTERN_SEGMENTS - 2), 'the costly shape: a block tried at every position')
})

t.test('a pattern that bypassed the grammar is never matched, and the decision fails closed', async (t) => {
  // 2049 segments: the greedy search would cost about (n / 2)^2 units on a 4096-segment path.
  const bypassing = `GET /**/${Array.from({ length: 2047 }, () => 'a').join('/')}/b/**`
  t.ok(patternOverLimit(bypassing))
  t.notOk(patternOverLimit(worstAcceptedPattern()))
  t.notOk(patternOverLimit('GET nopath'), 'a pattern that is no pattern at all is not "over the limit"')
  const work: GlobWork = { units: 0 }
  const policy = emptyPolicy({ operations: [{ pattern: 'GET /**' }, { pattern: bypassing, min_trust_level: 'SS' }] })
  const decision = evaluate(request(`GET ${LONGEST_PATH}`), policy, { decisionId: () => 'd', work })
  t.same([decision.decision, decision.reason, decision.ttl], ['DENY', 'operation_pattern_over_limit', 0])
  t.equal(work.units, 0, 'no matching work at all')
  t.equal(operationMatches(bypassing, `GET ${LONGEST_PATH}`), false)
  t.equal(evaluate(request('GET /x'), { ...policy, denied_dids: [ALICE] }, { decisionId: () => 'd' }).reason, 'denied_did', 'policy-wide checks come first')
  t.same(patternSpecificity(bypassing).length, 5, 'still ranked when asked directly')
})

t.test('the pattern memos stay bounded whatever arrives', async (t) => {
  for (let i = 0; i < 20_000; i++) operationMatches(`GET /v1/unique${i}/**`, 'GET /v1/x')
  let stats = memoStats()
  t.ok(stats.patterns <= 4096, `${stats.patterns} memoised patterns`)
  const long = 'a'.repeat(60_000)
  for (let i = 0; i < 300; i++) {
    operationMatches(`GET /${long}${i}`, 'GET /x')
    patternSpecificity(`GET /${long}${i}`)
  }
  stats = memoStats()
  t.ok(stats.patternChars <= 1 << 20, `${stats.patternChars} characters of pattern keys`)
  t.ok(stats.specificityChars <= 1 << 20, `${stats.specificityChars} characters of specificity keys`)
  const before = memoStats()
  for (let i = 0; i < 20_000; i++) operationMatches('GET /v1/**', `GET /v1/op${i}`)
  const after = memoStats()
  t.ok(after.patterns - before.patterns <= 1, 'a stream of unique operations adds nothing')

  for (let i = 0; i < 20_000; i++) toolPatternMatches(`tool${i}*`, 'tool1')
  stats = memoStats()
  t.ok(stats.toolPatterns <= 4096, `${stats.toolPatterns} memoised tool patterns`)
  for (let i = 0; i < 300; i++) toolPatternMatches(`${long}${i}*`, 'x')
  t.ok(memoStats().toolPatternChars <= 1 << 20, `${memoStats().toolPatternChars} characters of tool pattern keys`)
  const beforeTools = memoStats()
  for (let i = 0; i < 20_000; i++) toolPatternMatches('fs.*', `fs.tool${i}`)
  t.ok(memoStats().toolPatterns - beforeTools.toolPatterns <= 1, 'a stream of unique tool names adds nothing')
})

// The reference: `**` takes any number of segments, `*` exactly one, anything else itself.
function reference(pattern: readonly string[], target: readonly string[]): boolean {
  if (pattern.length === 0) return target.length === 0
  const [head, ...rest] = pattern
  if (head === '**') return target.some((_, k) => reference(rest, target.slice(k))) || reference(rest, [])
  return target.length > 0 && (head === '*' || head === target[0]) && reference(rest, target.slice(1))
}

const token = fc.constantFrom('a', 'b', '', '*', '**')
const segmentArray = fc.array(fc.constantFrom('a', 'b', ''), { maxLength: 14 })

t.test('property: the matcher agrees with the reference and stays within the work bound (grammar shapes)', async (t) => {
  const grammarShaped = fc.array(token, { maxLength: 10 }).map((tokens) => tokens.filter((s, i) => !(s === '**' && tokens[i - 1] === '**')))
  fc.assert(
    fc.property(grammarShaped, segmentArray, (pattern, target) => {
      const work: GlobWork = { units: 0 }
      const matched = globMatches(compileSegmentGlob(pattern), target, work)
      return matched === reference(pattern, target) && work.units <= workBound(target.length, pattern.length)
    }),
    { seed: SEED, numRuns: NUM_RUNS },
  )
  t.pass(`${NUM_RUNS} runs, seed ${SEED}`)
})

t.test('property: any token list, "**" repeated included, agrees and stays within its bound', async (t) => {
  fc.assert(
    fc.property(fc.array(token, { maxLength: 12 }), segmentArray, (pattern, target) => {
      const work: GlobWork = { units: 0 }
      const matched = globMatches(compileSegmentGlob(pattern), target, work)
      return matched === reference(pattern, target) && work.units <= anyGlobBound(target.length, pattern)
    }),
    { seed: SEED, numRuns: NUM_RUNS },
  )
  t.pass(`${NUM_RUNS} runs, seed ${SEED}`)
})

t.test('property: operationMatches agrees with the reference and compares at most the pattern segments', async (t) => {
  fc.assert(
    fc.property(fc.array(fc.constantFrom('a', 'b', '*', '**'), { maxLength: 8 }), fc.array(fc.constantFrom('a', 'b'), { maxLength: 10 }), (pattern, target) => {
      const work: GlobWork = { units: 0 }
      const matched = operationMatches(`GET /${pattern.join('/')}`, `GET /${target.join('/')}`, work)
      const p = ('/' + pattern.join('/')).split('/').slice(1)
      const o = ('/' + target.join('/')).split('/').slice(1)
      // more than one "**" is over the structural limit: never matched, no work
      if (p.filter((s) => s === '**').length > MAX_PATTERN_DOUBLE_STARS) return !matched && work.units === 0
      return matched === reference(p, o) && work.units <= singleDoubleStarBound(p.length)
    }),
    { seed: SEED, numRuns: NUM_RUNS },
  )
  t.pass(`${NUM_RUNS} runs, seed ${SEED}`)
})
