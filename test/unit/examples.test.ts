/**
 * The files of the README walkthrough (examples/) stay usable: the policy passes the policy grammar and
 * decides as the walkthrough says, HTTP requests and MCP tool calls alike, and the routes file is a valid
 * routes file with the walkthrough's two routes.
 */
import t from 'tap'
import fc from 'fast-check'
import { readFileSync } from 'node:fs'
import { parsePolicyYaml } from '../../src/core/policy/grammar.js'
import { resolvePolicy } from '../../src/core/policy/merge.js'
import { evaluate } from '../../src/core/policy/evaluate.js'
import type { PdpRequest, ResolvedPolicy, TrustCode } from '../../src/core/policy/types.js'
import { mcpMethodSpec } from '../../src/core/mcp-methods.js'
import { parseRoutes } from '../../src/gateway/ingress/routes.js'
import { projectPath } from '../../src/core/paths.js'

const read = (name: string): string => readFileSync(projectPath('examples', name), 'utf8')

const SUBJECT_DID = 'did:web:localhost%3A8080:agents:0b6e7f2a-1c3d-4e5f-8a9b-0c1d2e3f4a5b'
/** The path of the MCP route in examples/routes.json. */
const MCP_PATH = '/mcp'

function subject(trustLevel: TrustCode): PdpRequest['subject'] {
  return { did: SUBJECT_DID, badge_jti: 'jti-1', ial: '0', trust_level: trustLevel }
}

const context: PdpRequest['context'] = { txn_id: 'txn-1', enforcement_mode: 'EM-GUARD' }
const environment: PdpRequest['environment'] = { pep_id: '', time: '2026-01-01T00:00:00.000Z' }

function request(operation: string, trustLevel: TrustCode): PdpRequest {
  return {
    pip_version: 'service.pip.v1',
    subject: subject(trustLevel),
    action: { operation, capability_class: null },
    resource: { identifier: operation.split(' ')[1] as string },
    context,
    environment,
  }
}

/** A POST to the MCP route as the gateway asks about it (src/gateway/stages/decide.ts, docs/mcp.md "Operations"). */
function mcpRequest(method: string, trustLevel: TrustCode, tool?: string): PdpRequest {
  const operation = mcpMethodSpec(method).operation
  const httpOperation = `POST ${MCP_PATH}`
  return {
    pip_version: 'service.pip.v1',
    subject: subject(trustLevel),
    action: tool === undefined
      ? { operation, capability_class: null, http_operation: httpOperation }
      : { operation, capability_class: null, mcp_tool: tool, http_operation: httpOperation },
    resource: { identifier: tool ?? MCP_PATH },
    context,
    environment,
  }
}

function examplePolicy(): ResolvedPolicy {
  const parsed = parsePolicyYaml(read('policy.yaml'))
  if (!parsed.ok) throw new Error(`the example policy is refused: ${JSON.stringify(parsed.issues)}`)
  return resolvePolicy([{ scope_type: 'org', scope_id: 'org', document_id: 'doc', version: 1, document: parsed.document }]).resolved
}

const callTool = (tool: string, trustLevel: TrustCode, policy: ResolvedPolicy) => evaluate(mcpRequest('tools/call', trustLevel, tool), policy)

t.test('examples/policy.yaml passes the grammar and decides as the walkthrough says', async (t) => {
  const resolved = examplePolicy()
  t.equal(evaluate(request('GET /forecasts/today', 'REG'), resolved).decision, 'ALLOW', 'a registered agent reads forecasts')
  const denied = evaluate(request('GET /admin/users', 'REG'), resolved)
  t.equal(denied.decision, 'DENY', 'a registered agent does not reach the admin area')
  t.equal(denied.reason, 'operation_trust_level_below_minimum', 'for the reason the walkthrough shows')
  t.equal(evaluate(request('GET /admin/users', 'OV'), resolved).decision, 'ALLOW', 'an agent raised to OV does')
})

t.test('examples/policy.yaml decides the MCP messages of the walkthrough', async (t) => {
  const resolved = examplePolicy()
  for (const method of ['initialize', 'notifications/initialized', 'tools/list']) {
    t.equal(evaluate(mcpRequest(method, 'OV'), resolved).decision, 'ALLOW', `${method} is allowed`)
  }
  // tools/list keeps a tool exactly when its tools/call would be allowed.
  const listed = ['search', 'read_file', 'delete_file', 'pay'].filter((tool) => callTool(tool, 'OV', resolved).decision === 'ALLOW')
  t.same(listed, ['search', 'read_file', 'pay'], 'an OV agent sees every tool but delete_file')
  t.equal(callTool('search', 'OV', resolved).decision, 'ALLOW', 'search is called')
  const deleted = callTool('delete_file', 'OV', resolved)
  t.equal(deleted.decision, 'DENY', 'delete_file is refused')
  t.equal(deleted.reason, 'mcp_tool_not_in_allow_list', 'for the reason the walkthrough shows')
  const regPay = callTool('pay', 'REG', resolved)
  t.equal(regPay.decision, 'DENY', 'a registered agent may not pay')
  t.equal(regPay.reason, 'mcp_tool_trust_level_below_minimum')
  t.equal(callTool('pay', 'OV', resolved).decision, 'ALLOW', 'an OV agent may')
  t.equal(callTool('search', 'SS', resolved).reason, 'trust_level_below_minimum', 'a self-signed badge reaches no tool')
})

t.test('examples/policy.yaml: no delete_* tool for anyone, every other tool but pay for REG and above (fast-check)', async (t) => {
  const resolved = examplePolicy()
  const aboveSelfSigned = fc.constantFrom<TrustCode>('REG', 'DV', 'OV', 'EV')
  fc.assert(fc.property(fc.string(), fc.constantFrom<TrustCode>('SS', 'REG', 'DV', 'OV', 'EV'), (suffix, level) => {
    return callTool(`delete_${suffix}`, level, resolved).decision === 'DENY'
  }), { seed: 21 })
  fc.assert(fc.property(fc.string({ minLength: 1 }).filter((tool) => !tool.startsWith('delete_') && tool !== 'pay'), aboveSelfSigned, (tool, level) => {
    return callTool(tool, level, resolved).decision === 'ALLOW'
  }), { seed: 21 })
  t.pass('the property held')
})

t.test('examples/routes.json is a valid routes file with an MCP route', async (t) => {
  const routes = parseRoutes(read('routes.json'), 'examples/routes.json', 'http://localhost:8000')
  t.same(routes.map((route) => route.prefix), ['/', MCP_PATH])
  t.same(routes.map((route) => route.mode), ['EM-GUARD', 'EM-GUARD'])
  t.equal(routes[0]?.protocol, 'http', 'every other path goes to the HTTP upstream')
  t.equal(routes[1]?.protocol, 'mcp', 'the MCP route is read as MCP')
  t.equal(routes[1]?.upstream, 'http://127.0.0.1:9300', 'on the example MCP server\'s default port')
  t.same(routes.map((route) => route.resourceServer), [null, { resource: `http://localhost:8000${MCP_PATH}`, requireAudience: false }], 'the MCP route is a resource server by default')
})
