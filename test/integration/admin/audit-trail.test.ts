/**
 * The audit trail on a real database (PostgreSQL, and PGlite with SERVICE_TEST_DB=pglite): administrative
 * writes leave one record each, with actor, org, target and a digest, never a secret; a rolled-back write
 * leaves no success record; batched IAL-0 issuance records every badge; gateway refusals in reports are
 * recorded; members see only their organization's records, operators every one, with filters and paging;
 * the export verifies on its own against the published JWKS; changing, deleting or reordering any record
 * with SQL (the trigger disabled, as a superuser could) makes verification fail at that record; two admin
 * instances writing at once keep one valid chain; a later instance continues the chain.
 */
import t from 'tap'
import { writeFileSync, mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { AsyncLocalStorage } from 'node:async_hooks'
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { verifyAuditChain, type Jwks } from '../../../src/core/audit.js'
import type { Queryable } from '../../../src/db/database.js'
import { readAuditCheckpoints, readAuditRange, readChainHead } from '../../../src/db/repositories/audit.js'
import { runAuditVerify, verifyExportText } from '../../../src/cli/audit.js'
import { auditSettled as settled, createOrg, startTestAdmin, type TestAdmin } from '../../helpers/admin.js'
import { BACKEND, createTestDatabase } from '../../helpers/database.js'
import { projectPath } from '../../../src/core/paths.js'

t.setTimeout(180_000)


async function jwksOf(admin: TestAdmin): Promise<Jwks> {
  return (await fetch(`${admin.url}/.well-known/jwks.json`)).json() as Promise<Jwks>
}

/** Verifies the chain as `audit verify` does, through `q` (a transaction sees its own tampering). */
async function verifyThrough(q: Queryable, jwks: Jwks): Promise<ReturnType<typeof verifyAuditChain>> {
  const head = await readChainHead(q)
  const records = await readAuditRange(q, 0, 100_000)
  return verifyAuditChain(records, await readAuditCheckpoints(q), jwks, { expectedHead: { seq: head.seq, hash: head.hash } })
}

const admin = await startTestAdmin(t, { SERVICE_AUDIT_CHECKPOINT_RECORDS: '5' })
const orgA = await createOrg(admin, 'audit-a')
const orgB = await createOrg(admin, 'audit-b')

t.test('administrative writes are recorded once each, with actor, org, target and digest, never a secret', async (t) => {
  const agent = await admin.request('POST', '/v1/agents', { key: orgA.key, body: { name: 'audited-agent', domain: 'example.com' }, headers: { 'x-request-id': 'req-audit-1' } })
  t.equal(agent.status, 201)
  const agentId = agent.body.data.id as string
  const badge = await admin.request('POST', `/v1/agents/${agentId}/badge`, { key: orgA.key, body: { domain: 'example.com' } })
  t.equal(badge.status, 200)
  const revoke = await admin.request('POST', `/v1/badges/${badge.body.data.jti}/revoke`, { key: orgA.key, body: { reason: 'test' } })
  t.equal(revoke.status, 200)
  const key = await admin.request('POST', '/v1/keys', { key: orgA.key, body: { name: 'audited key', role: 'member' } })
  t.equal(key.status, 201)
  const secret = key.body.data.key as string
  const disabled = await admin.request('POST', `/v1/agents/${agentId}/disable`, { key: orgA.key })
  t.equal(disabled.status, 200)
  await settled(admin)

  const list = await admin.request('GET', '/v1/audit?limit=500', { key: orgA.key })
  t.equal(list.status, 200)
  const records = list.body.data as any[]
  const byAction = (action: string): any[] => records.filter((r) => r.action === action)
  const created = byAction('agent.create')
  t.equal(created.length, 1, 'one record for the agent')
  t.match(created[0], { actorType: 'key', orgId: orgA.orgId, target: agentId, outcome: 'success', requestId: 'req-audit-1', digest: /^[0-9a-f]{64}$/ })
  t.equal(byAction('badge.issue')[0]?.target, badge.body.data.jti, 'the issued badge, recorded in its batch')
  t.equal(byAction('badge.revoke')[0]?.target, badge.body.data.jti)
  t.equal(byAction('api_key.create')[0]?.target, key.body.data.id, 'a created key is named by the id its insert returned')
  t.equal(byAction('agent.disable')[0]?.target, agentId)
  t.notOk(list.text.includes(secret), 'the new key\'s secret is nowhere in the trail')
  const all = await admin.database.db.query<{ row: string }>('SELECT row_to_json(r)::text AS row FROM audit_records r')
  t.notOk(all.some((r) => r.row.includes(secret) || r.row.includes(orgA.key)), 'no secret in the table either')
})

t.test('an audited write enters no AsyncLocalStorage: on Node 20 one entered store hooks every promise of the process', async (t) => {
  const ours: string[] = []
  const patched = ['run', 'enterWith'] as const
  const originals = patched.map((name) => AsyncLocalStorage.prototype[name])
  for (const [i, name] of patched.entries()) {
    const original = originals[i] as (...args: unknown[]) => unknown
    ;(AsyncLocalStorage.prototype as any)[name] = function (this: unknown, ...args: unknown[]) {
      const stack = new Error().stack ?? ''
      if (/[\\/]src[\\/]/.test(stack)) ours.push(stack)
      return original.apply(this, args)
    }
  }
  t.teardown(() => { for (const [i, name] of patched.entries()) (AsyncLocalStorage.prototype as any)[name] = originals[i] })
  const agent = await admin.request('POST', '/v1/agents', { key: orgA.key, body: { name: 'no-context-agent', domain: 'example.com' } })
  t.equal(agent.status, 201)
  t.equal((await admin.request('PUT', `/v1/agents/${agent.body.data.id}`, { key: orgA.key, body: { description: 'changed' } })).status, 200)
  t.equal((await admin.request('POST', `/v1/agents/${agent.body.data.id}/badge`, { key: orgA.key, body: { domain: 'example.com' } })).status, 200)
  await settled(admin)
  t.same(ours, [], 'no store entered by the service')
  const records = (await admin.request('GET', '/v1/audit?limit=500', { key: orgA.key })).body.data as any[]
  t.ok(records.some((r) => r.action === 'agent.update' && r.target === agent.body.data.id), 'and the writes are recorded all the same')
})

t.test('a write that fails leaves a refusal, not a success; an unauthenticated one leaves nothing', async (t) => {
  const before = await admin.database.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM audit_records WHERE action = 'agent.update' AND outcome = 'success'`)
  const missing = '00000000-0000-4000-8000-000000000001'
  const absent = await admin.request('PUT', `/v1/agents/${missing}`, { key: orgA.key, body: { description: 'nobody' } })
  t.equal(absent.status, 404, 'no such agent')
  const forbidden = await admin.request('POST', '/v1/orgs', { key: orgA.key, body: { name: 'not an operator' } })
  t.equal(forbidden.status, 403)
  const anonymous = await admin.request('POST', '/v1/agents', { key: null, body: { name: 'x' } })
  t.equal(anonymous.status, 401)
  await settled(admin)
  const after = await admin.database.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM audit_records WHERE action = 'agent.update' AND outcome = 'success'`)
  t.equal(after[0]?.n, before[0]?.n, 'no success recorded for the refused update')
  const refusals = await admin.database.db.query<{ action: string; outcome: string; target: string }>(`SELECT action, outcome, target FROM audit_records WHERE outcome LIKE 'refused:%' ORDER BY seq`)
  t.same(refusals.map((r) => `${r.action} ${r.outcome}`), ['agent.update refused:404', 'organization.create refused:403'])
  t.equal(refusals[0]?.target, missing)
})

