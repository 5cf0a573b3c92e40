/**
 * The decision store's contract, run against both stores: the in-process ring and Redis Streams (a real
 * Redis, keys under a prefix of this run). Entries are numbered from 1 in order; the oldest leave once the
 * bound is passed and a reader behind them is told the range; members' pages are taken from the whole store;
 * a decision id finds the newest entry; subscribers are woken after an append; heartbeats are kept per
 * gateway with the dropped counts summed. Redis only: two store objects on one Redis (two admin instances)
 * read the same thing, a subscriber on one is woken by an append on the other, and a Redis that is away is
 * `decision_store_unavailable`, never a crash.
 */
import t from 'tap'
import { randomBytes } from 'node:crypto'
import { connectRedis, type RedisLink } from '../../../src/net/redis-link.js'
import { MemoryDecisionStore, RedisDecisionStore, type DecisionStore, type NewEvent } from '../../../src/admin/services/decision-store.js'
import { createLogger } from '../../../src/telemetry/logger.js'
import { isServiceError } from '../../../src/core/errors.js'
import { Writable } from 'node:stream'

const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379'
const PREFIX = `test-store-${randomBytes(4).toString('hex')}:`
const quiet = createLogger('silent', new Writable({ write(_c, _e, done) { done() } }))

async function openRedis(): Promise<RedisLink> {
  const link = connectRedis(REDIS_URL, quiet)
  const deadline = Date.now() + 5000
  while (link.state() !== 'ready' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20))
  return link
}

const link = await openRedis()
t.equal(link.state(), 'ready', 'Redis answers')
t.teardown(async () => {
  const keys = await link.client.keys(`${PREFIX}*`)
  if (keys.length > 0) await link.client.del(...keys)
  await link.close()
})

function decision(n: number, orgId: string | null, decisionId: string | null = `d-${n}`): NewEvent {
  return { kind: 'decision', orgId, decisionId, event: { path: `/p/${n}`, org_id: orgId, gateway_id: 'gw-a' }, pdpRequest: n % 2 === 0 ? { n } : null }
}

let stores = 0
function redisStore(capacity: number, prefix = `${PREFIX}${++stores}:`): RedisDecisionStore {
  const store = new RedisDecisionStore({ redis: link.client, ready: () => link.state() === 'ready', prefix, capacity, pollMs: 20 })
  t.teardown(() => store.close())
  return store
}

const makers: Record<string, (capacity: number) => DecisionStore> = {
  memory: (capacity) => new MemoryDecisionStore(capacity),
  redis: (capacity) => redisStore(capacity),
}

const waitFor = async (ms: number, check: () => boolean): Promise<boolean> => {
  const deadline = Date.now() + ms
  while (!check() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10))
  return check()
}

