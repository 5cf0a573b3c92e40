/**
 * Fault tests (issue 7): what a user of the appliance sees when its dependencies fail, run as a user
 * runs it (the real `agent-trust serve` child process, real sockets, real PostgreSQL).
 *
 * - Database outage under load: PostgreSQL "stops" for 20 s while a few client loops create agents,
 *   read them, issue IAL-0 badges and call the gateway. The real server is never touched (other test
 *   files share it in CI): a TCP proxy (test/helpers/tcp-proxy.ts) sits between appliance A and
 *   PostgreSQL, and cutting it looks to the appliance exactly like a stopped server (connections
 *   closed, new ones refused). The test's own pool reaches PostgreSQL directly, so the final
 *   consistency check does not depend on the proxy.
 * - Upstream down and resetting (appliance B): resets before and in the middle of an answer, and an
 *   upstream that is down and then comes back.
 * - SIGTERM under load (appliance B, last): 50 in-flight gateway requests to a slow upstream and 20
 *   in-flight admin requests all complete; new connections are refused or answered 503; exit 0 within
 *   SERVICE_SHUTDOWN_GRACE_MS.
 *
 * PDP down/slow per mode is covered by gateway-modes.test.ts and key file problems by
 * appliance.test.ts and key-ring.test.ts; they are not repeated here.
 */
import t, { type Test } from 'tap'
import { createServer as createHttpServer, request as httpRequest, type IncomingHttpHeaders, type Server } from 'node:http'
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import {
  adminCall, agentWithBadge, closedPort, exitSafeTeardown, startService, SLOW_START, type RunningService,
} from '../helpers/appliance.js'
import { BACKEND, TEST_DATABASE_URL, createTestDatabase, type TestDatabase } from '../helpers/database.js'
import { startTcpProxy, type TcpProxy } from '../helpers/tcp-proxy.js'
import { startUpstream, type UpstreamServer } from '../helpers/upstream-server.js'

// Two appliance start-ups plus a 20 s outage on a busy 2-core machine.
t.setTimeout(300_000)

const OUTAGE_MS = 20_000
/** An admin request during the outage must fail fast, not hang for the outage (pg connect timeout is 5 s). */
const FAST_FAILURE_MS = 6_000
/** Everything works again this long after PostgreSQL is back. */
const RECOVERY_MS = 10_000
const GRACE_MS = 10_000
/** A revocation reaches the gateway by NOTIFY within this; the back-up poll is set far beyond it. */
const NOTIFY_MS = 5_000
const STACK_TRACE = /\n\s+at |"stack"|node_modules|\.js:\d+:\d+/

/** Appliances this file stops on purpose (SIGTERM); any other exit is reported with its output. */
const expectedExits = new Set<RunningService>()

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

async function pollUntil<T>(deadlineMs: number, probe: () => Promise<T | undefined> | T | undefined, everyMs = 100): Promise<T | undefined> {
  const deadline = Date.now() + deadlineMs
  for (;;) {
    const value = await probe()
    if (value !== undefined) return value
    if (Date.now() > deadline) return undefined
    await sleep(everyMs)
  }
}

/** One finished client request, with when it started and ended (epoch ms). */
interface Outcome {
  op: 'create' | 'read' | 'issue' | 'gateway'
  /** HTTP status, or 0 when no response arrived (the error is in `error`). */
  status: number
  text: string
  error?: string
  started: number
  ended: number
  /** create: the unique agent name of the request body. */
  name?: string
  id?: string
  jti?: string
}

/** fetch with a hard client-side deadline, so a hanging server shows up as a slow failure, not a stuck test. */
async function timedFetch(op: Outcome['op'], url: string, init: RequestInit & { name?: string } = {}): Promise<Outcome> {
  const started = Date.now()
  try {
    const res = await fetch(url, { ...init, signal: AbortSignal.timeout(30_000) })
    const text = await res.text()
    return { op, status: res.status, text, started, ended: Date.now(), ...(init.name === undefined ? {} : { name: init.name }) }
  } catch (error) {
    const cause = (error as { cause?: { code?: string } }).cause
    return { op, status: 0, text: '', error: cause?.code ?? String(error), started, ended: Date.now(), ...(init.name === undefined ? {} : { name: init.name }) }
  }
}

