/**
 * Preload (`node --import`) for the MCP conformance CLI on Node 20: its bundle imports `globSync` from `fs`,
 * which Node adds only in 22, and ESM named imports of a builtin cannot be added at run time. The hook
 * gives the package alone a `fs` that has it (conformance-fs-shim.ts); nothing in node_modules is changed.
 */
import { register } from 'node:module'

register('./conformance-fs-hooks.js', import.meta.url)
