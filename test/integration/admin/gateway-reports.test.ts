/**
 * `POST /v1/gateway/reports` and what reads it, on a real database: an API key (a gateway's registry key)
 * only; every part of a report validated, a bad one 400 (or 413) with nothing stored; events attributed when
 * recorded to the organization of the badge and only when the reporting key may speak for it (the
 * cross-organization forgery lands with operators only); a reported gap on the stream; `GET /v1/gateways`
 * with members seeing their organization's gateways, `bundle_current`, and `stale` after three missed
 * heartbeats; `GET /v1/gateway/status` on an admin-only process saying "no gateway reports", then the
 * reported state. With Redis (behind a proxy that the test cuts): readiness degraded, reads and ingest 503
 * `decision_store_unavailable`, and everything back after Redis returns, without a restart.
 */
import t from 'tap'
import { randomBytes } from 'node:crypto'
import { SseReader, type SseEvent } from '../../../src/core/sse.js'
import type { GatewayReport, ReportedEvent, ReportedStatus } from '../../../src/telemetry/decision-shipper.js'
import { agentWithBadge } from '../../helpers/appliance.js'
import { createOrg, startTestAdmin, type TestAdmin } from '../../helpers/admin.js'
import { startTcpProxy } from '../../helpers/tcp-proxy.js'

t.setTimeout(120_000)

const admin = await startTestAdmin(t, { SERVICE_CONSOLE_HEARTBEAT: '200ms' })
const operatorKey = admin.operatorKey
const me = await admin.request('GET', '/v1/me')
const defaultOrg = me.body.data.org_id as string
const b = await createOrg(admin, 'reports-b')
const memberB = (await admin.request('POST', '/v1/keys', { key: b.key, body: { name: 'member b', role: 'member' } })).body.data.key as string
const ownAgent = await agentWithBadge(admin.url, operatorKey, 'reports-own')
const bAgent = await agentWithBadge(admin.url, b.key, 'reports-b-agent')

const STATUS: ReportedStatus = {
  routes: [{ prefix: '/', mode: 'EM-GUARD', protocol: 'http' }, { prefix: '/mcp', mode: 'EM-OBSERVE', protocol: 'mcp' }],
  pdp: 'embedded', workspace: null, bundle_revision: null, snapshot_age_ms: 1200, default_mode: 'EM-OBSERVE', heartbeat_interval_ms: 200,
}

let seq = 0
function event(fields: Partial<ReportedEvent> = {}): ReportedEvent {
  seq++
  return {
    seq, time: new Date().toISOString(), request_id: `gw-${seq}`, txn_id: null, agent_did: null, badge_jti: null, method: 'GET', path: `/r/${seq}`,
    operation: `GET /r/${seq}`, decision: 'ALLOW', reason: null, decision_id: `dec-${randomBytes(4).toString('hex')}`, mode: 'EM-GUARD', obligations: [],
    obligations_not_met: [], breakglass: null, status: 200, protocol: 'http', error_code: null, pdp_request: null, ...fields,
  }
}

function report(gatewayId: string, events: ReportedEvent[], extra: Partial<GatewayReport> = {}): GatewayReport {
  return { gateway_id: gatewayId, version: '0.1.0', sent_at: new Date().toISOString(), status: STATUS, events, ...extra }
}

const post = (target: TestAdmin, key: string | null, body: unknown, headers: Record<string, string> = {}) =>
  target.request('POST', '/v1/gateway/reports', { key, body, headers })

async function listAll(target: TestAdmin, key: string): Promise<any[]> {
  const res = await target.request('GET', '/v1/gateway/decisions?limit=1000', { key })
  return res.body.data
}

