/**
 * The audit trail's vocabulary (docs/audit.md): what a record holds, the exact input of its hash, the
 * signed checkpoint, and the verifier the CLI and the tests share. Hashes are hex SHA-256 of the RFC 8785
 * canonical JSON of a record's fields; checkpoints are compact EdDSA JWS verified with node:crypto.
 */
import { createHash, createPublicKey, sign, verify, type KeyObject } from 'node:crypto'
import canonicalize from 'canonicalize'

export const AUDIT_ACTOR_TYPES = ['key', 'user', 'operator', 'gateway', 'idp', 'cli'] as const
export type AuditActorType = (typeof AUDIT_ACTOR_TYPES)[number]

/** The `prev` of a chain's first record. */
export const GENESIS_HASH = '0'.repeat(64)
/** The `typ` of a checkpoint's JWS header. */
export const CHECKPOINT_TYP = 'audit-checkpoint+jws'

/** A record before it is chained (what a write inserts into audit_pending). */
export interface AuditEntry {
  readonly actorType: AuditActorType
  readonly actorId: string | null
  readonly orgId: string | null
  readonly action: string
  readonly target: string | null
  readonly outcome: string
  readonly requestId: string | null
  readonly digest: string | null
}

/** A chained record as the API and the export show it. */
export interface AuditRecord extends AuditEntry {
  readonly chain: string
  readonly seq: number
  /** ISO 8601 with milliseconds, UTC. */
  readonly time: string
  readonly prevHash: string
  readonly hash: string
}

export interface AuditCheckpoint {
  readonly chain: string
  readonly seq: number
  readonly head: string
  readonly jws: string
}

const isTextOrNull = (value: unknown): boolean => value === null || typeof value === 'string'

/** Whether a record has the shape the database stores: strings or null, a positive integer seq. */
export function hasStoredShape(r: Omit<AuditRecord, 'hash'>): boolean {
  return typeof r.chain === 'string' && Number.isSafeInteger(r.seq) && r.seq >= 1 && typeof r.time === 'string' && typeof r.action === 'string'
    && typeof r.actorType === 'string' && typeof r.outcome === 'string' && typeof r.prevHash === 'string'
    && isTextOrNull(r.actorId) && isTextOrNull(r.orgId) && isTextOrNull(r.target) && isTextOrNull(r.requestId) && isTextOrNull(r.digest)
}

/**
 * The exact string a record's hash is taken over (docs/audit.md, "Hash input"): RFC 8785 canonical JSON.
 * A record of the stored shape is written directly, members in their canonical order, which is what
 * canonicalize writes for it and a fifth of its cost (the chainer hashes every record); any other shape
 * goes through canonicalize itself.
 */
export function recordHashInput(record: Omit<AuditRecord, 'hash'>): string {
  const r = record
  if (hasStoredShape(r)) {
    const j = JSON.stringify
    return `{"action":${j(r.action)},"actorId":${j(r.actorId)},"actorType":${j(r.actorType)},"chain":${j(r.chain)},"digest":${j(r.digest)},`
      + `"orgId":${j(r.orgId)},"outcome":${j(r.outcome)},"prev":${j(r.prevHash)},"requestId":${j(r.requestId)},"seq":${r.seq},`
      + `"target":${j(r.target)},"time":${j(r.time)}}`
  }
  return canonicalize({
    chain: record.chain, seq: record.seq, time: record.time,
    actorType: record.actorType, actorId: record.actorId, orgId: record.orgId,
    action: record.action, target: record.target, outcome: record.outcome,
    requestId: record.requestId, digest: record.digest, prev: record.prevHash,
  }) as string
}

export function recordHash(record: Omit<AuditRecord, 'hash'>): string {
  return createHash('sha256').update(recordHashInput(record), 'utf8').digest('hex')
}

// Field names whose values never enter a digest, even hashed: a digest of a short secret could be guessed.
const SECRET_FIELD = /(secret|token|password|passphrase|private|assertion|credential|key$|^d$|jwk$|^keys$)/i

/** The change with every secret-named field replaced, as the digest sees it. */
export function redactSecrets(value: unknown, depth = 0): unknown {
  if (depth > 32) return '[deep]'
  if (Array.isArray(value)) return value.map((item) => redactSecrets(item, depth + 1))
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {}
    for (const [key, item] of Object.entries(value as Record<string, unknown>)) {
      out[key] = SECRET_FIELD.test(key) ? '[redacted]' : redactSecrets(item, depth + 1)
    }
    return out
  }
  return value
}

