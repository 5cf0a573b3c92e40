/**
 * SERVICE_GATEWAY_WORKERS=2 as users run it: `agent-trust gateway` against a registry, and `agent-trust
 * serve` with an upstream. What must hold, without changing what the gateway sends or answers:
 *
 * - two worker processes (children of the primary) serve one port: each serves some of the requests, as
 *   the primary's per-worker counter shows, and `/metrics` totals equal the requests sent;
 * - each worker reports under its own gateway id (`<SERVICE_PEP_ID>:w<n>`), listed apart by the registry;
 * - `kill -9` of one worker: it is logged with its pid and signal and restarted (a new pid), while every
 *   request sent meanwhile is answered by the other;
 * - SIGTERM with requests in flight to a slow upstream: every one gets its upstream's answer, their
 *   decisions reach the registry (the workers' last reports), the primary exits 0 and no worker is left;
 * - a worker that cannot start stops the primary (exit 1, the worker's message), without restarts; more than
 *   five deaths within a minute stop it too (exit 1, said on stderr); a killed primary's workers exit;
 * - the appliance: the admin plane in the primary, two workers on the gateway port, the same totals, and the
 *   workers' registry credentials are not API keys of the database.
 *
 * Each request opens its own connection (`agent: false`), since the primary hands out connections, not requests.
 */
import t from 'tap'
import { request } from 'node:http'
import { adminCall, agentWithBadge, exitSafeTeardown, SLOW_START, startService, type RunningService } from '../helpers/appliance.js'
import { startUpstream } from '../helpers/upstream-server.js'
import { descendants, running } from '../helpers/processes.js'

t.setTimeout(300_000)

const SLOW_MS = 1500
const teardown = exitSafeTeardown(t)
const upstream = await startUpstream(t)
upstream.handler = (req, res) => {
  if (!req.url.startsWith('/slow/')) return false
  setTimeout(() => {
    res.writeHead(200, { 'content-type': 'text/plain' })
    res.end(`answered ${req.url}`)
  }, SLOW_MS)
  return true
}

async function until<T>(ms: number, fn: () => Promise<T | undefined>): Promise<T | undefined> {
  const deadline = Date.now() + ms
  for (;;) {
    const value = await fn()
    if (value !== undefined || Date.now() > deadline) return value
    await new Promise((r) => setTimeout(r, 100))
  }
}

/** One request on a connection of its own; resolves with the status and body, or the error's code. */
function send(gatewayUrl: string, path: string, token: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve) => {
    const req = request(`${gatewayUrl}${path}`, { agent: false, headers: { authorization: `Bearer ${token}` } }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (chunk: string) => { body += chunk })
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }))
      res.on('error', (error: NodeJS.ErrnoException) => resolve({ status: 0, body: error.code ?? error.message }))
    })
    req.on('error', (error: NodeJS.ErrnoException) => resolve({ status: 0, body: error.code ?? error.message }))
    // Far above any answer here: a lost connection shows as a failed request, not as a hung test.
    req.setTimeout(15_000, () => req.destroy(Object.assign(new Error('timed out'), { code: 'TIMEOUT' })))
    req.end()
  })
}

interface Workers { total: number; ready: number; list: { worker: number; pid: number; ready: boolean }[] }

async function readiness(url: string): Promise<{ status: number; body: { status: string; workers?: Workers; degraded?: Record<string, { code: string }> } }> {
  const res = await fetch(`${url}/readyz`)
  return { status: res.status, body: await res.json() as never }
}

async function allReady(url: string, count: number): Promise<Workers | undefined> {
  return until(60_000, async () => {
    const { body } = await readiness(url)
    return body.workers?.ready === count ? body.workers : undefined
  })
}

/** The sum of a metric's series on a scrape, or of those whose labels include `labels`. */
async function metricSum(url: string, name: string, labels = ''): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text()
  let sum = 0
  for (const line of text.split('\n')) {
    const match = /^([a-z_]+)(\{[^}]*\})? ([0-9.e+-]+)$/.exec(line)
    if (match !== null && match[1] === name && (match[2] ?? '').includes(labels)) sum += Number(match[3])
  }
  return sum
}

const registry = await startService(teardown, { SERVICE_RATE_LIMIT_PER_MINUTE: '100000' }, SLOW_START)
const agent = await agentWithBadge(registry.adminUrl, registry.operatorKey, 'workers-agent')
const registryKey = (await adminCall(registry.adminUrl, registry.operatorKey, 'POST', '/v1/keys', { name: 'gateway workers' })).body.data.key as string

