/**
 * The project's JSON Schema plumbing, in one place: the ajv-formats interop and the loading of the
 * schemas shipped in `schemas/` (parsed once, deep-frozen, so no caller can alter a shared schema).
 */
import type { Ajv } from 'ajv'
import * as ajvFormatsModule from 'ajv-formats'
import { readFileSync } from 'node:fs'
import { deepFreeze } from './json-objects.js'
import { projectPath } from './paths.js'

/** ajv-formats ships CommonJS whose default export shape differs between loaders; this is the plugin. */
export const addFormats = ((ajvFormatsModule as unknown as { default: unknown }).default ??
  ajvFormatsModule) as unknown as (ajv: Ajv) => Ajv

/** Reads a schema from `schemas/<segments>`, parsed and frozen. */
export function loadSchema(...segments: string[]): Readonly<Record<string, unknown>> {
  return deepFreeze(JSON.parse(readFileSync(projectPath('schemas', ...segments), 'utf8')) as Record<string, unknown>)
}
