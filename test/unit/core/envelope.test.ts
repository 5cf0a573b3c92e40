/**
 * Delegation envelopes (RFC-008, docs/wire-contract.md §9, §10; docs/api.md §4.9, §7, §8): chains of real Ed25519-signed
 * envelopes between did:key (and did:web) agents, with real authority badges in the badge map. Every
 * valid length passes; every error code of docs/wire-contract.md §10 is provoked at the positions where it matters
 * and reported with its status and the index the "innermost, most specific" rule names (envelope.ts).
 */
import t, { type Test } from 'tap'
import { createHash, generateKeyPairSync, sign, type KeyObject } from 'node:crypto'
import { buildBadgeClaims, signBadge, verifyBadge } from '../../../src/core/badge.js'
import { didKeyVerificationMethodId, encodeDidKey } from '../../../src/core/did-key.js'
import {
  authorityHash,
  decodeChainHeaders,
  didKeyPublicKey,
  ENVELOPE_ERROR_CODES,
  ENVELOPE_ERROR_STATUS,
  ENVELOPE_TYP,
  MAX_ENVELOPE_PAYLOAD_BYTES,
  signEnvelope,
  verifyChain,
  type ChainContext,
  type ChainFailure,
  type EnvelopeErrorCode,
  type EnvelopePayload,
  type VerifiedChain,
} from '../../../src/core/envelope.js'

const NOW = 1_800_000_000
const AUTHORITY = 'http://authority.test'
const AUTH_KID = 'service-ca-1'
const authKey = generateKeyPairSync('ed25519')
const rogueAuthKey = generateKeyPairSync('ed25519')
const authKeys = new Map([[AUTH_KID, authKey.publicKey]])
const revoked = new Set<string>()

function mintBadge(sub: string, jti: string, over: { issuedAt?: number; expiresAt?: number; key?: KeyObject } = {}): string {
  const claims = buildBadgeClaims({
    jti, issuer: AUTHORITY, subject: sub, issuedAt: over.issuedAt ?? NOW - 30, expiresAt: over.expiresAt ?? NOW + 600,
    ial: '1', level: '1', domain: 'agents.test',
  })
  return signBadge(claims, { kid: AUTH_KID, privateKey: over.key ?? authKey.privateKey })
}

interface Party { name: string; did: string; kid: string; privateKey: KeyObject; publicKey: KeyObject; jti: string; badge: string }
/** did:web keys, as a DID document resolver would find them: kid → {did, key}. */
const webKeys = new Map<string, { did: string; key: KeyObject }>()

function makeParty(name: string, webDid?: string): Party {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519')
  const did = webDid ?? encodeDidKey(Buffer.from((publicKey.export({ format: 'jwk' }) as { x: string }).x, 'base64url'))
  const kid = webDid === undefined ? didKeyVerificationMethodId(did) : `${did}#key-1`
  if (webDid !== undefined) webKeys.set(kid, { did, key: publicKey })
  const jti = `jti-${name}`
  return { name, did, kid, privateKey, publicKey, jti, badge: mintBadge(did, jti) }
}

const PARTIES = Array.from({ length: 12 }, (_, i) => makeParty(`a${i}`))
const STRANGER = makeParty('stranger')
const ORG = Array.from({ length: 5 }, (_, i) => makeParty(`org${i}`, `did:web:org.example:agents:a${i}`))

function resolveKey(kid: string, issuerDid: string): KeyObject | null {
  const web = webKeys.get(kid)
  if (web !== undefined) return web.did === issuerDid ? web.key : null
  return didKeyPublicKey(kid, issuerDid)
}

function verifyMapBadge(token: string): { did: string; jti: string } | null {
  const result = verifyBadge(token, { keys: authKeys, issuer: AUTHORITY, now: NOW, isRevoked: (jti) => revoked.has(jti) })
  return result.valid ? { did: result.claims.sub, jti: result.claims.jti } : null
}

const MODES = [null, 'EM-OBSERVE', 'EM-GUARD', 'EM-DELEGATE', 'EM-STRICT'] as const
const CLASSES = ['files', 'files.read', 'files.read.docs']

type Mutable = Record<string, unknown>
interface BuildOptions {
  /** n + 1 parties: envelope i is issued by parties[i] to parties[i + 1]; the last is the caller. */
  parties?: Party[]
  /** Changes payload i before it is signed (its parent hash is already filled in). */
  mutate?: (i: number, p: Mutable) => void
  /** Signs envelope i another way (a returned undefined keeps signEnvelope with the issuer's key). */
  sign?: (i: number, p: Mutable, issuer: Party) => string | undefined
  /** Rewrites envelope i after signing; the child hashes the rewritten token. */
  after?: (i: number, jws: string) => string
  ctx?: Partial<ChainContext>
  badgeMap?: (map: Record<string, string>) => void
}
interface Built { jws: string[]; payloads: Mutable[]; parties: Party[]; badgeMap: Record<string, string>; ctx: ChainContext }

function defaultPayload(i: number, n: number, parties: Party[], parentHash: string | null): Mutable {
  return {
    envelope_id: `env-${i}`,
    issuer_did: parties[i]!.did,
    subject_did: parties[i + 1]!.did,
    txn_id: 'txn-1',
    parent_authority_hash: parentHash,
    capability_class: CLASSES[Math.min(i, CLASSES.length - 1)],
    constraints: { max_bytes: 1000 - i },
    delegation_depth_remaining: n - i,
    enforcement_mode_min: MODES[i % MODES.length],
    issued_at: NOW - 100 + i,
    expires_at: NOW + 3600 - i,
    issuer_badge_jti: parties[i]!.jti,
    subject_badge_jti: i === 0 ? null : parties[i + 1]!.jti,
  }
}

function rawSign(header: Record<string, unknown>, payload: unknown, key: KeyObject): string {
  const b64 = (v: unknown): string => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v)).toString('base64url')
  const input = `${b64(header)}.${b64(payload)}`
  return `${input}.${sign(null, Buffer.from(input, 'ascii'), key).toString('base64url')}`
}

function buildChain(n: number, options: BuildOptions = {}): Built {
  const parties = options.parties ?? PARTIES.slice(0, n + 1)
  const jws: string[] = []
  const payloads: Mutable[] = []
  for (let i = 0; i < n; i++) {
    const p = defaultPayload(i, n, parties, i === 0 ? null : authorityHash(jws[i - 1]!))
    options.mutate?.(i, p)
    const issuer = parties[i]!
    let token = options.sign?.(i, p, issuer) ?? signEnvelope(p as unknown as EnvelopePayload, issuer)
    if (options.after !== undefined) token = options.after(i, token)
    jws.push(token)
    payloads.push(p)
  }
  const badgeMap: Record<string, string> = {}
  for (const party of parties.slice(0, n)) badgeMap[party.did] = party.badge
  options.badgeMap?.(badgeMap)
  const caller = parties[n]!
  const ctx: ChainContext = {
    now: NOW,
    maxDepth: 10,
    orgTrustBoundary: null,
    caller: { did: caller.did, jti: caller.jti },
    resolveKey,
    verifyBadge: verifyMapBadge,
    ...options.ctx,
  }
  return { jws, payloads, parties, badgeMap, ctx }
}

