/**
 * The audit trail's tables (migration 009, docs/audit.md): pending records written beside the change they
 * describe, the chain built from them under the head row's lock, signed checkpoints, and the reads of the
 * API, the export and `agent-trust audit verify`.
 */
import { recordHash, type AuditCheckpoint, type AuditEntry, type AuditRecord } from '../../core/audit.js'
import type { Database, Queryable } from '../database.js'

/** Channel a writer notifies so that every instance's chainer looks at the pending records. */
export const AUDIT_PENDING_CHANNEL = 'audit_pending'

const ISO = (column: string): string => `to_char(${column} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`

/** One multi-row INSERT of pending records (in the caller's transaction, if any). */
export async function insertPendingAudit(q: Queryable, entries: readonly AuditEntry[]): Promise<void> {
  if (entries.length === 0) return
  const col = <T>(pick: (e: AuditEntry) => T): T[] => entries.map(pick)
  await q.query(
    `INSERT INTO audit_pending (actor_type, actor_id, org_id, action, target, outcome, request_id, digest)
     SELECT * FROM unnest($1::text[], $2::text[], $3::uuid[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[])`,
    [col((e) => e.actorType), col((e) => e.actorId), col((e) => e.orgId), col((e) => e.action), col((e) => e.target),
      col((e) => e.outcome), col((e) => e.requestId), col((e) => e.digest)],
    { name: 'audit-insert-pending' },
  )
}

/** The columns of a write's first returned row that name a record's target when the request named none, in order. */
export const AUDIT_ROW_TARGETS = ['id', 'jti', 'did'] as const

const SINGLE_WRITE_RETURNING = /^\s*(INSERT|UPDATE|DELETE)\b[\s\S]*\bRETURNING\b/i

/** Whether withPendingRecord can wrap `text`: one INSERT, UPDATE or DELETE with a RETURNING clause. */
export function canCarryPendingRecord(text: string): boolean {
  return SINGLE_WRITE_RETURNING.test(text)
}

/**
 * `text` rewritten to insert `entry` as a pending record in the same statement, when the statement
 * returned a row (a RETURNING statement that returns none changed nothing); the record's target, when the
 * entry names none, is the first row's `id`, `jti` or `did`, as a string. The rows are the statement's
 * own. Null for a statement that cannot be wrapped (no RETURNING, or a WITH or MERGE of its own): the
 * caller inserts the record beside it. Saves the INSERT's round trip on each audited write.
 */
export function withPendingRecord(text: string, params: readonly unknown[], entry: AuditEntry): { text: string; params: unknown[] } | null {
  if (!canCarryPendingRecord(text)) return null
  const n = params.length
  const at = (i: number): string => `$${n + i}`
  const statement = text.trim().replace(/;\s*$/, '')
  const firstRow = `(SELECT to_jsonb(w) AS r FROM audited_write w LIMIT 1)`
  const rowTarget = AUDIT_ROW_TARGETS.map((c) => `CASE WHEN jsonb_typeof(r->'${c}') = 'string' THEN r->>'${c}' END`).join(', ')
  return {
    text: `WITH audited_write AS (${statement}),
audit_entry AS (
  INSERT INTO audit_pending (actor_type, actor_id, org_id, action, target, outcome, request_id, digest)
  SELECT ${at(1)}::text, ${at(2)}::text, ${at(3)}::uuid, ${at(4)}::text,
         COALESCE(${at(5)}::text, (SELECT COALESCE(${rowTarget}) FROM ${firstRow} first_row)),
         ${at(6)}::text, ${at(7)}::text, ${at(8)}::text
  WHERE EXISTS (SELECT 1 FROM audited_write)
)
SELECT * FROM audited_write`,
    params: [...params, entry.actorType, entry.actorId, entry.orgId, entry.action, entry.target, entry.outcome, entry.requestId, entry.digest],
  }
}

export interface ChainHead {
  readonly chain: string
  readonly seq: number
  readonly hash: string
  readonly checkpointSeq: number
  /** Unix milliseconds of the last checkpoint (or of the chain's creation). */
  readonly checkpointAt: number
}

