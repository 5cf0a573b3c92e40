/**
 * The appliance's gateway with the embedded PDP (`SERVICE_EMBEDDED_PDP=true`, EM-GUARD), run as a child
 * process on a database that outlives it: org policies approved on the admin plane reach the gateway
 * without a restart (NOTIFY on PostgreSQL), denials are 403, operation rules and rate-limit
 * obligations behave per mode, and the per-request log carries the embedded decision id.
 *
 * The workspace must be an existing org, known before the process starts: the test migrates the
 * database and runs the same bootstrap the appliance runs (with the same operator key), reads the
 * `default` org's id, and hands both to the appliance. On PostgreSQL that is a fresh schema; with
 * SERVICE_TEST_DB=pglite it is the embedded database on disk in the data directory.
 */
import t from 'tap'
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { generateApiKeySecret } from '../../src/core/api-key.js'
import { prepareWorkspace } from '../helpers/workspace.js'
import { adminCall, agentWithBadge, startService } from '../helpers/appliance.js'
import { startUpstream } from '../helpers/upstream-server.js'

// Child processes on a shared 2-core machine: the whole file gets more than tap's default 30 s.
t.setTimeout(180_000)

const dataDir = mkdtempSync(path.join(tmpdir(), 'svc-e2e-embedded-'))
const operatorKey = generateApiKeySecret()

const { orgId, databaseEnv } = await prepareWorkspace(t, dataDir, operatorKey)

const upstream = await startUpstream(t)
const routesFile = path.join(dataDir, 'routes.json')
// /delegate runs EM-DELEGATE (rate limits enforced); everything else the configured EM-GUARD.
writeFileSync(routesFile, JSON.stringify({
  routes: [
    { prefix: '/delegate', upstream: upstream.url, mode: 'EM-DELEGATE' },
    { prefix: '/', upstream: upstream.url },
  ],
}))
const appliance = await startService(t, {
  ...databaseEnv,
  SERVICE_DATA_DIR: dataDir,
  SERVICE_BOOTSTRAP_API_KEY: operatorKey,
  SERVICE_ROUTES_FILE: routesFile,
  SERVICE_EMBEDDED_PDP: 'true',
  SERVICE_WORKSPACE: orgId,
  SERVICE_ENFORCEMENT_MODE: 'EM-GUARD',
})
const gw = appliance.gatewayUrl as string
const admin = appliance.adminUrl

const [agentA, agentB, agentC, agentD] = await Promise.all(
  ['embedded-a', 'embedded-b', 'embedded-c', 'embedded-d'].map((name) => agentWithBadge(admin, operatorKey, name)),
) as [Awaited<ReturnType<typeof agentWithBadge>>, Awaited<ReturnType<typeof agentWithBadge>>, Awaited<ReturnType<typeof agentWithBadge>>, Awaited<ReturnType<typeof agentWithBadge>>]

interface Answer {
  status: number
  headers: Headers
  json: any
}

async function call(agent: { token: string }, urlPath: string, method = 'GET', txn?: string): Promise<Answer> {
  const res = await fetch(`${gw}${urlPath}`, {
    method,
    headers: { authorization: `Bearer ${agent.token}`, ...(txn === undefined ? {} : { 'x-service-txn': txn }) },
  })
  const text = await res.text()
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch {
    json = undefined
  }
  return { status: res.status, headers: res.headers, json }
}

async function pollUntil<T>(deadlineMs: number, fn: () => Promise<T | undefined>): Promise<T | undefined> {
  const deadline = Date.now() + deadlineMs
  for (;;) {
    const value = await fn()
    if (value !== undefined) return value
    if (Date.now() > deadline) return undefined
    await new Promise((r) => setTimeout(r, 50))
  }
}

/** Proposes and approves an org policy; returns the approved document. */
async function approveOrgPolicy(yaml: string): Promise<{ id: string; version: number }> {
  const proposed = await adminCall(admin, operatorKey, 'POST', `/v1/orgs/${orgId}/policy/org`, { yaml_content: yaml })
  if (proposed.status !== 201) throw new Error(`propose failed: ${proposed.status} ${JSON.stringify(proposed.body)}`)
  const approved = await adminCall(admin, operatorKey, 'POST', `/v1/orgs/${orgId}/policy/proposals/${proposed.body.id}/approve`)
  if (approved.status !== 200) throw new Error(`approve failed: ${approved.status} ${JSON.stringify(approved.body)}`)
  return approved.body
}

t.test('/readyz is 200 once the bundle is loaded', async (t) => {
  const ready = await pollUntil(10_000, async () => {
    const res = await fetch(`${admin}/readyz`)
    const body = await res.json() as { checks?: Record<string, boolean> }
    return res.status === 200 ? body : undefined
  })
  t.ok(ready !== undefined, '/readyz answers 200')
  t.equal(ready?.checks?.gateway, true, 'the gateway check is true')
})

