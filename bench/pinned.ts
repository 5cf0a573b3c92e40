/**
 * The pinned gateway benchmark (docs/performance.md, "Pinned"): wrk, a C load generator, and the upstream on
 * CPU 0, the process under test alone on CPU 1, the floor forwarder (bench/floor-forwarder.ts) measured in the
 * same run, interleaved, so the load generator cannot be the bottleneck that hides a slower gateway.
 *
 *   node dist/bench/pinned.js [--duration 10] [--rounds 3] [--connections 64] [--warmup 2] [--latency-duration 5]
 *     [--only floor,badge,pdp-cache,pdp-eval,mcp-call,mcp-list,a2a-send,fleet,nginx] [--profile DIR] [--json]
 *   (also: node dist/bench/gateway.js --pinned …)
 *
 * Every round measures, group by group, the floor sending a request and then each case sending the identical
 * request (same headers, badge, body; only the path counter differs for the evaluated case): wrk with one
 * thread and --connections connections for --duration seconds, then one connection for --latency-duration
 * seconds. Each case's ratio is its req/s over the floor's of the same round; the verdict takes the median of
 * the rounds' ratios, and the one-connection p50 difference to the floor (median of the rounds).
 *
 * Cases: badge-only (`agent-trust serve`, no PDP); the full pipeline (badge, embedded PDP through its decision
 * cache, EM-GUARD, metrics, the info log line, the decision-feed record); the embedded PDP with a new path per
 * request (every request evaluated); MCP tools/call and tools/list (50 tools, 20 hidden) and A2A message/send,
 * each with the embedded PDP; the fleet features (`agent-trust gateway` shipping its decisions to the admin
 * plane, the policy's rate limit counted in a private Redis); nginx forwarding with upstream keep-alive, as a
 * reference line. PostgreSQL as bench/gateway.ts (BENCH_DATABASE_URL). Ports 43000-43030.
 */
import { execFileSync, spawn } from 'node:child_process'
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { loadavg, tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { generateApiKeySecret } from '../src/core/api-key.js'
import { A2A_PATH, a2aHeaders, a2aPolicy, checkA2a, checkA2aEnforced, messageSendBody } from './a2a.js'
import { applianceEnv, benchPolicy as httpPolicy, call, ISSUER, createOrgWithAgent, createSchema, expectStatus, probeHealth, sleep, startAppliance, type Appliance, type OrgWithAgent } from './appliance.js'
import { children, runMain, spawnWithUrl, track, type Child } from './children.js'
import { checkMcp, checkMcpEnforced, MCP_PATH, MCP_TOOL_NAMES, mcpHeaders, mcpPolicy, toolsCallBody, toolsListBody, VISIBLE_TOOL_NAMES } from './mcp.js'
import { summarizeProfile } from './profile.js'
import { runUpstream, UPSTREAM_BODY } from './upstream.js'

const HERE = path.dirname(fileURLToPath(import.meta.url))
const FLOOR = path.join(HERE, 'floor-forwarder.js')

const PORTS = { upstream: 43000, floor: 43001, nginx: 43002, redis: 43003, first: 43010 }
const REDIS_PREFIX = 'bench34:'

/** The issue's targets, as ratios to the floor (median of the rounds) and the one-connection p50 budget. */
const TARGETS: Readonly<Record<string, number>> = { badge: 0.95, 'pdp-cache': 0.90, 'mcp-call': 0.85, 'mcp-list': 0.6, 'a2a-send': 0.85 }
const TARGET_ADDED_P50_US = 20
/** The fleet case stays within this many points of the full pipeline's ratio. */
const FLEET_POINTS = 0.05

const CASES = ['floor', 'badge', 'pdp-cache', 'pdp-eval', 'mcp-call', 'mcp-list', 'a2a-send', 'fleet', 'nginx'] as const
type CaseName = (typeof CASES)[number]
type Group = 'http' | 'mcp-call' | 'mcp-list' | 'a2a-send'

interface Options {
  duration: number
  rounds: number
  connections: number
  warmup: number
  latencyDuration: number
  only: ReadonlySet<CaseName>
  profileDir: string | null
  json: boolean
}

function parseOptions(argv: string[]): Options {
  const options: Options = { duration: 10, rounds: 3, connections: 64, warmup: 2, latencyDuration: 5, only: new Set(CASES), profileDir: null, json: false }
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]
    const number = (min: number): number => {
      const n = Number(argv[++i])
      if (!Number.isFinite(n) || n < min) throw new Error(`${arg} needs a number ≥ ${min}`)
      return n
    }
    if (arg === '--duration') options.duration = Math.round(number(1))
    else if (arg === '--rounds') options.rounds = Math.round(number(1))
    else if (arg === '--connections') options.connections = Math.round(number(1))
    else if (arg === '--warmup') options.warmup = Math.round(number(0))
    else if (arg === '--latency-duration') options.latencyDuration = Math.round(number(0))
    else if (arg === '--only') {
      const names = (argv[++i] ?? '').split(',')
      if (!names.every((n): n is CaseName => (CASES as readonly string[]).includes(n))) throw new Error(`--only needs some of ${CASES.join(', ')}, comma-separated`)
      options.only = new Set<CaseName>(['floor', ...names])
    }
    else if (arg === '--profile') options.profileDir = path.resolve(argv[++i] ?? 'bench-profiles')
    else if (arg === '--json') options.json = true
    else if (arg === '--pinned') continue
    else throw new Error(`unknown argument ${String(arg)}`)
  }
  return options
}

