/**
 * Break-glass overrides (docs/wire-contract.md §11) end to end: the key pair and tokens come from the real
 * `agent-trust breakglass keygen` / `issue` commands (as an operator would make them), the odd tokens
 * (expired, another key, too long-lived) from `signBreakglassToken`; the gateway is the real
 * `agent-trust serve` process in EM-STRICT behind a PDP that denies everything, so only an accepted
 * override can get a request through.
 *
 * Processes: `gateway` (with SERVICE_BREAKGLASS_PUBLIC_KEY) and `keyless` (without), started in
 * parallel and reused; plus two start-ups that must fail (a private key as the public key file), started
 * at the same time so their start-up overlaps.
 */
import t, { type Test } from 'tap'
import { execFile, spawn } from 'node:child_process'
import { createPrivateKey, generateKeyPairSync, randomUUID, type KeyObject } from 'node:crypto'
import { mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { signBreakglassToken, type BreakglassClaims } from '../../src/core/breakglass.js'
import { agentWithBadge, CLI, startService, type RunningService, exitSafeTeardown, SLOW_START } from '../helpers/appliance.js'
import { startPdpServer } from '../helpers/pdp-server.js'
import { startUpstream } from '../helpers/upstream-server.js'

const RUN = randomUUID().slice(0, 8)
// Two appliance start-ups on a busy 2-core machine can exceed tap's 30 s default when run with plain node.
t.setTimeout(240_000)

const tracked = exitSafeTeardown(t)
const START = SLOW_START
const dir = mkdtempSync(path.join(tmpdir(), 'svc-e2e-breakglass-'))
const privateFile = path.join(dir, 'breakglass.key')
const publicFile = path.join(dir, 'breakglass.pub')

interface CliResult {
  code: number | null
  stdout: string
  stderr: string
}

/** Runs `agent-trust <args>` with a minimal environment and returns its exit code and output. */
function cli(args: string[]): Promise<CliResult> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { env: { PATH: process.env.PATH, HOME: process.env.HOME }, timeout: 20_000 }, (error, stdout, stderr) => {
      const code = error === null ? 0 : typeof error.code === 'number' ? error.code : null
      resolve({ code, stdout: String(stdout), stderr: String(stderr) })
    })
  })
}

const keygen = await cli(['breakglass', 'keygen', '--private', privateFile, '--public', publicFile])
t.equal(keygen.code, 0, 'breakglass keygen exits 0')
t.match(keygen.stdout, 'SERVICE_BREAKGLASS_PUBLIC_KEY', 'and says where the public key goes')
t.equal(statSync(privateFile).mode & 0o777, 0o600, 'the private key file is owner-only')
t.match(readFileSync(publicFile, 'utf8'), /^-----BEGIN PUBLIC KEY-----/, 'the public key is an SPKI PEM')
const privateKey: KeyObject = createPrivateKey(readFileSync(privateFile, 'utf8'))

const upstream = await startUpstream(t)
const pdp = await startPdpServer(t)
// Everything is denied: a forwarded request can only have come through an override.
pdp.respond({ decision: 'DENY', decision_id: `deny-${RUN}` })

/**
 * Runs `agent-trust <command>` until it exits by itself (or 120 s pass: -1) and returns its exit code and
 * output; for start-ups that must fail. Started early so its start-up overlaps the others'.
 */
function runUntilExit(command: 'serve' | 'gateway', extraEnv: Record<string, string>): Promise<{ code: number | null; out: string }> {
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH, HOME: process.env.HOME, PORT: '0', SERVICE_GATEWAY_PORT: '0', SERVICE_HOST: '127.0.0.1',
    SERVICE_DATA_DIR: mkdtempSync(path.join(tmpdir(), 'svc-e2e-bad-bg-')), SERVICE_UPSTREAM_URL: upstream.url,
    SERVICE_ENFORCEMENT_MODE: 'EM-STRICT', ...extraEnv,
  }
  const child = spawn(process.execPath, [CLI, command], { env, stdio: ['ignore', 'pipe', 'pipe'] })
  tracked.teardown(() => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL') })
  let out = ''
  child.stdout.on('data', (chunk) => { out += String(chunk) })
  child.stderr.on('data', (chunk) => { out += String(chunk) })
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve({ code: -1, out }), 120_000)
    child.on('exit', (code) => { clearTimeout(timer); resolve({ code, out }) })
  })
}

