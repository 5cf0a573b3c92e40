/**
 * The contract every gateway snapshot source keeps (src/gateway/snapshot/snapshot.ts), run against each
 * implementation through the `SnapshotSource` interface with a real admin plane as the registry: the
 * appliance's local source (key ring, database, NOTIFY) and the gateway-only remote source (the
 * registry's HTTP API, polled). After start the holder has the issuer, the keys, the revoked jtis and
 * the workspace bundle the registry serves; a revocation, an approved policy and a key rotation made the
 * way an operator makes them reach the holder; a failed refresh keeps the last good parts; close()
 * stops the updates. Each case has an organization of its own; waits are generous, since the remote
 * source polls.
 */
import { rotateKeyFile } from '../../../src/authority/key-ring.js'
import { POLICY_CHANNEL } from '../../../src/core/notify-channels.js'
import { SnapshotHolder, type GatewaySnapshot, type SnapshotSource } from '../../../src/gateway/snapshot/snapshot.js'
import { jwtVerify, decodeProtectedHeader } from 'jose'
import type { Test } from 'tap'
import { createOrg, type TestAdmin } from '../admin.js'
import { sleep } from '../expect.js'
import { waitFor } from '../hostile-http.js'

/** An organization of the registry with one agent and two issued badges. */
export interface SnapshotWorld {
  readonly orgId: string
  /** The org's admin API key, which is also its registry key. */
  readonly key: string
  readonly agentId: string
  readonly badges: readonly { readonly jti: string; readonly token: string }[]
}

/** An implementation as the suite drives it. */
export interface SnapshotSourceUnderTest {
  readonly source: SnapshotSource
  /** The parts whose refresh failed so far, as the source reported them (`bundle`, `revocations`, …). */
  failures(): readonly string[]
}

/** Builds the source of `world`'s workspace, or, with `bundle: false`, one without an embedded PDP (no bundle). */
export type MakeSnapshotSource = (world: SnapshotWorld, options: { bundle: boolean }) => SnapshotSourceUnderTest

/** How long a change may take to reach the holder: the remote source polls, the key ring re-reads its file every 2 s. */
const REACH_MS = 15_000
const VALID_POLICY = 'version: "1"\nmin_trust_level: DV\n'

export async function createWorld(admin: TestAdmin, name: string): Promise<SnapshotWorld> {
  const { orgId, key } = await createOrg(admin, name)
  const agent = await admin.request('POST', '/v1/agents', { key, body: { name: `${name}-agent`, domain: 'agent.example.com' } })
  if (agent.status !== 201) throw new Error(agent.text)
  const badges = [await issueBadge(admin, key, agent.body.data.id), await issueBadge(admin, key, agent.body.data.id)]
  return { orgId, key, agentId: agent.body.data.id, badges }
}

export async function issueBadge(admin: TestAdmin, key: string, agentId: string): Promise<{ jti: string; token: string }> {
  const issued = await admin.request('POST', `/v1/agents/${agentId}/badge`, { key, body: { domain: 'agent.example.com' } })
  if (issued.status !== 200) throw new Error(issued.text)
  return { jti: issued.body.data.jti, token: issued.body.data.token }
}

export async function revokeBadge(admin: TestAdmin, world: SnapshotWorld, jti: string): Promise<void> {
  const res = await admin.request('POST', `/v1/badges/${jti}/revoke`, { key: world.key, body: { reason: 'test' } })
  if (res.status !== 200) throw new Error(res.text)
}

/** Proposes and approves an org policy through the admin API; answers the approved document's id. */
export async function approveOrgPolicy(admin: TestAdmin, world: SnapshotWorld, yaml: string): Promise<string> {
  const base = `/v1/orgs/${world.orgId}/policy`
  const proposal = await admin.request('POST', `${base}/org`, { key: world.key, body: { yaml_content: yaml } })
  if (proposal.status !== 201) throw new Error(proposal.text)
  const approved = await admin.request('POST', `${base}/proposals/${proposal.body.id}/approve`, { key: world.key })
  if (approved.status !== 200) throw new Error(approved.text)
  return proposal.body.id as string
}

