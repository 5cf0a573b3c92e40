/**
 * The MCP part of bench/gateway.ts: the upstream's answers echo every request id and never throw, and the
 * bench policy passes the grammar and, under the built-in evaluator, leaves exactly the tools the benchmark
 * expects a filtered tools/list to show (so its pre-measurement check and the policy cannot drift apart).
 */
import fc from 'fast-check'
import t from 'tap'
import { answerMcp, BENCH_TOOL, DENIED_TOOL, MCP_PATH, MCP_TOOL_NAMES, MCP_TOOLS, mcpPolicy, toolsCallBody, toolsListBody, VISIBLE_TOOL_NAMES } from '../../../bench/mcp.js'
import { evaluate } from '../../../src/core/policy/evaluate.js'
import { parsePolicyYaml } from '../../../src/core/policy/grammar.js'
import { resolvePolicy } from '../../../src/core/policy/merge.js'
import type { PdpRequest, TrustCode } from '../../../src/core/policy/types.js'
import { propertyRuns } from '../../helpers/property-runs.js'

const DID = 'did:web:mcp.bench.example.com'
const id = fc.oneof(fc.string({ maxLength: 40 }), fc.maxSafeInteger(), fc.integer({ min: Number.MIN_SAFE_INTEGER, max: 0 }))

t.test('the upstream answers tools/call and tools/list for the request id', async (t) => {
  const runs = propertyRuns(200)
  fc.assert(fc.property(id, (requestId) => {
    const call = answerMcp(Buffer.from(toolsCallBody(requestId)))
    const list = answerMcp(Buffer.from(toolsListBody(requestId)))
    const callBody = JSON.parse(call.body) as { id: unknown; result: { isError: boolean; content: unknown[] } }
    const listBody = JSON.parse(list.body) as { id: unknown; result: { tools: { name: string }[] } }
    return call.status === 200 && callBody.id === requestId && callBody.result.isError === false && callBody.result.content.length === 1 &&
      list.status === 200 && listBody.id === requestId && listBody.result.tools.map((tool) => tool.name).join() === MCP_TOOL_NAMES.join()
  }), runs)
  t.equal(MCP_TOOLS.length, 50)
  t.same(MCP_TOOL_NAMES.slice(0, 2), ['tool_00', 'tool_01'])
  t.equal(MCP_TOOL_NAMES.at(-1), 'tool_49')
  t.ok(MCP_TOOLS.every((tool) => tool.description.length > 0 && tool.inputSchema.type === 'object'), 'each tool has a description and an input schema')
  t.equal(new Set(MCP_TOOL_NAMES).size, 50, 'names are distinct')
})

t.test('the upstream refuses what is not a request it knows, and never throws', async (t) => {
  t.equal(answerMcp(Buffer.from('{')).status, 400)
  t.equal(answerMcp(Buffer.from('[]')).status, 400)
  t.equal(answerMcp(Buffer.from('{"jsonrpc":"2.0","id":{},"method":"tools/list"}')).status, 400)
  t.same(answerMcp(Buffer.from('{"jsonrpc":"2.0","method":"notifications/initialized"}')), { status: 202, body: '' })
  t.equal((JSON.parse(answerMcp(Buffer.from('{"jsonrpc":"2.0","id":3,"method":"prompts/list"}')).body) as { error: { code: number } }).error.code, -32601)
  t.equal((JSON.parse(answerMcp(Buffer.from('{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{}}')).body) as { error: { code: number } }).error.code, -32602)
  fc.assert(fc.property(fc.uint8Array({ maxLength: 200 }), (bytes) => {
    const answer = answerMcp(Buffer.from(bytes))
    return answer.body === '' || JSON.parse(answer.body) !== undefined
  }), propertyRuns(500))
})

t.test('the bench policy shows exactly the visible tools to the bench agent below EV', async (t) => {
  const parsed = parsePolicyYaml(mcpPolicy(DID))
  if (!parsed.ok) throw new Error(JSON.stringify(parsed.issues))
  const policy = resolvePolicy([{ scope_type: 'org', scope_id: 'org-1', document_id: 'doc-1', version: 1, document: parsed.document }]).resolved
  const call = (tool: string, level: TrustCode | ''): PdpRequest => ({
    pip_version: 'service.pip.v1',
    subject: { did: DID, badge_jti: 'jti-1', ial: 'IAL-0', trust_level: level },
    action: { operation: 'mcp.tool.call', capability_class: null, mcp_tool: tool, http_operation: `POST ${MCP_PATH}` },
    resource: { identifier: tool },
    context: { txn_id: 'txn-1', enforcement_mode: 'EM-GUARD' },
    environment: { pep_id: 'pep-1', time: '2026-03-01T12:00:00Z' },
  })
  for (const level of ['', 'SS', 'REG', 'DV', 'OV'] as const) {
    const allowed = MCP_TOOL_NAMES.filter((tool) => evaluate(call(tool, level), policy).decision === 'ALLOW')
    t.same(allowed, VISIBLE_TOOL_NAMES, `trust level ${level === '' ? 'none' : level}`)
  }
  t.ok(VISIBLE_TOOL_NAMES.length < MCP_TOOL_NAMES.length, 'the filter has work to do')
  t.ok(VISIBLE_TOOL_NAMES.includes(BENCH_TOOL), 'the benchmarked tool is allowed')
  t.notOk(VISIBLE_TOOL_NAMES.includes(DENIED_TOOL), 'the tool of the enforcement check is denied')
  const partner = evaluate({ ...call(BENCH_TOOL, 'OV'), subject: { did: 'did:web:partner.example.com', badge_jti: 'j', ial: 'IAL-0', trust_level: 'OV' } }, policy)
  t.equal(partner.decision, 'DENY', 'the bench tool is allowed by name only to the bench agent')
})
