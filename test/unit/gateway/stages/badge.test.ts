/**
 * The gateway's badge stage (docs/architecture.md step 2): BadgeVerifier's cache of verified tokens and what
 * it still re-checks on a hit (expiry, revocation, key set), self-signed badges behind their switch, and
 * extractBadge's header rules (docs/wire-contract.md §9), and the stage itself on a request scope.
 */
import t from 'tap'
import { generateKeyPairSync, sign, type KeyObject } from 'node:crypto'
import { BadgeVerifier, extractBadge, type VerifiedBadge } from '../../../../src/gateway/identity/badge.js'
import { AT, resume } from '../../../../src/gateway/pipeline.js'
import { buildBadgeClaims, CLOCK_LEEWAY_SECONDS, MAX_BADGE_BYTES, signBadge, type BadgeClaims } from '../../../../src/core/badge.js'
import type { TrustLevel } from '../../../../src/core/trust-level.js'
import { signSelfSignedBadge } from '../../../../src/core/self-signed-badge.js'
import { didKeyVerificationMethodId, encodeDidKey } from '../../../../src/core/did-key.js'
import type { GatewaySnapshot } from '../../../../src/gateway/snapshot/snapshot.js'
import { authorityBadge as stageBadge, content, ISSUER as STAGE_ISSUER, NOW_MS, STAGE_TXN, stageWorld, SUBJECT } from '../../../helpers/gateway-stage.js'

const ISSUER = 'https://registry.test'
const NOW = 1_800_000_000
const k1 = generateKeyPairSync('ed25519')
const k2 = generateKeyPairSync('ed25519')
const agentKey = generateKeyPairSync('ed25519')

function snapshot(keys: Record<string, KeyObject>, over: Partial<GatewaySnapshot> = {}): GatewaySnapshot {
  const map = new Map(Object.entries(keys))
  return { version: 1, issuer: ISSUER, keys: map, keysVersion: [...map.keys()].sort().join(','), revoked: new Set(), bundle: null, ...over }
}

function claims(over: { jti?: string; level?: TrustLevel; exp?: number; iss?: string } = {}): BadgeClaims {
  return buildBadgeClaims({
    jti: over.jti ?? 'jti-1',
    issuer: over.iss ?? ISSUER,
    subject: 'did:web:agents.example.com:a',
    issuedAt: NOW - 60,
    expiresAt: over.exp ?? NOW + 3600,
    ial: '1',
    level: over.level ?? '2',
    domain: 'agents.example.com',
  })
}

const authorityBadge = (over: Parameters<typeof claims>[0] = {}, kid = 'k1', key = k1.privateKey): string =>
  signBadge(claims(over), { kid, privateKey: key })

/** A verifier with a lookup recorder: `hits`/`misses` count what onLookup reported. */
function verifier(acceptSelfSigned = false, maxEntries?: number) {
  const lookups: boolean[] = []
  const v = new BadgeVerifier({ acceptSelfSigned, onLookup: (hit) => lookups.push(hit), ...(maxEntries === undefined ? {} : { maxEntries }) })
  return { v, lookups, hits: () => lookups.filter(Boolean).length, misses: () => lookups.filter((h) => !h).length }
}

const b64 = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString('base64url')
/** Signs any header and payload with `key`, to build self-signed badges the helper will not mint. */
function rawSign(header: Record<string, unknown>, payload: unknown, key: KeyObject): string {
  const input = `${b64(header)}.${b64(payload)}`
  return `${input}.${sign(null, Buffer.from(input, 'ascii'), key).toString('base64url')}`
}

const isVerified = (r: unknown): r is VerifiedBadge => typeof r === 'object' && r !== null

t.test('first verify misses and caches; the second hits and returns the same verification', async (t) => {
  const { v, lookups } = verifier()
  const snap = snapshot({ k1: k1.publicKey })
  const token = authorityBadge()
  const first = v.verify(token, snap, NOW)
  t.ok(isVerified(first), 'valid badge verifies')
  if (!isVerified(first)) return
  t.equal(first.claims.jti, 'jti-1')
  t.equal(first.trustCode, 'DV', 'level 2 is DV')
  t.equal(first.expiresAt, NOW + 3600 + CLOCK_LEEWAY_SECONDS, 'expiry includes the clock leeway')
  t.equal(first.keysVersion, snap.keysVersion)
  t.strictSame([...first.identityHeaders], [
    'x-service-subject', 'did:web:agents.example.com:a',
    'x-service-issuer', ISSUER,
    'x-service-trust-level', '2',
    'x-service-badge-jti', 'jti-1',
  ])
  t.ok(Object.isFrozen(first.identityHeaders), 'identity headers cannot be changed by a caller')
  const second = v.verify(token, snap, NOW + 1)
  t.equal(second, first, 'the cached object itself')
  t.strictSame(lookups, [false, true], 'miss then hit')
})

