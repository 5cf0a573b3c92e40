/**
 * The gateway's enforcement modes against an external, programmable PDP (docs/api.md §2.12 and §8,
 * docs/wire-contract.md §8, §9, §12, §13), run as a user would: the real `agent-trust serve` child process, a
 * recording upstream and a PDP server on loopback.
 *
 * Three appliance processes, started in parallel and reused by every subtest:
 * - `main`: one route per mode (`/observe`, `/guard`, `/delegate`, `/strict`; the process default is
 *   EM-STRICT, so a forwarding `/observe` also proves that a route's `mode` overrides it), the service
 *   PDP protocol, a 300 ms PDP time-out, `SERVICE_PEP_ID` and `SERVICE_WORKSPACE`.
 * - `opa`: `SERVICE_PDP_PROTOCOL=opa`, no `SERVICE_ENFORCEMENT_MODE` (the `/default` route shows the
 *   default mode), no `SERVICE_WORKSPACE`, and an EM-GUARD route to see an OPA DENY block.
 * - `badgeOnly`: the four routes and no PDP at all.
 *
 * PDP behaviour is set per subtest (subtests run one after the other). Decisions that change between
 * requests of one path use `ttl: 0`, and every case uses its own path, so the decision cache never
 * carries an answer from one case into another; rate-limit obligations use their own bucket key.
 * The "PDP down" cases close the main PDP server, so they run last.
 */
import t, { type Test } from 'tap'
import { randomUUID } from 'node:crypto'
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { agentWithBadge, startService, type RunningService, exitSafeTeardown, SLOW_START } from '../helpers/appliance.js'
import { startPdpServer, type PdpBehaviour, type PdpServer } from '../helpers/pdp-server.js'
import { startUpstream } from '../helpers/upstream-server.js'

type Mode = 'EM-OBSERVE' | 'EM-GUARD' | 'EM-DELEGATE' | 'EM-STRICT'
const MODES: readonly { prefix: string; mode: Mode }[] = [
  { prefix: '/observe', mode: 'EM-OBSERVE' },
  { prefix: '/guard', mode: 'EM-GUARD' },
  { prefix: '/delegate', mode: 'EM-DELEGATE' },
  { prefix: '/strict', mode: 'EM-STRICT' },
]
const PDP_TIMEOUT_MS = 300
const PEP_ID = 'pep-e2e-modes'
const WORKSPACE = randomUUID()
const RUN = randomUUID().slice(0, 8)
// Three appliance start-ups on a busy 2-core machine can exceed tap's 30 s default when run with plain node.
t.setTimeout(240_000)

const tracked = exitSafeTeardown(t)
const START = SLOW_START

const upstream = await startUpstream(t)
const pdp = await startPdpServer(t)
const opaPdp = await startPdpServer(t)

const dir = mkdtempSync(path.join(tmpdir(), 'svc-e2e-modes-'))
const routesFile = (name: string, routes: { prefix: string; mode?: Mode; hideDenyReason?: boolean }[]): string => {
  const file = path.join(dir, name)
  writeFileSync(file, JSON.stringify({ routes: routes.map((r) => ({ ...r, upstream: upstream.url })) }))
  return file
}

const [main, opa, badgeOnly] = await Promise.all([
  startService(tracked, {
    SERVICE_ROUTES_FILE: routesFile('modes.json', [...MODES, { prefix: '/quiet', mode: 'EM-GUARD', hideDenyReason: true }]),
    SERVICE_PDP_ENDPOINT: pdp.url,
    SERVICE_PDP_TIMEOUT_MS: String(PDP_TIMEOUT_MS),
    SERVICE_ENFORCEMENT_MODE: 'EM-STRICT',
    SERVICE_PEP_ID: PEP_ID,
    SERVICE_WORKSPACE: WORKSPACE,
  }, START),
  startService(tracked, {
    SERVICE_ROUTES_FILE: routesFile('opa.json', [{ prefix: '/default' }, { prefix: '/guard', mode: 'EM-GUARD' }]),
    SERVICE_PDP_ENDPOINT: opaPdp.baseUrl,
    SERVICE_PDP_PROTOCOL: 'opa',
    SERVICE_PDP_TIMEOUT_MS: String(PDP_TIMEOUT_MS),
    SERVICE_PEP_ID: PEP_ID,
  }, START),
  startService(tracked, { SERVICE_ROUTES_FILE: routesFile('badge-only.json', [...MODES]) }, START),
])
// Badges are signed by each appliance's own authority, so each process gets its own agent.
const [agent, opaAgent, badgeOnlyAgent] = await Promise.all([
  agentWithBadge(main.adminUrl, main.operatorKey, 'modes-agent'),
  agentWithBadge(opa.adminUrl, opa.operatorKey, 'opa-agent'),
  agentWithBadge(badgeOnly.adminUrl, badgeOnly.operatorKey, 'badge-only-agent'),
])

