/**
 * Instructions per proxied request, counted by valgrind's callgrind: deterministic enough to compare two
 * builds where a throughput run's noise hides a few percent, and to guard against regressions in CI.
 *
 *   node dist/bench/instructions.js [--only http,mcp-call,a2a-send] [--warmup 3000] [--phases 3] [--requests 1000]
 *     [--no-feed] [--context-store] [--check] [--update]      (BENCH_KEEP_DUMPS=1 keeps each phase's callgrind dump, for callgrind_annotate)
 *
 * Three workloads, each one process holding a gateway built with createGateway (embedded PDP, decision cache,
 * EM-STRICT, a real badge, logging at info into a discarding stream, the console's decision feed), a node:http
 * upstream and one keep-alive undici client sending requests one at a time: `http` a GET of a plain route,
 * `mcp-call` an MCP tools/call (bench/mcp.ts) on an MCP route, `a2a-send` an A2A message/send (bench/a2a.ts) on
 * an A2A route. Each runs once under callgrind (the appliance's node flags and `--single-threaded`, with a heap
 * schedule that follows allocation only: docs/performance.md, "Instructions per request"): uninstrumented (fast)
 * through `--warmup` requests, then instrumented through `--phases` × `--requests` requests, each phase ended by
 * a dump of its count. The total of the phases over their requests is one request (client, gateway and upstream
 * together), with neither start-up nor warm-up in it; the phases show how the count settles. Only libuv's poll
 * phase is counted (`--collect-atstart=no --toggle-collect=uv__io_poll`: the socket callbacks and the ticks and
 * microtasks they run, where every request's work happens): timers and immediates fire by wall clock (the log's
 * flush interval, undici's and node:http's timers), so a slower run would count more of them per request; the
 * dumps between phases run in an immediate, outside the count.
 * `--context-store` enters one AsyncLocalStorage store first (on Node 20 that hooks every promise after it).
 * `--check` compares with bench/instructions-baseline.json and exits 1 when any workload counts more than 5 %
 * above it; `--update` writes the measured counts there (on purpose: docs/performance.md says when).
 */
import { AsyncLocalStorage } from 'node:async_hooks'
import { spawnSync } from 'node:child_process'
import { generateKeyPairSync } from 'node:crypto'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import path from 'node:path'
import { Writable } from 'node:stream'
import { fileURLToPath } from 'node:url'
import { Pool } from 'undici'
import { loadConfig } from '../src/config/index.js'
import { NODE_FLAGS } from '../src/node-flags.js'
import { buildBadgeClaims, signBadge } from '../src/core/badge.js'
import { createEmbeddedPdp } from '../src/gateway/pdp/embedded-pdp.js'
import { createGateway } from '../src/gateway/server.js'
import { SnapshotHolder } from '../src/gateway/snapshot/snapshot.js'
import { RouteTable } from '../src/gateway/ingress/routes.js'
import { Upstream } from '../src/gateway/upstream/upstream.js'
import { createLogger } from '../src/telemetry/logger.js'
import { DecisionFeed, OverrideLog } from '../src/telemetry/decision-feed.js'
import { createMetrics } from '../src/telemetry/metrics.js'
import { A2A_PATH, a2aHeaders, answerA2a, messageSendBody } from './a2a.js'
import { compareCounts, failed, formatCheck, parseBaseline, REGRESSION_THRESHOLD } from './instructions-check.js'
import { answerMcp, BENCH_TOOL, MCP_PATH, mcpHeaders, toolsCallBody } from './mcp.js'

const WORKLOADS = ['http', 'mcp-call', 'a2a-send'] as const
type Workload = (typeof WORKLOADS)[number]
/** The baseline lives beside the source (this file runs from dist/bench/). */
const BASELINE = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'bench', 'instructions-baseline.json')
const SUBJECT = 'did:web:bench.example.com:agent'

function option(name: string, fallback: string): string {
  const at = process.argv.indexOf(name)
  return at === -1 ? fallback : (process.argv[at + 1] ?? fallback)
}