t.test('concurrent IAL-0 issuance (batched) records every badge', async (t) => {
  const agent = (await admin.request('POST', '/v1/agents', { key: orgB.key, body: { name: 'batched', domain: 'example.com' } })).body.data
  const issued = await Promise.all(Array.from({ length: 30 }, () => admin.request('POST', `/v1/agents/${agent.id}/badge`, { key: orgB.key, body: { domain: 'example.com' } })))
  t.ok(issued.every((r) => r.status === 200))
  await settled(admin)
  const rows = await admin.database.db.query<{ target: string }>(`SELECT target FROM audit_records WHERE action = 'badge.issue' AND org_id = $1`, [orgB.orgId])
  t.same(rows.map((r) => r.target).sort(), issued.map((r) => r.body.data.jti).sort(), 'one record per badge, named by its jti')
})

t.test('gateway refusals in reports are recorded, ALLOWs are not (no sampling configured)', async (t) => {
  const base = { txn_id: null, agent_did: 'did:web:x', badge_jti: null, method: 'GET', path: '/r', operation: 'GET /r', reason: null, decision_id: null, mode: 'EM-GUARD', obligations: [], obligations_not_met: [], protocol: 'http', error_code: null, pdp_request: null }
  const events = [
    { ...base, seq: 1, time: new Date().toISOString(), request_id: 'gw-deny-1', decision: 'DENY', status: 403, breakglass: null },
    { ...base, seq: 2, time: new Date().toISOString(), request_id: 'gw-allow-1', decision: 'ALLOW', status: 200, breakglass: null },
    { ...base, seq: 3, time: new Date().toISOString(), request_id: 'gw-refused-1', decision: null, status: 401, error_code: 'BADGE_EXPIRED', breakglass: null },
    { ...base, seq: 4, time: new Date().toISOString(), request_id: 'gw-bg-1', decision: 'ALLOW', status: 200, breakglass: { jti: 'bg-1' } },
  ]
  const res = await admin.request('POST', '/v1/gateway/reports', { body: { gateway_id: 'gw-audit', version: '1', sent_at: new Date().toISOString(), events } })
  t.equal(res.status, 202)
  await settled(admin)
  const rows = await admin.database.db.query<{ action: string; actor_type: string; actor_id: string; outcome: string; request_id: string }>(
    `SELECT action, actor_type, actor_id, outcome, request_id FROM audit_records WHERE actor_type = 'gateway' ORDER BY seq`)
  t.same(rows.map((r) => [r.action, r.actor_id, r.outcome, r.request_id]), [
    ['gateway.refusal', 'gw-audit', 'DENY:403', 'gw-deny-1'],
    ['gateway.refusal', 'gw-audit', 'REFUSED:401:BADGE_EXPIRED', 'gw-refused-1'],
    ['gateway.breakglass', 'gw-audit', 'ALLOW:200', 'gw-bg-1'],
  ])
})

