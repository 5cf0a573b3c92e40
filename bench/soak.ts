/**
 * Soak: a long mixed load on one appliance, reporting memory and latency per interval (issue 7: "a
 * 10-minute mixed load script … that records heap after GC, event-loop delay p99 and latency per minute;
 * memory and latency stay flat; bounded caches stay bounded with a million distinct DIDs").
 *
 *   npm run bench:soak -- [--duration 600] [--interval 60] [--rate 500] [--connections 10]
 *                         [--did-rate 1000] [--dids 1000000] [--admin-rate 25] [--admin-same-org] [--json]
 *
 * One appliance (`service serve`, PostgreSQL in a throw-away schema, the embedded PDP, EM-GUARD,
 * self-signed badges accepted, log level info to a file) in front of an upstream child process. Three
 * loads run at the same time for --duration seconds:
 *  - gateway: autocannon at a fixed overall rate (--rate) with the org agent's authority badge, the path
 *    cycling through 1,000 values (decision-cache hits) with every 10th request a new path (evaluated);
 *  - distinct DIDs: a worker thread mints a fresh Ed25519 key, its did:key and a self-signed badge for
 *    every request (--did-rate per second, up to --dids in all), so each request brings a DID the
 *    gateway has never seen: a badge-cache miss, a signature verification, a policy evaluation and a new
 *    entry in both bounded caches (50,000 entries each by default);
 *  - admin plane: --admin-rate operations per second in iterations of five (create agent, issue badge,
 *    verify badge, read agent, policy simulate), in a second org unless --admin-same-org (see
 *    adminIteration: agents created in the workspace org change its bundle and empty the decision cache).
 *
 * Memory and event-loop figures come from the appliance's own /metrics (prom-client default metrics,
 * `service_` prefix), scraped every 5 s. The appliance cannot be asked to collect garbage from outside,
 * so "heap after GC" is approximated by the minimum of the heap-used samples within each interval (the
 * samples between collections only add garbage on top of the live set). Event-loop delay p99 is
 * prom-client's monitorEventLoopDelay histogram, reset at every scrape; the interval figure is the
 * largest of its 5-s p99 values.
 *
 * Verdict (the first interval is warm-up: the caches fill, the JIT settles): heap-used minimum of the
 * last interval within +20 % of the second interval's, gateway p99 of the last interval within 1.5× of
 * the second's, RSS maximum of the last interval within +20 % of the second's, and no failed request.
 */
import autocannon from 'autocannon'
import { spawn } from 'node:child_process'
import { generateKeyPairSync, randomBytes, randomUUID, sign } from 'node:crypto'
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, statSync, truncateSync } from 'node:fs'
import { loadavg, tmpdir } from 'node:os'
import path from 'node:path'
import { performance } from 'node:perf_hooks'
import { fileURLToPath } from 'node:url'
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads'
import pg from 'pg'
import { Pool } from 'undici'
import { generateApiKeySecret } from '../src/core/api-key.js'
import { buildBadgeClaims } from '../src/core/badge.js'
import { didKeyVerificationMethodId, encodeDidKey } from '../src/core/did-key.js'
import { children, spawnWithUrl, track, type Child } from './children.js'
import { runUpstream, UPSTREAM_BODY } from './upstream.js'

const HERE = path.dirname(fileURLToPath(import.meta.url))
/** The compiled CLI of the same build as this file (dist/, or a private build directory). */
const CLI = path.join(HERE, '..', 'src', 'cli', 'index.js')
const DATABASE_URL = process.env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test'
const ISSUER = 'http://bench.local'

// Verdict thresholds (last interval against the second).
const MAX_HEAP_GROWTH = 0.2
const MAX_P99_RATIO = 1.5
const MAX_RSS_GROWTH = 0.2
// The gateway's cache bounds (src/gateway/badge-stage.ts, decision-cache.ts defaults): past this many
// distinct DIDs both caches evict.
const CACHE_BOUND = 50_000
// Log file kept below this size: at info level the gateway writes a line per request (~1 GB in ten minutes).
const MAX_LOG_BYTES = 256 * 1024 * 1024

// --- upstream role: bench/upstream.ts, started as a child of this file with `--role upstream` ----------

// --- distinct-DID role: a worker thread -------------------------------------------------------------

interface DidDriverData {
  role: 'dids'
  url: string
  rate: number
  max: number
}

/** What the DID worker posts once a second; counters are cumulative, latencies since the last report. */
interface DidReport {
  minted: number
  ok: number
  non2xx: number
  errors: number
  latencies: Float64Array
  failure: string | null
  done: boolean
}

/**
 * A self-signed level-0 badge for a brand-new Ed25519 key: the did:key is the public key, so every call
 * yields a DID nobody has seen. Same token shape as signSelfSignedBadge (src/core/self-signed-badge.ts),
 * without its JWK round trip: the SPKI DER of an Ed25519 key ends with the 32 raw key bytes.
 */
function mintFreshBadge(now: number): string {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519')
  const spki = publicKey.export({ type: 'spki', format: 'der' })
  const did = encodeDidKey(spki.subarray(spki.length - 32))
  const claims = buildBadgeClaims({ jti: randomUUID(), issuer: did, subject: did, issuedAt: now, expiresAt: now + 3600, ial: '0', level: '0', domain: '' })
  const header = { alg: 'EdDSA', typ: 'JWT', kid: didKeyVerificationMethodId(did) }
  const input = `${Buffer.from(JSON.stringify(header)).toString('base64url')}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}`
  return `${input}.${sign(null, Buffer.from(input, 'ascii'), privateKey).toString('base64url')}`
}