/** The request of a workload and what a correct answer is (the upstream's, not a refusal). */
function workloadRequest(workload: Workload, token: string): { method: 'GET' | 'POST'; path: string; headers: Record<string, string>; body?: string; expect: string | null } {
  if (workload === 'mcp-call') {
    const body = toolsCallBody(1)
    return { method: 'POST', path: MCP_PATH, headers: mcpHeaders(token), body, expect: answerMcp(Buffer.from(body)).body }
  }
  if (workload === 'a2a-send') {
    const body = messageSendBody(1)
    return { method: 'POST', path: A2A_PATH, headers: a2aHeaders(token), body, expect: answerA2a(Buffer.from(body)).body }
  }
  return { method: 'GET', path: '/bench/echo', headers: { authorization: `Bearer ${token}` }, expect: null }
}

/**
 * Sends `warmup` requests of `workload` through an in-process gateway, then `phases` × `perPhase`, each phase
 * ended by a callgrind dump whose total is written to stdout. Exits non-zero unless every answer is the
 * upstream's 200.
 */
async function drive(workload: Workload, warmup: number, phases: number, perPhase: number): Promise<void> {
  const body = '{"ok":true}'
  const upstreamServer = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', () => {
      const answer = req.url === MCP_PATH ? answerMcp(Buffer.concat(chunks)).body : req.url === A2A_PATH ? answerA2a(Buffer.concat(chunks)).body : body
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(answer) })
      res.end(answer)
    })
  })
  await new Promise<void>((resolve) => upstreamServer.listen(0, '127.0.0.1', resolve))
  const upstreamUrl = `http://127.0.0.1:${(upstreamServer.address() as AddressInfo).port}`
  const issuer = 'https://registry.bench'
  const key = generateKeyPairSync('ed25519')
  const now = Math.floor(Date.now() / 1000)
  const token = signBadge(buildBadgeClaims({
    jti: 'bench-jti', issuer, subject: SUBJECT, issuedAt: now - 10, expiresAt: now + 3600, ial: '1', level: '2', domain: 'bench.example.com',
  }), { kid: 'k1', privateKey: key.privateKey })
  const holder = new SnapshotHolder()
  holder.swap({
    issuer, keys: new Map([['k1', key.publicKey]]), keysVersion: 'k1', revoked: new Set(),
    bundle: {
      revision: 'r1',
      data: { config: {
        min_trust_level: null, allowed_dids: null, denied_dids: [], rate_limits: [], capability_classes: [],
        operations: [{ pattern: '* /admin/**', allowed_dids: [] }, { pattern: 'a2a.tasks.cancel', allowed_dids: [] }],
        mcp_tools: [{ tool: BENCH_TOOL, allowed_dids: [SUBJECT] }, { tool: 'tool_4*', allowed_dids: [] }],
      } },
      confirmedAt: Date.now(),
    },
  })
  const upstream = new Upstream(upstreamUrl, { timeoutMs: 5000 })
  const config = loadConfig({
    DATABASE_URL: 'memory://', CA_ISSUER_URL: issuer, SERVICE_UPSTREAM_URL: upstreamUrl, SERVICE_ENFORCEMENT_MODE: 'EM-STRICT',
    SERVICE_EMBEDDED_PDP: 'true', SERVICE_WORKSPACE: '6f1c2a4e-0d7b-4c3e-9a57-1b2c3d4e5f60',
    // Under callgrind on a loaded machine a run can outlast the default 5 minutes, when EM-STRICT would refuse.
    SERVICE_BUNDLE_STALENESS_THRESHOLD: '1h',
  }).gateway
  const gateway = createGateway({
    config, holder, pdp: createEmbeddedPdp(),
    routes: new RouteTable([
      { prefix: MCP_PATH, value: { upstream, mode: null, protocol: 'mcp' } },
      { prefix: A2A_PATH, value: { upstream, mode: null, protocol: 'a2a' } },
      { prefix: '/', value: { upstream, mode: null } },
    ]),
    breakglassKey: null,
    logger: createLogger('info', new Writable({ write: (_chunk, _encoding, done) => done() })), metrics: createMetrics().gateway,
    feed: process.argv.includes('--no-feed') ? null : { decisions: new DecisionFeed(1000), overrides: new OverrideLog() },
  })
  await new Promise<void>((resolve) => gateway.server.listen(0, '127.0.0.1', resolve))
  const client = new Pool(`http://127.0.0.1:${(gateway.server.address() as AddressInfo).port}`, { connections: 1 })
  const request = workloadRequest(workload, token)
  let ok = 0
  const total = warmup + phases * perPhase
  for (let i = 0; i < total; i++) {
    if (i >= warmup && (i - warmup) % perPhase === 0) await betweenPhases(i === warmup ? 'start' : 'dump')
    const res = await client.request({ path: request.path, method: request.method, headers: request.headers, ...(request.body === undefined ? {} : { body: request.body }) })
    const text = await res.body.text()
    if (res.statusCode === 200 && (request.expect === null || text === request.expect)) ok++
    else if (ok === i) console.error(`${workload}: request ${i} answered ${res.statusCode}: ${text.slice(0, 300)}`)
  }
  await betweenPhases('dump')
  await client.close()
  gateway.dispose()
  gateway.server.close()
  upstreamServer.close()
  await upstream.close()
  if (ok !== total) {
    console.error(`${workload}: only ${ok} of ${total} requests answered as the upstream does`)
    process.exit(1)
  }
}