/** The bundle `GET /v1/bundles/{workspace}` serves the org. */
export async function servedBundle(admin: TestAdmin, world: SnapshotWorld): Promise<{ revision: string; etag: string | null; data: unknown }> {
  const res = await admin.request('GET', `/v1/bundles/${world.orgId}`, { key: null, headers: { 'x-service-registry-key': world.key } })
  if (res.status !== 200) throw new Error(res.text)
  return { revision: res.body.revision, etag: res.headers.get('etag'), data: res.body.data }
}

async function publishedKids(admin: TestAdmin): Promise<string[]> {
  const jwks = await (await fetch(`${admin.url}/.well-known/jwks.json`)).json() as { keys: { kid: string }[] }
  return jwks.keys.map((k) => k.kid).sort()
}

/** Whether `token` verifies with the snapshot's key for its kid and the snapshot's issuer. */
async function verifies(snapshot: GatewaySnapshot, token: string): Promise<boolean> {
  const key = snapshot.keys.get(decodeProtectedHeader(token).kid ?? '')
  if (key === undefined) return false
  return jwtVerify(token, key, { issuer: snapshot.issuer, algorithms: ['EdDSA'] }).then(() => true, () => false)
}

function minimumTrust(snapshot: GatewaySnapshot): unknown {
  return (snapshot.bundle?.data.config as { min_trust_level?: unknown } | undefined)?.min_trust_level
}

/** Starts the source `make` builds on a new holder; closed in teardown (close is idempotent). */
async function started(t: Test, make: MakeSnapshotSource, world: SnapshotWorld, bundle = true): Promise<SnapshotSourceUnderTest & { holder: SnapshotHolder }> {
  const subject = make(world, { bundle })
  const holder = new SnapshotHolder()
  t.teardown(() => subject.source.close())
  await subject.source.start(holder)
  return { ...subject, holder }
}