t.test('an accepted report: 202, the events listed with their gateway, a denial opens with its PDP request', async (t) => {
  const deny = event({ decision: 'DENY', reason: 'denied_did', status: 403, pdp_request: { subject: { did: 'did:web:x' }, resource: { identifier: '/r?token=1' } } })
  const allow = event({ pdp_request: { ignored: true } })
  const res = await post(admin, operatorKey, report('gw-accept', [deny, allow]))
  t.equal(res.status, 202)
  t.same(res.body, { accepted: 2, stored: 2 })
  const events = await listAll(admin, operatorKey)
  t.match(events.find((e) => e.request_id === deny.request_id), { gateway_id: 'gw-accept', decision: 'DENY', reason: 'denied_did', org_id: null, path: deny.path })
  t.notOk(JSON.stringify(events).includes('badge_jti'), 'the badge jti is not shown')
  const opened = await admin.request('GET', `/v1/gateway/decisions/${deny.decision_id}`)
  t.equal(opened.status, 200)
  t.same(opened.body.data.pdp_request, { subject: { did: 'did:web:x' }, resource: { identifier: '/r?…' } })
  const allowed = await admin.request('GET', `/v1/gateway/decisions/${allow.decision_id}`)
  t.equal(allowed.body.data.pdp_request, null, 'an ALLOW keeps no PDP request, whatever the gateway sent')
  const heartbeatOnly = await post(admin, operatorKey, report('gw-accept', []))
  t.same(heartbeatOnly.body, { accepted: 0, stored: 0 }, 'a heartbeat without events')
})

t.test('a retried report (its answer lost) is stored once; a restarted gateway\'s events, numbered from 1 again, are stored', async (t) => {
  const first = [event({ path: '/retry/1' }), event({ path: '/retry/2' })]
  const sent = report('gw-retry', first, { run: 'run-1' })
  t.same((await post(admin, operatorKey, sent)).body, { accepted: 2, stored: 2 })
  t.same((await post(admin, operatorKey, sent)).body, { accepted: 2, stored: 0 }, 'the same report again stores nothing')
  const more = event({ path: '/retry/3' })
  t.same((await post(admin, operatorKey, report('gw-retry', [...first, more], { run: 'run-1' }))).body, { accepted: 3, stored: 1 }, 'a retry that grew stores the new event only')
  const restarted = [{ ...event({ path: '/retry/again' }), seq: 1 }]
  t.same((await post(admin, operatorKey, report('gw-retry', restarted, { run: 'run-2' }))).body, { accepted: 1, stored: 1 }, 'a new run starts again from 1')
  const paths = (await listAll(admin, operatorKey)).filter((e) => e.gateway_id === 'gw-retry').map((e) => e.path)
  t.same(paths, ['/retry/1', '/retry/2', '/retry/3', '/retry/again'], 'each event listed once')
  t.match(await post(admin, operatorKey, report('gw-retry', [], { run: 'has space' })), { status: 400, body: { error: 'invalid_request' } }, 'a run is a token')
})

t.test('a fleet sharing one key is not throttled by the per-key limit of the admin API', async (t) => {
  const limited = await startTestAdmin(t, { SERVICE_RATE_LIMIT_PER_MINUTE: '5' })
  const statuses: number[] = []
  for (let i = 0; i < 12; i++) statuses.push((await limited.request('POST', '/v1/gateway/reports', { body: report(`gw-fleet-${i % 3}`, []) })).status)
  t.same([...new Set(statuses)], [202], 'twelve reports in a minute under a limit of five')
  const others: number[] = []
  for (let i = 0; i < 6; i++) others.push((await limited.request('GET', '/v1/me')).status)
  t.equal(others.at(-1), 429, 'the key is otherwise limited')
})

t.test('authentication: an API key only', async (t) => {
  t.match(await post(admin, null, report('gw-auth', [])), { status: 401, body: { error: 'unauthorized' } })
  t.match(await post(admin, 'sk_not-a-key', report('gw-auth', [])), { status: 401 })
  const signed = await admin.request('POST', '/v1/console/session', { key: null, body: { api_key: operatorKey } })
  const cookie = (signed.headers.get('set-cookie') ?? '').split(';')[0] as string
  const viaSession = await post(admin, null, report('gw-auth', []), { cookie, 'x-csrf-token': signed.body.data.csrf_token })
  t.match(viaSession, { status: 403, body: { error: 'session_not_allowed' } }, 'a console session is not a gateway')
  const byRegistryHeader = await admin.request('POST', '/v1/gateway/reports', { key: null, body: report('gw-auth', []), headers: { 'x-service-registry-key': operatorKey } })
  t.equal(byRegistryHeader.status, 202, 'X-Service-Registry-Key, as the snapshot source sends it')
})

