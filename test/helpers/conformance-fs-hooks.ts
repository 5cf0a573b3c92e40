// Module resolution hooks of conformance-preload.ts: `fs` imported from the conformance package is the shim.
const SHIM = new URL('./conformance-fs-shim.js', import.meta.url).href
const PACKAGE = '/node_modules/@modelcontextprotocol/conformance/'

interface ResolveContext {
  readonly parentURL?: string
}
type NextResolve = (specifier: string, context: ResolveContext) => Promise<{ url: string }>

/** Node's `resolve` hook (node:module `register`). */
export async function resolve(specifier: string, context: ResolveContext, next: NextResolve): Promise<{ url: string; shortCircuit?: boolean }> {
  if ((specifier === 'fs' || specifier === 'node:fs') && context.parentURL?.includes(PACKAGE) === true) return { url: SHIM, shortCircuit: true }
  return next(specifier, context)
}
