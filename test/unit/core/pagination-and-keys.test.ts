import t from 'tap'
import { apiKeyPrefix, digestsEqual, generateApiKeySecret, hashApiKeySecret, looksLikeApiKey } from '../../../src/core/api-key.js'
import { ServiceError } from '../../../src/core/errors.js'
import { decodeCursor, encodeCursor, toPage } from '../../../src/core/pagination.js'
import { agentDidWeb, isDid, ownAgentIdFromDid } from '../../../src/core/did.js'
import { loadMigrations } from '../../../src/db/migrate.js'

t.test('cursors round-trip and reject anything else', async (t) => {
  const position = { createdAt: '2026-11-21T15:40:16.123Z', id: '3f3c3af6-4605-4a1a-b27d-ec920f8742b1' }
  t.same(decodeCursor(encodeCursor('agents', position), 'agents'), position)
  t.equal(decodeCursor(undefined, 'agents'), null)
  t.equal(decodeCursor('', 'agents'), null)
  const encoded = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString('base64url')
  for (const bad of [
    'zzz', 'not base64!', encoded([1, 2]), encoded(['not a date', 'x']), 'A'.repeat(300),
    encoded(['2020-01-01T00:00:00.000Z', 'abc']), encoded(['1', position.id]), encoded(['2020-13-45T00:00:00.000Z', position.id]),
    // the old two-element form, and positions PostgreSQL would refuse (a 500 before cursors were strict)
    encoded([position.createdAt, position.id]),
    encoded(['agents', '2024-02-30T00:00:00.000Z', position.id]),
    encoded(['agents', '0000-01-01T00:00:00.000Z', position.id]),
    encoded(['agents', '2024-01-01T24:00:00.000Z', position.id]),
    // a cursor of another list
    encodeCursor('api_keys', position),
    encodeCursor('revocations', position),
  ]) {
    let code: string | undefined
    try {
      decodeCursor(bad, 'agents')
    } catch (error) {
      code = error instanceof ServiceError ? error.code : 'other'
    }
    t.equal(code, 'invalid_cursor', `${bad.slice(0, 20)} rejected`)
  }
})

t.test('toPage uses the extra row only to know there is more', async (t) => {
  const rows = [1, 2, 3, 4].map((n) => ({ createdAt: `2026-01-0${n}T00:00:00.000Z`, id: `00000000-0000-4000-8000-00000000000${n}` }))
  const page = toPage(rows, 3, 'agents', (r) => r)
  t.equal(page.items.length, 3)
  t.same(decodeCursor(page.nextCursor ?? undefined, 'agents'), rows[2])
  t.equal(toPage(rows.slice(0, 3), 3, 'agents', (r) => r).nextCursor, null)
})

t.test('API key secrets', async (t) => {
  const a = generateApiKeySecret()
  const b = generateApiKeySecret()
  t.match(a, /^sk_[A-Za-z0-9_-]{43}$/, 'sk_ + 32 random bytes in base64url')
  t.not(a, b)
  t.ok(looksLikeApiKey(a))
  t.notOk(looksLikeApiKey('sk_short'))
  t.notOk(looksLikeApiKey('eyJhbGciOiJFZERTQSJ9.e30.sig'))
  t.equal(hashApiKeySecret(a).length, 32)
  t.ok(digestsEqual(hashApiKeySecret(a), hashApiKeySecret(a)))
  t.notOk(digestsEqual(hashApiKeySecret(a), hashApiKeySecret(b)))
  t.notOk(digestsEqual(hashApiKeySecret(a), Buffer.alloc(31)), 'different lengths never compare equal')
  t.equal(apiKeyPrefix(a), a.slice(0, 9))
})

t.test('DIDs', async (t) => {
  for (const good of ['did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG1GLVVQR3djdX3mDooWp', 'did:web:example.com', 'did:web:localhost%3A8080:agents:abc', 'did:example:123:456']) {
    t.ok(isDid(good), good)
  }
  for (const bad of ['', 'did:', 'did:web:', 'did:WEB:x', 'web:example.com', 'did:web:exa mple.com', 'did:web:x:', `did:web:${'a'.repeat(600)}`, 'did:web:%zz']) {
    t.notOk(isDid(bad), JSON.stringify(bad))
  }
  t.equal(agentDidWeb('localhost%3A8080', 'abc'), 'did:web:localhost%3A8080:agents:abc')
  t.equal(ownAgentIdFromDid('localhost%3A8080', 'did:web:LOCALHOST%3A8080:agents:abc'), 'abc', 'host case is ignored')
  t.equal(ownAgentIdFromDid('localhost%3A8080', 'did:web:other:agents:abc'), null)
})

t.test('migrations are numbered without gaps', async (t) => {
  const migrations = loadMigrations()
  t.ok(migrations.length >= 1)
  migrations.forEach((m, i) => t.equal(m.version, i + 1))
})
