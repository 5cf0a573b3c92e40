/**
 * Segment-wise glob matching for operation patterns: `*` matches exactly one segment (any text, the empty
 * segment included), `**` any number of segments including none, anything else matches itself exactly.
 *
 * A pattern is cut at its `**` tokens into blocks of fixed width. The first block must match the start of
 * the target and the last block its end; each block in between is searched for at its leftmost position
 * after the previous one. Leftmost is always safe because a `**` follows every middle block, so a match
 * further left never leaves less room for what comes after.
 *
 * Work, counted in units of one segment comparison or one start position tried, for a target of n
 * segments and a pattern of p tokens: at most p with at most one `**` (there is nothing to search for,
 * so the path's length does not matter); at most `(n + 2) × (p + 1)` with several `**`, none directly
 * after another (search starts never repeat and each costs at most one block's width); at most
 * `(n + 1 + k) × (p + 1) + p` for any k `**`. Nothing backtracks and no n × p table is built.
 */

/** A pattern prepared once for matching; callers treat it as read-only. */
export interface SegmentGlob {
  /** The pattern's tokens, `*` and `**` included. */
  readonly tokens: readonly string[]
  /** The tokens between the `**` tokens: one block more than there are `**`. */
  readonly blocks: readonly (readonly string[])[]
  /** The fewest target segments that can match: every token but the `**` takes one. */
  readonly minLength: number
}

/** Work done by matches, for tests and measurements: add to it by passing it to {@link globMatches}. */
export interface GlobWork {
  units: number
}

/** Prepares a token list for {@link globMatches}. */
export function compileSegmentGlob(tokens: readonly string[]): SegmentGlob {
  const blocks: string[][] = [[]]
  for (const token of tokens) {
    if (token === '**') blocks.push([])
    else (blocks[blocks.length - 1] as string[]).push(token)
  }
  return { tokens, blocks, minLength: tokens.length - (blocks.length - 1) }
}

// Units spent by the current match; module state instead of a parameter keeps the inner loop small.
let spent = 0

function blockMatchesAt(block: readonly string[], target: readonly string[], start: number): boolean {
  for (let i = 0; i < block.length; i++) {
    spent++
    const token = block[i] as string
    if (token !== '*' && token !== target[start + i]) return false
  }
  return true
}

function matches(glob: SegmentGlob, target: readonly string[]): boolean {
  const n = target.length
  if (n < glob.minLength) return false
  const blocks = glob.blocks
  const first = blocks[0] as readonly string[]
  if (blocks.length === 1) return n === first.length && blockMatchesAt(first, target, 0)
  const last = blocks[blocks.length - 1] as readonly string[]
  const end = n - last.length
  if (!blockMatchesAt(first, target, 0) || !blockMatchesAt(last, target, end)) return false
  let from = first.length
  for (let b = 1; b < blocks.length - 1; b++) {
    const block = blocks[b] as readonly string[]
    const lastStart = end - block.length
    let at = from
    for (;;) {
      if (at > lastStart) return false
      spent++
      if (blockMatchesAt(block, target, at)) break
      at++
    }
    from = at + block.length
  }
  return true
}

/** Whether `target` (already split into segments) matches the glob; `work`, when given, is added to. */
export function globMatches(glob: SegmentGlob, target: readonly string[], work?: GlobWork): boolean {
  spent = 0
  const result = matches(glob, target)
  if (work !== undefined) work.units += spent
  return result
}
