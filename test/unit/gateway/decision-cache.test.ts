/**
 * The gateway's decision cache (docs/wire-contract.md §8): only ALLOW with a positive TTL is kept, until
 * min(now + ttl, notAfter); the key separates every field.
 */
import fc from 'fast-check'
import t from 'tap'
import { DecisionCache } from '../../../src/gateway/decision-cache.js'
import type { PdpAnswer } from '../../../src/gateway/pdp/pdp.js'

const NOW = 1_800_000_000_000
const FAR = NOW + 24 * 3600_000
const allow = (ttl = 60, decisionId = 'd-allow'): PdpAnswer => ({ outcome: 'ALLOW', decisionId, obligations: [], ttl })
const KEY = DecisionCache.key('b1', 'GET', '/x?q=1', 'EM-GUARD', '')

t.test('an ALLOW is cached and returned as is', async (t) => {
  const cache = new DecisionCache()
  const answer = allow(60)
  t.equal(cache.get(KEY, NOW), undefined, 'empty cache')
  cache.set(KEY, answer, NOW, FAR)
  t.equal(cache.get(KEY, NOW + 1), answer)
})

t.test('DENY, UNAVAILABLE and a zero or negative TTL are never cached', async (t) => {
  const cache = new DecisionCache()
  cache.set(KEY, { outcome: 'DENY', decisionId: 'd-deny', obligations: [], ttl: 60 }, NOW, FAR)
  t.equal(cache.get(KEY, NOW), undefined, 'DENY, even with a TTL')
  cache.set(KEY, { outcome: 'UNAVAILABLE', reason: 'timeout' }, NOW, FAR)
  t.equal(cache.get(KEY, NOW), undefined, 'UNAVAILABLE')
  cache.set(KEY, allow(0), NOW, FAR)
  t.equal(cache.get(KEY, NOW), undefined, 'ttl 0')
  cache.set(KEY, allow(-5), NOW, FAR)
  t.equal(cache.get(KEY, NOW), undefined, 'negative ttl')
})

t.test('a DENY does not evict a cached ALLOW (it is just not stored)', async (t) => {
  const cache = new DecisionCache()
  const answer = allow(60)
  cache.set(KEY, answer, NOW, FAR)
  cache.set(KEY, { outcome: 'DENY', decisionId: 'd-deny', obligations: [], ttl: 0 }, NOW, FAR)
  t.equal(cache.get(KEY, NOW), answer)
})

t.test('expiry is min(now + ttl, notAfter)', async (t) => {
  const byTtl = new DecisionCache()
  byTtl.set(KEY, allow(60), NOW, FAR)
  t.ok(byTtl.get(KEY, NOW + 59_999), 'just before the TTL')
  t.equal(byTtl.get(KEY, NOW + 60_000), undefined, 'at the TTL it is gone')
  t.equal(byTtl.get(KEY, NOW), undefined, 'and was deleted, not merely hidden')

  const byNotAfter = new DecisionCache()
  byNotAfter.set(KEY, allow(60), NOW, NOW + 5_000)
  t.ok(byNotAfter.get(KEY, NOW + 4_999), 'just before the badge expiry')
  t.equal(byNotAfter.get(KEY, NOW + 5_000), undefined, 'at the badge expiry it is gone')

  const alreadyOver = new DecisionCache()
  alreadyOver.set(KEY, allow(60), NOW, NOW)
  t.equal(alreadyOver.get(KEY, NOW - 1), undefined, 'notAfter not after now: not stored at all')
  alreadyOver.set(KEY, allow(60), NOW, NOW - 1000)
  t.equal(alreadyOver.get(KEY, NOW - 2000), undefined)
})

t.test('clear() and the entry bound', async (t) => {
  const cache = new DecisionCache(2)
  const keys = ['a', 'b', 'c'].map((subject) => DecisionCache.key(subject, 'GET', '/', 'EM-GUARD', ''))
  cache.set(keys[0]!, allow(), NOW, FAR)
  cache.set(keys[1]!, allow(), NOW, FAR)
  cache.clear()
  t.equal(cache.get(keys[0]!, NOW), undefined)
  t.equal(cache.get(keys[1]!, NOW), undefined)
  for (const key of keys) cache.set(key, allow(), NOW, FAR)
  t.equal(cache.get(keys[0]!, NOW), undefined, 'least recently used entry evicted beyond the bound')
  t.ok(cache.get(keys[2]!, NOW))
})

t.test('every key field separates entries', async (t) => {
  const base = ['b1', 'GET', '/x', 'EM-GUARD', ''] as const
  const cache = new DecisionCache()
  cache.set(DecisionCache.key(...base), allow(), NOW, FAR)
  t.ok(cache.get(DecisionCache.key(...base), NOW))
  const variants: [number, string][] = [[0, 'b2'], [1, 'POST'], [2, '/x?y=1'], [3, 'EM-STRICT'], [4, 'env-1']]
  for (const [index, value] of variants) {
    const fields = [...base] as string[]
    fields[index] = value
    const key = DecisionCache.key(...(fields as [string, string, string, string, string]))
    t.not(key, DecisionCache.key(...base))
    t.equal(cache.get(key, NOW), undefined, `field ${index} changed → no hit`)
  }
})

t.test('property: distinct field tuples (without NUL) give distinct keys', async (t) => {
  const field = fc.string({ maxLength: 8 }).filter((s) => !s.includes('\u0000'))
  const tuple = fc.tuple(field, field, field, field, field)
  fc.assert(fc.property(tuple, tuple, (a, b) => {
    const same = a.every((v, i) => v === b[i])
    return (DecisionCache.key(...a) === DecisionCache.key(...b)) === same
  }), { numRuns: 500 })
  t.pass('no collisions')
})
