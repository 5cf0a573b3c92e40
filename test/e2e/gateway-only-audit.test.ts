/**
 * Gateway refusals reach the audit trail from a gateway-only process: an appliance (`agent-trust serve`) and
 * a separate `agent-trust gateway` reporting to it. A request without a badge, one with a malformed badge
 * and one the organization's policy denies each become a `gateway.refusal` record naming the gateway, its
 * request id and outcome; an allowed request does not (no ALLOW sampling configured); the gateway answers
 * without waiting on the trail. The operator's export then verifies on its own against the published JWKS.
 */
import t from 'tap'
import { verifyExportText } from '../../src/cli/audit.js'
import type { Jwks } from '../../src/core/audit.js'
import { adminCall, agentWithBadge, startService } from '../helpers/appliance.js'
import { BACKEND, createTestDatabase } from '../helpers/database.js'
import { startUpstream } from '../helpers/upstream-server.js'

t.setTimeout(180_000)

const ISSUER = 'http://registry.test'
const GATEWAY_ID = 'gw-audit-e2e'
const POLICY = `version: "1"
min_trust_level: REG
operations:
  - pattern: "* /admin/**"
    min_trust_level: DV
`

const databaseEnv: Record<string, string> = BACKEND === 'postgres'
  ? { DATABASE_URL: (await createTestDatabase(t, { migrate: false })).url as string }
  : { DATABASE_URL: undefined as unknown as string }
const appliance = await startService(t, { ...databaseEnv, CA_ISSUER_URL: ISSUER, SERVICE_AUDIT_CHECKPOINT_RECORDS: '3' })
const admin = appliance.adminUrl
const operatorKey = appliance.operatorKey
const org = await adminCall(admin, operatorKey, 'POST', '/v1/orgs', { name: 'audit-e2e-org' })
const orgId = org.body.data.org.id as string
const orgKey = org.body.data.apiKey.key as string
const proposed = await adminCall(admin, orgKey, 'POST', `/v1/orgs/${orgId}/policy/org`, { yaml_content: POLICY })
await adminCall(admin, orgKey, 'POST', `/v1/orgs/${orgId}/policy/proposals/${String(proposed.body.id)}/approve`)
const agent = await agentWithBadge(admin, orgKey, 'audit-e2e-agent')
const upstream = await startUpstream(t)
const gateway = await startService(t, {
  SERVICE_REGISTRY_URL: admin,
  SERVICE_REGISTRY_KEY: orgKey,
  SERVICE_UPSTREAM_URL: upstream.url,
  CA_ISSUER_URL: ISSUER,
  SERVICE_EMBEDDED_PDP: 'true',
  SERVICE_WORKSPACE: orgId,
  SERVICE_ENFORCEMENT_MODE: 'EM-GUARD',
  SERVICE_PEP_ID: GATEWAY_ID,
  SERVICE_GATEWAY_HEARTBEAT_INTERVAL: '300ms',
}, { command: 'gateway' })
const gw = gateway.gatewayUrl as string

async function send(path: string, headers: Record<string, string>, requestId: string): Promise<number> {
  const res = await fetch(`${gw}${path}`, { headers: { ...headers, 'x-request-id': requestId } })
  await res.arrayBuffer()
  return res.status
}

t.test('refusals of a gateway-only process arrive in the audit trail; allowed requests do not', async (t) => {
  t.equal(await send('/reports/ok', { authorization: `Bearer ${agent.token}` }, 'audit-e2e-allow'), 200, 'allowed')
  t.equal(await send('/reports/none', {}, 'audit-e2e-nobadge'), 401, 'no badge')
  t.equal(await send('/reports/bad', { authorization: 'Bearer not-a-badge' }, 'audit-e2e-malformed'), 401, 'malformed badge')
  t.equal(await send('/admin/users', { authorization: `Bearer ${agent.token}` }, 'audit-e2e-deny'), 403, 'denied by the policy')
  let records: any[] = []
  for (let i = 0; i < 200 && records.length < 3; i++) {
    const res = await adminCall(admin, operatorKey, 'GET', `/v1/audit?action=gateway.refusal&actor=${GATEWAY_ID}&limit=100`)
    records = res.body.data
    if (records.length < 3) await new Promise((resolve) => setTimeout(resolve, 100))
  }
  const byRequest = new Map(records.map((r) => [r.requestId, r]))
  t.match(byRequest.get('audit-e2e-nobadge'), { actorType: 'gateway', actorId: GATEWAY_ID, outcome: /^REFUSED:401/ })
  t.match(byRequest.get('audit-e2e-malformed'), { actorType: 'gateway', outcome: 'REFUSED:401:BADGE_MALFORMED' })
  t.match(byRequest.get('audit-e2e-deny'), { actorType: 'gateway', outcome: 'DENY:403', orgId, target: agent.did })
  t.notOk(byRequest.has('audit-e2e-allow'), 'the ALLOW is not recorded')
  const members = await adminCall(admin, orgKey, 'GET', '/v1/audit?action=gateway.refusal&limit=100')
  t.same(members.body.data.map((r: any) => r.requestId), ['audit-e2e-deny'], 'the organization sees its agent\'s denial, not the anonymous refusals')

  const jwks = await (await fetch(`${admin}/.well-known/jwks.json`)).json() as Jwks
  const exported = await fetch(`${admin}/v1/audit/export`, { headers: { authorization: `Bearer ${operatorKey}` } })
  t.equal(exported.status, 200)
  const report = verifyExportText(await exported.text(), jwks)
  t.equal(report.ok, true, `the export verifies (${JSON.stringify(report.failure)})`)
  t.ok(report.checkpoints >= 1, 'with signed checkpoints')
})
