/**
 * A gateway-only process (`agent-trust gateway`) against a separate appliance (`agent-trust serve`, no
 * upstream): it pulls JWKS, revocations and the workspace bundle from the registry, serves its
 * operations listener, follows revocations and policy changes by polling, keeps serving on its last
 * snapshot when the registry goes away, and refuses to start without a first snapshot, never
 * printing the registry key. It trusts the issuer the registry names, however the registry is reached.
 */
import t from 'tap'
import { spawn } from 'node:child_process'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { generateApiKeySecret } from '../../src/core/api-key.js'
import { chainHeaders, generateAgentKey, mintRootEnvelope, requestPopBadge } from '../../src/sdk/index.js'
import { adminCall, agentWithBadge, CLI, startService, closedPort } from '../helpers/appliance.js'
import { BACKEND, createTestDatabase } from '../helpers/database.js'
import { startUpstream } from '../helpers/upstream-server.js'

// Child processes on a shared 2-core machine: the whole file gets more than tap's default 30 s.
t.setTimeout(180_000)

const ISSUER = 'http://registry.test'

async function pollUntil<T>(deadlineMs: number, fn: () => Promise<T | undefined> | T | undefined): Promise<T | undefined> {
  const deadline = Date.now() + deadlineMs
  for (;;) {
    const value = await fn()
    if (value !== undefined) return value
    if (Date.now() > deadline) return undefined
    await new Promise((r) => setTimeout(r, 50))
  }
}

async function call(base: string, token: string, urlPath: string): Promise<{ status: number; json: any }> {
  const res = await fetch(`${base}${urlPath}`, { headers: { authorization: `Bearer ${token}` } })
  const text = await res.text()
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch {
    json = undefined
  }
  return { status: res.status, json }
}


/**
 * Runs `agent-trust gateway` expecting it to fail at start-up; returns its exit code and all its output.
 * A process that comes up instead (`gateway listening`) is killed at once and reported as `listened`.
 */
function runFailingGateway(env: Record<string, string>): Promise<{ code: number | null; output: string; listened: boolean; timedOut: boolean }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CLI, 'gateway'], {
      env: {
        PATH: process.env.PATH, HOME: process.env.HOME, PORT: '0', SERVICE_GATEWAY_PORT: '0', SERVICE_HOST: '127.0.0.1',
        SERVICE_LOG_LEVEL: 'info', SERVICE_DATA_DIR: mkdtempSync(path.join(tmpdir(), 'svc-e2e-gw-')), CA_ISSUER_URL: ISSUER, ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let output = ''
    let listened = false
    const onData = (c: Buffer): void => {
      output += String(c)
      if (!listened && output.includes('"msg":"gateway listening"')) {
        listened = true
        child.kill('SIGKILL')
      }
    }
    child.stdout.on('data', onData)
    child.stderr.on('data', onData)
    let timedOut = false
    const timer = setTimeout(() => {
      timedOut = true
      child.kill('SIGKILL')
    }, 30_000)
    child.on('exit', (code) => {
      clearTimeout(timer)
      resolve({ code, output, listened, timedOut })
    })
  })
}

// The appliance on a database that is not a throw-away in-memory one: a PostgreSQL schema, or the
// embedded database on disk (DATABASE_URL unset) when SERVICE_TEST_DB=pglite.
const databaseEnv: Record<string, string> = BACKEND === 'postgres'
  ? { DATABASE_URL: (await createTestDatabase(t, { migrate: false })).url as string }
  : { DATABASE_URL: undefined as unknown as string }
const appliance = await startService(t, { ...databaseEnv, CA_ISSUER_URL: ISSUER })
const org = await adminCall(appliance.adminUrl, appliance.operatorKey, 'POST', '/v1/orgs', { name: 'gateway-only-org' })
if (org.status !== 201) throw new Error(`org creation failed: ${org.status}`)
const orgId = org.body.data.org.id as string
const orgKey = org.body.data.apiKey.key as string
const [agentA, agentB, agentR] = await Promise.all(['gw-only-a', 'gw-only-b', 'gw-only-r'].map((name) => agentWithBadge(appliance.adminUrl, orgKey, name))) as
  [Awaited<ReturnType<typeof agentWithBadge>>, Awaited<ReturnType<typeof agentWithBadge>>, Awaited<ReturnType<typeof agentWithBadge>>]

