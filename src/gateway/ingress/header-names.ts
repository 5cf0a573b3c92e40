/**
 * Lower-case header names, remembered. Node hands every header name over as a new string on every
 * request, and the gateway looks each one up in several sets (hop-by-hop, its own headers, the
 * singletons). `toLowerCase` makes yet another new string, whose hash V8 then computes afresh for the
 * first of those lookups. A bounded map from the name as sent to its lower-case form returns the same
 * lower-case string every time, with its hash already known: one short hash per header instead of a
 * case conversion, an allocation and a hash.
 *
 * Bounded, so that a client sending random names cannot grow it: past the bound names are converted
 * as before, just not remembered.
 */
const MAX_NAMES = 1024
const MAX_NAME_LENGTH = 64
const lowerCaseOf = new Map<string, string>()

/** `name.toLowerCase()`, the same string for the same name. */
export function lowerHeaderName(name: string): string {
  let lower = lowerCaseOf.get(name)
  if (lower === undefined) {
    lower = name.toLowerCase()
    if (lowerCaseOf.size < MAX_NAMES && name.length <= MAX_NAME_LENGTH) lowerCaseOf.set(name, lower)
  }
  return lower
}
