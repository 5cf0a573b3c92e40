/**
 * Documentation, health, metrics, request ids and rate limiting of the admin plane (docs/api.md §4.8, §8, §9;
 * docs/wire-contract.md §1, §3, §12).
 */
import type { FastifyInstance } from 'fastify'
import t from 'tap'
import { buildAdminApp } from '../../../src/admin/app.js'
import { createLogger } from '../../../src/telemetry/logger.js'
import { createMetrics } from '../../../src/telemetry/metrics.js'
import { startTestAdmin, type TestAdmin, type TestResponse } from '../../helpers/admin.js'
import { expectError, type Asserts } from '../../helpers/expect.js'

type Method = 'GET' | 'POST' | 'PUT' | 'DELETE'

/** The routes docs/api.md §4 and docs/wire-contract.md promise on the admin plane so far (swagger path syntax). */
const EXPECTED_OPERATIONS: [Method, string][] = [
  ['GET', '/v1/agents'],
  ['POST', '/v1/agents'],
  ['GET', '/v1/agents/{id}'],
  ['PUT', '/v1/agents/{id}'],
  ['DELETE', '/v1/agents/{id}'],
  ['POST', '/v1/agents/{id}/enable'],
  ['POST', '/v1/agents/{id}/disable'],
  ['GET', '/v1/agents/{id}/status'],
  ['GET', '/v1/keys'],
  ['POST', '/v1/keys'],
  ['DELETE', '/v1/keys/{id}'],
  ['POST', '/v1/orgs'],
  ['GET', '/v1/orgs'],
  ['GET', '/v1/me'],
  ['POST', '/v1/console/session'],
  ['GET', '/v1/console/session'],
  ['DELETE', '/v1/console/session'],
  ['GET', '/v1/agents/{id}/badges'],
  ['GET', '/v1/agents/{id}/groups'],
  ['POST', '/v1/agent-cards/validate'],
  ['POST', '/v1/agent-cards/verify'],
  ['GET', '/schemas/agent-card/v1.json'],
  ['GET', '/healthz'],
  ['GET', '/readyz'],
  ['GET', '/metrics'],
  ['GET', '/v1/gateway/decisions'],
  ['GET', '/v1/gateway/decisions/stream'],
  ['GET', '/v1/gateway/watch'],
  ['GET', '/v1/gateway/decisions/{decisionId}'],
  ['GET', '/v1/gateway/status'],
  ['GET', '/v1/breakglass/uses'],
  ['GET', '/v1/authority/keys'],
]

/** Operations that exist only to refuse (the OAuth authorization endpoint, required by clients' metadata schemas). */
const REFUSING_OPERATIONS = new Set(['GET /oauth/authorize'])

/** Builds a second, unstarted admin app with the same dependencies as the harness, to inspect its routes. */
async function buildInspectableApp(admin: TestAdmin): Promise<FastifyInstance> {
  const app = await buildAdminApp({
    keyRing: admin.keyRing,
    config: admin.config,
    db: admin.database.db,
    logger: createLogger('silent'),
    metrics: createMetrics(),
    redis: null,
    readiness: async () => ({ ready: true, checks: { database: true } }),
  })
  await app.ready()
  return app
}

/**
 * Every (method, path) the app registered, read from `printRoutes({commonPrefix: false})`: each line is
 * a path segment under its parent (4 columns of indentation per level) followed by its methods.
 */
function registeredRoutes(app: FastifyInstance): { method: string; url: string }[] {
  const line = /^((?:│ {3}| {4})*)(?:├── |└── )(.+?) \(([A-Z, ]+)\)$/
  const stack: string[] = []
  const out: { method: string; url: string }[] = []
  for (const text of app.printRoutes({ commonPrefix: false }).split('\n')) {
    const match = line.exec(text)
    if (match === null) continue
    const depth = match[1]!.length / 4
    const url = (depth === 0 ? '' : stack[depth - 1]!) + match[2]!
    stack[depth] = url
    stack.length = depth + 1
    for (const method of match[3]!.split(',').map((m) => m.trim())) out.push({ method, url })
  }
  return out
}

