/**
 * Badge authority throughput on real PostgreSQL: IAL-0 issuance, IAL-1 issuance at the OAuth token
 * endpoint (client_credentials with a private_key_jwt assertion per request) and verification over HTTP,
 * against the admin plane's own floor (GET /healthz on the same process), in one run; plus the in-process
 * verifier.
 *
 *   npm run bench:badges            (BENCH_DURATION=10 seconds per phase, BENCH_CONNECTIONS=32)
 *   BENCH_AUDIT=compare npm run bench:badges   runs with SERVICE_AUDIT=false and true, interleaved
 *                                   off, on, on, off (BENCH_ROUNDS=2 such pairs of runs), and the cost of
 *                                   the audit trail per phase from the medians (default: `on` only; `off`)
 *   BENCH_AUDIT=write npm run bench:badges     the admin write alone, paired: an appliance with the trail and
 *                                   one without run at once, BENCH_PAIRS=10 pairs of BENCH_WRITE_SECONDS=3 s
 *                                   one-connection runs of PUT /v1/agents/{id} alternate between them
 *   BENCH_CPU_PROF=dir              each appliance writes a V8 CPU profile into dir/audit-on or dir/audit-off
 *
 * An admin write that is not batched (PUT /v1/agents/{id}, one transaction per request) is measured beside
 * the batched IAL-0 issuance, under load and at one connection (its mean latency, 1/req/s): the audit trail
 * adds a pending record to each write's transaction.
 * The appliance runs as a child process (as in production), so the load generator does not share its
 * event loop. The per-key limit is raised for the run (a load test is one key); the per-agent issuance
 * limit (100/min, docs/api.md §8) is kept, so issuance is spread over enough agents. The token endpoint's
 * per-DID limit (10 per 5 minutes) is kept too: its phase stops after 10 badges per agent key, and the
 * assertions are signed by the load generator as each request is built (one Ed25519 signature each).
 */
import autocannon from 'autocannon'
import { spawn, type ChildProcess } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import pg from 'pg'
import { performance } from 'node:perf_hooks'
import { generateApiKeySecret } from '../src/core/api-key.js'
import { generateAgentKey, type AgentKey } from '../src/sdk/keys.js'
import { buildClientAssertion, CLIENT_ASSERTION_TYPE } from '../src/sdk/oauth.js'
import { verifyBadge } from '../src/core/badge.js'
import { loadOrCreateKeyFile } from '../src/authority/key-ring.js'
import { projectPath } from '../src/core/paths.js'

const DATABASE_URL = process.env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test'
const DURATION = Number(process.env.BENCH_DURATION ?? 10)
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 32)
const AGENTS = Number(process.env.BENCH_AGENTS ?? 500)
const ISSUER = 'http://bench.local'
const RESOURCE = 'https://gateway.bench.local/mcp'
// The token endpoint's per-DID limit (src/authority/client-credentials.ts).
const TOKENS_PER_AGENT = 10
const AUDIT = process.env.BENCH_AUDIT ?? 'on'
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 2)
/** BENCH_CPU_PROF=dir: each appliance writes a V8 CPU profile there when it stops (audit-on/, audit-off/). */
const PROFILE_DIR = process.env.BENCH_CPU_PROF

interface Phase {
  name: string
  rps: number
  p50: number
  p99: number
  non2xx: number
  errors: number
}

async function run(name: string, options: autocannon.Options): Promise<Phase> {
  const result = await autocannon({ duration: DURATION, connections: CONNECTIONS, pipelining: 1, ...options })
  return {
    name,
    rps: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    non2xx: result.non2xx,
    errors: result.errors + result.timeouts,
  }
}

/** Reads the bound address from the appliance's "admin plane listening" log line (it binds port 0). */
function listeningUrl(child: ChildProcess): Promise<string> {
  return new Promise((resolve, reject) => {
    let out = ''
    const timer = setTimeout(() => reject(new Error('appliance did not start within 60 s')), 60_000)
    child.stdout?.on('data', (chunk: Buffer) => {
      out += chunk.toString()
      const match = /"url":"(http:\/\/127\.0\.0\.1:\d+)".*"msg":"admin plane listening"/.exec(out)
      if (match !== null) {
        clearTimeout(timer)
        child.stdout?.removeAllListeners('data')
        child.stdout?.resume()
        resolve(match[1] as string)
      }
    })
    child.once('exit', (code) => reject(new Error(`appliance exited with ${String(code)}`)))
  })
}