// A private key where the public key belongs: PEM (the appliance) and JWK with "d" (a gateway-only
// process; it fails before contacting the registry, so the registry address need not answer).
const privateJwkFile = path.join(dir, 'private.jwk')
writeFileSync(privateJwkFile, JSON.stringify(privateKey.export({ format: 'jwk' })))
const badServe = runUntilExit('serve', { DATABASE_URL: 'memory://', SERVICE_BREAKGLASS_PUBLIC_KEY: privateFile })
const badGateway = runUntilExit('gateway', {
  SERVICE_REGISTRY_URL: 'http://127.0.0.1:9', SERVICE_REGISTRY_KEY: `sk_${'a'.repeat(43)}`, SERVICE_BREAKGLASS_PUBLIC_KEY: privateJwkFile,
})

const common = { SERVICE_UPSTREAM_URL: upstream.url, SERVICE_PDP_ENDPOINT: pdp.url, SERVICE_PDP_TIMEOUT_MS: '300', SERVICE_ENFORCEMENT_MODE: 'EM-STRICT', SERVICE_PEP_ID: 'pep-breakglass' }
const [gateway, keyless] = await Promise.all([
  startService(tracked, { ...common, SERVICE_BREAKGLASS_PUBLIC_KEY: publicFile }, START),
  startService(tracked, common, START),
])

/** Mints a token with the CLI, as an operator would. */
async function issue(extra: string[] = []): Promise<string> {
  const result = await cli(['breakglass', 'issue', '--key', privateFile, '--sub', 'oncall@example.com', '--reason', `incident ${RUN}`, ...extra])
  if (result.code !== 0) throw new Error(`breakglass issue failed (${result.code}): ${result.stderr}`)
  return result.stdout.trim()
}

const claimsOf = (token: string): BreakglassClaims =>
  JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString('utf8')) as BreakglassClaims

// Tokens minted by the CLI, in parallel with the agents' set-up (each CLI run takes a while to load).
const [agent, keylessAgent, opsToken, anyToken] = await Promise.all([
  agentWithBadge(gateway.adminUrl, gateway.operatorKey, 'breakglass-agent'),
  agentWithBadge(keyless.adminUrl, keyless.operatorKey, 'keyless-agent'),
  issue(['--ttl', '600', '--methods', 'GET', '--routes', '/ops']),
  issue(),
])

function mint(overrides: Partial<BreakglassClaims>, key: KeyObject = privateKey): string {
  const now = Math.floor(Date.now() / 1000)
  return signBreakglassToken({
    jti: randomUUID(), iat: now, exp: now + 600, iss: 'e2e', sub: 'oncall@example.com', reason: 'incident',
    scope: { methods: ['*'], routes: ['*'] }, ...overrides,
  }, key)
}

let sequence = 0
const newTxn = (): string => `bg-${RUN}-${++sequence}`

async function send(
  service: RunningService, urlPath: string,
  options: { badge?: string | null; breakglass?: string; method?: string; txn?: string },
): Promise<{ status: number; body: any; headers: Headers }> {
  const headers: Record<string, string> = {}
  const badge = options.badge === undefined ? agent.token : options.badge
  if (badge !== null) headers.authorization = `Bearer ${badge}`
  if (options.breakglass !== undefined) headers['x-service-breakglass'] = options.breakglass
  if (options.txn !== undefined) headers['x-service-txn'] = options.txn
  const res = await fetch(`${service.gatewayUrl}${urlPath}`, { method: options.method ?? 'GET', headers })
  const text = await res.text()
  let body: unknown = text
  try {
    body = JSON.parse(text)
  } catch {
    // keep the text
  }
  return { status: res.status, body, headers: res.headers }
}

async function waitLog(service: RunningService, match: (line: Record<string, unknown>) => boolean): Promise<Record<string, unknown>> {
  const deadline = Date.now() + 10_000
  for (;;) {
    const line = service.logLines().find(match)
    if (line !== undefined) return line
    if (Date.now() > deadline) return {}
    await new Promise((r) => setTimeout(r, 25))
  }
}
const requestLog = (service: RunningService, txn: string): Promise<Record<string, unknown>> =>
  waitLog(service, (l) => l.msg === 'gateway request' && l.txn_id === txn)
/** The "ignored" line of the request with this transaction id (joined on request_id). */
async function ignoredLog(service: RunningService, txn: string): Promise<Record<string, unknown>> {
  const request = await requestLog(service, txn)
  return waitLog(service, (l) => typeof l.msg === 'string' && l.msg.startsWith('break-glass token ignored') && l.request_id === request.request_id)
}
const upstreamHits = (urlPath: string): number => upstream.requests.filter((r) => r.url === urlPath).length

