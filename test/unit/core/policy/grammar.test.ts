import fc from 'fast-check'
import { isDeepStrictEqual } from 'node:util'
import t from 'tap'
import { stringify } from 'yaml'
import {
  contentHash,
  MAX_PATTERN_DOUBLE_STARS,
  MAX_PATTERN_WILDCARDS,
  MAX_POLICY_BYTES,
  MAX_POLICY_ISSUES,
  operationPatternProblem,
  parsePolicyYaml,
  POLICY_SCHEMA,
  POLICY_SCHEMA_VERSION,
  type PolicyDocument,
  type PolicyIssue,
  type PolicyRule,
  type MinimumTrustCode,
} from '../../../../src/core/policy/grammar.js'
import { isCapabilityClass } from '../../../../src/core/capability-class.js'

const KEY_A = 'did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK'
const KEY_B = 'did:key:z6MkjchhfUsD6mmvni8mCdXHw216Xrm9bQe2mBH1P5RDjVJG'
const WEB_C = 'did:web:agents.example.com:agents:c'

const FULL_POLICY = `# Org policy for the payments team.
version: "1"
min_trust_level: REG
allowed_dids:
  - ${KEY_A}
  - ${KEY_B}
  - ${WEB_C}
denied_dids: []
rate_limits:
  - did: ${KEY_A}
    rpm: 60
  - { did: "${KEY_B}", rpm: 1200 }
operations:
  - pattern: agent.invoke
    min_trust_level: DV
  - pattern: GET /v1/agents/*
    allowed_dids: [${KEY_A}]
    denied_dids: [${KEY_B}]
  - pattern: "* /v1/admin/**"
    min_trust_level: EV
mcp_tools:
  - tool: files.delete
    min_trust_level: OV
    denied_dids: [${WEB_C}]
  - tool: "files.*"
    rpm: 30
capability_classes:
  - class: payments.transfer_funds
    min_trust_level: ""
    allowed_dids: []
`

const FULL_DOCUMENT: PolicyDocument = {
  version: '1',
  min_trust_level: 'REG',
  allowed_dids: [KEY_A, KEY_B, WEB_C],
  denied_dids: [],
  rate_limits: [
    { did: KEY_A, rpm: 60 },
    { did: KEY_B, rpm: 1200 },
  ],
  operations: [
    { pattern: 'agent.invoke', min_trust_level: 'DV' },
    { pattern: 'GET /v1/agents/*', allowed_dids: [KEY_A], denied_dids: [KEY_B] },
    { pattern: '* /v1/admin/**', min_trust_level: 'EV' },
  ],
  mcp_tools: [{ tool: 'files.delete', min_trust_level: 'OV', denied_dids: [WEB_C] }, { tool: 'files.*', rpm: 30 }],
  capability_classes: [{ class: 'payments.transfer_funds', min_trust_level: '', allowed_dids: [] }],
}

function issuesOf(text: string): PolicyIssue[] {
  const result = parsePolicyYaml(text)
  return result.ok ? [] : result.issues
}

function codesAt(text: string): string[] {
  return issuesOf(text).map((i) => `${i.code} ${i.path}`)
}

/** A valid document with `extra` appended, so each case provokes only its own finding. */
function policy(extra: string): string {
  return `version: "1"\n${extra}`
}

t.test('constants and the schema file', async (t) => {
  t.equal(MAX_POLICY_BYTES, 65536)
  t.equal(POLICY_SCHEMA_VERSION, '1')
  t.equal(POLICY_SCHEMA['$schema'], 'http://json-schema.org/draft-07/schema#')
  t.equal(POLICY_SCHEMA['$id'], 'https://schemas.service.local/policy/v1.json')
  t.ok(Object.isFrozen(POLICY_SCHEMA), 'the shared schema object cannot be mutated')
  t.ok(Object.isFrozen(POLICY_SCHEMA['properties']), 'frozen deeply')
  t.same(Object.keys(POLICY_SCHEMA['properties'] as object).sort(), [
    'allowed_dids',
    'capability_classes',
    'denied_dids',
    'mcp_tools',
    'min_trust_level',
    'operations',
    'rate_limits',
    'version',
  ])
  // every object shape in the schema closes itself to unknown keys
  const open: string[] = []
  const walk = (node: unknown, where: string): void => {
    if (typeof node !== 'object' || node === null) return
    const record = node as Record<string, unknown>
    if (record['type'] === 'object' && record['additionalProperties'] !== false) open.push(where)
    for (const [key, value] of Object.entries(record)) walk(value, `${where}/${key}`)
  }
  walk(POLICY_SCHEMA, '#')
  t.same(open, [])
})