function json(text: string): any {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

interface Exchange {
  status: number
  headers: IncomingHttpHeaders
  body: string
  /** The body arrived in full (the response ended normally). */
  complete: boolean
  /** Set when no response head arrived (ECONNREFUSED, ECONNRESET…). */
  error?: string
}

/** One request on its own connection (node:http, no pooling), reporting truncated bodies as such. */
function exchange(
  base: string, urlPath: string, options: { method?: string; headers?: Record<string, string>; body?: string } = {},
): Promise<Exchange> {
  return new Promise((resolve) => {
    const url = new URL(urlPath, base)
    let settled = false
    const finish = (result: Exchange): void => {
      if (settled) return
      settled = true
      resolve(result)
    }
    const headers = { ...options.headers }
    if (options.body !== undefined) headers['content-length'] = String(Buffer.byteLength(options.body))
    const req = httpRequest({
      host: url.hostname, port: url.port, path: url.pathname + url.search, method: options.method ?? 'GET', headers, agent: false,
    }, (res) => {
      const chunks: Buffer[] = []
      const done = (complete: boolean): void => finish({
        status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString('utf8'), complete,
      })
      res.on('data', (chunk: Buffer) => chunks.push(chunk))
      res.on('end', () => done(true))
      res.on('error', () => done(false))
      res.on('close', () => done(res.complete))
    })
    req.setTimeout(20_000, () => req.destroy(new Error('client timeout')))
    req.on('error', (error: Error & { code?: string }) => finish({ status: 0, headers: {}, body: '', complete: false, error: error.code ?? error.message }))
    req.end(options.body)
  })
}

if (BACKEND === 'pglite') {
  t.test('fault tests', {
    skip: 'SERVICE_TEST_DB=pglite: the faults need a PostgreSQL server reached over TCP (a proxy cuts it); PGlite runs inside the process',
  }, () => {})
} else {
  await run()
}

async function run(): Promise<void> {
  const tracked = exitSafeTeardown(t)
  const dir = mkdtempSync(path.join(tmpdir(), 'svc-e2e-faults-'))

  // Appliance A reaches its database through the proxy; the `options=-c search_path=…` query stays.
  const databaseA = await createTestDatabase(t)
  const databaseB = await createTestDatabase(t)
  const real = new URL(TEST_DATABASE_URL)
  const proxy = await startTcpProxy(t, { host: real.hostname, port: Number(real.port === '' ? '5432' : real.port) })
  const proxiedUrl = new URL(databaseA.url as string)
  proxiedUrl.hostname = proxy.host
  proxiedUrl.port = String(proxy.port)

  const upstreamA = await startUpstream(t)
  const upstreamB = await startUpstream(t)
  // A port with nothing on it yet; the "comes back" case starts a server on it later.
  const laterPort = await closedPort()
  const routesFile = path.join(dir, 'routes.json')
  writeFileSync(routesFile, JSON.stringify({
    routes: [
      { prefix: '/api', upstream: upstreamB.url },
      { prefix: '/later', upstream: `http://127.0.0.1:${laterPort}` },
    ],
  }))

  const common = {
    // The load loops send far more than the default 1000 admin requests per minute.
    SERVICE_RATE_LIMIT_PER_MINUTE: '1000000',
  }
  const [applianceA, applianceB] = await Promise.all([
    startService(tracked, {
      ...common,
      DATABASE_URL: proxiedUrl.toString(),
      SERVICE_UPSTREAM_URL: upstreamA.url,
      // The back-up revocation poll is pushed far out, so that only NOTIFY can deliver a revocation
      // within NOTIFY_MS: that is what shows whether LISTEN survives the outage.
      SERVICE_BUNDLE_POLL_INTERVAL: '10m',
    }, SLOW_START),
    startService(tracked, {
      ...common,
      DATABASE_URL: databaseB.url as string,
      SERVICE_ROUTES_FILE: routesFile,
      SERVICE_SHUTDOWN_GRACE_MS: String(GRACE_MS),
      SERVICE_UPSTREAM_TIMEOUT_MS: '10000',
    }, SLOW_START),
  ])

  // A crash is a finding in itself: show why, instead of a string of "fetch failed" assertions.
  for (const [label, appliance] of [['A', applianceA], ['B', applianceB]] as const) {
    appliance.child.once('exit', (code, signal) => {
      if (signal === 'SIGKILL' || expectedExits.has(appliance)) return
      t.comment(`appliance ${label} exited unexpectedly (code ${code}, signal ${signal}); last output:\n${appliance.output().slice(-4000)}`)
    })
  }

  t.test('database outage under load: fast 5xx, gateway unaffected, recovery without restart, nothing half-written', async (t) => {
    await databaseOutage(t, { appliance: applianceA, proxy, database: databaseA, upstream: upstreamA })
  })

  t.test('upstream resets and outages: 502 or a cut connection, never a crash, next request served', async (t) => {
    await upstreamFaults(t, { appliance: applianceB, upstream: upstreamB, laterPort })
  })

  t.test('SIGTERM under load: every accepted request completes, new ones are refused, exit 0 within the grace period', async (t) => {
    await sigtermUnderLoad(t, { appliance: applianceB, upstream: upstreamB, database: databaseB })
  })
}

async function databaseOutage(
  t: Test,
  { appliance, proxy, database, upstream }: { appliance: RunningService; proxy: TcpProxy; database: TestDatabase; upstream: UpstreamServer },
): Promise<void> {
  const admin = appliance.adminUrl
  const gateway = appliance.gatewayUrl as string
  const key = appliance.operatorKey
  const auth = { authorization: `Bearer ${key}` }
  // Issued before the outage: the gateway verifies it from its in-memory snapshot only.
  const cached = await agentWithBadge(admin, key, 'fault-cached-badge')

  const revokedWithin = async (token: string, jti: string): Promise<number | undefined> => {
    const revoked = await adminCall(admin, key, 'POST', `/v1/badges/${jti}/revoke`, { reason: 'fault test' })
    if (revoked.status !== 200) {
      t.comment(`revoke answered ${revoked.status} ${JSON.stringify(revoked.body)}`)
      return undefined
    }
    const started = Date.now()
    const refused = await pollUntil(NOTIFY_MS, async () => {
      const res = await timedFetch('gateway', `${gateway}/revocation-probe`, { headers: { authorization: `Bearer ${token}` } })
      return res.status === 401 && json(res.text)?.error === 'BADGE_REVOKED' ? true : undefined
    })
    return refused === true ? Date.now() - started : undefined
  }

  // Baseline: before the outage a revocation reaches the gateway by NOTIFY (the poll is 10 minutes).
  const before = await agentWithBadge(admin, key, 'fault-revoke-before')
  const baselineMs = await revokedWithin(before.token, before.jti)
  t.ok(baselineMs !== undefined, `before the outage a revocation reaches the gateway within ${NOTIFY_MS} ms (took ${baselineMs} ms)`)

  const outcomes: Outcome[] = []
  let stop = false
  const loop = async (n: number): Promise<void> => {
    for (let i = 0; !stop; i++) {
      const name = `load-${n}-${i}`
      const created = await timedFetch('create', `${admin}/v1/agents`, {
        method: 'POST', name, headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify({ name, domain: 'example.com' }),
      })
      outcomes.push(created)
      if (created.status === 201) {
        const id = json(created.text)?.data?.id as string
        created.id = id
        outcomes.push(await timedFetch('read', `${admin}/v1/agents/${id}`, { headers: auth }))
        const issued = await timedFetch('issue', `${admin}/v1/agents/${id}/badge`, {
          method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify({ domain: 'example.com' }),
        })
        if (issued.status === 200) issued.jti = json(issued.text)?.data?.jti as string
        outcomes.push(issued)
      }
      outcomes.push(await timedFetch('gateway', `${gateway}/load/${n}/${i}`, { headers: { authorization: `Bearer ${cached.token}` } }))
      // A short pause keeps the failure phase (where every call returns at once) from spinning.
      await sleep(40)
    }
  }
  const loops = [0, 1, 2, 3].map((n) => loop(n))
  // A failed assertion or a throw below must not leave the loops running (the file would never end).
  t.teardown(() => { stop = true })

  // Let the load run normally first, so that the cut lands in the middle of real traffic.
  const warm = await pollUntil(15_000, () => (outcomes.filter((o) => o.op === 'issue' && o.status === 200).length >= 8 ? true : undefined))
  t.ok(warm, 'the load runs normally before the outage (badges are being issued)')

  const cutStarted = Date.now()
  await proxy.cut()
  const cutAt = Date.now()

  // During the outage: readiness fails fast, liveness holds.
  const notReady = await pollUntil(FAST_FAILURE_MS, async () => {
    const res = await timedFetch('read', `${admin}/readyz`)
    return res.status === 503 ? res : undefined
  })
  t.ok(notReady, `/readyz answers 503 within ${FAST_FAILURE_MS} ms of the database going away`)
  t.equal(json(notReady?.text ?? '')?.checks?.database, false, '/readyz names the database as the failing check')
  await sleep(Math.max(0, cutAt + OUTAGE_MS / 2 - Date.now()))
  if (appliance.child.exitCode !== null) {
    // Nothing below can be checked on a dead process; the exit and its output are reported by run().
    t.fail(`the appliance exited (code ${appliance.child.exitCode}) during the database outage instead of answering 503`)
    return
  }
  const midReady = await timedFetch('read', `${admin}/readyz`)
  const midHealth = await timedFetch('read', `${admin}/healthz`)
  t.equal(midReady.status, 503, '/readyz still 503 in the middle of the outage')
  t.ok(midReady.ended - midReady.started < FAST_FAILURE_MS, `/readyz answers fast (${midReady.ended - midReady.started} ms)`)
  t.equal(midHealth.status, 200, '/healthz stays 200: the process is alive')

  await sleep(Math.max(0, cutAt + OUTAGE_MS - Date.now()))
  const restoreAt = Date.now()
  await proxy.restore()

  // Recovery without a restart: create, read, issue and readiness all succeed again.
  const recovered = await pollUntil(RECOVERY_MS, async () => {
    const name = `recovery-${Date.now()}`
    const created = await adminCall(admin, key, 'POST', '/v1/agents', { name, domain: 'example.com' })
    if (created.status !== 201) return undefined
    const id = created.body.data.id as string
    const read = await adminCall(admin, key, 'GET', `/v1/agents/${id}`)
    const issued = await adminCall(admin, key, 'POST', `/v1/agents/${id}/badge`, { domain: 'example.com' })
    const ready = await timedFetch('read', `${admin}/readyz`)
    return read.status === 200 && issued.status === 200 && ready.status === 200 ? Date.now() - restoreAt : undefined
  }, 250)
  t.ok(recovered !== undefined, `within ${RECOVERY_MS} ms of PostgreSQL coming back, create + read + issue succeed and /readyz is 200 (took ${recovered} ms)`)
  t.equal(appliance.child.exitCode, null, 'the appliance was never restarted (same process still running)')

  // Let the loops see the recovered database too, then stop them.
  await pollUntil(RECOVERY_MS, () => (outcomes.some((o) => o.op === 'issue' && o.status === 200 && o.started > restoreAt) ? true : undefined))
  stop = true
  await Promise.all(loops)

  const duringOutage = outcomes.filter((o) => o.started >= cutAt && o.ended <= restoreAt)
  const adminDuring = duringOutage.filter((o) => o.op !== 'gateway')
  const gatewayDuring = duringOutage.filter((o) => o.op === 'gateway')
  t.ok(adminDuring.length >= 20, `the loops kept calling the admin plane during the outage (${adminDuring.length} calls)`)
  // Any admin call that overlapped the outage, including one caught in flight by the cut: none may hang.
  const overlapping = outcomes.filter((o) => o.op !== 'gateway' && o.ended > cutAt && o.started < restoreAt)
  const slowest = Math.max(0, ...overlapping.map((o) => o.ended - o.started))
  t.ok(slowest < FAST_FAILURE_MS, `every admin call during the outage answered within ${FAST_FAILURE_MS} ms (slowest ${slowest} ms of ${overlapping.length})`)
  t.same(adminDuring.filter((o) => o.status === 0).map((o) => o.error), [], 'every admin call during the outage got an HTTP answer')
  t.same(adminDuring.filter((o) => o.status > 0 && o.status < 500).map((o) => `${o.op} ${o.status}`), [], 'no admin call during the outage succeeded or was blamed on the client')
  const badBodies = adminDuring.filter((o) => {
    const body = json(o.text)
    return typeof body?.error !== 'string' || typeof body?.message !== 'string' || STACK_TRACE.test(o.text)
  })
  t.same(badBodies.map((o) => o.text.slice(0, 200)), [], 'every failure is {"error", "message"} and carries no stack trace')
  const statuses = [...new Set(adminDuring.map((o) => `${o.status} ${json(o.text)?.error}`))]
  t.test('the database outage is reported as 503 service_unavailable', async (t) => {
    t.same(statuses, ['503 service_unavailable'], `statuses seen during the outage: ${statuses.join(', ')}`)
  })

  t.ok(gatewayDuring.length >= 20, `the loops kept calling the gateway during the outage (${gatewayDuring.length} calls)`)
  t.same(gatewayDuring.filter((o) => o.status !== 200).map((o) => `${o.status} ${o.error ?? o.text.slice(0, 100)}`), [],
    'the gateway forwarded every request with the cached badge during the outage')
  const forwarded = upstream.requests.filter((r) => r.url.startsWith('/load/')).length
  t.equal(forwarded, outcomes.filter((o) => o.op === 'gateway' && o.status === 200).length, 'every gateway 200 was the upstream\'s own answer')

  // Nothing half-written, checked on the test's own connection (not through the proxy).
  const rows = await database.db.query<{ id: string; name: string }>("SELECT id, name FROM agents WHERE name LIKE 'load-%'")
  const inDb = new Map(rows.map((r) => [r.name, r.id]))
  const creates = outcomes.filter((o) => o.op === 'create')
  const reported = creates.filter((o) => o.status === 201)
  t.ok(reported.length > 0, `agents were created during the run (${reported.length})`)
  t.same(reported.filter((o) => inDb.get(o.name as string) !== o.id).map((o) => o.name), [], 'every agent reported 201 exists with the reported id')
  const unreported = creates.filter((o) => o.status !== 201 && inDb.has(o.name as string))
  // The one unavoidable ambiguity: a statement that committed while its connection was being cut, so the
  // reply was lost. Only a request in flight at the cut can be in that state.
  const inFlightAtCut = (o: Outcome): boolean => o.started <= cutAt && o.ended >= cutStarted
  t.same(unreported.filter((o) => !inFlightAtCut(o)).map((o) => `${o.name} ${o.status}`), [],
    'no agent exists that the API did not report created (beyond a commit whose reply the cut itself lost)')
  t.ok(unreported.length <= 4, `at most one ambiguous create per loop at the cut (${unreported.length})`)
  const issuedJtis = outcomes.filter((o) => o.op === 'issue' && o.status === 200).map((o) => o.jti as string)
  const badgeRows = await database.db.query<{ jti: string }>('SELECT jti FROM badges WHERE jti = ANY($1)', [issuedJtis])
  const stored = new Set(badgeRows.map((r) => r.jti))
  t.same(issuedJtis.filter((jti) => !stored.has(jti)), [], `every badge issued (200) has a row (${issuedJtis.length} badges)`)

  t.test('after the outage a revocation still reaches the gateway by NOTIFY', async (t) => {
    const after = await agentWithBadge(admin, key, 'fault-revoke-after')
    const ok = await timedFetch('gateway', `${gateway}/revocation-probe`, { headers: { authorization: `Bearer ${after.token}` } })
    t.equal(ok.status, 200, 'the new badge is accepted before revocation')
    const ms = await revokedWithin(after.token, after.jti)
    t.ok(ms !== undefined, `a revocation after the outage reaches the gateway within ${NOTIFY_MS} ms (took ${ms} ms)`)
  })
}

async function upstreamFaults(
  t: Test, { appliance, upstream, laterPort }: { appliance: RunningService; upstream: UpstreamServer; laterPort: number },
): Promise<void> {
  const gateway = appliance.gatewayUrl as string
  const agent = await agentWithBadge(appliance.adminUrl, appliance.operatorKey, 'fault-upstream-agent')
  const headers = { authorization: `Bearer ${agent.token}` }
  upstream.handler = (req, res) => {
    if (req.url.startsWith('/api/reset-early')) {
      // The connection dies before any byte of an answer.
      res.socket?.destroy()
      return true
    }
    if (req.url.startsWith('/api/reset-mid')) {
      // Head and part of the body go out, then the connection dies.
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '1000' })
      res.write('partial-body-')
      setTimeout(() => res.socket?.destroy(), 100)
      return true
    }
    return false
  }
  t.teardown(() => { upstream.handler = null })

  const normal = async (label: string): Promise<void> => {
    const res = await exchange(gateway, `/api/normal/${label}`, { headers })
    t.equal(res.status, 200, `${label}: the next request is served normally`)
    t.equal(json(res.body)?.url, `/api/normal/${label}`, `${label}: with the upstream's own answer`)
  }

  for (let round = 1; round <= 3; round++) {
    const early = await exchange(gateway, `/api/reset-early/${round}`, { headers })
    t.equal(early.status, 502, `reset before answering (round ${round}): 502`)
    t.equal(json(early.body)?.error, 'UPSTREAM_UNAVAILABLE', `reset before answering (round ${round}): UPSTREAM_UNAVAILABLE`)
    t.equal(early.headers['x-service-gateway'], 'error', `reset before answering (round ${round}): marked as gateway-made`)
    await normal(`after-early-${round}`)

    const mid = await exchange(gateway, `/api/reset-mid/${round}`, { headers })
    t.equal(mid.status, 200, `reset mid-response (round ${round}): the upstream's head had already gone out`)
    t.notOk(mid.complete, `reset mid-response (round ${round}): the client connection is cut, not ended as if complete`)
    t.ok(mid.body.length < 1000, `reset mid-response (round ${round}): the body is visibly truncated (${mid.body.length} of 1000 bytes)`)
    t.notOk('x-service-gateway' in mid.headers, `reset mid-response (round ${round}): no gateway error dressed as the upstream's answer`)
    await normal(`after-mid-${round}`)
  }

  // Down, then back on the same port: 502 first, then 200, without restarting anything.
  const down = await exchange(gateway, '/later/down', { headers })
  t.equal(down.status, 502, 'upstream down: 502')
  t.equal(json(down.body)?.error, 'UPSTREAM_UNAVAILABLE', 'upstream down: UPSTREAM_UNAVAILABLE')
  const later: Server = createHttpServer((req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ back: true, url: req.url }))
  })
  await new Promise<void>((resolve, reject) => {
    later.once('error', reject)
    later.listen(laterPort, '127.0.0.1', () => resolve())
  })
  t.teardown(() => {
    later.closeAllConnections()
    return new Promise<void>((resolve) => later.close(() => resolve()))
  })
  const back = await pollUntil(5_000, async () => {
    const res = await exchange(gateway, '/later/back', { headers })
    return res.status === 200 ? res : undefined
  })
  t.ok(back, 'upstream back: the gateway forwards again (200) without a restart')
  t.equal(json(back?.body ?? '')?.back, true, 'upstream back: the answer is the returned upstream\'s')

  t.equal(appliance.child.exitCode, null, 'the appliance never crashed')
  t.notMatch(appliance.output(), /uncaught|unhandled/i, 'no uncaught exception or unhandled rejection was logged')
}