interface GatewayResponse {
  status: number
  headers: Headers
  body: any
  ms: number
}

let sequence = 0
/** A fresh client transaction id, used to find the request's log line. */
const newTxn = (): string => `e2e-${RUN}-${++sequence}`

async function send(
  service: RunningService, urlPath: string, options: { token?: string | null; txn?: string | null; method?: string } = {},
): Promise<GatewayResponse> {
  const token = options.token === undefined ? agent.token : options.token
  const headers: Record<string, string> = {}
  if (token !== null) headers.authorization = `Bearer ${token}`
  if (options.txn !== null && options.txn !== undefined) headers['x-service-txn'] = options.txn
  const started = performance.now()
  const res = await fetch(`${service.gatewayUrl}${urlPath}`, { method: options.method ?? 'GET', headers })
  const text = await res.text()
  let body: unknown = text
  try {
    body = JSON.parse(text)
  } catch {
    // upstream or error bodies are JSON; keep the text when not
  }
  return { status: res.status, headers: res.headers, body, ms: performance.now() - started }
}

/** The first log line matching, polled until it appears (stdout is asynchronous). */
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

const upstreamHits = (urlPath: string): number => upstream.requests.filter((r) => r.url === urlPath).length
const pdpCalls = (server: PdpServer, resource: string): number =>
  server.requests.filter((r) => (server === opaPdp ? r.body?.input : r.body)?.resource?.identifier === resource).length

const blocks = (mode: Mode): boolean => mode !== 'EM-OBSERVE'

/** Sends one request per mode under `behaviour` and checks the docs/api.md §8 "PDP unavailable" column. */
async function expectUnavailable(t: Test, label: string, behaviour: PdpBehaviour): Promise<void> {
  pdp.respond(behaviour)
  for (const { prefix, mode } of MODES) {
    const urlPath = `${prefix}/unavailable-${label}`
    const txn = newTxn()
    const res = await send(main, urlPath, { txn })
    const log = await requestLog(main, txn)
    t.ok(res.ms < 1800, `${mode} ${label}: answered well before a 2 s PDP would (took ${Math.round(res.ms)} ms)`)
    t.equal(log['service.policy.error_code'], 'PDP_UNAVAILABLE', `${mode} ${label}: log service.policy.error_code`)
    t.equal(log.mode, mode, `${mode} ${label}: log mode`)
    if (blocks(mode)) {
      t.equal(res.status, 503, `${mode} ${label}: 503`)
      t.equal(res.body?.error, 'PDP_UNAVAILABLE', `${mode} ${label}: error code`)
      t.equal(res.headers.get('x-service-gateway'), 'error', `${mode} ${label}: gateway-made`)
      t.equal(upstreamHits(urlPath), 0, `${mode} ${label}: the upstream received nothing`)
      t.equal(log['service.policy.decision'], 'DENY', `${mode} ${label}: log decision DENY`)
      t.equal(log.error_code, 'PDP_UNAVAILABLE', `${mode} ${label}: log error_code`)
    } else {
      t.equal(res.status, 200, `${mode} ${label}: forwarded`)
      t.equal(upstreamHits(urlPath), 1, `${mode} ${label}: the upstream received it`)
      t.equal(log['service.policy.decision'], 'ALLOW_OBSERVE', `${mode} ${label}: log decision ALLOW_OBSERVE`)
    }
  }
}

