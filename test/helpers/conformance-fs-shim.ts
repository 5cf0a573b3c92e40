// `fs` as the conformance package sees it on Node 20: all of it, and `globSync` where Node lacks one.
import fs from 'node:fs'

export * from 'node:fs'
export default fs

type GlobSync = (pattern: string | readonly string[], options?: { cwd?: string }) => string[]

/**
 * Node 22's `fs.globSync` when there is one; on Node 20 an empty list. The package uses it only to gather
 * earlier result files for its tier report, which the server scenarios never read.
 */
export const globSync: GlobSync = (fs as unknown as { globSync?: GlobSync }).globSync ?? (() => [])
