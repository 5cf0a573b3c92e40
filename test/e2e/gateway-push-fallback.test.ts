/**
 * A gateway-only process whose watch stream is unreachable: it reaches the appliance through a proxy the
 * test controls, which answers the watch path 503 (as an admin instance at its stream limit does) while
 * passing everything else. The gateway still converges by polling, says so in its readiness (`degraded.push`)
 * and its metrics (`service_gateway_snapshot_push_connected 0`), and once the stream is served again it
 * is back on push without a restart; a stream cut under it falls back and reconnects the same way.
 *
 * PGlite is a single-process database, so the file is skipped with SERVICE_TEST_DB=pglite.
 */
import t from 'tap'
import { createServer, request as httpRequest, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { generateApiKeySecret } from '../../src/core/api-key.js'
import { bootstrap, BOOTSTRAP_KEY_FILE } from '../../src/admin/services/credentials.js'
import { adminCall, agentWithBadge, exitSafeTeardown, SLOW_START, startService } from '../helpers/appliance.js'
import { BACKEND, createTestDatabase } from '../helpers/database.js'
import { startUpstream } from '../helpers/upstream-server.js'
import { waitFor } from '../helpers/hostile-http.js'

t.setTimeout(300_000)
const ISSUER = 'http://registry.test'

/** Forwards to `target`; while `refuseWatch` the watch path answers 503, and `cut()` ends the open watch streams. */
async function startRegistryProxy(t: { teardown(fn: () => unknown): void }, target: string) {
  const upstream = new URL(target)
  const open = new Set<ServerResponse>()
  const state = { refuseWatch: true, watchRequests: 0 }
  const server = createServer((req, res) => {
    const watch = (req.url ?? '').startsWith('/v1/gateway/watch')
    if (watch) state.watchRequests++
    if (watch && state.refuseWatch) {
      res.writeHead(503, { 'content-type': 'application/json' }).end('{"error":"watch_limit_reached","message":"refused by the test proxy"}')
      return
    }
    const forward = httpRequest({ host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: req.headers }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.headers)
      answer.pipe(res)
    })
    forward.on('error', () => res.destroy())
    req.pipe(forward)
    if (watch) {
      open.add(res)
      res.on('close', () => {
        open.delete(res)
        forward.destroy()
      })
    }
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => {
    server.closeAllConnections()
    server.close(() => resolve())
  }))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    state,
    cut: () => {
      for (const res of open) res.destroy()
    },
  }
}

