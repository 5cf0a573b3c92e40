import { existsSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

/**
 * The repository root, found by walking up from this module to the nearest package.json, so the same
 * code finds `schemas/`, `policies/` and the SQL migrations whether it runs from `src/` or `dist/src/`.
 */
function findRoot(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url))
  for (;;) {
    if (existsSync(path.join(dir, 'package.json'))) return dir
    const parent = path.dirname(dir)
    if (parent === dir) throw new Error('package.json not found above the service modules')
    dir = parent
  }
}

export const PROJECT_ROOT = findRoot()

export function projectPath(...segments: string[]): string {
  return path.join(PROJECT_ROOT, ...segments)
}
