/**
 * Node (V8) flags the appliance and the gateway-only process are meant to run with. They must be given
 * when node starts (V8 sizes its heap then; `v8.setFlagsFromString` later has no effect on it), so they
 * are written out wherever this project starts the process: the `agent-trust` command's shebang
 * (src/cli/index.ts), `npm start`, the Dockerfile's ENTRYPOINT and the benchmarks (bench/appliance.ts).
 * test/unit/deploy-artifacts.test.ts holds those places to this list; main.ts warns at start when the
 * process runs without them.
 *
 * --max-semi-space-size=64 (MiB; node 20's default is 16): every proxied request allocates 15-20 KB
 * that dies within the request (node:http, undici, the gateway's own objects), so at 12,500 req/s the
 * default young generation was scavenged every ~50 ms, and whatever was in flight at two scavenges in
 * a row was promoted. That garbage filled the old generation (~33 MB of live appliance state) to its
 * limit every 4-9 s, and each mark-compact, its helper threads competing for the cores the traffic
 * also needs, held the event loop 10-20 ms; requests queued behind it and were still catching up well
 * after. With the larger young generation, scavenges run every 130-230 ms, far less is promoted, and
 * 25 s at that load saw no mark-compact. The gateway's p99 at equal load in three 5-s phases: 23.5,
 * 24.0 and 29.0 ms with the default, 5.1, 5.5 and 13.7 ms with this (README, "Gateway benchmark").
 * The cost is memory: V8 reports a young generation of 64 MiB instead of 32 once it has grown.
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