t.test('PDP ALLOW: forwarded in every mode, with the verified identity', async (t) => {
  for (const { prefix, mode } of MODES) {
    const decisionId = `allow-${mode}-${RUN}`
    pdp.respond({ decision: 'ALLOW', decision_id: decisionId, ttl: 0 })
    const urlPath = `${prefix}/allow`
    const txn = newTxn()
    const res = await send(main, urlPath, { txn })
    t.equal(res.status, 200, `${mode}: 200 from the upstream`)
    t.equal(res.headers.get('x-service-gateway'), null, `${mode}: not a gateway-made response`)
    const seen = upstream.requests.find((r) => r.url === urlPath)
    t.equal(seen?.headers['x-service-subject'], agent.did, `${mode}: upstream sees the verified subject`)
    t.equal(seen?.headers['x-service-txn'], txn, `${mode}: upstream sees the transaction id`)
    const log = await requestLog(main, txn)
    t.equal(log['service.policy.decision'], 'ALLOW', `${mode}: log decision`)
    t.equal(log['service.policy.decision_id'], decisionId, `${mode}: log decision id`)
    t.equal(log.mode, mode, `${mode}: log mode`)
    t.equal(log.status, 200, `${mode}: log status`)
    t.equal(log.agent_did, agent.did, `${mode}: log agent`)
    t.equal(log.badge_jti, agent.jti, `${mode}: log badge jti`)
  }
})

t.test('PDP DENY: EM-OBSERVE forwards as ALLOW_OBSERVE, the others answer 403 POLICY_DENIED', async (t) => {
  for (const { prefix, mode } of MODES) {
    const decisionId = `deny-${mode}-${RUN}`
    pdp.respond({ decision: 'DENY', decision_id: decisionId, reason: 'not today' })
    const urlPath = `${prefix}/deny`
    const txn = newTxn()
    const res = await send(main, `${urlPath}?q=1`, { txn })
    const log = await requestLog(main, txn)
    t.equal(log['service.policy.decision_id'], decisionId, `${mode}: log decision id`)
    t.equal(log.mode, mode, `${mode}: log mode`)
    t.equal(log['service.policy.reason'], 'not today', `${mode}: log the PDP's reason`)
    t.equal(log.operation, `GET ${urlPath}`, `${mode}: log the operation (method and canonical path)`)
    if (blocks(mode)) {
      t.equal(res.status, 403, `${mode}: 403`)
      t.strictSame(res.body, { error: 'POLICY_DENIED', message: 'The policy denies this request.', decision_id: decisionId, reason: 'not today' }, `${mode}: error body with decision_id and reason`)
      t.equal(res.headers.get('x-service-gateway'), 'error', `${mode}: X-Service-Gateway: error`)
      t.equal(res.headers.get('x-service-decision-id'), decisionId, `${mode}: X-Service-Decision-Id is the PDP's decision_id`)
      t.equal(res.headers.get('x-service-txn'), txn, `${mode}: X-Service-Txn echoed`)
      t.equal(upstreamHits(`${urlPath}?q=1`), 0, `${mode}: the upstream received nothing`)
      t.equal(log['service.policy.decision'], 'DENY', `${mode}: log decision DENY`)
      t.equal(log.error_code, 'POLICY_DENIED', `${mode}: log error_code`)
      t.equal(log.status, 403, `${mode}: log status`)
    } else {
      t.equal(res.status, 200, `${mode}: forwarded`)
      t.equal(upstreamHits(`${urlPath}?q=1`), 1, `${mode}: the upstream received it`)
      t.equal(log['service.policy.decision'], 'ALLOW_OBSERVE', `${mode}: log decision ALLOW_OBSERVE`)
      t.equal(log['service.policy.error_code'], undefined, `${mode}: no PDP error code for a real DENY`)
    }
  }
})

t.test('a route with hideDenyReason: the 403 body has the decision id but not the reason; the log keeps it', async (t) => {
  const decisionId = `deny-quiet-${RUN}`
  pdp.respond({ decision: 'DENY', decision_id: decisionId, reason: 'operation_denied_did' })
  const txn = newTxn()
  const res = await send(main, '/quiet/deny', { txn })
  t.equal(res.status, 403)
  t.strictSame(res.body, { error: 'POLICY_DENIED', message: 'The policy denies this request.', decision_id: decisionId }, 'no reason in the body')
  t.equal(res.headers.get('x-service-decision-id'), decisionId, 'X-Service-Decision-Id as before')
  const log = await requestLog(main, txn)
  t.equal(log['service.policy.reason'], 'operation_denied_did', 'the log line has the reason')
  t.equal(log.operation, 'GET /quiet/deny', 'and the operation')
})

