/**
 * The instruction-count guard's arithmetic (bench/instructions.ts --check): each workload's instructions per
 * request against the stored baseline, a regression above the threshold fails. Pure, so a unit test can
 * pin it down without running valgrind.
 */

/** A regression of more than this fraction of the baseline fails the check. */
export const REGRESSION_THRESHOLD = 0.05

export interface Baseline {
  /** `process.version` of the run that wrote it: counts of two node versions are not comparable. */
  readonly node: string
  /** What the counts were taken with (warm-up and the two request counts). */
  readonly method: string
  /** Instructions per request, by workload. */
  readonly counts: Readonly<Record<string, number>>
}

export interface CheckRow {
  readonly workload: string
  readonly baseline: number | null
  readonly measured: number
  /** measured / baseline − 1; null without a baseline. */
  readonly change: number | null
  readonly verdict: 'ok' | 'REGRESSION' | 'no baseline'
}

/** One row per measured workload; a workload the baseline lacks cannot regress but is reported. */
export function compareCounts(baseline: Baseline, measured: Readonly<Record<string, number>>, threshold = REGRESSION_THRESHOLD): CheckRow[] {
  return Object.entries(measured).map(([workload, count]) => {
    const base = baseline.counts[workload]
    if (base === undefined || !(base > 0)) return { workload, baseline: null, measured: count, change: null, verdict: 'no baseline' }
    const change = count / base - 1
    // Rounded to 1e-9 so that exactly the threshold (1,050,000 against 1,000,000) is not lost to binary fractions.
    return { workload, baseline: base, measured: count, change, verdict: Math.round(change * 1e9) / 1e9 > threshold ? 'REGRESSION' : 'ok' }
  })
}

export function failed(rows: readonly CheckRow[]): boolean {
  return rows.some((row) => row.verdict === 'REGRESSION')
}

/** The table --check prints. */
export function formatCheck(rows: readonly CheckRow[], threshold = REGRESSION_THRESHOLD): string {
  const lines = [`| workload | baseline | measured | change | verdict (fails above +${(threshold * 100).toFixed(0)} %) |`, '|---|---:|---:|---:|---|']
  for (const row of rows) {
    const change = row.change === null ? '' : `${row.change >= 0 ? '+' : ''}${(row.change * 100).toFixed(1)} %`
    lines.push(`| ${row.workload} | ${row.baseline?.toLocaleString('en-US') ?? ''} | ${row.measured.toLocaleString('en-US')} | ${change} | ${row.verdict} |`)
  }
  return lines.join('\n')
}

/** A baseline file's content, checked: throws on anything else. */
export function parseBaseline(text: string): Baseline {
  const value = JSON.parse(text) as Partial<Baseline>
  const counts = value.counts
  if (typeof value.node !== 'string' || typeof value.method !== 'string' || typeof counts !== 'object' || counts === null ||
    !Object.values(counts).every((n) => Number.isSafeInteger(n) && n > 0)) {
    throw new Error('the instruction baseline needs node, method and counts (positive integers by workload)')
  }
  return { node: value.node, method: value.method, counts }
}
