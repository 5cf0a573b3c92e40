/**
 * The files of the README walkthrough (examples/) stay usable: the policy passes the policy grammar and
 * decides as the walkthrough says, and the routes file is a valid routes file.
 */
import t from 'tap'
import { readFileSync } from 'node:fs'
import { parsePolicyYaml } from '../../src/core/policy/grammar.js'
import { resolvePolicy } from '../../src/core/policy/merge.js'
import { evaluate } from '../../src/core/policy/evaluate.js'
import type { PdpRequest, TrustCode } from '../../src/core/policy/types.js'
import { parseRoutes } from '../../src/gateway/ingress/routes.js'
import { projectPath } from '../../src/core/paths.js'

const read = (name: string): string => readFileSync(projectPath('examples', name), 'utf8')

function request(operation: string, trustLevel: TrustCode): PdpRequest {
  return {
    pip_version: 'service.pip.v1',
    subject: { did: 'did:web:localhost%3A8080:agents:0b6e7f2a-1c3d-4e5f-8a9b-0c1d2e3f4a5b', badge_jti: 'jti-1', ial: '0', trust_level: trustLevel },
    action: { operation, capability_class: null },
    resource: { identifier: operation.split(' ')[1] as string },
    context: { txn_id: 'txn-1', enforcement_mode: 'EM-GUARD' },
    environment: { pep_id: '', time: '2026-01-01T00:00:00.000Z' },
  }
}

t.test('examples/policy.yaml passes the grammar and decides as the walkthrough says', async (t) => {
  const parsed = parsePolicyYaml(read('policy.yaml'))
  if (!parsed.ok) return t.fail(`the example policy is refused: ${JSON.stringify(parsed.issues)}`)
  const { resolved } = resolvePolicy([{ scope_type: 'org', scope_id: 'org', document_id: 'doc', version: 1, document: parsed.document }])
  t.equal(evaluate(request('GET /forecasts/today', 'REG'), resolved).decision, 'ALLOW', 'a registered agent reads forecasts')
  const denied = evaluate(request('GET /admin/users', 'REG'), resolved)
  t.equal(denied.decision, 'DENY', 'a registered agent does not reach the admin area')
  t.equal(denied.reason, 'operation_trust_level_below_minimum', 'for the reason the walkthrough shows')
  t.equal(evaluate(request('GET /admin/users', 'OV'), resolved).decision, 'ALLOW', 'an agent raised to OV does')
})

t.test('examples/routes.json is a valid routes file', async (t) => {
  const routes = parseRoutes(read('routes.json'), 'examples/routes.json')
  t.equal(routes.length, 1)
  t.equal(routes[0]?.prefix, '/')
  t.equal(routes[0]?.mode, 'EM-GUARD')
})