for (const [kind, make] of Object.entries(makers)) {
  t.test(`${kind}: the contract`, async (t) => {
    const store = make(10)
    t.equal(store.kind, kind)
    t.equal(await store.lastSeq(), 0, 'empty')
    t.same(await store.after(0, 10), { items: [], missed: null })
    let woken = 0
    const unsubscribe = store.subscribe(() => { woken++ })
    t.equal(await store.append([decision(1, 'org-a'), decision(2, 'org-b'), decision(3, null)]), 3)
    t.ok(await waitFor(1000, () => woken > 0), 'a subscriber is woken after an append')
    unsubscribe()
    t.equal(await store.lastSeq(), 3)
    const all = await store.after(0, 10)
    t.same(all.items.map((e) => e.seq), [1, 2, 3], 'numbered from 1, in order')
    t.same(all.items.map((e) => e.orgId), ['org-a', 'org-b', null], 'the attribution is kept')
    t.same(all.items[1]?.pdpRequest, { n: 2 })
    t.same(all.items[1]?.event, { path: '/p/2', org_id: 'org-b', gateway_id: 'gw-a' })
    t.same((await store.after(1, 1)).items.map((e) => e.seq), [2], 'max bounds a pull')

    await store.append([{ kind: 'gap', orgId: null, decisionId: null, pdpRequest: null, event: { gateway_id: 'gw-a', dropped: 4, from_seq: 7, to_seq: 10 } }])
    const gap = (await store.after(3, 10)).items[0]
    t.match(gap, { seq: 4, kind: 'gap', event: { dropped: 4 } }, 'a reported gap is an entry of its own')
    t.same((await store.latest(10, () => true)).map((e) => e.seq), [1, 2, 3], 'the list has decisions only')

    // Enough for Redis's approximate trimming, which removes whole nodes of 100 entries.
    for (let from = 5; from <= 300; from += 50) {
      const batch: NewEvent[] = []
      for (let n = from; n < from + 50 && n <= 300; n++) batch.push(decision(n, n % 3 === 0 ? 'org-a' : 'org-b', n === 299 ? 'd-repeat' : `d-${n}`))
      await store.append(batch)
    }
    await store.append([decision(301, 'org-b', 'd-repeat')])
    const after = await store.after(0, 100)
    const first = after.items[0]?.seq ?? 0
    t.ok(first > 1, 'the oldest left the store')
    t.ok(after.items.length >= 10, `at least the bound is kept (${after.items.length})`)
    if (kind === 'memory') t.equal(after.items.length, 10, 'exactly the bound in memory')
    else t.ok(after.items.length <= 10 + 110, 'about the bound in Redis (MAXLEN ~ trims whole nodes)')
    t.same(after.missed, { from: 1, to: first - 1 }, 'a reader behind the store is told what it missed')
    t.same((await store.after(10_000, 3)).items.map((e) => e.seq), after.items.slice(0, 3).map((e) => e.seq), 'a position ahead reads from the start')

    const orgA = await store.latest(3, (org) => org === 'org-a')
    t.ok(orgA.length > 0 && orgA.every((e) => e.orgId === 'org-a'), 'a member\'s page holds its organization only')
    t.ok(orgA.every((e, i) => i === 0 || e.seq > (orgA[i - 1]?.seq ?? 0)), 'oldest first')
    t.equal(orgA.at(-1)?.seq, 300, 'the newest of its own')
    t.equal((await store.findByDecisionId('d-repeat'))?.seq, 301, 'the newest with that decision id')
    t.equal(await store.findByDecisionId('d-1'), undefined, 'one that left is not found')

    await store.putHeartbeat({ gatewayId: 'gw-a', version: '1', status: { pdp: 'none' }, receivedAt: Date.now(), intervalMs: 1000, orgId: 'org-a' }, 3)
    await store.putHeartbeat({ gatewayId: 'gw-a', version: '2', status: { pdp: 'embedded' }, receivedAt: Date.now(), intervalMs: 1000, orgId: 'org-a' }, 2)
    await store.putHeartbeat({ gatewayId: 'gw-b', version: '1', status: {}, receivedAt: Date.now() - 25 * 3600_000, intervalMs: 1000, orgId: null }, 0)
    t.equal(await store.append([], { heartbeat: { gatewayId: 'gw-c', version: '3', status: {}, receivedAt: Date.now(), intervalMs: 1000, orgId: null }, dropped: 4 }), 0, 'a heartbeat alone')
    const before = await store.lastSeq()
    await store.append([decision(400, null)], { heartbeat: { gatewayId: 'gw-c', version: '4', status: {}, receivedAt: Date.now(), intervalMs: 1000, orgId: null }, dropped: 1 })
    t.equal(await store.lastSeq(), before + 1, 'entries and heartbeat in one call')
    const beats = (await store.heartbeats()).filter((b) => b.gatewayId !== 'gw-c')
    t.match((await store.heartbeats()).find((b) => b.gatewayId === 'gw-c'), { version: '4', droppedTotal: 5 }, 'stored with the entries, drops summed')
    t.same(beats.map((b) => [b.gatewayId, b.version, b.droppedTotal]), [['gw-a', '2', 5]], 'the last heartbeat per gateway, drops summed, a day-old one forgotten')
    t.same(beats[0]?.status, { pdp: 'embedded' })
  })

  t.test(`${kind}: a retried report is stored once; a new run of the gateway is stored again`, async (t) => {
    const store = make(100)
    const reported = (seq: number): NewEvent => ({ ...decision(seq, null), gatewaySeq: seq })
    const gap: NewEvent = { kind: 'gap', orgId: null, decisionId: null, pdpRequest: null, gatewaySeq: 4, event: { gateway_id: 'gw-r', dropped: 2, from_seq: 3, to_seq: 4 } }
    const beat = (dropped: number) => ({ heartbeat: { gatewayId: 'gw-r', version: '1', status: {}, receivedAt: Date.now(), intervalMs: 1000, orgId: null }, dropped })
    const runA = { gatewayId: 'gw-r', run: 'run-a' }
    t.equal(await store.append([reported(1), reported(2)], beat(0), runA), 2, 'the first report')
    t.equal(await store.append([reported(1), reported(2)], beat(0), runA), 0, 'its retry stores nothing')
    t.equal(await store.append([gap, reported(5), reported(6)], beat(2), runA), 2, 'the next report, with a gap')
    t.equal(await store.append([gap, reported(5), reported(6), reported(7)], beat(2), runA), 1, 'a retry with one more event stores that one')
    t.match((await store.heartbeats()).find((b) => b.gatewayId === 'gw-r'), { droppedTotal: 2 }, 'the gap of a retried report is not counted twice')
    t.equal(await store.append([reported(6)], undefined, { gatewayId: 'gw-other', run: 'run-a' }), 1, 'another gateway has its own numbers')
    t.equal(await store.append([reported(1), reported(2)], beat(0), { gatewayId: 'gw-r', run: 'run-b' }), 2, 'a restarted gateway numbers from 1 again, under a new run')
    t.equal(await store.append([reported(2)], beat(0), { gatewayId: 'gw-r', run: 'run-b' }), 0, 'and its retries are skipped too')
    t.equal(await store.append([reported(1)]), 1, 'without a run nothing is skipped')
    const stored = (await store.after(0, 100)).items
    t.same(stored.map((e) => [e.kind, e.event['path'] ?? null]), [
      ['decision', '/p/1'], ['decision', '/p/2'], ['gap', null], ['decision', '/p/5'], ['decision', '/p/6'], ['decision', '/p/7'],
      ['decision', '/p/6'], ['decision', '/p/1'], ['decision', '/p/2'], ['decision', '/p/1'],
    ], 'each event once, in order, numbered without holes')
    t.same(stored.map((e) => e.seq), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    t.notOk('gatewaySeq' in (stored[0] as object), 'the gateway\'s number is not part of the stored entry')
  })
}

t.test('redis: two instances read the same store; a subscriber on one hears the other\'s append', async (t) => {
  const prefix = `${PREFIX}shared:`
  const a = redisStore(100, prefix)
  const b = redisStore(100, prefix)
  let woken = 0
  const unsubscribe = b.subscribe(() => { woken++ })
  await new Promise((r) => setTimeout(r, 60))
  woken = 0
  await a.append([decision(1, 'org-a'), decision(2, 'org-a')])
  t.ok(await waitFor(2000, () => woken > 0), 'b is woken by a poll within its interval')
  unsubscribe()
  t.same((await b.after(0, 10)).items.map((e) => e.seq), [1, 2])
  await b.append([decision(3, 'org-a')])
  t.same((await a.latest(10, () => true)).map((e) => e.event.path), ['/p/1', '/p/2', '/p/3'], 'one numbering across instances')
  await Promise.all([a.append([decision(4, null), decision(5, null)]), b.append([decision(6, null), decision(7, null)])])
  const seqs = (await a.after(0, 100)).items.map((e) => e.seq)
  t.same(seqs, [1, 2, 3, 4, 5, 6, 7], 'concurrent appends never collide or reorder')
  await a.putHeartbeat({ gatewayId: 'gw-x', version: '1', status: {}, receivedAt: Date.now(), intervalMs: 1000, orgId: null }, 0)
  t.same((await b.heartbeats()).map((h) => h.gatewayId), ['gw-x'], 'heartbeats are shared')

  // A lost counter (an eviction) cannot make ids go backwards.
  await link.client.del(`${prefix}seq`)
  await a.append([decision(8, null)])
  t.equal(await b.lastSeq(), 8)
})

t.test('redis away: every call is decision_store_unavailable; it works again once Redis is back', async (t) => {
  let up = false
  const store = new RedisDecisionStore({ redis: link.client, ready: () => up, prefix: `${PREFIX}away:`, capacity: 10 })
  t.teardown(() => store.close())
  for (const [what, call] of [
    ['append', () => store.append([decision(1, null)])],
    ['latest', () => store.latest(1, () => true)],
    ['after', () => store.after(0, 1)],
    ['find', () => store.findByDecisionId('x')],
    ['heartbeats', () => store.heartbeats()],
  ] as const) {
    const error = await (call as () => Promise<unknown>)().then(() => null, (e: unknown) => e)
    t.ok(isServiceError(error) && error.code === 'decision_store_unavailable' && error.status === 503, `${what}: 503 decision_store_unavailable`)
  }
  // A real outage: a client whose server does not answer.
  const dead = connectRedis('redis://127.0.0.1:1', quiet)
  t.teardown(() => dead.close())
  const unreachable = new RedisDecisionStore({ redis: dead.client, ready: () => true, prefix: `${PREFIX}dead:`, capacity: 10 })
  const error = await unreachable.append([decision(1, null)]).then(() => null, (e: unknown) => e)
  t.ok(isServiceError(error) && error.code === 'decision_store_unavailable', 'a failed command is the same error')
  up = true
  t.equal(await store.append([decision(1, null)]), 1, 'back')
})
