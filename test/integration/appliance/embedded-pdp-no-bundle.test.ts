/**
 * The appliance with the embedded PDP on a workspace whose bundle cannot be built starts anyway, but
 * closed: /readyz 503 naming the cause, EM-STRICT refusing with 503 PDP_UNAVAILABLE, one error line per
 * cause (not one per retry). When the bundle becomes buildable the gateway recovers without a restart.
 * Both causes are walked through in turn: the organization does not exist, then it exists but a stored
 * policy no longer validates, then the policy is repaired.
 */
import t from 'tap'
import { randomUUID } from 'node:crypto'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { Writable } from 'node:stream'
import { generateApiKeySecret } from '../../../src/core/api-key.js'
import { loadConfig } from '../../../src/config/index.js'
import { startAppliance } from '../../../src/main.js'
import { createLogger } from '../../../src/telemetry/logger.js'
import { agentWithBadge } from '../../helpers/appliance.js'
import { BACKEND, createTestDatabase } from '../../helpers/database.js'
import { startUpstream } from '../../helpers/upstream-server.js'

const NO_BUNDLE = 'embedded PDP has no bundle; the gateway treats the PDP as unavailable until one is built'

t.test(`unknown workspace, then an unbuildable bundle, then recovery without a restart (${BACKEND})`, async (t) => {
  const database = await createTestDatabase(t)
  const upstream = await startUpstream(t)
  const key = generateApiKeySecret()
  const workspace = randomUUID()
  const config = loadConfig({
    DATABASE_URL: database.url ?? 'memory://',
    SERVICE_DATA_DIR: mkdtempSync(path.join(tmpdir(), 'svc-nobundle-')),
    PORT: '0',
    SERVICE_GATEWAY_PORT: '0',
    SERVICE_HOST: '127.0.0.1',
    CA_ISSUER_URL: 'http://registry.test',
    SERVICE_BOOTSTRAP_API_KEY: key,
    SERVICE_UPSTREAM_URL: upstream.url,
    SERVICE_EMBEDDED_PDP: 'true',
    SERVICE_WORKSPACE: workspace,
    SERVICE_ENFORCEMENT_MODE: 'EM-STRICT',
    SERVICE_BUNDLE_POLL_INTERVAL: '200ms',
  })
  const text: string[] = []
  const sink = new Writable({ write(chunk, _encoding, done) { text.push(String(chunk)); done() } })
  const appliance = await startAppliance(config, { logger: createLogger('info', sink) })
  t.teardown(() => appliance.close())
  const lines = (): Record<string, any>[] => text.join('').split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l))
  const agent = await agentWithBadge(appliance.adminUrl, key, 'no-bundle-agent')

  const readyz = async (): Promise<{ status: number; body: any }> => {
    const res = await fetch(`${appliance.adminUrl}/readyz`)
    return { status: res.status, body: await res.json() }
  }
  const call = async (): Promise<{ status: number; body: any }> => {
    const res = await fetch(`${appliance.gatewayUrl}/resource`, { headers: { authorization: `Bearer ${agent.token}` } })
    const body = await res.text()
    return { status: res.status, body: body.startsWith('{') ? JSON.parse(body) : body }
  }
  const until = async (ms: number, check: () => Promise<boolean>): Promise<boolean> => {
    const deadline = Date.now() + ms
    while (Date.now() < deadline) {
      if (await check()) return true
      await new Promise((r) => setTimeout(r, 50))
    }
    return check()
  }

  // 1. The organization does not exist.
  let ready = await readyz()
  t.equal(ready.status, 503, 'not ready')
  t.equal(ready.body.reasons.gateway.code, 'workspace_not_found')
  let res = await call()
  t.equal(res.status, 503, 'EM-STRICT refuses')
  t.equal(res.body.error, 'PDP_UNAVAILABLE')
  t.equal(upstream.requests.length, 0, 'nothing reached the upstream')
  await new Promise((r) => setTimeout(r, 1000))
  const errors = lines().filter((l) => l.msg === NO_BUNDLE)
  t.equal(errors.length, 1, 'one error line, although the build was retried every 200 ms')
  t.match(errors[0], { level: 50, reason: 'workspace_not_found', workspace })

  // 2. The organization appears (a restore, a sync) with a stored policy that no longer validates.
  await appliance.db.transaction(async (tx) => {
    await tx.query('INSERT INTO organizations (id, name) VALUES ($1, $2)', [workspace, 'late-org'])
    await tx.query(
      `INSERT INTO policy_documents (id, org_id, scope_type, scope_id, state, version, yaml_content, schema_version, content_hash, created_by_type)
       VALUES ($1, $2, 'org', $2, 'active', 1, $3, '1', 'x', 'api_key')`,
      [randomUUID(), workspace, 'version: "1"\nno_such_key: true\n'],
    )
  })
  t.ok(await until(5000, async () => (await readyz()).body.reasons?.gateway?.code === 'bundle_build_failed'), 'the reason turns to bundle_build_failed')
  t.equal((await readyz()).status, 503, 'still not ready')
  res = await call()
  t.equal(res.status, 503, 'still refused')
  const buildFailed = lines().filter((l) => l.msg === NO_BUNDLE && l.reason === 'bundle_build_failed')
  t.equal(buildFailed.length, 1, 'the new cause is logged once')
  t.notMatch(JSON.stringify((await readyz()).body), /no longer validates|policy_documents/, '/readyz does not repeat internal detail')

  // 3. The policy is repaired: the next rebuild loads a bundle.
  await appliance.db.query('UPDATE policy_documents SET yaml_content = $1 WHERE org_id = $2', ['version: "1"\n', workspace])
  t.ok(await until(5000, async () => (await readyz()).status === 200), 'ready once a bundle is built')
  ready = await readyz()
  t.same(ready.body.reasons, {}, 'no reasons left')
  res = await call()
  t.equal(res.status, 200, 'EM-STRICT forwards now that the PDP decides')
  t.ok(lines().some((l) => l.msg === 'embedded PDP bundle built; the PDP is available'), 'the recovery is logged')
})
