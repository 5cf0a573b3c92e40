/**
 * The gateway's decision shipper: it reads the ring after its cursor off the request path, sends batches
 * with the status (heartbeats even without events), keeps one report in flight, retries a failed one with
 * backoff while the ring keeps the events, counts what overflowed the ring as dropped and names the gap in
 * the next report, drops (and counts) a refused report, and flushes once more when stopped.
 */
import t, { type Test } from 'tap'
import { DecisionFeed, type DecisionRecord } from '../../../src/telemetry/decision-feed.js'
import { DecisionShipper, generatedGatewayId, generatedRunId, ReportRejected, reportedEventOf, type GatewayReport, type ReportedStatus } from '../../../src/telemetry/decision-shipper.js'
import { randomBytes } from 'node:crypto'

function record(n: number, decision: DecisionRecord['decision'] = 'ALLOW'): DecisionRecord {
  return {
    seq: 0, timeMs: 1_700_000_000_000 + n, requestIdPrefix: 'gw-', requestSeq: n, txnId: undefined, agentDid: `did:key:z${n}`, badgeJti: `jti-${n}`,
    method: 'GET', path: `/p/${n}`, operationMethod: 'GET', mcpMethod: undefined, tool: undefined, a2aOperation: undefined, decision, reason: undefined,
    decisionId: `d-${n}`, mode: 'EM-GUARD', obligations: undefined, obligationsNotMet: undefined, overrideJti: undefined, status: 200,
    protocol: 'http', errorCode: undefined, pdpRequest: { subject: { did: `did:key:z${n}` } },
  }
}

const STATUS: ReportedStatus = {
  routes: [{ prefix: '/', mode: 'EM-GUARD', protocol: 'http' }], pdp: 'embedded', workspace: null, bundle_revision: 'r1',
  snapshot_age_ms: 5, default_mode: 'EM-OBSERVE', heartbeat_interval_ms: 10_000,
}

const tick = (ms = 0): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

async function until(ms: number, check: () => boolean): Promise<boolean> {
  const deadline = Date.now() + ms
  while (!check()) {
    if (Date.now() > deadline) return false
    await tick(5)
  }
  return true
}

interface Harness {
  feed: DecisionFeed
  reports: GatewayReport[]
  shipper: DecisionShipper
  dropped: number[]
}

function harness(t: Test, options: Partial<ConstructorParameters<typeof DecisionShipper>[0]> & { capacity?: number } = {}): Harness {
  const feed = new DecisionFeed(options.capacity ?? 100)
  const reports: GatewayReport[] = []
  const dropped: number[] = []
  const shipper = new DecisionShipper({
    feed, gatewayId: 'gw-test', version: '1.2.3', status: () => STATUS, heartbeatMs: 60_000, intervalMs: 20,
    send: async (report) => { reports.push(report) },
    onDropped: (n) => dropped.push(n),
    ...options,
  })
  t.teardown(() => shipper.stop(0))
  return { feed, reports, shipper, dropped }
}

t.test('the id made when SERVICE_PEP_ID names none', async (t) => {
  t.match(generatedGatewayId(randomBytes), /^gw-[0-9a-f]{12}$/)
  t.not(generatedGatewayId(randomBytes), generatedGatewayId(randomBytes))
})

t.test('a run id per shipper, the same in every report it sends', async (t) => {
  t.match(generatedRunId(1_700_000_000_000, randomBytes), /^[0-9a-z]+-[0-9a-f]{8}$/)
  t.not(generatedRunId(1, randomBytes), generatedRunId(1, randomBytes), 'two starts in one millisecond still differ')
  const h = harness(t)
  const other = harness(t)
  t.not(h.shipper.run, other.shipper.run, 'another process (or a restart) has another run')
  h.shipper.start()
  h.feed.record(record(1))
  await until(1000, () => h.reports.some((r) => r.events.length > 0))
  await h.shipper.flush()
  t.ok(h.reports.length >= 2)
  t.ok(h.reports.every((r) => r.run === h.shipper.run), 'every report names the run')
  t.equal(harness(t, { run: 'given' }).shipper.run, 'given')
})

