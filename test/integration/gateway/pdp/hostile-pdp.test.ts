/**
 * The gateway in-process with the real HTTP PDP client against a PDP on 127.0.0.1 that answers hostile
 * decisions. The crash this reproduces: a `decision_id` that may not appear in a header (CR LF, a
 * character above U+00FF) made writing `X-Service-Decision-Id` throw, the error path threw again with
 * the same header, and the rejection went unhandled (in production the process exits). Now the answer
 * is UNAVAILABLE (the mode table applies: 503 `PDP_UNAVAILABLE`, or forwarded under EM-OBSERVE), and a
 * property checks that any PDP answer leaves every request with an answer in the documented shape.
 */
import t from 'tap'
import fc from 'fast-check'
import { generateKeyPairSync } from 'node:crypto'
import type { AddressInfo } from 'node:net'
import { Writable } from 'node:stream'
import { loadConfig } from '../../../../src/config/index.js'
import { buildBadgeClaims, signBadge } from '../../../../src/core/badge.js'
import { createHttpPdp } from '../../../../src/gateway/pdp/http-pdp.js'
import { createGateway, type RouteTarget } from '../../../../src/gateway/server.js'
import { SnapshotHolder } from '../../../../src/gateway/snapshot/snapshot.js'
import { RouteTable } from '../../../../src/gateway/ingress/routes.js'
import { Upstream } from '../../../../src/gateway/upstream/upstream.js'
import { createLogger } from '../../../../src/telemetry/logger.js'
import { createMetrics } from '../../../../src/telemetry/metrics.js'
import { startPdpServer, type PdpBehaviour } from '../../../helpers/pdp-server.js'
import { propertyRuns } from '../../../helpers/property-runs.js'
import { startUpstream } from '../../../helpers/upstream-server.js'
import { bearerGet } from '../../../helpers/hostile-http.js'

t.setTimeout(180_000)
const ISSUER = 'https://registry.test'
const SUBJECT = 'did:web:agents.example.com:alpha'

// A rejection or exception nobody handles is exactly the crash under test: record it instead of dying.
const escaped: unknown[] = []
const record = (error: unknown): void => {
  escaped.push(error)
}
process.on('unhandledRejection', record)
process.on('uncaughtException', record)
t.teardown(() => {
  process.off('unhandledRejection', record)
  process.off('uncaughtException', record)
})

const upstream = await startUpstream(t)
const pool = new Upstream(upstream.url, { timeoutMs: 5_000 })
t.teardown(() => pool.close())
const MODES = ['EM-OBSERVE', 'EM-GUARD', 'EM-DELEGATE', 'EM-STRICT'] as const
const routes = new RouteTable<RouteTarget>(MODES.map((mode) => ({ prefix: `/${mode.toLowerCase()}`, value: { upstream: pool, mode } })))

const pdpServer = await startPdpServer(t)
const pdp = createHttpPdp({ endpoint: pdpServer.url, protocol: 'service', timeoutMs: 2000, pepId: 'pep-hostile' })
t.teardown(() => pdp.close())

const logLines: string[] = []
const logger = createLogger('info', new Writable({
  write(chunk, _encoding, callback) {
    for (const line of String(chunk).split('\n')) if (line !== '') logLines.push(line)
    callback()
  },
}))
const config = loadConfig({ DATABASE_URL: 'memory://', CA_ISSUER_URL: ISSUER, SERVICE_UPSTREAM_URL: upstream.url }).gateway
const metrics = createMetrics()
const holder = new SnapshotHolder()
const key = generateKeyPairSync('ed25519')
holder.swap({ issuer: ISSUER, keys: new Map([['k1', key.publicKey]]), keysVersion: 'k1', revoked: new Set(), bundle: null })

const gateway = createGateway({ config, holder, pdp, routes, breakglassKey: null, logger, metrics: metrics.gateway })
await new Promise<void>((resolve) => gateway.server.listen(0, '127.0.0.1', resolve))
t.teardown(async () => {
  gateway.dispose()
  gateway.server.closeAllConnections()
  await new Promise<void>((resolve) => gateway.server.close(() => resolve()))
})
const base = `http://127.0.0.1:${(gateway.server.address() as AddressInfo).port}`

const now = Math.floor(Date.now() / 1000)
const token = signBadge(buildBadgeClaims({
  jti: 'jti-hostile', issuer: ISSUER, subject: SUBJECT, issuedAt: now - 10, expiresAt: now + 3600, ial: '1', level: '2', domain: 'agents.example.com',
}), { kid: 'k1', privateKey: key.privateKey })

interface Reply {
  status: number
  headers: Headers
  body: any
}

let sequence = 0
/** One request on its own path (the decision cache never answers for another case); null when no answer came. */
async function send(mode: (typeof MODES)[number]): Promise<Reply | null> {
  return bearerGet(`${base}/${mode.toLowerCase()}/case-${++sequence}`, token, 5000)
}

