/**
 * A client assertion is redeemed once across instances (docs/api.md §4.10): two appliances
 * (`agent-trust serve`, A and B) on one PostgreSQL schema receive the same assertion at the token
 * endpoint, at the same time and one after the other; exactly one badge is issued for it, and the
 * other answer is 400 invalid_client. The guard is the database (an advisory lock and a unique index on
 * the assertion's jti per subject), not either process's memory.
 *
 * PGlite is a single-process database, so the file is skipped with SERVICE_TEST_DB=pglite.
 */
import t from 'tap'
import { randomUUID, sign } from 'node:crypto'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { generateApiKeySecret } from '../../src/core/api-key.js'
import { bootstrap, BOOTSTRAP_KEY_FILE } from '../../src/admin/services/credentials.js'
import { loadOrCreateKeyFile } from '../../src/authority/key-ring.js'
import { adminCall, exitSafeTeardown, SLOW_START, startService, type RunningService } from '../helpers/appliance.js'
import { BACKEND, createTestDatabase } from '../helpers/database.js'
import { ed25519Identity } from '../helpers/fixtures.js'

t.setTimeout(300_000)

const ISSUER = 'http://registry.test'
const JWT_BEARER = 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer'
const ROUNDS = 4

const b64 = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString('base64url')

async function postToken(instance: RunningService, assertion: string): Promise<{ status: number; body: any }> {
  const res = await fetch(`${instance.adminUrl}/oauth/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ grant_type: 'client_credentials', client_assertion_type: JWT_BEARER, client_assertion: assertion }),
  })
  return { status: res.status, body: await res.json() }
}

if (BACKEND === 'pglite') {
  t.test('oauth replay across instances', { skip: 'SERVICE_TEST_DB=pglite: an embedded PGlite database cannot be shared between processes' }, () => {})
} else {
  const teardown = exitSafeTeardown(t)
  const operatorKey = generateApiKeySecret()
  const dir = mkdtempSync(path.join(tmpdir(), 'svc-e2e-oauth-'))
  // Bootstrapped and keyed before either instance starts, so that they do not race to create either.
  const database = await createTestDatabase(t)
  await bootstrap(database.db, { configuredKey: operatorKey, keyFile: path.join(dir, BOOTSTRAP_KEY_FILE) })
  const caKeyPath = path.join(dir, 'ca-keys.json')
  await loadOrCreateKeyFile(caKeyPath)
  const shared = { DATABASE_URL: database.url as string, SERVICE_BOOTSTRAP_API_KEY: operatorKey, CA_KEY_PATH: caKeyPath, CA_ISSUER_URL: ISSUER }
  const [a, b] = await Promise.all([startService(teardown, shared, SLOW_START), startService(teardown, shared, SLOW_START)]) as [RunningService, RunningService]

  const identity = ed25519Identity()
  const created = await adminCall(a.adminUrl, operatorKey, 'POST', '/v1/agents', { name: 'oauth-replay', did: identity.didKey })
  if (created.status !== 201) throw new Error(`agent creation failed: ${created.status}`)

  const assertionFor = (jti: string): string => {
    const iat = Math.floor(Date.now() / 1000)
    const input = `${b64({ alg: 'EdDSA', typ: 'JWT' })}.${b64({ iss: identity.didKey, sub: identity.didKey, aud: ISSUER, iat, exp: iat + 300, jti })}`
    return `${input}.${sign(null, Buffer.from(input), identity.privateKey).toString('base64url')}`
  }
  const badgesFor = async (jti: string): Promise<number> => {
    const rows = await database.db.query<{ n: number }>('SELECT count(*)::int AS n FROM badges WHERE client_assertion_jti = $1', [jti])
    return Number(rows[0]?.n ?? -1)
  }

  t.test('the same assertion at A and B at once: one badge', async (t) => {
    for (let round = 0; round < ROUNDS; round++) {
      const jti = randomUUID()
      const assertion = assertionFor(jti)
      const answers = await Promise.all([postToken(a, assertion), postToken(b, assertion)])
      const statuses = answers.map((r) => r.status).sort()
      t.same(statuses, [200, 400], `round ${round}: one token, one refusal`)
      const refused = answers.find((r) => r.status === 400)
      t.equal(refused?.body.error, 'invalid_client', `round ${round}: the refusal is invalid_client`)
      t.match(refused?.body.error_description, /already used/, `round ${round}: because the assertion was used`)
      t.equal(await badgesFor(jti), 1, `round ${round}: exactly one badge recorded`)
    }
  })

  t.test('the same assertion at A, then at B (and the other way): one badge', async (t) => {
    for (const [first, second, label] of [[a, b, 'A then B'], [b, a, 'B then A']] as const) {
      const jti = randomUUID()
      const assertion = assertionFor(jti)
      const one = await postToken(first, assertion)
      t.equal(one.status, 200, `${label}: the first answers a token`)
      t.equal(one.body.token_type, 'Bearer')
      const two = await postToken(second, assertion)
      t.equal(two.status, 400, `${label}: the second is refused`)
      t.equal(two.body.error, 'invalid_client')
      t.equal(await badgesFor(jti), 1, `${label}: exactly one badge recorded`)
    }
  })
}