t.test('the wire event: the feed\'s fields, the badge jti, the PDP request of a denial only', async (t) => {
  const allow = record(1)
  allow.seq = 1
  t.match(reportedEventOf(allow), { seq: 1, request_id: 'gw-1', badge_jti: 'jti-1', operation: 'GET /p/1', decision: 'ALLOW', pdp_request: null, time: new Date(1_700_000_000_001).toISOString() })
  const deny = record(2, 'DENY')
  t.same(reportedEventOf(deny).pdp_request, { subject: { did: 'did:key:z2' } })
})

t.test('a heartbeat at start and when due, with or without events; events in batches; nothing on the record call', async (t) => {
  let now = 1_000
  const h = harness(t, { heartbeatMs: 1_000, now: () => now, maxBatch: 3 })
  h.shipper.start()
  await until(1000, () => h.reports.length === 1)
  t.same(h.reports[0]?.events, [], 'the first report is a heartbeat')
  t.same(h.reports[0]?.status, STATUS)
  t.match(h.reports[0], { gateway_id: 'gw-test', version: '1.2.3' })
  for (let n = 1; n <= 7; n++) h.feed.record(record(n))
  t.equal(h.reports.length, 1, 'recording sends nothing by itself')
  await until(1000, () => h.reports.reduce((sum, r) => sum + r.events.length, 0) === 7)
  t.same(h.reports.slice(1).map((r) => r.events.map((e) => e.seq)), [[1, 2, 3], [4, 5, 6], [7]], 'at most maxBatch per report, in order')
  t.ok(h.reports.every((r) => r.dropped === undefined), 'nothing lost')
  const before = h.reports.length
  await tick(60)
  t.equal(h.reports.length, before, 'no report while nothing is new and no heartbeat is due')
  now += 1_000
  await until(1000, () => h.reports.length === before + 1)
  t.same(h.reports.at(-1)?.events, [], 'a heartbeat without events when the interval passed')
})

t.test('at most one report in flight; a failed report is retried with backoff while the ring keeps the events', async (t) => {
  let inFlight = 0
  let maxInFlight = 0
  let fail = true
  const attempts: number[] = []
  const sent: GatewayReport[] = []
  const errors: (number | null)[] = []
  const h = harness(t, {
    initialBackoffMs: 100, maxBackoffMs: 300,
    onError: (_error, retryInMs) => errors.push(retryInMs),
    send: async (report) => {
      inFlight++
      maxInFlight = Math.max(maxInFlight, inFlight)
      attempts.push(Date.now())
      // Longer than the 20 ms timer: ticks fire while the report is in flight.
      await tick(50)
      inFlight--
      if (fail) throw new Error('503')
      sent.push(report)
    },
  })
  h.feed.record(record(1))
  h.shipper.start()
  for (let n = 2; n <= 5; n++) h.feed.record(record(n))
  await until(5000, () => errors.length >= 4)
  t.same(errors.slice(0, 4), [100, 200, 300, 300], 'the backoff doubles up to its bound')
  // Each retry waits its backoff after the failed attempt ended (50 ms in flight); a little slack for timers.
  t.ok((attempts[1] as number) - (attempts[0] as number) >= 50 + 100 - 5, `the first retry waited (${(attempts[1] as number) - (attempts[0] as number)} ms)`)
  t.ok((attempts[2] as number) - (attempts[1] as number) >= 50 + 200 - 5, `the second waited twice as long (${(attempts[2] as number) - (attempts[1] as number)} ms)`)
  t.equal(maxInFlight, 1, 'one report at a time, though the timer fires every 20 ms')
  t.equal(sent.length, 0)
  fail = false
  await until(2000, () => sent.reduce((sum, r) => sum + r.events.length, 0) === 5)
  t.same(sent.flatMap((r) => r.events.map((e) => e.seq)), [1, 2, 3, 4, 5], 'every event kept by the ring arrives once the control plane answers')
  t.same(h.dropped, [], 'nothing dropped')
  t.equal(maxInFlight, 1)
})

