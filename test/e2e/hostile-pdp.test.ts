/**
 * The whole appliance (`agent-trust serve` as a child process) behind an external PDP that answers
 * decision ids no header can carry. Before the fix the first such answer on a refusing route killed
 * the process, admin plane included; now each request gets 503 `PDP_UNAVAILABLE` (EM-GUARD) or is
 * forwarded (EM-OBSERVE), and the process and its admin plane stay up.
 */
import t from 'tap'
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { agentWithBadge, exitSafeTeardown, SLOW_START, startService } from '../helpers/appliance.js'
import { startPdpServer } from '../helpers/pdp-server.js'
import { startUpstream } from '../helpers/upstream-server.js'
import { bearerGet } from '../helpers/hostile-http.js'

t.setTimeout(240_000)
const tracked = exitSafeTeardown(t)
const upstream = await startUpstream(t)
const pdp = await startPdpServer(t)
const routes = path.join(mkdtempSync(path.join(tmpdir(), 'svc-e2e-hostile-pdp-')), 'routes.json')
writeFileSync(routes, JSON.stringify({ routes: [
  { prefix: '/guard', mode: 'EM-GUARD', upstream: upstream.url },
  { prefix: '/observe', mode: 'EM-OBSERVE', upstream: upstream.url },
] }))
const service = await startService(tracked, { SERVICE_ROUTES_FILE: routes, SERVICE_PDP_ENDPOINT: pdp.url, SERVICE_PDP_TIMEOUT_MS: '2000' }, SLOW_START)
const agent = await agentWithBadge(service.adminUrl, service.operatorKey, 'hostile-pdp-agent')

let sequence = 0
async function call(prefix: string): Promise<{ status: number; headers: Headers; body: unknown } | null> {
  return bearerGet(`${service.gatewayUrl}${prefix}/case-${++sequence}`, agent.token, 10_000)
}

t.test('decision ids with CR LF or non-Latin-1 characters: answered, and the process stays up', async (t) => {
  for (const [label, id] of [['CR LF', 'd\r\nx-evil: 1'], ['non-Latin-1', 'é€'], ['U+2028', 'a\u2028b']] as const) {
    for (const decision of ['DENY', 'ALLOW'] as const) {
      pdp.respond({ decision, decision_id: id, ttl: 0 })
      const guard = await call('/guard')
      t.equal(guard?.status, 503, `${label}, ${decision}, EM-GUARD: 503`)
      t.strictSame(guard?.body, { error: 'PDP_UNAVAILABLE', message: 'The policy decision point is unavailable.' }, `${label}, ${decision}: documented body`)
      t.equal(guard?.headers.get('x-service-decision-id'), null, `${label}, ${decision}: no decision id header`)
      const observe = await call('/observe')
      t.equal(observe?.status, 200, `${label}, ${decision}, EM-OBSERVE: forwarded`)
    }
  }
  t.equal(service.child.exitCode, null, 'the process is still running')
  const health = await fetch(`${service.adminUrl}/healthz`)
  t.equal(health.status, 200, 'the admin plane answers')
  pdp.respond({ decision: 'DENY', decision_id: 'dec-ok', ttl: 0 })
  const deny = await call('/guard')
  t.equal(deny?.status, 403, 'a well-formed DENY is still 403')
  t.equal(deny?.headers.get('x-service-decision-id'), 'dec-ok', 'with its decision id')
})