t.test('a token that reuses a cached badge\'s signature segment is verified on its own, never served from the cache', async (t) => {
  // The cache is keyed by the signature segment only (badge-stage.ts says why); the full token is compared.
  const { v, lookups } = verifier()
  const snap = snapshot({ k1: k1.publicKey })
  const genuine = authorityBadge({ jti: 'jti-genuine', level: '1' })
  t.ok(isVerified(v.verify(genuine, snap, NOW)), 'the genuine badge verifies and is cached')
  const [header, , signature] = genuine.split('.')
  const forged = `${header}.${b64(claims({ jti: 'jti-forged', level: '4' }))}.${signature}`
  t.equal(v.verify(forged, snap, NOW), 'BADGE_SIGNATURE_INVALID', 'another payload under the same signature is refused')
  t.strictSame(lookups, [false, false], 'the forged token was a cache miss, not a hit on the genuine entry')
  const again = v.verify(genuine, snap, NOW)
  t.ok(isVerified(again) && again.claims.jti === 'jti-genuine', 'the genuine badge still verifies')
})

t.test('failures are not cached', async (t) => {
  const { v, lookups } = verifier()
  const snap = snapshot({ k1: k1.publicKey })
  const forged = authorityBadge({}, 'k1', k2.privateKey)
  t.equal(v.verify(forged, snap, NOW), 'BADGE_SIGNATURE_INVALID')
  t.equal(v.verify(forged, snap, NOW), 'BADGE_SIGNATURE_INVALID')
  t.strictSame(lookups, [false, false], 'both lookups missed')
  t.equal(v.verify('not-a-jws', snap, NOW), 'BADGE_MALFORMED')
})

t.test('a jti revoked in a newer snapshot is refused on the cached path', async (t) => {
  const { v, lookups } = verifier()
  const snap = snapshot({ k1: k1.publicKey })
  const token = authorityBadge({ jti: 'to-revoke' })
  t.ok(isVerified(v.verify(token, snap, NOW)))
  const revoked = { ...snap, version: 2, revoked: new Set(['to-revoke']) }
  t.equal(v.verify(token, revoked, NOW), 'BADGE_REVOKED')
  t.strictSame(lookups, [false, true], 'the refusal came from the cache path')
  t.ok(isVerified(v.verify(token, snap, NOW)), 'the entry itself stays: a snapshot without the revocation still accepts')
  // Revoked before the first verification: refused on the fresh path too.
  const fresh = verifier()
  t.equal(fresh.v.verify(authorityBadge({ jti: 'to-revoke' }), revoked, NOW), 'BADGE_REVOKED')
})

t.test('an expired cached entry is refused and dropped', async (t) => {
  const { v, lookups } = verifier()
  const snap = snapshot({ k1: k1.publicKey })
  const exp = NOW + 100
  const token = authorityBadge({ exp })
  t.ok(isVerified(v.verify(token, snap, NOW)))
  t.ok(isVerified(v.verify(token, snap, exp + CLOCK_LEEWAY_SECONDS)), 'still valid at the end of the leeway')
  t.equal(v.verify(token, snap, exp + CLOCK_LEEWAY_SECONDS + 1), 'BADGE_EXPIRED', 'one second later it is expired')
  t.strictSame(lookups, [false, true, true], 'the expiry was found on a cache hit')
  t.equal(v.verify(token, snap, exp + CLOCK_LEEWAY_SECONDS + 1), 'BADGE_EXPIRED')
  t.equal(lookups[3], false, 'the expired entry was deleted, so the next lookup misses')
})

t.test('a different keysVersion forces re-verification; a badge of a removed key then fails', async (t) => {
  const { v, lookups } = verifier()
  const both = snapshot({ k1: k1.publicKey, k2: k2.publicKey })
  const byK2 = authorityBadge({ jti: 'by-k2' }, 'k2', k2.privateKey)
  const byK1 = authorityBadge({ jti: 'by-k1' })
  t.ok(isVerified(v.verify(byK2, both, NOW)))
  t.ok(isVerified(v.verify(byK1, both, NOW)))
  t.strictSame(lookups, [false, false])
  const onlyK1 = snapshot({ k1: k1.publicKey }, { version: 2 })
  t.not(onlyK1.keysVersion, both.keysVersion)
  t.equal(v.verify(byK2, onlyK1, NOW), 'BADGE_SIGNATURE_INVALID', 'k2 was removed: its badge no longer verifies')
  const again = v.verify(byK1, onlyK1, NOW)
  t.ok(isVerified(again), 'a badge of a remaining key verifies again')
  t.equal(isVerified(again) && again.keysVersion, onlyK1.keysVersion, 'and is cached under the new key set')
  t.strictSame(lookups, [false, false, false, false], 'both were re-verified (misses)')
  t.ok(isVerified(v.verify(byK1, onlyK1, NOW)))
  t.equal(lookups.at(-1), true, 'then hits again')
})

