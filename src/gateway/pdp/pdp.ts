/**
 * The policy decision point as the gateway sees it. Three implementations share this contract: the
 * embedded evaluator on the snapshot's bundle, the external HTTP PDP (docs/api.md §2.12) and OPA's data API
 * (docs/wire-contract.md §8). A PDP never throws: every failure is `UNAVAILABLE` with a reason for the log, and
 * an ALLOW or DENY carries only validated members (see pdp-answer.ts).
 */
import type { PdpRequest } from '../../core/policy/types.js'
import type { PdpObligation } from '../../core/enforcement.js'
import type { GatewaySnapshot } from '../snapshot/snapshot.js'
import type { PdpUnavailableReason } from './pdp-answer.js'

export type PdpAnswer =
  | {
      outcome: 'ALLOW' | 'DENY'
      decisionId: string
      obligations: PdpObligation[]
      /** Seconds the decision may be cached (0 = not at all). */
      ttl: number
      reason?: string
    }
  /** `reason` is one of a closed set: it becomes a metric label value. */
  | { outcome: 'UNAVAILABLE'; reason: PdpUnavailableReason }

export interface PolicyDecisionPoint {
  readonly kind: 'embedded' | 'http' | 'opa'
  /** The embedded PDP answers synchronously; remote ones return a promise. */
  decide(request: PdpRequest, snapshot: GatewaySnapshot): PdpAnswer | Promise<PdpAnswer>
  close(): Promise<void>
}
