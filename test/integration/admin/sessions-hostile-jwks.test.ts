/**
 * The identity provider's JWKS is peer input: a body over the cap or a key set with too many keys is
 * refused (503 `service_unavailable`, as for an unreachable provider) instead of being read whole into
 * memory and searched key by key. The real provider's key is served through a JWKS server of the
 * test's own, padded or multiplied as each case needs.
 */
import t from 'tap'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { MAX_IDP_JWKS_BYTES, MAX_IDP_JWKS_KEYS } from '../../../src/admin/services/sessions.js'
import { createOrg, startTestAdmin } from '../../helpers/admin.js'
import { expectError } from '../../helpers/expect.js'
import { startIdentityProvider, TEST_ISSUER } from '../../helpers/identity-provider.js'

t.setTimeout(180_000)

t.test('a JWKS over the size or key-count bound is refused; one within them is used', async (t) => {
  const idp = await startIdentityProvider(t)
  const real = (await (await fetch(idp.jwksUrl)).json()) as { keys: Record<string, unknown>[] }
  let document: unknown = real
  let chunked = false
  const server = createServer((_req, res) => {
    const body = JSON.stringify(document)
    // chunked: no content-length, so only the running count can stop the read
    res.writeHead(200, chunked ? { 'content-type': 'application/json' } : { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) })
    res.end(body)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => {
    server.closeAllConnections()
    server.close(() => resolve())
  }))
  const jwksUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}/jwks.json`

  const cases: [string, unknown, boolean, boolean][] = [
    ['padded past the cap (content-length)', { ...real, pad: 'x'.repeat(MAX_IDP_JWKS_BYTES) }, false, false],
    ['padded past the cap (chunked)', { ...real, pad: 'x'.repeat(MAX_IDP_JWKS_BYTES) }, true, false],
    ['too many keys', { keys: [...Array.from({ length: MAX_IDP_JWKS_KEYS }, (_, i) => ({ ...real.keys[0], kid: `other-${i}` })), real.keys[0]] }, false, false],
    ['within the bounds', { keys: [...Array.from({ length: MAX_IDP_JWKS_KEYS - 1 }, (_, i) => ({ ...real.keys[0], kid: `other-${i}` })), real.keys[0]] }, true, true],
  ]
  for (const [label, served, useChunks, usable] of cases) {
    document = served
    chunked = useChunks
    // a fresh admin plane per case: the JWKS is cached once fetched
    const admin = await startTestAdmin(t, { SERVICE_AUTH_JWKS_URL: jwksUrl, SERVICE_AUTH_ISSUER: TEST_ISSUER })
    const org = await createOrg(admin, `org-${label.replace(/\W+/g, '-')}`)
    await admin.database.db.query('INSERT INTO users (id, email) VALUES ($1, $2)', ['user_jwks', 'jwks@example.com'])
    await admin.database.db.query('INSERT INTO memberships (org_id, user_id, role) VALUES ($1, $2, $3)', [org.orgId, 'user_jwks', 'member'])
    const res = await admin.request('GET', '/v1/agents', { key: await idp.signSession({ sub: 'user_jwks' }) })
    if (usable) t.equal(res.status, 200, `${label}: the token verifies`)
    else expectError(t, res, 503, 'service_unavailable', label)
    t.equal((await admin.request('GET', '/healthz')).status, 200, `${label}: the admin plane is up`)
  }
})
