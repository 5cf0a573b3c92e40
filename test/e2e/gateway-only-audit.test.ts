/**
 * Gateway refusals reach the audit trail from a gateway-only process: an appliance (`agent-trust serve`) and
 * a separate `agent-trust gateway` reporting to it. Requests the organization's policy denies each become
 * a `gateway.refusal` record naming the gateway, its request id, the agent and the outcome; an allowed
 * request does not (no ALLOW sampling configured); the organization sees its agent's denials. The operator's export then verifies on its own against the published JWKS.
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

/** Sends a request through the gateway; answers its status and the request id the gateway gave it. */
async function send(path: string, headers: Record<string, string>): Promise<{ status: number; requestId: string | null }> {
  const res = await fetch(`${gw}${path}`, { headers })
  await res.arrayBuffer()
  return { status: res.status, requestId: res.headers.get('x-request-id') }
}

t.test('refusals of a gateway-only process arrive in the audit trail; allowed requests do not', async (t) => {
  const allowed = await send('/reports/ok', { authorization: `Bearer ${agent.token}` })
  t.equal(allowed.status, 200, 'allowed')
  const denied = await send('/admin/users', { authorization: `Bearer ${agent.token}` })
  t.equal(denied.status, 403, 'denied by the policy')
  const deniedAgain = await send('/admin/keys', { authorization: `Bearer ${agent.token}` })
  t.equal(deniedAgain.status, 403, 'denied again')
  let records: any[] = []
  for (let i = 0; i < 300 && records.length < 2; i++) {
    const res = await adminCall(admin, operatorKey, 'GET', `/v1/audit?action=gateway.refusal&actor=${GATEWAY_ID}&limit=100`)
    records = res.body.data
    if (records.length < 2) await new Promise((resolve) => setTimeout(resolve, 100))
  }
  t.equal(records.length, 2, 'both denials are recorded, once each')
  for (const record of records) {
    t.match(record, { actorType: 'gateway', actorId: GATEWAY_ID, outcome: 'DENY:403:POLICY_DENIED', orgId, target: agent.did, digest: /^[0-9a-f]{64}$/ })
  }
  if (denied.requestId !== null) t.ok(records.some((r) => r.requestId === denied.requestId), 'named by the gateway\'s request id')
  const any = await adminCall(admin, operatorKey, 'GET', `/v1/audit?actor=${GATEWAY_ID}&limit=100`)
  t.notOk(any.body.data.some((r: any) => r.action === 'gateway.allow' || (allowed.requestId !== null && r.requestId === allowed.requestId)), 'the ALLOW is not recorded')
  const members = await adminCall(admin, orgKey, 'GET', '/v1/audit?action=gateway.refusal&limit=100')
  t.equal(members.body.data.length, 2, 'the organization sees its agent\'s denials')

  const jwks = await (await fetch(`${admin}/.well-known/jwks.json`)).json() as Jwks
  const exported = await fetch(`${admin}/v1/audit/export`, { headers: { authorization: `Bearer ${operatorKey}` } })
  t.equal(exported.status, 200)
  const report = verifyExportText(await exported.text(), jwks)
  t.equal(report.ok, true, `the export verifies (${JSON.stringify(report.failure)})`)
  t.ok(report.checkpoints >= 1, 'with signed checkpoints')
})
