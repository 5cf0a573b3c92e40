/**
 * The check services against bare servers of the same kind that answer every check with an allow
 * (docs/ext-authz.md, docs/performance.md "The check services"):
 *
 *   node dist/bench/ext-authz.js [--duration 10] [--connections 50] [--grpc-connections 4] [--streams 16]
 *
 * Pinned: every server under test (the appliance with its gRPC and HTTP check services, the bare HTTP
 * server, the bare gRPC server) on CPU 1 through taskset, one at a time under load; the load generators,
 * both C programs from Debian, on CPU 0: wrk for HTTP and h2load (nghttp2-client) for gRPC, sending one
 * encoded CheckRequest as gRPC's length-prefixed message on --streams streams of each of --grpc-connections
 * connections. h2load sees only the HTTP status, so the appliance's check counter (its /metrics) must have
 * counted an allow for every call h2load completed. The appliance runs badge-only (no PDP: the verified badge is the decision),
 * its request log at info into a file, and decides a plain HTTP route; the bare servers answer what an
 * allow answers (the same headers) without reading anything. Ports 44021-44026.
 */
import { execFile, execFileSync, spawn } from 'node:child_process'
import { createServer } from 'node:http'
import { mkdtempSync, openSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import * as grpc from '@grpc/grpc-js'
import { generateApiKeySecret } from '../src/core/api-key.js'
import { authorizationService, loadExtAuthzDefinition } from '../src/gateway/check/grpc.js'
import { children, runMain, track } from './children.js'

const GRPC_CHECK = 44021
const HTTP_CHECK = 44022
const BARE_HTTP = 44023
const BARE_GRPC = 44024
const ADMIN = 44025
const GATEWAY = 44026
const SELF = fileURLToPath(import.meta.url)
const CLI = path.join(path.dirname(SELF), '..', 'src', 'cli', 'index.js')

function arg(name: string, fallback: number): number {
  const at = process.argv.indexOf(`--${name}`)
  return at < 0 ? fallback : Number(process.argv[at + 1])
}

const ALLOW_HEADERS = ['x-service-subject', 'did:web:bench.example:agent', 'x-service-issuer', 'http://registry.test', 'x-service-trust-level', '1', 'x-service-badge-jti', 'bench-jti', 'x-service-txn', 'txn-bench']

/** The bare HTTP server: 200 and the identity headers, nothing read. */
function bareHttp(): void {
  const headers: Record<string, string> = { 'cache-control': 'no-store', 'content-length': '0' }
  for (let i = 0; i < ALLOW_HEADERS.length; i += 2) headers[ALLOW_HEADERS[i]!] = ALLOW_HEADERS[i + 1]!
  createServer({ keepAlive: true }, (_req, res) => {
    res.writeHead(200, headers)
    res.end()
  }).listen(BARE_HTTP, '127.0.0.1', () => process.stdout.write('ready\n'))
}

/** The bare gRPC server: the same definitions, an OkHttpResponse with the identity headers for every call. */
function bareGrpc(): void {
  const answer = {
    status: { code: 0 },
    ok_response: {
      headers: Array.from({ length: ALLOW_HEADERS.length / 2 }, (_, i) => ({ header: { key: ALLOW_HEADERS[2 * i]!, value: ALLOW_HEADERS[2 * i + 1]! }, append_action: 2 })),
      headers_to_remove: ['x-service-breakglass'],
    },
  }
  const server = new grpc.Server()
  server.addService(authorizationService(loadExtAuthzDefinition()), { Check: (_call: unknown, callback: grpc.sendUnaryData<object>) => callback(null, answer) })
  server.bindAsync(`127.0.0.1:${BARE_GRPC}`, grpc.ServerCredentials.createInsecure(), () => process.stdout.write('ready\n'))
}

/** Starts `args` on CPU 1 and waits for `ready` (a bare server) or for the port to answer. */
async function startPinned(args: string[], env: NodeJS.ProcessEnv, ready: () => Promise<boolean>, logFile?: string): Promise<void> {
  const out = logFile === undefined ? 'pipe' : openSync(logFile, 'a')
  const proc = spawn('taskset', ['-c', '1', process.execPath, ...args], { env, stdio: ['ignore', out, 'inherit'] })
  if (logFile === undefined) proc.stdout?.resume()
  children.add(track(proc))
  const deadline = Date.now() + 60_000
  while (!(await ready())) {
    if (proc.exitCode !== null || Date.now() > deadline) throw new Error(`${args.join(' ')} did not start`)
    await new Promise((r) => setTimeout(r, 100))
  }
}

const answers = (url: string, init?: RequestInit): (() => Promise<boolean>) => async () => {
  try {
    await (await fetch(url, init)).arrayBuffer()
    return true
  } catch {
    return false
  }
}

function wrk(url: string, token: string, seconds: number, connections: number): Promise<{ rps: number; p50: string; p99: string }> {
  return new Promise((resolve, reject) => {
    execFile('taskset', ['-c', '0', 'wrk', '-t1', `-c${connections}`, `-d${seconds}s`, '--latency', '-H', `authorization: Bearer ${token}`, url], { timeout: (seconds + 30) * 1000 }, (error, stdout) => {
      if (error !== null) return reject(error)
      const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(stdout)?.[1])
      const p50 = /\s50%\s+(\S+)/.exec(stdout)?.[1] ?? '?'
      const p99 = /\s99%\s+(\S+)/.exec(stdout)?.[1] ?? '?'
      const non2xx = /Non-2xx or 3xx responses: (\d+)/.exec(stdout)?.[1]
      if (non2xx !== undefined) return reject(new Error(`${url}: ${non2xx} refusals under load`))
      resolve({ rps, p50, p99 })
    })
  })
}

