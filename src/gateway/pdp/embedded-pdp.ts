// The built-in evaluator on the snapshot's bundle; synchronous, since it runs at every cache miss.
import { evaluate } from '../../core/policy/evaluate.js'
import type { PdpRequest, ResolvedPolicy } from '../../core/policy/types.js'
import type { GatewaySnapshot } from '../snapshot/snapshot.js'
import type { PdpAnswer, PolicyDecisionPoint } from './pdp.js'

const EMPTY_POLICY: ResolvedPolicy = Object.freeze({
  min_trust_level: null,
  allowed_dids: null,
  denied_dids: [],
  rate_limits: [],
  operations: [],
  mcp_tools: [],
  capability_classes: [],
}) as ResolvedPolicy

/** As the Rego module: the agent's policy, else the org's (an agent newer than the bundle), else none. */
function policyFor(snapshot: GatewaySnapshot, did: string): ResolvedPolicy | null {
  const bundle = snapshot.bundle
  if (bundle === null) return null
  const byDid = bundle.data.resolved_policies?.by_agent_did
  const own = byDid !== undefined && Object.prototype.hasOwnProperty.call(byDid, did) ? byDid[did] : undefined
  if (own !== undefined && typeof own === 'object' && own !== null) return own
  const config = bundle.data.config
  if (typeof config === 'object' && config !== null) return config as ResolvedPolicy
  return EMPTY_POLICY
}

let sequence = 0
const prefix = `emb-${process.pid.toString(36)}-${Date.now().toString(36)}-`

export function createEmbeddedPdp(): PolicyDecisionPoint {
  // Decision ids only need to be unique per gateway process and cheap: a counter, not a random UUID.
  const options = { decisionId: (): string => prefix + (++sequence).toString(36) }
  return {
    kind: 'embedded',
    decide(request: PdpRequest, snapshot: GatewaySnapshot): PdpAnswer {
      const policy = policyFor(snapshot, request.subject.did)
      // No bundle loaded: the PDP cannot decide, which the mode table turns into 503 or ALLOW_OBSERVE.
      if (policy === null) return { outcome: 'UNAVAILABLE', reason: 'no_bundle' }
      let result
      try {
        result = evaluate(request, policy, options)
      } catch {
        // A throw here would make every request a gateway error instead of following the mode table.
        return { outcome: 'UNAVAILABLE', reason: 'invalid_bundle' }
      }
      const answer: PdpAnswer = { outcome: result.decision, decisionId: result.decision_id, obligations: result.obligations, ttl: result.ttl, reason: result.reason }
      if (result.required_trust_level !== undefined) answer.requiredTrustLevel = result.required_trust_level
      return answer
    },
    async close() {},
  }
}