/** Runs the suite against the sources `make` builds for organizations of `admin`. */
export async function runSnapshotSourceContract(t: Test, name: string, admin: TestAdmin, make: MakeSnapshotSource): Promise<void> {
  await t.test(`the snapshot source contract: ${name}`, async (t) => {
    await t.test('after start: the issuer, the keys, the revoked jtis and the workspace bundle', async (t) => {
      const world = await createWorld(admin, `${name}-first`)
      await revokeBadge(admin, world, world.badges[0]!.jti)
      const s = await started(t, make, world)
      t.ok(s.holder.ready, 'the holder has a snapshot')
      const snapshot = s.holder.current
      t.equal(snapshot.version, 1, 'swapped in whole, once')
      t.ok(Object.isFrozen(snapshot), 'immutable')
      t.equal(snapshot.issuer, admin.config.issuerUrl, "the registry's issuer")
      t.same([...snapshot.keys.keys()].sort(), await publishedKids(admin), 'the keys the registry publishes')
      t.ok(await verifies(snapshot, world.badges[1]!.token), 'a badge the registry issued verifies with them')
      t.ok(snapshot.revoked.has(world.badges[0]!.jti), 'a badge revoked before start is revoked')
      t.notOk(snapshot.revoked.has(world.badges[1]!.jti), 'a live one is not')
      const served = await servedBundle(admin, world)
      t.equal(snapshot.bundle?.revision, served.revision, 'the bundle revision the registry serves')
      t.same(snapshot.bundle?.data, served.data, 'and its data')
      t.same(s.failures(), [], 'no refresh failed')
    })

    await t.test('without an embedded PDP: no bundle, everything else', async (t) => {
      const world = await createWorld(admin, `${name}-no-bundle`)
      const s = await started(t, make, world, false)
      t.equal(s.holder.current.bundle, null, 'no bundle')
      t.ok(s.holder.current.keys.size > 0, 'keys')
      t.ok(await verifies(s.holder.current, world.badges[0]!.token), 'badges verify')
    })

    await t.test('a badge revoked through the admin API reaches the holder', async (t) => {
      const world = await createWorld(admin, `${name}-revoke`)
      const s = await started(t, make, world)
      const before = s.holder.current
      const jti = world.badges[1]!.jti
      await revokeBadge(admin, world, jti)
      t.ok(await waitFor(() => s.holder.current.revoked.has(jti), REACH_MS), 'the jti is revoked in the current snapshot')
      t.notOk(before.revoked.has(jti), 'the earlier snapshot was not changed')
      t.equal(s.holder.current.keysVersion, before.keysVersion, 'the keys stay')
      t.equal(s.holder.current.bundle?.revision, before.bundle?.revision, 'the bundle stays')
    })

    await t.test("an approved policy reaches the holder's bundle", async (t) => {
      const world = await createWorld(admin, `${name}-policy`)
      const s = await started(t, make, world)
      const before = s.holder.current.bundle!.revision
      await approveOrgPolicy(admin, world, VALID_POLICY)
      t.ok(await waitFor(() => s.holder.current.bundle!.revision !== before, REACH_MS), 'a new bundle revision')
      t.equal(minimumTrust(s.holder.current), 'DV', 'carrying the approved policy')
      t.equal(s.holder.current.bundle!.revision, (await servedBundle(admin, world)).revision, 'the revision the registry serves now')
    })

    await t.test('a failed refresh keeps the last good parts, and the source recovers', async (t) => {
      const world = await createWorld(admin, `${name}-failing`)
      const documentId = await approveOrgPolicy(admin, world, VALID_POLICY)
      const s = await started(t, make, world)
      const good = s.holder.current.bundle!
      // The admin API never stores a policy it cannot read; a row edited behind its back is one, and
      // the announcement makes every bundle build of this org fail from now on.
      const db = admin.database.db
      const setPolicy = async (yaml: string): Promise<void> => {
        await db.query('UPDATE policy_documents SET yaml_content = $1 WHERE id = $2', [yaml, documentId])
        await db.query('SELECT pg_notify($1, $2)', [POLICY_CHANNEL, world.orgId])
      }
      await setPolicy('version: "1"\nno_such_key: true\n')
      t.ok(await waitFor(() => s.failures().includes('bundle'), REACH_MS), 'the failed bundle refresh is reported')
      const jti = world.badges[0]!.jti
      await revokeBadge(admin, world, jti)
      t.ok(await waitFor(() => s.holder.current.revoked.has(jti), REACH_MS), 'the other parts keep refreshing meanwhile')
      await sleep(500)
      const kept = s.holder.current.bundle!
      t.equal(kept.revision, good.revision, 'the last good bundle stays')
      t.same(kept.data, good.data, 'with its data')
      t.equal(kept.confirmedAt, good.confirmedAt, 'and its confirmation time, so it ages')

      await setPolicy('version: "1"\nmin_trust_level: OV\n')
      t.ok(await waitFor(() => minimumTrust(s.holder.current) === 'OV', REACH_MS), 'the repaired policy arrives')
      t.ok(s.holder.current.bundle!.confirmedAt > good.confirmedAt, 'confirmed again')
    })

    await t.test('a key rotation reaches the holder', async (t) => {
      const world = await createWorld(admin, `${name}-rotate`)
      const s = await started(t, make, world)
      const before = s.holder.current
      // What `agent-trust keys rotate` does to the key file of the running registry.
      const { kid, previous } = await rotateKeyFile(admin.keyRing.file)
      t.ok(await waitFor(() => s.holder.current.keys.has(kid), REACH_MS), 'the new key is in the snapshot')
      t.ok(s.holder.current.keys.has(previous), 'the previous key stays, for the badges it signed')
      t.not(s.holder.current.keysVersion, before.keysVersion, 'the key identity changed, so verified-badge caches are dropped')
      t.notOk(before.keys.has(kid), 'the earlier snapshot was not changed')
      t.ok(await waitFor(() => admin.keyRing.current.signing.kid === kid, REACH_MS), 'the registry signs with it')
      const badge = await issueBadge(admin, world.key, world.agentId)
      t.equal(decodeProtectedHeader(badge.token).kid, kid, 'a new badge carries the new kid')
      t.ok(await verifies(s.holder.current, badge.token), 'and verifies with the snapshot')
      t.ok(await verifies(s.holder.current, world.badges[0]!.token), 'as does one signed before the rotation')
    })

    await t.test('close() stops the updates; the holder keeps its last snapshot', async (t) => {
      const world = await createWorld(admin, `${name}-close`)
      const s = await started(t, make, world)
      await s.source.close()
      const last = s.holder.current
      await revokeBadge(admin, world, world.badges[0]!.jti)
      await approveOrgPolicy(admin, world, VALID_POLICY)
      await sleep(1500)
      t.equal(s.holder.current, last, 'no swap after close')
      t.notOk(s.holder.current.revoked.has(world.badges[0]!.jti), 'the revocation was not applied')
      await s.source.close()
      t.pass('close() is idempotent')
    })
  })
}
