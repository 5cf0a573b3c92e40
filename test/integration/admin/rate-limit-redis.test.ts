import t from 'tap'
import { startTestAdmin } from '../../helpers/admin.js'
import { createTestDatabase } from '../../helpers/database.js'

const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379'

t.test('two instances sharing Redis enforce one per-key limit', async (t) => {
  const database = await createTestDatabase(t)
  const env = { REDIS_URL, SERVICE_RATE_LIMIT_PER_MINUTE: '6' }
  const one = await startTestAdmin(t, env, { database })
  const two = await startTestAdmin(t, { ...env, SERVICE_BOOTSTRAP_API_KEY: one.operatorKey }, { database })

  const statuses: number[] = []
  for (let i = 0; i < 6; i++) {
    const instance = i % 2 === 0 ? one : two
    const res = await instance.request('GET', '/v1/agents')
    statuses.push(res.status)
    t.equal(res.headers.get('x-ratelimit-remaining'), String(5 - i), `request ${i + 1} sees the shared counter`)
  }
  t.same(statuses, [200, 200, 200, 200, 200, 200])
  const over = await two.request('GET', '/v1/agents')
  t.equal(over.status, 429, 'the seventh request is refused whichever instance takes it')
  t.equal(over.body.error, 'rate_limit_exceeded')
  t.ok(Number(over.headers.get('retry-after')) > 0, 'with Retry-After')
  const reset = Number(over.headers.get('x-ratelimit-reset'))
  const now = Math.floor(Date.now() / 1000)
  t.ok(reset >= now && reset <= now + 61, 'X-RateLimit-Reset is a Unix time within the window')
})