const run = (built: Built): Promise<VerifiedChain | ChainFailure> => verifyChain(built.jws, built.badgeMap, built.ctx)

function expectFailure(t: Test, result: VerifiedChain | ChainFailure, code: EnvelopeErrorCode, index: number | null): void {
  if (result.ok) {
    t.fail(`expected ${code} at ${String(index)}, the chain passed`)
    return
  }
  t.equal(result.code, code, `code ${code}`)
  t.equal(result.status, ENVELOPE_ERROR_STATUS[code], `status ${ENVELOPE_ERROR_STATUS[code]}`)
  t.equal(result.index, index, `charged to envelope ${String(index)}`)
  t.type(result.detail, 'string')
}

/** Replaces the payload segment of a token, keeping the original signature. */
function swapPayload(jws: string, payload: unknown): string {
  const [h, , s] = jws.split('.')
  return `${h}.${Buffer.from(JSON.stringify(payload)).toString('base64url')}.${s}`
}
function flipSignatureBit(jws: string): string {
  const [h, p, s] = jws.split('.')
  const sig = Buffer.from(s!, 'base64url')
  sig[10] = sig[10]! ^ 0x01
  return `${h}.${p}.${sig.toString('base64url')}`
}

t.test('ENVELOPE_ERROR_STATUS is the table of docs/wire-contract.md §10', async (t) => {
  t.strictSame({ ...ENVELOPE_ERROR_STATUS }, {
    ENVELOPE_MALFORMED: 400, ENVELOPE_CAPABILITY_INVALID: 400, ENVELOPE_PAYLOAD_TOO_LARGE: 400,
    ENVELOPE_SIGNATURE_INVALID: 401, ENVELOPE_EXPIRED: 401, ENVELOPE_NOT_YET_VALID: 401, ENVELOPE_CHAIN_BROKEN: 401,
    ENVELOPE_CHAIN_TOO_DEEP: 403, ENVELOPE_NARROWING_VIOLATION: 403, ENVELOPE_DEPTH_EXCEEDED: 403,
    ENVELOPE_BADGE_BINDING_FAILED: 403, ENVELOPE_KEY_NOT_BOUND: 403, ENVELOPE_ORG_BOUNDARY: 403,
  })
  t.ok(Object.isFrozen(ENVELOPE_ERROR_STATUS))
  t.equal(ENVELOPE_ERROR_CODES.length, 13)
})

t.test('signEnvelope, authorityHash, didKeyPublicKey', async (t) => {
  const [a, b] = PARTIES
  const payload = defaultPayload(0, 1, PARTIES, null) as unknown as EnvelopePayload
  const token = signEnvelope(payload, a!)
  const [h, p] = token.split('.')
  t.strictSame(JSON.parse(Buffer.from(h!, 'base64url').toString()), { alg: 'EdDSA', typ: ENVELOPE_TYP, kid: a!.kid })
  t.strictSame(JSON.parse(Buffer.from(p!, 'base64url').toString()), payload)
  t.equal(ENVELOPE_TYP, 'service-authority-envelope+jws')
  t.equal(authorityHash('abc'), 'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad', 'SHA-256 test vector, lower-case hex')
  t.equal(authorityHash(token), createHash('sha256').update(token).digest('hex'))
  t.ok(didKeyPublicKey(a!.kid, a!.did)?.equals(a!.publicKey), 'did:key: the DID’s own key')
  t.equal(didKeyPublicKey(`${a!.did}#other`, a!.did), null, 'another fragment is not a key of the DID')
  t.equal(didKeyPublicKey(b!.kid, a!.did), null, "another DID's key")
  t.equal(didKeyPublicKey(ORG[0]!.kid, ORG[0]!.did), null, 'did:web is not resolved here')
})

t.test('valid chains of 1 to 10 envelopes', async (t) => {
  for (let n = 1; n <= 10; n++) {
    const built = buildChain(n)
    const result = await run(built)
    if (!result.ok) {
      t.fail(`chain of ${n}: ${result.code} at ${String(result.index)}: ${result.detail}`)
      continue
    }
    t.equal(result.depth, n, `depth ${n}`)
    t.equal(result.leaf.envelope_id, `env-${n - 1}`, 'the leaf is the last envelope')
    t.equal(result.leaf.subject_did, built.parties[n]!.did)
    t.strictSame(result.modeMinimums, Array.from({ length: n }, (_, i) => MODES[i % MODES.length]), 'modes, root first')
    t.strictSame(result.envelopes, built.payloads, 'the signed payloads, root first')
  }
  // exactly enough depth: the root allows n - 1 further delegations, the leaf none
  const exact = await run(buildChain(5, { mutate: (i, p) => { p.delegation_depth_remaining = 4 - i } }))
  t.ok(exact.ok, 'root remaining n - 1, leaf 0')
  t.ok((await run(buildChain(10, { ctx: { maxDepth: 10 } }))).ok, 'a chain of exactly SERVICE_MAX_CHAIN_DEPTH')
  const single = await run(buildChain(1, { mutate: (_, p) => { p.delegation_depth_remaining = 0 } }))
  t.ok(single.ok, 'a root that allows no further delegation is a valid leaf')
})

