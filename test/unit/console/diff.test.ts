/**
 * The console's line diff (console/src/lib/diff.ts): a proposal shown against the active policy text.
 * Besides fixed cases, random pairs check the two properties that make it a correct diff: dropping the
 * added lines gives the old text, dropping the removed ones gives the new text, and the kept lines are a
 * longest common subsequence (compared with a plain reference LCS length).
 */
import t from 'tap'
import fc from 'fast-check'
import { MAX_CELLS, diffStats, lineDiff, splitLines, type DiffLine } from '../../../console/src/lib/diff.js'

const render = (diff: readonly DiffLine[]): string[] => diff.map((l) => `${l.op === 'add' ? '+' : l.op === 'del' ? '-' : ' '}${l.text}`)

t.test('splitLines: a final newline adds no line, CRLF is LF', async (t) => {
  t.same(splitLines(''), [])
  t.same(splitLines('a'), ['a'])
  t.same(splitLines('a\n'), ['a'])
  t.same(splitLines('a\r\nb\r\n'), ['a', 'b'])
  t.same(splitLines('a\n\nb'), ['a', '', 'b'])
})

t.test('identical texts: every line the same, with both line numbers', async (t) => {
  const diff = lineDiff('a\nb\n', 'a\nb\n')
  t.same(diff, [{ op: 'same', text: 'a', oldLine: 1, newLine: 1 }, { op: 'same', text: 'b', oldLine: 2, newLine: 2 }])
  t.same(diffStats(diff), { added: 0, removed: 0 })
})

t.test('from nothing (no active document): everything added', async (t) => {
  const diff = lineDiff('', 'version: "1"\nmin_trust_level: REG\n')
  t.same(render(diff), ['+version: "1"', '+min_trust_level: REG'])
  t.same(diff.map((l) => l.newLine), [1, 2])
  t.same(diffStats(diff), { added: 2, removed: 0 })
})

t.test('to nothing: everything removed', async (t) => {
  t.same(render(lineDiff('a\nb', '')), ['-a', '-b'])
})

t.test('a changed line in a policy: removed before added, the rest kept', async (t) => {
  const before = 'version: "1"\nmin_trust_level: REG\noperations:\n  - pattern: "GET /forecasts/**"\n    min_trust_level: REG\n'
  const after = 'version: "1"\nmin_trust_level: REG\noperations:\n  - pattern: "GET /forecasts/**"\n    min_trust_level: DV\n  - pattern: "* /admin/**"\n    min_trust_level: OV\n'
  const diff = lineDiff(before, after)
  t.same(render(diff), [
    ' version: "1"',
    ' min_trust_level: REG',
    ' operations:',
    '   - pattern: "GET /forecasts/**"',
    '-    min_trust_level: REG',
    '+    min_trust_level: DV',
    '+  - pattern: "* /admin/**"',
    '+    min_trust_level: OV',
  ])
  t.same(diffStats(diff), { added: 3, removed: 1 })
  const del = diff.find((l) => l.op === 'del')
  t.same([del?.oldLine, del?.newLine], [5, undefined], 'a removed line has only its old number')
  t.same(diff.filter((l) => l.op === 'add').map((l) => l.newLine), [5, 6, 7])
})

t.test('an insertion in the middle keeps both ends', async (t) => {
  t.same(render(lineDiff('a\nb\nc\nd', 'a\nb\nX\nc\nd')), [' a', ' b', '+X', ' c', ' d'])
  t.same(render(lineDiff('a\nb\nX\nc\nd', 'a\nb\nc\nd')), [' a', ' b', '-X', ' c', ' d'])
})

t.test('moved and repeated lines', async (t) => {
  const diff = lineDiff('a\nb\nc', 'c\na\nb')
  t.same(diffStats(diff), { added: 1, removed: 1 }, 'one line moves: the LCS keeps a, b')
  t.same(render(lineDiff('x\nx\nx', 'x\nx')), [' x', ' x', '-x'])
})

function lcsLength(a: string[], b: string[]): number {
  const row = new Array<number>(b.length + 1).fill(0)
  for (let i = 1; i <= a.length; i++) {
    let diagonal = 0
    for (let j = 1; j <= b.length; j++) {
      const saved = row[j] as number
      row[j] = a[i - 1] === b[j - 1] ? diagonal + 1 : Math.max(row[j] as number, row[j - 1] as number)
      diagonal = saved
    }
  }
  return row[b.length] as number
}

t.test('property: the diff rebuilds both texts and keeps a longest common subsequence', async (t) => {
  const line = fc.constantFrom('a', 'b', 'c', 'd', '', '  - x')
  const text = fc.array(line, { maxLength: 30 })
  fc.assert(fc.property(text, text, (oldLines, newLines) => {
    const diff = lineDiff(oldLines.join('\n'), newLines.join('\n'))
    const old = diff.filter((l) => l.op !== 'add').map((l) => l.text)
    const neu = diff.filter((l) => l.op !== 'del').map((l) => l.text)
    // join/split round-trip: a trailing empty line is one splitLines drops, as it does for the input.
    const expectOld = splitLines(oldLines.join('\n'))
    const expectNew = splitLines(newLines.join('\n'))
    if (JSON.stringify(old) !== JSON.stringify(expectOld) || JSON.stringify(neu) !== JSON.stringify(expectNew)) return false
    const same = diff.filter((l) => l.op === 'same').length
    if (same !== lcsLength(expectOld, expectNew)) return false
    // Line numbers count up by one on each side.
    const olds = diff.flatMap((l) => l.oldLine === undefined ? [] : [l.oldLine])
    const news = diff.flatMap((l) => l.newLine === undefined ? [] : [l.newLine])
    return olds.every((n, i) => n === i + 1) && news.every((n, i) => n === i + 1)
  }), { seed: 20260501, numRuns: Number(process.env.FC_NUM_RUNS ?? 300) })
  t.pass('held')
})

t.test('beyond the table limit: still a correct diff (prefix, suffix, middle replaced)', async (t) => {
  const size = Math.ceil(Math.sqrt(MAX_CELLS)) + 10
  const a = Array.from({ length: size }, (_, i) => `a${i}`)
  const b = Array.from({ length: size }, (_, i) => `b${i}`)
  const diff = lineDiff(['head', ...a, 'tail'].join('\n'), ['head', ...b, 'tail'].join('\n'))
  t.equal(diff[0]?.op, 'same')
  t.equal(diff.at(-1)?.op, 'same')
  t.same(diffStats(diff), { added: size, removed: size })
})