function checkRequest(token: string): object {
  return { attributes: { request: { http: { method: 'GET', path: '/api/bench', host: '127.0.0.1', headers: { authorization: `Bearer ${token}` } } } } }
}

/** One Check through @grpc/grpc-js, which must answer an allow (status code 0). */
async function grpcAllows(port: number, token: string): Promise<boolean> {
  const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure())
  const definition = authorizationService(loadExtAuthzDefinition()).Check!
  try {
    return await new Promise<boolean>((resolve) => {
      client.makeUnaryRequest(definition.path, definition.requestSerialize, definition.responseDeserialize, checkRequest(token), { deadline: Date.now() + 2000 }, (error, answer) => {
        resolve((error === null || error === undefined) && ((answer as { status?: { code?: number } }).status?.code ?? 0) === 0)
      })
    })
  } finally {
    client.close()
  }
}

/** h2load on CPU 0: the encoded Check as a gRPC message (flag byte, 4-byte length, protobuf) in every POST. */
function h2load(port: number, token: string, dir: string, seconds: number, connections: number, streams: number): Promise<{ rps: number; p50: string; p99: string; done: number }> {
  const definition = authorizationService(loadExtAuthzDefinition()).Check!
  const message = definition.requestSerialize(checkRequest(token))
  const frame = Buffer.alloc(5 + message.length)
  frame.writeUInt32BE(message.length, 1)
  message.copy(frame, 5)
  const body = path.join(dir, 'check-request.bin')
  writeFileSync(body, frame)
  return new Promise((resolve, reject) => {
    execFile('taskset', ['-c', '0', 'h2load', '-t1', `-c${connections}`, `-m${streams}`, `-D${seconds}`, '--warm-up-time=2', '-d', body,
      '-H', 'content-type: application/grpc', '-H', 'te: trailers', `http://127.0.0.1:${port}${definition.path}`], { timeout: (seconds + 30) * 1000 }, (error, stdout) => {
      if (error !== null) return reject(error)
      const rps = Number(/finished in [\d.]+s, ([\d.]+) req\/s/.exec(stdout)?.[1])
      const done = /requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed, (\d+) errored/.exec(stdout)
      const mean = /time for request:\s+\S+\s+\S+\s+(\S+)/.exec(stdout)?.[1] ?? '?'
      if (done === null || !(rps > 0)) return reject(new Error(`h2load on port ${port}: no result\n${stdout}`))
      if (done[2] !== '0' || done[3] !== '0') return reject(new Error(`h2load on port ${port}: ${done[2]} failed, ${done[3]} errored`))
      // h2load reports a mean and no percentiles.
      resolve({ rps, p50: `mean ${mean}`, p99: '', done: Number(done[1]) })
    })
  })
}

/** The appliance's count of allowed gRPC checks (service_gateway_checks_total). */
async function grpcAllowsCounted(): Promise<number> {
  const text = await (await fetch(`http://127.0.0.1:${ADMIN}/metrics`)).text()
  const line = text.split('\n').find((l) => l.startsWith('service_gateway_checks_total{') && l.includes('proxy="envoy-grpc"') && l.includes('decision="ALLOW"') && l.includes('status_class="2xx"'))
  return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1))
}

