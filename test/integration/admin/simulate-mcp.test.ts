/**
 * Simulation of an MCP message: the decision the gateway would make for it on an MCP route (docs/mcp.md),
 * from the method and the tool, prompt or resource it names.
 */
import t from 'tap'
import { stringify } from 'yaml'
import { createOrg, startTestAdmin } from '../../helpers/admin.js'

t.test('simulate takes an MCP message', async (t) => {
  const admin = await startTestAdmin(t)
  const org = await createOrg(admin, 'mcp-simulate')
  const agent = (await admin.request('POST', '/v1/agents', { key: org.key, body: { name: 'tool-user' } })).body.data
  const base = `/v1/orgs/${org.orgId}/policy`
  const yaml = stringify({
    version: '1',
    operations: [{ pattern: 'mcp.prompt.get', allowed_dids: [] }, { pattern: 'POST /private/**', allowed_dids: [] }],
    mcp_tools: [{ tool: 'delete_*', allowed_dids: [] }, { tool: 'pay', min_trust_level: 'OV' }, { tool: 'search', rpm: 30 }],
  })
  const proposal = await admin.request('POST', `${base}/org`, { key: org.key, body: { yaml_content: yaml } })
  t.equal(proposal.status, 201)
  t.equal((await admin.request('POST', `${base}/proposals/${proposal.body.id}/approve`, { key: org.key })).status, 200)
  const simulate = (body: Record<string, unknown>): ReturnType<typeof admin.request> =>
    admin.request('POST', `${base}/agents/${agent.id}/simulate`, { key: org.key, body: { subject: { trust_level: 'DV' }, ...body } })

  const search = await simulate({ mcp: { method: 'tools/call', name: 'search' } })
  t.equal(search.status, 200)
  t.match(search.body, { decision: 'ALLOW', reason: 'allowed' })
  t.match(search.body.obligations, [{ type: 'rate_limit.apply', params: { rpm: 30, key: /mcp_tool search$/ } }], 'the tool\'s own limit')
  t.match((await simulate({ mcp: { method: 'tools/call', name: 'delete_file' } })).body, { decision: 'DENY', reason: 'mcp_tool_not_in_allow_list' })
  t.match((await simulate({ mcp: { method: 'tools/call', name: 'pay' } })).body, { decision: 'DENY', reason: 'mcp_tool_trust_level_below_minimum' })
  t.match((await simulate({ mcp: { method: 'prompts/get', name: 'summarize' } })).body, { decision: 'DENY', reason: 'operation_not_in_allow_list' })
  t.match((await simulate({ mcp: { method: 'tools/list' } })).body, { decision: 'ALLOW' })
  t.match((await simulate({ mcp: { method: 'tools/list', path: '/private/mcp' } })).body, { decision: 'DENY', reason: 'operation_not_in_allow_list' }, 'the route path\'s rules apply')
  t.match((await simulate({ mcp: { method: 'resources/read', uri: 'file:///readme.md' } })).body, { decision: 'ALLOW' })

  for (const [name, body] of [
    ['a tool call without a name', { mcp: { method: 'tools/call' } }],
    ['a resource read without a URI', { mcp: { method: 'resources/read', name: 'x' } }],
    ['a resource URI that is no URL, which the gateway refuses', { mcp: { method: 'resources/read', uri: 'not a url' } }],
    ['both an action and an MCP message', { action: { operation: 'agent.invoke' }, mcp: { method: 'ping' } }],
  ] as const) {
    const refused = await simulate(body)
    t.equal(refused.status, 400, name)
    t.equal(refused.body.error, 'simulate_request_invalid', name)
  }
  const neither = await simulate({})
  t.equal(neither.status, 400, 'neither an action nor an MCP message')
  t.equal((await simulate({ mcp: { method: 'ping', path: 'no-slash' } })).status, 400, 'a path must start with /')
})