async function sigtermUnderLoad(
  t: Test, { appliance, upstream, database }: { appliance: RunningService; upstream: UpstreamServer; database: TestDatabase },
): Promise<void> {
  const gateway = appliance.gatewayUrl as string
  const admin = appliance.adminUrl
  const agent = await agentWithBadge(admin, appliance.operatorKey, 'fault-sigterm-agent')
  upstream.handler = (req, res) => {
    if (!req.url.startsWith('/api/slow/')) return false
    setTimeout(() => {
      res.writeHead(200, { 'content-type': 'text/plain' })
      res.end(`slow ok ${req.url}`)
    }, 1_500)
    return true
  }
  t.teardown(() => { upstream.handler = null })

  // 50 gateway requests, in flight once the upstream has received every one of them.
  const gatewayRequests = Array.from({ length: 50 }, (_, i) =>
    timedFetch('gateway', `${gateway}/api/slow/${i}`, { headers: { authorization: `Bearer ${agent.token}` } }))
  const arrived = await pollUntil(15_000, () => (upstream.requests.filter((r) => r.url.startsWith('/api/slow/')).length >= 50 ? true : undefined), 20)
  t.ok(arrived, 'all 50 gateway requests reached the slow upstream')

  // 20 admin requests, in flight once the server has read their heads: `Expect: 100-continue` makes
  // Node answer `100 Continue` when it hands the request to Fastify, and the body is held back until
  // after the signal, so the requests cannot finish before it.
  const names = Array.from({ length: 20 }, (_, i) => `sigterm-${i}-${Date.now()}`)
  const adminRequests = names.map((name) => heldBackPost(admin, '/v1/agents', appliance.operatorKey, { name, domain: 'example.com' }))
  const heads = await Promise.all(adminRequests.map((r) => r.continued))
  t.equal(heads.filter(Boolean).length, 20, 'all 20 admin requests were accepted (100 Continue) before the signal')

  const signalled = Date.now()
  expectedExits.add(appliance)
  appliance.child.kill('SIGTERM')
  const handled = await pollUntil(5_000, () => appliance.logLines().find((l) => l.msg === 'shutting down'), 20)
  t.ok(handled, 'the appliance logged "shutting down"')
  // The listeners are closed in the same turn as that log line; a short settle keeps the probe from
  // racing the child's event loop on a loaded machine.
  await sleep(250)

  const probeGateway = await exchange(gateway, '/api/normal/after-signal', { headers: { authorization: `Bearer ${agent.token}` } })
  t.ok(probeGateway.status === 0 ? /ECONNREFUSED|ECONNRESET/.test(probeGateway.error ?? '') : probeGateway.status === 503,
    `a new gateway connection after the signal is refused or answered 503 (got ${probeGateway.status || probeGateway.error})`)
  const probeAdmin = await exchange(admin, '/healthz')
  t.ok(probeAdmin.status === 0 ? /ECONNREFUSED|ECONNRESET/.test(probeAdmin.error ?? '') : probeAdmin.status === 503,
    `a new admin connection after the signal is refused or answered 503 (got ${probeAdmin.status || probeAdmin.error})`)

  // Now the held-back bodies: the admin requests were accepted before the signal and must complete.
  for (const request of adminRequests) request.send()
  const adminAnswers = await Promise.all(adminRequests.map((r) => r.done))
  const gatewayAnswers = await Promise.all(gatewayRequests)
  t.same(adminAnswers.map((a) => a.status), names.map(() => 201), 'all 20 in-flight admin requests completed with 201')
  t.same(gatewayAnswers.map((a) => a.status), gatewayAnswers.map(() => 200), 'all 50 in-flight gateway requests completed with 200')
  t.same(gatewayAnswers.filter((a, i) => a.text !== `slow ok /api/slow/${i}`).map((a) => a.text.slice(0, 80)), [],
    'each gateway request got its own full upstream answer')

  const code = await pollUntil(GRACE_MS + 5_000, () => (appliance.child.exitCode !== null ? appliance.child.exitCode : undefined), 50)
  const exitedAfter = Date.now() - signalled
  t.equal(code, 0, 'exit code 0')
  t.ok(exitedAfter < GRACE_MS, `exited within SERVICE_SHUTDOWN_GRACE_MS (${exitedAfter} ms of ${GRACE_MS})`)
  t.notOk(appliance.logLines().some((l) => l.msg === 'grace period over; closing remaining connections'),
    'no connection had to be cut at the end of the grace period')

  // The admin requests that answered 201 were committed before the pool closed.
  const rows = await database.db.query<{ name: string }>('SELECT name FROM agents WHERE name = ANY($1)', [names])
  t.equal(rows.length, 20, 'every agent created during shutdown is in the database')
}

