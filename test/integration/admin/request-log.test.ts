/**
 * The admin plane's request log (docs/operations.md, "Logs"): one `request completed` line per request,
 * at info, except the routine polls (a gateway's revocation sync, bundle pull and key refresh, health
 * probes, metric scrapes), which log at debug while they succeed. A real remote snapshot source (what
 * `agent-trust gateway` runs) polls the appliance here, and the log is read at debug to see the levels.
 */
import t from 'tap'
import { createOrg, startTestAdmin } from '../../helpers/admin.js'
import { waitFor } from '../../helpers/hostile-http.js'
import { SnapshotHolder } from '../../../src/gateway/snapshot/snapshot.js'
import { createRemoteSource } from '../../../src/gateway/snapshot/remote-source.js'

t.setTimeout(300_000)

interface Line { level: number; msg: string; route?: string; method?: string; status?: number }
const DEBUG = 20
const INFO = 30

t.test('routine polls log at debug while they succeed; everything else at info', async (t) => {
  const admin = await startTestAdmin(t, { SERVICE_LOG_LEVEL: 'debug' })
  const { orgId, key } = await createOrg(admin, 'request-log-org')
  const completed = (): Line[] => admin.logs
    .flatMap((text) => text.split('\n'))
    .filter((text) => text.trim() !== '')
    .map((text) => JSON.parse(text) as Line)
    .filter((line) => line.msg === 'request completed')
  const of = (route: string): Line[] => completed().filter((line) => line.route === route)

  // A gateway's polls, as `agent-trust gateway` makes them: revocations fast, the rest on the slow timer.
  const source = createRemoteSource({
    registryUrl: admin.url, registryKey: key, configuredIssuer: null, workspace: orgId, pollIntervalMs: 100, revocationPollMs: 20,
  })
  t.teardown(() => source.close())
  await source.start(new SnapshotHolder())
  await waitFor(() => of('/v1/revocations').length >= 10 && of('/v1/bundles/:workspace').length >= 3, 10_000)
  await source.close()
  for (const probe of ['/healthz', '/readyz', '/metrics']) t.equal((await admin.request('GET', probe, { key: null })).status, 200, probe)

  const routine = ['/v1/revocations', '/v1/bundles/:workspace', '/.well-known/jwks.json', '/.well-known/service-authority', '/healthz', '/readyz', '/metrics']
  for (const route of routine) {
    const lines = of(route)
    t.ok(lines.length > 0, `${route} was polled`)
    t.same([...new Set(lines.map((line) => line.level))], [DEBUG], `${route}: every successful poll at debug`)
  }
  t.ok(of('/v1/bundles/:workspace').some((line) => line.status === 304), 'a revalidated bundle (304) is routine too')

  // What is not a routine poll, and a poll that fails, stay at info.
  t.equal((await admin.request('GET', '/v1/agents', { key })).status, 200)
  t.equal((await admin.request('POST', '/v1/agents', { key, body: { name: 'logged' } })).status, 201)
  t.equal((await admin.request('GET', `/v1/bundles/${orgId}`, { key: null, headers: { 'x-service-registry-key': `sk_${'Q'.repeat(43)}` } })).status, 401)
  t.equal((await admin.request('GET', '/v1/revocations?limit=0', { key: null })).status, 400)
  const at = (route: string, method: string, status: number): number[] =>
    completed().filter((line) => line.route === route && line.method === method && line.status === status).map((line) => line.level)
  t.same(at('/v1/agents', 'GET', 200), [INFO], 'an API read at info')
  t.same(at('/v1/agents', 'POST', 201), [INFO], 'a write at info')
  t.same(at('/v1/bundles/:workspace', 'GET', 401), [INFO], 'a refused bundle pull at info')
  t.same(at('/v1/revocations', 'GET', 400), [INFO], 'a malformed revocation poll at info')

  // At the default level (info) the routine polls leave nothing: what a quiet appliance's log shows.
  const atInfo = completed().filter((line) => line.level >= INFO)
  t.notOk(atInfo.some((line) => routine.includes(line.route ?? '') && (line.status ?? 500) < 400), 'no successful poll at info or above')
  t.ok(atInfo.length >= 4, 'while the other requests are there')
})