t.test('valid variations', async (t) => {
  t.ok((await run(buildChain(3, { mutate: (i, p) => { if (i === 2) p.prompt_summary = 'x'.repeat(512) } }))).ok, 'prompt_summary of 512 characters')
  t.ok((await run(buildChain(3, { mutate: (i, p) => { if (i === 2) p.prompt_summary = '😀'.repeat(512) } }))).ok, 'characters are code points, not UTF-16 units')
  t.ok((await run(buildChain(3, { mutate: (i, p) => { if (i === 2) p.expires_at = NOW - 60 } }))).ok, 'expired within the 60 s leeway')
  t.ok((await run(buildChain(3, { mutate: (i, p) => { if (i === 2) { p.issued_at = NOW + 60; p.expires_at = NOW + 600 } } }))).ok, 'issued within the 60 s leeway')
  t.ok((await run(buildChain(3, { mutate: (i, p) => { if (i === 1) p.subject_badge_jti = PARTIES[2]!.jti; if (i === 0) p.subject_badge_jti = PARTIES[1]!.jti } }))).ok, 'a root may bind its subject badge')
  t.ok((await run(buildChain(3, { badgeMap: (m) => { m[PARTIES[3]!.did] = 'garbage'; m['did:key:unused'] = 'x' } }))).ok, "the caller's map entry and unrelated entries are ignored")
  t.ok((await run(buildChain(3, { ctx: { resolveKey: async (kid, did) => resolveKey(kid, did) } }))).ok, 'an async resolver')
  t.ok((await run(buildChain(4, { parties: ORG, ctx: { orgTrustBoundary: 'did:web:org.example', caller: { did: ORG[4]!.did, jti: ORG[4]!.jti } } }))).ok, 'did:web issuers inside the boundary')
  t.ok((await run(buildChain(4, { parties: ORG, ctx: { orgTrustBoundary: 'did:web:org.example:agents:', caller: { did: ORG[4]!.did, jti: ORG[4]!.jti } } }))).ok, 'a boundary ending in a colon')
  t.ok((await run(buildChain(2, { ctx: { orgTrustBoundary: '' } }))).ok, 'an empty boundary accepts all')

  // payload of exactly 8 KiB passes, one byte more does not
  const sized = (bytes: number) => buildChain(2, {
    mutate: (i, p) => {
      if (i !== 1) return
      p.constraints = { blob: '' }
      const base = Buffer.byteLength(JSON.stringify(p))
      p.constraints = { blob: 'x'.repeat(bytes - base) }
    },
  })
  const at = sized(MAX_ENVELOPE_PAYLOAD_BYTES)
  t.equal(Buffer.from(at.jws[1]!.split('.')[1]!, 'base64url').length, MAX_ENVELOPE_PAYLOAD_BYTES)
  t.ok((await run(at)).ok, 'an 8192-byte payload')
  expectFailure(t, await run(sized(MAX_ENVELOPE_PAYLOAD_BYTES + 1)), 'ENVELOPE_PAYLOAD_TOO_LARGE', 1)

  // A delegator may also be the caller: its binding compares with the caller's own badge jti.
  const loop = [PARTIES[0]!, PARTIES[3]!, PARTIES[1]!, PARTIES[3]!]
  const loopCtx = { caller: { did: PARTIES[3]!.did, jti: PARTIES[3]!.jti } }
  t.ok((await run(buildChain(3, { parties: loop, ctx: loopCtx }))).ok, 'the caller issuing inside its own chain')
  expectFailure(t, await run(buildChain(3, { parties: loop, ctx: loopCtx, mutate: (i, p) => { if (i === 1) p.issuer_badge_jti = 'jti-other' } })), 'ENVELOPE_BADGE_BINDING_FAILED', 1)
})

t.test('a synchronous resolver costs no extra turns of the event loop', async (t) => {
  const built = buildChain(3)
  let settled = false
  void run(built).then(() => { settled = true })
  await Promise.resolve()
  t.ok(settled, 'settled one microtask later: no await inside')
  let asyncSettled = false
  void run({ ...built, ctx: { ...built.ctx, resolveKey: async (kid, did) => resolveKey(kid, did) } }).then(() => { asyncSettled = true })
  await Promise.resolve()
  t.notOk(asyncSettled, 'an async resolver is awaited')
})

/** One row: a chain of `n` envelopes broken at position `at`, expected to fail with `code` charged to `index`. */
interface Case {
  name: string
  code: EnvelopeErrorCode
  /** Positions to break; the case runs once per position. */
  at: readonly number[]
  n?: number
  build: (at: number, n: number) => BuildOptions
  /** The index charged (default: the position broken). */
  index?: (at: number, n: number) => number | null
}

const N = 4
const ALL = [0, 1, 2, 3]
const NON_ROOT = [1, 2, 3]
const only = (at: number, f: (p: Mutable) => void) => (i: number, p: Mutable) => { if (i === at) f(p) }
const resignAt = (at: number, header: (issuer: Party) => Record<string, unknown>, payload?: (p: Mutable) => unknown) =>
  (i: number, p: Mutable, issuer: Party) => (i === at ? rawSign(header(issuer), payload?.(p) ?? p, issuer.privateKey) : undefined)
const afterAt = (at: number, f: (jws: string) => string) => (i: number, jws: string) => (i === at ? f(jws) : jws)
const orgCtx = (n: number, boundary: string): Partial<ChainContext> => ({ orgTrustBoundary: boundary, caller: { did: ORG[n]!.did, jti: ORG[n]!.jti } })
const outsider = (did: string) => makeParty(`out-${did}`, did)
const EVIL = outsider('did:web:evil.example:agents:x')
const LOOKALIKE = outsider('did:web:org.example.evil.com:agents:x')
const OTHER_PORT = outsider('did:web:org.example%3A8443:agents:x')
const withOutsider = (at: number, party: Party) => ORG.map((p, i) => (i === at ? party : p))
const { publicKey: x25519Public } = generateKeyPairSync('x25519')

