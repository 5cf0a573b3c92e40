/**
 * The contract every policy decision point keeps (src/gateway/pdp/pdp.ts), run against each
 * implementation through the `PolicyDecisionPoint` interface: the embedded evaluator, the HTTP PDP
 * against a PDP server, and the HTTP PDP in its OPA mode against OPA running the Rego module. The cases
 * are the decision-vector table and the org-policy fallback, each with its own bundle; every answer
 * must carry the expected decision, reason, obligations, ttl and required trust level, and a decision id
 * fit for a header.
 */
import { isDeepStrictEqual } from 'node:util'
import type { Test } from 'tap'
import type { Obligation, PdpRequest, ResolvedPolicy, TrustCode } from '../../../src/core/policy/types.js'
import type { PdpAnswer, PolicyDecisionPoint } from '../../../src/gateway/pdp/pdp.js'
import { isValidDecisionId } from '../../../src/gateway/pdp/pdp-answer.js'
import type { GatewayBundleData, GatewaySnapshot } from '../../../src/gateway/snapshot/snapshot.js'
import { loadDecisionVectors } from '../decisions.js'

/** The outputs of a decision; `required_trust_level` only on a DENY for the trust level that names one. */
export interface ExpectedDecision {
  decision: 'ALLOW' | 'DENY'
  reason: string
  obligations: Obligation[]
  ttl: number
  required_trust_level?: TrustCode
}

export interface DecisionCase {
  readonly name: string
  /** The workspace the case's bundle is published for; the request names it. */
  readonly workspace: string
  readonly request: PdpRequest
  readonly data: GatewayBundleData
  readonly expected: ExpectedDecision
}

/** An implementation as the suite drives it. */
export interface DecisionPointUnderTest {
  readonly pdp: PolicyDecisionPoint
  /**
   * Puts a workspace's bundle data where this PDP reads it (a remote PDP's store). The embedded PDP
   * reads the snapshot the gateway hands it, which the suite fills, so it has nothing to do here.
   */
  publish(workspace: string, data: GatewayBundleData): void
}

const ALICE = 'did:web:agents.example.com:alice'
const BOB = 'did:web:agents.example.com:bob'
const EMPTY_POLICY: ResolvedPolicy = {
  min_trust_level: null, allowed_dids: null, denied_dids: [], rate_limits: [], operations: [], mcp_tools: [], capability_classes: [],
}
const DENY_ALICE: ResolvedPolicy = { ...EMPTY_POLICY, denied_dids: [ALICE] }
const allowed = (obligations: Obligation[] = []): ExpectedDecision => ({ decision: 'ALLOW', reason: 'allowed', obligations, ttl: 60 })
const denied = (reason: string): ExpectedDecision => ({ decision: 'DENY', reason, obligations: [], ttl: 0 })

/**
 * Which policy applies to the subject of {@link orgPolicyRequest}: its entry in
 * `resolved_policies.by_agent_did`, else the org policy in `data.config`, else none.
 */
export const ORG_POLICY_CASES: readonly { name: string; data: GatewayBundleData; expected: ExpectedDecision }[] = [
  {
    name: 'no entry for the subject: the org policy applies',
    data: { config: DENY_ALICE, resolved_policies: { by_agent_did: { [BOB]: EMPTY_POLICY } } },
    expected: denied('denied_did'),
  },
  {
    name: 'an entry beats the org policy',
    data: { config: DENY_ALICE, resolved_policies: { by_agent_did: { [ALICE]: EMPTY_POLICY } } },
    expected: allowed(),
  },
  {
    name: 'an entry that is not a policy falls back to the org policy',
    data: { config: DENY_ALICE, resolved_policies: { by_agent_did: { [ALICE]: null as unknown as ResolvedPolicy } } },
    expected: denied('denied_did'),
  },
  {
    name: 'a raw org document: absent fields are not set',
    data: { config: { version: '1', min_trust_level: 'OV' } },
    expected: { ...denied('trust_level_below_minimum'), required_trust_level: 'OV' },
  },
  {
    name: 'a raw org document with an operation rule',
    data: { config: { version: '1', operations: [{ pattern: 'GET /v1/**', denied_dids: [ALICE] }] } },
    expected: denied('operation_denied_did'),
  },
  {
    name: 'a raw org document with a rate limit',
    data: { config: { version: '1', rate_limits: [{ did: ALICE, rpm: 7 }] }, resolved_policies: { by_agent_did: {} } },
    expected: allowed([{ type: 'rate_limit.apply', params: { rpm: 7, key: ALICE } }]),
  },
  {
    name: 'config null and no entry: nothing restricts',
    data: { config: null as unknown as ResolvedPolicy, resolved_policies: { by_agent_did: { [BOB]: DENY_ALICE } } },
    expected: allowed(),
  },
  {
    name: 'config that is not an object: nothing restricts',
    data: { config: 'deny everyone' as unknown as ResolvedPolicy },
    expected: allowed(),
  },
  {
    name: 'neither config nor resolved_policies: nothing restricts',
    data: {},
    expected: allowed(),
  },
]

