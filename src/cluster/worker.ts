/**
 * The worker side of a gateway cluster: starts the gateway, tells the primary it is up (or why it could not
 * start), answers the primary's readiness and metrics questions, and drains on the primary's word, on
 * SIGTERM/SIGINT (a terminal's Ctrl-C reaches the whole process group) or when the primary is gone.
 */
import type { Registry } from 'prom-client'
import type { ReadinessReport } from '../http/readiness.js'
import type { Logger } from '../telemetry/logger.js'
import { isPrimaryMessage, type WorkerMessage } from './messages.js'

/** What a worker runs: a started gateway-only process without its own operations listener. */
export interface WorkerGateway {
  readonly gatewayUrl: string
  readiness(): ReadinessReport
  readonly registry: Registry
  /** Stops accepting, lets in-flight requests finish within the grace period, ships the last report. */
  close(): Promise<void>
}

function send(message: WorkerMessage): void {
  // After the primary is gone the channel is closed; the drain that follows needs no answer.
  if (process.connected) process.send?.(message)
}

function exitAfterFlush(logger: Logger, code: number): void {
  logger.flush(() => process.exit(code))
}

/** Runs `start` in a worker the primary forked (`logger` names the worker); the process exits when it is done. */
export function serveAsWorker(logger: Logger, start: () => Promise<WorkerGateway>): void {
  let gateway: WorkerGateway | null = null
  let draining = false
  const drain = (why: string): void => {
    if (draining) return
    draining = true
    logger.info({ why }, 'gateway worker draining')
    // Started later (a drain asked for during start-up) the gateway is closed as soon as it is up.
    if (gateway === null) return
    const running = gateway
    running.close().then(
      () => exitAfterFlush(logger, 0),
      (error: unknown) => {
        logger.error({ err: error }, 'gateway worker shutdown failed')
        exitAfterFlush(logger, 1)
      },
    )
  }
  process.on('message', (message: unknown) => {
    if (!isPrimaryMessage(message)) return
    if (message.type === 'agent-trust:shutdown') return drain('the primary is shutting down')
    if (gateway === null) return send({ type: 'agent-trust:answer', id: message.id })
    if (message.what === 'readiness') return send({ type: 'agent-trust:answer', id: message.id, readiness: gateway.readiness() })
    gateway.registry.getMetricsAsJSON().then(
      (metrics) => send({ type: 'agent-trust:answer', id: message.id, metrics }),
      () => send({ type: 'agent-trust:answer', id: message.id }),
    )
  })
  process.on('SIGTERM', () => drain('SIGTERM'))
  process.on('SIGINT', () => drain('SIGINT'))
  process.on('disconnect', () => drain('the primary is gone'))
  start().then(
    (started) => {
      gateway = started
      send({ type: 'agent-trust:up', gatewayUrl: started.gatewayUrl })
      if (draining) {
        draining = false
        drain('asked to stop during start-up')
      }
    },
    (error: unknown) => {
      const message = error instanceof Error ? error.message : String(error)
      send({ type: 'agent-trust:failed', message })
      logger.error({ err: error }, 'gateway worker could not start')
      exitAfterFlush(logger, 1)
    },
  )
}