t.test('members see their organization\'s records; operators all; filters and paging', async (t) => {
  const member = (await admin.request('POST', '/v1/keys', { key: orgB.key, body: { name: 'member', role: 'member' } })).body.data.key as string
  // Every record chained before the lists are compared: the chainer runs beside the requests.
  await settled(admin)
  const mine = await admin.request('GET', '/v1/audit?limit=500', { key: member })
  t.equal(mine.status, 200)
  t.ok(mine.body.data.length > 0)
  t.ok(mine.body.data.every((r: any) => r.orgId === orgB.orgId), 'only org B')
  const foreign = await admin.request('GET', `/v1/audit?orgId=${orgA.orgId}`, { key: member })
  t.equal(foreign.status, 403, 'a member cannot ask for another organization')
  const everything = await admin.request('GET', '/v1/audit?limit=500')
  t.ok(everything.body.data.some((r: any) => r.orgId === orgA.orgId) && everything.body.data.some((r: any) => r.orgId === orgB.orgId), 'an operator sees both')
  const family = await admin.request('GET', '/v1/audit?action=agent.*&limit=500')
  t.ok(family.body.data.length > 0 && family.body.data.every((r: any) => r.action.startsWith('agent.')))
  const byTarget = await admin.request('GET', `/v1/audit?target=${encodeURIComponent(everything.body.data[0].target ?? 'none')}`)
  t.equal(byTarget.status, 200)
  const future = await admin.request('GET', '/v1/audit?since=2999-01-01')
  t.same(future.body.data, [])
  t.equal((await admin.request('GET', '/v1/audit?since=yesterday')).status, 400)
  t.equal((await admin.request('GET', '/v1/audit?cursor=bogus')).status, 400)
  const seen: number[] = []
  let cursor: string | null = null
  do {
    const page: any = await admin.request('GET', `/v1/audit?limit=7${cursor === null ? '' : `&cursor=${cursor}`}`)
    t.equal(page.status, 200)
    seen.push(...page.body.data.map((r: any) => r.seq))
    cursor = page.body.nextCursor
  } while (cursor !== null)
  t.same(seen, everything.body.data.map((r: any) => r.seq), 'the pages together are the whole list, newest first')
  t.equal((await admin.request('GET', '/v1/audit/export', { key: orgA.key })).status, 403, 'the export is for operators')
})

