import { isDeepStrictEqual } from 'node:util'
import fc from 'fast-check'
import t from 'tap'
import { compareCodePoints, resolvePolicy } from '../../../../src/core/policy/merge.js'
import type { PolicyDocument, PolicyLayer, PolicyRule, ResolvedPolicy, MinimumTrustCode } from '../../../../src/core/policy/types.js'

const A = 'did:web:agents.example.com:a'
const B = 'did:web:agents.example.com:b'
const C = 'did:web:agents.example.com:c'
const D = 'did:web:agents.example.com:d'

function layer(
  scope_type: PolicyLayer['scope_type'],
  scope_id: string,
  document: Omit<PolicyDocument, 'version'>,
  extra: { precedence?: number; version?: number } = {},
): PolicyLayer {
  const out: PolicyLayer = {
    scope_type,
    scope_id,
    document_id: `doc-${scope_type}-${scope_id}`,
    version: extra.version ?? 1,
    document: { version: '1', ...document },
  }
  if (extra.precedence !== undefined) out.precedence = extra.precedence
  return out
}

const EMPTY: ResolvedPolicy = {
  min_trust_level: null,
  allowed_dids: null,
  denied_dids: [],
  rate_limits: [],
  operations: [],
  mcp_tools: [],
  capability_classes: [],
}

t.test('no layers resolve to the empty policy', async (t) => {
  t.same(resolvePolicy([]), { resolved: EMPTY, lineage: [] })
})

t.test('org + two groups + agent', async (t) => {
  const org = layer('org', 'org-1', {
    min_trust_level: 'REG',
    allowed_dids: [A, B, C],
    denied_dids: [D],
    rate_limits: [{ did: A, rpm: 100 }, { did: B, rpm: 50 }],
    operations: [{ pattern: 'GET /v1/**', min_trust_level: 'DV' }, { pattern: 'agent.*', denied_dids: [C] }],
    mcp_tools: [{ tool: 'search', allowed_dids: [A] }],
    capability_classes: [{ class: 'payments', min_trust_level: 'OV' }],
  })
  // g-high has precedence 1 (highest priority) so it is applied after g-low (precedence 10).
  const high = layer('group', 'g-high', {
    min_trust_level: 'OV',
    allowed_dids: [A, B],
    rate_limits: [{ did: A, rpm: 10 }],
    operations: [{ pattern: 'GET /v1/**', allowed_dids: [B] }],
  }, { precedence: 1 })
  const low = layer('group', 'g-low', {
    min_trust_level: 'EV',
    denied_dids: [C],
    rate_limits: [{ did: A, rpm: 1 }],
    operations: [{ pattern: 'GET /v1/**', min_trust_level: 'SS' }],
    mcp_tools: [{ tool: 'shell', denied_dids: [A] }],
  }, { precedence: 10 })
  const agent = layer('agent', 'agent-1', {
    allowed_dids: [B, C],
    denied_dids: [A],
    capability_classes: [{ class: 'payments', allowed_dids: [B] }, { class: 'admin', allowed_dids: [] }],
  }, { version: 3 })

  const expected: ResolvedPolicy = {
    min_trust_level: 'OV',
    allowed_dids: [B],
    denied_dids: [A, C, D],
    rate_limits: [{ did: A, rpm: 10 }, { did: B, rpm: 50 }],
    operations: [{ pattern: 'GET /v1/**', allowed_dids: [B] }, { pattern: 'agent.*', denied_dids: [C] }],
    mcp_tools: [{ tool: 'search', allowed_dids: [A] }, { tool: 'shell', denied_dids: [A] }],
    capability_classes: [{ class: 'admin', allowed_dids: [] }, { class: 'payments', allowed_dids: [B] }],
  }
  const expectedLineage = [
    { document_id: 'doc-org-org-1', scope_type: 'org', scope_id: 'org-1', version: 1 },
    { document_id: 'doc-group-g-low', scope_type: 'group', scope_id: 'g-low', version: 1, precedence: 10 },
    { document_id: 'doc-group-g-high', scope_type: 'group', scope_id: 'g-high', version: 1, precedence: 1 },
    { document_id: 'doc-agent-agent-1', scope_type: 'agent', scope_id: 'agent-1', version: 3 },
  ]
  for (const order of [[org, high, low, agent], [agent, low, high, org], [high, agent, org, low]]) {
    const { resolved, lineage } = resolvePolicy(order)
    t.same(resolved, expected, 'resolved map does not depend on input order')
    t.same(lineage, expectedLineage, 'lineage lists org, groups lowest→highest priority, agent')
    t.same(Object.keys(lineage[0] ?? {}), ['document_id', 'scope_type', 'scope_id', 'version'], 'no precedence key on an org entry')
  }
})

