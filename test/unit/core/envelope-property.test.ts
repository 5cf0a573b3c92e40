/**
 * Delegation chains under random change (docs/wire-contract.md §10): a valid chain with any field of any envelope
 * changed (and re-signed with the key of whoever the envelope now names as issuer, so only the rules
 * decide) passes exactly when an independent, deliberately simple rule checker says it still satisfies
 * every rule; a chain with any byte of any token changed (not re-signed) never passes.
 */
import fc from 'fast-check'
import t from 'tap'
import { createHash, generateKeyPairSync, type KeyObject } from 'node:crypto'
import { buildBadgeClaims, signBadge, verifyBadge } from '../../../src/core/badge.js'
import { didKeyVerificationMethodId, encodeDidKey } from '../../../src/core/did-key.js'
import { isCapabilityClass } from '../../../src/core/capability-class.js'
import { didKeyPublicKey, signEnvelope, verifyChain, type ChainContext, type EnvelopePayload } from '../../../src/core/envelope.js'

const NOW = 1_800_000_000
const AUTHORITY = 'http://authority.test'
const authKey = generateKeyPairSync('ed25519')
const authKeys = new Map([['ca-1', authKey.publicKey]])

interface Party { did: string; kid: string; privateKey: KeyObject; jti: string; badge: string }
function makeParty(name: string): Party {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519')
  const did = encodeDidKey(Buffer.from((publicKey.export({ format: 'jwk' }) as { x: string }).x, 'base64url'))
  const jti = `jti-${name}`
  const claims = buildBadgeClaims({ jti, issuer: AUTHORITY, subject: did, issuedAt: NOW - 30, expiresAt: NOW + 600, ial: '1', level: '1', domain: 'agents.test' })
  return { did, kid: didKeyVerificationMethodId(did), privateKey, jti, badge: signBadge(claims, { kid: 'ca-1', privateKey: authKey.privateKey }) }
}
const PARTIES = Array.from({ length: 8 }, (_, i) => makeParty(`p${i}`))
/** A well-keyed agent with a valid badge that is never in the badge map. */
const STRANGER = makeParty('stranger')
const KNOWN = [...PARTIES, STRANGER]

const MAX_N = 5
const MODES = [null, 'EM-OBSERVE', 'EM-GUARD', 'EM-DELEGATE', 'EM-STRICT'] as const
const CLASSES = ['files', 'files.read', 'files.read.docs']

type Payload = Record<string, unknown>
const DELETE = Symbol('delete')
/** A parent hash chosen at build time: the hash of envelope `k` (when it exists before this one). */
interface HashOf { hashOf: number }
type Value = unknown

function basePayloads(n: number): Payload[] {
  return Array.from({ length: n }, (_, i) => ({
    envelope_id: `env-${i}`,
    issuer_did: PARTIES[i]!.did,
    subject_did: PARTIES[i + 1]!.did,
    txn_id: 'txn-1',
    parent_authority_hash: i === 0 ? null : { hashOf: i - 1 },
    capability_class: CLASSES[Math.min(i, CLASSES.length - 1)],
    constraints: { max_bytes: 1000 - i },
    delegation_depth_remaining: n - i,
    enforcement_mode_min: MODES[i % MODES.length],
    issued_at: NOW - 100 + i,
    expires_at: NOW + 3600 - i,
    issuer_badge_jti: PARTIES[i]!.jti,
    subject_badge_jti: i === 0 ? null : PARTIES[i + 1]!.jti,
  }))
}

