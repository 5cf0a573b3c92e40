/**
 * The audit trail's pure parts: the exact hash input (a fixed vector, so the documented format cannot
 * drift), secret redaction in digests, checkpoint JWS signing and its refusals, and the verifier naming the
 * first record that does not verify for a change, a gap, a swap, a broken link and a truncated tail.
 */
import t from 'tap'
import { createHash, generateKeyPairSync } from 'node:crypto'
import canonicalize from 'canonicalize'
import fc from 'fast-check'
import {
  changeDigest, GENESIS_HASH, recordHash, recordHashInput, redactSecrets, signCheckpoint, verifyAuditChain, verifyCheckpointJws,
  type AuditRecord,
} from '../../../src/core/audit.js'

const CHAIN = '5b0f6f52-7d1c-4c4e-9d1a-0c7a1e3b9f10'

function chain(n: number): AuditRecord[] {
  const out: AuditRecord[] = []
  let prev = GENESIS_HASH
  for (let seq = 1; seq <= n; seq++) {
    const body = {
      chain: CHAIN, seq, time: `2026-12-02T18:00:0${seq % 10}.000Z`, actorType: 'key' as const, actorId: `k${seq}`, orgId: null,
      action: 'agent.create', target: `a${seq}`, outcome: 'success', requestId: `r${seq}`, digest: null, prevHash: prev,
    }
    const hash = recordHash(body)
    out.push({ ...body, hash })
    prev = hash
  }
  return out
}

const { privateKey, publicKey } = generateKeyPairSync('ed25519')
const jwk = { ...(publicKey.export({ format: 'jwk' }) as Record<string, unknown>), kid: 'service-ca-1', alg: 'EdDSA', use: 'sig' }
const jwks = { keys: [jwk] }
const checkpoint = (records: AuditRecord[], seq: number) => {
  const head = records[seq - 1]!.hash
  return { chain: CHAIN, seq, head, jws: signCheckpoint({ chain: CHAIN, seq, head, iat: 1, iss: 'http://x' }, { kid: 'service-ca-1', privateKey }) }
}

t.test('the hash input is the canonical JSON of the documented members', async (t) => {
  const [first] = chain(1)
  const { hash: _hash, ...body } = first!
  const input = recordHashInput(body)
  t.equal(input, `{"action":"agent.create","actorId":"k1","actorType":"key","chain":"${CHAIN}","digest":null,"orgId":null,"outcome":"success","prev":"${GENESIS_HASH}","requestId":"r1","seq":1,"target":"a1","time":"2026-12-02T18:00:01.000Z"}`)
  t.equal(first!.hash, createHash('sha256').update(input).digest('hex'))
})

t.test('the hash input of any record is what canonicalize writes for its members (property)', async (t) => {
  const text = fc.string({ unit: 'binary', maxLength: 24 })
  const nullable = fc.option(text, { nil: null })
  const stored = fc.record({
    chain: text, seq: fc.integer({ min: 1, max: Number.MAX_SAFE_INTEGER }), time: text, actorType: text, actorId: nullable, orgId: nullable,
    action: text, target: nullable, outcome: text, requestId: nullable, digest: nullable, prevHash: text,
  })
  // What a tampered export may hold instead: other types in any member.
  const odd = fc.oneof(fc.double(), fc.boolean(), fc.constant(null), fc.dictionary(text, fc.oneof(text, fc.integer())), fc.array(text, { maxLength: 3 }))
  const tampered = fc.tuple(stored, fc.constantFrom('seq', 'chain', 'actorId', 'time', 'prevHash'), odd).map(([r, key, value]) => ({ ...r, [key]: value }))
  const canonical = (r: any): string => canonicalize({
    chain: r.chain, seq: r.seq, time: r.time, actorType: r.actorType, actorId: r.actorId, orgId: r.orgId,
    action: r.action, target: r.target, outcome: r.outcome, requestId: r.requestId, digest: r.digest, prev: r.prevHash,
  }) as string
  const outcome = (f: () => string): string => { try { return f() } catch (error) { return `throws ${(error as Error).message}` } }
  fc.assert(fc.property(fc.oneof(stored, tampered), (r) => outcome(() => recordHashInput(r as any)) === outcome(() => canonical(r))), { numRuns: 2000 })
  t.pass('2000 generated records, stored and tampered shapes')
  // A tampered export with a member canonical JSON refuses (a number too large is Infinity) fails at that record.
  const records = chain(3)
  const report = verifyAuditChain([records[0]!, { ...records[1]!, actorId: JSON.parse('1e400') }, records[2]!], [], jwks, { requireSignedHead: false })
  t.match(report, { ok: false, failure: { seq: 2, reason: /stored shape/ } }, 'named, not thrown')
})