t.test('PDP slower than SERVICE_PDP_TIMEOUT_MS counts as unavailable', async (t) => {
  await expectUnavailable(t, 'slow', { delayMs: 2000, then: { decision: 'ALLOW', ttl: 0 } })
})

t.test('PDP answering garbage counts as unavailable', async (t) => {
  await expectUnavailable(t, 'no-decision-id', { status: 200, body: JSON.stringify({ decision: 'ALLOW', ttl: 0 }) })
  await expectUnavailable(t, 'maybe', { decision: 'MAYBE' as 'ALLOW', decision_id: 'maybe-id' })
  await expectUnavailable(t, 'not-json', { status: 200, body: 'ALLOW' })
  await expectUnavailable(t, 'status-500', { status: 500, body: JSON.stringify({ decision: 'ALLOW', decision_id: 'x' }) })
})

t.test('the PDP request body, field by field (docs/api.md §2.12)', async (t) => {
  pdp.respond({ decision: 'ALLOW', ttl: 0 })
  const before = Date.now()

  // Without a client transaction id the gateway makes one; the PDP and the upstream see the same.
  const generated = '/delegate/body/generated?b=2&a=1'
  const res = await send(main, generated)
  t.equal(res.status, 200)
  const upstreamTxn = upstream.requests.find((r) => r.url === generated)?.headers['x-service-txn']
  t.type(upstreamTxn, 'string', 'the upstream got an X-Service-Txn')
  t.equal(res.headers.get('x-service-txn'), upstreamTxn, 'the client sees the same X-Service-Txn')
  const call = pdp.requests.find((r) => r.body?.resource?.identifier === generated)
  t.ok(call, 'the PDP was asked')
  const body = call?.body ?? {}
  t.equal(call?.method, 'POST', 'POST')
  t.equal(call?.headers['x-service-pep-id'], PEP_ID, 'header X-Service-PEP-ID')
  t.match(String(call?.headers['content-type']), /^application\/json/, 'JSON body')
  t.equal(body.pip_version, 'service.pip.v1', 'pip_version')
  t.same(body.subject, { did: agent.did, badge_jti: agent.jti, ial: '0', trust_level: 'REG' }, 'subject: did, badge_jti, ial, trust_level')
  t.same(body.action, { operation: 'GET /delegate/body/generated', capability_class: null }, 'action: operation without query, class null')
  t.equal(body.resource?.identifier, generated, 'resource.identifier keeps the query')
  t.equal(body.context?.txn_id, upstreamTxn, 'context.txn_id is the X-Service-Txn sent upstream')
  t.equal(body.context?.enforcement_mode, 'EM-DELEGATE', "context.enforcement_mode is the route's mode")
  t.notOk('leaf_capability' in (body.context ?? {}), 'no leaf_capability without a chain')
  t.notOk('delegation_depth' in (body.context ?? {}), 'no delegation_depth without a chain')
  t.same(Object.keys(body.context ?? {}).sort(), ['enforcement_mode', 'txn_id'], 'context members')
  t.equal(body.environment?.workspace, WORKSPACE, 'environment.workspace is SERVICE_WORKSPACE')
  t.equal(body.environment?.pep_id, PEP_ID, 'environment.pep_id')
  const time = String(body.environment?.time)
  t.match(time, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/, 'environment.time is ISO 8601 UTC')
  t.ok(Date.parse(time) >= before - 5000 && Date.parse(time) <= Date.now() + 5000, 'environment.time is close to now')

  // A client transaction id is kept and passed to the PDP and the upstream.
  const txn = newTxn()
  const given = '/strict/body/given'
  t.equal((await send(main, given, { txn })).status, 200)
  const second = pdp.requests.find((r) => r.body?.resource?.identifier === given)?.body ?? {}
  t.equal(second.context?.txn_id, txn, 'context.txn_id is the client-provided X-Service-Txn')
  t.equal(upstream.requests.find((r) => r.url === given)?.headers['x-service-txn'], txn, 'and so is the upstream header')
  t.equal(second.context?.enforcement_mode, 'EM-STRICT', 'enforcement_mode follows the route')
  t.equal(second.action?.operation, 'GET /strict/body/given')
})