async function runDidDriver(data: DidDriverData): Promise<void> {
  const port = parentPort
  if (port === null) throw new Error('the DID driver runs in a worker thread')
  const MAX_IN_FLIGHT = 32
  const pool = new Pool(data.url, { connections: 16, pipelining: 1 })
  let minted = 0
  let ok = 0
  let non2xx = 0
  let errors = 0
  let failure: string | null = null
  let latencies: number[] = []
  let inFlight = 0
  let stopping = false
  port.on('message', (message) => {
    if (message === 'stop') stopping = true
  })
  const report = (done: boolean): void => {
    const out: DidReport = { minted, ok, non2xx, errors, latencies: Float64Array.from(latencies), failure, done }
    latencies = []
    port.postMessage(out, [out.latencies.buffer as ArrayBuffer])
  }
  const timer = setInterval(() => report(false), 1000)
  const send = async (token: string, n: number): Promise<void> => {
    const started = performance.now()
    try {
      // Ten paths: the decision is new because the DID is, not because the path is.
      const res = await pool.request({ method: 'GET', path: `/open/item/${n % 10}`, headers: { 'x-service-badge': token, accept: 'application/json' } })
      const text = await res.body.text()
      if (res.statusCode === 200) {
        ok++
        latencies.push(performance.now() - started)
      } else {
        non2xx++
        failure ??= `self-signed request answered ${res.statusCode}: ${text.slice(0, 300)}`
      }
    } catch (error) {
      errors++
      failure ??= `self-signed request failed: ${error instanceof Error ? error.message : String(error)}`
    } finally {
      inFlight--
    }
  }
  const started = performance.now()
  while (!stopping && minted < data.max) {
    const due = Math.min(data.max, Math.floor(((performance.now() - started) / 1000) * data.rate))
    // Small batches: minting blocks this thread, and responses waiting behind it would count as latency.
    const n = Math.min(due - minted, MAX_IN_FLIGHT - inFlight, 8)
    if (n <= 0) {
      await sleep(2)
      continue
    }
    const now = Math.floor(Date.now() / 1000)
    for (let i = 0; i < n; i++) {
      const token = mintFreshBadge(now)
      inFlight++
      void send(token, minted++)
    }
    // Let the responses in before minting more.
    await new Promise((resolve) => setImmediate(resolve))
  }
  while (inFlight > 0) await sleep(5)
  clearInterval(timer)
  report(true)
  await pool.close()
}

// --- options -------------------------------------------------------------------------------------------

interface Options {
  duration: number
  interval: number
  rate: number
  connections: number
  didRate: number
  dids: number
  adminRate: number
  adminSameOrg: boolean
  json: boolean
}

function parseOptions(argv: string[]): Options {
  // Defaults sized for a 2-core machine running everything (appliance, upstream, load, PostgreSQL): the
  // target of 1,000,000 DIDs in ten minutes (1,667/s) saturates the gateway there; raise --did-rate on
  // a larger machine.
  const options: Options = { duration: 600, interval: 60, rate: 500, connections: 10, didRate: 1000, dids: 1_000_000, adminRate: 25, adminSameOrg: false, json: false }
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]
    const value = (): number => {
      const n = Number(argv[++i])
      if (!Number.isFinite(n) || n < 0) throw new Error(`${arg} needs a number ≥ 0`)
      return n
    }
    if (arg === '--duration') options.duration = value()
    else if (arg === '--interval') options.interval = value()
    else if (arg === '--rate') options.rate = Math.max(1, Math.floor(value()))
    else if (arg === '--connections') options.connections = Math.max(1, Math.floor(value()))
    else if (arg === '--did-rate') options.didRate = value()
    else if (arg === '--dids') options.dids = Math.floor(value())
    else if (arg === '--admin-rate') options.adminRate = value()
    else if (arg === '--admin-same-org') options.adminSameOrg = true
    else if (arg === '--json') options.json = true
    else throw new Error(`unknown argument ${String(arg)}`)
  }
  if (options.duration <= 0 || options.interval <= 0) throw new Error('--duration and --interval must be positive')
  return options
}

// --- child processes: bench/children.ts -----------------------------------------------------------------

interface Appliance {
  readonly child: Child
  readonly adminUrl: string
  readonly gatewayUrl: string
}

/**
 * Starts `service serve` with stdout (the JSON log) appended to a file: a pipe into this process would
 * make the load generator pay for every log line, and append mode lets the file be truncated under the
 * running process. Waits for both listeners and for /readyz.
 */