/**
 * The flags the appliance runs with, plus a heap schedule that does not depend on wall-clock time: the young
 * generation fixed at its production size, a fixed old-generation growth factor, no memory reducer, and
 * collections started by allocation rather than by tasks whose turn depends on socket timing.
 */
const CHILD_FLAGS: readonly string[] = [
  ...NODE_FLAGS,
  '--single-threaded',
  '--expose-gc',
  ...NODE_FLAGS.filter((flag) => flag.startsWith('--max-semi-space-size=')).map((flag) => flag.replace('--max-', '--min-')),
  '--heap-growing-percent=30',
  '--no-memory-reducer',
  '--no-minor-gc-task',
  '--no-incremental-marking-task',
]

function callgrindControl(...args: string[]): void {
  const run = spawnSync('callgrind_control', [...args, String(process.pid)], { encoding: 'utf8' })
  if (run.status !== 0) throw new Error(`callgrind_control ${args.join(' ')} failed: ${run.stderr}`)
}

/**
 * Between two phases, in an immediate (outside the poll phase, so none of it is counted): the phase before is
 * dumped and its total printed. At 'start' instrumentation is switched on (the warm-up ran without it) and the
 * counters zeroed. No collection is forced: one between phases left sweeping and cleared feedback to the next
 * phase, several times the request's own cost (docs/performance.md). Outside callgrind (a plain `--child` run)
 * nothing happens.
 */
async function betweenPhases(at: 'start' | 'dump'): Promise<void> {
  await new Promise((resolve) => setImmediate(resolve))
  const outFile = option('--out-file', '')
  if (outFile !== '') {
    if (at === 'start') {
      callgrindControl('--instr=on')
      callgrindControl('--zero')
    } else {
      dumps++
      callgrindControl('--dump')
      const totals = /^(?:totals|summary): (\d+)/m.exec(readFileSync(`${outFile}.${dumps}`, 'utf8'))
      if (totals === null) throw new Error(`no total in callgrind dump ${dumps}`)
      process.stdout.write(`phase ${totals[1]}\n`)
    }
  }
}
let dumps = 0

