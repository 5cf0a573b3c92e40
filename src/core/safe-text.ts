// PostgreSQL cannot store U+0000, and a lone surrogate cannot become UTF-8 without silent replacement:
// input holding either is refused before it reaches SQL.

// With the `u` flag a paired surrogate is one code point outside this class; only lone halves match.
const UNSAFE = /[\u0000\ud800-\udfff]/u

export function isSafeText(value: string): boolean {
  return !UNSAFE.test(value)
}

/** Schema marker for a field that its own parser checks (a token or JWS), skipped by the text check. */
export const VERBATIM = 'x-verbatim'

const MAX_DEPTH = 64

// The pointer goes into the error message, so an unsafe key is shown with U+FFFD in its place.
function pointer(path: string, key: string | number): string {
  return `${path}/${String(key).replace(/[\u0000\ud800-\udfff]/gu, '\ufffd').replace(/~/g, '~0').replace(/\//g, '~1')}`
}

export interface UnsafeText {
  /** JSON pointer of the offending value or key. */
  readonly path: string
  readonly reason: 'unsafe_text' | 'too_deep'
}

function subschema(schema: unknown, key: string | number): unknown {
  if (typeof schema !== 'object' || schema === null) return undefined
  const s = schema as { properties?: Record<string, unknown>; items?: unknown }
  if (typeof key === 'number') return s.items
  return s.properties?.[key]
}

/** Keys too; `schema` marks {@link VERBATIM} fields to skip. Past 64 levels is refused: the walk stays bounded. */
export function findUnsafeText(value: unknown, schema?: unknown, path = '', depth = 0): UnsafeText | null {
  if (typeof schema === 'object' && schema !== null && (schema as Record<string, unknown>)[VERBATIM] === true) return null
  if (typeof value === 'string') return isSafeText(value) ? null : { path: path === '' ? '/' : path, reason: 'unsafe_text' }
  if (typeof value !== 'object' || value === null) return null
  if (depth > MAX_DEPTH) return { path, reason: 'too_deep' }
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = findUnsafeText(value[i], subschema(schema, i), pointer(path, i), depth + 1)
      if (found !== null) return found
    }
    return null
  }
  for (const [key, item] of Object.entries(value)) {
    if (!isSafeText(key)) return { path: pointer(path, key), reason: 'unsafe_text' }
    const found = findUnsafeText(item, subschema(schema, key), pointer(path, key), depth + 1)
    if (found !== null) return found
  }
  return null
}

/** The first `max` UTF-16 units of `value`, one fewer when the cut would split a surrogate pair. */
export function truncateText(value: string, max: number): string {
  if (value.length <= max) return value
  const code = value.charCodeAt(max - 1)
  return value.slice(0, code >= 0xd800 && code <= 0xdbff ? max - 1 : max)
}