async function startAppliance(env: Record<string, string>, logFile: string): Promise<Appliance> {
  truncateSync(logFile, 0)
  const fd = openSync(logFile, 'a')
  const proc = spawn(process.execPath, [CLI, 'serve'], {
    env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env },
    stdio: ['ignore', fd, 'inherit'],
  })
  closeSync(fd)
  const child = track(proc)
  children.add(child)
  const deadline = Date.now() + 60_000
  let adminUrl: string | null = null
  let gatewayUrl: string | null = null
  while (adminUrl === null || gatewayUrl === null) {
    if (proc.exitCode !== null) throw new Error(`appliance exited with ${proc.exitCode}:\n${readFileSync(logFile, 'utf8').slice(-2000)}`)
    if (Date.now() > deadline) throw new Error(`appliance did not start within 60 s:\n${readFileSync(logFile, 'utf8').slice(-2000)}`)
    await sleep(100)
    const out = readFileSync(logFile, 'utf8')
    adminUrl = /"url":"(http:\/\/[^"]+)"[^\n]*"msg":"admin plane listening"/.exec(out)?.[1] ?? null
    gatewayUrl = /"url":"(http:\/\/[^"]+)"[^\n]*"msg":"gateway listening"/.exec(out)?.[1] ?? null
  }
  for (;;) {
    const res = await fetch(`${adminUrl}/readyz`).catch(() => null)
    if (res !== null) await res.arrayBuffer()
    if (res?.status === 200) break
    if (Date.now() > deadline) throw new Error('appliance not ready within 60 s')
    await sleep(100)
  }
  return { child, adminUrl, gatewayUrl }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

// --- admin API -----------------------------------------------------------------------------------------

