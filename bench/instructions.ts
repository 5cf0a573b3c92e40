/**
 * Instructions per proxied request, counted by valgrind's callgrind: deterministic enough on this
 * machine to compare two builds where a throughput run's noise hides a few percent.
 *
 *   node dist/bench/instructions.js [--warmup 1000] [--small 1000] [--large 5000] [--path /bench/echo] [--no-feed]
 *
 * One process holds a gateway built with createGateway (embedded PDP, decision cache, EM-STRICT, a
 * real badge, logging at info into a discarding stream), a node:http upstream answering a fixed JSON
 * body, and one keep-alive undici client sending GET requests one at a time. The gateway records into the
 * console's decision feed as in the appliance; `--no-feed` leaves it out, to count what the feed costs. The process runs twice
 * under callgrind (the appliance's node flags and `--single-threaded`, with a heap schedule that does not
 * follow wall-clock allocation rates: docs/performance.md, "Instructions per request"), counting only after
 * `--warmup` requests, with `--small` and `--large` requests; the difference of the two totals divided by the
 * difference of the counts is the cost of one request (client, gateway and upstream together). Compare two builds by
 * running this in each checkout.
 */
import { spawnSync } from 'node:child_process'
import { generateKeyPairSync } from 'node:crypto'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
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

function option(name: string, fallback: string): string {
  const at = process.argv.indexOf(name)
  return at === -1 ? fallback : (process.argv[at + 1] ?? fallback)
}

/**
 * Sends `warmup` and then `count` requests through an in-process gateway, asking callgrind to zero its
 * counters in between, so start-up and warm-up are not counted; exits non-zero unless every one is a 200.
 */
async function drive(warmup: number, count: number, path: string): Promise<void> {
  const body = '{"ok":true}'
  const upstreamServer = createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length })
      res.end(body)
    })
  })
  await new Promise<void>((resolve) => upstreamServer.listen(0, '127.0.0.1', resolve))
  const upstreamUrl = `http://127.0.0.1:${(upstreamServer.address() as AddressInfo).port}`
  const issuer = 'https://registry.bench'
  const key = generateKeyPairSync('ed25519')
  const now = Math.floor(Date.now() / 1000)
  const token = signBadge(buildBadgeClaims({
    jti: 'bench-jti', issuer, subject: 'did:web:bench.example.com:agent', issuedAt: now - 10, expiresAt: now + 3600, ial: '1', level: '2', domain: 'bench.example.com',
  }), { kid: 'k1', privateKey: key.privateKey })
  const holder = new SnapshotHolder()
  holder.swap({
    issuer, keys: new Map([['k1', key.publicKey]]), keysVersion: 'k1', revoked: new Set(),
    bundle: {
      revision: 'r1',
      data: { config: { min_trust_level: null, allowed_dids: null, denied_dids: [], rate_limits: [], operations: [{ pattern: '* /admin/**', allowed_dids: [] }], mcp_tools: [], capability_classes: [] } },
      confirmedAt: Date.now(),
    },
  })
  const upstream = new Upstream(upstreamUrl, { timeoutMs: 5000 })
  const config = loadConfig({
    DATABASE_URL: 'memory://', CA_ISSUER_URL: issuer, SERVICE_UPSTREAM_URL: upstreamUrl, SERVICE_ENFORCEMENT_MODE: 'EM-STRICT',
    SERVICE_EMBEDDED_PDP: 'true', SERVICE_WORKSPACE: '6f1c2a4e-0d7b-4c3e-9a57-1b2c3d4e5f60',
  }).gateway
  const gateway = createGateway({
    config, holder, pdp: createEmbeddedPdp(), routes: new RouteTable([{ prefix: '/', value: { upstream, mode: null } }]), breakglassKey: null,
    logger: createLogger('info', new Writable({ write: (_chunk, _encoding, done) => done() })), metrics: createMetrics().gateway,
    feed: process.argv.includes('--no-feed') ? null : { decisions: new DecisionFeed(1000), overrides: new OverrideLog() },
  })
  await new Promise<void>((resolve) => gateway.server.listen(0, '127.0.0.1', resolve))
  const client = new Pool(`http://127.0.0.1:${(gateway.server.address() as AddressInfo).port}`, { connections: 1 })
  let ok = 0
  for (let i = 0; i < warmup + count; i++) {
    if (i === warmup) zeroCounters()
    const res = await client.request({ path, method: 'GET', headers: { authorization: `Bearer ${token}` } })
    await res.body.text()
    if (res.statusCode === 200) ok++
  }
  await client.close()
  gateway.dispose()
  gateway.server.close()
  upstreamServer.close()
  await upstream.close()
  if (ok !== warmup + count) {
    console.error(`only ${ok} of ${warmup + count} requests answered 200`)
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
  ...NODE_FLAGS.filter((flag) => flag.startsWith('--max-semi-space-size=')).map((flag) => flag.replace('--max-', '--min-')),
  '--heap-growing-percent=30',
  '--no-memory-reducer',
  '--no-minor-gc-task',
  '--no-incremental-marking-task',
]

/** Outside callgrind (a plain `--child` run) there is nothing to zero. */
function zeroCounters(): void {
  if (!process.argv.includes('--under-callgrind')) return
  const run = spawnSync('callgrind_control', ['--zero', String(process.pid)], { encoding: 'utf8' })
  if (run.status !== 0) throw new Error(`callgrind_control --zero failed: ${run.stderr}`)
}

/** One run under callgrind; valgrind's summary on stderr carries the `Collected` instruction total. */
function collected(warmup: number, count: number, path: string): number {
  const run = spawnSync('valgrind', [
    '--tool=callgrind', '--callgrind-out-file=/dev/null', '--smc-check=all-non-file',
    process.execPath, ...CHILD_FLAGS, fileURLToPath(import.meta.url), '--child', String(count), '--warmup', String(warmup), '--path', path, '--under-callgrind',
    ...(process.argv.includes('--no-feed') ? ['--no-feed'] : []),
  ], { encoding: 'utf8', stdio: ['ignore', 'ignore', 'pipe'], maxBuffer: 64 * 1024 * 1024 })
  const total = /Collected : (\d+)/.exec(run.stderr ?? '')
  if (run.status !== 0 || total === null) throw new Error(`valgrind run of ${count} requests failed (${run.error?.message ?? `exit ${String(run.status)}`}): ${(run.stderr ?? '').slice(-2000)}`)
  return Number(total[1])
}

if (process.argv.includes('--child')) {
  await drive(Number(option('--warmup', '0')), Number(option('--child', '1')), option('--path', '/bench/echo'))
} else {
  const warmup = Number(option('--warmup', '1000'))
  const small = Number(option('--small', '1000'))
  const large = Number(option('--large', '5000'))
  const path = option('--path', '/bench/echo')
  const low = collected(warmup, small, path)
  const high = collected(warmup, large, path)
  const perRequest = Math.round((high - low) / (large - small))
  const feed = process.argv.includes('--no-feed') ? 'no decision feed' : 'decision feed'
  console.log(`callgrind, GET ${path} through an in-process gateway (embedded PDP, decision cache, ${feed}), counted after ${warmup} warm-up requests: ${small} requests ${low} instructions, ${large} requests ${high}`)
  console.log(`instructions per request (client, gateway and upstream): ${perRequest}`)
}
