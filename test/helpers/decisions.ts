/**
 * The decision-vector table, and the outputs of the policy decision (decision, reason, obligations,
 * ttl and, on a DENY for the trust level, required_trust_level) as the gateway's embedded PDP gives them for a bundle `data` document, for
 * comparing with the Rego module on OPA.
 */
import { readFileSync } from 'node:fs'
import type { Obligation, PdpRequest, ResolvedPolicy, TrustCode } from '../../src/core/policy/types.js'
import { createEmbeddedPdp } from '../../src/gateway/pdp/embedded-pdp.js'
import type { GatewayBundleData, GatewaySnapshot } from '../../src/gateway/snapshot/snapshot.js'
import { projectPath } from '../../src/core/paths.js'

/** One case of policies/decision-vectors.json: a resolved policy, a PDP request and the answer. */
export interface DecisionVector {
  name: string
  description: string
  policy: ResolvedPolicy
  input: PdpRequest
  expected: { decision: 'ALLOW' | 'DENY'; reason: string; obligations: Obligation[]; required_trust_level?: TrustCode }
}

export function loadDecisionVectors(): DecisionVector[] {
  return JSON.parse(readFileSync(projectPath('policies', 'decision-vectors.json'), 'utf8')) as DecisionVector[]
}

/** The rules of package service.policy that OPA answers with; `required_trust_level` only when defined. */
export const POLICY_OUTPUTS = ['decision', 'reason', 'obligations', 'ttl', 'required_trust_level'] as const

export type PolicyOutputs = Partial<Record<(typeof POLICY_OUTPUTS)[number], unknown>>

const embedded = createEmbeddedPdp()

/** What the embedded PDP decides for `request` on a bundle whose data is `data`. */
export function embeddedDecision(request: PdpRequest, data: GatewayBundleData): PolicyOutputs | { unavailable: string } {
  const snapshot: GatewaySnapshot = {
    version: 1,
    issuer: 'test',
    keys: new Map(),
    keysVersion: 'none',
    revoked: new Set(),
    bundle: { revision: 'test', data, confirmedAt: Date.now() },
  }
  const answer = embedded.decide(request, snapshot)
  if (answer instanceof Promise) throw new Error('the embedded PDP answers synchronously')
  if (answer.outcome === 'UNAVAILABLE') return { unavailable: answer.reason }
  const outputs: PolicyOutputs = { decision: answer.outcome, reason: answer.reason, obligations: answer.obligations, ttl: answer.ttl }
  if (answer.requiredTrustLevel !== undefined) outputs.required_trust_level = answer.requiredTrustLevel
  return outputs
}
