/**
 * A line diff by longest common subsequence, for showing a policy proposal against the active text.
 * Pure (no DOM, no Node): the console bundles it, the CLI prints it (`policy propose`), and
 * test/unit/console/diff.test.ts runs it.
 *
 * Policy documents are at most 64 KiB, so the O(n·m) table is bounded; beyond MAX_CELLS cells (two
 * documents of a few thousand lines each) the common prefix and suffix are kept and the middle is shown
 * as removed then added, which is still a correct (if not minimal) diff.
 */

export type DiffOp = 'same' | 'add' | 'del'

export interface DiffLine {
  readonly op: DiffOp
  readonly text: string
  /** 1-based line number in the old text (absent for added lines). */
  readonly oldLine?: number
  /** 1-based line number in the new text (absent for removed lines). */
  readonly newLine?: number
}

export const MAX_CELLS = 4_000_000

/** Splits text into lines; a final newline does not make an extra empty line, CRLF counts as LF. */
export function splitLines(text: string): string[] {
  if (text === '') return []
  const lines = text.replace(/\r\n/g, '\n').split('\n')
  if (lines[lines.length - 1] === '') lines.pop()
  return lines
}

/** The diff of two texts, line by line, in order: removed lines come before the lines that replace them. */
export function lineDiff(oldText: string, newText: string): DiffLine[] {
  const a = splitLines(oldText)
  const b = splitLines(newText)
  const out: DiffLine[] = []

  // Common prefix and suffix need no table.
  let start = 0
  while (start < a.length && start < b.length && a[start] === b[start]) start++
  let endA = a.length
  let endB = b.length
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) {
    endA--
    endB--
  }
  for (let i = 0; i < start; i++) out.push({ op: 'same', text: a[i] as string, oldLine: i + 1, newLine: i + 1 })

  const n = endA - start
  const m = endB - start
  if (n * m > MAX_CELLS) {
    for (let i = start; i < endA; i++) out.push({ op: 'del', text: a[i] as string, oldLine: i + 1 })
    for (let j = start; j < endB; j++) out.push({ op: 'add', text: b[j] as string, newLine: j + 1 })
  } else if (n > 0 || m > 0) {
    // lcs[i][j] = length of the LCS of a[start+i..endA) and b[start+j..endB), in one flat array.
    const width = m + 1
    const lcs = new Uint32Array((n + 1) * width)
    for (let i = n - 1; i >= 0; i--) {
      for (let j = m - 1; j >= 0; j--) {
        lcs[i * width + j] = a[start + i] === b[start + j]
          ? (lcs[(i + 1) * width + j + 1] as number) + 1
          : Math.max(lcs[(i + 1) * width + j] as number, lcs[i * width + j + 1] as number)
      }
    }
    let i = 0
    let j = 0
    while (i < n || j < m) {
      if (i < n && j < m && a[start + i] === b[start + j]) {
        out.push({ op: 'same', text: a[start + i] as string, oldLine: start + i + 1, newLine: start + j + 1 })
        i++
        j++
      } else if (j >= m || (i < n && (lcs[(i + 1) * width + j] as number) >= (lcs[i * width + j + 1] as number))) {
        out.push({ op: 'del', text: a[start + i] as string, oldLine: start + i + 1 })
        i++
      } else {
        out.push({ op: 'add', text: b[start + j] as string, newLine: start + j + 1 })
        j++
      }
    }
  }

  for (let k = 0; k < a.length - endA; k++) {
    out.push({ op: 'same', text: a[endA + k] as string, oldLine: endA + k + 1, newLine: endB + k + 1 })
  }
  return out
}

/** Counts of added and removed lines. */
export function diffStats(diff: readonly DiffLine[]): { added: number; removed: number } {
  let added = 0
  let removed = 0
  for (const line of diff) {
    if (line.op === 'add') added++
    else if (line.op === 'del') removed++
  }
  return { added, removed }
}
