/**
 * The decision-vector table, and the four outputs of the policy decision (decision, reason,
 * obligations, ttl) as the gateway's embedded PDP gives them for a bundle `data` document, for
 * comparing with the Rego module on OPA.
 */
import { readFileSync } from 'node:fs'
import type { Obligation, PdpRequest, ResolvedPolicy } from '../../src/core/policy/types.js'
import { createEmbeddedPdp } from '../../src/gateway/pdp/embedded-pdp.js'
import type { GatewayBundleData, GatewaySnapshot } from '../../src/gateway/snapshot/snapshot.js'
import { projectPath } from '../../src/core/paths.js'

/** One case of policies/decision-vectors.json: a resolved policy, a PDP request and the answer. */
export interface DecisionVector {
  name: string
  description: string
  policy: ResolvedPolicy
  input: PdpRequest
  expected: { decision: 'ALLOW' | 'DENY'; reason: string; obligations: Obligation[] }
}

export function loadDecisionVectors(): DecisionVector[] {
  return JSON.parse(readFileSync(projectPath('policies', 'decision-vectors.json'), 'utf8')) as DecisionVector[]
}

/** The rules of package service.policy that OPA answers with. */
export const POLICY_OUTPUTS = ['decision', 'reason', 'obligations', 'ttl'] as const

export type PolicyOutputs = Record<(typeof POLICY_OUTPUTS)[number], unknown>

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
  return { decision: answer.outcome, reason: answer.reason, obligations: answer.obligations, ttl: answer.ttl }
}