t.test('agent-trust gateway with SERVICE_GATEWAY_WORKERS=2', async (t) => {
  const gateway: RunningService = await startService(teardown, {
    SERVICE_REGISTRY_URL: registry.adminUrl,
    SERVICE_REGISTRY_KEY: registryKey,
    SERVICE_UPSTREAM_URL: upstream.url,
    SERVICE_GATEWAY_WORKERS: '2',
    SERVICE_PEP_ID: 'gw-e2e-workers',
    SERVICE_GATEWAY_HEARTBEAT_INTERVAL: '300ms',
  }, { command: 'gateway', ...SLOW_START })
  const opsUrl = gateway.adminUrl
  const gatewayUrl = gateway.gatewayUrl as string

  await t.test('two workers, children of the primary, serve one port; /metrics totals equal the requests sent', async (t) => {
    const workers = await allReady(opsUrl, 2)
    t.equal(workers?.total, 2, 'the primary lists two workers, both ready')
    const pids = (workers?.list ?? []).map((w) => w.pid)
    t.equal(new Set(pids).size, 2, 'two processes')
    t.same(pids.filter((pid) => descendants(gateway.child.pid as number).includes(pid)), pids, 'both are children of the primary')
    const sent = 40
    const answers = await Promise.all(Array.from({ length: sent }, (_, i) => send(gatewayUrl, `/one-port/${i}`, agent.token)))
    t.same(answers.map((a) => a.status), Array(sent).fill(200), 'every request is answered by the upstream')
    const total = await until(5000, async () => {
      const value = await metricSum(opsUrl, 'service_gateway_requests_total')
      return value === sent ? value : undefined
    })
    t.equal(total, sent, 'service_gateway_requests_total sums the workers: exactly the requests sent')
    const first = await metricSum(opsUrl, 'service_gateway_worker_requests_total', 'worker="1"')
    const second = await metricSum(opsUrl, 'service_gateway_worker_requests_total', 'worker="2"')
    t.ok(first > 0 && second > 0, `each worker served some (${first} and ${second})`)
    t.equal(first + second, sent, 'the per-worker counts add up to the total')
  })

  await t.test('each worker reports under its own gateway id', async (t) => {
    const listed = await until(10_000, async () => {
      const res = await adminCall(registry.adminUrl, registry.operatorKey, 'GET', '/v1/gateways')
      const ids = res.status === 200 ? (res.body.data as { gateway_id: string }[]).map((g) => g.gateway_id) : []
      return ids.includes('gw-e2e-workers:w1') && ids.includes('gw-e2e-workers:w2') ? ids : undefined
    })
    t.ok(listed, 'the registry lists gw-e2e-workers:w1 and gw-e2e-workers:w2')
    const decisions = await adminCall(registry.adminUrl, registry.operatorKey, 'GET', '/v1/gateway/decisions?limit=1000')
    const mine = (decisions.body.data as { path: string; gateway_id: string }[]).filter((e) => e.path.startsWith('/one-port/'))
    t.equal(new Set(mine.map((e) => e.path)).size, mine.length, 'no decision is listed twice')
  })

  await t.test('kill -9 of one worker: logged, restarted with a new pid, and every request meanwhile is served', async (t) => {
    const before = (await readiness(opsUrl)).body.workers as Workers
    const victim = before.list.find((w) => w.worker === 1)?.pid as number
    const survivor = before.list.find((w) => w.worker === 2)?.pid as number
    process.kill(victim, 'SIGKILL')
    // Node's cluster keeps a connection it handed to a worker until that worker accepts it: one handed over in
    // the instant before the primary sees the death is lost (docs/operations.md, "Gateway workers"). From the
    // primary's notice on, which is what this waits for, every connection goes to the live worker.
    const noticed = await until(10_000, async () => {
      const one = (await readiness(opsUrl)).body.workers?.list.find((w) => w.worker === 1)
      return one !== undefined && (one.pid !== victim || !one.ready) ? one : undefined
    })
    t.ok(noticed, 'the primary sees the death')
    const statuses: number[] = []
    let readyDuring = true
    const failures: string[] = []
    const restarted = await until(60_000, async () => {
      const answer = await send(gatewayUrl, `/during-restart/${statuses.length}`, agent.token)
      statuses.push(answer.status)
      if (answer.status !== 200) failures.push(`${answer.status} ${answer.body.slice(0, 200)}`)
      const now = await readiness(opsUrl)
      if (now.status !== 200) readyDuring = false
      const one = now.body.workers?.list.find((w) => w.worker === 1)
      return one !== undefined && one.ready && one.pid !== victim ? one : undefined
    })
    t.ok(restarted, `worker 1 is back with a new pid (${restarted?.pid}, was ${victim})`)
    t.ok(statuses.length > 0 && statuses.every((s) => s === 200), `every one of the ${statuses.length} requests sent meanwhile was served`)
    t.same(failures, [], 'no failures')
    t.ok(readyDuring, '/readyz stayed ready (one worker of two is)')
    t.ok(running(survivor), 'the other worker kept running')
    const died = gateway.logLines().find((line) => line.msg === 'gateway worker died; restarting it while the others serve')
    t.match(died, { level: 40, worker: 1, pid: victim, signal: 'SIGKILL' }, 'the death is a warning with the pid and signal')
    t.equal(await metricSum(opsUrl, 'service_gateway_worker_exits_total'), 1, 'and counted on the primary\'s /metrics')
  })

  await t.test('SIGTERM with requests in flight: every one gets its upstream answer, the last reports arrive, exit 0', async (t) => {
    const workers = ((await readiness(opsUrl)).body.workers as Workers).list.map((w) => w.pid)
    const inFlight = 10
    const seen = upstream.requests.length
    const answers = Promise.all(Array.from({ length: inFlight }, (_, i) => send(gatewayUrl, `/slow/${i}`, agent.token)))
    const arrived = await until(10_000, async () => (upstream.requests.slice(seen).filter((r) => r.url.startsWith('/slow/')).length === inFlight ? true : undefined))
    t.ok(arrived, 'all of them reached the upstream')
    gateway.child.kill('SIGTERM')
    const results = await answers
    t.same(results.map((r) => r.status), Array(inFlight).fill(200), 'none was lost')
    t.same(results.map((r) => r.body).sort(), Array.from({ length: inFlight }, (_, i) => `answered /slow/${i}`).sort(), 'each got its own upstream answer')
    t.equal(await gateway.exited, 0, 'the primary exits 0')
    t.same(workers.filter((pid) => running(pid)), [], 'no worker is left')
    const decisions = await adminCall(registry.adminUrl, registry.operatorKey, 'GET', '/v1/gateway/decisions?limit=1000')
    const slow = (decisions.body.data as { path: string }[]).filter((e) => e.path.startsWith('/slow/'))
    t.equal(slow.length, inFlight, 'the workers\' last reports carried every drained decision')
  })
})