t.test('decision cache', async (t) => {
  t.test('an ALLOW with ttl 30 answers the identical next request without the PDP', async (t) => {
    pdp.respond({ decision: 'ALLOW', ttl: 30 })
    const urlPath = '/guard/cache/a'
    t.equal((await send(main, urlPath)).status, 200)
    t.equal((await send(main, urlPath)).status, 200)
    t.equal(pdpCalls(pdp, urlPath), 1, 'one PDP call for two identical requests')
    t.equal(upstreamHits(urlPath), 2, 'both forwarded')
    t.equal((await send(main, '/guard/cache/b')).status, 200)
    t.equal(pdpCalls(pdp, '/guard/cache/b'), 1, 'a different path asks the PDP again')
    t.equal((await send(main, '/guard/cache/a?x=1')).status, 200)
    t.equal(pdpCalls(pdp, '/guard/cache/a?x=1'), 1, 'a different resource (query) asks the PDP again')
  })
  t.test('a DENY is never cached, whatever its ttl', async (t) => {
    pdp.respond({ decision: 'DENY', ttl: 30 })
    const urlPath = '/guard/cache/deny'
    t.equal((await send(main, urlPath)).status, 403)
    t.equal((await send(main, urlPath)).status, 403)
    t.equal(pdpCalls(pdp, urlPath), 2, 'each DENY reached the PDP')
  })
  t.test('a cached ALLOW still runs its obligations', async (t) => {
    pdp.respond({ decision: 'ALLOW', ttl: 30, obligations: [{ type: 'rate_limit.apply', params: { rpm: 2, key: `cached-${RUN}` } }] })
    const urlPath = '/delegate/cache/limited'
    const statuses = []
    for (let i = 0; i < 3; i++) statuses.push((await send(main, urlPath)).status)
    t.equal(pdpCalls(pdp, urlPath), 1, 'only the first request asked the PDP')
    t.same(statuses, [200, 200, 429], 'the third request is over the limit although the decision came from the cache')
  })
})