/** `:id` ↔ `{id}`; a trailing wildcard (`/console/*`, the console's client-side routes) is `{*}` in the description. */
function toSwaggerPath(url: string): string {
  return url.replace(/:([A-Za-z_][A-Za-z0-9_]*)/g, '{$1}').replace(/\/\*$/, '/{*}')
}

function toFastifyPath(path: string): string {
  return path.replace(/\/\{\*\}$/, '/*').replace(/\{([^}]+)\}/g, ':$1')
}

function checkRateLimitHeaders(t: Asserts, res: TestResponse, limit: number, label: string): void {
  const now = Math.floor(Date.now() / 1000)
  const max = res.headers.get('x-ratelimit-limit')
  const remaining = res.headers.get('x-ratelimit-remaining')
  const reset = res.headers.get('x-ratelimit-reset')
  t.equal(max, String(limit), `${label}: x-ratelimit-limit`, {})
  t.ok(remaining !== null && /^\d+$/.test(remaining) && Number(remaining) <= limit, `${label}: x-ratelimit-remaining is a count (${remaining})`, {})
  t.ok(reset !== null && /^\d+$/.test(reset), `${label}: x-ratelimit-reset is an integer (${reset})`, {})
  const resetAt = Number(reset)
  t.ok(resetAt >= now - 1 && resetAt <= now + 61, `${label}: x-ratelimit-reset is absolute Unix seconds within a minute (${resetAt - now} s ahead)`, {})
}