t.test('validation: a bad report is 400 and stores nothing', async (t) => {
  const before = (await listAll(admin, operatorKey)).length
  const beatsBefore = (await admin.request('GET', '/v1/gateways')).body.data.length
  const good = report('gw-bad', [event()])
  const cases: [string, unknown][] = [
    ['not an object', [1, 2]],
    ['no gateway_id', { ...good, gateway_id: undefined }],
    ['a gateway_id with spaces', { ...good, gateway_id: 'gw bad' }],
    ['an unknown field', { ...good, extra: 1 }],
    ['events not an array', { ...good, events: {} }],
    ['an event with an unknown decision', { ...good, events: [{ ...event(), decision: 'MAYBE' }] }],
    ['an event without a path', { ...good, events: [{ ...event(), path: undefined }] }],
    ['an event with a status out of range', { ...good, events: [{ ...event(), status: 99 }] }],
    ['an event with an unknown field', { ...good, events: [{ ...event(), token: 'x' }] }],
    ['a bad time', { ...good, events: [{ ...event(), time: 'yesterday' }] }],
    ['seqs not increasing', { ...good, events: [event(), { ...event(), seq: 1 }] }],
    ['a status with an unknown PDP', { ...good, status: { ...STATUS, pdp: 'magic' } }],
    ['a status with a workspace that is not a UUID', { ...good, status: { ...STATUS, workspace: 'org' } }],
    ['a heartbeat interval below 100 ms', { ...good, status: { ...STATUS, heartbeat_interval_ms: 5 } }],
    ['a status with a route missing its mode', { ...good, status: { ...STATUS, routes: [{ prefix: '/', protocol: 'http' }] } }],
    ['a gap whose range is reversed', { ...good, dropped: { count: 2, from_seq: 9, to_seq: 3 } }],
    ['a gap of zero', { ...good, dropped: { count: 0, from_seq: 1, to_seq: 1 } }],
    ['too many events', { ...good, events: Array.from({ length: 1001 }, (_, i) => ({ ...event(), seq: i + 1 })) }],
  ]
  for (const [what, body] of cases) {
    const res = await post(admin, operatorKey, body)
    t.equal(res.status, 400, what)
    t.type(res.body?.error, 'string', `${what}: the error shape`)
  }
  const notJson = await admin.request('POST', '/v1/gateway/reports', { rawBody: '{"gateway_id":', headers: { 'content-type': 'application/json' } })
  t.equal(notJson.status, 400, 'not JSON')
  const huge = await admin.request('POST', '/v1/gateway/reports', { rawBody: JSON.stringify({ ...good, pad: 'x'.repeat(5 * 1024 * 1024) }) })
  t.equal(huge.status, 413, 'over the body limit')
  t.equal((await listAll(admin, operatorKey)).length, before, 'nothing stored')
  t.equal((await admin.request('GET', '/v1/gateways')).body.data.length, beatsBefore, 'no heartbeat kept')
})

t.test('attribution when recorded: the badge\'s organization, only when the reporting key may speak for it', async (t) => {
  const ownEvent = event({ badge_jti: bAgent.jti, agent_did: bAgent.did })
  const forged = event({ badge_jti: ownAgent.jti, agent_did: ownAgent.did, path: '/forged' })
  const unknown = event({ badge_jti: 'no-such-jti' })
  t.equal((await post(admin, b.key, report('gw-org-b', [ownEvent, forged, unknown]))).status, 202)
  const byOperator = event({ badge_jti: bAgent.jti, path: '/by-operator' })
  const defaults = event({ badge_jti: ownAgent.jti, path: '/default-org' })
  t.equal((await post(admin, operatorKey, report('gw-operator', [byOperator, defaults]))).status, 202)

  const all = await listAll(admin, operatorKey)
  const find = (requestId: string): any => all.find((e) => e.request_id === requestId)
  t.equal(find(ownEvent.request_id).org_id, b.orgId, 'B\'s key, B\'s badge: B\'s event')
  t.equal(find(forged.request_id).org_id, null, 'B\'s key naming the default organization\'s badge: operators only')
  t.equal(find(unknown.request_id).org_id, null, 'a jti the authority never issued: operators only')
  t.equal(find(byOperator.request_id).org_id, b.orgId, 'an operator\'s key may report for any organization')
  t.equal(find(defaults.request_id).org_id, defaultOrg)

  const seenByB = await listAll(admin, memberB)
  t.ok(seenByB.some((e) => e.request_id === ownEvent.request_id))
  t.ok(seenByB.every((e) => e.org_id === b.orgId), 'B\'s member sees B\'s events only')
  const seenByDefaultMember = await listAll(admin, (await admin.request('POST', '/v1/keys', { body: { name: 'm', role: 'member' } })).body.data.key)
  t.notOk(seenByDefaultMember.some((e) => e.path === '/forged'), 'the forgery did not reach the default organization\'s feed')
  t.ok(seenByDefaultMember.some((e) => e.path === '/default-org'))
  const hidden = await admin.request('GET', `/v1/gateway/decisions/${forged.decision_id}`, { key: memberB })
  t.match(hidden, { status: 404, body: { error: 'decision_not_found' } })
})

