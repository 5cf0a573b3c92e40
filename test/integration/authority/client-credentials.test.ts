/**
 * The storage under the OAuth token endpoint (migration 007, docs/api.md §4.10), on PostgreSQL and on
 * PGlite alike: the migration over existing rows, one badge per (subject, assertion jti), the per-DID
 * window and the index that serves it, the org allow-list, cross-org agent lookup, and the unique index
 * refusing a replay even when the check before it is defeated.
 */
import t from 'tap'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { randomUUID, sign } from 'node:crypto'
import { exchangeClientCredentials, type ClientCredentialsContext } from '../../../src/authority/client-credentials.js'
import { DidResolver } from '../../../src/authority/did-resolver.js'
import { IssuanceBatcher } from '../../../src/authority/issuance-batcher.js'
import { KeyRing } from '../../../src/authority/key-ring.js'
import { agentDidWebPrefix } from '../../../src/core/did.js'
import { OAuthError } from '../../../src/core/oauth-error.js'
import { sqlState, UNIQUE_VIOLATION, type Database, type Queryable } from '../../../src/db/database.js'
import { loadMigrations, migrate } from '../../../src/db/migrate.js'
import * as agents from '../../../src/db/repositories/agents.js'
import * as badges from '../../../src/db/repositories/badges.js'
import * as organizations from '../../../src/db/repositories/organizations.js'
import { createTestDatabase } from '../../helpers/database.js'
import { ed25519Identity } from '../../helpers/fixtures.js'

const ISSUER = 'http://registry.test:8080'
const REGISTRY_DID_HOST = 'registry.test%3A8080'
const ORG_A = '11111111-1111-4111-8111-111111111111'
const ORG_B = '22222222-2222-4222-8222-222222222222'

function badge(subject: string, agentId: string, overrides: Partial<badges.NewBadge> = {}): badges.NewBadge {
  const issuedAt = new Date()
  return {
    jti: randomUUID(), agentId, orgId: ORG_A, subject, trustLevel: 1, ial: '1', kid: 'service-ca-1', popChallengeId: null,
    clientAssertionJti: null, issuedAt, expiresAt: new Date(issuedAt.getTime() + 300_000), ...overrides,
  }
}

async function failure(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise
  } catch (error) {
    return error
  }
  return null
}

t.test('migration 007 over existing rows, and the repositories', async (t) => {
  const database = await createTestDatabase(t, { migrate: false })
  const db = database.db
  await migrate(db, loadMigrations().slice(0, 6))
  await db.query("INSERT INTO organizations (id, name) VALUES ($1, 'a'), ($2, 'b')", [ORG_A, ORG_B])
  const did = ed25519Identity().didKey
  const agentA = randomUUID()
  await db.query('INSERT INTO agents (id, org_id, name, did) VALUES ($1, $2, $3, $4)', [agentA, ORG_B, 'in-b', did])
  const legacyJti = randomUUID()
  await db.query(
    `INSERT INTO badges (jti, agent_id, org_id, subject, trust_level, ial, kid, issued_at, expires_at)
     VALUES ($1, $2, $3, $4, 1, '0', 'k', now(), now() + interval '5 minutes')`, [legacyJti, agentA, ORG_B, did])

  t.equal((await migrate(db))[0], 7, 'migration 007 applies (and those after it)')
  t.same((await badges.findBadge(db, legacyJti))?.client_assertion_jti, null, 'existing badges have no assertion jti')
  t.same(await organizations.findTokenAudiences(db, ORG_A), [], 'existing organizations start closed')

  await t.test('one badge per subject and assertion jti', async (t) => {
    const other = ed25519Identity().didKey
    await badges.insertBadge(db, badge(did, agentA, { clientAssertionJti: 'jti-1' }))
    const second = await failure(badges.insertBadge(db, badge(did, agentA, { clientAssertionJti: 'jti-1' })))
    t.equal(sqlState(second), UNIQUE_VIOLATION, 'the same jti for the same subject is refused by the index')
    await badges.insertBadge(db, badge(other, agentA, { clientAssertionJti: 'jti-1' }))
    t.pass('the same jti for another subject is accepted')
    await badges.insertBadge(db, badge(did, agentA))
    await badges.insertBadge(db, badge(did, agentA))
    t.pass('badges without an assertion jti are not constrained')
  })

  await t.test('the per-DID window counts the token endpoint\'s recent badges of the subject only', async (t) => {
    const subject = ed25519Identity().didKey
    const old = new Date(Date.now() - 400_000)
    await badges.insertBadge(db, badge(subject, agentA, { clientAssertionJti: 'old', issuedAt: old, expiresAt: new Date(old.getTime() + 300_000) }))
    await badges.insertBadge(db, badge(subject, agentA))
    const recent = new Date(Date.now() - 60_000)
    await badges.insertBadge(db, badge(subject, agentA, { clientAssertionJti: 'r1', issuedAt: recent }))
    await badges.insertBadge(db, badge(subject, agentA, { clientAssertionJti: 'r2' }))
    await badges.insertBadge(db, badge(ed25519Identity().didKey, agentA, { clientAssertionJti: 'elsewhere' }))
    const window = await badges.clientCredentialsWindow(db, subject, 300)
    t.equal(window.count, 2, 'older badges, other routes\' badges and other subjects are not counted')
    t.equal(window.oldest?.getTime(), recent.getTime(), 'oldest is the first badge inside the window')

    // A subject's history grows by up to 10 badges every 5 minutes: the count must read the window
    // only, through its own index, not every badge the subject was ever issued.
    await db.query(
      `INSERT INTO badges (jti, agent_id, org_id, subject, trust_level, ial, kid, client_assertion_jti, issued_at, expires_at)
       SELECT 'hist-' || n, $1, $2, $3, 1, '1', 'k', 'hist-' || n, now() - make_interval(days => 1, secs => n), now() - interval '1 day'
       FROM generate_series(1, 5000) AS n`, [agentA, ORG_A, subject])
    await db.query('ANALYZE badges')
    t.equal((await badges.clientCredentialsWindow(db, subject, 300)).count, 2, 'the history is outside the window')
    const plan = await db.transaction(async (tx) => {
      let captured: { text: string; params: readonly unknown[] } | null = null
      const spy: Queryable = {
        query: async <T>(text: string, params: readonly unknown[] = []) => {
          captured = { text, params }
          return [{ count: 0, oldest: null, now: new Date() }] as T[]
        },
        exec: async () => {},
      }
      await badges.clientCredentialsWindow(spy, subject, 300)
      const statement = captured as unknown as { text: string; params: readonly unknown[] }
      return tx.query<{ 'QUERY PLAN': string }>(`EXPLAIN ${statement.text}`, statement.params)
    })
    t.match(plan.map((row) => row['QUERY PLAN']).join('\n'), /badges_client_credentials_window_idx/, 'the window index serves the count')
  })

  await t.test('the allow-list and cross-org agent lookup', async (t) => {
    t.same(await organizations.setTokenAudiences(db, ORG_A, ['https://mcp.example.com/mcp', 'billing', 'ünï']), ['https://mcp.example.com/mcp', 'billing', 'ünï'])
    t.same(await organizations.findTokenAudiences(db, ORG_A), ['https://mcp.example.com/mcp', 'billing', 'ünï'], 'round trip of a text[]')
    t.same(await organizations.findTokenAudiences(db, ORG_B), [], 'the other org is untouched')
    t.same(await organizations.setTokenAudiences(db, ORG_A, []), [])
    t.equal(await organizations.findTokenAudiences(db, randomUUID()), null, 'an unknown org')
    t.equal(await organizations.setTokenAudiences(db, randomUUID(), ['x']), null)
    t.equal((await agents.findAgentByDid(db, did))?.id, agentA, 'found by DID whatever the org')
    t.equal(await agents.findAgentByDid(db, ed25519Identity().didKey), null)
  })
})

