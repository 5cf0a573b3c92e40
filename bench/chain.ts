/**
 * Micro-benchmark of delegation-chain verification (docs/wire-contract.md §10): a 3-envelope chain between did:key
 * agents, the intermediate agents' badges verified through a small cache like the gateway's badge stage
 * (token → verified identity, re-checked for expiry), keys through a kid → KeyObject cache.
 *
 *   node dist/bench/chain.js [iterations] [rounds]   (default 2000 and 5; also BENCH_ITERATIONS, BENCH_ROUNDS)
 *
 * Reports µs per verification:
 * - cold: both caches empty on every verification (every key decoded from its DID, every badge verified);
 * - warm: both caches filled (the gateway's steady state: three Ed25519 signature checks, decoding, hashing);
 * - warm, async resolver: as warm, with `resolveKey` returning a promise (as a did:web resolver would);
 * - gateway chain stage: src/gateway/stages/chain.ts itself, from the raw headers, through the gateway's
 *   badge cache (the figure the issue's "under 1 ms per request" target is about);
 * and, for scale, one bare Ed25519 verification, since a loaded machine moves every number: the ratio to
 * it (three signatures make the floor of 3.0) is the figure that carries over. Target: well under 1 ms.
 */
import { generateKeyPairSync, verify, type KeyObject } from 'node:crypto'
import { performance } from 'node:perf_hooks'
import { buildBadgeClaims, CLOCK_LEEWAY_SECONDS, signBadge, verifyBadge } from '../src/core/badge.js'
import { didKeyVerificationMethodId, encodeDidKey } from '../src/core/did-key.js'
import { authorityHash, didKeyPublicKey, signEnvelope, verifyChain, type ChainContext, type EnvelopePayload } from '../src/core/envelope.js'
import { BadgeVerifier } from '../src/gateway/identity/badge.js'
import { ChainVerifier } from '../src/gateway/identity/chain.js'
import { SnapshotHolder } from '../src/gateway/snapshot/snapshot.js'

const ITERATIONS = Number(process.argv[2] ?? process.env.BENCH_ITERATIONS ?? 2000)
const ROUNDS = Number(process.argv[3] ?? process.env.BENCH_ROUNDS ?? 5)
const CHAIN_LENGTH = 3
const NOW = Math.floor(Date.now() / 1000)
const AUTHORITY = 'http://bench.local'
const auth = generateKeyPairSync('ed25519')
const authKeys = new Map([['ca-1', auth.publicKey]])

const parties = Array.from({ length: CHAIN_LENGTH + 1 }, (_, i) => {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519')
  const did = encodeDidKey(Buffer.from((publicKey.export({ format: 'jwk' }) as { x: string }).x, 'base64url'))
  const jti = `jti-${i}`
  const claims = buildBadgeClaims({ jti, issuer: AUTHORITY, subject: did, issuedAt: NOW - 10, expiresAt: NOW + 3600, ial: '1', level: '2', domain: 'bench.local' })
  return { did, kid: didKeyVerificationMethodId(did), privateKey, jti, badge: signBadge(claims, { kid: 'ca-1', privateKey: auth.privateKey }) }
})

const envelopes: string[] = []
for (let i = 0; i < CHAIN_LENGTH; i++) {
  const payload: EnvelopePayload = {
    envelope_id: `env-${i}`,
    issuer_did: parties[i]!.did,
    subject_did: parties[i + 1]!.did,
    txn_id: '0190d6c2-7a1e-7c3b-9f00-000000000001',
    parent_authority_hash: i === 0 ? null : authorityHash(envelopes[i - 1]!),
    capability_class: ['files', 'files.read', 'files.read.docs'][i]!,
    constraints: { max_bytes: 1_000_000 >> i },
    delegation_depth_remaining: CHAIN_LENGTH - i,
    enforcement_mode_min: i === 1 ? 'EM-GUARD' : null,
    issued_at: NOW - 60 + i,
    expires_at: NOW + 600 - i,
    issuer_badge_jti: parties[i]!.jti,
    subject_badge_jti: i === 0 ? null : parties[i + 1]!.jti,
    prompt_summary: 'summarise the quarterly reports',
  }
  envelopes.push(signEnvelope(payload, parties[i]!))
}
const badgeMap: Record<string, string> = Object.fromEntries(parties.slice(0, CHAIN_LENGTH).map((p) => [p.did, p.badge]))
const caller = parties[CHAIN_LENGTH]!

/** A badge cache like the gateway's badge stage: a verified token is re-checked only for expiry. */
function badgeVerifier(cache: Map<string, { did: string; jti: string; exp: number }>): ChainContext['verifyBadge'] {
  return (token) => {
    const hit = cache.get(token)
    if (hit !== undefined) return hit.exp + CLOCK_LEEWAY_SECONDS >= NOW ? hit : null
    const result = verifyBadge(token, { keys: authKeys, issuer: AUTHORITY, now: NOW })
    if (!result.valid) return null
    const entry = { did: result.claims.sub, jti: result.claims.jti, exp: result.claims.exp }
    if (cache.size >= 1024) cache.delete(cache.keys().next().value as string)
    cache.set(token, entry)
    return entry
  }
}