t.test('obligations under each mode', async (t) => {
  t.test('rate_limit.apply {rpm: 2}: enforced in EM-DELEGATE and EM-STRICT only', async (t) => {
    for (const { prefix, mode } of MODES) {
      const decisionId = `rl-${mode}-${RUN}`
      pdp.respond({ decision: 'ALLOW', decision_id: decisionId, ttl: 0, obligations: [{ type: 'rate_limit.apply', params: { rpm: 2, key: `rl-${mode}-${RUN}` } }] })
      const urlPath = `${prefix}/obligation/rate`
      const responses = []
      for (let i = 0; i < 3; i++) responses.push(await send(main, urlPath))
      t.same(responses.slice(0, 2).map((r) => r.status), [200, 200], `${mode}: the first two pass`)
      const third = responses[2] as GatewayResponse
      if (mode === 'EM-DELEGATE' || mode === 'EM-STRICT') {
        t.equal(third.status, 429, `${mode}: the third within the minute gets 429`)
        t.equal(third.body?.error, 'rate_limit_exceeded', `${mode}: rate_limit_exceeded`)
        const retryAfter = Number(third.headers.get('retry-after'))
        t.ok(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 60, `${mode}: Retry-After in seconds (${retryAfter})`)
        t.equal(third.headers.get('x-service-decision-id'), decisionId, `${mode}: X-Service-Decision-Id on the 429`)
        t.equal(third.headers.get('x-service-gateway'), 'error', `${mode}: gateway-made`)
        t.equal(upstreamHits(urlPath), 2, `${mode}: the upstream got only two`)
      } else {
        t.equal(third.status, 200, `${mode}: not enforced, the third is forwarded`)
        t.equal(upstreamHits(urlPath), 3, `${mode}: the upstream got all three`)
      }
    }
  })

  t.test('rate-limited answers carry the X-RateLimit-* headers of docs/wire-contract.md §3', async (t) => {
    pdp.respond({ decision: 'ALLOW', ttl: 0, obligations: [{ type: 'rate_limit.apply', params: { rpm: 1, key: `rl-headers-${RUN}` } }] })
    const first = await send(main, '/strict/obligation/rate-headers')
    t.equal(first.status, 200, 'the first is forwarded')
    t.equal(first.headers.get('x-ratelimit-limit'), '1', 'a forwarded answer carries X-RateLimit-Limit too')
    t.equal(first.headers.get('x-ratelimit-remaining'), '0', 'and what is left of the budget')
    const res = await send(main, '/strict/obligation/rate-headers')
    t.equal(res.status, 429)
    t.equal(res.headers.get('x-ratelimit-limit'), '1', 'X-RateLimit-Limit')
    t.equal(res.headers.get('x-ratelimit-remaining'), '0', 'X-RateLimit-Remaining')
    const reset = Number(res.headers.get('x-ratelimit-reset'))
    const now = Date.now() / 1000
    t.ok(reset > now && reset <= now + 61, `X-RateLimit-Reset is Unix seconds within the minute (${reset})`)
    t.match(String(res.headers.get('retry-after')), /^\d+$/, 'Retry-After')
  })

  t.test('log.enhanced {level: warn}: an extra log line in every mode', async (t) => {
    pdp.respond({ decision: 'ALLOW', ttl: 0, obligations: [{ type: 'log.enhanced', params: { level: 'warn' } }] })
    for (const { prefix, mode } of MODES) {
      const txn = newTxn()
      const res = await send(main, `${prefix}/obligation/log`, { txn })
      t.equal(res.status, 200, `${mode}: forwarded`)
      const line = await waitLog(main, (l) => l.msg === 'gateway enhanced request log' && l.txn_id === txn)
      t.equal(line.level, 40, `${mode}: an enhanced line at warn level`)
      t.equal(line.agent_did, agent.did, `${mode}: it names the agent`)
      t.equal(line.mode, mode, `${mode}: and the mode`)
      t.notMatch(JSON.stringify(line), agent.token, `${mode}: never the badge itself`)
    }
  })

  t.test('unknown obligation type foo.bar: EM-STRICT refuses, EM-DELEGATE logs, the others forward', async (t) => {
    for (const { prefix, mode } of MODES) {
      const decisionId = `unknown-${mode}-${RUN}`
      pdp.respond({ decision: 'ALLOW', decision_id: decisionId, ttl: 0, obligations: [{ type: 'foo.bar', params: { x: 1 } }] })
      const urlPath = `${prefix}/obligation/unknown`
      const txn = newTxn()
      const res = await send(main, urlPath, { txn })
      const log = await requestLog(main, txn)
      if (mode === 'EM-STRICT') {
        t.equal(res.status, 403, `${mode}: 403`)
        t.equal(res.body?.error, 'OBLIGATION_FAILED', `${mode}: OBLIGATION_FAILED`)
        t.equal(res.headers.get('x-service-decision-id'), decisionId, `${mode}: X-Service-Decision-Id`)
        t.equal(upstreamHits(urlPath), 0, `${mode}: the upstream received nothing`)
        t.equal(log.error_code, 'OBLIGATION_FAILED', `${mode}: log error_code`)
      } else {
        t.equal(res.status, 200, `${mode}: forwarded`)
        t.equal(upstreamHits(urlPath), 1, `${mode}: the upstream received it`)
        t.equal(log['service.policy.decision'], 'ALLOW', `${mode}: log decision ALLOW`)
      }
      if (mode === 'EM-DELEGATE') t.same(log.obligations_not_met, ['foo.bar'], `${mode}: the unmet obligation is logged`)
    }
  })

  t.test('rate_limit.apply with bad params (rpm: -1): EM-STRICT refuses, the others forward', async (t) => {
    for (const { prefix, mode } of MODES) {
      pdp.respond({ decision: 'ALLOW', ttl: 0, obligations: [{ type: 'rate_limit.apply', params: { rpm: -1, key: `bad-${mode}-${RUN}` } }] })
      const urlPath = `${prefix}/obligation/bad-params`
      const txn = newTxn()
      const res = await send(main, urlPath, { txn })
      if (mode === 'EM-STRICT') {
        t.equal(res.status, 403, `${mode}: 403`)
        t.equal(res.body?.error, 'OBLIGATION_FAILED', `${mode}: OBLIGATION_FAILED`)
        t.equal(upstreamHits(urlPath), 0, `${mode}: the upstream received nothing`)
      } else {
        t.equal(res.status, 200, `${mode}: forwarded`)
      }
      if (mode === 'EM-DELEGATE') {
        const log = await requestLog(main, txn)
        t.same(log.obligations_not_met, ['rate_limit.apply'], `${mode}: the failed obligation is logged`)
      }
    }
  })
})

