/**
 * Scale-out (issue 7, part 4): two appliance instances (`agent-trust serve`, A and B) on one PostgreSQL
 * schema and one Redis, both with a gateway and the embedded PDP, plus a gateway-only process (C) that
 * pulls its snapshot from A. What must hold across instances:
 *
 * - the admin plane's per-key rate limit is one counter in Redis, whichever instance takes a request;
 * - a badge signed by one instance verifies on every gateway (one authority key file), and its
 *   revocation on another instance reaches every gateway within seconds (A and B through NOTIFY: their
 *   own poll timers are set far beyond the test's deadlines; C through its registry polling);
 * - a policy approval on one instance reaches every embedded PDP within seconds, in both directions;
 * - a PoP challenge redeems once, and a proposal is approved once, however many instances race for it.
 *
 * PGlite is a single-process database, so the file is skipped with SERVICE_TEST_DB=pglite.
 */
import t from 'tap'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { generateApiKeySecret } from '../../src/core/api-key.js'
import { bootstrap, BOOTSTRAP_KEY_FILE } from '../../src/admin/services/credentials.js'
import { loadOrCreateKeyFile } from '../../src/authority/key-ring.js'
import { buildPopProof, requestPopChallenge } from '../../src/sdk/pop.js'
import { generateAgentKey } from '../../src/sdk/keys.js'
import { adminCall, agentWithBadge, exitSafeTeardown, SLOW_START, startService, type RunningService } from '../helpers/appliance.js'
import { BACKEND, createTestDatabase } from '../helpers/database.js'
import { startUpstream } from '../helpers/upstream-server.js'

// Three child processes on a shared 2-core machine.
t.setTimeout(300_000)

const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379'
const ISSUER = 'http://registry.test'
/**
 * The limit is global to the admin plane (not per route), and C's sync traffic counts against it too:
 * JWKS and bundle every 500 ms plus revocations every second is ~180 public requests a minute from
 * 127.0.0.1 and ~120 on C's registry key. A limit of 20 would throttle C's sync and break the
 * propagation checks, so the limit sits above that, and the rate-limit check uses a key of its own.
 */
const RATE_LIMIT = 300
/** Propagation deadline per gateway: "within a few seconds", generous for a loaded 2-core machine. */
const PROPAGATION_MS = 10_000

interface Answer {
  status: number
  headers: Headers
  json: any
}

async function send(url: string, init: RequestInit = {}): Promise<Answer> {
  const res = await fetch(url, init)
  const text = await res.text()
  let json: unknown
  try {
    json = text === '' ? undefined : JSON.parse(text)
  } catch {
    json = text
  }
  return { status: res.status, headers: res.headers, json }
}

/** A request through a gateway with a badge. */
function viaGateway(gateway: string, token: string, urlPath: string): Promise<Answer> {
  return send(`${gateway}${urlPath}`, { headers: { authorization: `Bearer ${token}` } })
}

/** Polls until `done` holds or the deadline passes; returns the last answer and how long it took. */
async function pollGateway(
  gateway: string, token: string, urlPath: string, done: (a: Answer) => boolean, deadlineMs = PROPAGATION_MS,
): Promise<{ answer: Answer; ms: number }> {
  const start = Date.now()
  for (;;) {
    const answer = await viaGateway(gateway, token, urlPath)
    if (done(answer) || Date.now() - start > deadlineMs) return { answer, ms: Date.now() - start }
    await new Promise((r) => setTimeout(r, 100))
  }
}

