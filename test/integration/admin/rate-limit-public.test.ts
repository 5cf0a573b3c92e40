/**
 * Public routes count anonymous callers per address, but a valid X-Service-Registry-Key (gateways send
 * it when they sync revocations) gets the key's own budget, so gateways behind one address do not
 * starve each other; an invalid key changes nothing and never fails the public route.
 */
import t from 'tap'
import { startTestAdmin } from '../../helpers/admin.js'

t.test('a registry key on a public route is counted against the key, not the address', async (t) => {
  const admin = await startTestAdmin(t, { SERVICE_RATE_LIMIT_PER_MINUTE: '5' })
  const remaining = (res: { headers: Headers }): number => Number(res.headers.get('x-ratelimit-remaining'))

  const first = await admin.request('GET', '/v1/revocations', { key: null })
  t.equal(first.status, 200)
  t.equal(remaining(first), 4, 'an anonymous caller spends the address budget')

  const keyed = await admin.request('GET', '/v1/revocations', { key: null, headers: { 'x-service-registry-key': admin.operatorKey } })
  t.equal(keyed.status, 200)
  t.equal(remaining(keyed), 4, 'a valid registry key starts its own budget')

  const bogus = await admin.request('GET', '/v1/revocations', { key: null, headers: { 'x-service-registry-key': 'sk_' + 'x'.repeat(43) } })
  t.equal(bogus.status, 200, 'an invalid key does not fail a public route')
  t.equal(remaining(bogus), 3, 'and counts against the address like any anonymous call')

  for (let i = 0; i < 3; i++) await admin.request('GET', '/v1/revocations', { key: null })
  const exhausted = await admin.request('GET', '/v1/revocations', { key: null })
  t.equal(exhausted.status, 429, 'the address budget runs out')
  const stillKeyed = await admin.request('GET', '/v1/revocations', { key: null, headers: { 'x-service-registry-key': admin.operatorKey } })
  t.equal(stillKeyed.status, 200, 'while the keyed caller keeps its own')
  t.equal(remaining(stillKeyed), 3)
})
