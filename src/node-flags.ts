/**
 * Node (V8) flags the appliance and the gateway-only process are meant to run with. They must be given
 * when node starts (V8 sizes its heap then; `v8.setFlagsFromString` later has no effect on it), so they
 * are written out wherever this project starts the process: the `agent-trust` command's shebang
 * (src/cli/index.ts), `npm start`, the Dockerfile's ENTRYPOINT and the benchmarks (bench/appliance.ts).
 * test/unit/deploy-artifacts.test.ts holds those places to this list; main.ts warns at start when the
 * process runs without them.
 *
 * --max-semi-space-size=64 (MiB; node 20's default is 16): every proxied request leaves short-lived
 * garbage, and with the default young generation requests in flight across two scavenges were promoted
 * until mark-compacts stalled the event loop under steady load; the larger young generation keeps them
 * out, at the cost of memory. The measurements: docs/performance.md, "Node flags".
 */
export const NODE_FLAGS: readonly string[] = ['--max-semi-space-size=64']

/**
 * NODE_OPTIONS split as node splits it: at spaces, except inside double quotes, where a backslash
 * escapes the next character (tools such as tap's process-info hook write every option quoted).
 */
function nodeOptions(value: string): string[] {
  const options: string[] = []
  for (const match of value.matchAll(/"((?:\\.|[^"\\])*)"|(\S+)/g)) {
    options.push(match[1] !== undefined ? match[1].replace(/\\(.)/g, '$1') : (match[2] as string))
  }
  return options
}

/**
 * Whether this process was started with `flag`, on the command line or in NODE_OPTIONS; another value
 * of the same flag counts (the operator chose it).
 */
export function startedWith(flag: string): boolean {
  const name = flag.split('=')[0] as string
  const given = [...process.execArgv, ...nodeOptions(process.env.NODE_OPTIONS ?? '')]
  return given.some((arg) => arg === name || arg.startsWith(`${name}=`))
}