t.test('a worker that cannot start stops the primary with its message, once', async (t) => {
  const { spawn } = await import('node:child_process')
  const { CLI } = await import('../helpers/appliance.js')
  const child = spawn(process.execPath, [CLI, 'gateway'], {
    env: {
      PATH: process.env.PATH, PORT: '0', SERVICE_GATEWAY_PORT: '0', SERVICE_HOST: '127.0.0.1', CA_ISSUER_URL: 'http://registry.test',
      SERVICE_REGISTRY_URL: registry.adminUrl, SERVICE_REGISTRY_KEY: `sk_${'x'.repeat(43)}`, SERVICE_UPSTREAM_URL: upstream.url, SERVICE_GATEWAY_WORKERS: '2',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  teardown.teardown(() => { if (child.exitCode === null) child.kill('SIGKILL') })
  let out = ''
  let err = ''
  child.stdout.on('data', (chunk) => { out += String(chunk) })
  child.stderr.on('data', (chunk) => { err += String(chunk) })
  const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)))
  t.equal(code, 1, 'the primary exits 1')
  t.match(err, /^agent-trust: gateway worker [12] did not start: .*registry key.*401/m, 'stderr names the worker and its reason')
  t.ok((out.match(/"msg":"gateway id"/g) ?? []).length <= 2, 'no restart: each worker started once at most')
})