t.test('allow-lists intersect; absent everywhere is null; disjoint is []', async (t) => {
  t.equal(resolvePolicy([layer('org', 'o', {}), layer('agent', 'a', { denied_dids: [A] })]).resolved.allowed_dids, null)
  t.same(resolvePolicy([layer('org', 'o', { allowed_dids: [A, B] }), layer('agent', 'a', {})]).resolved.allowed_dids, [A, B], 'a scope without a list does not restrict')
  t.same(resolvePolicy([layer('org', 'o', { allowed_dids: [A, B] }), layer('agent', 'a', { allowed_dids: [C, D] })]).resolved.allowed_dids, [], 'disjoint → nobody')
  t.same(resolvePolicy([layer('org', 'o', { allowed_dids: [] }), layer('agent', 'a', { allowed_dids: [A] })]).resolved.allowed_dids, [], 'an empty list stays empty')
  t.same(
    resolvePolicy([layer('group', 'g', { allowed_dids: [C, A, B, A] }, { precedence: 1 }), layer('agent', 'a', { allowed_dids: [B, C] })]).resolved.allowed_dids,
    [B, C],
    'sorted and deduplicated',
  )
})

t.test('denied lists union', async (t) => {
  const { resolved } = resolvePolicy([
    layer('org', 'o', { denied_dids: [C] }),
    layer('group', 'g', { denied_dids: [A, C] }, { precedence: 1 }),
    layer('agent', 'a', { denied_dids: [B] }),
  ])
  t.same(resolved.denied_dids, [A, B, C])
  t.same(resolvePolicy([layer('org', 'o', {})]).resolved.denied_dids, [])
})

t.test('min_trust_level: the most specific scope that sets it wins, "" included', async (t) => {
  t.equal(resolvePolicy([layer('org', 'o', { min_trust_level: 'EV' }), layer('agent', 'a', { min_trust_level: 'SS' })]).resolved.min_trust_level, 'SS')
  t.equal(resolvePolicy([layer('org', 'o', { min_trust_level: 'EV' }), layer('agent', 'a', {})]).resolved.min_trust_level, 'EV', 'absent does not override')
  t.equal(resolvePolicy([layer('org', 'o', { min_trust_level: 'EV' }), layer('agent', 'a', { min_trust_level: '' })]).resolved.min_trust_level, '', '"" is an explicit no minimum and overrides')
  t.equal(resolvePolicy([layer('org', 'o', { min_trust_level: '' }), layer('agent', 'a', { min_trust_level: 'DV' })]).resolved.min_trust_level, 'DV')
  t.equal(resolvePolicy([layer('org', 'o', {})]).resolved.min_trust_level, null, 'never set → null')
  t.equal(
    resolvePolicy([layer('group', 'g1', { min_trust_level: 'DV' }, { precedence: 1 }), layer('group', 'g2', { min_trust_level: 'EV' }, { precedence: 2 })]).resolved.min_trust_level,
    'DV',
    'the higher-priority group (precedence 1) is applied last and wins',
  )
})