t.test('the export verifies on its own against the JWKS; the database chain verifies', async (t) => {
  await settled(admin)
  const jwks = await jwksOf(admin)
  const res = await fetch(`${admin.url}/v1/audit/export`, { headers: { authorization: `Bearer ${admin.operatorKey}` } })
  t.equal(res.status, 200)
  t.match(res.headers.get('content-type'), /application\/x-ndjson/)
  const text = await res.text()
  const report = verifyExportText(text, jwks)
  t.equal(report.ok, true, JSON.stringify(report.failure))
  t.ok(report.records > 10 && report.checkpoints >= 2, 'checkpoints every 5 records')
  const dir = mkdtempSync(path.join(tmpdir(), 'audit-export-'))
  writeFileSync(path.join(dir, 'export.jsonl'), text)
  writeFileSync(path.join(dir, 'jwks.json'), JSON.stringify(jwks))
  const out: string[] = []
  const code = await runAuditVerify({ file: path.join(dir, 'export.jsonl'), jwks: path.join(dir, 'jwks.json'), requireSignedHead: false }, () => Promise.reject(new Error('no database')), (s) => out.push(s))
  t.equal(code, 0, out.join(''))
  // A forged key set: the same file does not verify.
  const other = { keys: [{ ...jwks.keys[0], x: Buffer.alloc(32, 7).toString('base64url') }] }
  t.equal(verifyExportText(text, other).ok, false, 'checkpoints signed by another key do not verify')
  // A record edited in the file (and its hash recomputed) no longer matches the signed checkpoint.
  const lines = text.trim().split('\n')
  const edited = lines.map((line, i) => (i === 2 ? line.replace(/"outcome":"[^"]*"/, '"outcome":"forged"') : line)).join('\n')
  const failure = verifyExportText(edited, jwks)
  t.equal(failure.ok, false)
  t.equal(failure.failure?.seq, 3, 'the edited third record is named')
  t.equal((await verifyThrough(admin.database.db, jwks)).ok, true)
})

t.test('the trail is append-only: UPDATE, DELETE and TRUNCATE are refused', async (t) => {
  await t.rejects(admin.database.db.query(`UPDATE audit_records SET outcome = 'x' WHERE seq = 1`), /append-only/)
  await t.rejects(admin.database.db.query('DELETE FROM audit_records WHERE seq = 1'), /append-only/)
  await t.rejects(admin.database.db.query('TRUNCATE audit_records'), /append-only/)
  await t.rejects(admin.database.db.query('DELETE FROM audit_checkpoints'), /append-only/)
})

t.test('changing, deleting or reordering any record with SQL makes verification fail at that record', async (t) => {
  await settled(admin)
  const jwks = await jwksOf(admin)
  const head = await readChainHead(admin.database.db)
  t.ok(head.seq >= 12)
  const rolledBack = new Error('rolled back')
  const tampered = async (label: string, sql: string, expectedSeq: number): Promise<void> => {
    const result = await admin.database.db.transaction(async (tx) => {
      await tx.exec('ALTER TABLE audit_records DISABLE TRIGGER audit_records_append_only')
      await tx.exec(sql)
      const report = await verifyThrough(tx, jwks)
      throw Object.assign(rolledBack, { report })
    }).catch((error: { report?: ReturnType<typeof verifyAuditChain> }) => error.report)
    t.equal(result?.ok, false, `${label}: does not verify`)
    t.equal(result?.failure?.seq, expectedSeq, `${label}: names seq ${expectedSeq} (${result?.failure?.reason ?? ''})`)
  }
  for (const seq of [1, 7, head.seq]) {
    await tampered(`changed ${seq}`, `UPDATE audit_records SET target = 'forged' WHERE seq = ${seq}`, seq)
    await tampered(`deleted ${seq}`, `DELETE FROM audit_records WHERE seq = ${seq}`, seq)
  }
  await tampered('reordered 4 and 5', `UPDATE audit_records SET seq = 1000000 WHERE seq = 4;
    UPDATE audit_records SET seq = 4 WHERE seq = 5;
    UPDATE audit_records SET seq = 5 WHERE seq = 1000000`, 4)
  // Rehashing the whole chain after a change does not help: the signed checkpoint no longer matches.
  t.equal((await verifyThrough(admin.database.db, jwks)).ok, true, 'every tampering was rolled back')
})

t.test('`agent-trust keys rotate` is recorded and chained by the running admin plane', { skip: BACKEND !== 'postgres' && 'another process cannot reach an in-memory PGlite' }, async (t) => {
  const cli = projectPath('dist', 'src', 'cli', 'index.js')
  const env = {
    PATH: process.env.PATH, HOME: process.env.HOME, DATABASE_URL: admin.database.url as string, CA_KEY_PATH: admin.config.caKeyPath,
    SERVICE_DATA_DIR: mkdtempSync(path.join(tmpdir(), 'audit-cli-')), SERVICE_LOG_LEVEL: 'silent',
  }
  const { stdout } = await promisify(execFile)(process.execPath, [cli, 'keys', 'rotate'], { env })
  const kid = /new signing key (\S+);/.exec(stdout)?.[1]
  t.ok(kid, stdout)
  await settled(admin)
  const [row] = await admin.database.db.query<{ actor_type: string; target: string; digest: string }>(`SELECT actor_type, target, digest FROM audit_records WHERE action = 'authority_key.rotate'`)
  t.match(row, { actor_type: 'cli', target: kid, digest: /^[0-9a-f]{64}$/ }, 'chained after the CLI\'s NOTIFY')
  t.equal((await verifyThrough(admin.database.db, await jwksOf(admin))).ok, true, 'the chain still verifies')
})

t.test('`agent-trust audit verify --database-url` exits non-zero and names the record', { skip: BACKEND !== 'postgres' && 'another process cannot reach an in-memory PGlite' }, async (t) => {
  const jwksFile = path.join(mkdtempSync(path.join(tmpdir(), 'audit-jwks-')), 'jwks.json')
  writeFileSync(jwksFile, JSON.stringify(await jwksOf(admin)))
  const cli = projectPath('dist', 'src', 'cli', 'index.js')
  const run = (): Promise<{ code: number; stdout: string }> => promisify(execFile)(process.execPath, [cli, 'audit', 'verify', '--jwks', jwksFile, '--database-url', admin.database.url as string])
    .then(({ stdout }) => ({ code: 0, stdout }), (error: { code: number; stdout: string }) => ({ code: error.code, stdout: error.stdout }))
  await settled(admin)
  const good = await run()
  t.equal(good.code, 0, good.stdout)
  t.match(good.stdout, /verify; signed through seq/)
  await admin.database.db.exec(`ALTER TABLE audit_records DISABLE TRIGGER audit_records_append_only;
    UPDATE audit_records SET actor_id = 'someone else' WHERE seq = 3;
    ALTER TABLE audit_records ENABLE TRIGGER audit_records_append_only`)
  const bad = await run()
  t.equal(bad.code, 1)
  t.match(bad.stdout, /does NOT verify: first failure at seq 3: hash does not match/)
})

t.test('two admin instances writing at once keep one valid chain; a later instance continues it', async (t) => {
  const database = await createTestDatabase(t)
  const first = await startTestAdmin(t, {}, { database })
  const second = await startTestAdmin(t, { SERVICE_BOOTSTRAP_API_KEY: first.operatorKey }, { database })
  const writes = await Promise.all(Array.from({ length: 40 }, (_, i) => (i % 2 === 0 ? first : second).request('POST', '/v1/agents', { body: { name: `concurrent-${i}` } })))
  t.ok(writes.every((r) => r.status === 201), 'every write succeeded')
  await settled(first)
  const jwks = await jwksOf(first)
  const report = await verifyThrough(database.db, jwks)
  t.equal(report.ok, true, JSON.stringify(report.failure))
  const [count] = await database.db.query<{ n: number; max: number }>(`SELECT count(*)::int AS n, max(seq)::int AS max FROM audit_records WHERE action = 'agent.create'`)
  t.equal(count?.n, 40, 'one record per write')
  const before = await readChainHead(database.db)
  const third = await startTestAdmin(t, { SERVICE_BOOTSTRAP_API_KEY: first.operatorKey }, { database })
  t.equal((await third.request('POST', '/v1/agents', { body: { name: 'after-restart' } })).status, 201)
  await settled(third)
  const [next] = await readAuditRange(database.db, before.seq, 1)
  t.equal(next?.seq, before.seq + 1, 'the new instance numbers on from the head')
  t.equal(next?.prevHash, before.hash, 'and links to it')
  t.equal((await verifyThrough(database.db, jwks)).ok, true)
})