t.test('a crash loop stops the primary with exit code 1 and says so', async (t) => {
  const gateway = await startService(teardown, {
    SERVICE_REGISTRY_URL: registry.adminUrl, SERVICE_REGISTRY_KEY: registryKey, SERVICE_UPSTREAM_URL: upstream.url, SERVICE_GATEWAY_WORKERS: '2',
  }, { command: 'gateway', ...SLOW_START })
  await allReady(gateway.adminUrl, 2)
  const killed = new Set<number>()
  // More than 5 deaths within a minute: worker 1 is killed again as soon as each replacement has a pid.
  const exited = await until(120_000, async () => {
    if (gateway.child.exitCode !== null) return gateway.child.exitCode
    const body = await readiness(gateway.adminUrl).then((r) => r.body, () => null)
    const pid = body?.workers?.list.find((w) => w.worker === 1)?.pid
    if (typeof pid === 'number' && !killed.has(pid)) {
      killed.add(pid)
      try { process.kill(pid, 'SIGKILL') } catch { /* already gone */ }
    }
    return undefined
  })
  t.equal(exited, 1, `the primary exits 1 after ${killed.size} deaths`)
  t.match(gateway.output(), /agent-trust: gateway workers are crash-looping: 6 unplanned exits within 60 s \(more than 5\); stopping/, 'stderr says why')
  t.ok(gateway.logLines().some((line) => line.level === 50 && typeof line.msg === 'string' && line.msg.startsWith('gateway workers are crash-looping')), 'and the log')
})

t.test('the workers exit when the primary is gone (kill -9 of the primary)', async (t) => {
  const gateway = await startService(teardown, {
    SERVICE_REGISTRY_URL: registry.adminUrl, SERVICE_REGISTRY_KEY: registryKey, SERVICE_UPSTREAM_URL: upstream.url, SERVICE_GATEWAY_WORKERS: '2',
  }, { command: 'gateway', ...SLOW_START })
  const pids = ((await allReady(gateway.adminUrl, 2))?.list ?? []).map((w) => w.pid)
  t.equal(pids.length, 2)
  teardown.teardown(() => { for (const pid of pids) if (running(pid)) process.kill(pid, 'SIGKILL') })
  gateway.child.kill('SIGKILL')
  const gone = await until(30_000, async () => (pids.every((pid) => !running(pid)) ? true : undefined))
  t.ok(gone, 'both workers drained and exited on their own')
})

t.test('agent-trust serve with an upstream and SERVICE_GATEWAY_WORKERS=2', async (t) => {
  const appliance = await startService(teardown, {
    SERVICE_UPSTREAM_URL: upstream.url,
    SERVICE_GATEWAY_WORKERS: '2',
    SERVICE_PEP_ID: 'gw-e2e-appliance',
    SERVICE_RATE_LIMIT_PER_MINUTE: '100000',
    SERVICE_GATEWAY_HEARTBEAT_INTERVAL: '300ms',
  }, SLOW_START)
  const workers = await allReady(appliance.adminUrl, 2)
  t.equal(workers?.total, 2, 'the admin plane\'s /readyz lists two ready workers')
  const own = await agentWithBadge(appliance.adminUrl, appliance.operatorKey, 'appliance-workers-agent')
  const sent = 20
  const answers = await Promise.all(Array.from({ length: sent }, (_, i) => send(appliance.gatewayUrl as string, `/appliance/${i}`, own.token)))
  t.same(answers.map((a) => a.status), Array(sent).fill(200), 'the workers serve the gateway port')
  const total = await until(5000, async () => {
    const value = await metricSum(appliance.adminUrl, 'service_gateway_requests_total')
    return value === sent ? value : undefined
  })
  t.equal(total, sent, 'the admin plane\'s /metrics sums the workers\' requests')
  const first = await metricSum(appliance.adminUrl, 'service_gateway_worker_requests_total', 'worker="1"')
  const second = await metricSum(appliance.adminUrl, 'service_gateway_worker_requests_total', 'worker="2"')
  t.ok(first > 0 && second > 0, `each worker served some (${first} and ${second})`)
  t.ok(await metricSum(appliance.adminUrl, 'service_admin_requests_total') > 0, 'the admin plane\'s own metrics are still there')
  const decided = await until(10_000, async () => {
    const res = await adminCall(appliance.adminUrl, appliance.operatorKey, 'GET', '/v1/gateway/decisions?limit=1000')
    const mine = res.status === 200 ? (res.body.data as { path: string; gateway_id: string }[]).filter((e) => e.path.startsWith('/appliance/')) : []
    return mine.length === sent ? mine : undefined
  })
  t.same([...new Set((decided ?? []).map((e) => e.gateway_id))].sort(), ['gw-e2e-appliance:w1', 'gw-e2e-appliance:w2'], 'every decision is listed once, under the id of the worker that made it')
  const keys = await adminCall(appliance.adminUrl, appliance.operatorKey, 'GET', '/v1/keys')
  t.equal((keys.body.data as unknown[]).length, 1, 'the workers\' credentials are not API keys in the database (only the bootstrap key is)')
  t.equal(await appliance.stop(), 0, 'SIGTERM: the workers drain, then the appliance exits 0')
})