interface HeadRow { chain_id: string; seq: string | number; head_hash: string; checkpoint_seq: string | number; checkpoint_ms: string | number }
const headOf = (row: HeadRow): ChainHead => ({
  chain: row.chain_id, seq: Number(row.seq), hash: row.head_hash, checkpointSeq: Number(row.checkpoint_seq), checkpointAt: Number(row.checkpoint_ms),
})
const HEAD_COLUMNS = `chain_id, seq, head_hash, checkpoint_seq, (extract(epoch FROM checkpoint_at) * 1000)::bigint AS checkpoint_ms`

export async function readChainHead(q: Queryable): Promise<ChainHead> {
  const rows = await q.query<HeadRow>(`SELECT ${HEAD_COLUMNS} FROM audit_head ORDER BY chain_id LIMIT 1`)
  if (rows[0] === undefined) throw new Error('the audit chain head row is missing (migration 009 not applied?)')
  return headOf(rows[0])
}

/** Decides whether the new head gets a checkpoint; returns its JWS, or null for none. */
export type CheckpointSigner = (head: ChainHead, force: boolean) => string | null

/**
 * Chains up to `limit` pending records in one transaction: locks the head row (so chainers of several
 * instances take turns and never fork the chain), numbers and hashes the oldest pending records, moves
 * them into audit_records, and writes a checkpoint when `sign` gives one. Returns how many it chained.
 */
export async function chainPendingAudit(db: Database, limit: number, sign: CheckpointSigner, forceCheckpoint = false): Promise<{ chained: number; checkpoint: boolean; head: ChainHead }> {
  return db.transaction(async (tx) => {
    const headRows = await tx.query<HeadRow>(`SELECT ${HEAD_COLUMNS} FROM audit_head ORDER BY chain_id LIMIT 1 FOR UPDATE`)
    if (headRows[0] === undefined) throw new Error('the audit chain head row is missing (migration 009 not applied?)')
    let head = headOf(headRows[0])
    const pending = await tx.query<{ id: string; time: string; actor_type: AuditEntry['actorType']; actor_id: string | null; org_id: string | null; action: string; target: string | null; outcome: string; request_id: string | null; digest: string | null }>(
      `SELECT id, ${ISO('recorded_at')} AS time, actor_type, actor_id, org_id, action, target, outcome, request_id, digest
       FROM audit_pending ORDER BY id LIMIT $1`, [limit])
    const records: AuditRecord[] = []
    let prev = head.hash
    let seq = head.seq
    for (const row of pending) {
      seq++
      const body = {
        chain: head.chain, seq, time: row.time, actorType: row.actor_type, actorId: row.actor_id, orgId: row.org_id,
        action: row.action, target: row.target, outcome: row.outcome, requestId: row.request_id, digest: row.digest, prevHash: prev,
      }
      const hash = recordHash(body)
      records.push({ ...body, hash })
      prev = hash
    }
    if (records.length > 0) {
      const col = <T>(pick: (r: AuditRecord) => T): T[] => records.map(pick)
      await tx.query(
        `INSERT INTO audit_records (chain_id, seq, recorded_at, actor_type, actor_id, org_id, action, target, outcome, request_id, digest, prev_hash, hash)
         SELECT $1::uuid, * FROM unnest($2::bigint[], $3::timestamptz[], $4::text[], $5::text[], $6::uuid[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[])`,
        [head.chain, col((r) => r.seq), col((r) => r.time), col((r) => r.actorType), col((r) => r.actorId), col((r) => r.orgId), col((r) => r.action),
          col((r) => r.target), col((r) => r.outcome), col((r) => r.requestId), col((r) => r.digest), col((r) => r.prevHash), col((r) => r.hash)],
      )
      await tx.query('DELETE FROM audit_pending WHERE id = ANY($1::bigint[])', [pending.map((row) => row.id)])
      head = { ...head, seq, hash: prev }
    }
    const jws = head.seq > head.checkpointSeq ? sign(head, forceCheckpoint) : null
    if (jws !== null) {
      await tx.query('INSERT INTO audit_checkpoints (chain_id, seq, head_hash, jws) VALUES ($1, $2, $3, $4)', [head.chain, head.seq, head.hash, jws])
      head = { ...head, checkpointSeq: head.seq, checkpointAt: Date.now() }
    }
    if (records.length > 0 || jws !== null) {
      await tx.query(
        `UPDATE audit_head SET seq = $2, head_hash = $3, checkpoint_seq = $4, checkpoint_at = CASE WHEN $5 THEN now() ELSE checkpoint_at END WHERE chain_id = $1`,
        [head.chain, head.seq, head.hash, head.checkpointSeq, jws !== null],
      )
    }
    return { chained: records.length, checkpoint: jws !== null, head }
  })
}

