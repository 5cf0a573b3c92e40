/**
 * What only the gateway's local snapshot source does, on a real database shared with a real admin plane
 * and fed straight from it (key ring, listLiveRevokedJtis, buildBundle, db.listen) so that each load can
 * be counted: a revocation notice is applied from its payload without a query, policy notices of other
 * organizations are ignored, a resubscription after a lost LISTEN connection re-reads what may have been
 * missed, and close() stops the timer and the subscriptions. The back-up timer is a minute, so only
 * NOTIFY can deliver in time. What every snapshot source does is in
 * test/helpers/contracts/snapshot-source.ts, run for the appliance's source.
 */
import t, { type Test } from 'tap'
import { startTestAdmin } from '../../../helpers/admin.js'
import { approveOrgPolicy, createWorld, revokeBadge, type SnapshotWorld } from '../../../helpers/contracts/snapshot-source.js'
import { BACKEND, createTestDatabase } from '../../../helpers/database.js'
import { sleep } from '../../../helpers/expect.js'
import { waitFor } from '../../../helpers/hostile-http.js'
import { buildBundle, loadPolicyModule } from '../../../../src/bundles/builder.js'
import { listLiveRevokedJtis } from '../../../../src/db/repositories/badges.js'
import { POLICY_CHANNEL, REVOCATION_CHANNEL } from '../../../../src/core/notify-channels.js'
import { createLocalSource, type LocalSourceDeps } from '../../../../src/gateway/snapshot/local-source.js'
import { SnapshotHolder, type GatewayBundleData } from '../../../../src/gateway/snapshot/snapshot.js'

// Run directly with node, tap's default 30 s budget is too short for start-up on a busy machine.
t.setTimeout(120_000)
const database = await createTestDatabase(t)
const admin = await startTestAdmin(t, {}, { database })
const db = database.db
const policyModule = loadPolicyModule()
const MINUTE = 60_000

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

const POLICY_V2 = 'version: "1"\nmin_trust_level: DV\n'

t.test(`a revocation notice is applied from its payload, without a query (${BACKEND})`, async (t) => {
  const w = await createWorld(admin, 'local-revoke')
  const s = await start(t, w.orgId)
  const first = s.holder.current
  const queries = s.counts.revoked
  const target = w.badges[1]!.jti
  await revokeBadge(admin, w, target)
  t.ok(await waitFor(() => s.holder.current.revoked.has(target), 1000), 'the revoked jti arrived within 1 s')
  t.equal(s.counts.revoked, queries, 'from the notification payload: no revocation query ran')
  t.equal(s.holder.current.bundle, first.bundle, 'bundle untouched by a revocation')
  t.equal(s.holder.current.keys, first.keys, 'keys untouched')
  // A duplicate notification for a jti already in the set changes nothing. Counted as changes of the revoked
  // set, not of the snapshot's version: another part may be swapped meanwhile (CI once saw version + 2 here).
  let revoked = s.holder.current.revoked
  let revokedChanges = 0
  s.holder.onSwap((snapshot) => {
    if (snapshot.revoked !== revoked) revokedChanges++
    revoked = snapshot.revoked
  })
  await db.query('SELECT pg_notify($1, $2)', [REVOCATION_CHANNEL, target])
  await db.query('SELECT pg_notify($1, $2)', [REVOCATION_CHANNEL, ''])
  const marker = `marker-${Date.now()}`
  await db.query('SELECT pg_notify($1, $2)', [REVOCATION_CHANNEL, marker])
  t.ok(await waitFor(() => s.holder.current.revoked.has(marker), 2000), 'later notifications still arrive')
  t.equal(revokedChanges, 1, 'only the new jti changed the revoked set (duplicate and empty payloads ignored)')
  t.same(s.errors, [])
})

t.test(`a policy notice rebuilds this workspace's bundle only (${BACKEND})`, async (t) => {
  const w = await createWorld(admin, 'local-policy')
  const s = await start(t, w.orgId)
  const before = s.holder.current.bundle!
  const builds = s.counts.bundle
  await approveOrgPolicy(admin, w, POLICY_V2)
  t.ok(await waitFor(() => s.holder.current.bundle!.revision !== before.revision, 3000), 'the revision changed without waiting for the 1 min timer')
  t.ok(s.counts.bundle > builds, 'rebuilt on the notification')

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

t.test(`after a lost LISTEN connection, what was announced meanwhile is re-read (${BACKEND})`, async (t) => {
  const w = await createWorld(admin, 'local-resync')
  // Subscriptions that hear nothing, as while the LISTEN connection is down; the test resubscribes.
  let resync: (() => void) | null = null
  const s = await start(t, w.orgId, {
    watchRevocations: async (_onRevoked, onResync) => {
      resync = onResync
      return async () => {}
    },
    watchPolicies: async () => async () => {},
  })
  const before = s.holder.current
  await revokeBadge(admin, w, w.badges[0]!.jti)
  await approveOrgPolicy(admin, w, POLICY_V2)
  await sleep(500)
  t.notOk(s.holder.current.revoked.has(w.badges[0]!.jti), 'the notices were missed')
  t.equal(s.holder.current.bundle!.revision, before.bundle!.revision)
  resync!()
  t.ok(await waitFor(() => s.holder.current.revoked.has(w.badges[0]!.jti), 3000), 'revocations re-read')
  t.ok(await waitFor(() => s.holder.current.bundle!.revision !== before.bundle!.revision, 3000), 'the bundle rebuilt')
  t.same(s.errors, [])
})

t.test(`close() stops the timer and the subscriptions: no loads afterwards (${BACKEND})`, async (t) => {
  const w: SnapshotWorld = await createWorld(admin, 'local-close')
  const s = await start(t, w.orgId, { pollIntervalMs: 50 })
  await s.close()
  const version = s.holder.current.version
  const counts = { ...s.counts }
  // A second listener is the control: once it has seen the notification, the closed source had its chance.
  const seen: string[] = []
  const unlisten = await db.listen(REVOCATION_CHANNEL, (jti) => seen.push(jti))
  t.teardown(() => unlisten())
  await revokeBadge(admin, w, w.badges[0]!.jti)
  await approveOrgPolicy(admin, w, POLICY_V2)
  t.ok(await waitFor(() => seen.includes(w.badges[0]!.jti), 2000), 'the control listener got the revocation')
  await sleep(300) // several of the closed source's 50 ms poll intervals
  t.equal(s.holder.current.version, version, 'no swap after close')
  t.same(s.counts, counts, 'no loads after close')
})