t.test('SERVICE_PDP_PROTOCOL=opa, default mode, no SERVICE_WORKSPACE', async (t) => {
  opaPdp.respond({ decision: 'ALLOW', decision_id: `opa-allow-${RUN}`, ttl: 0 })
  const allowPath = '/guard/opa/allow?q=1'
  const allowTxn = newTxn()
  const allowed = await send(opa, allowPath, { token: opaAgent.token, txn: allowTxn })
  t.equal(allowed.status, 200, 'OPA ALLOW: forwarded')
  const call = opaPdp.requests.find((r) => r.body?.input?.resource?.identifier === allowPath)
  t.equal(call?.path, '/v1/data/service/policy', 'posted to the OPA data API under the base URL')
  t.same(Object.keys(call?.body ?? {}), ['input'], 'the body is {input: …}')
  const input = call?.body?.input ?? {}
  t.equal(input.pip_version, 'service.pip.v1', 'input is the PDP request')
  t.equal(input.subject?.did, opaAgent.did, 'input.subject.did')
  t.equal(input.context?.enforcement_mode, 'EM-GUARD', 'input.context.enforcement_mode')
  t.equal(input.context?.txn_id, allowTxn, 'input.context.txn_id')
  t.notOk('workspace' in (input.environment ?? {}), 'environment.workspace is absent without SERVICE_WORKSPACE')
  t.equal(input.environment?.pep_id, PEP_ID, 'environment.pep_id')
  t.equal(call?.headers['x-service-pep-id'], PEP_ID, 'X-Service-PEP-ID')
  t.equal((await requestLog(opa, allowTxn))['service.policy.decision_id'], `opa-allow-${RUN}`, "the log carries OPA's decision_id")

  opaPdp.respond({ decision: 'DENY', decision_id: `opa-deny-${RUN}` })
  const denied = await send(opa, '/guard/opa/deny', { token: opaAgent.token })
  t.equal(denied.status, 403, 'OPA DENY in EM-GUARD: 403')
  t.equal(denied.body?.error, 'POLICY_DENIED')
  t.equal(denied.headers.get('x-service-decision-id'), `opa-deny-${RUN}`, "X-Service-Decision-Id is OPA's decision_id")
  t.equal(upstreamHits('/guard/opa/deny'), 0, 'the upstream received nothing')

  // SERVICE_ENFORCEMENT_MODE unset: the default mode is EM-OBSERVE (docs/api.md §8), so a DENY is only logged.
  const txn = newTxn()
  const observed = await send(opa, '/default/deny', { token: opaAgent.token, txn })
  t.equal(observed.status, 200, 'default mode forwards a DENY')
  const log = await requestLog(opa, txn)
  t.equal(log.mode, 'EM-OBSERVE', 'the default mode is EM-OBSERVE')
  t.equal(log['service.policy.decision'], 'ALLOW_OBSERVE', 'logged as ALLOW_OBSERVE')
  t.equal(opaPdp.requests.at(-1)?.body?.input?.context?.enforcement_mode, 'EM-OBSERVE', 'and the PDP is told so')

  // An OPA result without a decision is no decision.
  opaPdp.respond({ status: 200, body: JSON.stringify({ result: { allow: true }, decision_id: 'x' }) })
  const garbage = await send(opa, '/guard/opa/garbage', { token: opaAgent.token })
  t.equal(garbage.status, 503, 'an OPA result without decision: 503')
  t.equal(garbage.body?.error, 'PDP_UNAVAILABLE')
})