const CASES: Case[] = [
  // ENVELOPE_MALFORMED
  { name: 'not a JWS', code: 'ENVELOPE_MALFORMED', at: ALL, build: (a) => ({ after: afterAt(a, () => 'not-a-jws') }) },
  { name: 'four segments', code: 'ENVELOPE_MALFORMED', at: ALL, build: (a) => ({ after: afterAt(a, (j) => `${j}.x`) }) },
  { name: 'padded base64url segment', code: 'ENVELOPE_MALFORMED', at: ALL, build: (a) => ({ after: afterAt(a, (j) => j.replace('.', '=.')) }) },
  { name: 'payload is a JSON array', code: 'ENVELOPE_MALFORMED', at: ALL, build: (a) => ({ sign: resignAt(a, (s) => ({ alg: 'EdDSA', typ: ENVELOPE_TYP, kid: s.kid }), () => '[1]') }) },
  { name: 'typ JWT', code: 'ENVELOPE_MALFORMED', at: ALL, build: (a) => ({ sign: resignAt(a, (s) => ({ alg: 'EdDSA', typ: 'JWT', kid: s.kid })) }) },
  { name: 'no typ', code: 'ENVELOPE_MALFORMED', at: ALL, build: (a) => ({ sign: resignAt(a, (s) => ({ alg: 'EdDSA', kid: s.kid })) }) },
  { name: 'no kid', code: 'ENVELOPE_MALFORMED', at: ALL, build: (a) => ({ sign: resignAt(a, () => ({ alg: 'EdDSA', typ: ENVELOPE_TYP })) }) },
  { name: 'embedded jwk header', code: 'ENVELOPE_MALFORMED', at: ALL, build: (a) => ({ sign: resignAt(a, (s) => ({ alg: 'EdDSA', typ: ENVELOPE_TYP, kid: s.kid, jwk: {} })) }) },
  { name: 'missing txn_id', code: 'ENVELOPE_MALFORMED', at: ALL, build: (a) => ({ mutate: only(a, (p) => { delete p.txn_id }) }) },
  { name: 'missing enforcement_mode_min', code: 'ENVELOPE_MALFORMED', at: ALL, build: (a) => ({ mutate: only(a, (p) => { delete p.enforcement_mode_min }) }) },
  { name: 'unknown field', code: 'ENVELOPE_MALFORMED', at: ALL, build: (a) => ({ mutate: only(a, (p) => { p.scope = 'everything' }) }) },
  { name: 'empty envelope_id', code: 'ENVELOPE_MALFORMED', at: ALL, build: (a) => ({ mutate: only(a, (p) => { p.envelope_id = '' }) }) },
  { name: 'issuer_did not a DID', code: 'ENVELOPE_MALFORMED', at: ALL, build: (a) => ({ mutate: only(a, (p) => { p.issuer_did = 'agent-7' }) }) },
  { name: 'subject_did not a string', code: 'ENVELOPE_MALFORMED', at: ALL, build: (a) => ({ mutate: only(a, (p) => { p.subject_did = 7 }) }) },
  { name: 'upper-case parent hash', code: 'ENVELOPE_MALFORMED', at: ALL, build: (a) => ({ mutate: only(a, (p) => { p.parent_authority_hash = 'AB'.repeat(32) }) }) },
  { name: 'constraints an array', code: 'ENVELOPE_MALFORMED', at: ALL, build: (a) => ({ mutate: only(a, (p) => { p.constraints = [] }) }) },
  { name: 'constraints null', code: 'ENVELOPE_MALFORMED', at: ALL, build: (a) => ({ mutate: only(a, (p) => { p.constraints = null }) }) },
  { name: 'fractional depth', code: 'ENVELOPE_MALFORMED', at: ALL, build: (a) => ({ mutate: only(a, (p) => { p.delegation_depth_remaining = 1.5 }) }) },
  { name: 'depth as a string', code: 'ENVELOPE_MALFORMED', at: ALL, build: (a) => ({ mutate: only(a, (p) => { p.delegation_depth_remaining = '3' }) }) },
  { name: 'unknown mode', code: 'ENVELOPE_MALFORMED', at: ALL, build: (a) => ({ mutate: only(a, (p) => { p.enforcement_mode_min = 'EM-PARANOID' }) }) },
  { name: 'issued_at a string', code: 'ENVELOPE_MALFORMED', at: ALL, build: (a) => ({ mutate: only(a, (p) => { p.issued_at = String(NOW) }) }) },
  { name: 'fractional expires_at', code: 'ENVELOPE_MALFORMED', at: ALL, build: (a) => ({ mutate: only(a, (p) => { p.expires_at = NOW + 0.5 }) }) },
  { name: 'expires before issued', code: 'ENVELOPE_MALFORMED', at: ALL, build: (a) => ({ mutate: only(a, (p) => { p.expires_at = (p.issued_at as number) - 1 }) }) },
  { name: 'issuer_badge_jti too long', code: 'ENVELOPE_MALFORMED', at: ALL, build: (a) => ({ mutate: only(a, (p) => { p.issuer_badge_jti = 'j'.repeat(129) }) }) },
  { name: 'subject_badge_jti null below the root', code: 'ENVELOPE_MALFORMED', at: NON_ROOT, build: (a) => ({ mutate: only(a, (p) => { p.subject_badge_jti = null }) }) },
  { name: 'prompt_summary of 513 characters', code: 'ENVELOPE_MALFORMED', at: ALL, build: (a) => ({ mutate: only(a, (p) => { p.prompt_summary = 'x'.repeat(513) }) }) },
  { name: 'prompt_summary not a string', code: 'ENVELOPE_MALFORMED', at: ALL, build: (a) => ({ mutate: only(a, (p) => { p.prompt_summary = null }) }) },
  { name: 'capability_class not a string', code: 'ENVELOPE_MALFORMED', at: ALL, build: (a) => ({ mutate: only(a, (p) => { p.capability_class = ['files'] }) }) },
  { name: 'alg none, no signature', code: 'ENVELOPE_MALFORMED', at: ALL, build: (a) => ({ after: afterAt(a, (j) => `${Buffer.from(JSON.stringify({ alg: 'none', typ: ENVELOPE_TYP })).toString('base64url')}.${j.split('.')[1]}.`) }) },

  // ENVELOPE_CAPABILITY_INVALID
  ...['Files.read', 'files..read', '9files', 'files.', '', 'files-read'].map((cls): Case => ({
    name: `capability_class ${JSON.stringify(cls)}`, code: 'ENVELOPE_CAPABILITY_INVALID', at: ALL, build: (a) => ({ mutate: only(a, (p) => { p.capability_class = cls }) }),
  })),

  // ENVELOPE_PAYLOAD_TOO_LARGE
  { name: 'payload over 8 KiB', code: 'ENVELOPE_PAYLOAD_TOO_LARGE', at: ALL, build: (a) => ({ mutate: only(a, (p) => { p.constraints = { blob: 'x'.repeat(8200) } }) }) },
  { name: 'token over 16 KiB', code: 'ENVELOPE_PAYLOAD_TOO_LARGE', at: ALL, build: (a) => ({ mutate: only(a, (p) => { p.constraints = { blob: 'x'.repeat(13_000) } }) }) },
  { name: 'oversized garbage', code: 'ENVELOPE_PAYLOAD_TOO_LARGE', at: ALL, build: (a) => ({ after: afterAt(a, () => '.'.repeat(20_000)) }) },

  // ENVELOPE_SIGNATURE_INVALID
  { name: "signed by another agent under the issuer's kid", code: 'ENVELOPE_SIGNATURE_INVALID', at: ALL, build: (a) => ({ sign: (i, p, s) => (i === a ? rawSign({ alg: 'EdDSA', typ: ENVELOPE_TYP, kid: s.kid }, p, STRANGER.privateKey) : undefined) }) },
  { name: 'one signature bit flipped', code: 'ENVELOPE_SIGNATURE_INVALID', at: ALL, build: (a) => ({ after: afterAt(a, flipSignatureBit) }) },
  { name: 'payload replaced after signing', code: 'ENVELOPE_SIGNATURE_INVALID', at: ALL, build: (a, n) => ({ after: afterAt(a, (j) => swapPayload(j, { ...defaultPayload(a, n, PARTIES, null), parent_authority_hash: (JSON.parse(Buffer.from(j.split('.')[1]!, 'base64url').toString()) as Mutable).parent_authority_hash, envelope_id: 'env-forged' })) }) },
  { name: 'alg ES256', code: 'ENVELOPE_SIGNATURE_INVALID', at: ALL, build: (a) => ({ sign: resignAt(a, (s) => ({ alg: 'ES256', typ: ENVELOPE_TYP, kid: s.kid })) }) },
  { name: 'signature of 32 bytes', code: 'ENVELOPE_SIGNATURE_INVALID', at: ALL, build: (a) => ({ after: afterAt(a, (j) => `${j.slice(0, j.lastIndexOf('.'))}.${Buffer.alloc(32, 7).toString('base64url')}`) }) },

  // ENVELOPE_KEY_NOT_BOUND
  { name: "another DID's key and kid", code: 'ENVELOPE_KEY_NOT_BOUND', at: ALL, build: (a) => ({ sign: (i, p) => (i === a ? signEnvelope(p as unknown as EnvelopePayload, STRANGER) : undefined) }) },
  { name: 'a fragment the did:key does not have', code: 'ENVELOPE_KEY_NOT_BOUND', at: ALL, build: (a) => ({ sign: resignAt(a, (s) => ({ alg: 'EdDSA', typ: ENVELOPE_TYP, kid: `${s.did}#key-2` })) }) },
  { name: 'a relative kid', code: 'ENVELOPE_KEY_NOT_BOUND', at: ALL, build: (a) => ({ sign: resignAt(a, () => ({ alg: 'EdDSA', typ: ENVELOPE_TYP, kid: '#key-1' })) }) },
  { name: 'the bare DID as kid', code: 'ENVELOPE_KEY_NOT_BOUND', at: ALL, build: (a) => ({ sign: resignAt(a, (s) => ({ alg: 'EdDSA', typ: ENVELOPE_TYP, kid: s.did })) }) },
  { name: 'unresolvable did:web issuer', code: 'ENVELOPE_KEY_NOT_BOUND', at: ALL, build: (a) => ({ parties: ORG, ctx: { caller: { did: ORG[4]!.did, jti: ORG[4]!.jti }, resolveKey: (kid, did) => (did === ORG[a]!.did ? null : resolveKey(kid, did)) } }) },
  { name: 'async resolver answering null', code: 'ENVELOPE_KEY_NOT_BOUND', at: ALL, build: (a) => ({ ctx: { resolveKey: async (kid, did) => (did === PARTIES[a]!.did ? null : resolveKey(kid, did)) } }) },
  { name: 'async resolver rejecting', code: 'ENVELOPE_KEY_NOT_BOUND', at: ALL, build: (a) => ({ ctx: { resolveKey: async (kid, did) => { if (did === PARTIES[a]!.did) throw new Error('resolution failed'); return resolveKey(kid, did) } } }) },
  { name: 'resolver throwing', code: 'ENVELOPE_KEY_NOT_BOUND', at: ALL, build: (a) => ({ ctx: { resolveKey: (kid, did) => { if (did === PARTIES[a]!.did) throw new Error('boom'); return resolveKey(kid, did) } } }) },
  { name: 'resolver answering an X25519 key', code: 'ENVELOPE_KEY_NOT_BOUND', at: ALL, build: (a) => ({ ctx: { resolveKey: (kid, did) => (did === PARTIES[a]!.did ? x25519Public : resolveKey(kid, did)) } }) },

  // ENVELOPE_ORG_BOUNDARY
  { name: 'issuer of another org', code: 'ENVELOPE_ORG_BOUNDARY', at: ALL, build: (a, n) => ({ parties: withOutsider(a, EVIL), ctx: orgCtx(n, 'did:web:org.example') }) },
  { name: 'look-alike host', code: 'ENVELOPE_ORG_BOUNDARY', at: ALL, build: (a, n) => ({ parties: withOutsider(a, LOOKALIKE), ctx: orgCtx(n, 'did:web:org.example') }) },
  { name: 'same host, other port', code: 'ENVELOPE_ORG_BOUNDARY', at: ALL, build: (a, n) => ({ parties: withOutsider(a, OTHER_PORT), ctx: orgCtx(n, 'did:web:org.example') }) },
  { name: 'did:key issuer under a did:web boundary', code: 'ENVELOPE_ORG_BOUNDARY', at: ALL, build: (a, n) => ({ parties: withOutsider(a, PARTIES[7]!), ctx: orgCtx(n, 'did:web:org.example') }) },

  // ENVELOPE_EXPIRED / ENVELOPE_NOT_YET_VALID (time comes before narrowing: an expired parent is EXPIRED)
  { name: 'expired beyond the leeway', code: 'ENVELOPE_EXPIRED', at: ALL, build: (a) => ({ mutate: only(a, (p) => { p.expires_at = NOW - 61 }) }) },
  { name: 'issued beyond the leeway', code: 'ENVELOPE_NOT_YET_VALID', at: ALL, build: (a) => ({ mutate: only(a, (p) => { p.issued_at = NOW + 61 }) }) },

  // ENVELOPE_CHAIN_BROKEN
  { name: 'wrong parent hash', code: 'ENVELOPE_CHAIN_BROKEN', at: NON_ROOT, build: (a) => ({ mutate: only(a, (p) => { p.parent_authority_hash = 'ab'.repeat(32) }) }) },
  { name: 'parent hash of the grandparent', code: 'ENVELOPE_CHAIN_BROKEN', at: [2, 3], build: (a) => {
    const hashes: string[] = []
    return { after: (_, j) => { hashes.push(authorityHash(j)); return j }, mutate: only(a, (p) => { p.parent_authority_hash = hashes[a - 2]! }) }
  } },
  { name: 'null parent hash below the root', code: 'ENVELOPE_CHAIN_BROKEN', at: NON_ROOT, build: (a) => ({ mutate: only(a, (p) => { p.parent_authority_hash = null }) }) },
  { name: 'a root naming a parent', code: 'ENVELOPE_CHAIN_BROKEN', at: [0], build: () => ({ mutate: only(0, (p) => { p.parent_authority_hash = 'ab'.repeat(32) }) }) },
  // A changed txn_id breaks the links to both neighbours; the innermost broken link is the child's.
  { name: 'txn_id differs', code: 'ENVELOPE_CHAIN_BROKEN', at: ALL, build: (a) => ({ mutate: only(a, (p) => { p.txn_id = 'txn-2' }) }), index: (a, n) => Math.min(a + 1, n - 1) },
  { name: "issuer is not the parent's subject (validly signed)", code: 'ENVELOPE_CHAIN_BROKEN', at: NON_ROOT, build: (a) => ({
    mutate: only(a, (p) => { p.issuer_did = STRANGER.did; p.issuer_badge_jti = STRANGER.jti }),
    sign: (i, p) => (i === a ? signEnvelope(p as unknown as EnvelopePayload, STRANGER) : undefined),
    badgeMap: (m) => { m[STRANGER.did] = STRANGER.badge },
  }) },
  { name: "the leaf's subject is not the caller", code: 'ENVELOPE_BADGE_BINDING_FAILED', at: [3], build: () => ({ ctx: { caller: { did: STRANGER.did, jti: STRANGER.jti } } }) },

  // ENVELOPE_DEPTH_EXCEEDED (a negative remaining depth, or any child of a 0)
  { name: 'negative remaining depth', code: 'ENVELOPE_DEPTH_EXCEEDED', at: ALL, build: (a) => ({ mutate: only(a, (p) => { p.delegation_depth_remaining = -1 }) }) },
  { name: 'a child of an envelope allowing no delegation', code: 'ENVELOPE_DEPTH_EXCEEDED', at: NON_ROOT, build: (a) => ({ mutate: only(a - 1, (p) => { p.delegation_depth_remaining = 0 }) }) },

  // ENVELOPE_NARROWING_VIOLATION (charged to the child; an envelope whose class leaves its parent's tree is
  // also the parent of a child outside its own, and the innermost of the two violations is reported)
  { name: 'a sibling class', code: 'ENVELOPE_NARROWING_VIOLATION', at: NON_ROOT, build: (a) => ({ mutate: only(a, (p) => { p.capability_class = 'mail.send' }) }), index: (a, n) => Math.min(a + 1, n - 1) },
  { name: 'a wider class', code: 'ENVELOPE_NARROWING_VIOLATION', at: [2, 3], build: (a) => ({ mutate: only(a, (p) => { p.capability_class = 'files' }) }) },
  { name: 'a prefix that is not a dot extension', code: 'ENVELOPE_NARROWING_VIOLATION', at: [2], build: (a) => ({ mutate: only(a, (p) => { p.capability_class = 'files.readers' }) }), index: () => 3 },
  { name: 'a root narrower than its child', code: 'ENVELOPE_NARROWING_VIOLATION', at: [0], build: () => ({ mutate: only(0, (p) => { p.capability_class = 'files.read.docs.pdf' }) }), index: () => 1 },
  { name: 'expires after its parent', code: 'ENVELOPE_NARROWING_VIOLATION', at: NON_ROOT, build: (a) => ({ mutate: only(a, (p) => { p.expires_at = NOW + 3600 - (a - 1) + 1 }) }) },
  { name: 'issued before its parent', code: 'ENVELOPE_NARROWING_VIOLATION', at: NON_ROOT, build: (a) => ({ mutate: only(a, (p) => { p.issued_at = NOW - 100 + (a - 1) - 1 }) }) },
  { name: 'remaining depth equal to the parent', code: 'ENVELOPE_NARROWING_VIOLATION', at: NON_ROOT, build: (a, n) => ({ mutate: only(a, (p) => { p.delegation_depth_remaining = n - (a - 1) }) }) },

  // ENVELOPE_BADGE_BINDING_FAILED (the party at `at` is the issuer of envelope `at`, charged there)
  { name: 'no map badge for a delegator', code: 'ENVELOPE_BADGE_BINDING_FAILED', at: ALL, build: (a) => ({ badgeMap: (m) => { delete m[PARTIES[a]!.did] } }) },
  { name: "a delegator's badge revoked", code: 'ENVELOPE_BADGE_BINDING_FAILED', at: ALL, build: (a) => ({ ctx: { verifyBadge: (tok) => { revoked.add(PARTIES[a]!.jti); try { return verifyMapBadge(tok) } finally { revoked.delete(PARTIES[a]!.jti) } } } }) },
  { name: "a delegator's badge expired", code: 'ENVELOPE_BADGE_BINDING_FAILED', at: ALL, build: (a) => ({ badgeMap: (m) => { m[PARTIES[a]!.did] = mintBadge(PARTIES[a]!.did, PARTIES[a]!.jti, { issuedAt: NOW - 7200, expiresAt: NOW - 3600 }) } }) },
  { name: 'a badge from another authority', code: 'ENVELOPE_BADGE_BINDING_FAILED', at: ALL, build: (a) => ({ badgeMap: (m) => { m[PARTIES[a]!.did] = mintBadge(PARTIES[a]!.did, PARTIES[a]!.jti, { key: rogueAuthKey.privateKey }) } }) },
  { name: "another agent's badge under the DID", code: 'ENVELOPE_BADGE_BINDING_FAILED', at: ALL, build: (a) => ({ badgeMap: (m) => { m[PARTIES[a]!.did] = STRANGER.badge } }) },
  { name: 'a map value that is no badge', code: 'ENVELOPE_BADGE_BINDING_FAILED', at: ALL, build: (a) => ({ badgeMap: (m) => { m[PARTIES[a]!.did] = 'garbage' } }) },
  { name: 'issuer_badge_jti of another badge', code: 'ENVELOPE_BADGE_BINDING_FAILED', at: ALL, build: (a) => ({ mutate: only(a, (p) => { p.issuer_badge_jti = 'jti-old' }) }) },
  { name: 'subject_badge_jti of another badge', code: 'ENVELOPE_BADGE_BINDING_FAILED', at: ALL, build: (a) => ({ mutate: only(a, (p) => { p.subject_badge_jti = 'jti-old' }) }) },
  { name: "leaf bound to another of the caller's badges", code: 'ENVELOPE_BADGE_BINDING_FAILED', at: [3], build: () => ({ ctx: { caller: { did: PARTIES[4]!.did, jti: 'jti-caller-new' } } }) },
]

