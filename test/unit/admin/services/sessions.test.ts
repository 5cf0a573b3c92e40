import t from 'tap'
import { loadConfig } from '../../../../src/config/index.js'
import type { Database } from '../../../../src/db/database.js'
import { createSessionResolver } from '../../../../src/admin/services/sessions.js'

// The resolver never touches the database for credentials it does not own, so none is needed here.
const noDatabase = null as unknown as Database

t.test('which settings turn dashboard sign-in on', async (t) => {
  t.equal(createSessionResolver(loadConfig({ DATABASE_URL: 'memory://' }), noDatabase), null, 'nothing configured: off')
  for (const [name, env] of [
    ['SERVICE_AUTH_JWKS_URL', { SERVICE_AUTH_JWKS_URL: 'https://idp.example/.well-known/jwks.json' }],
    ['CLERK_SECRET_KEY alone (the JWKS comes from Clerk\'s API)', { CLERK_SECRET_KEY: 'sk_test_abc' }],
  ] as const) {
    const resolver = createSessionResolver(loadConfig({ DATABASE_URL: 'memory://', ...env }), noDatabase)
    t.type(resolver, 'function', `${name}: on`)
    t.equal(await resolver?.(`sk_${'A'.repeat(43)}`), null, `${name}: API keys are not session tokens`)
    t.equal(await resolver?.('not-a-jwt'), null, `${name}: non-JWT credentials are ignored`)
  }
})