/** Hex SHA-256 of the canonical JSON of the change, secrets redacted; null for no change body. */
export function changeDigest(change: unknown): string | null {
  if (change === undefined) return null
  const text = canonicalize(redactSecrets(change) ?? null) ?? 'null'
  return createHash('sha256').update(text, 'utf8').digest('hex')
}

/** The admin request an audited write belongs to (set by the admin plane's audit plugin). */
export interface AuditScope {
  /** Set once the request passed authentication and validation: writes before that are bookkeeping. */
  armed: boolean
  /** The pending record is written (or was handed to a batch that writes it). */
  recorded: boolean
  readonly action: string
  actorType: AuditActorType
  actorId: string | null
  orgId: string | null
  target: string | null
  readonly requestId: string
  digest: string | null
  /** Called after the transaction holding the pending record committed. */
  readonly committed: () => void
}

/** The entry of a request's scope with its outcome, marking it recorded; null when none is due. */
export function takeScopedEntry(scope: AuditScope | null, outcome = 'success'): AuditEntry | null {
  if (scope === null || !scope.armed || scope.recorded) return null
  scope.recorded = true
  return {
    actorType: scope.actorType, actorId: scope.actorId, orgId: scope.orgId, action: scope.action,
    target: scope.target, outcome, requestId: scope.requestId, digest: scope.digest,
  }
}

const encode = (value: unknown): string => Buffer.from(JSON.stringify(value), 'utf8').toString('base64url')

/** A checkpoint's compact JWS: header {alg, typ, kid}, payload {chain, seq, head, iat, iss}. */
export function signCheckpoint(
  body: { chain: string; seq: number; head: string; iat: number; iss: string }, key: { kid: string; privateKey: KeyObject },
): string {
  const input = `${encode({ alg: 'EdDSA', typ: CHECKPOINT_TYP, kid: key.kid })}.${encode(body)}`
  return `${input}.${sign(null, Buffer.from(input, 'ascii'), key.privateKey).toString('base64url')}`
}

export interface Jwks {
  readonly keys: readonly Record<string, unknown>[]
}

/** The payload of a checkpoint JWS that verifies against `jwks`, or the reason it does not. */
export function verifyCheckpointJws(jws: string, jwks: Jwks): { chain: string; seq: number; head: string } | string {
  const parts = jws.split('.')
  if (parts.length !== 3) return 'checkpoint JWS is not compact serialization'
  let header: Record<string, unknown>
  let payload: Record<string, unknown>
  try {
    header = JSON.parse(Buffer.from(parts[0]!, 'base64url').toString('utf8')) as Record<string, unknown>
    payload = JSON.parse(Buffer.from(parts[1]!, 'base64url').toString('utf8')) as Record<string, unknown>
  } catch {
    return 'checkpoint JWS segments are not JSON'
  }
  if (header.alg !== 'EdDSA' || header.typ !== CHECKPOINT_TYP || typeof header.kid !== 'string' || 'crit' in header || 'jwk' in header) {
    return 'checkpoint JWS header is not {alg: EdDSA, typ, kid}'
  }
  const jwk = jwks.keys.find((k) => k.kid === header.kid && k.kty === 'OKP' && k.crv === 'Ed25519' && typeof k.x === 'string')
  if (jwk === undefined) return `checkpoint signed by ${header.kid}, which is not in the JWKS`
  let key: KeyObject
  try {
    key = createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: jwk.x as string }, format: 'jwk' })
  } catch {
    return `JWKS key ${header.kid} is not a valid Ed25519 key`
  }
  const ok = verify(null, Buffer.from(`${parts[0]}.${parts[1]}`, 'ascii'), key, Buffer.from(parts[2]!, 'base64url'))
  if (!ok) return 'checkpoint signature does not verify'
  if (typeof payload.chain !== 'string' || !Number.isSafeInteger(payload.seq) || typeof payload.head !== 'string') {
    return 'checkpoint payload lacks chain, seq or head'
  }
  return { chain: payload.chain, seq: payload.seq as number, head: payload.head }
}