t.test('a full valid policy passes and yields exactly the expected document', async (t) => {
  const result = parsePolicyYaml(FULL_POLICY)
  t.same(result, { ok: true, document: FULL_DOCUMENT })
  if (!result.ok) return
  t.strictSame(result.document, FULL_DOCUMENT)
  t.equal(Object.getPrototypeOf(result.document), Object.prototype, 'the document is made of ordinary objects')
  t.equal(Object.getPrototypeOf(result.document.operations![1]), Object.prototype)
  t.same(Object.keys(result.document), Object.keys(FULL_DOCUMENT), 'keys come out in grammar order')
  // the same document written as JSON (a YAML subset) reads the same
  t.strictSame(parsePolicyYaml(JSON.stringify(FULL_DOCUMENT, null, 2)), { ok: true, document: FULL_DOCUMENT })
})

t.test('small valid documents', async (t) => {
  const cases: [string, string, PolicyDocument][] = [
    ['version only', 'version: "1"\n', { version: '1' }],
    ['single quotes, CRLF, BOM', '\uFEFFversion: \'1\'\r\nmin_trust_level: SS\r\n', { version: '1', min_trust_level: 'SS' }],
    ['explicit core tags', 'version: !!str 1\nrate_limits: !!seq [{did: did:example:1, rpm: !!int 5}]\n', { version: '1', rate_limits: [{ did: 'did:example:1', rpm: 5 }] }],
    ['document markers', '%YAML 1.2\n---\nversion: "1"\n...\n', { version: '1' }],
    ['empty lists', 'version: "1"\noperations: []\nmcp_tools: []\ncapability_classes: []\nrate_limits: []\n', { version: '1', operations: [], mcp_tools: [], capability_classes: [], rate_limits: [] }],
    [
      'tool patterns: only * is special, any other character is allowed',
      'version: "1"\nmcp_tools: [{tool: "*"}, {tool: "what?*"}, {tool: "[ab]{c}\\\\x/y.z *"}, {tool: "a*b*c*d*e*f*g*h", rpm: 1}]\n',
      { version: '1', mcp_tools: [{ tool: '*' }, { tool: 'what?*' }, { tool: '[ab]{c}\\x/y.z *' }, { tool: 'a*b*c*d*e*f*g*h', rpm: 1 }] },
    ],
    [
      'same DID allowed at the top and denied in an operation (different scopes)',
      `version: "1"\nallowed_dids: [${KEY_A}]\noperations: [{pattern: agent.invoke, denied_dids: [${KEY_A}]}]\n`,
      { version: '1', allowed_dids: [KEY_A], operations: [{ pattern: 'agent.invoke', denied_dids: [KEY_A] }] },
    ],
  ]
  for (const [name, text, document] of cases) t.strictSame(parsePolicyYaml(text), { ok: true, document }, name)
})

