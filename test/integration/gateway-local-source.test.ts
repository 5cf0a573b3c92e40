/**
 * The gateway's local snapshot source on a real database shared with a real admin plane, fed straight
 * from the database (key ring, listLiveRevokedJtis, buildBundle, db.listen) so that each part can be
 * counted or broken; test/integration/appliance-snapshot.test.ts covers the appliance's own wiring. Changes made through the admin API must reach the SnapshotHolder through NOTIFY, without
 * waiting for the back-up timer (set to a minute here, so only NOTIFY can deliver in time); a failing
 * rebuild keeps the last good bundle; close() stops everything.
 */
import t, { type Test } from 'tap'
import { generateKeyPairSync, type KeyObject } from 'node:crypto'
import { createOrg, startTestAdmin } from '../helpers/admin.js'
import { BACKEND, createTestDatabase } from '../helpers/database.js'
import { buildBundle, loadPolicyModule } from '../../src/bundles/builder.js'
import { listLiveRevokedJtis } from '../../src/db/repositories/badges.js'
import { POLICY_CHANNEL, REVOCATION_CHANNEL } from '../../src/core/notify-channels.js'
import { createLocalSource, type LocalSourceDeps } from '../../src/gateway/snapshot/local-source.js'
import { SnapshotHolder, type GatewayBundleData } from '../../src/gateway/snapshot/snapshot.js'

// Run directly with node, tap's default 30 s budget is too short for start-up on a busy machine.
t.setTimeout(120_000)
const database = await createTestDatabase(t)
const admin = await startTestAdmin(t, {}, { database })
const db = database.db
const policyModule = loadPolicyModule()
const MINUTE = 60_000

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))
/** Polls `condition` every 10 ms until it holds or `timeoutMs` passes; answers whether it held. */
async function waitFor(condition: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs
  while (!condition()) {
    if (Date.now() > deadline) return false
    await sleep(10)
  }
  return true
}

interface World {
  orgId: string
  key: string
  badges: { jti: string; token: string }[]
}

async function world(name: string, badgeCount = 2): Promise<World> {
  const { orgId, key } = await createOrg(admin, name)
  const agent = await admin.request('POST', '/v1/agents', { key, body: { name: 'local-agent', domain: 'agent.example.com' } })
  if (agent.status !== 201) throw new Error(agent.text)
  const badges: World['badges'] = []
  for (let i = 0; i < badgeCount; i++) {
    const issued = await admin.request('POST', `/v1/agents/${agent.body.data.id}/badge`, { key, body: { domain: 'agent.example.com' } })
    if (issued.status !== 200) throw new Error(issued.text)
    badges.push({ jti: issued.body.data.jti, token: issued.body.data.token })
  }
  return { orgId, key, badges }
}

async function revoke(w: World, jti: string): Promise<void> {
  const res = await admin.request('POST', `/v1/badges/${jti}/revoke`, { key: w.key, body: { reason: 'test' } })
  if (res.status !== 200) throw new Error(res.text)
}

async function approveOrgPolicy(w: World, yaml: string): Promise<void> {
  const base = `/v1/orgs/${w.orgId}/policy`
  const proposal = await admin.request('POST', `${base}/org`, { key: w.key, body: { yaml_content: yaml } })
  if (proposal.status !== 201) throw new Error(proposal.text)
  const approved = await admin.request('POST', `${base}/proposals/${proposal.body.id}/approve`, { key: w.key })
  if (approved.status !== 200) throw new Error(approved.text)
}

/** A bundle loader for `workspace`, straight from the builder. */
function bundleLoader(workspace: string): () => Promise<{ revision: string; data: GatewayBundleData }> {
  const ctx = { db, registryDidHost: admin.config.registryDidHost, policyModule }
  return async () => {
    const built = await buildBundle(ctx, workspace)
    return { revision: built.revision, data: built.data }
  }
}

interface Running {
  holder: SnapshotHolder
  errors: { what: string; error: unknown }[]
  counts: { revoked: number; bundle: number }
  close(): Promise<void>
}