/**
 * A JSON POST whose head is sent at once with `Expect: 100-continue` and whose body waits for `send()`.
 * `continued` resolves true once the server answered 100 Continue, i.e. once it parsed the head and
 * handed the request to the application: from then on the request is in flight.
 */
function heldBackPost(
  base: string, urlPath: string, key: string, payload: unknown,
): { continued: Promise<boolean>; done: Promise<Exchange>; send: () => void } {
  const body = JSON.stringify(payload)
  const url = new URL(urlPath, base)
  let resolveContinue: (value: boolean) => void = () => {}
  const continued = new Promise<boolean>((resolve) => { resolveContinue = resolve })
  const req = httpRequest({
    host: url.hostname, port: url.port, path: url.pathname, method: 'POST', agent: false,
    headers: {
      authorization: `Bearer ${key}`, 'content-type': 'application/json',
      'content-length': String(Buffer.byteLength(body)), expect: '100-continue',
    },
  })
  const done = new Promise<Exchange>((resolve) => {
    req.on('response', (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString('utf8'), complete: true }))
      res.on('error', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: '', complete: false }))
    })
    req.on('error', (error: Error & { code?: string }) => {
      resolveContinue(false)
      resolve({ status: 0, headers: {}, body: '', complete: false, error: error.code ?? error.message })
    })
  })
  req.on('continue', () => resolveContinue(true))
  req.setTimeout(30_000, () => req.destroy(new Error('client timeout')))
  req.flushHeaders()
  return { continued, done, send: () => req.end(body) }
}
