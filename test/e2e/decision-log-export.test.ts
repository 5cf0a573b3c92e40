/**
 * The decision-log export end to end: an appliance (admin plane and its own gateway, embedded PDP, a real
 * PostgreSQL) with SERVICE_DECISION_LOG_URL pointing at a sink on loopback that reads uploads as OPA's
 * decision-log service does. A denied and an allowed request through the appliance's gateway, and a report
 * posted by another gateway, each reach the sink once, in OPA's event shape, labelled with the gateway that
 * decided; the sink's Authorization is the configured one; the metric counts what was sent; a sink that is
 * down does not disturb the gateway.
 */
import t from 'tap'
import { createServer, type IncomingHttpHeaders } from 'node:http'
import type { AddressInfo } from 'node:net'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { gunzipSync } from 'node:zlib'
import { generateApiKeySecret } from '../../src/core/api-key.js'
import { loadConfig } from '../../src/config/index.js'
import { startAppliance } from '../../src/main.js'
import { createLogger } from '../../src/telemetry/logger.js'
import { adminCall, agentWithBadge } from '../helpers/appliance.js'
import { startUpstream } from '../helpers/upstream-server.js'
import { prepareWorkspace } from '../helpers/workspace.js'

t.setTimeout(120_000)

const received: { headers: IncomingHttpHeaders; events: any[] }[] = []
let sinkStatus = 204
const sink = createServer((req, res) => {
  const chunks: Buffer[] = []
  req.on('data', (chunk: Buffer) => chunks.push(chunk))
  req.on('end', () => {
    if (sinkStatus < 300) received.push({ headers: req.headers, events: JSON.parse(gunzipSync(Buffer.concat(chunks)).toString('utf8')) })
    res.writeHead(sinkStatus).end()
  })
})
await new Promise<void>((resolve) => sink.listen(0, '127.0.0.1', resolve))
t.teardown(() => new Promise<void>((resolve) => sink.close(() => resolve())))

const dataDir = mkdtempSync(path.join(tmpdir(), 'svc-decision-log-'))
const operatorKey = generateApiKeySecret()
const { orgId, databaseEnv } = await prepareWorkspace(t, dataDir, operatorKey)
const upstream = await startUpstream(t)
const config = loadConfig({
  ...databaseEnv,
  SERVICE_DATA_DIR: dataDir,
  PORT: '0',
  SERVICE_GATEWAY_PORT: '0',
  SERVICE_HOST: '127.0.0.1',
  CA_ISSUER_URL: 'http://registry.test',
  SERVICE_BOOTSTRAP_API_KEY: operatorKey,
  SERVICE_UPSTREAM_URL: upstream.url,
  SERVICE_EMBEDDED_PDP: 'true',
  SERVICE_WORKSPACE: orgId,
  SERVICE_ENFORCEMENT_MODE: 'EM-GUARD',
  SERVICE_PEP_ID: 'gw-appliance-own',
  SERVICE_DECISION_LOG_URL: `http://127.0.0.1:${(sink.address() as AddressInfo).port}/logs`,
  SERVICE_DECISION_LOG_AUTHORIZATION: 'Bearer sink-token',
})
const appliance = await startAppliance(config, { logger: createLogger('silent') })
t.teardown(() => appliance.close())
const admin = appliance.adminUrl
const gw = appliance.gatewayUrl as string

const [allowed, denied] = await Promise.all([agentWithBadge(admin, operatorKey, 'export-allowed'), agentWithBadge(admin, operatorKey, 'export-denied')])
const proposed = await adminCall(admin, operatorKey, 'POST', `/v1/orgs/${orgId}/policy/org`, { yaml_content: `version: "1"\ndenied_dids: ["${denied.did}"]\n` })
await adminCall(admin, operatorKey, 'POST', `/v1/orgs/${orgId}/policy/proposals/${proposed.body.id}/approve`)

async function call(token: string, urlPath: string): Promise<number> {
  const res = await fetch(`${gw}${urlPath}`, { headers: { authorization: `Bearer ${token}` } })
  await res.arrayBuffer()
  return res.status
}