t.test('every error code, at the positions where it matters', async (t) => {
  const seen = new Set<EnvelopeErrorCode>()
  for (const c of CASES) {
    const n = c.n ?? N
    for (const at of c.at) {
      await t.test(`${c.code}: ${c.name} at ${at}`, async (t) => {
        expectFailure(t, await run(buildChain(n, c.build(at, n))), c.code, c.index?.(at, n) ?? at)
      })
      seen.add(c.code)
    }
  }
  seen.add('ENVELOPE_CHAIN_TOO_DEEP') // below, with decodeChainHeaders
  t.strictSame([...seen].sort(), [...ENVELOPE_ERROR_CODES].sort(), 'the table covers every code of docs/wire-contract.md §10')
})

t.test('ENVELOPE_CHAIN_TOO_DEEP in verifyChain: length before anything is decoded', async (t) => {
  const eleven = buildChain(11)
  expectFailure(t, await run(eleven), 'ENVELOPE_CHAIN_TOO_DEEP', null)
  expectFailure(t, await run({ ...buildChain(4), ctx: { ...buildChain(4).ctx, maxDepth: 3 } }), 'ENVELOPE_CHAIN_TOO_DEEP', null)
  let resolved = 0
  const garbage = await verifyChain(Array.from({ length: 11 }, () => 'garbage'), {}, { ...eleven.ctx, resolveKey: () => { resolved++; return null } })
  expectFailure(t, garbage, 'ENVELOPE_CHAIN_TOO_DEEP', null)
  t.equal(resolved, 0, 'no key resolved')
  expectFailure(t, await verifyChain(Array.from({ length: 10 }, () => 'garbage'), {}, eleven.ctx), 'ENVELOPE_MALFORMED', 9)
  expectFailure(t, await verifyChain([], {}, eleven.ctx), 'ENVELOPE_MALFORMED', null)
})