t.test('documentation, health, metrics, request ids and limits', async (t) => {
  const admin = await startTestAdmin(t)

  await t.test('swagger document is public and covers every route', async (t) => {
    const res = await admin.request('GET', '/swagger/doc.json', { key: null })
    t.equal(res.status, 200, 'public')
    t.equal(res.body.swagger, '2.0', 'OpenAPI 2.0')
    t.type(res.body.info?.version, 'string')
    const paths = res.body.paths as Record<string, Record<string, { responses?: Record<string, unknown> }>>
    t.type(paths, 'object')
    for (const [method, path] of EXPECTED_OPERATIONS) {
      t.ok(paths[path]?.[method.toLowerCase()] !== undefined, `documents ${method} ${path}`)
    }

    const app = await buildInspectableApp(admin)
    t.teardown(() => app.close())
    for (const [method, path] of EXPECTED_OPERATIONS) {
      t.ok(app.hasRoute({ method, url: toFastifyPath(path) }), `${method} ${path} is a real route`)
    }
    // every documented operation is served ...
    let documented = 0
    for (const [path, operations] of Object.entries(paths)) {
      for (const [method, operation] of Object.entries(operations)) {
        if (!['get', 'post', 'put', 'delete', 'patch'].includes(method)) continue
        documented++
        t.ok(app.hasRoute({ method: method.toUpperCase() as Method, url: toFastifyPath(path) }), `documented ${method.toUpperCase()} ${path} is a real route`)
        const statuses = Object.keys(operation.responses ?? {})
        if (REFUSING_OPERATIONS.has(`${method.toUpperCase()} ${path}`)) {
          t.ok(statuses.length > 0 && statuses.every((status) => /^[45]\d\d$/.test(status)), `${method.toUpperCase()} ${path} documents only its refusals`)
        } else {
          // A redirect (GET /console → /console/) is its route's success.
          t.ok(statuses.some((status) => /^[23]\d\d$/.test(status)), `${method.toUpperCase()} ${path} documents a success response`)
        }
      }
    }
    t.ok(documented >= EXPECTED_OPERATIONS.length, `${documented} operations documented`)
    // ... and every served route (apart from the documentation itself and implicit HEADs) is documented.
    const served = registeredRoutes(app).filter((r) => r.method !== 'HEAD' && !r.url.startsWith('/swagger'))
    t.ok(served.length >= EXPECTED_OPERATIONS.length, `read ${served.length} routes from the route table`)
    for (const [method, path] of EXPECTED_OPERATIONS) {
      t.ok(served.some((r) => r.method === method && toSwaggerPath(r.url) === path), `route table lists ${method} ${path} (parser sanity)`)
    }
    for (const route of served) {
      t.ok(paths[toSwaggerPath(route.url)]?.[route.method.toLowerCase()] !== undefined, `served ${route.method} ${route.url} is documented`)
    }
  })

  await t.test('swagger UI is public HTML', async (t) => {
    const res = await admin.request('GET', '/swagger/index.html', { key: null })
    t.equal(res.status, 200)
    t.match(res.headers.get('content-type') ?? '', /^text\/html/)
    t.match(res.text, /<html/i)
    t.match(res.text, /swagger/i)
    // Its assets are routes of a plugin registered before the request decorators: they must not break on their absence.
    for (const asset of ['/swagger/static/swagger-ui.css', '/swagger/static/index.css', '/swagger/static/swagger-ui-bundle.js', '/swagger/index.js']) {
      t.equal((await admin.request('GET', asset, { key: null })).status, 200, asset)
    }
  })

  await t.test('health, readiness and metrics are public', async (t) => {
    const health = await admin.request('GET', '/healthz', { key: null })
    t.equal(health.status, 200)
    t.same(health.body, { status: 'ok' })
    const ready = await admin.request('GET', '/readyz', { key: null })
    t.equal(ready.status, 200)
    t.equal(ready.body.status, 'ready')
    t.same(ready.body.checks, { database: true, authorityKey: true, gateway: true, accepting: true }, 'the checks main.ts wires, not a stand-in')

    // make a labelled request to count, with an id that must never become a label
    const agent = await admin.request('POST', '/v1/agents', { body: { name: 'metered' } })
    const id: string = agent.body.data.id
    t.equal((await admin.request('GET', `/v1/agents/${id}`)).status, 200)
    const metrics = await admin.request('GET', '/metrics', { key: null })
    t.equal(metrics.status, 200)
    t.match(metrics.headers.get('content-type') ?? '', /^text\/plain/)
    t.match(metrics.text, /service_admin_requests_total/, 'the admin request counter is exported')
    t.match(metrics.text, /service_admin_requests_total\{[^}]*route="\/v1\/agents\/:id"[^}]*\} \d+/, 'labelled by route pattern')
    t.match(metrics.text, /status_class="2xx"/, 'and status class')
    t.notOk(metrics.text.includes(id), 'no agent id in any label')
    t.notOk(metrics.text.includes(admin.operatorKey.slice(3, 20)), 'no key material')
  })

  await t.test('x-request-id on every response', async (t) => {
    const uuid = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/
    const plain = await admin.request('GET', '/healthz', { key: null })
    t.match(plain.headers.get('x-request-id') ?? '', uuid, 'generated when absent')
    const other = await admin.request('GET', '/healthz', { key: null })
    t.not(other.headers.get('x-request-id'), plain.headers.get('x-request-id'), 'unique per request')
    for (const [label, res] of [
      ['401', await admin.request('GET', '/v1/agents', { key: null })],
      ['404', await admin.request('GET', '/no/such/route', { key: null })],
      ['400', await admin.request('GET', '/v1/agents/not-a-uuid')],
      ['201', await admin.request('POST', '/v1/keys', { body: { name: 'rid' } })],
    ] as const) {
      t.match(res.headers.get('x-request-id') ?? '', uuid, `present on a ${label}`)
    }
    const echoed = await admin.request('GET', '/v1/agents', { headers: { 'x-request-id': 'trace-123_abc.def:9' } })
    t.equal(echoed.headers.get('x-request-id'), 'trace-123_abc.def:9', 'a valid incoming id is echoed')
    t.ok(admin.logs.some((l) => l.includes('"reqId":"trace-123_abc.def:9"')), 'and used in the log')
    for (const [label, bad] of [
      ['200 characters', 'r'.repeat(200)],
      ['65 characters', 'r'.repeat(65)],
      ['spaces', 'a b c'],
      ['JSON-ish', '{"x":1}'],
      ['slashes', '../../etc'],
    ] as const) {
      const res = await admin.request('GET', '/healthz', { key: null, headers: { 'x-request-id': bad } })
      const id = res.headers.get('x-request-id') ?? ''
      t.not(id, bad, `an invalid incoming id (${label}) is replaced`)
      t.match(id, uuid, `by a fresh one (${label})`)
    }
  })

  await t.test('rate-limit headers on /v1 responses', async (t) => {
    const first = await admin.request('GET', '/v1/agents')
    checkRateLimitHeaders(t, first, 1000, 'GET /v1/agents')
    const second = await admin.request('GET', '/v1/agents')
    t.equal(Number(second.headers.get('x-ratelimit-remaining')), Number(first.headers.get('x-ratelimit-remaining')) - 1, 'remaining counts down')
    checkRateLimitHeaders(t, await admin.request('POST', '/v1/keys', { body: { name: 'rl' } }), 1000, 'POST /v1/keys')
    checkRateLimitHeaders(t, await admin.request('GET', '/v1/agents', { key: 'garbage' }), 1000, 'a 401')
    checkRateLimitHeaders(t, await admin.request('GET', '/v1/agents/not-a-uuid'), 1000, 'a 400')
  })

  await t.test('unknown routes are 404 not_found', async (t) => {
    expectError(t, await admin.request('GET', '/no/such/route', { key: null }), 404, 'not_found', 'GET unknown')
    expectError(t, await admin.request('GET', '/v1/nothing-here'), 404, 'not_found', 'GET unknown /v1')
    expectError(t, await admin.request('POST', '/v1/unknown', { body: { a: 1 } }), 404, 'not_found', 'POST unknown /v1')
    const wrongMethod = await admin.request('PATCH', '/v1/agents', { body: { name: 'x' } })
    t.ok(wrongMethod.status === 404 || wrongMethod.status === 405, `an unsupported method is 404/405 (${wrongMethod.status})`)
    t.ok(['not_found', 'method_not_allowed'].includes(wrongMethod.body?.error), 'with an error code')
  })
})