const upstream = await startUpstream(t)
const gateway = await startService(t, {
  SERVICE_REGISTRY_URL: appliance.adminUrl,
  SERVICE_REGISTRY_KEY: orgKey,
  SERVICE_UPSTREAM_URL: upstream.url,
  CA_ISSUER_URL: ISSUER,
  SERVICE_EMBEDDED_PDP: 'true',
  SERVICE_WORKSPACE: orgId,
  SERVICE_ENFORCEMENT_MODE: 'EM-GUARD',
  SERVICE_BUNDLE_POLL_INTERVAL: '500ms',
}, { command: 'gateway' })
const gw = gateway.gatewayUrl as string

t.test('a valid badge is forwarded with the verified identity', async (t) => {
  const res = await call(gw, agentB.token, '/only/hello')
  t.equal(res.status, 200)
  const seen = upstream.requests.find((r) => r.url === '/only/hello')
  t.equal(seen?.headers['x-service-subject'], agentB.did, 'X-Service-Subject')
  t.equal(seen?.headers['x-service-issuer'], ISSUER, 'X-Service-Issuer')
  t.equal(seen?.headers['x-service-badge-jti'], agentB.jti, 'X-Service-Badge-JTI')
  const bad = await call(gw, 'not-a-badge', '/only/bad')
  t.equal(bad.status, 401)
  t.equal(bad.json?.error, 'BADGE_MALFORMED')
})

t.test('the operations listener serves /healthz, /readyz and /metrics', async (t) => {
  const ops = gateway.adminUrl
  t.not(ops, gw, 'a listener of its own')
  t.equal((await fetch(`${ops}/healthz`)).status, 200, '/healthz')
  const ready = await fetch(`${ops}/readyz`)
  t.equal(ready.status, 200, '/readyz')
  t.match(await ready.json(), { status: 'ready', checks: { gateway: true } })
  const metrics = await (await fetch(`${ops}/metrics`)).text()
  t.match(metrics, /^service_gateway_requests_total\{[^}]*\} [1-9]/m, '/metrics counts the requests served')
})

t.test('a revocation on the appliance reaches the gateway', async (t) => {
  t.equal((await call(gw, agentR.token, '/only/rev-before')).status, 200, 'verified and cached first')
  const revoked = await adminCall(appliance.adminUrl, orgKey, 'POST', `/v1/badges/${agentR.jti}/revoke`, { reason: 'e2e' })
  t.equal(revoked.status, 200)
  const refused = await pollUntil(3000, async () => {
    const res = await call(gw, agentR.token, '/only/rev-after')
    return res.status === 401 ? res : undefined
  })
  t.ok(refused !== undefined, 'refused within ~3 s')
  t.equal(refused?.json?.error, 'BADGE_REVOKED')
})

t.test('an approved deny policy reaches the embedded PDP within a few poll intervals', async (t) => {
  t.equal((await call(gw, agentA.token, '/only/policy-before')).status, 200, 'allowed before the policy')
  const proposed = await adminCall(appliance.adminUrl, orgKey, 'POST', `/v1/orgs/${orgId}/policy/org`, { yaml_content: `version: "1"\ndenied_dids: ["${agentA.did}"]\n` })
  t.equal(proposed.status, 201, 'proposed')
  const approved = await adminCall(appliance.adminUrl, orgKey, 'POST', `/v1/orgs/${orgId}/policy/proposals/${proposed.body.id}/approve`)
  t.equal(approved.status, 200, 'approved')
  const denied = await pollUntil(5000, async () => {
    const res = await call(gw, agentA.token, '/only/policy-after')
    return res.status === 403 ? res : undefined
  })
  t.ok(denied !== undefined, 'agent A denied within 5 s (10 poll intervals)')
  t.equal(denied?.json?.error, 'POLICY_DENIED')
  t.equal((await call(gw, agentB.token, '/only/policy-after')).status, 200, 'agent B still passes')
})