t.test('every code is reported at its path', async (t) => {
  const cases: [string, string, string[]][] = [
    // the text
    ['empty', '', ['EMPTY_DOCUMENT $']],
    ['whitespace only', '  \n\t\r\n  ', ['EMPTY_DOCUMENT $']],
    ['comment only', '# nothing here\n', ['EMPTY_DOCUMENT $']],
    ['document marker only', '---\n', ['EMPTY_DOCUMENT $']],
    ['unclosed flow sequence', 'version: "1"\nallowed_dids: [\n', ['YAML_SYNTAX $']],
    ['bad indentation', 'version: "1"\noperations:\n  - pattern: a\n   tool: b\n', ['YAML_SYNTAX $']],
    ['tab indentation', 'version: "1"\noperations:\n\t- pattern: a\n', ['YAML_SYNTAX $']],
    ['unknown directive', '%SECRET on\n---\nversion: "1"\n', ['YAML_SYNTAX $']],
    ['second document', 'version: "1"\n---\nversion: "1"\n', ['MULTIPLE_DOCUMENTS $']],
    ['empty second document', 'version: "1"\n---\n', ['MULTIPLE_DOCUMENTS $']],
    ['root is a list', '- version: "1"\n', ['INVALID_TYPE $']],
    ['root is a string', 'version\n', ['INVALID_TYPE $']],
    ['root is null', '~\n', ['INVALID_TYPE $']],
    // the YAML tree
    ['anchor and alias', `version: "1"\nallowed_dids: &team [${KEY_A}]\ndenied_dids: *team\n`, ['ALIAS_NOT_ALLOWED $.allowed_dids', 'ALIAS_NOT_ALLOWED $.denied_dids']],
    ['alias to a missing anchor', policy('min_trust_level: *level\n'), ['ALIAS_NOT_ALLOWED $.min_trust_level']],
    ['anchor alone', policy('min_trust_level: &level DV\n'), ['ALIAS_NOT_ALLOWED $.min_trust_level']],
    ['two anchors on one node', policy('min_trust_level: &a &b DV\n'), ['ALIAS_NOT_ALLOWED $']],
    ['alias as a key', policy('*k : 1\n'), ['ALIAS_NOT_ALLOWED $']],
    ['duplicate top-level key', 'version: "1"\nmin_trust_level: DV\nmin_trust_level: EV\n', ['DUPLICATE_KEY $.min_trust_level']],
    ['duplicate nested key', policy('operations:\n  - pattern: agent.invoke\n    pattern: agent.call\n'), ['DUPLICATE_KEY $.operations[0].pattern']],
    ['duplicate key spelled differently', policy('"min_trust_level": DV\nmin_trust_level: DV\n'), ['DUPLICATE_KEY $.min_trust_level']],
    ['js function tag', policy('min_trust_level: !!js/function "function () { return 1 }"\n'), ['TAG_NOT_ALLOWED $.min_trust_level']],
    ['local tag', policy('operations: [!foo {pattern: agent.invoke}]\n'), ['TAG_NOT_ALLOWED $.operations[0]']],
    ['non-specific tag', policy('min_trust_level: ! DV\n'), ['TAG_NOT_ALLOWED $.min_trust_level']],
    ['yaml 1.1 binary tag', policy('min_trust_level: !!binary REVW\n'), ['TAG_NOT_ALLOWED $.min_trust_level']],
    ['core tag that does not fit', policy('min_trust_level: !!int DV\n'), ['TAG_NOT_ALLOWED $.min_trust_level']],
    ['tag handle from a %TAG directive', '%TAG !e! tag:evil.example,2024:\n---\nversion: !e!cmd "1"\n', ['TAG_NOT_ALLOWED $.version']],
    ['tag on the root', '!policy\nversion: "1"\n', ['TAG_NOT_ALLOWED $']],
    ['collection as key', policy('? [a, b]\n: 1\n'), ['INVALID_TYPE $']],
    ['__proto__ key', policy('__proto__: {min_trust_level: EV}\n'), ['UNKNOWN_KEY $.__proto__']],
    ['constructor key', policy('operations: [{pattern: agent.invoke, constructor: {prototype: {x: 1}}}]\n'), ['UNKNOWN_KEY $.operations[0].constructor']],
    ['prototype key', policy('mcp_tools: [{tool: t, prototype: 1}]\n'), ['UNKNOWN_KEY $.mcp_tools[0].prototype']],
    // shape (JSON Schema)
    ['unknown top-level key', policy('min_trust: DV\n'), ['UNKNOWN_KEY $.min_trust']],
    ['merge key is just unknown', policy('<<: {min_trust_level: EV}\n'), ['UNKNOWN_KEY $["<<"]']],
    ['unknown key in each entry kind', policy(`rate_limits: [{did: ${KEY_A}, rpm: 1, burst: 2}]\noperations: [{pattern: a, ttl: 1}]\nmcp_tools: [{tool: t, server: s}]\ncapability_classes: [{class: c, note: n}]\n`), [
      'UNKNOWN_KEY $.capability_classes[0].note',
      'UNKNOWN_KEY $.mcp_tools[0].server',
      'UNKNOWN_KEY $.operations[0].ttl',
      'UNKNOWN_KEY $.rate_limits[0].burst',
    ]],
    ['missing version', 'min_trust_level: DV\n', ['MISSING_REQUIRED_FIELD $.version']],
    ['missing entry keys', policy('rate_limits: [{}]\noperations: [{min_trust_level: DV}]\nmcp_tools: [{}]\ncapability_classes: [{}]\n'), [
      'MISSING_REQUIRED_FIELD $.capability_classes[0].class',
      'MISSING_REQUIRED_FIELD $.mcp_tools[0].tool',
      'MISSING_REQUIRED_FIELD $.operations[0].pattern',
      'MISSING_REQUIRED_FIELD $.rate_limits[0].did',
      'MISSING_REQUIRED_FIELD $.rate_limits[0].rpm',
    ]],
    ['unquoted version is a number', 'version: 1\n', ['INVALID_TYPE $.version']],
    ['wrong types', policy(`min_trust_level:\nallowed_dids: ${KEY_A}\ndenied_dids: [7]\noperations: {pattern: a}\nrate_limits: [{did: ${KEY_A}, rpm: "60"}, {did: ${KEY_B}, rpm: 1.5}]\n`), [
      'INVALID_TYPE $.allowed_dids',
      'INVALID_TYPE $.denied_dids[0]',
      'INVALID_TYPE $.min_trust_level',
      'INVALID_TYPE $.operations',
      'INVALID_TYPE $.rate_limits[0].rpm',
      'INVALID_TYPE $.rate_limits[1].rpm',
    ]],
    ['rpm that is not finite', policy(`rate_limits: [{did: ${KEY_A}, rpm: .inf}]\n`), ['INVALID_TYPE $.rate_limits[0].rpm']],
    ['unknown trust levels', policy('min_trust_level: dv\noperations: [{pattern: a, min_trust_level: "2"}]\n'), ['INVALID_VALUE $.min_trust_level', 'INVALID_VALUE $.operations[0].min_trust_level']],
    ['rpm not above zero', policy(`rate_limits: [{did: ${KEY_A}, rpm: 0}, {did: ${KEY_B}, rpm: -5}]\n`), ['INVALID_VALUE $.rate_limits[0].rpm', 'INVALID_VALUE $.rate_limits[1].rpm']],
    ['empty tool name', policy('mcp_tools: [{tool: ""}]\n'), ['INVALID_VALUE $.mcp_tools[0].tool']],
    ['tool rpm of the wrong type', policy('mcp_tools: [{tool: a, rpm: "60"}, {tool: b, rpm: 1.5}, {tool: c, rpm: .inf}, {tool: d, rpm: null}]\n'), [
      'INVALID_TYPE $.mcp_tools[0].rpm',
      'INVALID_TYPE $.mcp_tools[1].rpm',
      'INVALID_TYPE $.mcp_tools[2].rpm',
      'INVALID_TYPE $.mcp_tools[3].rpm',
    ]],
    ['tool rpm not above zero', policy('mcp_tools: [{tool: a, rpm: 0}, {tool: b, rpm: -5}]\n'), ['INVALID_VALUE $.mcp_tools[0].rpm', 'INVALID_VALUE $.mcp_tools[1].rpm']],
    ['tool pattern with more than 8 "*"', policy('mcp_tools: [{tool: "a*b*c*d*e*f*g*h*i*"}, {tool: "*********"}]\n'), ['LIMIT_EXCEEDED $.mcp_tools[0].tool', 'LIMIT_EXCEEDED $.mcp_tools[1].tool']],
    ['version 2', 'version: "2"\n', ['UNSUPPORTED_VERSION $.version']],
    ['version 1.0', 'version: "1.0"\n', ['UNSUPPORTED_VERSION $.version']],
    // semantics
    ['DIDs that are not DIDs', policy(`allowed_dids: [alice, "did:", "did:Key:z6Mk", "did:key:", " ${KEY_A}"]\nrate_limits: [{did: "key:z6Mk", rpm: 1}]\n`), [
      'INVALID_DID $.allowed_dids[0]',
      'INVALID_DID $.allowed_dids[1]',
      'INVALID_DID $.allowed_dids[2]',
      'INVALID_DID $.allowed_dids[3]',
      'INVALID_DID $.allowed_dids[4]',
      'INVALID_DID $.rate_limits[0].did',
    ]],
    ['duplicate DIDs', policy(`denied_dids: [${KEY_A}, ${KEY_B}, ${KEY_A}]\ncapability_classes: [{class: c, allowed_dids: [${WEB_C}, ${WEB_C}]}]\n`), ['DUPLICATE_DID $.capability_classes[0].allowed_dids[1]', 'DUPLICATE_DID $.denied_dids[2]']],
    ['allowed and denied at the top', policy(`allowed_dids: [${KEY_A}, ${KEY_B}]\ndenied_dids: [${KEY_B}]\n`), ['ALLOW_DENY_OVERLAP $.denied_dids[0]']],
    ['allowed and denied in one entry', policy(`mcp_tools: [{tool: t, allowed_dids: [${KEY_A}], denied_dids: [${WEB_C}, ${KEY_A}]}]\n`), ['ALLOW_DENY_OVERLAP $.mcp_tools[0].denied_dids[1]']],
    ['duplicate entries', policy(`rate_limits: [{did: ${KEY_A}, rpm: 1}, {did: ${KEY_A}, rpm: 2}]\noperations: [{pattern: agent.invoke}, {pattern: agent.invoke}]\nmcp_tools: [{tool: t}, {tool: u}, {tool: t}]\ncapability_classes: [{class: a.b}, {class: a.b}]\n`), [
      'DUPLICATE_ENTRY $.capability_classes[1].class',
      'DUPLICATE_ENTRY $.mcp_tools[2].tool',
      'DUPLICATE_ENTRY $.operations[1].pattern',
      'DUPLICATE_ENTRY $.rate_limits[1].did',
    ]],
    ['bad capability classes', policy('capability_classes: [{class: Files.read}, {class: "files..read"}, {class: files.*}, {class: ""}]\n'), [
      'INVALID_CAPABILITY_CLASS $.capability_classes[0].class',
      'INVALID_CAPABILITY_CLASS $.capability_classes[1].class',
      'INVALID_CAPABILITY_CLASS $.capability_classes[2].class',
      'INVALID_CAPABILITY_CLASS $.capability_classes[3].class',
    ]],
    ['bad operation patterns', policy('operations: [{pattern: ""}, {pattern: "/v1/agents"}, {pattern: "get /v1"}, {pattern: "GET /v1/agent*"}]\n'), [
      'INVALID_PATTERN $.operations[0].pattern',
      'INVALID_PATTERN $.operations[1].pattern',
      'INVALID_PATTERN $.operations[2].pattern',
      'INVALID_PATTERN $.operations[3].pattern',
    ]],
  ]
  for (const [name, text, expected] of cases) t.same(codesAt(text), expected, name)
})