/** What this benchmark needs on the machine; the message says how to get what is missing. */
function missingTools(): string | null {
  const missing: string[] = []
  for (const [tool, args, pkg] of [['wrk', ['--version'], 'wrk'], ['taskset', ['--version'], 'util-linux']] as const) {
    try {
      execFileSync(tool, args, { stdio: 'ignore' })
    } catch (error) {
      // wrk --version prints its banner and exits 1: only a missing binary counts.
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') missing.push(`${tool} (apt-get install ${pkg})`)
    }
  }
  return missing.length === 0 ? null : `missing: ${missing.join(', ')}`
}

/** Moves a process and all its threads to one CPU. */
function pinTo(cpu: number, pid: number | undefined): void {
  if (pid === undefined) throw new Error('a process without a pid cannot be pinned')
  execFileSync('taskset', ['--all-tasks', '--cpu-list', '--pid', String(cpu), String(pid)], { stdio: 'ignore' })
}

// --- wrk ----------------------------------------------------------------------------------------------

interface WrkResult {
  rps: number
  /** Latency percentiles in µs. */
  p50: number
  p99: number
  requests: number
}

const luaString = (text: string): string => `"${text.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')}"`

/**
 * A wrk script sending one request: method, headers and body fixed; with `uniqueTag`, the path gets a counter
 * (`<path>/<tag>-<n>`), so that no two requests ask the same decision.
 */
function wrkScript(dir: string, name: string, request: { method: string; path: string; headers: Record<string, string>; body?: string }, uniqueTag?: string): string {
  const lines = [`wrk.method = ${luaString(request.method)}`, `wrk.path = ${luaString(request.path)}`]
  for (const [k, v] of Object.entries(request.headers)) lines.push(`wrk.headers[${luaString(k)}] = ${luaString(v)}`)
  if (request.body !== undefined) lines.push(`wrk.body = ${luaString(request.body)}`)
  if (uniqueTag !== undefined) {
    lines.push('local n = 0', `request = function() n = n + 1; return wrk.format(nil, ${luaString(`${request.path}/${uniqueTag}-`)} .. n) end`)
  }
  const file = path.join(dir, `${name}.lua`)
  writeFileSync(file, `${lines.join('\n')}\n`)
  return file
}

function toMicros(text: string): number {
  const m = /^([\d.]+)(us|ms|s)$/.exec(text)
  if (m === null) throw new Error(`wrk latency ${text} not understood`)
  const v = Number(m[1])
  return m[2] === 'us' ? v : m[2] === 'ms' ? v * 1000 : v * 1e6
}