/** One run under callgrind: the instruction total of each phase, from the child's stdout. */
function phaseTotals(workload: Workload, warmup: number, phases: number, perPhase: number): number[] {
  const dir = mkdtempSync(path.join(tmpdir(), 'bench-instructions-'))
  const outFile = path.join(dir, 'callgrind.out')
  try {
    const run = spawnSync('valgrind', [
      '--tool=callgrind', `--callgrind-out-file=${outFile}`, '--smc-check=all-non-file', '--instr-atstart=no', '--collect-atstart=no', '--toggle-collect=uv__io_poll',
      process.execPath, ...CHILD_FLAGS, fileURLToPath(import.meta.url), '--child', workload, '--warmup', String(warmup), '--phases', String(phases),
      '--requests', String(perPhase), '--out-file', outFile, ...(process.argv.includes('--no-feed') ? ['--no-feed'] : []),
      ...(process.argv.includes('--context-store') ? ['--context-store'] : []),
    ], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 64 * 1024 * 1024 })
    const totals = [...(run.stdout ?? '').matchAll(/^phase (\d+)$/gm)].map((m) => Number(m[1]))
    if (run.status !== 0 || totals.length !== phases) {
      throw new Error(`valgrind run of ${workload} failed (${run.error?.message ?? `exit ${String(run.status)}`}, ${totals.length} of ${phases} phases): ${(run.stderr ?? '').slice(-2000)}`)
    }
    return totals
  } finally {
    if (process.env.BENCH_KEEP_DUMPS === undefined) rmSync(dir, { recursive: true, force: true }); else console.log(`dumps kept in ${dir}`)
  }
}

if (process.argv.includes('--child')) {
  // What one AsyncLocalStorage store entered anywhere in the process costs the gateway (docs/performance.md).
  if (process.argv.includes('--context-store')) new AsyncLocalStorage().run({}, () => {})
  await drive(option('--child', 'http') as Workload, Number(option('--warmup', '0')), Number(option('--phases', '1')), Number(option('--requests', '1')))
} else {
  const warmup = Number(option('--warmup', '3000'))
  const phases = Number(option('--phases', '3'))
  const perPhase = Number(option('--requests', '1000'))
  const only = option('--only', WORKLOADS.join(',')).split(',')
  if (!only.every((w): w is Workload => (WORKLOADS as readonly string[]).includes(w))) throw new Error(`--only needs some of ${WORKLOADS.join(', ')}`)
  const feed = process.argv.includes('--no-feed') ? 'no decision feed' : 'decision feed'
  const method = `callgrind, --warmup ${warmup} uninstrumented, then --phases ${phases} of --requests ${perPhase} counted, poll phase only, ${feed}`
  const counts: Record<string, number> = {}
  for (const workload of only) {
    const totals = phaseTotals(workload, warmup, phases, perPhase)
    counts[workload] = Math.round(totals.reduce((sum, n) => sum + n, 0) / (phases * perPhase))
    console.log(`${workload}: ${counts[workload]} per request (client, gateway and upstream); by phase ${totals.map((n) => Math.round(n / perPhase)).join(', ')}`)
  }
  console.log(`${method}; node ${process.version}`)
  if (process.argv.includes('--update')) {
    writeFileSync(BASELINE, `${JSON.stringify({ node: process.version, method, counts }, null, 2)}\n`)
    console.log(`wrote ${path.relative(process.cwd(), BASELINE)}`)
  } else if (process.argv.includes('--check')) {
    const baseline = parseBaseline(readFileSync(BASELINE, 'utf8'))
    if (baseline.node !== process.version) console.log(`note: the baseline was counted on node ${baseline.node}, this is ${process.version}; a difference may be node's`)
    if (baseline.method !== method) console.log(`note: the baseline was counted with "${baseline.method}"`)
    const rows = compareCounts(baseline, counts)
    console.log(formatCheck(rows))
    if (failed(rows)) {
      console.log(`instruction count: a workload regressed by more than ${REGRESSION_THRESHOLD * 100} % (find the cost, or run with --update when it is worth it: docs/performance.md, "The instruction-count guard")`)
      process.exitCode = 1
    } else console.log('instruction count: no regression')
  }
}