export interface VerifyFailure {
  /** The seq of the first record that does not verify (for a missing record, the seq expected there). */
  readonly seq: number
  readonly reason: string
}

export interface VerifyReport {
  readonly ok: boolean
  readonly chain: string | null
  readonly records: number
  readonly checkpoints: number
  /** The highest seq a verified checkpoint signs (0: none). */
  readonly signedThrough: number
  readonly failure: VerifyFailure | null
}

/**
 * Checks records (in the order given, which must be seq order) and checkpoints: gap-free seqs from
 * `startSeq` (1, or where a continuing export starts), each `prevHash` the previous record's hash, each hash
 * recomputed, and every checkpoint's signature and head against the record at its seq. The last record
 * must be covered by a checkpoint unless `requireSignedHead` is false.
 */
export function verifyAuditChain(
  records: readonly AuditRecord[], checkpoints: readonly AuditCheckpoint[], jwks: Jwks,
  options: { requireSignedHead?: boolean; expectedHead?: { seq: number; hash: string }; startSeq?: number } = {},
): VerifyReport {
  const base = { records: records.length, checkpoints: checkpoints.length }
  const chain = records[0]?.chain ?? checkpoints[0]?.chain ?? null
  const fail = (seq: number, reason: string, signedThrough = 0): VerifyReport => ({ ok: false, chain, ...base, signedThrough, failure: { seq, reason } })
  const hashes = new Map<number, string>()
  const first = records[0]
  const startSeq = options.startSeq ?? 1
  let expectedSeq = startSeq
  // A chain from 1 links to the genesis hash; a continuing export links to the previous export's last hash.
  let prev = startSeq === 1 || first === undefined ? GENESIS_HASH : first.prevHash
  for (const record of records) {
    if (record.chain !== chain) return fail(record.seq, `record belongs to chain ${record.chain}, not ${chain}`)
    if (record.seq !== expectedSeq) {
      return record.seq > expectedSeq
        ? fail(expectedSeq, `record ${expectedSeq} is missing (the next record present is ${record.seq})`)
        : fail(record.seq, `record ${record.seq} is out of order or repeated (expected ${expectedSeq})`)
    }
    if (record.prevHash !== prev) return fail(record.seq, 'prevHash does not match the previous record\'s hash')
    const { hash, ...rest } = record
    if (!hasStoredShape(rest)) return fail(record.seq, 'record does not have the stored shape (a member of another type)')
    if (recordHash(rest) !== hash) return fail(record.seq, 'hash does not match the record\'s contents')
    hashes.set(record.seq, hash)
    prev = hash
    expectedSeq++
  }
  const lastSeq = expectedSeq - 1
  let signedThrough = 0
  for (const checkpoint of checkpoints) {
    const payload = verifyCheckpointJws(checkpoint.jws, jwks)
    if (typeof payload === 'string') return fail(checkpoint.seq, payload, signedThrough)
    if (payload.chain !== checkpoint.chain || payload.seq !== checkpoint.seq || payload.head !== checkpoint.head) {
      return fail(checkpoint.seq, 'checkpoint row differs from what its JWS signs', signedThrough)
    }
    if (chain !== null && payload.chain !== chain) return fail(checkpoint.seq, 'checkpoint names another chain', signedThrough)
    const hash = hashes.get(payload.seq)
    if (hash === undefined) {
      if (payload.seq > lastSeq) return fail(lastSeq + 1, `records up to ${payload.seq}, signed by a checkpoint, are missing`, signedThrough)
      continue
    }
    if (hash !== payload.head) return fail(payload.seq, 'record hash differs from the signed checkpoint head', signedThrough)
    signedThrough = Math.max(signedThrough, payload.seq)
  }
  if (options.expectedHead !== undefined) {
    const head = options.expectedHead
    if (head.seq !== lastSeq) return fail(Math.min(head.seq, lastSeq) + 1, `the chain head says ${head.seq} records, ${lastSeq} are present`, signedThrough)
    if (records.length > 0 && head.hash !== prev) return fail(lastSeq, 'the last record differs from the chain head', signedThrough)
  }
  if (options.requireSignedHead === true && signedThrough < lastSeq) {
    return fail(signedThrough + 1, `records from ${signedThrough + 1} to ${lastSeq} are not covered by a signed checkpoint`, signedThrough)
  }
  return { ok: true, chain, ...base, signedThrough, failure: null }
}