/** One wrk run on CPU 0; throws on any socket error or non-2xx answer, since the figures would then mean nothing. */
function wrk(what: string, url: string, script: string, connections: number, seconds: number): WrkResult {
  const out = execFileSync('taskset', ['--cpu-list', '0', 'wrk', '-t1', `-c${connections}`, `-d${seconds}s`, '--latency', '--timeout', '10s', '-s', script, url], { encoding: 'utf8' })
  if (/Non-2xx or 3xx responses/.test(out) || /Socket errors/.test(out)) throw new Error(`${what}: wrk saw failures:\n${out}`)
  const rps = /Requests\/sec:\s+([\d.]+)/.exec(out)
  const p50 = /\s50%\s+([\d.]+\w+)/.exec(out)
  const p99 = /\s99%\s+([\d.]+\w+)/.exec(out)
  const requests = /(\d+) requests in/.exec(out)
  if (rps === null || p50 === null || p99 === null || requests === null) throw new Error(`${what}: wrk output not understood:\n${out}`)
  return { rps: Number(rps[1]), p50: toMicros(p50[1]!), p99: toMicros(p99[1]!), requests: Number(requests[1]) }
}

// --- the processes ------------------------------------------------------------------------------------

/** nginx (one process, no master) forwarding to the upstream over keep-alive connections; a reference line. */
async function startNginx(dir: string, upstreamPort: number, port: number): Promise<Child> {
  const conf = path.join(dir, 'nginx.conf')
  writeFileSync(conf, [
    'daemon off;', 'master_process off;', 'worker_processes 1;', `error_log ${dir}/nginx-error.log warn;`, `pid ${dir}/nginx.pid;`,
    'events { worker_connections 4096; }',
    'http {',
    '  access_log off;',
    `  client_body_temp_path ${dir}/nginx-body; proxy_temp_path ${dir}/nginx-proxy; fastcgi_temp_path ${dir}/nginx-fcgi; uwsgi_temp_path ${dir}/nginx-uwsgi; scgi_temp_path ${dir}/nginx-scgi;`,
    `  upstream up { server 127.0.0.1:${upstreamPort}; keepalive 128; }`,
    `  server { listen 127.0.0.1:${port}; location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; } }`,
    '}',
  ].join('\n'))
  const child = track(spawn('nginx', ['-c', conf, '-p', dir], { stdio: ['ignore', 'ignore', 'inherit'] }))
  children.add(child)
  for (let i = 0; i < 100; i++) {
    const res = await fetch(`http://127.0.0.1:${port}/bench/item`).catch(() => null)
    if (res !== null && res.status === 200) {
      await res.arrayBuffer()
      return child
    }
    await sleep(100)
  }
  throw new Error('nginx did not answer within 10 s')
}

