const UNIT_MS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 } as const

/**
 * Parses the duration syntax of docs/wire-contract.md §13 (`500ms`, `30s`, `5m`, `1h`) into milliseconds.
 * Returns undefined for anything else, including zero, fractions and combined units.
 */
export function parseDuration(text: string): number | undefined {
  const match = /^(\d{1,9})(ms|s|m|h)$/.exec(text.trim())
  if (match === null) return undefined
  const value = Number(match[1]) * UNIT_MS[match[2] as keyof typeof UNIT_MS]
  return value > 0 ? value : undefined
}
