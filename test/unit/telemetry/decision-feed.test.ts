/**
 * The console's decision ring: bounded, numbered from 1 without gaps, a reader that fell behind told what
 * it missed, subscribers woken once per event-loop turn (never during the gateway's call).
 */
import t from 'tap'
import fc from 'fast-check'
import { DecisionFeed, OverrideLog, SequencedRing, type DecisionRecord } from '../../../src/telemetry/decision-feed.js'
import { propertyRuns } from '../../helpers/property-runs.js'

function record(n: number): DecisionRecord {
  return {
    seq: 0, timeMs: n, requestIdPrefix: 'gw-', requestSeq: n, txnId: undefined, agentDid: `did:key:z${n}`, badgeJti: undefined, method: 'GET', path: '/',
    operationMethod: 'GET', mcpMethod: undefined, tool: undefined, a2aOperation: undefined, decision: 'ALLOW', reason: undefined,
    decisionId: `d-${n}`, mode: 'EM-GUARD', obligations: undefined, obligationsNotMet: undefined, overrideJti: undefined, status: 200,
    protocol: 'http', errorCode: undefined, pdpRequest: null,
  }
}

t.test('bounds and sequence numbers', async (t) => {
  const ring = new SequencedRing<{ n: number }>(3)
  t.equal(ring.lastSeq, 0)
  t.equal(ring.firstSeq, 0)
  t.same(ring.after(0), { items: [], missed: null }, 'empty')
  for (let n = 1; n <= 5; n++) t.equal(ring.push({ n }), n, `push ${n} is seq ${n}`)
  t.equal(ring.size, 3, 'holds its capacity')
  t.equal(ring.firstSeq, 3)
  t.same(ring.latest(10).map((r) => r.n), [3, 4, 5], 'latest, oldest first')
  t.same(ring.latest(2).map((r) => r.n), [4, 5])
  t.equal(ring.get(2), undefined, 'left the ring')
  t.equal(ring.get(4)?.n, 4)
  t.equal(ring.get(6), undefined, 'not yet')
  t.same(ring.after(4), { items: [{ n: 5 }], missed: null }, 'a reader in the window misses nothing')
  t.same(ring.after(0), { items: [{ n: 3 }, { n: 4 }, { n: 5 }], missed: { from: 1, to: 2 } }, 'a reader behind the window gets a gap')
  t.same(ring.after(99).items.map((r) => r.n), [3, 4, 5], 'a position from an earlier process reads from the start')
  t.same(ring.after(2, 1), { items: [{ n: 3 }], missed: null }, 'max bounds a pull')
  t.throws(() => new SequencedRing(0), RangeError)
})

t.test('property: never more than its capacity, sequence strictly increasing, a pull contiguous after its gap', async (t) => {
  fc.assert(fc.property(
    fc.integer({ min: 1, max: 50 }),
    fc.array(fc.oneof(fc.constant('push' as const), fc.integer({ min: 0, max: 300 })), { maxLength: 300 }),
    (capacity, ops) => {
      const ring = new SequencedRing<{ n: number }>(capacity)
      let pushed = 0
      let previous = 0
      for (const op of ops) {
        if (op === 'push') {
          const seq = ring.push({ n: ++pushed })
          if (seq !== previous + 1) return false
          previous = seq
        } else {
          const { items, missed } = ring.after(op)
          if (items.length > capacity) return false
          // A position ahead of the newest is from an earlier process: read from the start.
          const from = op > pushed ? 1 : op + 1
          const start = missed === null ? from : missed.to + 1
          if (items.length > 0 && items[0]!.n !== start) return false
          for (let i = 1; i < items.length; i++) if (items[i]!.n !== items[i - 1]!.n + 1) return false
          if (missed !== null && (missed.from !== from || missed.to !== ring.firstSeq - 1)) return false
          if (missed === null && from < ring.firstSeq) return false
        }
        if (ring.size > capacity || ring.latest(capacity + 10).length > capacity) return false
      }
      return ring.lastSeq === pushed
    },
  ), propertyRuns(200))
  t.pass('held')
})

t.test('subscribers are woken once per turn, after the record call returned', async (t) => {
  const feed = new DecisionFeed(10)
  let wakes = 0
  const unsubscribe = feed.subscribe(() => { wakes++ })
  feed.record(record(1))
  feed.record(record(2))
  t.equal(wakes, 0, 'not during the gateway\'s call')
  await new Promise((resolve) => setImmediate(resolve))
  t.equal(wakes, 1, 'one wake-up for both records')
  t.same(feed.after(0).items.map((r) => r.seq), [1, 2], 'records numbered by the feed')
  unsubscribe()
  feed.record(record(3))
  await new Promise((resolve) => setImmediate(resolve))
  t.equal(wakes, 1, 'not after unsubscribing')
  t.equal(feed.subscriberCount, 0)
})

t.test('a throwing subscriber does not stop the others', async (t) => {
  const feed = new DecisionFeed(2)
  let woken = false
  feed.subscribe(() => { throw new Error('broken stream') })
  feed.subscribe(() => { woken = true })
  feed.record(record(1))
  await new Promise((resolve) => setImmediate(resolve))
  t.ok(woken)
})

t.test('find by decision id, newest first, only while held', async (t) => {
  const feed = new DecisionFeed(2)
  for (let n = 1; n <= 3; n++) feed.record(record(n))
  t.equal(feed.findByDecisionId('d-3')?.seq, 3)
  t.equal(feed.findByDecisionId('d-1'), undefined, 'left the buffer')
  const overrides = new OverrideLog(2)
  for (let n = 1; n <= 3; n++) overrides.record({ timeMs: n, jti: `j${n}`, operator: 'op', reason: 'r', agentDid: undefined, badgeJti: undefined, method: 'GET', path: '/' })
  t.same(overrides.latest(10).map((o) => o.jti), ['j2', 'j3'], 'the override log is bounded too')
})