t.test('per-key rate limit', async (t) => {
  const admin = await startTestAdmin(t, { SERVICE_RATE_LIMIT_PER_MINUTE: '5' })
  // request 1 of the operator key: a second key to prove the limit is per key
  const second = await admin.request('POST', '/v1/keys', { body: { name: 'second' } })
  t.equal(second.status, 201)
  checkRateLimitHeaders(t, second, 5, 'request 1')
  t.equal(second.headers.get('x-ratelimit-remaining'), '4')
  const secondKey: string = second.body.data.key
  for (let i = 2; i <= 5; i++) {
    const res = await admin.request('GET', '/v1/agents')
    t.equal(res.status, 200, `request ${i} is allowed`)
    t.equal(res.headers.get('x-ratelimit-remaining'), String(5 - i), `request ${i}: remaining ${5 - i}`)
  }
  const before = await admin.database.db.query<{ n: number }>('SELECT count(*)::int AS n FROM agents')
  const limited = await admin.request('POST', '/v1/agents', { body: { name: 'over the limit' } })
  expectError(t, limited, 429, 'rate_limit_exceeded', 'the 6th request')
  const retryAfter = limited.headers.get('retry-after')
  t.ok(retryAfter !== null && /^\d+$/.test(retryAfter) && Number(retryAfter) > 0 && Number(retryAfter) <= 60, `retry-after is 1..60 seconds (${retryAfter})`)
  checkRateLimitHeaders(t, limited, 5, 'the 429')
  t.equal(limited.headers.get('x-ratelimit-remaining'), '0')
  const after = await admin.database.db.query<{ n: number }>('SELECT count(*)::int AS n FROM agents')
  t.equal(after[0]?.n, before[0]?.n, 'the limited request wrote nothing')
  expectError(t, await admin.request('GET', '/v1/agents', { key: null, headers: { 'x-service-registry-key': admin.operatorKey } }), 429, 'rate_limit_exceeded', 'the same key in the other header shares the bucket')

  const other = await admin.request('GET', '/v1/agents', { key: secondKey })
  t.equal(other.status, 200, 'another key is still allowed')
  t.equal(other.headers.get('x-ratelimit-remaining'), '4', 'with its own budget')
  t.equal((await admin.request('GET', '/healthz', { key: null })).status, 200, 'health checks are never limited')
  t.equal((await admin.request('GET', '/metrics', { key: null })).status, 200, 'nor metrics')

  // Regression (security): failed authentications count against the caller's address, so guessing keys
  // does not earn a fresh budget per guess.
  let limitedGuess = false
  for (let i = 0; i < 7; i++) {
    const res = await admin.request('GET', '/v1/agents', { key: `sk_${String(i).repeat(43)}` })
    if (res.status === 429) limitedGuess = true
  }
  t.ok(limitedGuess, 'seven wrong keys from one address within a limit of 5 are rate limited')
})
