/**
 * `agent-trust audit verify` (docs/audit.md, "Verifying"): checks the audit chain in a database, or an
 * export (`GET /v1/audit/export`), against the authority's JWKS (a file or a URL), and names the first record
 * that does not verify. Exit 0: the chain verifies; 1: it does not (or cannot be read); 2: usage.
 */
import { readFile } from 'node:fs/promises'
import { hostname, userInfo } from 'node:os'
import { changeDigest, verifyAuditChain, type AuditCheckpoint, type AuditEntry, type AuditRecord, type Jwks, type VerifyReport } from '../core/audit.js'
import type { Database } from '../db/database.js'
import { AUDIT_PENDING_CHANNEL, insertPendingAudit, readAuditCheckpoints, readAuditRange, readChainHead } from '../db/repositories/audit.js'
import { UsageError } from './args.js'

/** The JWKS in a file or at an http(s) URL. */
export async function loadJwks(source: string): Promise<Jwks> {
  let text: string
  if (/^https?:\/\//i.test(source)) {
    const response = await fetch(source, { signal: AbortSignal.timeout(10_000), redirect: 'error' })
    if (!response.ok) throw new Error(`JWKS ${source} answered ${response.status}`)
    text = await response.text()
  } else {
    text = await readFile(source, 'utf8')
  }
  const value = JSON.parse(text) as { keys?: unknown }
  if (!Array.isArray(value.keys)) throw new Error(`${source} is not a JWK set (no "keys" array)`)
  // Only public members are read; a private `d` in the file is ignored.
  return { keys: value.keys.filter((k): k is Record<string, unknown> => k !== null && typeof k === 'object') }
}

/** Records, checkpoints and the head line of an export, in file order; a malformed line is a failure at its number. */
export function parseExport(text: string): { records: AuditRecord[]; checkpoints: AuditCheckpoint[]; head: { seq: number; hash: string; from: number } | null } {
  const records: AuditRecord[] = []
  const checkpoints: AuditCheckpoint[] = []
  let head: { seq: number; hash: string; from: number } | null = null
  const lines = text.split('\n')
  lines.forEach((line, i) => {
    if (line.trim() === '') return
    let value: Record<string, unknown>
    try {
      value = JSON.parse(line) as Record<string, unknown>
    } catch {
      throw new Error(`line ${i + 1} is not JSON`)
    }
    if (value.type === 'record') {
      const { type: _type, ...record } = value
      records.push(record as unknown as AuditRecord)
    } else if (value.type === 'checkpoint') {
      checkpoints.push({ chain: value.chain as string, seq: value.seq as number, head: value.head as string, jws: value.jws as string })
    } else if (value.type === 'head') {
      head = { seq: value.seq as number, hash: value.hash as string, from: Number.isSafeInteger(value.from) ? value.from as number : 1 }
    } else {
      throw new Error(`line ${i + 1} has no known "type"`)
    }
  })
  return { records, checkpoints, head }
}

/** The whole chain of a database, read in pages, with its checkpoints and head. */
export async function verifyDatabaseChain(db: Database, jwks: Jwks, options: { requireSignedHead?: boolean } = {}): Promise<VerifyReport> {
  const head = await readChainHead(db)
  const records: AuditRecord[] = []
  let after = 0
  for (;;) {
    const page = await readAuditRange(db, after, 5000)
    records.push(...page)
    if (page.length < 5000) break
    after = page[page.length - 1]!.seq
  }
  const checkpoints = await readAuditCheckpoints(db)
  return verifyAuditChain(records, checkpoints, jwks, { ...options, expectedHead: { seq: head.seq, hash: head.hash } })
}

export function verifyExportText(text: string, jwks: Jwks, options: { requireSignedHead?: boolean } = {}): VerifyReport {
  const parsed = parseExport(text)
  const head = parsed.head
  // Without its head line an export may have lost its tail; with it, the export says where it starts and ends.
  if (head === null) return { ok: false, chain: parsed.records[0]?.chain ?? null, records: parsed.records.length, checkpoints: parsed.checkpoints.length, signedThrough: 0, failure: { seq: (parsed.records.at(-1)?.seq ?? 0) + 1, reason: 'the export has no head line (truncated?)' } }
  return verifyAuditChain(parsed.records, parsed.checkpoints, jwks, { ...options, expectedHead: { seq: head.seq, hash: head.hash }, startSeq: head.from })
}

export function describeReport(report: VerifyReport, source: string): string {
  if (report.ok) {
    const tail = report.signedThrough < report.records ? `; records after ${report.signedThrough} are not yet covered by a checkpoint` : ''
    return `audit chain ${report.chain ?? '(empty)'} in ${source}: ${report.records} records and ${report.checkpoints} checkpoints verify; signed through seq ${report.signedThrough}${tail}\n`
  }
  const failure = report.failure!
  return `audit chain ${report.chain ?? '(empty)'} in ${source} does NOT verify: first failure at seq ${failure.seq}: ${failure.reason}\n`
}

/** `agent-trust audit verify`; `openDatabase` opens --database-url, or the configured database. */
export async function runAuditVerify(
  args: { file?: string; jwks?: string; requireSignedHead: boolean },
  openDatabase: () => Promise<Database>,
  out: (text: string) => void,
): Promise<number> {
  if (args.jwks === undefined) throw new UsageError('audit verify needs --jwks FILE|URL (the authority\'s published key set)')
  const jwks = await loadJwks(args.jwks)
  let report: VerifyReport
  let source: string
  if (args.file !== undefined) {
    source = args.file
    let text: string
    try {
      text = await readFile(args.file, 'utf8')
      report = verifyExportText(text, jwks, { requireSignedHead: args.requireSignedHead })
    } catch (error) {
      out(`audit export ${args.file} cannot be read: ${error instanceof Error ? error.message : String(error)}\n`)
      return 1
    }
  } else {
    source = 'the database'
    const db = await openDatabase()
    try {
      report = await verifyDatabaseChain(db, jwks, { requireSignedHead: args.requireSignedHead })
    } finally {
      await db.close()
    }
  }
  out(describeReport(report, source))
  return report.ok ? 0 : 1
}

/** Records an administrative act of the CLI (key rotation, retirement) as pending; a running admin plane chains it. */
export async function recordCliAct(db: Database, action: string, target: string, change: Record<string, unknown>): Promise<void> {
  let user = 'unknown'
  try {
    user = userInfo().username
  } catch {
    // no passwd entry (a container's arbitrary uid): the host name still says where it ran
  }
  const entry: AuditEntry = {
    actorType: 'cli', actorId: `${user}@${hostname()}`.slice(0, 200), orgId: null, action, target,
    outcome: 'success', requestId: null, digest: changeDigest(change),
  }
  await insertPendingAudit(db, [entry])
  await db.query('SELECT pg_notify($1, $2)', [AUDIT_PENDING_CHANNEL, action])
}