const HOSTILE_IDS: [string, string][] = [
  ['CR LF', 'd\r\nx-evil: 1'],
  ['LF', 'd\n'],
  ['non-Latin-1', 'é€'],
  ['U+2028', 'a\u2028b'],
  ['NUL', 'a\u0000b'],
  ['overlong', 'x'.repeat(10_000)],
]

t.test('a decision_id that cannot go into a header: PDP unavailable under the mode table, no crash', async (t) => {
  for (const [label, id] of HOSTILE_IDS) {
    for (const decision of ['ALLOW', 'DENY'] as const) {
      pdpServer.respond({ decision, decision_id: id, ttl: 0 })
      for (const mode of MODES) {
        const reply = await send(mode)
        const what = `${label}, ${decision}, ${mode}`
        if (reply === null) {
          t.fail(`${what}: no answer`)
          continue
        }
        if (mode === 'EM-OBSERVE') {
          t.equal(reply.status, 200, `${what}: forwarded (ALLOW_OBSERVE)`)
        } else {
          t.equal(reply.status, 503, `${what}: 503`)
          t.strictSame(reply.body, { error: 'PDP_UNAVAILABLE', message: 'The policy decision point is unavailable.' }, `${what}: documented body`)
          t.equal(reply.headers.get('x-service-gateway'), 'error', `${what}: gateway-made`)
          t.equal(reply.headers.get('x-service-decision-id'), null, `${what}: no decision id header`)
        }
        t.equal(reply.headers.get('x-evil'), null, `${what}: nothing injected`)
      }
    }
  }
  t.same(escaped, [], 'no unhandled rejection or exception')
  const text = await metrics.registry.metrics()
  t.match(text, /service_pdp_unavailable_total\{pdp="http",reason="invalid_decision_id"\} \d+/, 'counted as invalid_decision_id')

  // the gateway still serves a well-formed decision afterwards
  pdpServer.respond({ decision: 'DENY', decision_id: 'dec-ok', ttl: 0 })
  const deny = await send('EM-GUARD')
  t.equal(deny?.status, 403, 'a DENY is 403')
  t.equal(deny?.headers.get('x-service-decision-id'), 'dec-ok', 'with its decision id')
})

t.test('property: whatever the PDP answers, every request gets an answer in the documented shape', async (t) => {
  const valid = { decision: 'ALLOW', decision_id: 'dec-1', ttl: 0, obligations: [{ type: 'rate_limit.apply', params: { rpm: 1000, key: 'k' } }] }
  const hostile = fc.oneof(fc.jsonValue(), fc.string({ unit: 'binary', maxLength: 64 }), fc.constantFrom('\r\n', 'é€', '\u2028', '', -1, 1e300))
  const behaviour: fc.Arbitrary<PdpBehaviour> = fc.oneof(
    fc.jsonValue().map((value) => ({ status: 200, body: JSON.stringify(value) ?? 'null' })),
    fc.tuple(fc.constantFrom('decision', 'decision_id', 'reason', 'ttl', 'obligations'), hostile)
      .map(([member, value]) => ({ status: 200, body: JSON.stringify({ ...valid, [member]: value }) })),
    fc.uint8Array({ maxLength: 128 }).map((bytes) => ({ status: 200, body: Buffer.from(bytes).toString('latin1') })),
    fc.tuple(fc.integer({ min: 200, max: 599 }), fc.constantFrom('application/json', 'text/plain', 'application/problem+json'))
      .map(([status, type]) => ({ status, body: JSON.stringify(valid), headers: { 'content-type': type } })),
  )
  const GATEWAY_CODES = new Set(['PDP_UNAVAILABLE', 'POLICY_DENIED', 'OBLIGATION_FAILED', 'rate_limit_exceeded'])
  await fc.assert(
    fc.asyncProperty(behaviour, fc.constantFrom(...MODES), async (answer, mode) => {
      pdpServer.respond(answer)
      const reply = await send(mode)
      if (reply === null) throw new Error('no answer')
      if (reply.status === 200) {
        if (typeof reply.body !== 'object' || reply.body === null || reply.body.method !== 'GET') throw new Error('not the upstream echo')
      } else {
        if (![403, 429, 503].includes(reply.status)) throw new Error(`status ${reply.status}`)
        const body = reply.body as Record<string, unknown>
        // A denial adds its decision id and the PDP's reason, both as validated (at most 512 characters).
        const members = body.error === 'POLICY_DENIED' ? ['error', 'message', 'decision_id', 'reason'] : ['error', 'message']
        const extra = Object.keys(body).filter((key) => !members.includes(key))
        if (!GATEWAY_CODES.has(String(body.error)) || typeof body.message !== 'string' || extra.length > 0 ||
          (body.error === 'POLICY_DENIED' && (typeof body.decision_id !== 'string' || (body.reason !== undefined && (typeof body.reason !== 'string' || body.reason.length > 512))))) {
          throw new Error(`body ${JSON.stringify(body)}`)
        }
        if (reply.headers.get('x-service-gateway') !== 'error') throw new Error('not marked')
      }
      if (escaped.length > 0) throw new Error('an error escaped')
    }),
    propertyRuns(100),
  )
  t.same(escaped, [], 'no unhandled rejection or exception')
})