async function startRedis(port: number): Promise<Child> {
  const child = track(spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' }))
  children.add(child)
  for (let i = 0; i < 100; i++) {
    try {
      if (execFileSync('redis-cli', ['-p', String(port), 'ping'], { encoding: 'utf8' }).trim() === 'PONG') return child
    } catch { /* not up yet */ }
    await sleep(100)
  }
  throw new Error(`redis-server on ${port} did not start`)
}

interface Case {
  name: CaseName
  title: string
  group: Group
  url: string
  script: string
  /** The process measured: pinned to CPU 1. */
  pid: number | undefined
  /** Processes that work for this case but are not under test (the fleet's admin plane): CPU 0 while it runs. */
  helpers?: (number | undefined)[]
}

interface Reading {
  rps: number
  ratio: number
  p50: number
  p99: number
  /** One connection, µs. */
  lightP50: number | null
  lightP99: number | null
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = sorted.length >> 1
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2
}


async function checkHttp(what: string, base: string, headers: Record<string, string>, enforced: boolean): Promise<void> {
  const body = await expectStatus(what, `${base}/bench/item`, { headers }, 200)
  if (body !== UPSTREAM_BODY) throw new Error(`${what}: GET /bench/item answered ${body.slice(0, 200)}`)
  if (!enforced) return
  await expectStatus(what, `${base}/bench/item`, {}, 401)
}

export async function runPinned(argv: string[]): Promise<void> {
  const options = parseOptions(argv)
  const missing = missingTools()
  if (missing !== null) throw new Error(`${missing}; this benchmark pins wrk and the upstream to CPU 0 and the process under test to CPU 1`)
  const log = (text: string): void => { if (!options.json) process.stderr.write(`${text}\n`) }
  const want = (name: CaseName): boolean => options.only.has(name)
  // Kept when the run fails: the appliances' logs are in it.
  const work = mkdtempSync(path.join(tmpdir(), 'bench-pinned-'))
  const schema = await createSchema('bench_pin')
  const operatorKey = generateApiKeySecret()
  const loadStart = loadavg().map((v) => v.toFixed(2)).join(' ')
  try {
    const upstream = await spawnWithUrl([fileURLToPath(import.meta.url), '--role', 'upstream'], { PATH: process.env.PATH, PORT: String(PORTS.upstream) }, 'upstream listening')
    const floor = await spawnWithUrl([FLOOR], { PATH: process.env.PATH, UPSTREAM_URL: upstream.url, PORT: String(PORTS.floor) }, 'floor forwarder listening')
    pinTo(0, upstream.child.process.pid)
    pinTo(1, floor.child.process.pid)
    const base = { databaseUrl: schema.url, dataDir: path.join(work, 'data'), operatorKey, upstreamUrl: upstream.url }
    const nodeArgs = options.profileDir === null ? [] : ['--cpu-prof', `--cpu-prof-dir=${options.profileDir}`]
    let port = PORTS.first
    const ports = (): Record<string, string> => ({ PORT: String(port++), SERVICE_GATEWAY_PORT: String(port++) })
    // The badge-only appliance is also the admin plane the worlds are made through and the fleet reports to.
    const admin = await startAppliance(applianceEnv(base, ports()), path.join(work, 'badge-only.log'), want('badge') ? nodeArgs : [])
    const httpWorld = await createOrgWithAgent(admin.adminUrl, operatorKey, 'bench', 'bench.example.com', (did) => httpPolicy(did, false))
    const startPdp = (orgId: string, name: string, env: Record<string, string> = {}): Promise<Appliance> =>
      startAppliance(applianceEnv(base, { ...ports(), SERVICE_EMBEDDED_PDP: 'true', SERVICE_WORKSPACE: orgId, SERVICE_ENFORCEMENT_MODE: 'EM-GUARD', ...env }), path.join(work, `${name}.log`), nodeArgs)
    const appliances: Appliance[] = [admin]
    const cases: Case[] = []
    const headers = { 'x-service-badge': httpWorld.token, accept: 'application/json' }
    const get = { method: 'GET', path: '/bench/item', headers }
    const floorCase = (group: Group, script: string): Case => ({ name: 'floor', title: `floor (node:http + undici), ${group}`, group, url: floor.url, script, pid: floor.child.process.pid })
    const scripts = {
      http: wrkScript(work, 'http', get),
      mcpCall: '', mcpList: '', a2a: '',
    }
    await checkHttp('floor', floor.url, headers, false)
    cases.push(floorCase('http', scripts.http))
    if (want('badge')) {
      await checkHttp('badge-only', admin.gatewayUrl, headers, true)
      cases.push({ name: 'badge', title: 'gateway, badge only', group: 'http', url: admin.gatewayUrl, script: scripts.http, pid: admin.child.process.pid })
    }
    if (want('pdp-cache')) {
      const pdp = await startPdp(httpWorld.orgId, 'pdp')
      appliances.push(pdp)
      await checkHttp('PDP (cache)', pdp.gatewayUrl, headers, true)
      await expectStatus('PDP (cache)', `${pdp.gatewayUrl}/admin/x`, { headers }, 403)
      cases.push({ name: 'pdp-cache', title: 'full pipeline: badge + embedded PDP (decision cache) + EM-GUARD + metrics + log + feed', group: 'http', url: pdp.gatewayUrl, script: scripts.http, pid: pdp.child.process.pid })
    }
    if (want('pdp-eval')) {
      const evaluated = await startPdp(httpWorld.orgId, 'pdp-evaluated')
      appliances.push(evaluated)
      await checkHttp('PDP (evaluated)', evaluated.gatewayUrl, headers, true)
      cases.push({ name: 'pdp-eval', title: 'embedded PDP evaluated per request (new path each)', group: 'http', url: evaluated.gatewayUrl, script: '', pid: evaluated.child.process.pid })
    }
    let fleetCheck: (() => Promise<string>) | null = null
    if (want('fleet')) {
      const redis = await startRedis(PORTS.redis)
      pinTo(0, redis.process.pid)
      const fleetWorld = await createOrgWithAgent(admin.adminUrl, operatorKey, 'bench-fleet', 'fleet.bench.example.com', (did) => httpPolicy(did, true))
      const registryKey = (await call(admin.adminUrl, fleetWorld.orgKey, 'POST', '/v1/keys', { name: 'bench-fleet-gateway' })).data.key as string
      const gatewayPort = port++
      const fleet = await startAppliance({
        PATH: process.env.PATH ?? '', PORT: String(port++), SERVICE_GATEWAY_PORT: String(gatewayPort), SERVICE_HOST: '127.0.0.1', SERVICE_LOG_LEVEL: 'info',
        SERVICE_REGISTRY_URL: admin.adminUrl, SERVICE_REGISTRY_KEY: registryKey, CA_ISSUER_URL: ISSUER,
        SERVICE_UPSTREAM_URL: upstream.url, SERVICE_EMBEDDED_PDP: 'true', SERVICE_WORKSPACE: fleetWorld.orgId, SERVICE_ENFORCEMENT_MODE: 'EM-GUARD',
        REDIS_URL: `redis://127.0.0.1:${PORTS.redis}`, SERVICE_RATE_LIMIT_REDIS_PREFIX: `${REDIS_PREFIX}rl:`, SERVICE_PEP_ID: 'bench-fleet',
      }, path.join(work, 'fleet.log'), nodeArgs, 'gateway')
      appliances.push(fleet)
      const fleetHeaders = { 'x-service-badge': fleetWorld.token, accept: 'application/json' }
      await checkHttp('fleet', fleet.gatewayUrl, fleetHeaders, true)
      // The fleet features are on: the rate limit's bucket is in Redis, the decisions reach the admin plane.
      fleetCheck = async () => {
        const keys = execFileSync('redis-cli', ['-p', String(PORTS.redis), '--scan', '--pattern', `${REDIS_PREFIX}rl:*`], { encoding: 'utf8' }).trim()
        if (keys === '') throw new Error('fleet: no rate-limit bucket in Redis')
        let shipped = 0
        for (let i = 0; i < 50 && shipped === 0; i++) {
          const page = await call(admin.adminUrl, operatorKey, 'GET', '/v1/gateway/decisions?limit=5')
          shipped = JSON.stringify(page).split('bench-fleet').length - 1
          if (shipped === 0) await sleep(200)
        }
        if (shipped === 0) throw new Error('fleet: no decision of the fleet gateway reached the admin plane')
        return `rate-limit buckets in Redis: ${keys.split('\n').length}; the admin plane lists the fleet gateway's decisions`
      }
      await fleetCheck()
      cases.push({ name: 'fleet', title: 'fleet features: gateway-only, decisions shipped to the admin plane, rate limit counted in Redis', group: 'http', url: fleet.gatewayUrl,
        script: wrkScript(work, 'fleet', { ...get, headers: fleetHeaders }), pid: fleet.child.process.pid, helpers: [admin.child.process.pid] })
    }
    if (want('nginx')) {
      const nginx = await startNginx(work, PORTS.upstream, PORTS.nginx)
      pinTo(1, nginx.process.pid)
      cases.push({ name: 'nginx', title: 'nginx (reference: one worker, upstream keep-alive)', group: 'http', url: `http://127.0.0.1:${PORTS.nginx}`, script: scripts.http, pid: nginx.process.pid })
    }
    if (want('mcp-call') || want('mcp-list')) {
      const world: OrgWithAgent = await createOrgWithAgent(admin.adminUrl, operatorKey, 'bench-mcp', 'mcp.bench.example.com', mcpPolicy)
      const mcp = await startPdp(world.orgId, 'mcp', { SERVICE_UPSTREAM_PROTOCOL: 'mcp' })
      appliances.push(mcp)
      const h = mcpHeaders(world.token)
      await checkMcp('MCP floor', floor.url, h, MCP_TOOL_NAMES)
      await checkMcp('MCP gateway', mcp.gatewayUrl, h, VISIBLE_TOOL_NAMES)
      await checkMcpEnforced('MCP gateway', mcp.gatewayUrl, h)
      for (const [name, body] of [['mcp-call', toolsCallBody(1)], ['mcp-list', toolsListBody(1)]] as const) {
        if (!want(name)) continue
        const script = wrkScript(work, name, { method: 'POST', path: MCP_PATH, headers: h, body })
        cases.push(floorCase(name, script))
        cases.push({ name, title: name === 'mcp-call' ? 'MCP tools/call (embedded PDP)' : 'MCP tools/list, 50 tools, 20 hidden (embedded PDP)', group: name, url: mcp.gatewayUrl, script, pid: mcp.child.process.pid })
      }
    }
    if (want('a2a-send')) {
      const world = await createOrgWithAgent(admin.adminUrl, operatorKey, 'bench-a2a', 'a2a.bench.example.com', a2aPolicy)
      const a2a = await startPdp(world.orgId, 'a2a', { SERVICE_UPSTREAM_PROTOCOL: 'a2a' })
      appliances.push(a2a)
      const h = a2aHeaders(world.token)
      await checkA2a('A2A floor', floor.url, h)
      await checkA2a('A2A gateway', a2a.gatewayUrl, h)
      await checkA2aEnforced('A2A gateway', a2a.gatewayUrl, h)
      const script = wrkScript(work, 'a2a', { method: 'POST', path: A2A_PATH, headers: h, body: messageSendBody(1) })
      cases.push(floorCase('a2a-send', script))
      cases.push({ name: 'a2a-send', title: 'A2A message/send (embedded PDP)', group: 'a2a-send', url: a2a.gatewayUrl, script, pid: a2a.child.process.pid })
    }
    for (const appliance of appliances) {
      if (appliance.adminUrl !== admin.adminUrl || want('badge')) await probeHealth(appliance.adminUrl, 500)
      pinTo(1, appliance.child.process.pid)
    }
    log(`pinned: wrk and the upstream on CPU 0, the process under test on CPU 1; ${options.rounds} round(s) × ${options.duration} s, ${options.connections} connections, one-connection phase ${options.latencyDuration} s; load average ${loadStart}`)

    const readings = new Map<Case, Reading[]>(cases.map((c) => [c, []]))
    let fleetNote: string | null = null
    for (let round = 1; round <= options.rounds; round++) {
      let floorReading: WrkResult | null = null
      for (const c of cases) {
        for (const helper of c.helpers ?? []) pinTo(0, helper)
        const script = c.name === 'pdp-eval' ? wrkScript(work, `eval-${round}`, get, `r${round}`) : c.script
        if (options.warmup > 0) wrk(`${c.title} (warm-up)`, c.url, script, options.connections, options.warmup)
        const sat = wrk(c.title, c.url, script, options.connections, options.duration)
        const light = options.latencyDuration > 0 ? wrk(`${c.title} (one connection)`, c.url, script, 1, options.latencyDuration) : null
        for (const helper of c.helpers ?? []) pinTo(1, helper)
        // Checked right after its load: a bucket expires 60 s after its last use.
        if (c.name === 'fleet' && fleetCheck !== null) fleetNote = await fleetCheck()
        if (c.name === 'floor') floorReading = sat
        const ratio = sat.rps / floorReading!.rps
        readings.get(c)!.push({ rps: sat.rps, ratio, p50: sat.p50, p99: sat.p99, lightP50: light?.p50 ?? null, lightP99: light?.p99 ?? null })
        log(`  round ${round}  ${c.title}: ${sat.rps.toFixed(0)} req/s (${ratio.toFixed(3)} of the floor), p50 ${sat.p50.toFixed(0)} µs, p99 ${sat.p99.toFixed(0)} µs` +
          (light === null ? '' : `; one connection p50 ${light.p50.toFixed(1)} µs, p99 ${light.p99.toFixed(1)} µs`))
      }
    }
    const loadEnd = loadavg().map((v) => v.toFixed(2)).join(' ')
    for (const child of [...children].reverse()) await child.stop()
    children.clear()
    report(cases, readings, options, { loadStart, loadEnd, fleetNote })
    if (options.profileDir !== null) {
      const byPid = new Map(cases.map((c) => [String(c.pid), c.title]))
      for (const file of readdirSync(options.profileDir).filter((f) => f.endsWith('.cpuprofile')).sort()) {
        const title = byPid.get(file.split('.')[3] ?? '')
        if (title !== undefined) process.stdout.write(`\n### ${title}\n${summarizeProfile(path.join(options.profileDir, file))}\n`)
      }
    }
    rmSync(work, { recursive: true, force: true })
  } finally {
    for (const child of children) await child.stop()
    await schema.drop()
  }
}

function report(cases: Case[], readings: Map<Case, Reading[]>, options: Options, extra: { loadStart: string; loadEnd: string; fleetNote: string | null }): void {
  const floorOf = (c: Case): Case => cases.find((f) => f.name === 'floor' && f.group === c.group)!
  const rows = cases.map((c) => {
    const r = readings.get(c)!
    const f = readings.get(floorOf(c))!
    const light = r.every((x) => x.lightP50 !== null)
    return {
      case: c.name,
      title: c.title,
      group: c.group,
      rps: median(r.map((x) => x.rps)),
      ratios: r.map((x) => x.ratio),
      ratio: median(r.map((x) => x.ratio)),
      p50_us: median(r.map((x) => x.p50)),
      p99_us: median(r.map((x) => x.p99)),
      one_connection_p50_us: light ? median(r.map((x) => x.lightP50!)) : null,
      one_connection_added_p50_us: light ? median(r.map((x, i) => x.lightP50! - f[i]!.lightP50!)) : null,
      target: c.name === 'floor' ? null : c.name === 'fleet' ? null : TARGETS[c.name] ?? null,
    }
  })
  const full = rows.find((r) => r.case === 'pdp-cache')
  const verdicts: string[] = []
  for (const r of rows) {
    if (r.target !== null) verdicts.push(`${r.ratio >= r.target ? 'MET    ' : 'NOT MET'}  ${r.title}: ${r.ratio.toFixed(3)} of the floor (target ≥ ${r.target})`)
  }
  if (full?.one_connection_added_p50_us != null) {
    const added = full.one_connection_added_p50_us
    verdicts.push(`${added <= TARGET_ADDED_P50_US ? 'MET    ' : 'NOT MET'}  full pipeline at one connection: ${added >= 0 ? '+' : ''}${added.toFixed(1)} µs p50 over the floor (target ≤ +${TARGET_ADDED_P50_US} µs)`)
  }
  const fleet = rows.find((r) => r.case === 'fleet')
  if (fleet !== undefined && full !== undefined) {
    verdicts.push(`${full.ratio - fleet.ratio <= FLEET_POINTS ? 'MET    ' : 'NOT MET'}  fleet features: ${fleet.ratio.toFixed(3)} of the floor, ${((full.ratio - fleet.ratio) * 100).toFixed(1)} points below the full pipeline (target ≤ ${FLEET_POINTS * 100})`)
  }
  if (options.json) {
    process.stdout.write(`${JSON.stringify({ duration_s: options.duration, rounds: options.rounds, connections: options.connections, load_average: extra, results: rows, verdicts }, null, 2)}\n`)
    return
  }
  const sign = (v: number | null): string => (v === null ? '' : `${v >= 0 ? '+' : ''}${v.toFixed(1)}`)
  const out = [`\npinned benchmark: wrk -t1 -c${options.connections}, ${options.rounds} round(s) × ${options.duration} s, interleaved; wrk + upstream on CPU 0, the process under test alone on CPU 1`, '',
    '| case | req/s | ratio to floor (median) | per round | p50 µs | p99 µs | 1 conn p50 µs | 1 conn added p50 µs | target |',
    '|---|---:|---:|---|---:|---:|---:|---:|---:|']
  for (const r of rows) {
    out.push(`| ${r.title} | ${r.rps.toFixed(0)} | ${r.ratio.toFixed(3)} | ${r.ratios.map((x) => x.toFixed(3)).join(' ')} | ${r.p50_us.toFixed(0)} | ${r.p99_us.toFixed(0)} | ${r.one_connection_p50_us?.toFixed(1) ?? ''} | ${r.case === 'floor' ? '' : sign(r.one_connection_added_p50_us)} | ${r.target === null ? '' : `≥ ${r.target}`} |`)
  }
  out.push('', `load average at start ${extra.loadStart}, at end ${extra.loadEnd}`)
  if (extra.fleetNote !== null) out.push(`fleet: ${extra.fleetNote}`)
  out.push('', ...verdicts)
  process.stdout.write(`${out.join('\n')}\n`)
}

if (process.argv.includes('--role')) {
  runUpstream()
} else if (process.argv[1] !== undefined && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  runMain('bench:pinned', () => runPinned(process.argv.slice(2)))
}