t.test('keyed entries: most specific wins per key, wholesale', async (t) => {
  const { resolved } = resolvePolicy([
    layer('org', 'o', {
      rate_limits: [{ did: B, rpm: 5 }, { did: A, rpm: 5 }],
      operations: [{ pattern: 'GET /x', min_trust_level: 'EV', denied_dids: [A] }, { pattern: 'POST /x', min_trust_level: 'DV' }],
      mcp_tools: [{ tool: 'b', min_trust_level: 'EV', allowed_dids: [A] }, { tool: 'a', min_trust_level: 'REG' }],
      capability_classes: [{ class: 'x.y', denied_dids: [A, B] }, { class: 'x', min_trust_level: 'OV' }],
    }),
    layer('agent', 'a', {
      rate_limits: [{ did: A, rpm: 500 }],
      operations: [{ pattern: 'GET /x', allowed_dids: [B] }],
      mcp_tools: [{ tool: 'b', min_trust_level: 'SS' }],
      capability_classes: [{ class: 'x.y', min_trust_level: '' }],
    }),
  ])
  t.same(resolved.rate_limits, [{ did: A, rpm: 500 }, { did: B, rpm: 5 }])
  t.same(resolved.operations, [{ pattern: 'GET /x', allowed_dids: [B] }, { pattern: 'POST /x', min_trust_level: 'DV' }], 'the agent rule replaces every field of the org rule')
  t.same(resolved.mcp_tools, [{ tool: 'a', min_trust_level: 'REG' }, { tool: 'b', min_trust_level: 'SS' }])
  t.same(resolved.capability_classes, [{ class: 'x', min_trust_level: 'OV' }, { class: 'x.y', min_trust_level: '' }])
})

t.test('tool rules: rpm goes with its entry, and the most specific scope replaces the whole entry', async (t) => {
  const { resolved } = resolvePolicy([
    layer('org', 'o', { mcp_tools: [{ tool: 'fs.*', rpm: 10, min_trust_level: 'DV' }, { tool: 'search', rpm: 60 }, { tool: 'shell', min_trust_level: 'EV' }] }),
    layer('group', 'g', { mcp_tools: [{ tool: 'search', rpm: 5 }, { tool: 'shell', rpm: 1 }] }, { precedence: 1 }),
    layer('agent', 'a', { mcp_tools: [{ tool: 'fs.*', min_trust_level: 'SS' }] }),
  ])
  t.same(resolved.mcp_tools, [
    { tool: 'fs.*', min_trust_level: 'SS' },
    { tool: 'search', rpm: 5 },
    { tool: 'shell', rpm: 1 },
  ], 'the agent rule without rpm drops the org rpm for its pattern; the group rpm replaces the org one')
  const kept = resolvePolicy([layer('org', 'o', { mcp_tools: [{ tool: '*', rpm: 30, denied_dids: [B, A] }] })]).resolved.mcp_tools
  t.strictSame(kept, [{ tool: '*', denied_dids: [A, B], rpm: 30 }])
})

t.test('a later duplicate key inside one document wins', async (t) => {
  const { resolved } = resolvePolicy([layer('org', 'o', { rate_limits: [{ did: A, rpm: 1 }, { did: A, rpm: 2 }] })])
  t.same(resolved.rate_limits, [{ did: A, rpm: 2 }])
})

t.test('group precedence ordering, ties and missing precedence', async (t) => {
  const g = (id: string, precedence: number | undefined, level: MinimumTrustCode): PolicyLayer =>
    layer('group', id, { min_trust_level: level }, precedence === undefined ? {} : { precedence })
  const ids = (layers: PolicyLayer[]): string[] => resolvePolicy(layers).lineage.map((e) => e.scope_id)
  t.same(ids([g('a', 1, 'SS'), g('b', 5, 'SS'), g('c', 3, 'SS')]), ['b', 'c', 'a'], 'descending precedence number')
  t.same(ids([g('z', 2, 'SS'), g('m', 2, 'SS'), g('a', 2, 'SS')]), ['a', 'm', 'z'], 'ties by scope_id ascending')
  t.equal(resolvePolicy([g('z', 2, 'EV'), g('a', 2, 'SS')]).resolved.min_trust_level, 'EV', 'on a tie the greatest scope_id is applied last')
  t.same(ids([g('a', 1, 'SS'), g('u', undefined, 'SS'), g('b', 100, 'SS')]), ['u', 'b', 'a'], 'no precedence = lowest priority')
  t.same(ids([g('a', -5, 'SS'), g('b', 0, 'SS')]), ['b', 'a'], 'negative precedences are the highest priorities')
  t.same(
    resolvePolicy([layer('agent', 'x', {}), g('a', 1, 'SS'), layer('org', 'o', {})]).lineage.map((e) => e.scope_type),
    ['org', 'group', 'agent'],
  )
})