t.test('clear() and the entry bound drop cached verifications', async (t) => {
  const { v, lookups } = verifier(false, 1)
  const snap = snapshot({ k1: k1.publicKey })
  const a = authorityBadge({ jti: 'a' })
  const b = authorityBadge({ jti: 'b' })
  v.verify(a, snap, NOW)
  v.verify(a, snap, NOW)
  v.clear()
  v.verify(a, snap, NOW)
  t.strictSame(lookups, [false, true, false], 'after clear() the next lookup misses')
  v.verify(b, snap, NOW) // evicts a (bound of one)
  v.verify(a, snap, NOW)
  t.strictSame(lookups.slice(3), [false, false], 'a was evicted by b')
})

t.test('tokens over 16 KiB are refused before any lookup', async (t) => {
  const { v, lookups } = verifier(true)
  const snap = snapshot({ k1: k1.publicKey })
  t.equal(MAX_BADGE_BYTES, 16 * 1024)
  const huge = `${'a'.repeat(MAX_BADGE_BYTES - 2)}.b.c`
  t.equal(huge.length, MAX_BADGE_BYTES + 2)
  t.equal(v.verify(huge, snap, NOW), 'BADGE_MALFORMED')
  t.equal(v.verify('x'.repeat(MAX_BADGE_BYTES + 1), snap, NOW), 'BADGE_MALFORMED')
  t.strictSame(lookups, [], 'not even hashed and looked up')
  // A badge padded past the limit with a long domain is refused even though it is validly signed.
  const big = signBadge({ ...claims(), vc: { type: ['VerifiableCredential'], credentialSubject: { domain: 'd'.repeat(MAX_BADGE_BYTES), level: '2' } } }, { kid: 'k1', privateKey: k1.privateKey })
  t.equal(v.verify(big, snap, NOW), 'BADGE_MALFORMED')
})

t.test('self-signed badges are accepted only with acceptSelfSigned', async (t) => {
  const snap = snapshot({ k1: k1.publicKey })
  const { token, did } = signSelfSignedBadge(agentKey.privateKey, { jti: 'ss-1', issuedAt: NOW - 10, expiresAt: NOW + 600 })
  const off = verifier(false)
  const refused = off.v.verify(token, snap, NOW)
  t.type(refused, 'string', 'refused when the switch is off')
  t.not(refused, 'BADGE_REVOKED')

  const on = verifier(true)
  const accepted = on.v.verify(token, snap, NOW)
  t.ok(isVerified(accepted), 'accepted when the switch is on')
  if (!isVerified(accepted)) return
  t.equal(accepted.claims.sub, did)
  t.equal(accepted.claims.iss, did)
  t.equal(accepted.trustCode, 'SS', 'level 0 is SS')
  t.ok(isVerified(on.v.verify(token, snap, NOW)))
  t.strictSame(on.lookups, [false, true], 'self-signed verifications are cached too')
  t.equal(on.v.verify(token, { ...snap, revoked: new Set(['ss-1']) }, NOW), 'BADGE_REVOKED', 'and revocable')
  t.equal(verifier(true).v.verify(token, { ...snap, revoked: new Set(['ss-1']) }, NOW), 'BADGE_REVOKED', 'fresh path checks revocation')
})

t.test('an authority badge still verifies when acceptSelfSigned is on', async (t) => {
  const { v } = verifier(true)
  const snap = snapshot({ k1: k1.publicKey })
  const result = v.verify(authorityBadge(), snap, NOW)
  t.ok(isVerified(result))
  t.equal(isVerified(result) && result.trustCode, 'DV')
  t.equal(v.verify(authorityBadge({ jti: 'forged' }, 'k1', k2.privateKey), snap, NOW), 'BADGE_SIGNATURE_INVALID', 'a forged one still fails')
})