t.test('start-up failures: wrong registry key, unreachable registry', async (t) => {
  const wrongKey = generateApiKeySecret()
  const embedded = { SERVICE_EMBEDDED_PDP: 'true', SERVICE_WORKSPACE: orgId, SERVICE_ENFORCEMENT_MODE: 'EM-GUARD' }
  const wrong = await runFailingGateway({
    SERVICE_REGISTRY_URL: appliance.adminUrl, SERVICE_REGISTRY_KEY: wrongKey, SERVICE_UPSTREAM_URL: upstream.url, ...embedded,
  })
  t.notOk(wrong.listened || wrong.timedOut, 'wrong key (embedded PDP): never comes up')
  t.ok(wrong.code !== 0 && wrong.code !== null, `wrong key (embedded PDP): non-zero exit (${String(wrong.code)})`)
  t.match(wrong.output, /401|unauthori[sz]ed/i, 'wrong key (embedded PDP): says the registry refused the key')
  t.notMatch(wrong.output, wrongKey, 'wrong key (embedded PDP): the key is not printed')

  // Badge-only: JWKS and revocations are public endpoints; the start-up key check must refuse it anyway.
  const badgeOnly = await runFailingGateway({
    SERVICE_REGISTRY_URL: appliance.adminUrl, SERVICE_REGISTRY_KEY: wrongKey, SERVICE_UPSTREAM_URL: upstream.url,
  })
  t.notOk(badgeOnly.listened || badgeOnly.timedOut, 'wrong key (badge-only): never comes up')
  t.ok(badgeOnly.code !== 0 && badgeOnly.code !== null, `wrong key (badge-only): non-zero exit (${String(badgeOnly.code)})`)
  t.match(badgeOnly.output, /registry key: GET \/v1\/agents answered 401/, 'the message says the registry refused the key')
  t.notMatch(badgeOnly.output, wrongKey, 'wrong key (badge-only): the key is not printed')

  const port = await closedPort()
  const unreachable = await runFailingGateway({
    SERVICE_REGISTRY_URL: `http://127.0.0.1:${port}`, SERVICE_REGISTRY_KEY: orgKey, SERVICE_UPSTREAM_URL: upstream.url, ...embedded,
  })
  t.notOk(unreachable.listened || unreachable.timedOut, 'unreachable: never comes up')
  t.ok(unreachable.code !== 0 && unreachable.code !== null, `unreachable: non-zero exit (${String(unreachable.code)})`)
  t.match(unreachable.output, new RegExp(`127\\.0\\.0\\.1:${port}`), 'unreachable: names the registry')
  t.match(unreachable.output, /ECONNREFUSED|refused|unreachable|failed/i, 'unreachable: says what went wrong')
  t.notMatch(unreachable.output, orgKey, 'unreachable: the key is not printed')
  t.notMatch(unreachable.output, /\n\s+at /, 'unreachable: no stack trace')
})

