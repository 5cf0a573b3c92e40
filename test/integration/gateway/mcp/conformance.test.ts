/**
 * The MCP conformance suite (`@modelcontextprotocol/conformance`, all its server scenarios) run against
 * the suite's everything server directly and through the gateway (EM-GUARD, a policy that allows
 * everything): scenario by scenario the checks through the gateway end as they end directly, so the
 * gateway takes nothing away from a conformant server. `dns-rebinding-protection` passes both ways: the
 * gateway checks Host and Origin itself, as the server would. The suite's client cannot carry a badge, so a
 * proxy in this process adds one and passes every other header (Host, Origin) as sent.
 */
import t, { type Test } from 'tap'
import { spawn } from 'node:child_process'
import { generateKeyPairSync, type KeyObject } from 'node:crypto'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { createServer, request } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { buildBadgeClaims, signBadge } from '../../../../src/core/badge.js'
import { projectPath } from '../../../../src/core/paths.js'
import { startConformanceServer } from '../../../helpers/conformance-server.js'
import { GATEWAY_ISSUER, startProtocolGateway } from '../../../helpers/protocol-gateway.js'

t.setTimeout(600_000)

const key = generateKeyPairSync('ed25519')
const ALLOW_ALL = { min_trust_level: null, allowed_dids: null, denied_dids: [], rate_limits: [], operations: [], capability_classes: [], mcp_tools: [] }
const CLI = projectPath('node_modules', '@modelcontextprotocol', 'conformance', 'dist', 'index.js')
const PRELOAD = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'helpers', 'conformance-preload.js')

function badge(): string {
  const now = Math.floor(Date.now() / 1000)
  return signBadge(buildBadgeClaims({
    jti: 'jti-conformance', issuer: GATEWAY_ISSUER, subject: 'did:web:agents.example.com:conformance', issuedAt: now - 10, expiresAt: now + 3600, ial: '1', level: '2',
    domain: 'agents.example.com',
  }), { kid: 'k1', privateKey: key.privateKey as KeyObject })
}

/** Adds the badge to every request and passes everything else, Host and Origin included, as it came. */
async function startBadgeProxy(t: Test, gatewayUrl: string, token: string): Promise<string> {
  const target = new URL(gatewayUrl)
  const proxy = createServer((req, res) => {
    const out = request({ host: target.hostname, port: target.port, method: req.method, path: req.url, headers: { ...req.headers, authorization: `Bearer ${token}` } }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers)
      res.flushHeaders()
      answer.pipe(res)
    })
    out.on('error', () => res.destroy())
    res.on('close', () => out.destroy())
    req.pipe(out)
  })
  await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => {
    proxy.closeAllConnections()
    proxy.close(() => resolve())
  }))
  return `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`
}

interface Check {
  readonly id: string
  readonly status: string
  readonly errorMessage?: string
}

/** Runs every server scenario (the pending ones too) against `url` in a child process; the checks of each scenario by name. */
async function runSuite(t: Test, url: string): Promise<Map<string, Check[]>> {
  const out = mkdtempSync(path.join(tmpdir(), 'mcp-conformance-'))
  t.teardown(() => rmSync(out, { recursive: true, force: true }))
  const child = spawn(process.execPath, ['--import', PRELOAD, CLI, 'server', '--url', url, '-o', out, '--suite', 'all'], { stdio: ['ignore', 'pipe', 'pipe'], cwd: out })
  let log = ''
  child.stdout.on('data', (chunk: Buffer) => { log += chunk.toString('utf8') })
  child.stderr.on('data', (chunk: Buffer) => { log += chunk.toString('utf8') })
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve))
  const results = new Map<string, Check[]>()
  for (const dir of readdirSync(out)) {
    const scenario = dir.replace(/^server-/, '').replace(/-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z$/, '')
    results.set(scenario, JSON.parse(readFileSync(path.join(out, dir, 'checks.json'), 'utf8')) as Check[])
  }
  if (results.size === 0) t.fail(`the suite wrote no results (exit ${String(code)}): ${log.slice(-2000)}`)
  return results
}

/** What a scenario's result is: each check's id and outcome, in a stable order (informational checks aside). */
function outcome(checks: readonly Check[]): string[] {
  return checks.filter((check) => check.status !== 'INFO').map((check) => `${check.id}: ${check.status}`).sort()
}

t.test('the server scenarios end through the gateway as they end against the server', async (t) => {
  const serverUrl = await startConformanceServer(t)
  const gateway = await startProtocolGateway(t, {
    upstreamUrl: new URL(serverUrl).origin, authorityKey: key.publicKey, policy: ALLOW_ALL, env: { SERVICE_ENFORCEMENT_MODE: 'EM-GUARD' },
    routes: (pool) => [{ prefix: '/mcp', value: { upstream: pool, mode: 'EM-GUARD', protocol: 'mcp' } }],
  })
  const proxyUrl = await startBadgeProxy(t, gateway.url, badge())

  const started = performance.now()
  const direct = await runSuite(t, serverUrl)
  const through = await runSuite(t, `${proxyUrl}/mcp`)
  t.comment(`both runs took ${Math.round((performance.now() - started) / 1000)} s`)

  t.ok(direct.size >= 32, `the suite ran (${direct.size} scenarios)`)
  const failing = [...direct].filter(([, checks]) => checks.some((check) => check.status === 'FAILURE')).map(([scenario]) => scenario)
  t.comment(`scenarios that fail against the server itself: ${failing.length === 0 ? 'none' : failing.join(', ')}`)
  t.strictSame([...through.keys()].sort(), [...direct.keys()].sort(), 'the same scenarios ran both ways')
  for (const [scenario, checks] of direct) {
    const failures = (through.get(scenario) ?? []).filter((check) => check.status === 'FAILURE').map((check) => `${check.id}: ${check.errorMessage ?? ''}`)
    t.strictSame(outcome(through.get(scenario) ?? []), outcome(checks), `${scenario}: as against the server${failures.length === 0 ? '' : ` (${failures.join('; ')})`}`)
  }
  const rebinding = through.get('dns-rebinding-protection') ?? []
  t.ok(rebinding.length > 0 && rebinding.every((check) => check.status === 'SUCCESS'), 'dns-rebinding-protection passes through the gateway')
})
