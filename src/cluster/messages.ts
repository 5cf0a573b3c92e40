/**
 * The IPC messages between a gateway primary and its node:cluster workers. Every message carries a `type`
 * in this namespace so that prom-client's or node's own cluster messages are never mistaken for ours.
 */
import type { MetricObjectWithValues, MetricValue } from 'prom-client'
import type { ReadinessReport } from '../http/readiness.js'

/** The environment variable that tells a forked process which worker it is (1-based); set by the primary only. */
export const WORKER_INDEX_VARIABLE = 'AGENT_TRUST_GATEWAY_WORKER'
/** The gateway id a worker reports under (`<gateway id>:w<n>`), chosen by the primary. */
export const WORKER_GATEWAY_ID_VARIABLE = 'AGENT_TRUST_GATEWAY_WORKER_ID'
/** `1` when the worker countersigns agent cards with the authority key file (the appliance's workers). */
export const WORKER_CARD_SIGNING_VARIABLE = 'AGENT_TRUST_GATEWAY_WORKER_CARD_SIGNING'

export type WorkerMetrics = MetricObjectWithValues<MetricValue<string>>[]

/** Worker → primary. */
export type WorkerMessage =
  | { readonly type: 'agent-trust:up'; readonly gatewayUrl: string }
  | { readonly type: 'agent-trust:failed'; readonly message: string }
  | { readonly type: 'agent-trust:answer'; readonly id: number; readonly readiness?: ReadinessReport; readonly metrics?: WorkerMetrics }

/** Primary → worker. */
export type PrimaryMessage =
  | { readonly type: 'agent-trust:ask'; readonly id: number; readonly what: 'readiness' | 'metrics' }
  | { readonly type: 'agent-trust:shutdown' }

function typed(message: unknown): string | null {
  if (typeof message !== 'object' || message === null) return null
  const type = (message as { type?: unknown }).type
  return typeof type === 'string' && type.startsWith('agent-trust:') ? type : null
}

export function isWorkerMessage(message: unknown): message is WorkerMessage {
  const type = typed(message)
  return type === 'agent-trust:up' || type === 'agent-trust:failed' || type === 'agent-trust:answer'
}

export function isPrimaryMessage(message: unknown): message is PrimaryMessage {
  const type = typed(message)
  return type === 'agent-trust:ask' || type === 'agent-trust:shutdown'
}
