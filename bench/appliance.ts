/**
 * What the benchmarks that run the real appliance share (bench/gateway.ts, bench/soak.ts): a throw-away
 * PostgreSQL schema, `agent-trust serve` started as a child with its log in a file, the admin API call, and
 * an organization with one agent, its badge and an approved org policy.
 */
import { spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { closeSync, openSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import pg from 'pg'
import { NODE_FLAGS } from '../src/node-flags.js'
import { children, track, type Child } from './children.js'

const HERE = path.dirname(fileURLToPath(import.meta.url))
/** The compiled CLI of the same build as this file (dist/, or a private build directory). */
const CLI = path.join(HERE, '..', 'src', 'cli', 'index.js')
const DATABASE_URL = process.env.BENCH_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test'
/** CA_ISSUER_URL of every benchmark appliance. */
export const ISSUER = 'http://bench.local'

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

export interface Schema {
  /** BENCH_DATABASE_URL with the schema as search_path: the appliance's DATABASE_URL. */
  readonly url: string
  /** Drops the schema and closes the connection; never throws. */
  drop(): Promise<void>
}

/**
 * A fresh schema in BENCH_DATABASE_URL (default postgres://postgres@127.0.0.1:5432/test), so the data
 * outlives one appliance process (the embedded PDP needs its workspace id at start, so the world is
 * created through a first appliance) and a run leaves nothing behind.
 */
export async function createSchema(prefix: string): Promise<Schema> {
  const name = `${prefix}_${randomBytes(4).toString('hex')}`
  const db = new pg.Client({ connectionString: DATABASE_URL })
  await db.connect()
  try {
    await db.query(`CREATE SCHEMA ${name}`)
  } catch (error) {
    await db.end()
    throw error
  }
  const url = new URL(DATABASE_URL)
  url.searchParams.set('options', `-c search_path=${name}`)
  return {
    url: url.toString(),
    async drop() {
      await db.query(`DROP SCHEMA ${name} CASCADE`).catch(() => {})
      await db.end().catch(() => {})
    },
  }
}

/** The environment every benchmark appliance runs with, plus `extra` (mode switches, limits). */
export function applianceEnv(
  base: { databaseUrl: string; dataDir: string; operatorKey: string; upstreamUrl: string },
  extra: Record<string, string> = {},
): Record<string, string> {
  return {
    PORT: '0',
    SERVICE_GATEWAY_PORT: '0',
    SERVICE_HOST: '127.0.0.1',
    DATABASE_URL: base.databaseUrl,
    SERVICE_DATA_DIR: base.dataDir,
    SERVICE_BOOTSTRAP_API_KEY: base.operatorKey,
    SERVICE_LOG_LEVEL: 'info',
    CA_ISSUER_URL: ISSUER,
    SERVICE_UPSTREAM_URL: base.upstreamUrl,
    ...extra,
  }
}

export interface Appliance {
  readonly child: Child
  readonly adminUrl: string
  readonly gatewayUrl: string
  readonly logFile: string
}

/**
 * Starts `agent-trust serve`, with the node flags of src/node-flags.ts as every start point of the appliance
 * passes them, and stdout (the JSON log) going to `logFile`, emptied first: a pipe into the
 * benchmark would make the load generator pay for every log line, and append mode lets the file be
 * truncated under the running process (the soak keeps it small that way). `nodeArgs` (--cpu-prof …)
 * go after the flags, before the CLI. Waits for both listeners and for /readyz: with the embedded PDP
 * the appliance is ready only once it holds a bundle.
 */
export async function startAppliance(env: Record<string, string>, logFile: string, nodeArgs: readonly string[] = [], command: 'serve' | 'gateway' = 'serve'): Promise<Appliance> {
  closeSync(openSync(logFile, 'w'))
  const fd = openSync(logFile, 'a')
  const proc = spawn(process.execPath, [...NODE_FLAGS, ...nodeArgs, CLI, command], {
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
    // A gateway-only process (`agent-trust gateway`) has its operations listener (/readyz, /metrics) instead.
    adminUrl = (command === 'serve' ? /"url":"(http:\/\/[^"]+)"[^\n]*"msg":"admin plane listening"/ : /"url":"(http:\/\/[^"]+)"[^\n]*"msg":"gateway operations listener up"/).exec(out)?.[1] ?? null
    gatewayUrl = /"url":"(http:\/\/[^"]+)"[^\n]*"msg":"gateway listening"/.exec(out)?.[1] ?? null
  }
  for (;;) {
    const res = await fetch(`${adminUrl}/readyz`).catch(() => null)
    if (res !== null) await res.arrayBuffer()
    if (res?.status === 200) break
    if (Date.now() > deadline) throw new Error('appliance not ready within 60 s')
    await sleep(100)
  }
  return { child, adminUrl, gatewayUrl, logFile }
}

/**
 * `count` health probes (`GET /healthz`, one at a time), as an orchestrator sends them. bench/gateway.ts
 * gives every appliance under test the same number before measuring, so both have the same history.
 * (They were added when an appliance whose first traffic was gateway requests alone measured ~8 µs per
 * request slower for its whole life; the cause turned out to be V8 forgetting the hidden classes of
 * Node's nextTick entries in an idle GC, which src/http/tick-object-shape.ts now prevents.)
 */
export async function probeHealth(adminUrl: string, count: number): Promise<void> {
  for (let i = 0; i < count; i++) {
    const res = await fetch(`${adminUrl}/healthz`)
    await res.arrayBuffer()
    if (res.status !== 200) throw new Error(`GET /healthz answered ${res.status}`)
  }
}

/** One admin API call with a bearer key; the parsed JSON answer. Throws on a status of 300 or more. */
export async function call(base: string, key: string, method: string, urlPath: string, body?: unknown): Promise<any> {
  const send = (): Promise<Response> => fetch(`${base}${urlPath}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  })
  // A kept-alive socket the server closed while this process sat in a synchronous wrk run is found dead on
  // reuse (`fetch failed`); a GET is safe to send again, on a new connection.
  const res = await send().catch((error: unknown) => {
    if (method !== 'GET') throw error
    return send()
  })
  const text = await res.text()
  if (res.status >= 300) throw new Error(`${method} ${urlPath}: ${res.status} ${text.slice(0, 500)}`)
  return text === '' ? undefined : JSON.parse(text)
}

/** One request that must answer `status`; its body. */
export async function expectStatus(what: string, url: string, init: RequestInit, status: number): Promise<string> {
  const res = await fetch(url, init)
  const text = await res.text()
  if (res.status !== status) throw new Error(`${what}: ${init.method ?? 'GET'} ${url} answered ${res.status}, expected ${status}: ${text.slice(0, 300)}`)
  return text
}

export interface OrgWithAgent {
  orgId: string
  /** The org's API key. */
  orgKey: string
  /** The agent's DID and its IAL-0 authority badge. */
  did: string
  token: string
}

/**
 * An organization named `name` with one agent on `domain` and its badge, and the org policy `policy`
 * (YAML, given the agent's DID) proposed and approved, so the embedded PDP walks real rules.
 */
export async function createOrgWithAgent(adminUrl: string, operatorKey: string, name: string, domain: string, policy: (did: string) => string): Promise<OrgWithAgent> {
  const org = await call(adminUrl, operatorKey, 'POST', '/v1/orgs', { name })
  const orgId = org.data.org.id as string
  const orgKey = org.data.apiKey.key as string
  const agent = await call(adminUrl, orgKey, 'POST', '/v1/agents', { name: `${name}-agent`, domain })
  const badge = await call(adminUrl, orgKey, 'POST', `/v1/agents/${agent.data.id as string}/badge`, { domain, ttl: 3600 })
  const did = badge.data.subject as string
  const proposal = await call(adminUrl, orgKey, 'POST', `/v1/orgs/${orgId}/policy/org`, { yaml_content: policy(did) })
  await call(adminUrl, orgKey, 'POST', `/v1/orgs/${orgId}/policy/proposals/${proposal.id as string}/approve`)
  return { orgId, orgKey, did, token: badge.data.token as string }
}

/** The benchmarks' HTTP policy: the bench agent allowed on GET /bench/**, optionally under a rate limit too high to bite. */
export const benchPolicy = (did: string, rateLimited: boolean): string => [
  'version: "1"',
  'denied_dids: ["did:web:blocked.example.com", "did:web:revoked.example.org"]',
  `allowed_dids: ["${did}", "did:web:partner.example.com"]`,
  ...(rateLimited ? ['rate_limits:', `  - did: "${did}"`, '    rpm: 100000000'] : []),
  'operations:',
  '  - pattern: "GET /bench/**"',
  `    allowed_dids: ["${did}"]`,
  '  - pattern: "POST /bench/orders/*"',
  '    min_trust_level: OV',
  '  - pattern: "DELETE /**"',
  '    min_trust_level: EV',
  '  - pattern: "* /admin/**"',
  '    min_trust_level: EV',
  '    denied_dids: ["did:web:partner.example.com"]',
  '',
].join('\n')