async function call(base: string, key: string, method: string, urlPath: string, body?: unknown): Promise<any> {
  const res = await fetch(`${base}${urlPath}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  })
  const text = await res.text()
  if (res.status >= 300) throw new Error(`${method} ${urlPath}: ${res.status} ${text.slice(0, 500)}`)
  return text === '' ? undefined : JSON.parse(text)
}

interface World {
  orgId: string
  orgKey: string
  did: string
  token: string
  /** Where the admin loop writes: another org by default (see adminIteration). */
  adminOrgId: string
  adminOrgKey: string
}

/**
 * An organization with one agent, its badge and an approved org policy: GET /bench/** for that agent
 * only, GET /open/** for anyone at level SS or above (the self-signed DIDs), and a few rules that deny,
 * so the embedded PDP walks real rules and the checks can prove it enforces them.
 */
async function createWorld(adminUrl: string, operatorKey: string, adminSameOrg: boolean): Promise<World> {
  const org = await call(adminUrl, operatorKey, 'POST', '/v1/orgs', { name: 'soak' })
  const orgId = org.data.org.id as string
  const key = org.data.apiKey.key as string
  const agent = await call(adminUrl, key, 'POST', '/v1/agents', { name: 'soak-agent', domain: 'soak.example.com' })
  const badge = await call(adminUrl, key, 'POST', `/v1/agents/${agent.data.id as string}/badge`, { domain: 'soak.example.com', ttl: 3600 })
  const did = badge.data.subject as string
  const yaml = [
    'version: "1"',
    'denied_dids: ["did:web:blocked.example.com", "did:web:revoked.example.org"]',
    'operations:',
    '  - pattern: "GET /bench/**"',
    `    allowed_dids: ["${did}"]`,
    '  - pattern: "GET /open/**"',
    '    min_trust_level: SS',
    '  - pattern: "DELETE /**"',
    '    min_trust_level: EV',
    '  - pattern: "* /admin/**"',
    '    min_trust_level: EV',
    '',
  ].join('\n')
  const proposal = await call(adminUrl, key, 'POST', `/v1/orgs/${orgId}/policy/org`, { yaml_content: yaml })
  await call(adminUrl, key, 'POST', `/v1/orgs/${orgId}/policy/proposals/${proposal.id as string}/approve`)
  let adminOrgId = orgId
  let adminOrgKey = key
  if (!adminSameOrg) {
    const other = await call(adminUrl, operatorKey, 'POST', '/v1/orgs', { name: 'soak-admin' })
    adminOrgId = other.data.org.id as string
    adminOrgKey = other.data.apiKey.key as string
  }
  return { orgId, orgKey: key, did, token: badge.data.token as string, adminOrgId, adminOrgKey }
}

/**
 * One admin iteration: five operations; each one's latency (ms) goes to `record`. Throws on a non-2xx.
 * By default it writes to an org other than the gateway's workspace: the workspace bundle lists every
 * agent of its org, so creating agents there changes the bundle revision a few times a second, which
 * empties the gateway's decision cache each time and grows the bundle with every agent — state that
 * legitimately grows, which would hide a leak (--admin-same-org measures that mix instead).
 */
async function adminIteration(adminUrl: string, world: World, n: number, record: (ms: number) => void): Promise<void> {
  const timed = async (method: string, urlPath: string, body?: unknown): Promise<any> => {
    const started = performance.now()
    const result = await call(adminUrl, world.adminOrgKey, method, urlPath, body)
    record(performance.now() - started)
    return result
  }
  const agent = await timed('POST', '/v1/agents', { name: `soak-${n}`, domain: 'soak.example.com' })
  const id = agent.data.id as string
  const badge = await timed('POST', `/v1/agents/${id}/badge`, { domain: 'soak.example.com', ttl: 3600 })
  const verified = await timed('POST', '/v1/badges/verify', { token: badge.data.token })
  if (!JSON.stringify(verified).includes('"valid":true')) throw new Error(`badge verify answered ${JSON.stringify(verified).slice(0, 300)}`)
  await timed('GET', `/v1/agents/${id}`)
  await timed('POST', `/v1/orgs/${world.adminOrgId}/policy/agents/${id}/simulate`, { action: { operation: `GET /bench/item/${n}` } })
}

// --- appliance metrics ---------------------------------------------------------------------------------

interface Scrape {
  at: number
  heapUsed: number
  rss: number
  lagP99: number
  lagMax: number
  /** Cumulative service_gateway_cache_lookups_total by `${cache}:${result}`. */
  lookups: Record<string, number>
}

async function scrape(adminUrl: string): Promise<Scrape> {
  const res = await fetch(`${adminUrl}/metrics`)
  const text = await res.text()
  if (res.status !== 200) throw new Error(`/metrics answered ${res.status}`)
  const values = new Map<string, number>()
  const lookups: Record<string, number> = {}
  for (const line of text.split('\n')) {
    if (line.startsWith('#') || line === '') continue
    const space = line.lastIndexOf(' ')
    const name = line.slice(0, space)
    const value = Number(line.slice(space + 1))
    if (name.startsWith('service_gateway_cache_lookups_total{')) {
      const cache = /cache="([^"]+)"/.exec(name)?.[1]
      const result = /result="([^"]+)"/.exec(name)?.[1]
      if (cache !== undefined && result !== undefined) lookups[`${cache}:${result}`] = value
    } else {
      values.set(name, value)
    }
  }
  const need = (name: string): number => {
    const value = values.get(name)
    if (value === undefined || !Number.isFinite(value)) throw new Error(`/metrics has no ${name}`)
    return value
  }
  return {
    at: Date.now(),
    heapUsed: need('service_nodejs_heap_size_used_bytes'),
    rss: need('service_process_resident_memory_bytes'),
    lagP99: need('service_nodejs_eventloop_lag_p99_seconds'),
    lagMax: need('service_nodejs_eventloop_lag_max_seconds'),
    lookups,
  }
}

// --- per-interval accounting ---------------------------------------------------------------------------

/** Growable Float64Array of latencies (ms). */
class Samples {
  #data = new Float64Array(1 << 12)
  #length = 0
  get length(): number {
    return this.#length
  }
  push(value: number): void {
    if (this.#length === this.#data.length) {
      const next = new Float64Array(this.#data.length * 2)
      next.set(this.#data)
      this.#data = next
    }
    this.#data[this.#length++] = value
  }
  percentile(p: number): number {
    const sorted = this.#data.subarray(0, this.#length).sort()
    if (sorted.length === 0) return NaN
    return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] as number
  }
}

interface Bucket {
  gateway: Samples
  gatewayFailed: number
  dids: Samples
  didFailed: number
  admin: Samples
  adminFailed: number
  scrapes: Scrape[]
  /** Distinct DIDs minted and sent by the end of the interval. */
  didsSoFar: number
}

interface Row {
  interval: number
  /** End of the interval, seconds since the load started. */
  end_s: number
  gateway_rps: number
  gateway_p50_ms: number
  gateway_p99_ms: number
  gateway_failed: number
  did_rps: number
  did_p99_ms: number
  did_failed: number
  admin_ops: number
  admin_p99_ms: number
  admin_failed: number
  heap_min_mb: number
  heap_max_mb: number
  lag_p99_ms: number
  lag_max_ms: number
  rss_max_mb: number
  distinct_dids: number
  badge_cache: { hit: number; miss: number }
  decision_cache: { hit: number; miss: number }
}

const MB = 1024 * 1024

function toRow(index: number, bucket: Bucket, seconds: number, end: number, previous: Scrape | null): Row {
  const last = bucket.scrapes.at(-1) ?? null
  const delta = (key: string): number => (last === null ? 0 : (last.lookups[key] ?? 0) - (previous?.lookups[key] ?? 0))
  const heaps = bucket.scrapes.map((s) => s.heapUsed)
  return {
    interval: index + 1,
    end_s: end,
    gateway_rps: bucket.gateway.length / seconds,
    gateway_p50_ms: bucket.gateway.percentile(50),
    gateway_p99_ms: bucket.gateway.percentile(99),
    gateway_failed: bucket.gatewayFailed,
    did_rps: bucket.dids.length / seconds,
    did_p99_ms: bucket.dids.percentile(99),
    did_failed: bucket.didFailed,
    admin_ops: bucket.admin.length / seconds,
    admin_p99_ms: bucket.admin.percentile(99),
    admin_failed: bucket.adminFailed,
    heap_min_mb: heaps.length === 0 ? NaN : Math.min(...heaps) / MB,
    heap_max_mb: heaps.length === 0 ? NaN : Math.max(...heaps) / MB,
    lag_p99_ms: bucket.scrapes.length === 0 ? NaN : Math.max(...bucket.scrapes.map((s) => s.lagP99)) * 1000,
    lag_max_ms: bucket.scrapes.length === 0 ? NaN : Math.max(...bucket.scrapes.map((s) => s.lagMax)) * 1000,
    rss_max_mb: bucket.scrapes.length === 0 ? NaN : Math.max(...bucket.scrapes.map((s) => s.rss)) / MB,
    distinct_dids: bucket.didsSoFar,
    badge_cache: { hit: delta('badge:hit'), miss: delta('badge:miss') },
    decision_cache: { hit: delta('decision:hit'), miss: delta('decision:miss') },
  }
}

const f1 = (n: number): string => (Number.isFinite(n) ? n.toFixed(1) : '-')
const f2 = (n: number): string => (Number.isFinite(n) ? n.toFixed(2) : '-')
const f0 = (n: number): string => (Number.isFinite(n) ? n.toFixed(0) : '-')

function rowLine(r: Row): string {
  return `[${String(r.interval).padStart(2)} @${String(r.end_s).padStart(4)}s] gateway ${f0(r.gateway_rps)} req/s p50 ${f2(r.gateway_p50_ms)} p99 ${f2(r.gateway_p99_ms)} ms` +
    ` | new DIDs ${f0(r.did_rps)}/s p99 ${f2(r.did_p99_ms)} ms | admin ${f1(r.admin_ops)} ops/s p99 ${f1(r.admin_p99_ms)} ms` +
    ` | heap ${f1(r.heap_min_mb)}-${f1(r.heap_max_mb)} MB | lag p99 ${f1(r.lag_p99_ms)} ms | RSS ${f0(r.rss_max_mb)} MB` +
    ` | DIDs ${r.distinct_dids} | badge cache ${r.badge_cache.hit}/${r.badge_cache.miss} decision ${r.decision_cache.hit}/${r.decision_cache.miss} (hit/miss)` +
    (r.gateway_failed + r.did_failed + r.admin_failed > 0 ? ` | FAILED gateway ${r.gateway_failed} did ${r.did_failed} admin ${r.admin_failed}` : '')
}

// --- checks before loading -----------------------------------------------------------------------------

async function expectStatus(what: string, url: string, init: RequestInit, status: number): Promise<string> {
  const res = await fetch(url, init)
  const text = await res.text()
  if (res.status !== status) throw new Error(`${what}: ${init.method ?? 'GET'} ${url} answered ${res.status}, expected ${status}: ${text.slice(0, 300)}`)
  return text
}

async function checkEverything(upstreamUrl: string, appliance: Appliance, world: World): Promise<void> {
  const headers = { 'x-service-badge': world.token, accept: 'application/json' }
  const direct = await expectStatus('upstream', `${upstreamUrl}/bench/item/1`, {}, 200)
  if (direct !== UPSTREAM_BODY) throw new Error('upstream answered an unexpected body')
  // The badge stage ran: the upstream saw the verified subject.
  const echo = JSON.parse(await expectStatus('gateway, authority badge', `${appliance.gatewayUrl}/bench/echo`, { headers }, 200)) as { headers: Record<string, string> }
  if (echo.headers['x-service-subject'] !== world.did) throw new Error(`upstream saw X-Service-Subject ${String(echo.headers['x-service-subject'])}, expected ${world.did}`)
  const proxied = await expectStatus('gateway, authority badge', `${appliance.gatewayUrl}/bench/item/1`, { headers }, 200)
  if (proxied !== UPSTREAM_BODY) throw new Error('gateway answered an unexpected body')
  await expectStatus('gateway, no badge', `${appliance.gatewayUrl}/bench/item/1`, {}, 401)
  // The policy is enforced (EM-GUARD): these are DENY decisions.
  await expectStatus('gateway, DELETE below EV', `${appliance.gatewayUrl}/bench/item/1`, { method: 'DELETE', headers }, 403)
  const now = Math.floor(Date.now() / 1000)
  const selfSigned = { 'x-service-badge': mintFreshBadge(now), accept: 'application/json' }
  await expectStatus('gateway, self-signed badge on /open', `${appliance.gatewayUrl}/open/item/1`, { headers: selfSigned }, 200)
  await expectStatus('gateway, self-signed badge outside its allow list', `${appliance.gatewayUrl}/bench/item/1`, { headers: selfSigned }, 403)
  await adminIteration(appliance.adminUrl, world, -1, () => {})
  const metrics = await scrape(appliance.adminUrl)
  if ((metrics.lookups['badge:miss'] ?? 0) === 0 || (metrics.lookups['decision:miss'] ?? 0) === 0) {
    throw new Error(`/metrics shows no badge or decision cache lookups: ${JSON.stringify(metrics.lookups)}`)
  }
}

// --- main ----------------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const options = parseOptions(process.argv.slice(2))
  const log = (text: string): void => {
    if (!options.json) process.stderr.write(`${text}\n`)
  }
  const work = mkdtempSync(path.join(tmpdir(), 'bench-soak-'))
  const logFile = path.join(work, 'appliance.log')
  closeSync(openSync(logFile, 'w'))
  const schema = `bench_soak_${randomBytes(4).toString('hex')}`
  const db = new pg.Client({ connectionString: DATABASE_URL })
  await db.connect()
  await db.query(`CREATE SCHEMA ${schema}`)
  const dbUrl = new URL(DATABASE_URL)
  dbUrl.searchParams.set('options', `-c search_path=${schema}`)
  const operatorKey = generateApiKeySecret()
  let worker: Worker | null = null
  let instance: autocannon.Instance | null = null
  let adminTimer: NodeJS.Timeout | null = null
  let scraping = true
  // Rejected when the run must stop early (too many failures, /metrics gone); raced with the load.
  let abortRun: (error: unknown) => void = () => {}
  const aborted = new Promise<never>((_resolve, reject) => { abortRun = reject })
  aborted.catch(() => {})
  try {
    const upstream = await spawnWithUrl([fileURLToPath(import.meta.url), '--role', 'upstream'], { PATH: process.env.PATH }, 'upstream listening')
    const baseEnv: Record<string, string> = {
      PORT: '0',
      SERVICE_GATEWAY_PORT: '0',
      SERVICE_HOST: '127.0.0.1',
      DATABASE_URL: dbUrl.toString(),
      SERVICE_DATA_DIR: path.join(work, 'data'),
      SERVICE_BOOTSTRAP_API_KEY: operatorKey,
      SERVICE_LOG_LEVEL: 'info',
      // One key drives the admin loop for the whole run.
      SERVICE_RATE_LIMIT_PER_MINUTE: '1000000',
      CA_ISSUER_URL: ISSUER,
      SERVICE_UPSTREAM_URL: upstream.url,
    }
    // The embedded PDP needs its workspace id at start: create the world through a first appliance on
    // the same schema, then start the one under test.
    const setup = await startAppliance(baseEnv, logFile)
    const world = await createWorld(setup.adminUrl, operatorKey, options.adminSameOrg)
    await setup.child.stop()
    children.delete(setup.child)
    const appliance = await startAppliance({
      ...baseEnv,
      SERVICE_EMBEDDED_PDP: 'true',
      SERVICE_WORKSPACE: world.orgId,
      SERVICE_ENFORCEMENT_MODE: 'EM-GUARD',
      SERVICE_ACCEPT_SELF_SIGNED: 'true',
    }, logFile)
    await checkEverything(upstream.url, appliance, world)
    const applianceExit = appliance.child.exited.then((code) => {
      throw new Error(`the appliance exited with ${String(code)} during the run:\n${readFileSync(logFile, 'utf8').slice(-2000)}`)
    })
    applianceExit.catch(() => {})

    const intervals = Math.max(1, Math.ceil(options.duration / options.interval))
    const buckets: Bucket[] = Array.from({ length: intervals }, () => ({
      gateway: new Samples(), gatewayFailed: 0, dids: new Samples(), didFailed: 0, admin: new Samples(), adminFailed: 0, scrapes: [], didsSoFar: 0,
    }))
    const loadStart = Date.now()
    const bucketAt = (t: number): Bucket => buckets[Math.min(intervals - 1, Math.max(0, Math.floor((t - loadStart) / (options.interval * 1000))))] as Bucket
    log(`soak: ${options.duration}s, one line per ${options.interval}s; gateway ${options.rate} req/s over ${options.connections} connections; ` +
      `new DIDs ${options.didRate}/s up to ${options.dids}; admin ${options.adminRate} ops/s (${options.adminSameOrg ? 'in the workspace org' : 'in another org'}); load average ${loadavg().map((v) => v.toFixed(2)).join(' ')}`)
    log('heap = min-max of heap used sampled every 5 s (the min approximates heap after GC); lag = largest 5-s event-loop delay p99; cache = hit/miss in the interval')

    // Gateway load: the org agent's badge, 1,000 cycling paths (cached decisions) and every 10th a new one.
    let n = 0
    instance = autocannon({
      url: appliance.gatewayUrl,
      connections: options.connections,
      pipelining: 1,
      duration: options.duration,
      overallRate: options.rate,
      requests: [{
        method: 'GET',
        headers: { 'x-service-badge': world.token, accept: 'application/json' },
        setupRequest: (req: autocannon.Request) => {
          const i = n++
          return { ...req, path: i % 10 === 0 ? `/bench/new/${i.toString(36)}` : `/bench/item/${i % 1000}` }
        },
      }],
    }, () => {})
    let gatewayFailure: string | null = null
    instance.on('response', (_client, statusCode, _bytes, responseTime) => {
      const bucket = bucketAt(Date.now())
      if (statusCode === 200) bucket.gateway.push(responseTime)
      else {
        bucket.gatewayFailed++
        gatewayFailure ??= `gateway answered ${statusCode}`
      }
    })
    instance.on('reqError', (error) => {
      bucketAt(Date.now()).gatewayFailed++
      gatewayFailure ??= `gateway request failed: ${String((error as Error).message)}`
    })
    const gatewayDone = new Promise<void>((resolve) => instance?.on('done', () => resolve()))

    // Distinct DIDs, minted and sent by a worker thread so that the signing does not stall autocannon.
    let didsSoFar = 0
    let didFailure: string | null = null
    let didDone: () => void = () => {}
    const didFinished = new Promise<void>((resolve) => { didDone = resolve })
    let lastDid = { ok: 0, non2xx: 0, errors: 0 }
    if (options.didRate > 0 && options.dids > 0) {
      worker = new Worker(fileURLToPath(import.meta.url), { workerData: { role: 'dids', url: appliance.gatewayUrl, rate: options.didRate, max: options.dids } satisfies DidDriverData })
      worker.on('message', (report: DidReport) => {
        const bucket = bucketAt(Date.now())
        for (const ms of report.latencies) bucket.dids.push(ms)
        bucket.didFailed += report.non2xx - lastDid.non2xx + report.errors - lastDid.errors
        lastDid = report
        didsSoFar = report.minted
        didFailure ??= report.failure
        if (report.done) didDone()
      })
      worker.on('error', (error) => {
        didFailure ??= `DID worker failed: ${error.message}`
        didDone()
      })
    } else {
      didDone()
    }

    // Admin plane: iterations of five operations, started on a clock, at most four at a time.
    let adminFailure: string | null = null
    let adminInFlight = 0
    let adminN = 0
    adminTimer = options.adminRate > 0
      ? setInterval(() => {
        if (adminInFlight >= 4) return
        adminInFlight++
        adminIteration(appliance.adminUrl, world, adminN++, (ms) => bucketAt(Date.now()).admin.push(ms))
          .catch((error: unknown) => {
            bucketAt(Date.now()).adminFailed++
            adminFailure ??= error instanceof Error ? error.message : String(error)
          })
          .finally(() => adminInFlight--)
      }, 5000 / options.adminRate)
      : null

    // Scrapes every 5 s (fewer than four per interval would make the minimum meaningless, so shorter
    // intervals scrape more often); each interval's line is printed once its last scrape is in.
    const rows: Row[] = []
    const samplePeriod = Math.min(5000, (options.interval * 1000) / 4)
    let previousScrape: Scrape | null = null
    let printed = 0
    const finish = (upTo: number): void => {
      for (; printed < upTo; printed++) {
        const bucket = buckets[printed] as Bucket
        const end = Math.min(options.duration, (printed + 1) * options.interval)
        const seconds = end - printed * options.interval
        const row = toRow(printed, bucket, seconds, end, previousScrape)
        previousScrape = bucket.scrapes.at(-1) ?? previousScrape
        rows.push(row)
        log(rowLine(row))
        const failed = row.gateway_failed + row.did_failed + row.admin_failed
        const total = (row.gateway_rps + row.did_rps + row.admin_ops) * seconds + failed
        if (failed > Math.max(10, total * 0.01)) {
          abortRun(new Error(`interval ${row.interval}: ${failed} of ${Math.round(total)} requests failed; first: ` +
            `${([gatewayFailure, didFailure, adminFailure] as (string | null)[]).filter((f) => f !== null).join(' / ')}`))
        }
      }
    }
    const scraper = (async () => {
      for (let tick = 1; scraping; tick++) {
        const wait = loadStart + tick * samplePeriod - Date.now()
        if (wait > 0) await sleep(wait)
        if (!scraping) break
        const s = await scrape(appliance.adminUrl)
        // The scrape due at an interval's end belongs to that interval (whenever its answer arrives).
        const due = loadStart + tick * samplePeriod
        bucketAt(due - 1).scrapes.push(s)
        bucketAt(due - 1).didsSoFar = didsSoFar
        if (due - loadStart < options.duration * 1000) finish(Math.floor((due - loadStart) / (options.interval * 1000)))
        // Keep the log file small; append mode makes the truncation safe under the running appliance.
        if (statSync(logFile).size > MAX_LOG_BYTES) truncateSync(logFile, 0)
      }
    })().catch((error: unknown) => abortRun(error))

    await Promise.race([Promise.all([gatewayDone, sleep(options.duration * 1000)]), applianceExit, aborted])
    worker?.postMessage('stop')
    if (adminTimer !== null) clearInterval(adminTimer)
    await Promise.race([Promise.all([didFinished, (async () => { while (adminInFlight > 0) await sleep(10) })()]), applianceExit, aborted, sleep(30_000)])
    scraping = false
    await scraper
    const final = await scrape(appliance.adminUrl)
    const lastBucket = buckets[intervals - 1] as Bucket
    lastBucket.scrapes.push(final)
    lastBucket.didsSoFar = didsSoFar
    finish(intervals)
    await worker?.terminate()
    worker = null

    await appliance.child.stop()
    await upstream.child.stop()
    children.clear()
    report(rows, options, { didsSoFar, failures: ([gatewayFailure, didFailure, adminFailure] as (string | null)[]).filter((f): f is string => f !== null) })
  } finally {
    scraping = false
    if (adminTimer !== null) clearInterval(adminTimer)
    instance?.stop()
    await worker?.terminate()
    for (const child of children) await child.stop()
    await db.query(`DROP SCHEMA ${schema} CASCADE`).catch(() => {})
    await db.end()
    rmSync(work, { recursive: true, force: true })
  }
}

interface Check {
  name: string
  held: boolean | null
  detail: string
}

function report(rows: Row[], options: Options, extra: { didsSoFar: number; failures: string[] }): void {
  // The baseline is the second interval, or, when the run got past the caches' bound, the first interval
  // that started with both caches already full: growth while a bounded cache fills is its bound working,
  // not a leak.
  const full = rows.findIndex((_row, i) => i >= 1 && (rows[i - 1] as Row).distinct_dids > CACHE_BOUND)
  const baseIndex = full !== -1 && full < rows.length - 1 ? full : 1
  const base = rows[baseIndex]
  const last = rows.at(-1) as Row
  const checks: Check[] = []
  if (base === undefined || base === last) {
    checks.push({ name: 'flat memory and latency', held: null, detail: `needs at least three intervals (the first is warm-up); got ${rows.length} — use a longer --duration or a shorter --interval` })
  } else {
    const heapGrowth = last.heap_min_mb / base.heap_min_mb - 1
    checks.push({ name: 'heap after GC (interval minimum)', held: heapGrowth <= MAX_HEAP_GROWTH, detail: `${f1(base.heap_min_mb)} MB → ${f1(last.heap_min_mb)} MB (${heapGrowth >= 0 ? '+' : ''}${(heapGrowth * 100).toFixed(1)} %, limit +${MAX_HEAP_GROWTH * 100} %)` })
    const p99Ratio = last.gateway_p99_ms / base.gateway_p99_ms
    checks.push({ name: 'gateway p99 latency', held: p99Ratio <= MAX_P99_RATIO, detail: `${f2(base.gateway_p99_ms)} ms → ${f2(last.gateway_p99_ms)} ms (×${p99Ratio.toFixed(2)}, limit ×${MAX_P99_RATIO})` })
    const rssGrowth = last.rss_max_mb / base.rss_max_mb - 1
    checks.push({ name: 'process RSS', held: rssGrowth <= MAX_RSS_GROWTH, detail: `${f0(base.rss_max_mb)} MB → ${f0(last.rss_max_mb)} MB (${rssGrowth >= 0 ? '+' : ''}${(rssGrowth * 100).toFixed(1)} %, limit +${MAX_RSS_GROWTH * 100} %)` })
  }
  const failed = rows.reduce((s, r) => s + r.gateway_failed + r.did_failed + r.admin_failed, 0)
  checks.push({ name: 'no failed request', held: failed === 0, detail: failed === 0 ? 'none' : `${failed} failed; first: ${extra.failures.join(' / ')}` })
  const target = options.dids
  checks.push({
    name: 'distinct DIDs',
    held: extra.didsSoFar > CACHE_BOUND,
    detail: `${extra.didsSoFar} of the ${target} asked for (${extra.didsSoFar >= target ? 'reached' : 'NOT reached'})` +
      `; ${extra.didsSoFar > CACHE_BOUND ? 'past' : 'below'} the caches' ${CACHE_BOUND}-entry bound, so ${extra.didsSoFar > CACHE_BOUND ? 'both caches evicted during the run' : 'the bound was never exercised'}`,
  })
  const verdict = checks.every((c) => c.held === true)
  if (options.json) {
    process.stdout.write(`${JSON.stringify({
      options,
      baseline_interval: baseIndex + 1,
      heap_note: 'heap_min_mb is the minimum of heap-used samples every 5 s in the interval (approximates heap after GC)',
      lag_note: 'lag_p99_ms is the largest 5-s event-loop delay p99 in the interval',
      intervals: rows,
      distinct_dids: extra.didsSoFar,
      checks,
      held: verdict,
    }, null, 2)}\n`)
    return
  }
  const out: string[] = ['', `soak: ${options.duration}s in ${options.interval}s intervals; gateway ${options.rate} req/s target, new DIDs ${options.didRate}/s target, admin ${options.adminRate} ops/s target`, '']
  out.push('| # | end s | gw req/s | gw p50 ms | gw p99 ms | new-DID req/s | new-DID p99 ms | admin ops/s | admin p99 ms | heap min MB | heap max MB | lag p99 ms | RSS MB | distinct DIDs | badge cache hit/miss | decision cache hit/miss | failed |')
  out.push('|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|')
  for (const r of rows) {
    out.push(`| ${r.interval} | ${r.end_s} | ${f0(r.gateway_rps)} | ${f2(r.gateway_p50_ms)} | ${f2(r.gateway_p99_ms)} | ${f0(r.did_rps)} | ${f2(r.did_p99_ms)} | ${f1(r.admin_ops)} | ${f1(r.admin_p99_ms)} | ${f1(r.heap_min_mb)} | ${f1(r.heap_max_mb)} | ${f1(r.lag_p99_ms)} | ${f0(r.rss_max_mb)} | ${r.distinct_dids} | ${r.badge_cache.hit}/${r.badge_cache.miss} | ${r.decision_cache.hit}/${r.decision_cache.miss} | ${r.gateway_failed + r.did_failed + r.admin_failed} |`)
  }
  out.push('')
  out.push('heap min approximates heap after GC (minimum of 5-s samples; the appliance cannot be made to collect from outside).')
  out.push(`baseline: interval ${baseIndex + 1} (${baseIndex === 1 ? 'interval 1 is warm-up' : `the first interval that started with more than ${CACHE_BOUND} distinct DIDs sent, i.e. with both caches full`}); compared with interval ${rows.length}.`)
  for (const c of checks) out.push(`${c.held === null ? 'N/A    ' : c.held ? 'HELD   ' : 'NOT HELD'}  ${c.name}: ${c.detail}`)
  out.push(`verdict: memory and latency flat under mixed load ${verdict ? 'HELD' : 'NOT HELD'}`)
  process.stdout.write(`${out.join('\n')}\n`)
}

if (!isMainThread && (workerData as { role?: string } | null)?.role === 'dids') {
  runDidDriver(workerData as DidDriverData).catch((error: unknown) => {
    throw error
  })
} else if (process.argv.includes('--role')) {
  runUpstream()
} else {
  main().catch(async (error: unknown) => {
    process.stderr.write(`soak failed: ${error instanceof Error ? error.message : String(error)}\n`)
    for (const child of children) await child.stop().catch(() => {})
    process.exitCode = 1
  })
}
