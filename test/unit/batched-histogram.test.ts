/**
 * The gateway's request-latency histogram counts in a typed array instead of prom-client's Histogram;
 * a scrape must not be able to tell the difference. Every case feeds the same values to both and
 * compares the registries' text exposition line by line.
 */
import t from 'tap'
import fc from 'fast-check'
import { Histogram, Registry } from 'prom-client'
import { BatchedHistogram } from '../../src/telemetry/batched-histogram.js'

const BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10]

function pair(buckets: readonly number[] = BUCKETS): { ours: BatchedHistogram; theirs: Histogram; oursText: () => Promise<string>; theirsText: () => Promise<string> } {
  const oursRegistry = new Registry()
  const theirsRegistry = new Registry()
  const options = { name: 'service_test_duration_seconds', help: 'Test latency' }
  const ours = new BatchedHistogram({ ...options, buckets, registers: [oursRegistry] })
  const theirs = new Histogram({ ...options, buckets: [...buckets], registers: [theirsRegistry] })
  return { ours, theirs, oursText: () => oursRegistry.metrics(), theirsText: () => theirsRegistry.metrics() }
}

t.test('an empty histogram scrapes like prom-client’s', async (t) => {
  const { oursText, theirsText } = pair()
  t.equal(await oursText(), await theirsText())
})

t.test('values on, between, below and above the bounds land in the same buckets', async (t) => {
  const { ours, theirs, oursText, theirsText } = pair()
  for (const value of [0, 0.0005, 0.00050001, 0.0007, 0.001, 0.3, 1, 2.5, 9.99, 10, 10.01, 1e6]) {
    ours.observe(value)
    theirs.observe(value)
  }
  const text = await oursText()
  t.equal(text, await theirsText())
  t.match(text, /service_test_duration_seconds_bucket\{le="0\.0005"\} 2\n/, 'le is inclusive: 0 and 0.0005')
  t.match(text, /service_test_duration_seconds_bucket\{le="\+Inf"\} 12\n/)
  t.match(text, /service_test_duration_seconds_count 12/)
})

t.test('any sequence of latencies: same exposition (property)', async (t) => {
  await fc.assert(fc.asyncProperty(
    fc.array(fc.double({ min: 0, max: 100, noNaN: true }), { maxLength: 200 }),
    async (values) => {
      const { ours, theirs, oursText, theirsText } = pair()
      for (const value of values) {
        ours.observe(value)
        theirs.observe(value)
      }
      return (await oursText()) === (await theirsText())
    },
  ), { numRuns: 200 })
  t.pass('200 random sequences scraped identically')
})

t.test('reset (the registry’s resetMetrics) makes it scrape like a new one', async (t) => {
  // prom-client's own unlabelled histogram then shows no series at all; zero counts say the same
  // thing without a gap in the series.
  const { ours, oursText } = pair()
  ours.observe(0.2)
  ours.reset()
  t.equal(await oursText(), await pair().theirsText())
  t.match(await oursText(), /_count 0/)
})

t.test('non-finite values are not counted; bad bucket lists are refused', async (t) => {
  const { ours, oursText } = pair()
  ours.observe(Number.NaN)
  ours.observe(Number.POSITIVE_INFINITY)
  t.match(await oursText(), /_count 0/)
  t.throws(() => new BatchedHistogram({ name: 'x', help: 'x', buckets: [] }), TypeError)
  t.throws(() => new BatchedHistogram({ name: 'x', help: 'x', buckets: [1, 1] }), TypeError)
  t.throws(() => new BatchedHistogram({ name: 'x', help: 'x', buckets: [1, Number.NaN] }), TypeError)
})
