/**
 * The compiled code next to these compiled helpers (dist/, or a private build directory): tests that
 * start the CLI or load a module in a child process find it here, wherever their own file lies.
 */
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'

/** The compiled src/ folder. */
export const COMPILED_SRC = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'src')

/** The compiled `agent-trust` command. */
export const CLI = path.join(COMPILED_SRC, 'cli', 'index.js')

/** The file URL of a compiled module of src/, for an `import` in a child process's script. */
export function compiledModuleUrl(...segments: string[]): string {
  return pathToFileURL(path.join(COMPILED_SRC, ...segments)).href
}
