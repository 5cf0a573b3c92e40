#!/usr/bin/env -S node --max-semi-space-size=64
/**
 * The `agent-trust` command. Exit codes: 0 success, 1 runtime failure, 2 usage or configuration error.
 * `--help`, `-h` and `--version` are answered here, at the top level and for every subcommand, before
 * the modules of the commands (the whole appliance) are loaded.
 */
import { helpOrVersion, mistypedCommand, PROGRAM } from './usage.js'

const AGENT_SIDE = new Set(['agent', 'badge', 'token', 'envelope'])
const OPERATOR_SIDE = new Set(['whoami', 'orgs', 'agents', 'badges', 'policy'])

async function main(argv: string[]): Promise<number> {
  const answer = helpOrVersion(argv)
  if (answer !== null) {
    process.stdout.write(answer)
    return 0
  }
  // Before any configuration is read: a typo must not be reported as a configuration problem.
  const mistyped = mistypedCommand(argv)
  if (mistyped !== null) {
    process.stderr.write(mistyped)
    return 2
  }
  const command = argv[0] ?? 'serve'
  // The agent-side commands need no configuration or database, and report their own errors.
  if (AGENT_SIDE.has(command)) {
    const { runAgentCommand } = await import('./agent.js')
    return runAgentCommand(command, argv.slice(1))
  }
  // The operator commands are clients of a registry's API: no configuration or database either.
  if (OPERATOR_SIDE.has(command)) {
    const { runOperatorCommand } = await import('./operator.js')
    return runOperatorCommand(command, argv.slice(1))
  }
  const { runServiceCommand } = await import('./service-commands.js')
  return runServiceCommand(argv)
}

main(process.argv.slice(2)).then(
  (code) => {
    // -1: a server, which runs until a signal stops it.
    if (code < 0) return
    process.exitCode = code
    // A failed start may leave listeners or pools open; they must not keep a failed process alive.
    if (code !== 0) process.exit()
  },
  (error: unknown) => {
    process.stderr.write(`${PROGRAM}: ${error instanceof Error ? error.message : String(error)}\n`)
    process.exit(1)
  },
)