if (BACKEND === 'pglite') {
  t.test('a gateway-only process without its watch stream', { skip: 'SERVICE_TEST_DB=pglite: an embedded PGlite database cannot be shared between processes' }, () => {})
} else {
  const teardown = exitSafeTeardown(t)
  const operatorKey = generateApiKeySecret()
  const dir = mkdtempSync(path.join(tmpdir(), 'svc-e2e-push-fallback-'))
  const database = await createTestDatabase(t)
  await bootstrap(database.db, { configuredKey: operatorKey, keyFile: path.join(dir, BOOTSTRAP_KEY_FILE) })
  const upstream = await startUpstream(t)
  const appliance = await startService(teardown, {
    DATABASE_URL: database.url as string,
    SERVICE_BOOTSTRAP_API_KEY: operatorKey,
    CA_KEY_PATH: path.join(dir, 'ca-keys.json'),
    CA_ISSUER_URL: ISSUER,
    SERVICE_RATE_LIMIT_PER_MINUTE: '100000',
  }, SLOW_START)
  const call = async (method: string, urlPath: string, body?: unknown): Promise<any> => {
    const res = await adminCall(appliance.adminUrl, operatorKey, method, urlPath, body)
    if (res.status >= 300) throw new Error(`${method} ${urlPath}: ${res.status} ${JSON.stringify(res.body)}`)
    return res.body
  }
  const orgId = (await call('GET', '/v1/me')).data.org_id as string
  const registryKey = (await call('POST', '/v1/keys', { name: 'fallback-gateway' })).data.key as string
  const proxy = await startRegistryProxy(t, appliance.adminUrl)
  const gateway = await startService(teardown, {
    SERVICE_REGISTRY_URL: proxy.url,
    SERVICE_REGISTRY_KEY: registryKey,
    SERVICE_UPSTREAM_URL: upstream.url,
    CA_ISSUER_URL: ISSUER,
    SERVICE_ENFORCEMENT_MODE: 'EM-GUARD',
    SERVICE_EMBEDDED_PDP: 'true',
    SERVICE_WORKSPACE: orgId,
    SERVICE_BUNDLE_POLL_INTERVAL: '2s',
  }, { command: 'gateway', ...SLOW_START })

  const readiness = async (): Promise<{ status: number; body: any }> => {
    const res = await fetch(`${gateway.adminUrl}/readyz`)
    return { status: res.status, body: await res.json() }
  }
  const gauge = async (): Promise<number> => {
    const text = await (await fetch(`${gateway.adminUrl}/metrics`)).text()
    return Number(/^service_gateway_snapshot_push_connected (\d+)$/m.exec(text)?.[1] ?? 'NaN')
  }
  const through = async (token: string): Promise<number> => {
    const res = await fetch(`${gateway.gatewayUrl}/fallback/probe`, { headers: { authorization: `Bearer ${token}` } })
    await res.arrayBuffer()
    return res.status
  }
  const converges = (token: string, want: number, ms: number): Promise<boolean> => waitFor(async () => (await through(token)) === want, ms)
  const approve = async (yaml: string): Promise<void> => {
    const proposal = await call('POST', `/v1/orgs/${orgId}/policy/org`, { yaml_content: yaml })
    await call('POST', `/v1/orgs/${orgId}/policy/proposals/${proposal.id}/approve`)
  }

  t.test('the stream refused: ready but degraded, the gauge at 0, and changes still arrive by polling', async (t) => {
    const { status, body } = await readiness()
    t.equal(status, 200, 'still ready: polling serves correctly')
    t.match(body.degraded, { push: { code: 'push_stream_down' } }, 'degraded: the push stream is down')
    t.equal(await gauge(), 0, 'service_gateway_snapshot_push_connected 0')
    t.ok(proxy.state.watchRequests >= 1, 'the gateway did try the stream')
    t.ok(gateway.logLines().some((line) => line.msg === 'registry watch stream down; polling the registry until it reconnects'), 'and logged that it polls')

    const agent = await agentWithBadge(appliance.adminUrl, operatorKey, 'fallback-agent')
    t.ok(await converges(agent.token, 200, 10_000), 'a new agent is allowed')
    await approve(`version: "1"\ndenied_dids: ["${agent.did}"]\n`)
    t.ok(await converges(agent.token, 403, 15_000), 'a policy approval arrives with the next bundle poll')
    await approve('version: "1"\n')
    t.ok(await converges(agent.token, 200, 15_000), 'and its replacement')
    await call('POST', `/v1/badges/${agent.jti}/revoke`, { reason: 'fallback test' })
    t.ok(await converges(agent.token, 401, 10_000), 'a revocation arrives with the next revocation poll')
  })

  t.test('the stream served again: back on push without a restart', async (t) => {
    proxy.state.refuseWatch = false
    // The reconnect delay has grown while refused (up to 30 s, jittered).
    t.ok(await waitFor(async () => (await readiness()).body.degraded?.push === undefined, 60_000), 'no longer degraded')
    t.equal(await gauge(), 1, 'service_gateway_snapshot_push_connected 1')
    t.ok(gateway.logLines().some((line) => line.msg === 'registry watch stream up; polling slowed to SERVICE_BUNDLE_POLL_INTERVAL'), 'logged')
    const agent = await agentWithBadge(appliance.adminUrl, operatorKey, 'fallback-pushed')
    t.ok(await converges(agent.token, 200, 10_000))
    await call('POST', `/v1/badges/${agent.jti}/revoke`, { reason: 'pushed' })
    t.ok(await converges(agent.token, 401, 10_000), 'a revocation arrives')
  })

  t.test('a stream cut under the gateway: it falls back, reconnects and resyncs', async (t) => {
    const downs = (): number => gateway.logLines().filter((line) => line.msg === 'registry watch stream down; polling the registry until it reconnects').length
    const before = downs()
    const requests = proxy.state.watchRequests
    proxy.cut()
    t.ok(await waitFor(async () => downs() > before, 10_000), 'the cut is noticed and logged')
    t.ok(await waitFor(async () => proxy.state.watchRequests > requests && (await readiness()).body.degraded?.push === undefined, 30_000), 'reconnected')
    t.equal(await gauge(), 1)
    t.equal(gateway.child.exitCode, null, 'the gateway did not exit')
  })
}