const DIDS = [...KNOWN.map((p) => p.did), 'did:web:unknown.example', 'not-a-did', 7]
const JTIS = [...KNOWN.map((p) => p.jti), 'jti-unknown', null, '', 5]
const TIMES = [-7200, -3700, -3601, -200, -101, -100, -99, -61, -60, 0, 60, 61, 3000, 3599, 3600, 3601, 7200].map((d) => NOW + d)
/** Candidate values per field: valid and invalid, near every boundary the rules draw. */
const CANDIDATES: Record<string, readonly Value[]> = {
  envelope_id: ['env-x', '', 5, null, 'e'.repeat(128), 'e'.repeat(129)],
  issuer_did: DIDS,
  subject_did: DIDS,
  txn_id: ['txn-1', 'txn-2', '', null],
  parent_authority_hash: [null, 'ab'.repeat(32), 'AB'.repeat(32), 'abc', { hashOf: 0 }, { hashOf: 1 }, { hashOf: 2 }, { hashOf: 3 }],
  capability_class: ['files', 'files.read', 'files.read.docs', 'files.read.docs.pdf', 'files.readers', 'files.write', 'mail', 'Files', 'files.', '', 3],
  constraints: [{}, { a: 1 }, [], null, 'x', { blob: 'x'.repeat(9000) }],
  delegation_depth_remaining: [-1, 0, 1, 2, 3, 4, 5, 8, 1.5, '2', null],
  enforcement_mode_min: [...MODES, 'EM-BOGUS'],
  issued_at: [...TIMES, NOW + 0.5, String(NOW), -1, null],
  expires_at: [...TIMES, NOW + 0.5, String(NOW), -1, null],
  issuer_badge_jti: JTIS,
  subject_badge_jti: JTIS,
  prompt_summary: ['short', 'x'.repeat(512), 'x'.repeat(513), '😀'.repeat(512), '😀'.repeat(513), 5],
  extra_field: [1, 'x'],
}
const FIELDS = Object.keys(CANDIDATES)

interface Mutation { index: number; field: string; value: Value }
const mutationArb = fc.record({
  index: fc.nat({ max: MAX_N - 1 }),
  field: fc.constantFrom(...FIELDS),
  pick: fc.nat({ max: 100 }),
  remove: fc.boolean(),
}).map(({ index, field, pick, remove }): Mutation => {
  const candidates = CANDIDATES[field]!
  // one draw in ten (roughly) deletes the field instead
  return { index, field, value: remove && pick % 5 === 0 ? DELETE : candidates[pick % candidates.length] }
})

const isHashOf = (v: unknown): v is HashOf => typeof v === 'object' && v !== null && 'hashOf' in v
const sha256 = (s: string): string => createHash('sha256').update(s).digest('hex')

interface Built { jws: string[]; payloads: Payload[]; signedByIssuer: boolean[] }

/** Signs the chain root first; each envelope is signed by the known agent its issuer_did names, if any. */
function build(payloads: Payload[]): Built {
  const jws: string[] = []
  const signedByIssuer: boolean[] = []
  const resolved: Payload[] = []
  payloads.forEach((template, i) => {
    const p = { ...template }
    if (isHashOf(p.parent_authority_hash)) {
      const k = p.parent_authority_hash.hashOf
      p.parent_authority_hash = k < i ? sha256(jws[k]!) : null
    }
    const named = KNOWN.find((party) => party.did === p.issuer_did)
    const signer = named ?? PARTIES[i]!
    jws.push(signEnvelope(p as unknown as EnvelopePayload, signer))
    signedByIssuer.push(named !== undefined)
    resolved.push(p)
  })
  return { jws, payloads: resolved, signedByIssuer }
}

function context(n: number): { ctx: ChainContext; badgeMap: Record<string, string> } {
  const badgeMap: Record<string, string> = {}
  for (const party of PARTIES.slice(0, n)) badgeMap[party.did] = party.badge
  const caller = PARTIES[n]!
  return {
    badgeMap,
    ctx: {
      now: NOW,
      maxDepth: 10,
      orgTrustBoundary: null,
      caller: { did: caller.did, jti: caller.jti },
      resolveKey: didKeyPublicKey,
      verifyBadge: (token) => {
        const r = verifyBadge(token, { keys: authKeys, issuer: AUTHORITY, now: NOW })
        return r.valid ? { did: r.claims.sub, jti: r.claims.jti } : null
      },
    },
  }
}

// --- the oracle: docs/wire-contract.md §10 written out plainly, sharing no code with envelope.ts -----------------------

