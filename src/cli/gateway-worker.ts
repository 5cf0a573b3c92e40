/**
 * The entry point of a gateway worker, forked by a gateway primary (SERVICE_GATEWAY_WORKERS above 1) with
 * node:cluster: the configuration from the environment the primary gave it, the gateway, and the IPC.
 */
import cluster from 'node:cluster'
import { loadConfig } from '../config/index.js'
import { startGatewayWorker } from '../main.js'
import { serveAsWorker } from '../cluster/worker.js'
import { WORKER_CARD_SIGNING_VARIABLE, WORKER_GATEWAY_ID_VARIABLE, WORKER_INDEX_VARIABLE } from '../cluster/messages.js'
import { createLogger } from '../telemetry/logger.js'

if (!cluster.isWorker) {
  process.stderr.write('agent-trust: this is a gateway worker; start `agent-trust gateway` or `agent-trust serve` with SERVICE_GATEWAY_WORKERS\n')
  process.exit(2)
}
const index = Number(process.env[WORKER_INDEX_VARIABLE])
let config: ReturnType<typeof loadConfig> | null = null
try {
  config = loadConfig()
} catch (error) {
  // The primary read the same environment, so this is rare; it must still stop the primary with its message.
  process.send?.({ type: 'agent-trust:failed', message: error instanceof Error ? error.message : String(error) })
  process.exit(2)
}
const logger = createLogger(config.logLevel).child({ worker: index })
const loaded = config
serveAsWorker(logger, () => startGatewayWorker(loaded, {
  logger,
  gatewayId: process.env[WORKER_GATEWAY_ID_VARIABLE] ?? null,
  cardSigning: process.env[WORKER_CARD_SIGNING_VARIABLE] === '1',
}))