t.test('self-signed badges with a level other than 0 or iss ≠ sub are refused', async (t) => {
  const { v } = verifier(true)
  const snap = snapshot({ k1: k1.publicKey })
  const x = (agentKey.publicKey.export({ format: 'jwk' }) as { x: string }).x
  const did = encodeDidKey(Buffer.from(x, 'base64url'))
  const header = { alg: 'EdDSA', typ: 'JWT', kid: didKeyVerificationMethodId(did) }
  const base = (level: TrustLevel, iss: string, sub: string): BadgeClaims => buildBadgeClaims({
    jti: `ss-${level}-${iss === sub}`, issuer: iss, subject: sub, issuedAt: NOW - 10, expiresAt: NOW + 600, ial: '0', level, domain: '',
  })
  for (const level of ['1', '2', '4'] as const) {
    t.equal(v.verify(rawSign(header, base(level, did, did), agentKey.privateKey), snap, NOW), 'BADGE_CLAIMS_INVALID', `level ${level} refused`)
  }
  const other = encodeDidKey(Buffer.from((k2.publicKey.export({ format: 'jwk' }) as { x: string }).x, 'base64url'))
  const mismatched = v.verify(rawSign(header, base('0', did, other), agentKey.privateKey), snap, NOW)
  t.type(mismatched, 'string', 'iss ≠ sub is not treated as self-signed and fails authority verification')
  t.equal(mismatched, 'BADGE_SIGNATURE_INVALID', 'its kid is not an authority key')
  const noKid = v.verify(rawSign({ alg: 'EdDSA', typ: 'JWT' }, base('0', did, other), agentKey.privateKey), snap, NOW)
  t.type(noKid, 'string', 'without a kid it is refused too')
})

t.test('extractBadge', async (t) => {
  const cases: [string | undefined, string | undefined, string][] = [
    ['Bearer tok', undefined, 'tok'],
    ['bearer tok', undefined, 'tok'],
    ['BEARER tok', undefined, 'tok'],
    ['bEaReR   tok  ', undefined, 'tok'],
    ['Basic dXNlcjpwYXNz', undefined, 'missing'],
    ['Basic dXNlcjpwYXNz', 'tok', 'tok'],
    ['Bearertok', undefined, 'missing'],
    ['Bearer', undefined, 'missing'],
    ['Bearer ', undefined, 'missing'],
    ['Bearer     ', undefined, 'missing'],
    [undefined, undefined, 'missing'],
    [undefined, '', 'missing'],
    [undefined, '   ', 'missing'],
    [undefined, '  tok  ', 'tok'],
    ['Bearer tok', 'tok', 'tok'],
    ['Bearer tok', ' tok ', 'tok'],
    ['Bearer a', 'b', 'conflict'],
    ['Bearer a', '', 'a'],
    ['', 'tok', 'tok'],
  ]
  for (const [authorization, header, expected] of cases) {
    t.equal(extractBadge(authorization, header), expected, `${JSON.stringify(authorization)} + ${JSON.stringify(header)}`)
  }
})

t.test('checkBadge: refusals are 401 with the badge code; a verified badge sets the identity headers', async (t) => {
  const world = stageWorld({ content: content({ revoked: new Set(['jti-revoked']) }) })
  const good = stageBadge()
  const cases: [string, [string, string][], string][] = [
    ['no badge', [], 'BADGE_MISSING'],
    ['two different badges', [['authorization', `Bearer ${good.token}`], ['x-service-badge', stageBadge().token]], 'BADGE_CONFLICT'],
    ['expired', [['x-service-badge', stageBadge(SUBJECT, { expiresAt: Math.floor(NOW_MS / 1000) - 3600 }).token]], 'BADGE_EXPIRED'],
    ['revoked', [['x-service-badge', stageBadge(SUBJECT, { jti: 'jti-revoked' }).token]], 'BADGE_REVOKED'],
    ['garbage', [['x-service-badge', 'not.a.badge']], 'BADGE_MALFORMED'],
  ]
  for (const [label, headers, code] of cases) {
    const { scope, res } = world.admitted('GET', '/api/x', headers)
    resume(world.ctx, scope, AT.badge)
    t.equal(res.statusCode, 401, `${label}: 401`)
    t.equal(res.json.error, code, `${label}: ${code}`)
    t.equal(res.headers['x-service-txn'], STAGE_TXN, `${label}: the transaction id is on the refusal`)
  }
  t.equal(world.upstream.forwards.length, 0, 'nothing was forwarded')

  for (const expectHit of [false, true]) {
    const { scope } = world.admitted('GET', '/api/x', [['authorization', `Bearer ${good.token}`]])
    resume(world.ctx, scope, AT.badge)
    t.equal(scope.badge?.claims.jti, good.jti, 'the verified badge is on the scope')
    t.equal(world.ctx.telemetry.badgeHits, expectHit ? 1 : 0, expectHit ? 'the second request hits the cache' : 'the first misses')
  }
  t.strictSame(world.upstream.forwards.at(-1)?.add, [
    'x-service-subject', SUBJECT, 'x-service-issuer', STAGE_ISSUER, 'x-service-trust-level', '2', 'x-service-badge-jti', good.jti,
  ], 'the upstream receives the verified identity')
})