t.test('overflow while failing: the lost events are counted once and the next report names the range', async (t) => {
  let fail = true
  const h = harness(t, {
    capacity: 4, initialBackoffMs: 10, maxBackoffMs: 10,
    send: async (report) => {
      if (fail) throw new Error('network down')
      h.reports.push(report)
    },
  })
  h.shipper.start()
  for (let n = 1; n <= 10; n++) h.feed.record(record(n))
  await tick(80)
  t.same(h.dropped, [6], 'seqs 1-6 left the ring of 4 unsent: counted once, however many retries')
  t.equal(h.shipper.droppedTotal, 6)
  fail = false
  await until(1000, () => h.reports.some((r) => r.events.length > 0))
  const report = h.reports.find((r) => r.events.length > 0)
  t.same(report?.dropped, { count: 6, from_seq: 1, to_seq: 6 }, 'the gap, in the gateway\'s numbers')
  t.same(report?.events.map((e) => e.seq), [7, 8, 9, 10])
  t.same(h.dropped, [6], 'still counted once')
  const later = h.reports.length
  h.feed.record(record(11))
  await until(1000, () => h.reports.length > later)
  t.equal(h.reports.at(-1)?.dropped, undefined, 'the gap is reported once')
})

t.test('a refused report is not retried: its events are dropped and counted', async (t) => {
  const refused: (number | null)[] = []
  let refusedOnce = false
  const h = harness(t, {
    onError: (_e, retry) => refused.push(retry),
    send: async (report) => {
      if (report.events.length > 0 && !refusedOnce) {
        refusedOnce = true
        throw new ReportRejected('400 invalid_request')
      }
      h.reports.push(report)
    },
  })
  h.feed.record(record(1))
  h.feed.record(record(2))
  h.shipper.start()
  await until(1000, () => refused.length === 1)
  t.same(refused, [null], 'a refusal, not a retry')
  t.same(h.dropped, [2])
  h.feed.record(record(3))
  await until(1000, () => h.reports.some((r) => r.events.length > 0))
  t.same(h.reports.find((r) => r.events.length > 0)?.events.map((e) => e.seq), [3], 'the next events go out')
})

t.test('the timer is not waited for once many events wait; eager ships every turn', async (t) => {
  const h = harness(t, { intervalMs: 60_000, wakeAt: 5 })
  h.shipper.start()
  await until(1000, () => h.reports.length === 1)
  for (let n = 1; n <= 4; n++) h.feed.record(record(n))
  await tick(30)
  t.equal(h.reports.length, 1, 'four events wait for the timer')
  h.feed.record(record(5))
  await until(1000, () => h.reports.length === 2)
  t.same(h.reports[1]?.events.map((e) => e.seq), [1, 2, 3, 4, 5], 'the fifth wakes the shipper')

  const eager = harness(t, { intervalMs: 60_000, eager: true })
  eager.shipper.start()
  await until(1000, () => eager.reports.length === 1)
  eager.feed.record(record(1))
  await until(1000, () => eager.reports.length === 2)
  t.same(eager.reports[1]?.events.map((e) => e.seq), [1], 'shipped on the next turn')
})

t.test('flush waits for the report in flight and sends the rest; stop makes one last flush within its grace', async (t) => {
  let release: (() => void) | null = null
  const h = harness(t, {
    intervalMs: 60_000,
    send: async (report) => {
      if (report.events.length > 0 && release === null) await new Promise<void>((resolve) => { release = resolve })
      h.reports.push(report)
    },
  })
  h.shipper.start()
  await until(1000, () => h.reports.length === 1)
  h.feed.record(record(1))
  void h.shipper.flush()
  await until(1000, () => release !== null)
  t.ok(h.shipper.busy, 'a report is in flight')
  h.feed.record(record(2))
  const second = h.shipper.flush()
  let flushed = false
  void second.then(() => { flushed = true })
  await tick(20)
  t.notOk(flushed, 'flush waits for it')
  ;(release as unknown as () => void)()
  await second
  t.same(h.reports.flatMap((r) => r.events.map((e) => e.seq)), [1, 2], 'and then sends what was recorded before it was called')

  h.feed.record(record(3))
  await h.shipper.stop(1000)
  t.same(h.reports.flatMap((r) => r.events.map((e) => e.seq)), [1, 2, 3], 'stop flushed the last event')
  h.feed.record(record(4))
  await tick(30)
  t.same(h.reports.flatMap((r) => r.events.map((e) => e.seq)), [1, 2, 3], 'nothing is shipped after stop')

  const hung = harness(t, { send: () => new Promise<void>(() => {}) })
  hung.shipper.start()
  hung.feed.record(record(1))
  const started = Date.now()
  await hung.shipper.stop(100)
  t.ok(Date.now() - started < 1000, 'a control plane that never answers does not hold the shutdown past the grace')
})
