/**
 * The embedded PDP (docs/architecture.md): which policy it applies — the agent's resolved policy, else the
 * org policy in `data.config`, else no restriction — and UNAVAILABLE `no_bundle` without a bundle.
 */
import t from 'tap'
import { createEmbeddedPdp } from '../../../../src/gateway/pdp/embedded-pdp.js'
import type { PdpAnswer } from '../../../../src/gateway/pdp/pdp.js'
import type { PdpRequest, ResolvedPolicy, TrustCode } from '../../../../src/core/policy/types.js'
import type { GatewayBundleData, GatewaySnapshot } from '../../../../src/gateway/snapshot/snapshot.js'

const A = 'did:web:agents.example.com:a'
const B = 'did:web:agents.example.com:b'

const policy = (over: Partial<ResolvedPolicy> = {}): ResolvedPolicy => ({
  min_trust_level: null, allowed_dids: null, denied_dids: [], rate_limits: [], operations: [], mcp_tools: [], capability_classes: [], ...over,
})

const snapshot = (data: GatewayBundleData | null): GatewaySnapshot => ({
  version: 1, issuer: 'https://registry.test', keys: new Map(), keysVersion: '', revoked: new Set(),
  bundle: data === null ? null : { revision: 'r1', data, confirmedAt: Date.now() },
})

const request = (did: string, trust: TrustCode = 'DV'): PdpRequest => ({
  pip_version: 'service.pip.v1',
  subject: { did, badge_jti: 'jti-1', ial: '1', trust_level: trust },
  action: { operation: 'GET /x', capability_class: null },
  resource: { identifier: '/x' },
  context: { txn_id: 't-1', enforcement_mode: 'EM-GUARD' },
  environment: { pep_id: '', time: new Date().toISOString() },
})

const pdp = createEmbeddedPdp()
t.teardown(() => pdp.close())
const decide = (did: string, data: GatewayBundleData | null, trust?: TrustCode): PdpAnswer => pdp.decide(request(did, trust), snapshot(data)) as PdpAnswer

t.test('kind and synchronous answers', async (t) => {
  t.equal(pdp.kind, 'embedded')
  const answer = pdp.decide(request(A), snapshot({}))
  t.notOk(answer instanceof Promise, 'answers synchronously')
})

t.test('no bundle: UNAVAILABLE no_bundle', async (t) => {
  t.strictSame(decide(A, null), { outcome: 'UNAVAILABLE', reason: 'no_bundle' })
})

t.test('the agent\'s own resolved policy wins over config', async (t) => {
  const data: GatewayBundleData = {
    config: policy({ denied_dids: [A] }),
    resolved_policies: { by_agent_did: { [A]: policy() } },
  }
  t.match(decide(A, data), { outcome: 'ALLOW', reason: 'allowed' }, 'own policy allows although config denies A')
  const strict: GatewayBundleData = {
    config: policy(),
    resolved_policies: { by_agent_did: { [A]: policy({ min_trust_level: 'EV' }) } },
  }
  t.match(decide(A, strict, 'DV'), { outcome: 'DENY', reason: 'trust_level_below_minimum' }, 'own policy denies although config allows')
  t.match(decide(B, strict, 'DV'), { outcome: 'ALLOW' }, 'B is not in by_agent_did: config applies')
})

t.test('config when the agent has no resolved policy', async (t) => {
  const data: GatewayBundleData = { config: policy({ denied_dids: [B] }), resolved_policies: { by_agent_did: { [A]: policy() } } }
  t.match(decide(B, data), { outcome: 'DENY', reason: 'denied_did', ttl: 0, obligations: [] })
  t.match(decide(B, { config: policy({ min_trust_level: 'OV' }) }, 'DV'), { outcome: 'DENY', reason: 'trust_level_below_minimum' }, 'no resolved_policies at all')
  t.match(decide(B, { config: policy(), resolved_policies: {} }), { outcome: 'ALLOW' }, 'no by_agent_did')
  t.match(decide(A, { config: policy({ denied_dids: [A] }), resolved_policies: { by_agent_did: { [A]: null as unknown as ResolvedPolicy } } }),
    { outcome: 'DENY', reason: 'denied_did' }, 'a null entry falls back to config')
})

t.test('prototype names are not policies', async (t) => {
  const data: GatewayBundleData = { config: policy({ denied_dids: ['constructor', '__proto__', 'toString'] }), resolved_policies: { by_agent_did: {} } }
  for (const did of ['constructor', '__proto__', 'toString']) {
    t.match(decide(did, data), { outcome: 'DENY', reason: 'denied_did' }, `${did}: config applies, not Object.prototype`)
  }
})

t.test('neither: no restriction', async (t) => {
  t.match(decide(A, {}, 'SS'), { outcome: 'ALLOW', reason: 'allowed' })
  t.match(decide(A, { config: null as unknown as ResolvedPolicy }, 'SS'), { outcome: 'ALLOW' }, 'null config')
})

t.test('the answer: ttl, obligations, unique decision ids', async (t) => {
  const data: GatewayBundleData = { config: policy({ rate_limits: [{ did: A, rpm: 30 }] as ResolvedPolicy['rate_limits'] }) }
  const first = decide(A, data)
  t.match(first, { outcome: 'ALLOW', ttl: 60, obligations: [{ type: 'rate_limit.apply', params: { rpm: 30, key: A } }] })
  const ids = new Set<string>()
  for (let i = 0; i < 100; i++) {
    const answer = decide(A, data)
    if (answer.outcome !== 'UNAVAILABLE') ids.add(answer.decisionId)
  }
  t.equal(ids.size, 100, 'decision ids are unique')
  t.ok([...ids].every((id) => id.startsWith('emb-')), 'and carry the embedded prefix')
  const deny = decide(B, { config: policy({ allowed_dids: [A] }) })
  t.match(deny, { outcome: 'DENY', reason: 'not_in_allow_list', ttl: 0 })
})

t.test('a policy the evaluator cannot read is UNAVAILABLE, never a throw', async (t) => {
  const broken = { config: policy({ operations: [null] as unknown as ResolvedPolicy['operations'] }) }
  let answer: PdpAnswer | undefined
  t.doesNotThrow(() => {
    answer = decide(A, broken)
  }, 'decide does not throw')
  t.same(answer, { outcome: 'UNAVAILABLE', reason: 'invalid_bundle' }, 'invalid_bundle: the mode table decides')
})