async function openStream(target: TestAdmin, key: string): Promise<{ next: (match: (e: SseEvent) => boolean, ms?: number) => Promise<SseEvent | undefined>; close: () => void; text: () => string }> {
  const abort = new AbortController()
  const res = await fetch(`${target.url}/v1/gateway/decisions/stream`, { headers: { authorization: `Bearer ${key}` }, signal: abort.signal })
  const events: SseEvent[] = []
  let raw = ''
  const reader = new SseReader(1 << 20)
  void (async () => {
    try {
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
        raw += Buffer.from(chunk).toString('utf8')
        reader.push(chunk, (e) => { if (e.event !== undefined) events.push(e) })
      }
    } catch {
      // aborted
    }
  })()
  let read = 0
  return {
    text: () => raw,
    close: () => abort.abort(),
    async next(match, ms = 5000) {
      const deadline = Date.now() + ms
      while (Date.now() < deadline) {
        while (read < events.length) {
          const e = events[read++] as SseEvent
          if (match(e)) return e
        }
        await new Promise((r) => setTimeout(r, 20))
      }
      return undefined
    },
  }
}

t.test('a gap a gateway reports reaches the stream, naming the gateway; its count is on the gateway', async (t) => {
  const stream = await openStream(admin, operatorKey)
  t.teardown(() => stream.close())
  await new Promise((r) => setTimeout(r, 100))
  const after = event({ path: '/after-gap' })
  t.equal((await post(admin, operatorKey, report('gw-gappy', [after], { dropped: { count: 5, from_seq: 2, to_seq: 6 } }))).status, 202)
  const gap = await stream.next((e) => e.event === 'gap')
  t.same(JSON.parse(gap?.data ?? 'null'), { gateway_id: 'gw-gappy', dropped: 5, from_seq: 2, to_seq: 6 })
  const next = await stream.next((e) => e.event === 'decision')
  t.match(JSON.parse(next?.data ?? 'null'), { path: '/after-gap', gateway_id: 'gw-gappy' })
  t.equal(Number(next?.id), Number(gap?.id) + 1, 'both numbered in the store')
  const gateways = (await admin.request('GET', '/v1/gateways')).body.data as any[]
  t.equal(gateways.find((g) => g.gateway_id === 'gw-gappy')?.events_dropped, 5)
  const stream2 = await openStream(admin, memberB)
  t.teardown(() => stream2.close())
  await post(admin, operatorKey, report('gw-gappy', [], { dropped: { count: 1, from_seq: 8, to_seq: 8 } }))
  t.equal(await stream2.next((e) => e.event === 'gap', 500), undefined, 'a gap of an operator-reported gateway without workspace is the operators\'')
})

