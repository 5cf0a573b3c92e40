/**
 * Misconfiguration fails closed and loud, and shutdown is not cut short, through the CLI as an
 * operator runs it:
 * - the embedded PDP on a workspace that does not exist: the start-up log names the cause, /readyz is
 *   503 with the reason, and the mode table's "PDP unavailable" row applies in all four modes (one
 *   route per mode); a gateway-only process with the same workspace refuses to start;
 * - an unknown SERVICE_* variable is logged with the likely name;
 * - a second SIGTERM (and a SIGINT) during the drain is ignored: the slow in-flight request gets the
 *   upstream's answer and the process exits 0.
 */
import t from 'tap'
import { spawn } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { agentWithBadge, CLI, startService } from '../helpers/appliance.js'
import { startUpstream } from '../helpers/upstream-server.js'

t.setTimeout(180_000)

const dataDir = mkdtempSync(path.join(tmpdir(), 'svc-e2e-misconfig-'))
const upstream = await startUpstream(t)
const routesFile = path.join(dataDir, 'routes.json')
const MODES = ['EM-OBSERVE', 'EM-GUARD', 'EM-DELEGATE', 'EM-STRICT'] as const
writeFileSync(routesFile, JSON.stringify({
  routes: MODES.map((mode) => ({ prefix: `/${mode.toLowerCase()}`, upstream: upstream.url, mode })),
}))
const missingWorkspace = randomUUID()
const appliance = await startService(t, {
  SERVICE_DATA_DIR: dataDir,
  SERVICE_ROUTES_FILE: routesFile,
  SERVICE_EMBEDDED_PDP: 'true',
  SERVICE_WORKSPACE: missingWorkspace,
  SERVICE_ENFORCEMENT_MODE: 'EM-STRICT',
  SERVICE_UPSTREAM: upstream.url,
})
const gw = appliance.gatewayUrl as string
const agent = await agentWithBadge(appliance.adminUrl, appliance.operatorKey, 'misconfig-agent')

async function call(urlPath: string, txn: string): Promise<{ status: number; json: any; text: string }> {
  const res = await fetch(`${gw}${urlPath}`, { headers: { authorization: `Bearer ${agent.token}`, 'x-service-txn': txn } })
  const text = await res.text()
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch {
    json = undefined
  }
  return { status: res.status, json, text }
}

async function pollUntil<T>(ms: number, fn: () => T | undefined): Promise<T | undefined> {
  const deadline = Date.now() + ms
  for (;;) {
    const value = fn()
    if (value !== undefined || Date.now() > deadline) return value
    await new Promise((r) => setTimeout(r, 50))
  }
}

t.test('the start-up log names the missing workspace, and the unknown variable with its likely name', async (t) => {
  const error = appliance.logLines().find((l) => l.msg === 'embedded PDP has no bundle; the gateway treats the PDP as unavailable until one is built')
  t.ok(error !== undefined, 'an error line at start')
  t.match(error, { level: 50, reason: 'workspace_not_found', workspace: missingWorkspace })
  const unknown = appliance.logLines().find((l) => l.msg === 'unknown configuration variable ignored')
  t.match(unknown, { level: 40, variable: 'SERVICE_UPSTREAM', suggestion: 'SERVICE_UPSTREAM_URL' })
  t.notMatch(appliance.output(), /\n\s+at /, 'no stack trace')
})

t.test('/readyz is 503 with the reason while there is no bundle', async (t) => {
  const res = await fetch(`${appliance.adminUrl}/readyz`)
  const body = await res.json() as any
  t.equal(res.status, 503)
  t.equal(body.status, 'not_ready')
  t.equal(body.checks.gateway, false)
  t.equal(body.reasons.gateway.code, 'workspace_not_found')
  t.match(body.reasons.gateway.message, missingWorkspace)
  t.equal((await fetch(`${appliance.adminUrl}/healthz`)).status, 200, 'alive all the same')
})