t.test('badge-only mode (no PDP configured): a valid badge is forwarded in every mode', async (t) => {
  for (const { prefix, mode } of MODES) {
    const txn = newTxn()
    const urlPath = `${prefix}/badge-only`
    const res = await send(badgeOnly, urlPath, { token: badgeOnlyAgent.token, txn })
    t.equal(res.status, 200, `${mode}: forwarded`)
    t.equal(upstream.requests.find((r) => r.url === urlPath && r.headers['x-service-txn'] === txn)?.headers['x-service-subject'], badgeOnlyAgent.did, `${mode}: with the verified subject`)
    const log = await requestLog(badgeOnly, txn)
    t.equal(log['service.policy.decision'], 'ALLOW', `${mode}: log decision ALLOW`)
    t.equal(log.mode, mode, `${mode}: log mode`)
  }
  const missing = await send(badgeOnly, '/observe/badge-only', { token: null })
  t.equal(missing.status, 401, 'still no entry without a badge, even in EM-OBSERVE')
  t.equal(missing.body?.error, 'BADGE_MISSING')
})

// Closes the main PDP: keep these last among the subtests that use `main`'s PDP.
t.test('PDP down (connection refused)', async (t) => {
  await pdp.close()
  await expectUnavailable(t, 'down', { decision: 'ALLOW', ttl: 0 })
})

t.test('/metrics on the admin port: bounded labels, no identities', async (t) => {
  const res = await fetch(`${main.adminUrl}/metrics`)
  t.equal(res.status, 200)
  const text = await res.text()
  const series = (name: string, labels: Record<string, string>): string[] =>
    text.split('\n').filter((l) => l.startsWith(`${name}{`) && Object.entries(labels).every(([k, v]) => l.includes(`${k}="${v}"`)))
  const value = (line: string | undefined): number => Number(line?.split(' ').at(-1))
  t.ok(value(series('service_gateway_requests_total', { decision: 'ALLOW', mode: 'EM-GUARD', status_class: '2xx' })[0]) >= 1, 'ALLOW/EM-GUARD/2xx counted')
  t.ok(value(series('service_gateway_requests_total', { decision: 'DENY', mode: 'EM-STRICT', status_class: '4xx' })[0]) >= 1, 'DENY/EM-STRICT/4xx counted')
  t.ok(value(series('service_gateway_requests_total', { decision: 'DENY', mode: 'EM-DELEGATE', status_class: '5xx' })[0]) >= 1, 'DENY/EM-DELEGATE/5xx counted')
  t.ok(value(series('service_gateway_requests_total', { decision: 'ALLOW_OBSERVE', mode: 'EM-OBSERVE', status_class: '2xx' })[0]) >= 1, 'ALLOW_OBSERVE/EM-OBSERVE/2xx counted')
  t.ok(value(series('service_pdp_request_duration_seconds_count', {})[0]) >= 1, 'PDP latency histogram observed')
  // Every finished request is counted once and observed once in the latency histogram (both in finish()).
  const plain = (name: string): number => value(text.split('\n').find((l) => l.startsWith(`${name} `)))
  const requestsCounted = series('service_gateway_requests_total', {}).reduce((sum, l) => sum + value(l), 0)
  t.ok(requestsCounted > 20, 'many gateway requests counted')
  t.equal(plain('service_gateway_request_duration_seconds_count'), requestsCounted, 'latency observed once per counted request')
  t.equal(value(series('service_gateway_request_duration_seconds_bucket', { le: '+Inf' })[0]), requestsCounted, '+Inf bucket holds every observation')
  t.ok(plain('service_gateway_request_duration_seconds_sum') > 0, 'latency sum')
  t.ok(series('service_pdp_unavailable_total', { reason: 'timeout' }).length > 0, 'PDP unavailability counted (timeout)')
  t.ok(series('service_pdp_unavailable_total', {}).reduce((sum, l) => sum + value(l), 0) >= 4, 'PDP unavailability counted')
  t.notMatch(text, 'did:', 'no DID in the metrics')
  t.notMatch(text, agent.jti, 'no badge jti')
  t.notOk(text.includes(agent.token), 'no token')
  t.notMatch(text, '/unavailable-', 'no request paths')
})
