/**
 * withPendingRecord on a real database (PostgreSQL, and PGlite with SERVICE_TEST_DB=pglite): an audited
 * write's pending record rides in the write's own statement. The statement's rows are what it returns
 * alone; the record exists exactly when a row came back, holds the entry's fields as given, and names the
 * first row's string `id`, `jti` or `did` when the entry names no target; statements it cannot wrap are
 * left to the caller.
 */
import t from 'tap'
import fc from 'fast-check'
import type { AuditEntry } from '../../../src/core/audit.js'
import { canCarryPendingRecord, withPendingRecord } from '../../../src/db/repositories/audit.js'
import { createTestDatabase } from '../../helpers/database.js'

const { db } = await createTestDatabase(t)
await db.exec(`CREATE TABLE stmt_things (id text PRIMARY KEY, jti text, n int NOT NULL);
  CREATE TABLE stmt_numbered (id int PRIMARY KEY, jti text)`)

const ENTRY: AuditEntry = {
  actorType: 'key', actorId: 'key-1', orgId: '00000000-0000-4000-8000-00000000000a', action: 'thing.update',
  target: null, outcome: 'success', requestId: 'req-1', digest: 'a'.repeat(64),
}

async function pendingRows(): Promise<Record<string, unknown>[]> {
  const rows = await db.query('SELECT actor_type, actor_id, org_id::text, action, target, outcome, request_id, digest FROM audit_pending ORDER BY id')
  await db.query('DELETE FROM audit_pending')
  return rows
}

async function run(text: string, params: unknown[], entry: AuditEntry = ENTRY): Promise<unknown[]> {
  const joined = withPendingRecord(text, params, entry)
  if (joined === null) throw new Error(`not wrapped: ${text}`)
  return db.query(joined.text, joined.params)
}

t.test('the rows are the statement\'s own; one record, naming the first row\'s id', async (t) => {
  await db.query(`INSERT INTO stmt_things VALUES ('a', 'j-a', 1), ('b', 'j-b', 2)`)
  const rows = await run('UPDATE stmt_things SET n = n + 10 WHERE id = $1 RETURNING id, n', ['a'])
  t.same(rows, [{ id: 'a', n: 11 }])
  t.same(await pendingRows(), [{ actor_type: 'key', actor_id: 'key-1', org_id: ENTRY.orgId, action: 'thing.update', target: 'a', outcome: 'success', request_id: 'req-1', digest: ENTRY.digest }])
  const many = await run('UPDATE stmt_things SET n = n + 1 RETURNING jti, n;  ', [])
  t.equal(many.length, 2, 'every row returned, a trailing semicolon dropped')
  t.same((await pendingRows()).map((r) => r.target), [many.map((r: any) => r.jti)[0]], 'still one record, naming the first row (jti without id)')
})

t.test('no row returned: no record', async (t) => {
  t.same(await run('DELETE FROM stmt_things WHERE id = $1 RETURNING id', ['missing']), [])
  t.same(await pendingRows(), [])
})

t.test('the entry\'s own target wins; a number is no target', async (t) => {
  await run(`INSERT INTO stmt_things VALUES ($1, NULL, 0) RETURNING id`, ['c'], { ...ENTRY, target: 'named' })
  t.same((await pendingRows()).map((r) => r.target), ['named'])
  await run(`INSERT INTO stmt_numbered VALUES (7, NULL) RETURNING id, jti`, [])
  t.same((await pendingRows()).map((r) => r.target), [null], 'an int id and a null jti name nothing (as the row\'s own reading does)')
})

t.test('statements it cannot carry a record in are left to the caller', async (t) => {
  for (const text of [
    'UPDATE stmt_things SET n = 0',
    'WITH x AS (SELECT 1) UPDATE stmt_things SET n = 0 RETURNING id',
    'SELECT id FROM stmt_things',
    'MERGE INTO stmt_things USING (SELECT 1) s ON false WHEN NOT MATCHED THEN DO NOTHING',
  ]) {
    t.notOk(canCarryPendingRecord(text), text)
    t.equal(withPendingRecord(text, [], ENTRY), null)
  }
})

t.test('any entry is stored as given, whatever its strings (property)', async (t) => {
  const text = fc.string({ unit: 'grapheme', maxLength: 40 }).map((s) => s.replace(/\u0000/g, ''))
  const nullable = fc.option(text, { nil: null })
  let i = 0
  await fc.assert(fc.asyncProperty(nullable, text, nullable, nullable, async (actorId, action, target, requestId) => {
    const id = `p-${i++}`
    const entry: AuditEntry = { ...ENTRY, actorId, action, target, requestId }
    await run('INSERT INTO stmt_things VALUES ($1, NULL, 0) RETURNING id', [id], entry)
    const [row] = await pendingRows()
    return row !== undefined && row.actor_id === actorId && row.action === action && row.target === (target ?? id) && row.request_id === requestId
  }), { numRuns: 150 })
  t.pass('150 generated entries stored as given')
})
