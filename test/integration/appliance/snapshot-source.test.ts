/**
 * The appliance's gateway snapshot (src/appliance/snapshot-source.ts) with a real admin plane on one
 * database and one bundle cache, as main.ts wires them: the gateway's bundle and `/v1/bundles` are the
 * same build, a policy NOTIFY is built once for both, and a workspace that names no organization is
 * reported for `/readyz` instead of being served as an empty (allow-everything) bundle.
 */
import { randomUUID } from 'node:crypto'
import { Writable } from 'node:stream'
import { isDeepStrictEqual } from 'node:util'
import t, { type Test } from 'tap'
import { createApplianceSnapshot } from '../../../src/appliance/snapshot-source.js'
import { buildBundle, canonicalJson, loadPolicyModule, POLICY_MODULE_PATH, type BuiltBundle } from '../../../src/bundles/builder.js'
import { BundleCache } from '../../../src/bundles/cache.js'
import type { Config } from '../../../src/config/index.js'
import { SnapshotHolder } from '../../../src/gateway/snapshot/snapshot.js'
import { createLogger } from '../../../src/telemetry/logger.js'
import { createOrg, startTestAdmin } from '../../helpers/admin.js'
import { BACKEND, createTestDatabase } from '../../helpers/database.js'
import { sleep } from '../../helpers/expect.js'
import { waitFor } from '../../helpers/hostile-http.js'

t.setTimeout(120_000)
const HOUR = 3_600_000
const database = await createTestDatabase(t)
const policyModule = loadPolicyModule()
const builds: string[] = []
const bundles = new BundleCache(
  { db: database.db, registryDidHost: 'registry.test%3A8080', policyModule, pollIntervalMs: HOUR },
  {
    build: (ctx, org) => {
      builds.push(org)
      return buildBundle(ctx, org)
    },
  },
)
// An hour's poll interval: any change seen within the test came through NOTIFY.
const admin = await startTestAdmin(t, { SERVICE_BUNDLE_POLL_INTERVAL: '1h' }, { database, bundles })
const logLines: string[] = []
const logger = createLogger('info', new Writable({
  write(chunk, _encoding, callback) {
    logLines.push(String(chunk))
    callback()
  },
}))

function gatewayConfig(workspace: string): Config {
  const gateway = { ...admin.config.gateway, enabled: true, embeddedPdp: true, workspace }
  return { ...admin.config, gateway }
}

async function startSnapshot(t: Test, workspace: string): Promise<{ holder: SnapshotHolder; problem: () => string | null }> {
  const snapshot = createApplianceSnapshot({ config: gatewayConfig(workspace), db: database.db, keyRing: admin.keyRing, bundles, logger })
  const holder = new SnapshotHolder()
  t.teardown(() => snapshot.source.close())
  await snapshot.source.start(holder)
  return { holder, problem: () => snapshot.bundleProblem()?.code ?? null }
}

async function bundleOverHttp(key: string, orgId: string): Promise<{ etag: string | null; body: { revision: string; data: unknown } }> {
  const res = await fetch(`${admin.url}/v1/bundles/${orgId}`, { headers: { 'x-service-registry-key': key } })
  if (res.status !== 200) throw new Error(`bundle: ${res.status}`)
  return { etag: res.headers.get('etag'), body: await res.json() as { revision: string; data: unknown } }
}

t.test(`a built bundle is data, and its JSON form carries exactly that data (${BACKEND})`, async (t) => {
  const { orgId, key } = await createOrg(admin, 'appliance-built')
  await admin.request('POST', '/v1/agents', { key, body: { name: 'built-agent', domain: 'agent.example.com' } })
  const built: BuiltBundle = await buildBundle({ db: database.db, registryDidHost: admin.config.registryDidHost, policyModule }, orgId)
  t.ok(Object.isFrozen(built.data) && Object.isFrozen(built.data.agents), 'the data is frozen')
  const json = built.json()
  t.equal(json, canonicalJson({ modules: { [POLICY_MODULE_PATH]: policyModule }, data: built.data, revision: built.revision }), 'the canonical JSON form')
  t.ok(isDeepStrictEqual((JSON.parse(json) as { data: unknown }).data, built.data), 'parsing the JSON form gives the data back, strictly')
  t.equal(built.json(), json, 'the JSON form is made once')
  t.equal(built.tarball(), built.tarball(), 'the tarball is made once')
})

t.test(`the gateway's bundle and /v1/bundles are one build, and one NOTIFY is one build (${BACKEND})`, async (t) => {
  const { orgId, key } = await createOrg(admin, 'appliance-shared')
  await admin.request('POST', '/v1/agents', { key, body: { name: 'shared-agent', domain: 'agent.example.com' } })
  builds.length = 0
  const s = await startSnapshot(t, orgId)
  const first = s.holder.current.bundle!
  t.ok(first, 'the gateway has a bundle')
  t.same(builds, [orgId], 'built once, at start')
  const served = await bundleOverHttp(key, orgId)
  t.equal(served.etag, `"${first.revision}"`, '/v1/bundles serves the revision the gateway holds')
  t.ok(isDeepStrictEqual(served.body.data, first.data), 'and the same data')
  t.same(builds, [orgId], 'without building again')
  t.equal((await bundles.get(orgId)).data, first.data, 'the gateway holds the cached bundle\'s own data object')

  const proposal = await admin.request('POST', `/v1/orgs/${orgId}/policy/org`, { key, body: { yaml_content: 'version: "1"\nmin_trust_level: DV\n' } })
  const approved = await admin.request('POST', `/v1/orgs/${orgId}/policy/proposals/${proposal.body.id}/approve`, { key })
  t.equal(approved.status, 200)
  t.ok(await waitFor(() => s.holder.current.bundle!.revision !== first.revision, 5000), 'the gateway rebuilt on the notice')
  // A follow-up rebuild the source scheduled while the first ran may still be under way.
  await sleep(300)
  const rebuilt = s.holder.current.bundle!
  const afterNotice = builds.length
  t.ok(afterNotice >= 2, 'built again for the approval')
  const again = await bundleOverHttp(key, orgId)
  t.equal(again.etag, `"${rebuilt.revision}"`, '/v1/bundles serves the gateway\'s new revision')
  t.equal(builds.length, afterNotice, 'from the gateway\'s build: the admin plane did not build it a second time')
  t.equal((rebuilt.data.config as { min_trust_level?: string }).min_trust_level, 'DV')
})

t.test(`a workspace that names no organization is reported, never served as an empty bundle (${BACKEND})`, async (t) => {
  const s = await startSnapshot(t, randomUUID())
  t.equal(s.holder.current.bundle, null, 'no bundle')
  t.equal(s.problem(), 'workspace_not_found', '/readyz gets the reason')
  t.ok(logLines.some((line) => line.includes('"reason":"workspace_not_found"')), 'logged once with the reason')
})