t.test('without a token the PDP DENY is enforced (the baseline)', async (t) => {
  const res = await send(gateway, '/ops/baseline', {})
  t.equal(res.status, 403)
  t.equal(res.body?.error, 'POLICY_DENIED')
  t.equal(upstreamHits('/ops/baseline'), 0)
})

t.test('a valid, in-scope token from `breakglass issue` overrides a DENY in EM-STRICT', async (t) => {
  const token = opsToken
  const claims = claimsOf(token)
  t.equal(claims.exp - claims.iat, 600, 'the CLI honours --ttl')
  t.same(claims.scope, { methods: ['GET'], routes: ['/ops'] }, 'and the scope options')
  t.equal(claims.reason, `incident ${RUN}`)

  const pdpBefore = pdp.requests.length
  const txn = newTxn()
  const urlPath = '/ops/restart?now=1'
  const res = await send(gateway, urlPath, { breakglass: token, txn })
  t.equal(res.status, 200, 'forwarded despite the DENYing PDP')
  t.equal(pdp.requests.length, pdpBefore, 'the PDP was not called')
  const seen = upstream.requests.find((r) => r.url === urlPath)
  t.ok(seen, 'the upstream received the request')
  t.equal(seen?.headers['x-service-breakglass'], undefined, 'the upstream does not receive X-Service-Breakglass')
  t.equal(seen?.headers['x-service-subject'], agent.did, 'it still receives the verified identity')

  const log = await requestLog(gateway, txn)
  t.equal(log['service.policy.override'], true, 'log: service.policy.override true')
  t.equal(log.override_jti, claims.jti, 'log: override_jti')
  t.equal(log['service.policy.decision_id'], `breakglass:${claims.jti}`, 'log: decision id breakglass:<jti>')
  t.equal(log['service.policy.decision'], 'ALLOW', 'log: decision ALLOW')
  t.equal(log.agent_did, agent.did, 'log: the badge subject is still recorded')
  t.notOk(gateway.output().includes(token), 'the token itself is never logged')

  // Inside the scope: a deeper path and the prefix itself; the method compares case-insensitively.
  t.equal((await send(gateway, '/ops', { breakglass: token })).status, 200, 'the route prefix itself is in scope')
  t.equal((await send(gateway, '/ops/a/b', { breakglass: token })).status, 200, 'a deeper path is in scope')
})

t.test('a badge is still required with a valid token', async (t) => {
  const token = anyToken
  const pdpBefore = pdp.requests.length
  const res = await send(gateway, '/ops/no-badge', { badge: null, breakglass: token })
  t.equal(res.status, 401, '401 without a badge')
  t.equal(res.body?.error, 'BADGE_MISSING')
  t.equal(upstreamHits('/ops/no-badge'), 0, 'nothing forwarded')
  t.equal(pdp.requests.length, pdpBefore, 'and nothing asked')
  const forged = await send(gateway, '/ops/bad-badge', { badge: 'not.a.badge', breakglass: token })
  t.equal(forged.status, 401, 'an invalid badge is not rescued by the token either')
})

/** An ignored token: normal evaluation runs (the PDP is asked and its DENY answered) and the reason is logged. */
async function expectIgnored(
  t: Test, label: string, urlPath: string, token: string, reason: string, method = 'GET',
): Promise<void> {
  const pdpBefore = pdp.requests.length
  const txn = newTxn()
  const res = await send(gateway, urlPath, { breakglass: token, txn, method })
  t.equal(res.status, 403, `${label}: normal evaluation answers 403`)
  t.equal(res.body?.error, 'POLICY_DENIED', `${label}: POLICY_DENIED`)
  t.equal(res.headers.get('x-service-decision-id'), `deny-${RUN}`, `${label}: the PDP's decision id, not an override`)
  t.ok(pdp.requests.length > pdpBefore, `${label}: the PDP was asked`)
  t.equal(upstreamHits(urlPath), 0, `${label}: nothing forwarded`)
  const log = await requestLog(gateway, txn)
  t.equal(log['service.policy.override'], false, `${label}: no override in the log`)
  t.equal(log.override_jti, undefined, `${label}: no override_jti`)
  const ignored = await ignoredLog(gateway, txn)
  t.equal(ignored.reason, reason, `${label}: logged as ignored (${reason})`)
}