t.test('unknown fields do not leak and inputs are not mutated', async (t) => {
  const doc = { version: '1', operations: [{ pattern: 'a.b', denied_dids: [B, A], note: 'x' }], extra: true } as unknown as PolicyDocument
  const before = structuredClone(doc)
  const { resolved } = resolvePolicy([{ scope_type: 'org', scope_id: 'o', document_id: 'd', version: 1, document: doc }])
  t.same(resolved.operations, [{ pattern: 'a.b', denied_dids: [A, B] }])
  t.notOk('extra' in resolved)
  t.same(doc, before)
})

t.test('unknown scope types are rejected', async (t) => {
  const bad = { ...layer('org', 'o', {}), scope_type: 'team' } as unknown as PolicyLayer
  t.throws(() => resolvePolicy([bad, layer('org', 'p', {})]), TypeError)
})

t.test('code-point order', async (t) => {
  t.ok(compareCodePoints('a', 'b') < 0)
  t.ok(compareCodePoints('b', 'a') > 0)
  t.equal(compareCodePoints('x', 'x'), 0)
  t.ok(compareCodePoints('ab', 'abc') < 0)
  t.ok(compareCodePoints('abc', 'ab') > 0)
  t.ok(compareCodePoints('Z', 'a') < 0)
  t.ok(compareCodePoints('\uffff', '\u{1f600}') < 0, 'U+FFFF sorts before an astral code point, unlike UTF-16 order')
  t.ok('\uffff' > '\u{1f600}', 'which plain < gets the other way round')
})

// ---------------------------------------------------------------------------------------------------
// Properties

const did: fc.Arbitrary<string> = fc.constantFrom(A, B, C, D, 'did:key:z6MkX', 'did:web:other.example')
const didList = fc.uniqueArray(did, { maxLength: 5 })
const trustCode = fc.constantFrom<MinimumTrustCode>('', 'SS', 'REG', 'DV', 'OV', 'EV')
const ruleFields = fc.record({ min_trust_level: trustCode, allowed_dids: didList, denied_dids: didList }, { requiredKeys: [] })
const documentArb: fc.Arbitrary<PolicyDocument> = fc
  .record(
    {
      min_trust_level: trustCode,
      allowed_dids: didList,
      denied_dids: didList,
      rate_limits: fc.array(fc.record({ did, rpm: fc.integer({ min: 1, max: 1000 }) }), { maxLength: 3 }),
      operations: fc.array(fc.tuple(fc.constantFrom('GET /a', '* /**', 'a.*', 'a.b'), ruleFields).map(([pattern, r]) => ({ pattern, ...r })), { maxLength: 3 }),
      mcp_tools: fc.array(
        fc.tuple(fc.constantFrom('t1', 't*'), ruleFields, fc.option(fc.integer({ min: 1, max: 1000 }), { nil: undefined }))
          .map(([tool, r, rpm]) => ({ tool, ...r, ...(rpm === undefined ? {} : { rpm }) })),
        { maxLength: 2 },
      ),
      capability_classes: fc.array(fc.tuple(fc.constantFrom('x', 'x.y'), ruleFields).map(([c, r]) => ({ class: c, ...r })), { maxLength: 2 }),
    },
    { requiredKeys: [] },
  )
  .map((d) => ({ version: '1' as const, ...d }))
const layerArb: fc.Arbitrary<PolicyLayer> = fc
  .record({
    scope_type: fc.constantFrom<PolicyLayer['scope_type']>('org', 'group', 'agent'),
    scope_id: fc.constantFrom('s1', 's2', 's3'),
    precedence: fc.integer({ min: -3, max: 3 }),
    version: fc.integer({ min: 1, max: 9 }),
    document: documentArb,
  })
  .map(({ scope_type, scope_id, precedence, version, document }) => {
    const out: PolicyLayer = { scope_type, scope_id, document_id: `${scope_type}:${scope_id}:${version}`, version, document }
    if (scope_type === 'group') out.precedence = precedence
    return out
  })