/** A local source on the database (with counters on the loaders), started; closed in teardown. */
async function start(t: Test, workspace: string | null, over: Partial<LocalSourceDeps> = {}): Promise<Running> {
  const errors: Running['errors'] = []
  const counts = { revoked: 0, bundle: 0 }
  const loadBundle = over.loadBundle !== undefined ? over.loadBundle : workspace === null ? null : bundleLoader(workspace)
  const source = createLocalSource({
    issuer: admin.config.issuerUrl,
    keys: () => admin.keyRing.current.verificationKeys,
    loadRevoked: () => {
      counts.revoked++
      return listLiveRevokedJtis(db)
    },
    watchRevocations: (onRevoked, onResync) => db.listen(REVOCATION_CHANNEL, onRevoked, onResync),
    watchPolicies: (onChange) => db.listen(POLICY_CHANNEL, onChange),
    workspace,
    pollIntervalMs: MINUTE,
    onError: (what, error) => errors.push({ what, error }),
    ...over,
    loadBundle: loadBundle === null ? null : () => {
      counts.bundle++
      return loadBundle()
    },
  })
  const holder = new SnapshotHolder()
  t.teardown(() => source.close())
  await source.start(holder)
  return { holder, errors, counts, close: () => source.close() }
}

t.test(`first snapshot: keys, revoked jtis and the bundle (${BACKEND})`, async (t) => {
  const w = await world('local-first')
  await revoke(w, w.badges[0]!.jti)
  const before = Date.now()
  const s = await start(t, w.orgId)
  const after = Date.now()
  t.ok(s.holder.ready)
  const snap = s.holder.current
  t.equal(snap.version, 1, 'one swap')
  t.equal(snap.issuer, admin.config.issuerUrl)
  const ringKeys = admin.keyRing.current.verificationKeys
  t.equal(snap.keys, ringKeys, 'the key ring\'s verification keys')
  t.ok(ringKeys.size >= 1)
  t.equal(snap.keysVersion, [...ringKeys.keys()].sort().join(','), 'keysVersion names the kids')
  t.ok(snap.revoked.has(w.badges[0]!.jti), 'a badge revoked before start is in the set')
  t.notOk(snap.revoked.has(w.badges[1]!.jti), 'a live one is not')
  const expected = await buildBundle({ db, registryDidHost: admin.config.registryDidHost, policyModule }, w.orgId)
  t.ok(snap.bundle, 'a bundle was loaded')
  t.equal(snap.bundle!.revision, expected.revision, 'the revision buildBundle computes')
  t.same(snap.bundle!.data, (JSON.parse(expected.json()) as { data: unknown }).data, 'the same data document')
  t.ok(snap.bundle!.confirmedAt >= before && snap.bundle!.confirmedAt <= after, 'confirmed at load time')
  t.ok(Object.isFrozen(snap), 'the snapshot is immutable')
  t.same(s.errors, [])

  const badgeOnly = await start(t, null)
  t.equal(badgeOnly.holder.current.bundle, null, 'no embedded PDP: no bundle')
  t.equal(badgeOnly.counts.bundle, 0)
})

t.test(`a revocation through the admin API reaches the holder within 1 s via NOTIFY (${BACKEND})`, async (t) => {
  const w = await world('local-revoke')
  const s = await start(t, w.orgId)
  const first = s.holder.current
  const queries = s.counts.revoked
  const target = w.badges[1]!.jti
  t.notOk(first.revoked.has(target))
  await revoke(w, target)
  t.ok(await waitFor(() => s.holder.current.revoked.has(target), 1000), 'the revoked jti arrived within 1 s')
  t.equal(s.counts.revoked, queries, 'from the notification payload: no revocation query ran')
  const now = s.holder.current
  t.ok(now.version > first.version, 'a new snapshot was swapped in')
  t.notOk(first.revoked.has(target), 'the earlier snapshot was not mutated')
  t.equal(now.bundle, first.bundle, 'bundle untouched by a revocation')
  t.equal(now.keys, first.keys, 'keys untouched')
  // A duplicate notification for a jti already in the set swaps nothing.
  const version = s.holder.current.version
  await db.query('SELECT pg_notify($1, $2)', [REVOCATION_CHANNEL, target])
  await db.query('SELECT pg_notify($1, $2)', [REVOCATION_CHANNEL, ''])
  const marker = `marker-${Date.now()}`
  await db.query('SELECT pg_notify($1, $2)', [REVOCATION_CHANNEL, marker])
  t.ok(await waitFor(() => s.holder.current.revoked.has(marker), 2000), 'later notifications still arrive')
  t.equal(s.holder.current.version, version + 1, 'only the new jti swapped (duplicate and empty payloads ignored)')
  t.same(s.errors, [])
})

