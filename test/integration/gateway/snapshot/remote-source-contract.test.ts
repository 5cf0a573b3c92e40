/**
 * The gateway-only process's remote snapshot source keeps the snapshot source contract, polling a real
 * admin plane (on the backend SERVICE_TEST_DB selects) at short intervals.
 */
import t from 'tap'
import { createRemoteSource, type RemotePart } from '../../../../src/gateway/snapshot/remote-source.js'
import { startTestAdmin } from '../../../helpers/admin.js'
import { runSnapshotSourceContract } from '../../../helpers/contracts/snapshot-source.js'
import { BACKEND } from '../../../helpers/database.js'

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