t.test('messages say where and why', async (t) => {
  const syntax = issuesOf('version: "1"\nallowed_dids: [\n')
  t.match(syntax[0]!.message, /^YAML syntax error at line 3, column 1: /)
  const duplicate = issuesOf('version: "1"\n\nmin_trust_level: DV\nmin_trust_level: EV\n')
  t.match(duplicate[0]!.message, /line 4, column 1 repeats the key on line 3/)
  const alias = issuesOf('version: "1"\nallowed_dids: &x []\ndenied_dids: *x\n')
  t.match(alias.map((i) => i.message), [/anchor &x on the value at line 2/, /alias \*x at line 3, column 14/])
  t.match(issuesOf('version: "1"\n---\n')[0]!.message, /second YAML document starts at line 2/)
  t.match(issuesOf('version: 1\n')[0]!.message, /quote it/)
  t.match(issuesOf(policy(`allowed_dids: [${KEY_A}]\ndenied_dids: [${KEY_A}]\n`))[0]!.message, /also allowed at \$\.allowed_dids\[0\]/)
  t.match(issuesOf(policy('operations: [{pattern: "GET /v1//x"}]\n'))[0]!.message, /must not be empty/)
  t.match(issuesOf(policy('allowed_dids: [alice]\n'))[0]!.message, /must start with "did:"/)
})

