// Blocks between `**` matched at their leftmost place, never backtracking (safe since a `**` follows every
// middle block); the work bounds are in docs/policy-limits.md, "How matching is bounded".

/** A pattern prepared once for matching; callers treat it as read-only. */
export interface SegmentGlob {
  readonly tokens: readonly string[]
  /** One block more than there are `**`. */
  readonly blocks: readonly (readonly string[])[]
  readonly minLength: number
}

/** Work done by matches, for tests and measurements: add to it by passing it to {@link globMatches}. */
export interface GlobWork {
  units: number
}

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