/** The database with the replay pre-check defeated: its query answers "not used", so only the index is left. */
function withoutReplayCheck(db: Database): Database {
  const wrap = (q: Queryable): Queryable => ({
    query: (text, params, options) => (text.includes('client_assertion_jti = $2') ? Promise.resolve([]) : q.query(text, params, options)),
    exec: (script) => q.exec(script),
  })
  return { ...db, ...wrap(db), kind: db.kind, transaction: (work) => db.transaction((tx) => work(wrap(tx))), listen: db.listen.bind(db), ping: db.ping.bind(db), close: db.close.bind(db) }
}

t.test('the unique index refuses a replay the check before it let through', async (t) => {
  const { db } = await createTestDatabase(t)
  const keyRing = await KeyRing.open(path.join(mkdtempSync(path.join(tmpdir(), 'svc-cc-')), 'ca-keys.json'))
  t.teardown(() => keyRing.close())
  await db.query("INSERT INTO organizations (id, name) VALUES ($1, 'a')", [ORG_A])
  const identity = ed25519Identity()
  await agents.insertAgent(db, { id: randomUUID(), orgId: ORG_A, name: 'replayer', domain: null, description: null, did: identity.didKey, publicKeyJwk: null, agentCard: null })
  const defeated = withoutReplayCheck(db)
  const ctx: ClientCredentialsContext = {
    db: defeated, keyRing, issuer: ISSUER, registryDidHost: REGISTRY_DID_HOST,
    issuance: new IssuanceBatcher(defeated, agentDidWebPrefix(REGISTRY_DID_HOST)),
    resolver: new DidResolver({ db, registryDidHost: REGISTRY_DID_HOST }),
  }
  const iat = Math.floor(Date.now() / 1000)
  const b64 = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString('base64url')
  const input = `${b64({ alg: 'EdDSA', typ: 'JWT' })}.${b64({ iss: identity.didKey, sub: identity.didKey, aud: ISSUER, iat, exp: iat + 300, jti: 'once' })}`
  const form = {
    grant_type: 'client_credentials',
    client_assertion_type: 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer',
    client_assertion: `${input}.${sign(null, Buffer.from(input), identity.privateKey).toString('base64url')}`,
  }
  const first = await exchangeClientCredentials(ctx, { form, authorizationHeader: false })
  t.equal(first.token_type, 'Bearer')
  const second = await failure(exchangeClientCredentials(ctx, { form, authorizationHeader: false }))
  t.ok(second instanceof OAuthError, 'refused')
  t.equal((second as OAuthError).code, 'invalid_client')
  t.match((second as OAuthError).message, /already used/)
  const rows = await db.query<{ n: number }>("SELECT count(*)::int AS n FROM badges WHERE client_assertion_jti = 'once'")
  t.equal(Number(rows[0]?.n), 1, 'one badge')
})
