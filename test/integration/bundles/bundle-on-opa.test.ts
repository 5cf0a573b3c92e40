/**
 * The OPA bundle a real registry serves (`GET /v1/bundles/{workspace}`, tarball form), loaded into a
 * real OPA as `opa run` would load it: its module and its `data.json`. OPA must decide real PDP
 * requests exactly as the gateway's embedded evaluator does on the same bundle.
 */
import t from 'tap'
import type { PdpRequest } from '../../../src/core/policy/types.js'
import { createOrg, startTestAdmin } from '../../helpers/admin.js'
import { BACKEND } from '../../helpers/database.js'
import { embeddedDecision, POLICY_OUTPUTS, type PolicyOutputs } from '../../helpers/decisions.js'
import { startOpa, untarGz } from '../../helpers/opa.js'

const opa = await startOpa()
t.teardown(() => opa.close())

function pdpRequest(did: string, trustLevel: string, action: PdpRequest['action'], identifier: string): PdpRequest {
  return {
    pip_version: 'service.pip.v1',
    subject: { did, badge_jti: 'b7f0c6de-5a1e-4c55-9d59-2f3c5d1a0b11', ial: 'IAL-1', trust_level: trustLevel },
    action,
    resource: { identifier },
    context: { txn_id: '0190f4a0-7b1c-7000-8000-000000000001', enforcement_mode: 'EM-GUARD' },
    environment: { workspace: 'bundle-on-opa', pep_id: 'pep-test', time: '2026-03-01T12:00:00Z' },
  } as PdpRequest
}

const allow = (obligations: unknown[] = []): PolicyOutputs => ({ decision: 'ALLOW', reason: 'allowed', obligations, ttl: 60 })
const deny = (reason: string, required?: string): PolicyOutputs =>
  ({ decision: 'DENY', reason, obligations: [], ttl: 0, ...(required === undefined ? {} : { required_trust_level: required }) })

t.test(`a registry bundle decides on OPA as on the embedded evaluator (${BACKEND})`, async (t) => {
  const admin = await startTestAdmin(t)
  const { orgId, key } = await createOrg(admin, 'bundle-on-opa')
  const alpha = (await admin.request('POST', '/v1/agents', { key, body: { name: 'alpha' } })).body.data
  const alphaDid = `did:web:${admin.config.registryDidHost}:agents:${alpha.id}`
  const betaDid = 'did:web:beta.bundle-on-opa.example.com'
  const beta = (await admin.request('POST', '/v1/agents', { key, body: { name: 'beta', did: betaDid } })).body.data
  await admin.database.db.query('UPDATE agents SET trust_level = 3 WHERE id = $1', [beta.id])

  const activate = async (scope: string, yaml: string): Promise<void> => {
    const proposal = await admin.request('POST', `/v1/orgs/${orgId}/policy/${scope}`, { key, body: { yaml_content: yaml } })
    t.equal(proposal.status, 201, `${scope} policy proposed`)
    const approved = await admin.request('POST', `/v1/orgs/${orgId}/policy/proposals/${proposal.body.id}/approve`, { key })
    t.equal(approved.status, 200, `${scope} policy approved`)
  }
  await activate('org', [
    'version: "1"',
    'min_trust_level: REG',
    'rate_limits:',
    `  - { did: "${alphaDid}", rpm: 120 }`,
    'operations:',
    '  - { pattern: "POST /v1/orders/**", min_trust_level: OV }',
    'mcp_tools:',
    '  - { tool: delete_everything, allowed_dids: [] }',
  ].join('\n'))
  await activate(`agents/${beta.id}`, `version: "1"\ncapability_classes:\n  - { class: payments, denied_dids: ["${betaDid}"] }\n`)

  const response = await fetch(`${admin.url}/v1/bundles/${orgId}`, { headers: { 'x-service-registry-key': key, accept: 'application/gzip' } })
  t.equal(response.status, 200, 'the bundle tarball is served')
  const files = untarGz(Buffer.from(await response.arrayBuffer()))
  const manifest = JSON.parse(files.get('.manifest')!.toString('utf8')) as { roots: string[] }
  const data = JSON.parse(files.get('data.json')!.toString('utf8')) as Record<string, unknown>
  const module = files.get('service/policy.rego')!.toString('utf8')
  t.same([...files.keys()].sort(), ['.manifest', 'data.json', 'service/policy.rego'], 'an OPA bundle')
  // OPA refuses a bundle whose data or packages lie outside its roots.
  for (const root of [...Object.keys(data), 'service']) t.ok(manifest.roots.includes(root), `${root} is a manifest root`)

  const stranger = 'did:web:stranger.example.com'
  const cases: { name: string; request: PdpRequest; expected: PolicyOutputs }[] = [
    {
      name: 'alpha reads: allowed with its rate limit',
      request: pdpRequest(alphaDid, 'REG', { operation: 'GET /v1/things', capability_class: null }, '/v1/things'),
      expected: allow([{ type: 'rate_limit.apply', params: { rpm: 120, key: alphaDid } }]),
    },
    {
      name: 'alpha orders: below the operation minimum',
      request: pdpRequest(alphaDid, 'REG', { operation: 'POST /v1/orders/42', capability_class: null }, '/v1/orders/42'),
      expected: deny('operation_trust_level_below_minimum', 'OV'),
    },
    {
      name: 'alpha calls a tool nobody may call',
      request: pdpRequest(alphaDid, 'REG', { operation: 'mcp.tool.call', capability_class: null }, 'delete_everything'),
      expected: deny('mcp_tool_not_in_allow_list'),
    },
    {
      name: 'beta orders at OV: allowed',
      request: pdpRequest(betaDid, 'OV', { operation: 'POST /v1/orders/42', capability_class: null }, '/v1/orders/42'),
      expected: allow(),
    },
    {
      name: "beta refunds: denied by beta's own policy",
      request: pdpRequest(betaDid, 'OV', { operation: 'POST /v1/refunds', capability_class: 'payments.refund' }, '/v1/refunds'),
      expected: deny('capability_class_denied_did'),
    },
    {
      name: 'a DID without an entry at SS: the org minimum from config',
      request: pdpRequest(stranger, 'SS', { operation: 'GET /v1/things', capability_class: null }, '/v1/things'),
      expected: deny('trust_level_below_minimum', 'REG'),
    },
    {
      name: 'a DID without an entry at DV: allowed by config',
      request: pdpRequest(stranger, 'DV', { operation: 'GET /v1/things', capability_class: null }, '/v1/things'),
      expected: allow(),
    },
  ]
  const results = opa.evaluate([{ name: 'bundle service/policy.rego', text: module }], cases.map((c) => ({ rules: POLICY_OUTPUTS, input: c.request, data })))
  cases.forEach((c, i) => {
    t.strictSame(results[i], embeddedDecision(c.request, data), `${c.name}: OPA answers as the embedded evaluator`)
    t.strictSame(results[i], c.expected, `${c.name}: ${String(c.expected.decision)} ${String(c.expected.reason)}`)
  })
})