async function main(): Promise<void> {
  if (process.argv.includes('--serve-bare-http')) return bareHttp()
  if (process.argv.includes('--serve-bare-grpc')) return bareGrpc()
  // This process (probes, metrics) stays on CPU 0, beside the load generators, away from the servers under test.
  execFileSync('taskset', ['-cp', '0', String(process.pid)], { stdio: 'ignore' })
  const seconds = arg('duration', 10)
  const connections = arg('connections', 50)
  const grpcConnections = arg('grpc-connections', 4)
  const streams = arg('streams', 16)
  execFileSync('h2load', ['--version'], { stdio: 'ignore' })
  const dir = mkdtempSync(path.join(tmpdir(), 'bench-ext-authz-'))
  const operatorKey = generateApiKeySecret()
  await startPinned([CLI, 'serve'], {
    PATH: process.env.PATH, HOME: process.env.HOME, DATABASE_URL: 'memory://', SERVICE_DATA_DIR: dir, PORT: String(ADMIN),
    SERVICE_GATEWAY_PORT: String(GATEWAY), SERVICE_HOST: '127.0.0.1', SERVICE_BOOTSTRAP_API_KEY: operatorKey, CA_ISSUER_URL: 'http://registry.test',
    SERVICE_UPSTREAM_URL: 'http://127.0.0.1:9', SERVICE_CHECK_GRPC_PORT: String(GRPC_CHECK), SERVICE_CHECK_HTTP_PORT: String(HTTP_CHECK),
    SERVICE_CHECK_HTTP_PROXIES: 'envoy', SERVICE_LOG_LEVEL: 'info',
  }, answers(`http://127.0.0.1:${HTTP_CHECK}/envoy/`), path.join(dir, 'appliance.log'))
  const admin = async (method: string, urlPath: string, body: unknown): Promise<any> => {
    const res = await fetch(`http://127.0.0.1:${ADMIN}${urlPath}`, { method, headers: { authorization: `Bearer ${operatorKey}`, 'content-type': 'application/json' }, body: JSON.stringify(body) })
    return res.json()
  }
  const agent = await admin('POST', '/v1/agents', { name: 'bench-agent', domain: 'example.com' })
  const badge = await admin('POST', `/v1/agents/${agent.data.id}/badge`, { domain: 'example.com' })
  const token = badge.data.token as string
  await startPinned([SELF, '--serve-bare-http'], { PATH: process.env.PATH }, answers(`http://127.0.0.1:${BARE_HTTP}/`))
  await startPinned([SELF, '--serve-bare-grpc'], { PATH: process.env.PATH }, async () => grpcAllows(BARE_GRPC, token))
  if (!(await grpcAllows(GRPC_CHECK, token))) throw new Error('the gRPC check service does not allow the bench badge')

  const rows: [string, { rps: number; p50: string; p99: string }][] = []
  rows.push(['HTTP: bare server (allow)', await wrk(`http://127.0.0.1:${BARE_HTTP}/envoy/api/bench`, token, seconds, connections)])
  rows.push(['HTTP: check service, Envoy HTTP mode', await wrk(`http://127.0.0.1:${HTTP_CHECK}/envoy/api/bench`, token, seconds, connections)])
  rows.push(['gRPC: bare server (allow)', await h2load(BARE_GRPC, token, dir, seconds, grpcConnections, streams)])
  const allowedBefore = await grpcAllowsCounted()
  const checked = await h2load(GRPC_CHECK, token, dir, seconds, grpcConnections, streams)
  const allowed = await grpcAllowsCounted() - allowedBefore
  if (allowed < checked.done) throw new Error(`the gRPC check service allowed ${allowed} checks of the ${checked.done} h2load completed`)
  rows.push(['gRPC: check service', checked])
  process.stdout.write(`| configuration | req/s | p50 | p99 |\n|---|---|---|---|\n${rows.map(([name, r]) => `| ${name} | ${Math.round(r.rps)} | ${r.p50} | ${r.p99} |`).join('\n')}\n`)
  process.stdout.write(`HTTP check / bare: ${(rows[1]![1].rps / rows[0]![1].rps).toFixed(2)}; gRPC check / bare: ${(rows[3]![1].rps / rows[2]![1].rps).toFixed(2)}\n`)
  for (const child of children) await child.stop()
}

runMain('ext-authz bench', main)
