// The contract of the embedded, HTTP and OPA decision points (docs/wire-contract.md §8): never throws, every
// failure is `UNAVAILABLE`, an ALLOW or DENY carries only validated members.
import type { PdpRequest } from '../../core/policy/types.js'
import type { TrustCode } from '../../core/trust-level.js'
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
      /** On a DENY for the trust level: the minimum the failing check wanted. */
      requiredTrustLevel?: TrustCode
    }
  /** `reason` is one of a closed set: it becomes a metric label value. */
  | { outcome: 'UNAVAILABLE'; reason: PdpUnavailableReason }

export interface PolicyDecisionPoint {
  readonly kind: 'embedded' | 'http' | 'opa'
  /** The embedded PDP answers synchronously; remote ones return a promise. */
  decide(request: PdpRequest, snapshot: GatewaySnapshot): PdpAnswer | Promise<PdpAnswer>
  close(): Promise<void>
}