t.test('operation pattern grammar', async (t) => {
  const valid = [
    'agent.invoke',
    'agent.*',
    'agent.**',
    '*',
    '**',
    '*.invoke',
    'tools.call-async.v2_beta',
    'GET /v1/agents/*',
    'GET /',
    '* /**',
    '* /v1/**',
    'POST /v1/agents/*/badge',
    'DELETE /v1/**/keys/*',
    'HEAD /v1/a.b/c~d/e:f@g!h$i&j\'k(l)m+n,o;p=q-r_s',
    'PATCH /v1/orgs/**/x',
    'OPTIONS /x',
    'CONNECT /x',
    'TRACE /x',
    'PUT /v1/.well-known/jwks.json',
  ]
  for (const pattern of valid) t.equal(operationPatternProblem(pattern), null, `valid: ${pattern}`)

  const invalid: [string, RegExp][] = [
    ['', /empty/],
    ['/v1/agents', /needs an HTTP method/],
    ['get /v1', /method "get"/],
    ['FETCH /v1', /method "FETCH"/],
    ['GET  /v1', /exactly one space/],
    ['GET v1/agents', /starting with "\/"/],
    ['GET /v1/', /trailing/],
    ['GET /v1//agents', /must not be empty/],
    ['GET /v1/agent*', /whole segments/],
    ['GET /v1/***', /whole segments/],
    ['GET /v1/**/**', /must not directly follow/],
    ['PATCH /v1/orgs/**/x/**', /at most 1 "\*\*" segments are allowed \(MAX_PATTERN_DOUBLE_STARS\)/],
    ['GET /v1/../admin', /"\." and "\.\." segments/],
    ['GET /v1/./x', /"\." and "\.\." segments/],
    ['GET /v1/agents?x=1', /character "\?"/],
    ['GET /v1/a%20b', /character "%"/],
    ['GET /v1/a b', /character " "/],
    ['GET /v1/é', /character "é"/],
    ['agent..invoke', /must not be empty/],
    ['.agent', /must not be empty/],
    ['agent.', /must not be empty/],
    ['agent.in*', /whole segments/],
    ['agent.**.**', /must not directly follow/],
    ['agent/invoke', /character "\/"/],
    ['agent.invoke\t', /character "\\t"/],
  ]
  for (const [pattern, reason] of invalid) t.match(operationPatternProblem(pattern), reason, `invalid: ${JSON.stringify(pattern)}`)
})

