/**
 * The gateway-only process's remote snapshot source keeps the snapshot source contract against a real
 * admin plane (on the backend SERVICE_TEST_DB selects): polling at short intervals, and on the watch
 * stream with polls a minute apart, so that every change the contract makes must arrive by push.
 */
import t from 'tap'
import { createRemoteSource, type RemotePart } from '../../../../src/gateway/snapshot/remote-source.js'
import { startTestAdmin } from '../../../helpers/admin.js'
import { runSnapshotSourceContract } from '../../../helpers/contracts/snapshot-source.js'
import { BACKEND } from '../../../helpers/database.js'
import type { SnapshotSource } from '../../../../src/gateway/snapshot/snapshot.js'

t.setTimeout(300_000)
const admin = await startTestAdmin(t)

await runSnapshotSourceContract(t, `remote (${BACKEND})`, admin, (world, { bundle }) => {
  const failures: RemotePart[] = []
  const source = createRemoteSource({
    registryUrl: admin.url,
    registryKey: world.key,
    configuredIssuer: null,
    workspace: bundle ? world.orgId : null,
    pollIntervalMs: 200,
    revocationPollMs: 100,
    onError: (what) => failures.push(what),
  })
  return { source, failures: () => failures }
})

await runSnapshotSourceContract(t, `remote on push (${BACKEND})`, admin, (world, { bundle }) => {
  const failures: RemotePart[] = []
  const source = createRemoteSource({
    registryUrl: admin.url,
    registryKey: world.key,
    configuredIssuer: null,
    workspace: bundle ? world.orgId : null,
    pollIntervalMs: 60_000,
    revocationPollMs: 60_000,
    watch: true,
    onError: (what) => failures.push(what),
  })
  const pushed: SnapshotSource = {
    async start(holder) {
      await source.start(holder)
      // The stream is subscribed before the first load, so it is up by now.
      if (!source.pushUp) throw new Error('the watch stream is not up after start')
    },
    close: () => source.close(),
  }
  return { source: pushed, failures: () => failures }
})