t.test('property: adding a layer with an allow-list never grows the intersection', async (t) => {
  fc.assert(
    fc.property(fc.array(layerArb, { maxLength: 4 }), layerArb, didList, (layers, extra, list) => {
      const added: PolicyLayer = { ...extra, document: { ...extra.document, allowed_dids: list } }
      const before = resolvePolicy(layers).resolved.allowed_dids
      const after = resolvePolicy([...layers, added]).resolved.allowed_dids
      if (after === null) return false
      if (!after.every((x) => list.includes(x))) return false
      return before === null || after.every((x) => before.includes(x))
    }),
    { numRuns: 300 },
  )
  t.pass('300 runs')
})

t.test('property: adding a layer never shrinks denied_dids', async (t) => {
  fc.assert(
    fc.property(fc.array(layerArb, { maxLength: 4 }), layerArb, (layers, extra) => {
      const before = resolvePolicy(layers).resolved.denied_dids
      const after = resolvePolicy([...layers, extra]).resolved.denied_dids
      return before.every((x) => after.includes(x)) && (extra.document.denied_dids ?? []).every((x) => after.includes(x))
    }),
    { numRuns: 300 },
  )
  t.pass('300 runs')
})

t.test('property: the merge of one layer is that layer normalized', async (t) => {
  const sorted = (xs: readonly string[]): string[] => [...new Set(xs)].sort(compareCodePoints)
  const rule = (r: PolicyRule): PolicyRule => {
    const out: PolicyRule = {}
    if (r.min_trust_level !== undefined) out.min_trust_level = r.min_trust_level
    if (r.allowed_dids !== undefined) out.allowed_dids = sorted(r.allowed_dids)
    if (r.denied_dids !== undefined) out.denied_dids = sorted(r.denied_dids)
    return out
  }
  // Later duplicates replace earlier ones, then entries are sorted by key.
  const keyed = <T>(xs: readonly T[], key: (x: T) => string, norm: (x: T) => T): T[] => {
    const map = new Map<string, T>()
    for (const x of xs) map.set(key(x), norm(x))
    return [...map.keys()].sort(compareCodePoints).map((k) => map.get(k) as T)
  }
  fc.assert(
    fc.property(layerArb, (single) => {
      const d = single.document
      const expected: ResolvedPolicy = {
        min_trust_level: d.min_trust_level ?? null,
        allowed_dids: d.allowed_dids === undefined ? null : sorted(d.allowed_dids),
        denied_dids: sorted(d.denied_dids ?? []),
        rate_limits: keyed(d.rate_limits ?? [], (x) => x.did, (x) => ({ did: x.did, rpm: x.rpm })),
        operations: keyed(d.operations ?? [], (x) => x.pattern, (x) => ({ pattern: x.pattern, ...rule(x) })),
        mcp_tools: keyed(d.mcp_tools ?? [], (x) => x.tool, (x) => ({ tool: x.tool, ...rule(x), ...(x.rpm === undefined ? {} : { rpm: x.rpm }) })),
        capability_classes: keyed(d.capability_classes ?? [], (x) => x.class, (x) => ({ class: x.class, ...rule(x) })),
      }
      const { resolved, lineage } = resolvePolicy([single])
      return isDeepStrictEqual(resolved, expected) && lineage.length === 1 && lineage[0]?.document_id === single.document_id
    }),
    { numRuns: 300 },
  )
  t.pass('300 runs')
})

t.test('property: the result does not depend on the order of the layers', async (t) => {
  fc.assert(
    fc.property(
      fc.uniqueArray(layerArb, { maxLength: 5, selector: (l) => `${l.scope_type}/${l.scope_id}` }),
      fc.infiniteStream(fc.nat()),
      (layers, picks) => {
        const shuffled = [...layers]
        for (let i = shuffled.length - 1; i > 0; i--) {
          const j = (picks.next().value as number) % (i + 1)
          ;[shuffled[i], shuffled[j]] = [shuffled[j] as PolicyLayer, shuffled[i] as PolicyLayer]
        }
        return JSON.stringify(resolvePolicy(layers)) === JSON.stringify(resolvePolicy(shuffled))
      },
    ),
    { numRuns: 200 },
  )
  t.pass('200 runs')
})