const REQUIRED = ['envelope_id', 'issuer_did', 'subject_did', 'txn_id', 'parent_authority_hash', 'capability_class', 'constraints',
  'delegation_depth_remaining', 'enforcement_mode_min', 'issued_at', 'expires_at', 'issuer_badge_jti', 'subject_badge_jti']
const ALLOWED = [...REQUIRED, 'prompt_summary']
const isStr = (v: unknown, max: number): boolean => typeof v === 'string' && v.length >= 1 && v.length <= max
const isInt = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v)

function shapeOk(p: Payload, i: number): boolean {
  if (!Object.keys(p).every((k) => ALLOWED.includes(k)) || !REQUIRED.every((k) => k in p)) return false
  if (!isStr(p.envelope_id, 128) || !isStr(p.txn_id, 128) || !isStr(p.issuer_badge_jti, 128)) return false
  for (const did of [p.issuer_did, p.subject_did]) if (typeof did !== 'string' || !/^did:[a-z0-9]+:[A-Za-z0-9.%:_-]+$/.test(did)) return false
  if (!(p.parent_authority_hash === null || (typeof p.parent_authority_hash === 'string' && /^[0-9a-f]{64}$/.test(p.parent_authority_hash)))) return false
  if (typeof p.capability_class !== 'string' || !/^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$/.test(p.capability_class)) return false
  if (typeof p.constraints !== 'object' || p.constraints === null || Array.isArray(p.constraints)) return false
  if (!isInt(p.delegation_depth_remaining)) return false
  if (!(MODES as readonly unknown[]).includes(p.enforcement_mode_min)) return false
  if (!isInt(p.issued_at) || !isInt(p.expires_at) || p.issued_at < 0 || p.expires_at < p.issued_at) return false
  if (!(isStr(p.subject_badge_jti, 128) || (p.subject_badge_jti === null && i === 0))) return false
  if (p.prompt_summary !== undefined && !(typeof p.prompt_summary === 'string' && [...p.prompt_summary].length <= 512)) return false
  return Buffer.byteLength(JSON.stringify(p)) <= 8192
}

function oracle(built: Built, n: number): boolean {
  const ps = built.payloads
  const caller = PARTIES[n]!
  if (!ps.every(shapeOk)) return false
  if (!built.signedByIssuer.every(Boolean)) return false
  for (const p of ps) if ((p.expires_at as number) + 60 < NOW || (p.issued_at as number) - 60 > NOW) return false
  if (ps[0]!.parent_authority_hash !== null) return false
  for (let i = 1; i < n; i++) {
    const [c, parent] = [ps[i]!, ps[i - 1]!]
    if (c.parent_authority_hash !== sha256(built.jws[i - 1]!) || c.txn_id !== parent.txn_id || c.issuer_did !== parent.subject_did) return false
    const cls = c.capability_class as string
    if (cls !== parent.capability_class && !cls.startsWith(`${parent.capability_class as string}.`)) return false
    if ((c.expires_at as number) > (parent.expires_at as number) || (c.issued_at as number) < (parent.issued_at as number)) return false
    if ((c.delegation_depth_remaining as number) > (parent.delegation_depth_remaining as number) - 1) return false
  }
  if (ps.some((p) => (p.delegation_depth_remaining as number) < 0)) return false
  if (ps[n - 1]!.subject_did !== caller.did) return false
  // badge map: PARTIES[0..n-1], each under its own DID with its own jti; the caller's is its own badge
  const jtiOf = (did: unknown): string | null => {
    if (did === caller.did) return caller.jti
    const holder = PARTIES.slice(0, n).find((p) => p.did === did)
    return holder === undefined ? null : holder.jti
  }
  for (const p of ps) {
    const issuerJti = jtiOf(p.issuer_did)
    const subjectJti = jtiOf(p.subject_did)
    if (issuerJti === null || p.issuer_badge_jti !== issuerJti) return false
    if (subjectJti === null || (p.subject_badge_jti !== null && p.subject_badge_jti !== subjectJti)) return false
  }
  return true
}