t.test('no org policy: every badge is allowed, and the log line has the embedded decision id', async (t) => {
  for (const agent of [agentA, agentB, agentC]) {
    const res = await call(agent, '/plain/resource', 'GET', `emb-open-${agent.id}`)
    t.equal(res.status, 200, `${agent.did} forwarded`)
  }
  t.ok(upstream.requests.filter((r) => r.url === '/plain/resource').length === 3, 'three requests reached the upstream')
  const line = await pollUntil(5000, async () =>
    appliance.logLines().find((l) => l.msg === 'gateway request' && l.txn_id === `emb-open-${agentA.id}`))
  t.match(line, { status: 200, mode: 'EM-GUARD', 'service.policy.decision': 'ALLOW', agent_did: agentA.did }, 'logged as an ALLOW in EM-GUARD')
  t.ok(typeof line?.['service.policy.decision_id'] === 'string' && line['service.policy.decision_id'] !== '', 'service.policy.decision_id set')
})

t.test('an approved deny policy reaches the gateway without a restart; a newer one lifts it', async (t) => {
  await approveOrgPolicy(`version: "1"\ndenied_dids: ["${agentA.did}"]\n`)
  const denied = await pollUntil(3000, async () => {
    const res = await call(agentA, '/deny/probe')
    return res.status === 403 ? res : undefined
  })
  t.ok(denied !== undefined, 'agent A is denied within 3 s of the approval')
  t.equal(denied?.json?.error, 'POLICY_DENIED', 'POLICY_DENIED')
  t.equal(denied?.headers.get('x-service-gateway'), 'error', 'marked as gateway-made')
  const decisionId = denied?.headers.get('x-service-decision-id')
  t.ok(typeof decisionId === 'string' && decisionId !== '', 'X-Service-Decision-Id on the denial')
  t.equal((await call(agentB, '/deny/probe')).status, 200, 'agent B passes')

  const before = upstream.requests.length
  const again = await call(agentA, '/deny/again', 'GET', 'emb-denied-a')
  t.equal(again.status, 403, 'still denied')
  t.equal(upstream.requests.length, before, 'a denied request reaches nothing')
  const line = await pollUntil(5000, async () => appliance.logLines().find((l) => l.msg === 'gateway request' && l.txn_id === 'emb-denied-a'))
  t.match(line, { status: 403, error_code: 'POLICY_DENIED', 'service.policy.decision': 'DENY' }, 'the denial is logged')
  t.equal(line?.['service.policy.decision_id'], again.headers.get('x-service-decision-id'), 'with the decision id the client saw')

  // Version 2: the denial stays, plus an operation rule and rate limits.
  await approveOrgPolicy([
    'version: "1"',
    `denied_dids: ["${agentA.did}"]`,
    'operations:',
    '  - pattern: "POST /admin/**"',
    '    min_trust_level: OV',
    'rate_limits:',
    `  - did: "${agentC.did}"`,
    '    rpm: 2',
    `  - did: "${agentD.did}"`,
    '    rpm: 2',
    '',
  ].join('\n'))
  const opDenied = await pollUntil(3000, async () => {
    const res = await call(agentB, '/admin/x', 'POST')
    return res.status === 403 ? res : undefined
  })
  t.ok(opDenied !== undefined, 'POST /admin/x is denied to a REG agent under min_trust_level OV')
  t.equal(opDenied?.json?.error, 'POLICY_DENIED')
  t.equal((await call(agentB, '/admin/x', 'GET')).status, 200, 'GET /admin/x does not match the rule')
  t.equal((await call(agentB, '/other', 'POST')).status, 200, 'POST elsewhere does not match the rule')

  // EM-GUARD does not enforce obligations: over the limit is still forwarded.
  const guard = []
  for (let i = 0; i < 4; i++) guard.push((await call(agentC, '/guard/limited')).status)
  t.same(guard, [200, 200, 200, 200], 'EM-GUARD: rpm 2 is not enforced')
  // EM-DELEGATE (the /delegate route's own mode) enforces it: the third request answers 429.
  const delegate = []
  let limited: Answer | undefined
  for (let i = 0; i < 3; i++) {
    const res = await call(agentD, '/delegate/limited')
    delegate.push(res.status)
    limited = res
  }
  t.same(delegate, [200, 200, 429], 'EM-DELEGATE: the third request within a minute is refused')
  t.equal(limited?.json?.error, 'rate_limit_exceeded', 'rate_limit_exceeded')
  t.ok(Number(limited?.headers.get('retry-after')) >= 1, 'with Retry-After')

  // Version 3 drops everything: agent A passes again, without a restart.
  await approveOrgPolicy('version: "1"\n')
  const lifted = await pollUntil(3000, async () => {
    const res = await call(agentA, '/deny/lifted')
    return res.status === 200 ? res : undefined
  })
  t.ok(lifted !== undefined, 'agent A passes within 3 s of the newer approval')
  t.equal((await call(agentB, '/admin/x', 'POST')).status, 200, 'the operation rule is gone too')
})

t.test('the appliance stops cleanly', async (t) => {
  t.equal(await appliance.stop(), 0, 'SIGTERM exits 0')
  t.notOk([agentA, agentB, agentC, agentD].some((a) => appliance.output().includes(a.token)), 'no badge token in the output')
})