function keyResolver(cache: Map<string, KeyObject | null>): (kid: string, issuerDid: string) => KeyObject | null {
  return (kid, issuerDid) => {
    const cacheKey = `${issuerDid} ${kid}`
    let key = cache.get(cacheKey)
    if (key === undefined) {
      key = didKeyPublicKey(kid, issuerDid)
      cache.set(cacheKey, key)
    }
    return key
  }
}

const baseContext = { now: NOW, maxDepth: 10, orgTrustBoundary: null, caller: { did: caller.did, jti: caller.jti } }

/** µs per call of `once`, after a warm-up. */
async function time(once: () => unknown): Promise<number> {
  for (let i = 0; i < Math.min(300, ITERATIONS); i++) await once()
  const start = performance.now()
  for (let i = 0; i < ITERATIONS; i++) await once()
  return ((performance.now() - start) * 1000) / ITERATIONS
}

const verifies = (makeContext: () => ChainContext) => async (): Promise<void> => {
  const result = await verifyChain(envelopes, badgeMap, makeContext())
  if (!result.ok) throw new Error(`${result.code} at ${String(result.index)}: ${result.detail}`)
}

/**
 * The gateway's own stage, as a request meets it: the three headers as a client sends them (chain and
 * badge map base64url-encoded), decoded and verified through the gateway's real badge cache and key
 * cache, against a snapshot holding the authority key.
 */
function stageVerifies(): () => Promise<void> {
  const holder = new SnapshotHolder()
  const snapshot = holder.swap({ issuer: AUTHORITY, keys: authKeys, keysVersion: 'ca-1', revoked: new Set(), bundle: null })
  const stage = new ChainVerifier({ maxDepth: 10, orgTrustBoundary: null, didWeb: null, badges: new BadgeVerifier({ acceptSelfSigned: false }) })
  const encode = (value: unknown): string => Buffer.from(JSON.stringify(value), 'utf8').toString('base64url')
  const headers = { authority: envelopes[CHAIN_LENGTH - 1]!, chain: encode(envelopes), badgeMap: encode(badgeMap) }
  const who = { did: caller.did, jti: caller.jti }
  return async () => {
    const result = await stage.verify(headers, who, snapshot, NOW)
    if (result === null || !result.ok) throw new Error(`chain stage refused the chain: ${JSON.stringify(result)}`)
  }
}

const median = (values: number[]): number => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!

async function main(): Promise<void> {
  console.log(`chain of ${CHAIN_LENGTH} did:key envelopes, ${ROUNDS} rounds of ${ITERATIONS} iterations (medians), node ${process.version}`)
  const signingInput = Buffer.from(envelopes[0]!.slice(0, envelopes[0]!.lastIndexOf('.')), 'ascii')
  const signature = Buffer.from(envelopes[0]!.slice(envelopes[0]!.lastIndexOf('.') + 1), 'base64url')
  const rootKey = didKeyPublicKey(parties[0]!.kid, parties[0]!.did)!

  const keys = new Map<string, KeyObject | null>()
  const badges = new Map<string, { did: string; jti: string; exp: number }>()
  const warm: ChainContext = { ...baseContext, resolveKey: keyResolver(keys), verifyBadge: badgeVerifier(badges) }
  const resolveWarm = keyResolver(keys)
  const phases: [string, () => unknown][] = [
    ['one bare Ed25519 verify (scale)', () => verify(null, signingInput, rootKey, signature)],
    ['cold (key and badge caches empty)', verifies(() => ({ ...baseContext, resolveKey: keyResolver(new Map()), verifyBadge: badgeVerifier(new Map()) }))],
    ['warm (key and badge caches filled)', verifies(() => warm)],
    ['warm, async resolver', verifies(() => ({ ...warm, resolveKey: async (kid: string, did: string) => resolveWarm(kid, did) }))],
    ['gateway chain stage, headers → chain', stageVerifies()],
  ]
  // Interleaved rounds: on a shared machine, background load then hits every phase alike.
  const samples = phases.map(() => [] as number[])
  for (let round = 0; round < ROUNDS; round++) {
    for (const [i, [, once]] of phases.entries()) samples[i]!.push(await time(once))
  }
  const results = samples.map(median)
  const bare = results[0]!
  for (const [i, [name]] of phases.entries()) {
    const us = results[i]!
    console.log(`${name.padEnd(36)} ${us.toFixed(1).padStart(8)} µs${i === 0 ? '' : `  (${(us / bare).toFixed(2)} × one Ed25519 verify)`}`)
  }
  // The issue's figure: what a 3-envelope chain adds to a request at the gateway (its warm stage).
  const stageUs = results[4]!
  console.log(stageUs < 1000 ? 'target met: the gateway chain stage adds under 1 ms' : 'TARGET MISSED: the gateway chain stage adds 1 ms or more')
}

await main()