if (BACKEND === 'pglite') {
  t.test('scale-out: two appliances and a gateway on one database', { skip: 'SERVICE_TEST_DB=pglite: an embedded PGlite database cannot be shared between processes' }, () => {})
} else {
  const teardown = exitSafeTeardown(t)
  const operatorKey = generateApiKeySecret()
  const dir = mkdtempSync(path.join(tmpdir(), 'svc-e2e-scale-'))

  // The workspace must exist before the gateways start: migrate (createTestDatabase) and run the same
  // bootstrap the appliances will run, then read the default org's id.
  const database = await createTestDatabase(t)
  await bootstrap(database.db, { configuredKey: operatorKey, keyFile: path.join(dir, BOOTSTRAP_KEY_FILE) })
  const orgRows = await database.db.query<{ id: string }>("SELECT id FROM organizations WHERE name = 'default'")
  const orgId = String(orgRows[0]?.id)
  // One authority key file, made before either instance starts so that they do not race to create it.
  const caKeyPath = path.join(dir, 'ca-keys.json')
  await loadOrCreateKeyFile(caKeyPath)

  const upstream = await startUpstream(t)
  const shared = {
    DATABASE_URL: database.url as string,
    REDIS_URL,
    SERVICE_RATE_LIMIT_PER_MINUTE: String(RATE_LIMIT),
    SERVICE_BOOTSTRAP_API_KEY: operatorKey,
    CA_KEY_PATH: caKeyPath,
    CA_ISSUER_URL: ISSUER,
    SERVICE_UPSTREAM_URL: upstream.url,
    SERVICE_EMBEDDED_PDP: 'true',
    SERVICE_WORKSPACE: orgId,
    SERVICE_ENFORCEMENT_MODE: 'EM-GUARD',
    // Far beyond every deadline below: within the test, A and B can only learn of a change by NOTIFY.
    SERVICE_BUNDLE_POLL_INTERVAL: '5m',
    SERVICE_BUNDLE_STALENESS_THRESHOLD: '10m',
  }
  const [a, b] = await Promise.all([startService(teardown, shared, SLOW_START), startService(teardown, shared, SLOW_START)]) as [RunningService, RunningService]

  // C pulls from A with a key of its own, so its bundle polling has its own rate-limit bucket.
  const registryKey = await adminCall(a.adminUrl, operatorKey, 'POST', '/v1/keys', { name: 'gateway-c' })
  if (registryKey.status !== 201) throw new Error(`registry key creation failed: ${registryKey.status}`)
  const c = await startService(teardown, {
    SERVICE_REGISTRY_URL: a.adminUrl,
    SERVICE_REGISTRY_KEY: registryKey.body.data.key as string,
    SERVICE_UPSTREAM_URL: upstream.url,
    CA_ISSUER_URL: ISSUER,
    SERVICE_EMBEDDED_PDP: 'true',
    SERVICE_WORKSPACE: orgId,
    SERVICE_ENFORCEMENT_MODE: 'EM-GUARD',
    SERVICE_BUNDLE_POLL_INTERVAL: '500ms',
  }, { command: 'gateway', ...SLOW_START })

  const gateways = [
    { name: 'A', url: a.gatewayUrl as string },
    { name: 'B', url: b.gatewayUrl as string },
    { name: 'C', url: c.gatewayUrl as string },
  ]

  t.test('rate limits: one counter in Redis for both instances', async (t) => {
    // A fresh key: its bucket holds only the requests below.
    const created = await adminCall(a.adminUrl, operatorKey, 'POST', '/v1/keys', { name: 'rate-limit-probe', role: 'member' })
    t.equal(created.status, 201, 'probe key created')
    const key = created.body.data.key as string
    const statuses = new Map<number, number>()
    let remainingOk = 0
    for (let i = 0; i < RATE_LIMIT; i++) {
      const instance = i % 2 === 0 ? a : b
      const res = await send(`${instance.adminUrl}/v1/agents?limit=1`, { headers: { authorization: `Bearer ${key}` } })
      statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1)
      // The remaining count falls by one per request whichever instance answers: one shared counter.
      if (res.headers.get('x-ratelimit-remaining') === String(RATE_LIMIT - 1 - i)) remainingOk++
    }
    t.same(Object.fromEntries(statuses), { 200: RATE_LIMIT }, `the first ${RATE_LIMIT} requests, alternating A and B, pass`)
    t.equal(remainingOk, RATE_LIMIT, 'every answer counts down the same X-RateLimit-Remaining')
    for (const [name, instance] of [['B', b], ['A', a]] as const) {
      const over = await send(`${instance.adminUrl}/v1/agents?limit=1`, { headers: { authorization: `Bearer ${key}` } })
      t.equal(over.status, 429, `over the limit: ${name} refuses`)
      t.equal(over.json?.error, 'rate_limit_exceeded', `${name}: rate_limit_exceeded`)
      t.equal(over.headers.get('x-ratelimit-limit'), String(RATE_LIMIT), `${name}: X-RateLimit-Limit`)
      t.equal(over.headers.get('x-ratelimit-remaining'), '0', `${name}: X-RateLimit-Remaining 0`)
      const reset = Number(over.headers.get('x-ratelimit-reset'))
      const now = Math.floor(Date.now() / 1000)
      t.ok(reset >= now && reset <= now + 61, `${name}: X-RateLimit-Reset is a Unix time within the window`)
      t.ok(Number(over.headers.get('retry-after')) > 0, `${name}: Retry-After`)
    }
    // Another key is not affected by the exhausted one.
    t.equal((await adminCall(b.adminUrl, operatorKey, 'GET', '/v1/agents?limit=1')).status, 200, 'the operator key still passes')
  })

  t.test('a badge from A works on every gateway; its revocation on B reaches them all', async (t) => {
    const agent = await agentWithBadge(a.adminUrl, operatorKey, 'scale-revoked')
    for (const gw of gateways) {
      const res = await viaGateway(gw.url, agent.token, `/so/rev-before-${gw.name}`)
      t.equal(res.status, 200, `gateway ${gw.name} accepts the badge A signed`)
    }
    t.ok(upstream.requests.some((r) => r.url === '/so/rev-before-C' && r.headers['x-service-subject'] === agent.did), 'C forwarded it with the verified subject')

    const revoked = await adminCall(b.adminUrl, operatorKey, 'POST', `/v1/badges/${agent.jti}/revoke`, { reason: 'scale-out e2e' })
    t.equal(revoked.status, 200, 'revoked on B')
    const results = await Promise.all(gateways.map((gw) =>
      pollGateway(gw.url, agent.token, `/so/rev-after-${gw.name}`, (r) => r.status === 401)))
    gateways.forEach((gw, i) => {
      const { answer, ms } = results[i] as { answer: Answer; ms: number }
      t.equal(answer.status, 401, `gateway ${gw.name} refuses the revoked badge (after ${ms} ms)`)
      t.equal(answer.json?.error, 'BADGE_REVOKED', `gateway ${gw.name}: BADGE_REVOKED`)
    })
  })

  t.test('a policy approved on A reaches every embedded PDP; a newer one approved on B lifts it', async (t) => {
    const [denied, control] = await Promise.all([
      agentWithBadge(a.adminUrl, operatorKey, 'scale-denied'),
      agentWithBadge(b.adminUrl, operatorKey, 'scale-control'),
    ])
    for (const gw of gateways) {
      t.equal((await viaGateway(gw.url, denied.token, '/so/pol-before')).status, 200, `gateway ${gw.name}: allowed before the policy`)
    }
    const approve = async (instance: RunningService, yaml: string): Promise<void> => {
      const proposed = await adminCall(instance.adminUrl, operatorKey, 'POST', `/v1/orgs/${orgId}/policy/org`, { yaml_content: yaml })
      t.equal(proposed.status, 201, 'proposed')
      const approved = await adminCall(instance.adminUrl, operatorKey, 'POST', `/v1/orgs/${orgId}/policy/proposals/${proposed.body.id}/approve`)
      t.equal(approved.status, 200, 'approved')
    }

    await approve(a, `version: "1"\ndenied_dids: ["${denied.did}"]\n`)
    const deniedResults = await Promise.all(gateways.map((gw) =>
      pollGateway(gw.url, denied.token, `/so/pol-deny-${gw.name}`, (r) => r.status === 403)))
    gateways.forEach((gw, i) => {
      const { answer, ms } = deniedResults[i] as { answer: Answer; ms: number }
      t.equal(answer.status, 403, `gateway ${gw.name} denies the listed agent (after ${ms} ms)`)
      t.equal(answer.json?.error, 'POLICY_DENIED', `gateway ${gw.name}: POLICY_DENIED`)
    })
    for (const gw of gateways) {
      t.equal((await viaGateway(gw.url, control.token, '/so/pol-control')).status, 200, `gateway ${gw.name}: another agent still passes`)
    }

    await approve(b, 'version: "1"\ndenied_dids: []\n')
    const liftedResults = await Promise.all(gateways.map((gw) =>
      pollGateway(gw.url, denied.token, `/so/pol-lifted-${gw.name}`, (r) => r.status === 200)))
    gateways.forEach((gw, i) => {
      const { answer, ms } = liftedResults[i] as { answer: Answer; ms: number }
      t.equal(answer.status, 200, `gateway ${gw.name} lets the agent through again (after ${ms} ms)`)
    })
  })

  t.test('a PoP challenge from A redeems exactly once across A and B', async (t) => {
    const key = generateAgentKey()
    const created = await adminCall(a.adminUrl, operatorKey, 'POST', '/v1/agents', { name: 'scale-pop', did: key.did })
    t.equal(created.status, 201, 'agent registered with its did:key')
    const challenge = await requestPopChallenge({ registryUrl: a.adminUrl, apiKey: operatorKey, did: key.did })
    const proof = buildPopProof({ challenge, did: key.did, privateKey: key.privateKey, kid: key.kid })
    const body = JSON.stringify({ challenge_id: challenge.challenge_id, proof_jws: proof })
    const answers = await Promise.all(Array.from({ length: 10 }, (_, i) =>
      send(`${(i % 2 === 0 ? a : b).adminUrl}/v1/agents/${encodeURIComponent(key.did)}/badge/pop`, {
        method: 'POST', headers: { 'content-type': 'application/json' }, body,
      })))
    const ok = answers.filter((r) => r.status === 200)
    const used = answers.filter((r) => r.status === 403 && r.json?.error === 'challenge_used')
    t.equal(ok.length, 1, 'exactly one redemption succeeds')
    t.equal(used.length, 9, 'the nine others are refused with 403 challenge_used')
    t.same(answers.filter((r) => !ok.includes(r) && !used.includes(r)).map((r) => ({ status: r.status, error: r.json?.error })), [], 'no other answer')
    t.equal(ok[0]?.json?.data?.subject, key.did, 'the badge names the proven DID')
    t.equal(ok[0]?.json?.data?.ial, '1', 'an IAL-1 badge')
  })

  t.test('a proposal is approved exactly once across A and B', async (t) => {
    const proposed = await adminCall(b.adminUrl, operatorKey, 'POST', `/v1/orgs/${orgId}/policy/org`, { yaml_content: '# approval race\nversion: "1"\ndenied_dids: []\n' })
    t.equal(proposed.status, 201, 'proposed on B')
    const id = proposed.body.id as string
    const answers = await Promise.all(Array.from({ length: 8 }, (_, i) =>
      adminCall((i % 2 === 0 ? a : b).adminUrl, operatorKey, 'POST', `/v1/orgs/${orgId}/policy/proposals/${id}/approve`)))
    const ok = answers.filter((r) => r.status === 200)
    t.equal(ok.length, 1, 'exactly one approval succeeds')
    t.same(answers.filter((r) => r.status !== 200).map((r) => [r.status, r.body?.error]), Array(7).fill([400, 'proposal_not_pending']), 'the seven others: 400 proposal_not_pending')
    const history = await adminCall(a.adminUrl, operatorKey, 'GET', `/v1/orgs/${orgId}/policy/org/history`)
    t.equal(history.status, 200, 'history')
    const active = (history.body as { id: string; state: string }[]).filter((d) => d.state === 'active')
    t.same(active.map((d) => d.id), [id], 'exactly one active org document: the approved proposal')
    t.equal((history.body as unknown[]).length, 3, 'the two earlier documents superseded, nothing else added')
  })
}