t.test('the mode table\'s "PDP unavailable" row in all four modes', async (t) => {
  for (const mode of MODES) {
    const route = `/${mode.toLowerCase()}/resource`
    const txn = `misconfig-${mode}`
    const before = upstream.requests.length
    const res = await call(route, txn)
    const line = await pollUntil(5000, () => appliance.logLines().find((l) => l.msg === 'gateway request' && l.txn_id === txn))
    if (mode === 'EM-OBSERVE') {
      t.equal(res.status, 200, `${mode}: the request proceeds`)
      t.equal(upstream.requests.length, before + 1, `${mode}: it reached the upstream`)
      t.match(line, { mode, 'service.policy.decision': 'ALLOW_OBSERVE', 'service.policy.error_code': 'PDP_UNAVAILABLE' }, `${mode}: annotated as observed with the PDP unavailable`)
    } else {
      t.equal(res.status, 503, `${mode}: refused`)
      t.same(Object.keys(res.json ?? {}).sort(), ['error', 'message'], `${mode}: the documented error shape`)
      t.equal(res.json?.error, 'PDP_UNAVAILABLE', `${mode}: PDP_UNAVAILABLE`)
      t.equal(upstream.requests.length, before, `${mode}: nothing reached the upstream`)
      t.match(line, { mode, 'service.policy.error_code': 'PDP_UNAVAILABLE', status: 503 }, `${mode}: logged`)
    }
  }
})

t.test('a gateway-only process with the same workspace refuses to start and says why', async (t) => {
  const child = spawn(process.execPath, [CLI, 'gateway'], {
    env: {
      PATH: process.env.PATH,
      PORT: '0',
      SERVICE_GATEWAY_PORT: '0',
      SERVICE_HOST: '127.0.0.1',
      SERVICE_REGISTRY_URL: appliance.adminUrl,
      SERVICE_REGISTRY_KEY: appliance.operatorKey,
      SERVICE_UPSTREAM_URL: upstream.url,
      SERVICE_EMBEDDED_PDP: 'true',
      SERVICE_WORKSPACE: missingWorkspace,
      SERVICE_ENFORCEMENT_MODE: 'EM-STRICT',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let out = ''
  child.stdout.on('data', (chunk) => { out += String(chunk) })
  child.stderr.on('data', (chunk) => { out += String(chunk) })
  t.teardown(() => { if (child.exitCode === null) child.kill('SIGKILL') })
  const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)))
  t.ok(code !== 0 && code !== null, `non-zero exit (${String(code)})`)
  t.match(out, `bundle: GET /v1/bundles/${missingWorkspace} answered 404 (org_not_found)`, 'names the bundle the registry does not have')
  t.notMatch(out, /"msg":"gateway listening"/, 'never listened')
  t.notMatch(out, appliance.operatorKey, 'the key is not printed')
})

t.test('a second SIGTERM and a SIGINT during the drain are ignored; the slow request completes; exit 0', async (t) => {
  let arrived: () => void = () => {}
  const reached = new Promise<void>((resolve) => { arrived = resolve })
  upstream.handler = (request, res) => {
    if (!request.url.endsWith('/slow')) return false
    arrived()
    setTimeout(() => {
      res.writeHead(200, { 'content-type': 'text/plain' })
      res.end('the upstream did the work')
    }, 1500)
    return true
  }
  const pending = call('/em-observe/slow', 'misconfig-slow')
  await reached
  appliance.child.kill('SIGTERM')
  await new Promise((r) => setTimeout(r, 200))
  appliance.child.kill('SIGTERM')
  await new Promise((r) => setTimeout(r, 100))
  appliance.child.kill('SIGINT')
  const res = await pending
  t.equal(res.status, 200, 'the in-flight request got its answer')
  t.equal(res.text, 'the upstream did the work', 'the upstream\'s answer')
  t.equal(await appliance.exited, 0, 'the process exited 0')
  const ignored = appliance.logLines().filter((l) => l.msg === 'already shutting down; signal ignored (in-flight requests keep their grace period; SIGKILL stops at once)')
  t.same(ignored.map((l) => l.signal), ['SIGTERM', 'SIGINT'], 'both repeated signals logged')
})