t.test('oracle and verifier agree on the unchanged chains', async (t) => {
  for (let n = 1; n <= MAX_N; n++) {
    const built = build(basePayloads(n))
    const { ctx, badgeMap } = context(n)
    t.ok(oracle(built, n), `oracle: chain of ${n} is valid`)
    t.ok((await verifyChain(built.jws, badgeMap, ctx)).ok, `verifier: chain of ${n} is valid`)
  }
})

t.test('property: a mutated chain passes exactly when it still satisfies every rule', async (t) => {
  let passed = 0
  let failed = 0
  await fc.assert(
    fc.asyncProperty(fc.integer({ min: 1, max: MAX_N }), fc.array(mutationArb, { minLength: 1, maxLength: 3 }), async (n, mutations) => {
      const payloads = basePayloads(n)
      for (const m of mutations) {
        const p = payloads[m.index % n]!
        if (m.value === DELETE) delete p[m.field]
        else p[m.field] = m.value
      }
      const built = build(payloads)
      const { ctx, badgeMap } = context(n)
      const result = await verifyChain(built.jws, badgeMap, ctx)
      const expected = oracle(built, n)
      if (result.ok) passed++
      else failed++
      if (result.ok !== expected) {
        throw new Error(`verifier ${result.ok ? 'passed' : `refused (${result.code} at ${String(result.index)})`}, oracle says ${String(expected)}: ${JSON.stringify(mutations)}`)
      }
    }),
    { numRuns: 1500 },
  )
  // Not vacuous: the generator reaches both sides of the rules.
  t.ok(passed > 50, `${passed} mutated chains still valid`)
  t.ok(failed > 500, `${failed} mutated chains refused`)
})

const TOKEN_CHARS = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.=~ '

t.test('property: changing any byte of any token (without re-signing) never passes', async (t) => {
  let runs = 0
  await fc.assert(
    fc.asyncProperty(fc.integer({ min: 1, max: 4 }), fc.nat(), fc.nat(), fc.nat({ max: TOKEN_CHARS.length - 1 }), async (n, which, position, charIndex) => {
      const built = build(basePayloads(n))
      const { ctx, badgeMap } = context(n)
      const i = which % n
      const token = built.jws[i]!
      const at = position % token.length
      let replacement = TOKEN_CHARS[charIndex]!
      if (replacement === token[at]) replacement = TOKEN_CHARS[(charIndex + 1) % TOKEN_CHARS.length]!
      const tampered = [...built.jws]
      tampered[i] = token.slice(0, at) + replacement + token.slice(at + 1)
      runs++
      const result = await verifyChain(tampered, badgeMap, ctx)
      if (result.ok) throw new Error(`tampered envelope ${i} at ${at} ('${token[at]}' → '${replacement}') passed`)
    }),
    { numRuns: 600 },
  )
  t.equal(runs, 600)
})

t.test('property: the capability class rule is the policy grammar\'s (docs/wire-contract.md §7)', async (t) => {
  let invalid = 0
  await fc.assert(
    fc.asyncProperty(fc.string({ unit: fc.constantFrom(...'abz09_.A-'.split('')), maxLength: 12 }), async (cls) => {
      const payloads = basePayloads(1)
      payloads[0]!.capability_class = cls
      const built = build(payloads)
      const { ctx, badgeMap } = context(1)
      const result = await verifyChain(built.jws, badgeMap, ctx)
      const expected = isCapabilityClass(cls)
      if (!expected) invalid++
      if (result.ok !== expected || (!result.ok && result.code !== 'ENVELOPE_CAPABILITY_INVALID')) {
        throw new Error(`class ${JSON.stringify(cls)}: grammar says ${String(expected)}, verifier ${result.ok ? 'passed' : result.code}`)
      }
    }),
    { numRuns: 400 },
  )
  t.ok(invalid > 0 && invalid < 400, 'both valid and invalid classes were generated')
})