t.test('digests never see a secret-named field', async (t) => {
  t.same(redactSecrets({ name: 'n', api_key: 'sk_x', nested: { client_secret: 's', d: 'priv', keys: [1], ok: 1 }, list: [{ token: 't' }] }),
    { name: 'n', api_key: '[redacted]', nested: { client_secret: '[redacted]', d: '[redacted]', keys: '[redacted]', ok: 1 }, list: [{ token: '[redacted]' }] })
  t.equal(changeDigest({ key: 'sk_one' }), changeDigest({ key: 'sk_two' }), 'a key value does not change the digest')
  t.not(changeDigest({ name: 'a' }), changeDigest({ name: 'b' }))
  t.equal(changeDigest({ b: 1, a: 2 }), changeDigest({ a: 2, b: 1 }), 'canonical: member order does not matter')
  t.equal(changeDigest(undefined), null)
})

t.test('checkpoint JWS: verifies with its key, not with another, not altered', async (t) => {
  const records = chain(3)
  const cp = checkpoint(records, 3)
  t.same(verifyCheckpointJws(cp.jws, jwks), { chain: CHAIN, seq: 3, head: records[2]!.hash })
  const other = generateKeyPairSync('ed25519').publicKey.export({ format: 'jwk' }) as Record<string, unknown>
  t.match(verifyCheckpointJws(cp.jws, { keys: [{ ...other, kid: 'service-ca-1' }] }), /does not verify/)
  t.match(verifyCheckpointJws(cp.jws, { keys: [] }), /not in the JWKS/)
  const [h, p, s] = cp.jws.split('.')
  const forged = Buffer.from(JSON.stringify({ chain: CHAIN, seq: 3, head: GENESIS_HASH, iat: 1 })).toString('base64url')
  t.match(verifyCheckpointJws(`${h}.${forged}.${s}`, jwks), /does not verify/)
  const none = Buffer.from(JSON.stringify({ alg: 'none', typ: 'audit-checkpoint+jws', kid: 'service-ca-1' })).toString('base64url')
  t.match(verifyCheckpointJws(`${none}.${p}.${s}`, jwks), /header/)
  t.match(verifyCheckpointJws('a.b', jwks), /compact/)
})

t.test('the verifier names the first record that does not verify', async (t) => {
  const records = chain(6)
  const cps = [checkpoint(records, 3), checkpoint(records, 6)]
  const ok = verifyAuditChain(records, cps, jwks, { expectedHead: { seq: 6, hash: records[5]!.hash } })
  t.match(ok, { ok: true, records: 6, checkpoints: 2, signedThrough: 6 })

  const changed = records.map((r) => (r.seq === 4 ? { ...r, outcome: 'refused:403' } : r))
  t.match(verifyAuditChain(changed, cps, jwks).failure, { seq: 4, reason: /hash does not match/ })

  const gap = records.filter((r) => r.seq !== 2)
  t.match(verifyAuditChain(gap, cps, jwks).failure, { seq: 2, reason: /missing/ })

  const first = records.filter((r) => r.seq !== 1)
  t.match(verifyAuditChain(first, cps, jwks).failure, { seq: 1, reason: /missing/ }, 'the first record cannot go unnoticed')

  const swapped = [records[0]!, records[2]!, records[1]!, ...records.slice(3)]
  t.match(verifyAuditChain(swapped, cps, jwks).failure, { seq: 2, reason: /missing|out of order/ })

  // Rehashed after an edit: the chain links again, the signed checkpoint does not match.
  const rehashed = chain(6).map((r) => r)
  const edited: AuditRecord[] = []
  let prev = GENESIS_HASH
  for (const r of rehashed) {
    const body = { ...r, prevHash: prev, target: r.seq === 2 ? 'forged' : r.target }
    const { hash: _h, ...rest } = body
    const hash = recordHash(rest)
    edited.push({ ...rest, hash })
    prev = hash
  }
  t.match(verifyAuditChain(edited, cps, jwks).failure, { seq: 3, reason: /signed checkpoint/ })

  t.match(verifyAuditChain(records.slice(0, 4), cps, jwks, { expectedHead: { seq: 6, hash: records[5]!.hash } }).failure, { seq: 5 }, 'a cut tail')
  t.match(verifyAuditChain(records.slice(0, 4), [cps[0]!], jwks, { requireSignedHead: true }).failure, { seq: 4, reason: /not covered/ })

  const continuing = verifyAuditChain(records.slice(3), [cps[1]!], jwks, { startSeq: 4, expectedHead: { seq: 6, hash: records[5]!.hash } })
  t.equal(continuing.ok, true, 'an export continuing after seq 3 verifies from there')
})
