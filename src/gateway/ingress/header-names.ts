// The same lower-case string per name, its hash already known, instead of a new string per header per
// request; bounded, so a client sending random names cannot grow it.
const MAX_NAMES = 1024
const MAX_NAME_LENGTH = 64
const lowerCaseOf = new Map<string, string>()

export function lowerHeaderName(name: string): string {
  let lower = lowerCaseOf.get(name)
  if (lower === undefined) {
    lower = name.toLowerCase()
    if (lowerCaseOf.size < MAX_NAMES && name.length <= MAX_NAME_LENGTH) lowerCaseOf.set(name, lower)
  }
  return lower
}
