/**
 * Bounded policy work over HTTP: a proposal past any size limit is 400 `invalid_policy` naming the limit
 * and stores nothing; the largest accepted worst-case policy simulates normally; a stored document that no
 * longer passes the grammar (written before a limit existed) answers 409, never 500, until replaced.
 */
import t from 'tap'
import { stringify } from 'yaml'
import {
  MAX_CAPABILITY_CLASS_BYTES,
  MAX_PATTERN_BYTES,
  MAX_PATTERN_SEGMENTS,
  MAX_POLICY_DID_BYTES,
  MAX_RULES_PER_DOCUMENT,
  MAX_RULES_PER_LIST,
  MAX_TOOL_NAME_BYTES,
} from '../../../src/core/policy/grammar.js'
import { createOrg, startTestAdmin, type TestAdmin } from '../../helpers/admin.js'
import { expectError } from '../../helpers/expect.js'

const admin = await startTestAdmin(t)

function yaml(fields: Record<string, unknown>): string {
  return stringify({ version: '1', ...fields })
}

async function rowCount(admin: TestAdmin, orgId: string): Promise<number> {
  const rows = await admin.database.db.query<{ n: string | number }>('SELECT count(*) AS n FROM policy_documents WHERE org_id = $1', [orgId])
  return Number(rows[0]?.n)
}

const segments = (n: number): string => `GET /${Array.from({ length: n }, (_, i) => `s${i}`).join('/')}`
const rules = (n: number, key: string, value: (i: number) => string): Record<string, string>[] =>
  Array.from({ length: n }, (_, i) => ({ [key]: value(i) }))

// Each case: the document, the path of the expected LIMIT_EXCEEDED problem and the limit it must name.
const OVER_LIMIT: [string, string, string, string][] = [
  ['pattern bytes', yaml({ operations: [{ pattern: `GET /${'x'.repeat(MAX_PATTERN_BYTES)}` }] }), '$.operations[0].pattern', 'MAX_PATTERN_BYTES'],
  ['pattern segments', yaml({ operations: [{ pattern: segments(MAX_PATTERN_SEGMENTS + 1) }] }), '$.operations[0].pattern', 'MAX_PATTERN_SEGMENTS'],
  ['wildcards', yaml({ operations: [{ pattern: 'GET /*/*/*/*/*/*/*/*/*' }] }), '$.operations[0].pattern', 'MAX_PATTERN_WILDCARDS'],
  ['double stars', yaml({ operations: [{ pattern: 'GET /**/admin/**' }] }), '$.operations[0].pattern', 'MAX_PATTERN_DOUBLE_STARS'],
  ['rules per list', yaml({ mcp_tools: rules(MAX_RULES_PER_LIST + 1, 'tool', (i) => `t${i}`) }), '$.mcp_tools', 'MAX_RULES_PER_LIST'],
  [
    'rules per document',
    yaml({
      operations: rules(MAX_RULES_PER_DOCUMENT / 2, 'pattern', (i) => `op.n${i}`),
      mcp_tools: rules(1, 'tool', () => 'one-too-many'),
      capability_classes: rules(MAX_RULES_PER_DOCUMENT / 2, 'class', (i) => `c.n${i}`),
    }),
    '$',
    'MAX_RULES_PER_DOCUMENT',
  ],
  ['DID length', yaml({ denied_dids: [`did:web:${'d'.repeat(MAX_POLICY_DID_BYTES)}`] }), '$.denied_dids[0]', 'MAX_POLICY_DID_BYTES'],
  ['tool name', yaml({ mcp_tools: [{ tool: 't'.repeat(MAX_TOOL_NAME_BYTES + 1) }] }), '$.mcp_tools[0].tool', 'MAX_TOOL_NAME_BYTES'],
  ['class', yaml({ capability_classes: [{ class: `c.${'x'.repeat(MAX_CAPABILITY_CLASS_BYTES)}` }] }), '$.capability_classes[0].class', 'MAX_CAPABILITY_CLASS_BYTES'],
]