t.test('tokens that must be ignored', async (t) => {
  const now = Math.floor(Date.now() / 1000)
  await expectIgnored(t, 'expired', '/ops/expired', mint({ iat: now - 1800, exp: now - 600 }), 'expired')
  await expectIgnored(t, 'another key', '/ops/other-key', mint({}, generateKeyPairSync('ed25519').privateKey), 'signature')
  await expectIgnored(t, 'lifetime over 1 h', '/ops/long', mint({ iat: now, exp: now + 3601 + 60 }), 'lifetime_too_long')
  const scoped = opsToken
  await expectIgnored(t, 'route out of scope', '/admin/x', scoped, 'out_of_scope')
  await expectIgnored(t, 'route prefix without a / boundary', '/opsx', scoped, 'out_of_scope')
  await expectIgnored(t, 'method out of scope', '/ops/post', scoped, 'out_of_scope', 'POST')
  await expectIgnored(t, 'garbage', '/ops/garbage', 'not-a-token', 'malformed')
})

t.test('a gateway without SERVICE_BREAKGLASS_PUBLIC_KEY ignores tokens', async (t) => {
  const token = anyToken
  const txn = newTxn()
  const res = await send(keyless, '/ops/keyless', { badge: keylessAgent.token, breakglass: token, txn })
  t.equal(res.status, 403, 'the PDP DENY stands')
  t.equal(res.body?.error, 'POLICY_DENIED')
  t.equal(upstreamHits('/ops/keyless'), 0, 'nothing forwarded')
  const log = await requestLog(keyless, txn)
  t.equal(log['service.policy.override'], false, 'no override')
  const warned = await waitLog(keyless, (l) => l.request_id === log.request_id && typeof l.msg === 'string' && l.msg.startsWith('break-glass token ignored'))
  t.ok(warned.msg, 'the ignored token is logged')
})

t.test('break-glass metrics count outcomes without identities', async (t) => {
  const text = await (await fetch(`${gateway.adminUrl}/metrics`)).text()
  t.match(text, /service_breakglass_total\{result="accepted"\} [1-9]/, 'accepted overrides counted')
  t.match(text, /service_breakglass_total\{result="out_of_scope"\} [1-9]/, 'ignored ones by reason')
  t.notMatch(text, 'did:', 'no DIDs')
})

t.test('`breakglass issue` and `keygen` usage errors', async (t) => {
  // Three runs only: each CLI start loads the whole service code, which is slow on a busy machine.
  const issueArgs = ['breakglass', 'issue', '--key', privateFile]
  const [noReason, tooLong, overwrite] = await Promise.all([
    cli([...issueArgs, '--sub', 'oncall@example.com']),
    cli([...issueArgs, '--sub', 'a', '--reason', 'r', '--ttl', '3601']),
    cli(['breakglass', 'keygen', '--private', privateFile, '--public', path.join(dir, 'other.pub')]),
  ])
  t.equal(noReason.code, 2, 'missing --reason: exit 2')
  t.match(noReason.stderr, '--reason', 'the message names --reason')
  t.equal(noReason.stdout, '', 'and no token is printed')
  t.equal(tooLong.code, 2, '--ttl over 3600: exit 2')
  t.equal(tooLong.stdout, '', 'no token')
  t.not(overwrite.code, 0, 'keygen refuses to overwrite an existing private key')
  t.equal(createPrivateKey(readFileSync(privateFile, 'utf8')).export({ format: 'pem', type: 'pkcs8' }), privateKey.export({ format: 'pem', type: 'pkcs8' }), 'which is unchanged')
})

t.test('a private key as SERVICE_BREAKGLASS_PUBLIC_KEY: the process refuses to start', async (t) => {
  for (const [label, run] of [['serve, PEM private key', badServe], ['gateway, JWK private key', badGateway]] as const) {
    const { code, out } = await run
    t.not(code, -1, `${label}: the process exits by itself`)
    t.not(code, 0, `${label}: with a non-zero exit code`)
    t.match(out, 'SERVICE_BREAKGLASS_PUBLIC_KEY', `${label}: the message names the variable`)
    t.match(out, /private key/i, `${label}: and says what is wrong with the file`)
    t.notMatch(out, 'gateway listening', `${label}: the gateway never listened`)
    t.notMatch(out, 'BEGIN PRIVATE KEY', `${label}: the key is not echoed`)
  }
})