async function until<T>(ms: number, fn: () => T | undefined): Promise<T | undefined> {
  const deadline = Date.now() + ms
  for (;;) {
    const value = fn()
    if (value !== undefined || Date.now() > deadline) return value
    await new Promise((r) => setTimeout(r, 50))
  }
}

const exported = (): any[] => received.flatMap((upload) => upload.events)

t.test('decisions of the appliance\'s own gateway reach the sink once, in OPA\'s shape', async (t) => {
  for (let i = 0; i < 100 && (await call(denied.token, '/export/probe')) !== 403; i++) await new Promise((r) => setTimeout(r, 100))
  t.equal(await call(allowed.token, '/export/allowed'), 200)
  t.equal(await call(denied.token, '/export/denied'), 403)
  const deny = await until(10_000, () => exported().find((e) => e.result?.path === '/export/denied'))
  const allow = await until(10_000, () => exported().find((e) => e.result?.path === '/export/allowed'))
  t.match(deny, {
    labels: { id: 'gw-appliance-own', app: 'agent-trust-gateway' }, path: 'service/policy', requested_by: 'gw-appliance-own',
    input: { subject: { did: denied.did }, action: { operation: 'GET /export/denied' } },
    result: { decision: 'DENY', reason: 'denied_did', status: 403, org_id: orgId },
  })
  t.match(allow, { result: { decision: 'ALLOW', status: 200 }, input: { subject: { did: allowed.did } } })
  t.equal(typeof deny.decision_id, 'string')
  t.ok(!Number.isNaN(Date.parse(deny.timestamp)), 'a timestamp')
  t.equal(exported().filter((e) => e.result?.path === '/export/denied').length, 1, 'exported once')
  t.equal(received[0]!.headers.authorization, 'Bearer sink-token')
  t.equal(received[0]!.headers['content-encoding'], 'gzip')
})

t.test('a report posted by another gateway is exported with that gateway\'s id', async (t) => {
  const report = {
    gateway_id: 'gw-elsewhere', version: '0.1.0', sent_at: new Date().toISOString(), run: 'run-1',
    events: [{
      seq: 1, time: new Date().toISOString(), request_id: 'gw-elsewhere-1', txn_id: null, agent_did: allowed.did, badge_jti: allowed.jti, method: 'GET',
      path: '/reported/elsewhere', operation: 'GET /reported/elsewhere', decision: 'ALLOW', reason: null, decision_id: 'dec-elsewhere-1', mode: 'EM-GUARD',
      obligations: [], obligations_not_met: [], breakglass: null, status: 200, protocol: 'http', error_code: null,
    }],
  }
  const posted = await adminCall(admin, operatorKey, 'POST', '/v1/gateway/reports', report)
  t.equal(posted.status, 202)
  const event = await until(10_000, () => exported().find((e) => e.decision_id === 'dec-elsewhere-1'))
  t.match(event, { labels: { id: 'gw-elsewhere' }, requested_by: 'gw-elsewhere', result: { path: '/reported/elsewhere', org_id: orgId } })
  // A retry of a report whose answer was lost is stored once, so exported once.
  const again = await adminCall(admin, operatorKey, 'POST', '/v1/gateway/reports', report)
  t.match(again, { status: 202, body: { stored: 0 } })
  await new Promise((r) => setTimeout(r, 1_500))
  t.equal(exported().filter((e) => e.decision_id === 'dec-elsewhere-1').length, 1, 'the retry is not exported again')
})

t.test('a sink that is down costs the gateway nothing; the metric counts what was sent', async (t) => {
  sinkStatus = 503
  t.equal(await call(allowed.token, '/export/while-down'), 200)
  t.equal(await call(allowed.token, '/export/while-down-2'), 200)
  sinkStatus = 204
  const later = await until(15_000, () => exported().find((e) => e.result?.path === '/export/while-down-2'))
  t.ok(later !== undefined, 'delivered once the sink is back')
  const metrics = await (await fetch(`${admin}/metrics`)).text()
  const sent = /service_decision_log_events_total\{outcome="sent"\} (\d+)/.exec(metrics)
  t.ok(sent !== null && Number(sent[1]) >= 4, 'sent events are counted')
})