t.test('a proposal over any limit is 400 invalid_policy naming the limit, and nothing is stored', async (t) => {
  const { orgId, key } = await createOrg(admin, 'limits-refused')
  for (const [name, text, path, limit] of OVER_LIMIT) {
    const res = await admin.request('POST', `/v1/orgs/${orgId}/policy/org`, { key, body: { yaml_content: text } })
    expectError(t, res, 400, 'invalid_policy', name)
    const errors = res.body.errors as { code: string; path: string; message: string }[]
    const problem = errors.find((e) => e.code === 'LIMIT_EXCEEDED')
    t.match(problem, { path }, `${name}: the problem is at ${path}`)
    t.match(problem?.message, new RegExp(`\\(${limit}\\)`), `${name}: the message names ${limit}`)
  }
  t.equal(await rowCount(admin, orgId), 0, 'no document was stored')
  const proposals = await admin.request('GET', `/v1/orgs/${orgId}/policy/proposals`, { key })
  t.same(proposals.body, [], 'no proposal is listed')
})

t.test('the largest accepted worst-case policy simulates normally', async (t) => {
  const { orgId, key } = await createOrg(admin, 'limits-worst')
  const agent = (await admin.request('POST', '/v1/agents', { key, body: { name: 'subject' } })).body.data
  const base = `/v1/orgs/${orgId}/policy`
  // Every pattern as long as the segment limit allows, with a "**" and every fixed segment compared.
  const half = MAX_PATTERN_SEGMENTS / 2
  const pattern = (i: number): string => `GET /${Array<string>(half - 1).fill('a').join('/')}/**/${[...Array<string>(half - 1).fill('a'), `b${i}`].join('/')}`
  const operations = Array.from({ length: MAX_RULES_PER_LIST }, (_, i) => ({ pattern: pattern(i), min_trust_level: 'EV' }))
  const proposal = await admin.request('POST', `${base}/org`, { key, body: { yaml_content: yaml({ operations }) } })
  t.equal(proposal.status, 201, 'accepted')
  t.equal((await admin.request('POST', `${base}/proposals/${proposal.body.id}/approve`, { key })).status, 200)

  // Near the longest operation simulate takes (2048 characters).
  const operation = `GET ${'/a'.repeat(1020)}/b9`
  t.equal(operation.length, 2047)
  const simulate = (op: string) =>
    admin.request('POST', `${base}/agents/${agent.id}/simulate`, { key, body: { subject: { trust_level: 'DV' }, action: { operation: op } } })
  const denied = await simulate(operation)
  t.equal(denied.status, 200)
  t.match(denied.body, { decision: 'DENY', reason: 'operation_trust_level_below_minimum' }, 'the one matching rule applies')
  const allowed = await simulate(`GET ${'/a'.repeat(1020)}/c`)
  t.match(allowed.body, { decision: 'ALLOW', reason: 'allowed' }, 'no rule matches')
})

t.test('a stored document that no longer passes the grammar answers 409 until replaced', async (t) => {
  const { orgId, key } = await createOrg(admin, 'limits-stored')
  const agent = (await admin.request('POST', '/v1/agents', { key, body: { name: 'subject' } })).body.data
  const base = `/v1/orgs/${orgId}/policy`
  const first = await admin.request('POST', `${base}/org`, { key, body: { yaml_content: yaml({ operations: [{ pattern: 'GET /v1/**' }] }) } })
  t.equal((await admin.request('POST', `${base}/proposals/${first.body.id}/approve`, { key })).status, 200)
  // As a document written before the limits existed: the pattern from the review, 60 KB of "**/a".
  const old = yaml({ operations: [{ pattern: `GET /${Array.from({ length: 12_000 }, () => '**/a').join('/')}`, min_trust_level: 'EV' }] })
  await admin.database.db.query('UPDATE policy_documents SET yaml_content = $1 WHERE id = $2', [old, first.body.id])

  const body = { action: { operation: 'GET /v1/x' } }
  const stale = await admin.request('POST', `${base}/agents/${agent.id}/simulate`, { key, body })
  expectError(t, stale, 409, 'stored_policy_invalid', 'simulate')
  t.match(stale.body.message, new RegExp(`${first.body.id}.*LIMIT_EXCEEDED`), 'the message names the document and the problem')
  t.ok(stale.text.length < 1000, 'the stored pattern is not echoed')
  expectError(t, await admin.request('GET', `${base}/agents/${agent.id}/resolved`, { key }), 409, 'stored_policy_invalid', 'resolved')

  const replacement = await admin.request('POST', `${base}/org`, { key, body: { yaml_content: yaml({ min_trust_level: 'REG' }) } })
  t.equal(replacement.status, 201)
  t.equal((await admin.request('POST', `${base}/proposals/${replacement.body.id}/approve`, { key })).status, 200, 'a valid replacement can be approved')
  const repaired = await admin.request('POST', `${base}/agents/${agent.id}/simulate`, { key, body })
  t.equal(repaired.status, 200, 'and resolution works again')
})
