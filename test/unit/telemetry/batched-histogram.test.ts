/**
 * The gateway's request-latency and PDP-latency histograms count in typed arrays instead of
 * prom-client's Histogram; a scrape must not be able to tell the difference. Every case feeds the same
 * values to both and compares the registries' text exposition line by line.
 */
import t from 'tap'
import fc from 'fast-check'
import { Histogram, Registry } from 'prom-client'
import { BatchedHistogram } from '../../../src/telemetry/batched-histogram.js'

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

function labelledPair(): { ours: BatchedHistogram; theirs: Histogram<'pdp'>; oursText: () => Promise<string>; theirsText: () => Promise<string> } {
  const oursRegistry = new Registry()
  const theirsRegistry = new Registry()
  const options = { name: 'service_test_pdp_seconds', help: 'Test PDP latency', labelNames: ['pdp'] as const }
  const ours = new BatchedHistogram({ ...options, buckets: BUCKETS, registers: [oursRegistry] })
  const theirs = new Histogram({ ...options, labelNames: ['pdp'], buckets: [...BUCKETS], registers: [theirsRegistry] })
  return { ours, theirs, oursText: () => oursRegistry.metrics(), theirsText: () => theirsRegistry.metrics() }
}

t.test('labelled: a label set appears with its first observation, in first-observed order', async (t) => {
  const { ours, theirs, oursText, theirsText } = labelledPair()
  const ourHttp = ours.labels('http')
  const ourEmbedded = ours.labels('embedded')
  t.equal(await oursText(), await theirsText(), 'no series before any observation')
  t.notMatch(await oursText(), /_count/)
  ourEmbedded.observe(0.0002)
  theirs.labels('embedded').observe(0.0002)
  ourHttp.observe(0.02)
  theirs.labels('http').observe(0.02)
  ourEmbedded.observe(3)
  theirs.labels('embedded').observe(3)
  const text = await oursText()
  t.equal(text, await theirsText())
  t.match(text, /service_test_pdp_seconds_bucket\{le="0\.0005",pdp="embedded"\} 1\n/)
  t.match(text, /service_test_pdp_seconds_count\{pdp="http"\} 1\n/)
  t.ok(text.indexOf('pdp="embedded"') < text.indexOf('pdp="http"'), 'embedded was observed first')
})

t.test('labelled: any interleaving of label sets and values, same exposition (property)', async (t) => {
  await fc.assert(fc.asyncProperty(
    fc.array(fc.tuple(fc.constantFrom('embedded', 'http', 'opa'), fc.double({ min: 0, max: 100, noNaN: true })), { maxLength: 200 }),
    async (observations) => {
      const { ours, theirs, oursText, theirsText } = labelledPair()
      const handles = new Map<string, ReturnType<BatchedHistogram['labels']>>()
      for (const [pdp, value] of observations) {
        let handle = handles.get(pdp)
        if (handle === undefined) handles.set(pdp, (handle = ours.labels(pdp)))
        handle.observe(value)
        theirs.labels(pdp).observe(value)
      }
      return (await oursText()) === (await theirsText())
    },
  ), { numRuns: 200 })
  t.pass('200 random interleavings scraped identically')
})

t.test('labelled: reset drops the label sets; a kept handle counts from zero again', async (t) => {
  const { ours, theirs, oursText, theirsText } = labelledPair()
  const handle = ours.labels('embedded')
  handle.observe(0.1)
  theirs.labels('embedded').observe(0.1)
  ours.reset()
  theirs.reset()
  t.equal(await oursText(), await theirsText(), 'nothing after reset')
  handle.observe(0.2)
  theirs.labels('embedded').observe(0.2)
  t.equal(await oursText(), await theirsText())
  t.match(await oursText(), /service_test_pdp_seconds_count\{pdp="embedded"\} 1\n/)
})

t.test('labelled: wrong label counts, le as a label name and observe() without labels are refused', async (t) => {
  const { ours } = labelledPair()
  t.throws(() => ours.labels(), TypeError)
  t.throws(() => ours.labels('a', 'b'), TypeError)
  t.throws(() => ours.observe(1), TypeError)
  t.throws(() => new BatchedHistogram({ name: 'x', help: 'x', buckets: [1], labelNames: ['le'] }), TypeError)
})