t.test(`an approved policy changes the bundle revision quickly (${BACKEND})`, async (t) => {
  const w = await world('local-policy', 0)
  const s = await start(t, w.orgId)
  const before = s.holder.current.bundle!
  const builds = s.counts.bundle
  await approveOrgPolicy(w, 'version: "1"\nmin_trust_level: DV\n')
  t.ok(await waitFor(() => s.holder.current.bundle!.revision !== before.revision, 3000), 'the revision changed without waiting for the 1 min timer')
  t.ok(s.counts.bundle > builds, 'rebuilt on the notification')
  const bundle = s.holder.current.bundle!
  t.equal((bundle.data.config as { min_trust_level?: string }).min_trust_level, 'DV', 'the approved org policy is in the data')
  t.ok(bundle.confirmedAt >= before.confirmedAt)

  // Notifications for another org do not rebuild this workspace's bundle; the org id compares
  // case-insensitively. Notifications on one connection arrive in order, so once a later revocation
  // marker is in the snapshot, the policy notification before it has been handled.
  const marker = async (): Promise<void> => {
    const jti = `marker-${Math.random()}`
    await db.query('SELECT pg_notify($1, $2)', [REVOCATION_CHANNEL, jti])
    if (!(await waitFor(() => s.holder.current.revoked.has(jti), 2000))) throw new Error('marker not delivered')
  }
  await marker()
  // A follow-up build scheduled while the last one ran may still start: give it time to.
  await sleep(300)
  const settled = s.counts.bundle
  await db.query('SELECT pg_notify($1, $2)', [POLICY_CHANNEL, '00000000-0000-4000-8000-000000000000'])
  await marker()
  t.equal(s.counts.bundle, settled, 'another org\'s notification: no rebuild')
  await db.query('SELECT pg_notify($1, $2)', [POLICY_CHANNEL, w.orgId.toUpperCase()])
  t.ok(await waitFor(() => s.counts.bundle > settled, 2000), 'this org\'s id in upper case: rebuilt')
  t.same(s.errors, [])
})

t.test(`a failing loadBundle keeps the last good bundle and reports onError (${BACKEND})`, async (t) => {
  const w = await world('local-failing', 0)
  const real = bundleLoader(w.orgId)
  let calls = 0
  const s = await start(t, w.orgId, {
    pollIntervalMs: 100,
    loadBundle: async () => {
      if (++calls > 1) throw new Error('bundle build failed (injected)')
      return real()
    },
  })
  const good = s.holder.current.bundle!
  t.ok(good, 'the first load succeeded')
  // The timer and a policy notification both ask for rebuilds; every one of them fails.
  await approveOrgPolicy(w, 'version: "1"\nmin_trust_level: DV\n')
  t.ok(await waitFor(() => s.errors.filter((e) => e.what === 'bundle').length >= 2, 5000), 'onError(bundle) called for the failures')
  t.match(String((s.errors.find((e) => e.what === 'bundle')!.error as Error).message), /injected/)
  t.equal(s.holder.current.bundle, good, 'the last good bundle stays, confirmedAt included')
  t.ok(s.errors.every((e) => e.what === 'bundle'), 'nothing else failed')
})

t.test(`key ring changes are picked up by the key check (${BACKEND})`, async (t) => {
  const w = await world('local-keys', 0)
  let keys: ReadonlyMap<string, KeyObject> = admin.keyRing.current.verificationKeys
  const s = await start(t, w.orgId, { keys: () => keys })
  const version = s.holder.current.keysVersion
  keys = new Map([...keys, ['zz-extra', generateKeyPairSync('ed25519').publicKey]])
  t.ok(await waitFor(() => s.holder.current.keysVersion !== version, 3000), 'a new key set within the 1 s check')
  t.equal(s.holder.current.keys, keys)
  t.ok(s.holder.current.keysVersion.endsWith(',zz-extra'))
})

t.test(`close() stops updates (${BACKEND})`, async (t) => {
  const w = await world('local-close')
  const s = await start(t, w.orgId, { pollIntervalMs: 50 })
  await s.close()
  const version = s.holder.current.version
  const counts = { ...s.counts }
  // A second listener is the control: once it has seen the notification, the closed source had its chance.
  const seen: string[] = []
  const unlisten = await db.listen(REVOCATION_CHANNEL, (jti) => seen.push(jti))
  t.teardown(() => unlisten())
  await revoke(w, w.badges[0]!.jti)
  await approveOrgPolicy(w, 'version: "1"\nmin_trust_level: DV\n')
  t.ok(await waitFor(() => seen.includes(w.badges[0]!.jti), 2000), 'the control listener got the revocation')
  await sleep(300) // several of the closed source's 50 ms poll intervals
  t.equal(s.holder.current.version, version, 'no swap after close')
  t.notOk(s.holder.current.revoked.has(w.badges[0]!.jti))
  t.same(s.counts, counts, 'no loads after close')
  t.ok(s.holder.ready, 'the holder keeps its last snapshot')
  await s.close() // idempotent
})
