/**
 * The instruction-count guard's arithmetic (bench/instructions-check.ts): what counts as a regression against
 * the stored baseline, what the table says, and which baseline files are refused. No valgrind, no timing.
 */
import t from 'tap'
import { compareCounts, failed, formatCheck, parseBaseline, REGRESSION_THRESHOLD } from '../../../bench/instructions-check.js'

const baseline = { node: 'v20.0.0', method: 'm', counts: { http: 1_000_000, 'mcp-call': 2_000_000, 'a2a-send': 1_500_000 } }

t.test('within the threshold passes, above it fails, per workload', async (t) => {
  t.equal(REGRESSION_THRESHOLD, 0.05, 'the issue\'s 5 %')
  const rows = compareCounts(baseline, { http: 1_050_000, 'mcp-call': 1_800_000, 'a2a-send': 1_500_000 })
  t.strictSame(rows.map((r) => r.verdict), ['ok', 'ok', 'ok'], 'exactly +5 %, an improvement and no change pass')
  t.notOk(failed(rows))
  const worse = compareCounts(baseline, { http: 1_000_000, 'mcp-call': 2_100_002, 'a2a-send': 1_500_000 })
  t.strictSame(worse.map((r) => r.verdict), ['ok', 'REGRESSION', 'ok'], 'one instruction over +5 % on one workload fails')
  t.ok(failed(worse), 'and the whole check fails')
  t.equal(worse[1]!.change!.toFixed(6), '0.050001')
})

t.test('a custom threshold, and a workload the baseline lacks', async (t) => {
  const rows = compareCounts(baseline, { http: 1_020_000, new: 5 }, 0.01)
  t.strictSame(rows.map((r) => r.verdict), ['REGRESSION', 'no baseline'])
  t.equal(rows[1]!.baseline, null)
  t.equal(rows[1]!.change, null)
  t.notOk(failed(compareCounts(baseline, { new: 5 })), 'a workload without a baseline cannot fail the check')
})

t.test('the table names every workload with its baseline, count, change and verdict', async (t) => {
  const table = formatCheck(compareCounts(baseline, { http: 1_100_000, 'a2a-send': 1_400_000 }))
  const lines = table.split('\n')
  t.equal(lines.length, 4, 'a header, a rule and one row per workload')
  t.match(lines[0], /fails above \+5 %/)
  t.equal(lines[2], '| http | 1,000,000 | 1,100,000 | +10.0 % | REGRESSION |')
  t.equal(lines[3], '| a2a-send | 1,500,000 | 1,400,000 | -6.7 % | ok |')
})

t.test('a baseline file must hold node, method and positive integer counts', async (t) => {
  t.strictSame(parseBaseline(JSON.stringify(baseline)), baseline)
  for (const bad of [{}, { ...baseline, node: 20 }, { ...baseline, counts: null }, { ...baseline, counts: { http: -1 } }, { ...baseline, counts: { http: 1.5 } }, { ...baseline, method: undefined }]) {
    t.throws(() => parseBaseline(JSON.stringify(bad)), /instruction baseline/)
  }
  t.throws(() => parseBaseline('not json'))
})