t.test('GET /v1/gateways: who sees which, bundle_current, stale after three missed heartbeats', async (t) => {
  const bundle = await admin.request('GET', `/v1/bundles/${defaultOrg}`, { key: null, headers: { 'x-service-registry-key': operatorKey } })
  t.equal(bundle.status, 200)
  const revision = bundle.body.revision as string
  const fleet = `gw-fleet-${randomBytes(3).toString('hex')}`
  t.equal((await post(admin, operatorKey, report(`${fleet}-current`, [], { status: { ...STATUS, workspace: defaultOrg, bundle_revision: revision } }))).status, 202)
  t.equal((await post(admin, operatorKey, report(`${fleet}-behind`, [], { status: { ...STATUS, workspace: defaultOrg, bundle_revision: 'old', heartbeat_interval_ms: 60_000 } }))).status, 202)
  t.equal((await post(admin, b.key, report(`${fleet}-b`, [], { status: { ...STATUS, heartbeat_interval_ms: 60_000 } }))).status, 202)
  t.equal((await post(admin, b.key, report(`${fleet}-claims`, [], { status: { ...STATUS, workspace: defaultOrg, heartbeat_interval_ms: 60_000 } }))).status, 202)

  const all = ((await admin.request('GET', '/v1/gateways')).body.data as any[]).filter((g) => g.gateway_id.startsWith(fleet))
  t.same(all.map((g) => g.gateway_id).sort(), [`${fleet}-b`, `${fleet}-behind`, `${fleet}-claims`, `${fleet}-current`], 'operators see all')
  const current = all.find((g) => g.gateway_id === `${fleet}-current`)
  t.match(current, {
    version: '0.1.0', pdp: 'embedded', workspace: defaultOrg.toLowerCase(), org_id: defaultOrg.toLowerCase(), bundle_revision: revision, bundle_current: true,
    snapshot_age_ms: 1200, default_mode: 'EM-OBSERVE', heartbeat_interval_ms: 200, stale: false, events_dropped: 0,
    routes: [{ prefix: '/', mode: 'EM-GUARD', protocol: 'http' }, { prefix: '/mcp', mode: 'EM-OBSERVE', protocol: 'mcp' }],
  })
  t.ok(Date.parse(current.last_heartbeat) > Date.now() - 10_000)
  t.equal(all.find((g) => g.gateway_id === `${fleet}-behind`).bundle_current, false, 'not the registry\'s current bundle')
  t.equal(all.find((g) => g.gateway_id === `${fleet}-b`).bundle_current, null, 'no workspace: nothing to compare')
  t.equal(all.find((g) => g.gateway_id === `${fleet}-claims`).org_id, null, 'B\'s key claiming the default workspace decides for nobody\'s view')

  const asB = ((await admin.request('GET', '/v1/gateways', { key: memberB })).body.data as any[]).map((g) => g.gateway_id)
  t.same(asB.filter((id) => id.startsWith(fleet)), [`${fleet}-b`], 'B\'s member sees the gateway deciding for B')

  await new Promise((r) => setTimeout(r, 750))
  const later = ((await admin.request('GET', '/v1/gateways')).body.data as any[]).filter((g) => g.gateway_id.startsWith(fleet))
  t.equal(later.find((g) => g.gateway_id === `${fleet}-current`).stale, true, 'three intervals of 200 ms without a heartbeat: stale')
  t.equal(later.find((g) => g.gateway_id === `${fleet}-behind`).stale, false, 'a 60 s interval is not missed yet')
  await post(admin, operatorKey, report(`${fleet}-current`, [], { status: { ...STATUS, workspace: defaultOrg, bundle_revision: revision } }))
  const back = ((await admin.request('GET', '/v1/gateways')).body.data as any[]).find((g) => g.gateway_id === `${fleet}-current`)
  t.equal(back.stale, false, 'a new heartbeat makes it fresh again')
})

t.test('GET /v1/gateway/status without a gateway here: "no gateway reports", then the reported state', async (t) => {
  const lonely = await startTestAdmin(t)
  const none = await lonely.request('GET', '/v1/gateway/status')
  t.equal(none.status, 200)
  t.match(none.body.data, { gateway: false, source: 'none', note: 'no gateway reports', pdp: 'unknown', bundle_state: 'none', bundle_revision: null, reporting: 0 })
  t.not(none.body.data.pdp, null, 'never a raw null PDP')
  const list = await lonely.request('GET', '/v1/gateway/decisions')
  t.equal(list.body.gateway, false)
  const workspace = (await lonely.request('GET', '/v1/me')).body.data.org_id as string
  const bundle = await lonely.request('GET', `/v1/bundles/${workspace}`, { key: null, headers: { 'x-service-registry-key': lonely.operatorKey } })
  await post(lonely, lonely.operatorKey, report('gw-status', [], { status: { ...STATUS, workspace, bundle_revision: bundle.body.revision, heartbeat_interval_ms: 60_000 } }))
  const reported = await lonely.request('GET', '/v1/gateway/status')
  t.match(reported.body.data, {
    gateway: false, source: 'report', gateway_id: 'gw-status', note: null, reporting: 1, pdp: 'embedded', mode: 'EM-OBSERVE',
    route_modes: ['EM-GUARD', 'EM-OBSERVE'], bundle_revision: bundle.body.revision, bundle_state: 'fresh', in_sync: true, workspace: workspace.toLowerCase(),
  })
  t.equal(reported.body.data.bundle_age_seconds, 1)
  t.equal((await lonely.request('GET', '/v1/gateway/decisions')).body.gateway, true, 'a reporting gateway feeds this admin plane')
})