interface RecordRow {
  chain_id: string; seq: string | number; time: string; actor_type: AuditEntry['actorType']; actor_id: string | null; org_id: string | null
  action: string; target: string | null; outcome: string; request_id: string | null; digest: string | null; prev_hash: string; hash: string
}
const RECORD_COLUMNS = `chain_id, seq, ${ISO('recorded_at')} AS time, actor_type, actor_id, org_id, action, target, outcome, request_id, digest, prev_hash, hash`
const recordOf = (row: RecordRow): AuditRecord => ({
  chain: row.chain_id, seq: Number(row.seq), time: row.time, actorType: row.actor_type, actorId: row.actor_id, orgId: row.org_id,
  action: row.action, target: row.target, outcome: row.outcome, requestId: row.request_id, digest: row.digest, prevHash: row.prev_hash, hash: row.hash,
})

export interface AuditFilter {
  /** Only this organization's records; null: every record (operators). */
  readonly orgId: string | null
  readonly action?: string
  readonly actor?: string
  readonly target?: string
  readonly since?: Date
  readonly until?: Date
  /** Records below this seq only (the cursor). */
  readonly beforeSeq?: number
}

/** Newest first, `limit + 1` rows (the extra one says whether a next page exists). */
export async function listAuditRecords(q: Queryable, filter: AuditFilter, limit: number): Promise<AuditRecord[]> {
  const where: string[] = []
  const params: unknown[] = []
  const add = (clause: (n: string) => string, value: unknown): void => {
    params.push(value)
    where.push(clause(`$${params.length}`))
  }
  if (filter.orgId !== null) add((n) => `org_id = ${n}::uuid`, filter.orgId)
  if (filter.action !== undefined) {
    // `agent.*` names a family of actions.
    if (filter.action.endsWith('.*')) add((n) => `starts_with(action, ${n})`, filter.action.slice(0, -1))
    else add((n) => `action = ${n}`, filter.action)
  }
  if (filter.actor !== undefined) add((n) => `actor_id = ${n}`, filter.actor)
  if (filter.target !== undefined) add((n) => `target = ${n}`, filter.target)
  if (filter.since !== undefined) add((n) => `recorded_at >= ${n}`, filter.since)
  if (filter.until !== undefined) add((n) => `recorded_at < ${n}`, filter.until)
  if (filter.beforeSeq !== undefined) add((n) => `seq < ${n}`, filter.beforeSeq)
  params.push(limit + 1)
  const rows = await q.query<RecordRow>(
    `SELECT ${RECORD_COLUMNS} FROM audit_records ${where.length === 0 ? '' : `WHERE ${where.join(' AND ')}`} ORDER BY seq DESC LIMIT $${params.length}`,
    params,
  )
  return rows.map(recordOf)
}

/** Records in seq order after `afterSeq`, `limit` at a time (the export and the verifier page with this). */
export async function readAuditRange(q: Queryable, afterSeq: number, limit: number): Promise<AuditRecord[]> {
  const rows = await q.query<RecordRow>(`SELECT ${RECORD_COLUMNS} FROM audit_records WHERE seq > $1 ORDER BY seq LIMIT $2`, [afterSeq, limit])
  return rows.map(recordOf)
}

export async function readAuditCheckpoints(q: Queryable): Promise<AuditCheckpoint[]> {
  const rows = await q.query<{ chain_id: string; seq: string | number; head_hash: string; jws: string }>(
    'SELECT chain_id, seq, head_hash, jws FROM audit_checkpoints ORDER BY seq')
  return rows.map((row) => ({ chain: row.chain_id, seq: Number(row.seq), head: row.head_hash, jws: row.jws }))
}