interface Appliance {
  readonly base: string
  readonly headers: Record<string, string>
  readonly agentIds: readonly string[]
  readonly keys: readonly AgentKey[]
  readonly dataDir: string
  /** A client on the bench's database, for counting rows in `schema`. */
  readonly admin: pg.Client
  readonly schema: string
  stop(): Promise<void>
}

/** An appliance in its own schema, with AGENTS agents of each kind registered and the bench resource allowed. */
async function startAppliance(audit: boolean): Promise<Appliance> {
  const schema = `bench_${randomBytes(4).toString('hex')}`
  const admin = new pg.Client({ connectionString: DATABASE_URL })
  await admin.connect()
  await admin.query(`CREATE SCHEMA ${schema}`)
  const url = new URL(DATABASE_URL)
  url.searchParams.set('options', `-c search_path=${schema}`)
  const key = generateApiKeySecret()
  const dataDir = mkdtempSync(path.join(tmpdir(), 'bench-badges-'))
  const child = spawn(process.execPath, [...(PROFILE_DIR === undefined ? [] : ['--cpu-prof', `--cpu-prof-dir=${path.join(PROFILE_DIR, audit ? 'audit-on' : 'audit-off')}`]), projectPath('dist', 'src', 'cli', 'index.js'), 'serve'], {
    env: {
      PATH: process.env.PATH,
      PORT: '0',
      SERVICE_HOST: '127.0.0.1',
      DATABASE_URL: url.toString(),
      SERVICE_BOOTSTRAP_API_KEY: key,
      SERVICE_DATA_DIR: dataDir,
      SERVICE_LOG_LEVEL: 'info',
      SERVICE_RATE_LIMIT_PER_MINUTE: '1000000',
      CA_ISSUER_URL: ISSUER,
      SERVICE_AUDIT: audit ? 'true' : 'false',
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  const exited = new Promise((resolve) => child.once('exit', resolve))
  const stop = async (): Promise<void> => {
    child.kill('SIGTERM')
    await exited
    await admin.query(`DROP SCHEMA ${schema} CASCADE`)
    await admin.end()
  }
  try {
    const base = await listeningUrl(child)
    const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' }
    const agentIds: string[] = []
    for (let i = 0; i < AGENTS; i++) {
      const res = await fetch(`${base}/v1/agents`, { method: 'POST', headers, body: JSON.stringify({ name: `bench-${i}`, domain: 'bench.example.com' }) })
      agentIds.push(((await res.json()) as { data: { id: string } }).data.id)
    }
    const keys: AgentKey[] = []
    for (let i = 0; i < AGENTS; i++) {
      const agentKey = generateAgentKey()
      const res = await fetch(`${base}/v1/agents`, { method: 'POST', headers, body: JSON.stringify({ name: `bench-key-${i}`, did: agentKey.did }) })
      if (res.status !== 201) throw new Error(`registering a keyed agent failed: ${res.status}`)
      keys.push(agentKey)
    }
    const allowed = await fetch(`${base}/v1/token-audiences`, { method: 'PUT', headers, body: JSON.stringify({ audiences: [RESOURCE] }) })
    if (allowed.status !== 200) throw new Error(`allowing the bench resource failed: ${allowed.status}`)
    return { base, headers, agentIds, keys, dataDir, admin, schema, stop }
  } catch (error) {
    await stop()
    throw error
  }
}

/** PUT /v1/agents/{id} with a new description each time, over the appliance's agents. */
function agentUpdateRequest(appliance: Appliance): autocannon.Request {
  let next = 0
  return {
    method: 'PUT',
    headers: appliance.headers,
    setupRequest: (req: autocannon.Request) => {
      const n = next++
      return { ...req, path: `/v1/agents/${appliance.agentIds[n % appliance.agentIds.length]}`, body: JSON.stringify({ description: `update ${n}` }) }
    },
  }
}

async function suite(audit: boolean): Promise<Phase[]> {
  const appliance = await startAppliance(audit)
  const { base, headers, agentIds, keys, dataDir, admin, schema } = appliance
  try {
    const sample = await fetch(`${base}/v1/agents/${agentIds[0]}/badge`, { method: 'POST', headers, body: JSON.stringify({ domain: 'bench.example.com' }) })
    const token = ((await sample.json()) as { data: { token: string } }).data.token

    const floor = await run('GET /healthz (floor)', { url: `${base}/healthz` })
    let next = 0
    const issuance = await run('POST /v1/agents/{id}/badge', {
      url: base,
      requests: [{
        method: 'POST',
        headers,
        body: JSON.stringify({ domain: 'bench.example.com' }),
        setupRequest: (req: autocannon.Request) => ({ ...req, path: `/v1/agents/${agentIds[next++ % agentIds.length]}/badge` }),
      }],
    })
    const agentUpdate = agentUpdateRequest(appliance)
    const update = await run('PUT /v1/agents/{id}', { url: base, requests: [agentUpdate] })
    const updateAlone = await run('PUT /v1/agents/{id}, one connection', { url: base, connections: 1, requests: [agentUpdate] })
    let nextKey = 0
    const tokens = await run('POST /oauth/token (IAL-1)', {
      url: `${base}/oauth/token`,
      amount: AGENTS * TOKENS_PER_AGENT,
      requests: [{
        method: 'POST',
        headers: { 'content-type': 'application/x-www-form-urlencoded' },
        setupRequest: (req: autocannon.Request) => {
          const agentKey = keys[nextKey++ % keys.length] as AgentKey
          const assertion = buildClientAssertion({ clientId: agentKey.did, audience: ISSUER, privateKey: agentKey.privateKey, kid: agentKey.kid })
          const form = new URLSearchParams({
            grant_type: 'client_credentials', client_assertion_type: CLIENT_ASSERTION_TYPE, client_assertion: assertion, resource: RESOURCE,
          })
          return { ...req, body: form.toString() }
        },
      }],
    })
    const verification = await run('POST /v1/badges/verify', {
      url: `${base}/v1/badges/verify`,
      method: 'POST',
      headers,
      body: JSON.stringify({ token }),
    })

    // The verifier alone, in this process: what the gateway's badge stage costs before caching.
    const ring = await loadOrCreateKeyFile(path.join(dataDir, 'ca-keys.json'))
    const iterations = 20_000
    const start = performance.now()
    for (let i = 0; i < iterations; i++) {
      if (!verifyBadge(token, { keys: ring.verificationKeys, issuer: ISSUER, now: Math.floor(Date.now() / 1000) }).valid) throw new Error('bench token did not verify')
    }
    const verifyPerSecond = iterations / ((performance.now() - start) / 1000)

    const rows = [floor, issuance, update, updateAlone, tokens, verification]
    process.stdout.write(`\nbadge authority benchmark, audit trail ${audit ? 'on' : 'off'}: ${DURATION}s per phase (the token phase at most ${AGENTS * TOKENS_PER_AGENT} requests), ${CONNECTIONS} connections, PostgreSQL, ${AGENTS} agents of each kind\n\n`)
    process.stdout.write('| phase | req/s | p50 ms | p99 ms | non-2xx | errors | ratio to floor |\n|---|---:|---:|---:|---:|---:|---:|\n')
    for (const r of rows) {
      process.stdout.write(`| ${r.name} | ${r.rps.toFixed(0)} | ${r.p50} | ${r.p99} | ${r.non2xx} | ${r.errors} | ${(r.rps / floor.rps).toFixed(2)} |\n`)
    }
    process.stdout.write(`\nin-process verifyBadge: ${verifyPerSecond.toFixed(0)} verifications/s (one core)\n`)
    const badges = await admin.query(`SELECT count(*)::int AS n FROM ${schema}.badges`)
    process.stdout.write(`badges recorded: ${badges.rows[0].n}\n`)
    if (audit) {
      // Chained off the request path: what is still pending a moment after the load stopped.
      await new Promise((resolve) => setTimeout(resolve, 2000))
      const trail = await admin.query(`SELECT (SELECT count(*)::int FROM ${schema}.audit_records) AS chained, (SELECT count(*)::int FROM ${schema}.audit_pending) AS pending, (SELECT count(*)::int FROM ${schema}.audit_checkpoints) AS checkpoints`)
      process.stdout.write(`audit records chained: ${trail.rows[0].chained}, pending: ${trail.rows[0].pending}, checkpoints: ${trail.rows[0].checkpoints}\n`)
    }
    return rows
  } finally {
    await appliance.stop()
  }
}

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = sorted.length >> 1
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2
}

/**
 * The admin write's latency with and without the trail, paired: both appliances run at once (the idle one
 * waits on its event loop), and short one-connection runs of PUT /v1/agents/{id} alternate between them
 * (off, on, on, off, …), so a drift of the machine falls on both alike. Prints each pair and the median.
 */
async function pairedWrites(): Promise<void> {
  const pairs = Number(process.env.BENCH_PAIRS ?? 10)
  const seconds = Number(process.env.BENCH_WRITE_SECONDS ?? 3)
  const off = await startAppliance(false)
  const on = await startAppliance(true).catch(async (error: unknown) => { await off.stop(); throw error })
  try {
    const requests = new Map([[off, agentUpdateRequest(off)], [on, agentUpdateRequest(on)]])
    const meanMs = async (appliance: Appliance): Promise<number> => {
      const result = await autocannon({ url: appliance.base, connections: 1, pipelining: 1, duration: seconds, requests: [requests.get(appliance)!] })
      if (result.non2xx + result.errors + result.timeouts > 0) throw new Error('an update failed')
      return (seconds * 1000) / result.requests.total
    }
    await meanMs(off)
    await meanMs(on)
    process.stdout.write(`\nPUT /v1/agents/{id}, one connection, ${seconds}s runs alternating between an appliance with SERVICE_AUDIT=false and one with true\n\n| pair | off ms | on ms | on / off |\n|---:|---:|---:|---:|\n`)
    const ratios: number[] = []
    const offs: number[] = []
    const ons: number[] = []
    for (let i = 0; i < pairs; i++) {
      const [first, second] = i % 2 === 0 ? [off, on] : [on, off]
      const a = await meanMs(first)
      const b = await meanMs(second)
      const [offMs, onMs] = first === off ? [a, b] : [b, a]
      offs.push(offMs)
      ons.push(onMs)
      ratios.push(onMs / offMs)
      process.stdout.write(`| ${i + 1} | ${offMs.toFixed(3)} | ${onMs.toFixed(3)} | ${(onMs / offMs).toFixed(3)} |\n`)
    }
    process.stdout.write(`\nmedian: off ${median(offs).toFixed(3)} ms, on ${median(ons).toFixed(3)} ms, on / off ${median(ratios).toFixed(3)} (per pair ${Math.min(...ratios).toFixed(3)}-${Math.max(...ratios).toFixed(3)})\n`)
    // The admin plane's own measure of the request (Fastify's elapsed time), over every run: what the client's time holds besides.
    const serverMs = async (appliance: Appliance): Promise<string> => {
      const text = await (await fetch(`${appliance.base}/metrics`)).text()
      const value = (suffix: string): number => Number(new RegExp(`^service_admin_request_duration_seconds_${suffix}\\{method="PUT",route="/v1/agents/:id"\\} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN)
      return ((value('sum') / value('count')) * 1000).toFixed(3)
    }
    process.stdout.write(`mean time inside the admin plane (its request histogram): off ${await serverMs(off)} ms, on ${await serverMs(on)} ms\n`)
  } finally {
    await on.stop()
    await off.stop()
  }
}

async function main(): Promise<void> {
  if (AUDIT === 'write') {
    await pairedWrites()
    return
  }
  if (AUDIT !== 'compare') {
    await suite(AUDIT !== 'off')
    return
  }
  // ABBA order, so that a drift of the machine over the runs falls on both sides alike.
  const runs: { audit: boolean; rows: Phase[] }[] = []
  for (let round = 0; round < ROUNDS; round++) {
    for (const audit of round % 2 === 0 ? [false, true] : [true, false]) runs.push({ audit, rows: await suite(audit) })
  }
  const of = (audit: boolean, i: number): number[] => runs.filter((r) => r.audit === audit).map((r) => r.rows[i]!.rps)
  const floorOff = median(of(false, 0))
  const floorOn = median(of(true, 0))
  process.stdout.write(`\n${runs.length} runs (off, on, on, off, …); medians\n\n| phase | audit off req/s | audit on req/s | per run, off | per run, on | throughput change | change against the floor of the same runs |\n|---|---:|---:|---|---|---:|---:|\n`)
  runs[0]!.rows.forEach((phase, i) => {
    const off = median(of(false, i))
    const on = median(of(true, i))
    const relative = i === 0 ? '' : `${((((on / floorOn) / (off / floorOff)) - 1) * 100).toFixed(1)} %`
    process.stdout.write(`| ${phase.name} | ${off.toFixed(0)} | ${on.toFixed(0)} | ${of(false, i).map((n) => n.toFixed(0)).join(' ')} | ${of(true, i).map((n) => n.toFixed(0)).join(' ')} | ${(((on - off) / off) * 100).toFixed(1)} % | ${relative} |\n`)
  })
  const alone = runs[0]!.rows.findIndex((phase) => phase.name.endsWith('one connection'))
  process.stdout.write(`\nPUT /v1/agents/{id} at one connection, mean latency: audit off ${(1000 / median(of(false, alone))).toFixed(2)} ms, on ${(1000 / median(of(true, alone))).toFixed(2)} ms\n`)
}

main().catch((error: unknown) => {
  process.stderr.write(`bench failed: ${error instanceof Error ? error.message : String(error)}\n`)
  process.exitCode = 1
})
