import t from 'tap'
import { generateApiKeySecret } from '../../../../src/core/api-key.js'
import { WorkerCredentials } from '../../../../src/admin/services/worker-credentials.js'

const WORKSPACE = '0190f5a4-7c1e-7d3a-9f00-000000000001'

t.test('each worker\'s secret resolves to its own principal; anything else, or after forget(), to none', async (t) => {
  const credentials = new WorkerCredentials(WORKSPACE)
  const one = credentials.issue(1)
  const two = credentials.issue(2)
  t.not(one, two)
  t.match(one, /^sk_[A-Za-z0-9_-]{43}$/, 'shaped like an API key, so public routes identify the caller by it')
  t.same(await credentials.resolver(one), { kind: 'api_key', orgId: WORKSPACE, role: 'member', operator: true, userId: null, keyId: 'gateway-worker-1' })
  t.equal((await credentials.resolver(two))?.keyId, 'gateway-worker-2', 'its own rate-limit budget')
  t.equal(await credentials.resolver(generateApiKeySecret()), null, 'another secret is not known')
  t.equal(await credentials.resolver(`${one}x`), null)
  const replaced = credentials.issue(1)
  t.equal(await credentials.resolver(one), null, 'a restarted worker\'s new secret replaces the old one')
  t.equal((await credentials.resolver(replaced))?.keyId, 'gateway-worker-1')
  credentials.forget()
  t.equal(await credentials.resolver(replaced), null, 'nothing works once forgotten')
  t.equal(await credentials.resolver(two), null)
})

t.test('without a workspace the principal\'s organization is one that cannot exist', async (t) => {
  const credentials = new WorkerCredentials(null)
  t.equal((await credentials.resolver(credentials.issue(1)))?.orgId, '00000000-0000-0000-0000-000000000000')
})
