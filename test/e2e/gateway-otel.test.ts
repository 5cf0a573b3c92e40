/**
 * OpenTelemetry (docs/wire-contract.md §12): with the standard OTEL_* variables pointing at an OTLP/HTTP JSON
 * collector, the gateway exports one span per proxied request carrying the policy attributes; without
 * them nothing is exported.
 */
import t from 'tap'
import { createServer } from 'node:http'
import { adminCall, agentWithBadge, startService } from '../helpers/appliance.js'
import { startUpstream } from '../helpers/upstream-server.js'

interface Collector {
  url: string
  spans: { name: string; attributes: Record<string, unknown> }[]
}

// Flattens OTLP/JSON attribute lists ({key, value: {stringValue|boolValue|intValue…}}) into a map.
function attributesOf(list: { key: string; value: Record<string, unknown> }[]): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  for (const { key, value } of list) out[key] = Object.values(value)[0]
  return out
}

async function startCollector(tap: { teardown(fn: () => unknown): void }): Promise<Collector> {
  const collector: Collector = { url: '', spans: [] }
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      if (req.url === '/v1/traces') {
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
          resourceSpans: { scopeSpans: { spans: { name: string; attributes: { key: string; value: Record<string, unknown> }[] }[] }[] }[]
        }
        for (const rs of body.resourceSpans) {
          for (const ss of rs.scopeSpans) for (const span of ss.spans) collector.spans.push({ name: span.name, attributes: attributesOf(span.attributes) })
        }
      }
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end('{}')
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const address = server.address()
  collector.url = `http://127.0.0.1:${typeof address === 'object' && address !== null ? address.port : 0}`
  tap.teardown(() => {
    server.closeAllConnections()
    server.close()
  })
  return collector
}

t.test('a span per gateway request with the policy attributes, exported over OTLP', async (t) => {
  const collector = await startCollector(t)
  const upstream = await startUpstream(t)
  const service = await startService(t, {
    SERVICE_UPSTREAM_URL: upstream.url,
    OTEL_EXPORTER_OTLP_ENDPOINT: collector.url,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    OTEL_BSP_SCHEDULE_DELAY: '100',
    OTEL_SERVICE_NAME: 'gateway-under-test',
  })
  const agent = await agentWithBadge(service.adminUrl, service.operatorKey, 'traced')
  const ok = await fetch(`${service.gatewayUrl}/traced`, { headers: { 'x-service-badge': agent.token } })
  t.equal(ok.status, 200)
  await ok.text()
  const refused = await fetch(`${service.gatewayUrl}/traced`)
  t.equal(refused.status, 401)
  await refused.text()

  const deadline = Date.now() + 10_000
  while (collector.spans.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100))
  const spans = collector.spans.filter((s) => s.name === 'gateway.request')
  t.equal(spans.length, 2, 'one span per request')
  const allowed = spans.find((s) => s.attributes['http.response.status_code'] !== undefined && String(s.attributes['http.response.status_code']) === '200')
  t.ok(allowed, 'the forwarded request has a span')
  t.equal(allowed?.attributes['service.policy.decision'], 'ALLOW')
  t.equal(allowed?.attributes['service.policy.override'], false)
  t.equal(allowed?.attributes['staleness.bundle_stale'], false)
  const denied = spans.find((s) => String(s.attributes['http.response.status_code']) === '401')
  t.equal(denied?.attributes['service.error_code'], 'BADGE_MISSING')
  t.notOk(JSON.stringify(collector.spans).includes(agent.token), 'the badge never reaches the collector')
  t.equal((await adminCall(service.adminUrl, service.operatorKey, 'GET', '/healthz')).status, 200)
  t.equal(await service.stop(), 0, 'the SDK shuts down cleanly with the process')
})

t.test('no OTEL_* configuration: nothing is exported', async (t) => {
  const collector = await startCollector(t)
  const upstream = await startUpstream(t)
  // The collector is reachable, but nothing tells the process about it.
  const service = await startService(t, { SERVICE_UPSTREAM_URL: upstream.url })
  const agent = await agentWithBadge(service.adminUrl, service.operatorKey, 'untraced')
  const res = await fetch(`${service.gatewayUrl}/x`, { headers: { 'x-service-badge': agent.token } })
  t.equal(res.status, 200)
  await res.text()
  t.notMatch(service.output(), /OpenTelemetry tracing started/)
  t.equal(await service.stop(), 0)
  t.equal(collector.spans.length, 0)
})