t.test('a registry reached as 127.0.0.1 that signs as localhost: the gateway trusts the issuer the registry names', async (t) => {
  // CA_ISSUER_URL unset on both sides: badges carry the default issuer http://localhost:<PORT>.
  const port = await closedPort()
  const registry = await startService(t, { PORT: String(port), CA_ISSUER_URL: '' })
  t.equal(registry.adminUrl, `http://127.0.0.1:${port}`, 'the registry is reached as 127.0.0.1')
  const issuer = `http://localhost:${port}`
  const spelled = await startService(t, {
    SERVICE_REGISTRY_URL: registry.adminUrl, SERVICE_REGISTRY_KEY: registry.operatorKey, SERVICE_UPSTREAM_URL: upstream.url,
    CA_ISSUER_URL: '', SERVICE_ENFORCEMENT_MODE: 'EM-GUARD',
  }, { command: 'gateway' })
  t.match(spelled.logLines().find((l) => l.msg === 'trusting the badge issuer the registry names'), { issuer }, 'the start-up log names the issuer')

  const caller = await agentWithBadge(registry.adminUrl, registry.operatorKey, 'spelling-caller')
  const res = await call(spelled.gatewayUrl as string, caller.token, '/spelling/ok')
  t.equal(res.status, 200, `a valid badge passes: ${JSON.stringify(res.json)}`)
  t.equal(upstream.requests.find((r) => r.url === '/spelling/ok')?.headers['x-service-issuer'], issuer, 'X-Service-Issuer is the badge issuer')

  // The registry's own did:web agents are localhost%3A<port> too: their keys come from the registry.
  const webKey = generateAgentKey()
  const created = await adminCall(registry.adminUrl, registry.operatorKey, 'POST', '/v1/agents', { name: 'spelling-issuer', domain: 'example.com', publicKeyJwk: webKey.publicJwk })
  const did = created.body.data.did as string
  t.equal(did, `did:web:localhost%3A${port}:agents:${created.body.data.id as string}`)
  const badge = await requestPopBadge({ registryUrl: registry.adminUrl, apiKey: registry.operatorKey, did, privateKey: webKey.privateKey, badgeTtl: 600 })
  const root = mintRootEnvelope({
    issuer: { did, privateKey: webKey.privateKey, kid: `${did}#key-1`, badgeJti: badge.jti },
    subject: { did: caller.did, badgeJti: caller.jti },
    capabilityClass: 'orders.read',
    depthRemaining: 0,
    ttlSeconds: 300,
  })
  const delegated = await fetch(`${spelled.gatewayUrl as string}/spelling/delegated`, {
    headers: { authorization: `Bearer ${caller.token}`, ...(chainHeaders([root.jws], { [did]: badge.token }) as unknown as Record<string, string>) },
  })
  t.equal(delegated.status, 200, `an envelope from the registry's did:web agent verifies: ${await delegated.text()}`)
  await spelled.stop()

  // A CA_ISSUER_URL that spells the registry the other way: no start, and the message names both.
  const pinned = await runFailingGateway({
    SERVICE_REGISTRY_URL: registry.adminUrl, SERVICE_REGISTRY_KEY: registry.operatorKey, SERVICE_UPSTREAM_URL: upstream.url,
    CA_ISSUER_URL: registry.adminUrl,
  })
  t.notOk(pinned.listened || pinned.timedOut, 'a disagreeing CA_ISSUER_URL: never comes up')
  t.ok(pinned.code !== 0 && pinned.code !== null, `non-zero exit (${String(pinned.code)})`)
  t.match(pinned.output, `"${issuer}"`, 'names the registry\'s spelling')
  t.match(pinned.output, `CA_ISSUER_URL is "${registry.adminUrl}"`, 'names the configured spelling')
  t.notMatch(pinned.output, registry.operatorKey, 'the key is not printed')
})

t.test('the registry goes away: the gateway keeps serving on its last snapshot', async (t) => {
  t.equal(await appliance.stop(), 0, 'the appliance stopped (SIGTERM, exit 0)')
  const failure = await pollUntil(5000, () =>
    gateway.logLines().find((l) => l.msg === 'registry sync failed; keeping the last good snapshot'))
  t.ok(failure !== undefined, 'the gateway logs the failed sync')
  t.equal((await call(gw, agentB.token, '/only/after-stop')).status, 200, 'a valid badge is still forwarded')
  const revoked = await call(gw, agentR.token, '/only/after-stop-revoked')
  t.equal(revoked.status, 401, 'the revoked badge is still refused')
  t.equal(revoked.json?.error, 'BADGE_REVOKED')
  t.equal((await call(gw, agentA.token, '/only/after-stop-denied')).status, 403, 'the denied agent is still denied')
  t.equal((await fetch(`${gateway.adminUrl}/healthz`)).status, 200, 'still healthy')
  t.notMatch(gateway.output(), orgKey, 'the registry key never appears in the gateway output')
  t.notOk([agentA, agentB, agentR].some((a) => gateway.output().includes(a.token)), 'nor any badge token')
  t.equal(await gateway.stop(), 0, 'the gateway stops with exit 0')
})
