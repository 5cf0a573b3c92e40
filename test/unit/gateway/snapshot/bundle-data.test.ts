import t from 'tap'
import { bundleDataProblem } from '../../../../src/gateway/snapshot/bundle-data.js'

const policy = (over: Record<string, unknown>): Record<string, unknown> => ({
  min_trust_level: null, allowed_dids: null, denied_dids: [], rate_limits: [], operations: [], mcp_tools: [], capability_classes: [], ...over,
})

t.test('a rate limit, agent-wide or per tool, is a number above zero', async (t) => {
  t.equal(bundleDataProblem({ config: policy({ mcp_tools: [{ tool: 'search', rpm: 30 }], rate_limits: [{ did: 'did:web:a', rpm: 0.5 }] }) }), null)
  t.equal(bundleDataProblem({ config: policy({ mcp_tools: [{ tool: 'search' }] }) }), null, 'a tool rule needs no rpm')
  for (const rpm of [0, -1, '30', null, Number.POSITIVE_INFINITY, Number.NaN, {}]) {
    t.equal(bundleDataProblem({ config: policy({ mcp_tools: [{ tool: 'search', rpm }] }) }), 'config.mcp_tools[0].rpm is not a number > 0', `tool rpm ${String(rpm)}`)
    t.equal(bundleDataProblem({ config: policy({ rate_limits: [{ did: 'did:web:a', rpm }] }) }), 'config.rate_limits[0] is not {did, rpm > 0}', `agent rpm ${String(rpm)}`)
  }
  t.equal(
    bundleDataProblem({ resolved_policies: { by_agent_did: { 'did:web:a': policy({ mcp_tools: [{ tool: 'pay', rpm: -5 }] }) } } }),
    'a resolved policy.mcp_tools[0].rpm is not a number > 0',
    'per agent too',
  )
})