t.test('org boundary: outsiders are never resolved', async (t) => {
  const calls: string[] = []
  const built = buildChain(4, { parties: withOutsider(1, EVIL), ctx: { ...orgCtx(4, 'did:web:org.example'), resolveKey: (kid, did) => { calls.push(did); return resolveKey(kid, did) } } })
  expectFailure(t, await run(built), 'ENVELOPE_ORG_BOUNDARY', 1)
  t.strictSame(calls, [], 'the boundary is checked before any key is resolved')
  // the leaf's subject (the caller) is not an issuer and is not subject to the boundary
  const callerOutside = [...ORG.slice(0, 4), EVIL]
  t.ok((await run(buildChain(4, { parties: callerOutside, ctx: { orgTrustBoundary: 'did:web:org.example', caller: { did: EVIL.did, jti: EVIL.jti } } }))).ok)
})

t.test('"innermost, most specific": phase order first, then the envelope closest to the leaf', async (t) => {
  const mutateAt = (changes: Record<number, (p: Mutable) => void>) => (i: number, p: Mutable) => changes[i]?.(p)
  const expired = (p: Mutable) => { p.issued_at = NOW - 7200; p.expires_at = NOW - 3600 }
  expectFailure(t, await run(buildChain(4, { mutate: mutateAt({ 1: expired, 3: expired }) })), 'ENVELOPE_EXPIRED', 3)
  expectFailure(t, await run(buildChain(4, { mutate: mutateAt({ 0: expired, 2: (p) => { p.issued_at = NOW + 3600; p.expires_at = NOW + 7200 } }) })), 'ENVELOPE_NOT_YET_VALID', 2)
  expectFailure(t, await run(buildChain(4, { mutate: mutateAt({ 0: (p) => { delete p.txn_id } }), after: afterAt(3, flipSignatureBit) })), 'ENVELOPE_MALFORMED', 0)
  expectFailure(t, await run(buildChain(4, { mutate: mutateAt({ 3: expired }), after: afterAt(0, flipSignatureBit) })), 'ENVELOPE_SIGNATURE_INVALID', 0)
  expectFailure(t, await run(buildChain(4, { after: (i, j) => (i === 1 || i === 2 ? flipSignatureBit(j) : j) })), 'ENVELOPE_SIGNATURE_INVALID', 2)
  expectFailure(t, await run(buildChain(4, { sign: (i, p) => (i === 2 ? signEnvelope(p as unknown as EnvelopePayload, STRANGER) : undefined), after: afterAt(1, flipSignatureBit) })), 'ENVELOPE_KEY_NOT_BOUND', 2)
  expectFailure(t, await run(buildChain(4, { sign: (i, p) => (i === 1 ? signEnvelope(p as unknown as EnvelopePayload, STRANGER) : undefined), after: afterAt(2, flipSignatureBit) })), 'ENVELOPE_SIGNATURE_INVALID', 2)
  expectFailure(t, await run(buildChain(4, { parties: withOutsider(0, EVIL), ctx: orgCtx(4, 'did:web:org.example'), after: afterAt(3, flipSignatureBit) })), 'ENVELOPE_ORG_BOUNDARY', 0)
  expectFailure(t, await run(buildChain(4, { mutate: mutateAt({ 1: (p) => { p.txn_id = 'txn-2' }, 3: (p) => { p.capability_class = 'mail' } }) })), 'ENVELOPE_CHAIN_BROKEN', 2)
  expectFailure(t, await run(buildChain(4, { mutate: mutateAt({ 1: (p) => { p.delegation_depth_remaining = -1 }, 3: (p) => { p.capability_class = 'mail' } }) })), 'ENVELOPE_DEPTH_EXCEEDED', 1)
  expectFailure(t, await run(buildChain(4, { mutate: mutateAt({ 3: (p) => { p.capability_class = 'mail' } }), ctx: { caller: { did: STRANGER.did, jti: STRANGER.jti } } })), 'ENVELOPE_NARROWING_VIOLATION', 3)
  expectFailure(t, await run(buildChain(4, { mutate: mutateAt({ 1: (p) => { p.issuer_badge_jti = 'x' } }), ctx: { caller: { did: STRANGER.did, jti: STRANGER.jti } } })), 'ENVELOPE_BADGE_BINDING_FAILED', 3)
  expectFailure(t, await run(buildChain(4, { mutate: mutateAt({ 1: (p) => { p.issuer_badge_jti = 'x' }, 2: (p) => { p.issuer_badge_jti = 'y' } }) })), 'ENVELOPE_BADGE_BINDING_FAILED', 2)
  // deterministic: the same input gives the same answer
  const twice = buildChain(4, { mutate: mutateAt({ 1: expired, 2: expired }) })
  t.strictSame(await run(twice), await run(twice))
})