t.test('with Redis: shared store; Redis away is degraded and 503, never a crash; back without a restart', async (t) => {
  const prefix = `test-reports-${randomBytes(4).toString('hex')}:`
  const proxy = await startTcpProxy(t, { host: '127.0.0.1', port: 6379 })
  const env = { REDIS_URL: `redis://127.0.0.1:${proxy.port}`, SERVICE_DECISIONS_REDIS_PREFIX: prefix }
  const one = await startTestAdmin(t, env, { database: admin.database })
  const two = await startTestAdmin(t, { ...env, SERVICE_BOOTSTRAP_API_KEY: one.operatorKey }, { database: admin.database })
  t.teardown(async () => {
    const { Redis } = await import('ioredis')
    const direct = new Redis('redis://127.0.0.1:6379')
    const keys = await direct.keys(`${prefix}*`)
    if (keys.length > 0) await direct.del(...keys)
    await direct.quit()
  })
  const shared = event({ path: '/shared' })
  t.equal((await post(one, one.operatorKey, report('gw-redis', [shared]))).status, 202)
  const onTwo = (await listAll(two, one.operatorKey)).find((e) => e.request_id === shared.request_id)
  t.match(onTwo, { path: '/shared', gateway_id: 'gw-redis' }, 'stored by one instance, listed by the other')
  t.equal((await two.request('GET', `/v1/gateway/decisions/${shared.decision_id}`, { key: one.operatorKey })).status, 200)
  t.ok(((await two.request('GET', '/v1/gateways', { key: one.operatorKey })).body.data as any[]).some((g) => g.gateway_id === 'gw-redis'))
  const once = report('gw-redis', [event({ path: '/once' })], { run: 'run-r' })
  t.same((await post(one, one.operatorKey, once)).body, { accepted: 1, stored: 1 })
  t.same((await post(two, one.operatorKey, once)).body, { accepted: 1, stored: 0 }, 'a retry that reaches the other instance is skipped too')
  t.equal((await listAll(one, one.operatorKey)).filter((e) => e.path === '/once').length, 1, 'listed once')

  await proxy.cut()
  await new Promise((r) => setTimeout(r, 300))
  const ready = await one.request('GET', '/readyz', { key: null })
  t.equal(ready.status, 200, 'still ready')
  t.match(ready.body, { status: 'ready', degraded: { redis: { code: 'redis_unavailable' } } }, 'and says it is degraded')
  t.match(await one.request('GET', '/v1/gateway/decisions'), { status: 503, body: { error: 'decision_store_unavailable' } }, 'a read is 503')
  t.match(await one.request('GET', `/v1/gateway/decisions/${shared.decision_id}`), { status: 503, body: { error: 'decision_store_unavailable' } })
  t.match(await one.request('GET', '/v1/gateways'), { status: 503, body: { error: 'decision_store_unavailable' } })
  t.match(await post(one, one.operatorKey, report('gw-redis', [event()])), { status: 503, body: { error: 'decision_store_unavailable' } }, 'ingest is 503: the gateway retries')
  const stream = await fetch(`${one.url}/v1/gateway/decisions/stream`, { headers: { authorization: `Bearer ${one.operatorKey}` } })
  t.equal(stream.status, 503, 'a new stream is 503')
  t.equal(((await stream.json()) as { error: string }).error, 'decision_store_unavailable')
  t.equal((await one.request('GET', '/v1/gateway/status')).status, 200, 'the status still answers')

  await proxy.restore()
  const deadline = Date.now() + 10_000
  let status = 0
  while (Date.now() < deadline) {
    status = (await post(one, one.operatorKey, report('gw-redis', [event({ path: '/after' })]))).status
    if (status === 202) break
    await new Promise((r) => setTimeout(r, 200))
  }
  t.equal(status, 202, 'ingest works again once Redis is back')
  // The other instance's Redis client reconnects on its own schedule: until it has, its reads are 503.
  let readByTwo = false
  while (!readByTwo && Date.now() < deadline + 10_000) {
    const res = await two.request('GET', '/v1/gateway/decisions?limit=1000', { key: one.operatorKey })
    readByTwo = res.status === 200 && (res.body.data as any[]).some((e) => e.path === '/after')
    if (!readByTwo) await new Promise((r) => setTimeout(r, 200))
  }
  t.ok(readByTwo, 'and the other instance reads it, once its own connection is back')
})
