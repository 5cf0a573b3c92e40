/**
 * The appliance's snapshot source (src/appliance/snapshot-source.ts over the gateway's local source)
 * keeps the snapshot source contract, wired as main.ts wires it: the admin plane's key ring and bundle
 * cache, the database and its NOTIFY channels, on the backend SERVICE_TEST_DB selects.
 */
import { Writable } from 'node:stream'
import t from 'tap'
import { createApplianceSnapshot } from '../../../src/appliance/snapshot-source.js'
import { createLogger } from '../../../src/telemetry/logger.js'
import { startTestAdmin } from '../../helpers/admin.js'
import { runSnapshotSourceContract } from '../../helpers/contracts/snapshot-source.js'
import { BACKEND } from '../../helpers/database.js'

t.setTimeout(300_000)
const admin = await startTestAdmin(t)
const REFRESH_FAILED = 'gateway snapshot refresh failed; keeping the last good snapshot'

await runSnapshotSourceContract(t, `appliance (${BACKEND})`, admin, (world, { bundle }) => {
  const lines: Record<string, unknown>[] = []
  const logger = createLogger('info', new Writable({
    write(chunk, _encoding, callback) {
      for (const line of String(chunk).split('\n')) if (line.startsWith('{')) lines.push(JSON.parse(line) as Record<string, unknown>)
      callback()
    },
  }))
  const gateway = { ...admin.config.gateway, enabled: true, embeddedPdp: bundle, workspace: bundle ? world.orgId : null }
  const snapshot = createApplianceSnapshot({
    config: { ...admin.config, gateway }, db: admin.database.db, keyRing: admin.keyRing, bundles: admin.bundles, logger,
  })
  return {
    source: snapshot.source,
    failures: () => lines.filter((line) => line.msg === REFRESH_FAILED).map((line) => String(line.what)),
  }
})