t.test('reordered, truncated and spliced chains break', async (t) => {
  const { jws, badgeMap, ctx } = buildChain(4)
  expectFailure(t, await verifyChain([jws[0]!, jws[2]!, jws[1]!, jws[3]!], badgeMap, ctx), 'ENVELOPE_CHAIN_BROKEN', 3)
  expectFailure(t, await verifyChain([jws[0]!, jws[2]!, jws[3]!], badgeMap, ctx), 'ENVELOPE_CHAIN_BROKEN', 1)
  expectFailure(t, await verifyChain([jws[1]!, jws[2]!, jws[3]!], badgeMap, ctx), 'ENVELOPE_CHAIN_BROKEN', 0)
  // Truncated: the new leaf is addressed to someone other than the caller.
  expectFailure(t, await verifyChain(jws.slice(0, 3), badgeMap, ctx), 'ENVELOPE_BADGE_BINDING_FAILED', 2)
  const other = buildChain(4, { mutate: (_, p) => { p.txn_id = 'txn-other' } })
  expectFailure(t, await verifyChain([...jws.slice(0, 2), ...other.jws.slice(2)], badgeMap, ctx), 'ENVELOPE_CHAIN_BROKEN', 2)
})

// --- decodeChainHeaders ------------------------------------------------------------------------------------