/** The request the org-policy cases are decided on: alice's, the first decision vector's. */
export function orgPolicyRequest(): PdpRequest {
  return loadDecisionVectors()[0]!.input
}

function workspaceId(index: number): string {
  return `00000000-0000-4000-8000-${index.toString(16).padStart(12, '0')}`
}

function inWorkspace(request: PdpRequest, workspace: string): PdpRequest {
  return { ...request, environment: { ...request.environment, workspace } }
}

/** Every case of the suite, each in a workspace of its own. */
export function decisionCases(): DecisionCase[] {
  const vectors = loadDecisionVectors().map((vector) => ({
    name: `${vector.name}: ${vector.description}`,
    request: vector.input,
    data: { resolved_policies: { by_agent_did: { [vector.input.subject.did]: vector.policy } } },
    expected: { ...vector.expected, ttl: vector.expected.decision === 'ALLOW' ? 60 : 0 },
  }))
  const request = orgPolicyRequest()
  const orgPolicies = ORG_POLICY_CASES.map((c) => ({ name: `org policy: ${c.name}`, request, data: c.data, expected: c.expected }))
  return [...vectors, ...orgPolicies].map((c, index) => {
    const workspace = workspaceId(index)
    return { ...c, workspace, request: inWorkspace(c.request, workspace) }
  })
}

/** The snapshot the gateway would hand the PDP for a bundle with `data`. */
export function snapshotWith(data: GatewayBundleData): GatewaySnapshot {
  return {
    version: 1,
    issuer: 'http://registry.test',
    keys: new Map(),
    keysVersion: '',
    revoked: new Set(),
    bundle: { revision: 'contract', data, confirmedAt: Date.now() },
  }
}

function outputs(answer: PdpAnswer): Record<string, unknown> {
  if (answer.outcome === 'UNAVAILABLE') return { unavailable: answer.reason }
  const outputs: Record<string, unknown> = { decision: answer.outcome, reason: answer.reason ?? '(none)', obligations: answer.obligations, ttl: answer.ttl }
  if (answer.requiredTrustLevel !== undefined) outputs.required_trust_level = answer.requiredTrustLevel
  return outputs
}

/** Publishes every case's bundle and decides the cases all at once, as a busy gateway asks. */
async function decideAll(subject: DecisionPointUnderTest, cases: readonly DecisionCase[]): Promise<PdpAnswer[]> {
  for (const c of cases) subject.publish(c.workspace, c.data)
  return Promise.all(cases.map((c) => subject.pdp.decide(c.request, snapshotWith(c.data))))
}

/**
 * Runs the suite against the PDP `make` builds (closed at the end); `kind` is the implementation's
 * `PolicyDecisionPoint.kind`.
 */
export async function runDecisionPointContract(
  t: Test, kind: PolicyDecisionPoint['kind'], make: (t: Test) => Promise<DecisionPointUnderTest>,
): Promise<void> {
  await t.test(`the decision point contract: ${kind}`, async (t) => {
    const subject = await make(t)
    t.teardown(() => subject.pdp.close())
    t.equal(subject.pdp.kind, kind, 'the implementation says what it is')
    const cases = decisionCases()
    const answers = await decideAll(subject, cases)

    await t.test('every case: decision, reason, obligations, ttl and required trust level', async (t) => {
      cases.forEach((c, i) => t.strictSame(outputs(answers[i]!), c.expected, c.name))
    })

    await t.test('decision ids: fit for a header and one per decision', async (t) => {
      const ids = answers.flatMap((answer) => (answer.outcome === 'UNAVAILABLE' ? [] : [answer.decisionId]))
      t.equal(ids.length, cases.length, 'every answer has one')
      t.ok(ids.every(isValidDecisionId), 'each is a valid decision id')
      t.equal(new Set(ids).size, ids.length, 'no two decisions share one')
    })

    await t.test('decisions in flight together keep their own bundle', async (t) => {
      // One request, two workspaces that decide it oppositely, interleaved: an answer crossed between
      // concurrent decisions (a reused socket, a shared buffer) would show here.
      const request = orgPolicyRequest()
      const open = { workspace: workspaceId(10_000), data: { config: EMPTY_POLICY }, expected: allowed() }
      const shut = { workspace: workspaceId(10_001), data: { config: DENY_ALICE }, expected: denied('denied_did') }
      const interleaved = Array.from({ length: 32 }, (_, i) => {
        const c = i % 2 === 0 ? open : shut
        return { ...c, name: `decision ${i}`, request: inWorkspace(request, c.workspace) }
      })
      const results = await decideAll(subject, interleaved)
      t.ok(results.every((answer, i) => isDeepStrictEqual(outputs(answer), interleaved[i]!.expected)), "each answer is its own workspace's")
    })
  })
}