t.test('capability class grammar', async (t) => {
  for (const value of ['files', 'files.read', 'payments.transfer_funds', 'a1.b_2.c', 'x']) t.ok(isCapabilityClass(value), value)
  for (const value of ['', 'Files', 'files.Read', '1files', '_files', 'files-read', 'files.', '.files', 'files..read', 'files.*', 'files read', 'files.read\n']) {
    t.notOk(isCapabilityClass(value), JSON.stringify(value))
  }
})

t.test('the billion laughs are refused without expanding', async (t) => {
  const lines = ['version: "1"', 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
  const names = 'abcdefghi'
  for (let i = 1; i < names.length; i++) {
    const previous = names[i - 1]!
    lines.push(`${names[i]!}: &${names[i]!} [${Array(9).fill(`*${previous}`).join(',')}]`)
  }
  lines.push('allowed_dids: *i')
  const started = performance.now()
  const result = parsePolicyYaml(lines.join('\n') + '\n')
  const elapsed = performance.now() - started
  t.equal(result.ok, false)
  if (result.ok) return
  t.ok(elapsed < 2000, `refused in ${elapsed.toFixed(1)} ms`)
  t.ok(result.issues.length <= MAX_POLICY_ISSUES + 1, 'the issue list stays bounded')
  // 9 anchors and 73 aliases, plus the 9 helper keys the grammar does not know
  t.same(new Set(result.issues.map((i) => i.code)), new Set(['ALIAS_NOT_ALLOWED', 'UNKNOWN_KEY']))
  t.equal(result.issues.filter((i) => i.code === 'ALIAS_NOT_ALLOWED').length, 9 + 8 * 9 + 1)
  t.ok(result.issues.some((i) => i.code === 'ALIAS_NOT_ALLOWED' && i.path === '$.allowed_dids'))
  t.ok(result.issues.some((i) => i.code === 'ALIAS_NOT_ALLOWED' && i.path === '$.b[0]'))
})

t.test('prototype keys never pollute Object.prototype', async (t) => {
  const attacks = [
    'version: "1"\n__proto__: {polluted: yes}\n',
    'version: "1"\n"__proto__":\n  polluted: yes\n',
    '{"version": "1", "__proto__": {"polluted": true}}\n',
    'version: "1"\noperations: [{pattern: agent.invoke, __proto__: {polluted: 1}}]\n',
    'version: "1"\nconstructor: {prototype: {polluted: 1}}\n',
    'version: "1"\noperations: [{pattern: x, constructor: {prototype: {polluted: 1}}}]\n',
  ]
  for (const text of attacks) {
    const result = parsePolicyYaml(text)
    t.equal(result.ok, false, text)
    if (!result.ok) t.ok(result.issues.every((i) => i.code === 'UNKNOWN_KEY'), 'reported as unknown keys only')
    t.equal(({} as Record<string, unknown>)['polluted'], undefined)
    t.notOk(Object.prototype.hasOwnProperty.call(Object.prototype, 'polluted'))
  }
})

t.test('the size limit is checked in UTF-8 bytes, before parsing', async (t) => {
  const head = 'version: "1"\n# '
  const exact = head + 'x'.repeat(MAX_POLICY_BYTES - head.length - 1) + '\n'
  t.equal(Buffer.byteLength(exact), MAX_POLICY_BYTES)
  t.strictSame(parsePolicyYaml(exact), { ok: true, document: { version: '1' } }, 'exactly 64 KiB is accepted')

  // one byte more, and broken in ways parsing would report: only the size is reported
  const tooLarge = 'a: &x [*x\n' + '#'.repeat(MAX_POLICY_BYTES + 1 - 10)
  t.equal(Buffer.byteLength(tooLarge), MAX_POLICY_BYTES + 1)
  t.same(codesAt(tooLarge), ['DOCUMENT_TOO_LARGE $'])
  t.match(issuesOf(tooLarge)[0]!.message, /65537 bytes/)

  const multibyte = 'version: "1"\n# ' + 'é'.repeat(MAX_POLICY_BYTES / 2)
  t.ok(multibyte.length < MAX_POLICY_BYTES, 'fewer characters than the limit')
  t.same(codesAt(multibyte), ['DOCUMENT_TOO_LARGE $'], 'but more bytes')
})

t.test('hostile shapes within the size limit stay cheap and never throw', async (t) => {
  const deep = 'version: "1"\nallowed_dids: ' + '['.repeat(20000) + ']'.repeat(20000) + '\n'
  const moderate = 'version: "1"\nallowed_dids: ' + '['.repeat(50) + ']'.repeat(50) + '\n'
  let keys = 'version: "1"\n'
  for (let i = 0; keys.length < MAX_POLICY_BYTES - 20; i++) keys += `k${i}: 1\n`
  const cases: [string, string, (issues: PolicyIssue[]) => boolean][] = [
    ['20 000 nested lists', deep, (issues) => issues.length > 0],
    ['50 nested lists', moderate, (issues) => issues.length === 1 && issues[0]!.path === '$.allowed_dids[0]' && issues[0]!.code === 'INVALID_TYPE'],
    ['thousands of keys in one mapping', keys, (issues) => issues.length === MAX_POLICY_ISSUES + 1 && issues.at(-1)!.code === 'TOO_MANY_ISSUES'],
  ]
  for (const [name, text, check] of cases) {
    const started = performance.now()
    const result = parsePolicyYaml(text)
    const elapsed = performance.now() - started
    t.equal(result.ok, false, name)
    t.ok(!result.ok && check(result.issues), `${name}: expected findings`)
    t.ok(elapsed < 2000, `${name}: ${elapsed.toFixed(1)} ms`)
  }
})

t.test('all problems of one document are reported together, in a stable order', async (t) => {
  const text = `version: "2"
min_trust_level: XX
extra: true
allowed_dids: [${KEY_A}, not-a-did, ${KEY_A}]
denied_dids: [${KEY_A}]
rate_limits:
  - {did: ${KEY_B}, rpm: 0}
  - {did: ${KEY_B}, rpm: 10}
operations:
  - {pattern: "GET /v1/agents/*"}
  - {pattern: "GET /v1/agents/*", min_trust_level: XX}
  - {pattern: "GET v1"}
  - {pattern: a.b}
  - {pattern: a.c}
  - {pattern: a.d}
  - {pattern: a.e}
  - {pattern: a.f}
  - {pattern: a.g}
  - {pattern: a.h}
  - {pattern: "bad pattern"}
mcp_tools: [{tool: t, allowed_dids: [${WEB_C}], denied_dids: [${WEB_C}]}]
capability_classes: [{class: Bad}]
`
  const expected = [
    'INVALID_DID $.allowed_dids[1]',
    'DUPLICATE_DID $.allowed_dids[2]',
    'INVALID_CAPABILITY_CLASS $.capability_classes[0].class',
    'ALLOW_DENY_OVERLAP $.denied_dids[0]',
    'UNKNOWN_KEY $.extra',
    'ALLOW_DENY_OVERLAP $.mcp_tools[0].denied_dids[0]',
    'INVALID_VALUE $.min_trust_level',
    'INVALID_VALUE $.operations[1].min_trust_level',
    'DUPLICATE_ENTRY $.operations[1].pattern',
    'INVALID_PATTERN $.operations[2].pattern',
    'INVALID_PATTERN $.operations[10].pattern',
    'INVALID_VALUE $.rate_limits[0].rpm',
    'DUPLICATE_ENTRY $.rate_limits[1].did',
    'UNSUPPORTED_VERSION $.version',
  ]
  const first = parsePolicyYaml(text)
  t.same(first.ok ? [] : first.issues.map((i) => `${i.code} ${i.path}`), expected, 'sorted by path (indices numerically), then code')
  t.strictSame(parsePolicyYaml(text), first, 'the same text gives the same result')
  if (!first.ok) t.ok(first.issues.every((i) => Object.keys(i).join() === 'code,path,message'), 'issues carry exactly code, path and message')
})

t.test('the issue list is capped', async (t) => {
  const dids = Array.from({ length: 150 }, () => KEY_A)
  const result = parsePolicyYaml(policy(`allowed_dids: [${dids.join(', ')}]\n`))
  t.equal(result.ok, false)
  if (result.ok) return
  t.equal(result.issues.length, MAX_POLICY_ISSUES + 1)
  t.same(result.issues[0], { code: 'DUPLICATE_DID', path: '$.allowed_dids[1]', message: `"${KEY_A}" is already listed at $.allowed_dids[0].` })
  t.same(result.issues.at(-1), { code: 'TOO_MANY_ISSUES', path: '$', message: '49 further issues were found but are not listed.' })
})

t.test('contentHash is sha256 of the exact text', async (t) => {
  t.equal(contentHash(''), 'sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855')
  t.equal(contentHash('abc'), 'sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad')
  t.not(contentHash('version: "1"\n'), contentHash('version: "1"\r\n'), 'no normalisation of line endings')
  t.match(contentHash(FULL_POLICY), /^sha256:[0-9a-f]{64}$/)
})

t.test('property: generated valid policies survive yaml.stringify and parse back equal', async (t) => {
  const base58 = '123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz'
  const did = fc.oneof(
    fc.string({ unit: fc.constantFrom(...base58), minLength: 8, maxLength: 44 }).map((s) => `did:key:z6Mk${s}`),
    fc.stringMatching(/^[a-z0-9-]{1,12}(?::[A-Za-z0-9._-]{1,10}){0,3}$/).map((s) => `did:web:${s}`),
  )
  const level = fc.constantFrom<MinimumTrustCode>('', 'SS', 'REG', 'DV', 'OV', 'EV')
  const rule: fc.Arbitrary<PolicyRule> = fc
    .tuple(fc.option(level, { nil: undefined }), fc.uniqueArray(did, { maxLength: 6 }), fc.nat(6), fc.boolean(), fc.boolean())
    .map(([minLevel, dids, split, withAllowed, withDenied]) => {
      const out: PolicyRule = {}
      if (minLevel !== undefined) out.min_trust_level = minLevel
      const cut = Math.min(split, dids.length)
      // disjoint by construction: no DID is both allowed and denied in one scope
      if (withAllowed) out.allowed_dids = dids.slice(0, cut)
      if (withDenied) out.denied_dids = dids.slice(cut)
      return out
    })
  // no "**" right after another, and at most MAX_PATTERN_DOUBLE_STARS of them (later ones become "*")
  const noRepeatedDoubleStar = (segments: string[]): string[] => {
    let doubleStars = 0
    return segments
      .filter((s, i) => !(s === '**' && segments[i - 1] === '**'))
      .map((s) => (s === '**' && ++doubleStars > MAX_PATTERN_DOUBLE_STARS ? '*' : s))
  }
  const nameSegment = fc.oneof(fc.constantFrom('*', '**'), fc.stringMatching(/^[A-Za-z0-9_-]{1,8}$/))
  const pathSegment = fc.oneof(
    fc.constantFrom('*', '**'),
    fc.stringMatching(/^[A-Za-z0-9._~:@!$&'()+,;=-]{1,8}$/).filter((s) => s !== '.' && s !== '..'),
  )
  const pattern = fc.oneof(
    fc.array(nameSegment, { minLength: 1, maxLength: 4 }).map((s) => noRepeatedDoubleStar(s).join('.')),
    fc
      .tuple(fc.constantFrom('*', 'GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'), fc.array(pathSegment, { maxLength: 5 }))
      .map(([method, segments]) => `${method} /${noRepeatedDoubleStar(segments).join('/')}`),
  )
  const capabilityClass = fc.array(fc.stringMatching(/^[a-z][a-z0-9_]{0,7}$/), { minLength: 1, maxLength: 3 }).map((s) => s.join('.'))
  const tool = fc.string({ unit: 'grapheme', minLength: 1, maxLength: 12 }).filter((s) => s.split('*').length - 1 <= MAX_PATTERN_WILDCARDS)
  const keyed = <K extends string>(key: K, value: fc.Arbitrary<string>) =>
    fc
      .uniqueArray(fc.tuple(value, rule), { selector: ([v]) => v, maxLength: 4 })
      .map((list) => list.map(([v, r]) => ({ [key]: v, ...r }) as PolicyRule & Record<K, string>))
  const optional = <T>(arb: fc.Arbitrary<T>) => fc.option(arb, { nil: undefined })
  const document: fc.Arbitrary<PolicyDocument> = fc
    .record({
      rule,
      rateLimits: optional(fc.uniqueArray(fc.record({ did, rpm: fc.integer({ min: 1, max: 1_000_000 }) }), { selector: (r) => r.did, maxLength: 4 })),
      operations: optional(keyed('pattern', pattern)),
      tools: optional(fc.tuple(keyed('tool', tool), fc.array(fc.option(fc.integer({ min: 1, max: 1_000_000 }), { nil: undefined }), { minLength: 4, maxLength: 4 }))
        .map(([rules, rpms]) => rules.map((r, i) => (rpms[i] === undefined ? r : { ...r, rpm: rpms[i] })))),
      classes: optional(keyed('class', capabilityClass)),
    })
    .map(({ rule: top, rateLimits, operations, tools, classes }) => {
      const out: PolicyDocument = { version: '1', ...top }
      if (rateLimits !== undefined) out.rate_limits = rateLimits
      if (operations !== undefined) out.operations = operations
      if (tools !== undefined) out.mcp_tools = tools
      if (classes !== undefined) out.capability_classes = classes
      return out
    })

  fc.assert(
    fc.property(document, (generated) => {
      const text = stringify(generated)
      const result = parsePolicyYaml(text)
      if (!result.ok) throw new Error(`refused:\n${text}\n${JSON.stringify(result.issues, null, 2)}`)
      // fast-check builds records without a prototype; the parser returns ordinary objects
      return isDeepStrictEqual(result.document, JSON.parse(JSON.stringify(generated)))
    }),
    { numRuns: 300 },
  )
  t.pass('300 generated policies round-tripped')
})
