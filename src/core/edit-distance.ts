/**
 * The edit distance behind every "did you mean": insertions, deletions, substitutions and swaps of two
 * neighbouring characters (optimal string alignment), each one edit, since a swap is the commonest typo
 * (`porpose` for `propose`) and plain Levenshtein would count it twice.
 */
export function editDistance(a: string, b: string): number {
  // Three rows of the table: the one two above is needed for a swap.
  let before: number[] = []
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j)
  for (let i = 1; i <= a.length; i++) {
    const row = [i]
    for (let j = 1; j <= b.length; j++) {
      let best = Math.min((previous[j] as number) + 1, (row[j - 1] as number) + 1, (previous[j - 1] as number) + (a[i - 1] === b[j - 1] ? 0 : 1))
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) best = Math.min(best, (before[j - 2] as number) + 1)
      row[j] = best
    }
    before = previous
    previous = row
  }
  return previous[b.length] as number
}

/**
 * The candidates nearest to `word`: those at the smallest distance within `limit` edits, in the order
 * given; failing that, those `word` is a prefix of (at least two characters typed). Empty when nothing
 * is near.
 */
export function nearest(word: string, candidates: readonly string[], limit: number): string[] {
  let best = Infinity
  let found: string[] = []
  for (const candidate of candidates) {
    const distance = editDistance(word, candidate)
    if (distance > limit || distance > best) continue
    if (distance < best) {
      best = distance
      found = []
    }
    found.push(candidate)
  }
  if (found.length > 0 || word.length < 2) return found
  return candidates.filter((candidate) => candidate.startsWith(word))
}
