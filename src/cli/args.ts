/**
 * Argument helpers shared by the `agent-trust` subcommands. Each consumes what it reads from `args`, so a
 * command can finish with `rejectLeftovers` and refuse anything it did not understand.
 */

/** A command line the user got wrong: the CLI prints the message and the usage, and exits 2. */
export class UsageError extends Error {
  readonly code = 'USAGE_INVALID'
  override readonly name = 'UsageError'
}

/** Removes `name` from `args`; whether it was there. */
export function flag(args: string[], name: string): boolean {
  const index = args.indexOf(name)
  if (index === -1) return false
  args.splice(index, 1)
  return true
}

/**
 * Removes `name value` from `args` and returns the value. A value that looks like another flag means it
 * was forgotten (`-` alone is allowed: it names standard input).
 */
export function option(args: string[], name: string): string | undefined {
  const index = args.indexOf(name)
  if (index === -1) return undefined
  const value = args[index + 1]
  if (value === undefined || (value.startsWith('--') && value !== '-')) throw new UsageError(`${name} needs a value`)
  args.splice(index, 2)
  return value
}

export function rejectLeftovers(args: string[]): void {
  if (args.length > 0) throw new UsageError(`unexpected arguments: ${args.join(' ')}`)
}