const b64url = (value: unknown): string => Buffer.from(typeof value === 'string' ? value : JSON.stringify(value)).toString('base64url')

t.test('decodeChainHeaders: shapes that decode', async (t) => {
  const built = buildChain(3)
  const leaf = built.jws[2]!
  t.equal(decodeChainHeaders({}, 10), null, 'no envelope header')
  t.equal(decodeChainHeaders({ badgeMap: '{}' }, 10), null, 'a badge map alone is no chain')
  t.strictSame(decodeChainHeaders({ authority: leaf }, 10), { ok: true, envelopes: [leaf], badgeMap: {} }, 'the leaf alone: a chain of one')
  t.strictSame(decodeChainHeaders({ chain: b64url(built.jws) }, 10), { ok: true, envelopes: built.jws, badgeMap: {} })
  t.strictSame(decodeChainHeaders({ chain: b64url(built.jws), authority: leaf }, 10), { ok: true, envelopes: built.jws, badgeMap: {} }, 'both, agreeing')
  const padded = Buffer.from(JSON.stringify(built.jws)).toString('base64')
  t.ok(padded.endsWith('=') || padded.length % 4 === 0)
  const paddedUrl = padded.replace(/\+/g, '-').replace(/\//g, '_')
  t.strictSame(decodeChainHeaders({ chain: paddedUrl }, 10), { ok: true, envelopes: built.jws, badgeMap: {} }, 'padding is tolerated')

  const raw = decodeChainHeaders({ chain: b64url(built.jws), badgeMap: JSON.stringify(built.badgeMap) }, 10)
  const encoded = decodeChainHeaders({ chain: b64url(built.jws), badgeMap: b64url(built.badgeMap) }, 10)
  const spaced = decodeChainHeaders({ chain: b64url(built.jws), badgeMap: `  ${JSON.stringify(built.badgeMap)}` }, 10)
  t.strictSame(raw, { ok: true, envelopes: built.jws, badgeMap: built.badgeMap }, 'raw JSON badge map')
  t.strictSame(encoded, raw, 'base64url badge map')
  t.strictSame(spaced, raw, 'raw JSON with leading whitespace')
  const proto = decodeChainHeaders({ authority: leaf, badgeMap: '{"__proto__":"x"}' }, 10)
  t.ok(proto !== null && proto.ok && Object.getPrototypeOf(proto.badgeMap) === Object.prototype && Object.hasOwn(proto.badgeMap, '__proto__'), '__proto__ stays an own key')

  // end to end: headers → verified chain
  const decoded = decodeChainHeaders({ chain: b64url(built.jws), authority: leaf, badgeMap: b64url(built.badgeMap) }, 10)
  if (decoded === null || !decoded.ok) return t.fail('decode')
  t.ok((await verifyChain(decoded.envelopes, decoded.badgeMap, built.ctx)).ok, 'the decoded chain verifies')
})

t.test('decodeChainHeaders: failures', async (t) => {
  const built = buildChain(3)
  const leaf = built.jws[2]!
  const expect = (headers: { authority?: string; chain?: string; badgeMap?: string }, code: EnvelopeErrorCode, index: number | null, max = 10) =>
    t.test(`${code}: ${JSON.stringify(headers).slice(0, 80)}`, async (t) => {
      const result = decodeChainHeaders(headers, max)
      if (result === null) return t.fail('null')
      expectFailure(t, result as VerifiedChain | ChainFailure, code, index)
    })
  await expect({ chain: b64url([]) }, 'ENVELOPE_MALFORMED', null)
  await expect({ chain: '***' }, 'ENVELOPE_MALFORMED', null)
  await expect({ chain: Buffer.from(JSON.stringify(built.jws)).toString('base64').replace(/=+$/, '') + '+/' }, 'ENVELOPE_MALFORMED', null)
  await expect({ chain: b64url('not json') }, 'ENVELOPE_MALFORMED', null)
  await expect({ chain: b64url({ 0: leaf }) }, 'ENVELOPE_MALFORMED', null)
  await expect({ chain: b64url([leaf, 42]) }, 'ENVELOPE_MALFORMED', 1)
  await expect({ chain: '' }, 'ENVELOPE_MALFORMED', null)
  await expect({ chain: b64url(built.jws), authority: built.jws[1]! }, 'ENVELOPE_CHAIN_BROKEN', 2)
  await expect({ chain: b64url(built.jws.slice(0, 2)), authority: leaf }, 'ENVELOPE_CHAIN_BROKEN', 1)
  await expect({ authority: leaf, badgeMap: '{' }, 'ENVELOPE_MALFORMED', null)
  await expect({ authority: leaf, badgeMap: '!!' }, 'ENVELOPE_MALFORMED', null)
  await expect({ authority: leaf, badgeMap: b64url([leaf]) }, 'ENVELOPE_MALFORMED', null)
  await expect({ authority: leaf, badgeMap: '[]' }, 'ENVELOPE_MALFORMED', null)
  await expect({ authority: leaf, badgeMap: '{"did:key:z":1}' }, 'ENVELOPE_MALFORMED', null)
  await expect({ authority: leaf, badgeMap: b64url('null') }, 'ENVELOPE_MALFORMED', null)
  // too deep before anything else is looked at: garbage elements, a disagreeing leaf header, a bad map
  const elevenGarbage = b64url(Array.from({ length: 11 }, (_, i) => (i % 2 === 0 ? 42 : 'not-a-jws')))
  await expect({ chain: elevenGarbage }, 'ENVELOPE_CHAIN_TOO_DEEP', null)
  await expect({ chain: elevenGarbage, authority: 'something else', badgeMap: '{' }, 'ENVELOPE_CHAIN_TOO_DEEP', null)
  await expect({ chain: b64url(built.jws) }, 'ENVELOPE_CHAIN_TOO_DEEP', null, 2)
  await expect({ authority: leaf }, 'ENVELOPE_CHAIN_TOO_DEEP', null, 0)
  // the same garbage within the limit is decoded and refused as malformed, which proves the order above
  await expect({ chain: b64url(Array.from({ length: 10 }, () => 42)) }, 'ENVELOPE_MALFORMED', 0)
})
