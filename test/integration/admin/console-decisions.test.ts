/**
 * The console's live reads on an appliance run in-process (admin plane and gateway, embedded PDP, EM-GUARD,
 * a real PostgreSQL): allowed and denied requests through the gateway appear in `GET /v1/gateway/decisions`,
 * a denial opens with its PDP request, the SSE stream delivers a new denial with its reason and resumes after
 * `Last-Event-ID`; members see their organization's agents only, operators everything; no badge, API key,
 * header value or query reaches an event, the stream or the log. Also the break-glass uses, the gateway
 * status, the authority keys, the stream caps, an admin-only process, and a shutdown with a stream open.
 */
import t, { type Test } from 'tap'
import { generateKeyPairSync } from 'node:crypto'
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { Writable } from 'node:stream'
import { generateApiKeySecret } from '../../../src/core/api-key.js'
import { signBreakglassToken } from '../../../src/core/breakglass.js'
import { signSelfSignedBadge } from '../../../src/core/self-signed-badge.js'
import { SseReader, type SseEvent } from '../../../src/core/sse.js'
import { loadConfig } from '../../../src/config/index.js'
import { rotateKeyFile } from '../../../src/authority/key-ring.js'
import { startAppliance } from '../../../src/main.js'
import { createLogger } from '../../../src/telemetry/logger.js'
import { adminCall, agentWithBadge } from '../../helpers/appliance.js'
import { startTestAdmin } from '../../helpers/admin.js'
import { startUpstream } from '../../helpers/upstream-server.js'
import { prepareWorkspace } from '../../helpers/workspace.js'

t.setTimeout(120_000)

const dataDir = mkdtempSync(path.join(tmpdir(), 'svc-console-'))
const operatorKey = generateApiKeySecret()
const { orgId, databaseEnv } = await prepareWorkspace(t, dataDir, operatorKey)
const upstream = await startUpstream(t)
const breakglass = generateKeyPairSync('ed25519')
const breakglassFile = path.join(dataDir, 'breakglass.pub')
writeFileSync(breakglassFile, breakglass.publicKey.export({ type: 'spki', format: 'pem' }))

const config = loadConfig({
  ...databaseEnv,
  SERVICE_DATA_DIR: dataDir,
  PORT: '0',
  SERVICE_GATEWAY_PORT: '0',
  SERVICE_HOST: '127.0.0.1',
  CA_ISSUER_URL: 'http://registry.test',
  SERVICE_BOOTSTRAP_API_KEY: operatorKey,
  SERVICE_UPSTREAM_URL: upstream.url,
  SERVICE_EMBEDDED_PDP: 'true',
  SERVICE_WORKSPACE: orgId,
  SERVICE_ENFORCEMENT_MODE: 'EM-GUARD',
  SERVICE_BREAKGLASS_PUBLIC_KEY: breakglassFile,
  SERVICE_CONSOLE_HEARTBEAT: '200ms',
  SERVICE_CONSOLE_DECISIONS_BUFFER: '20',
  SERVICE_CONSOLE_STREAMS_MAX: '3',
  SERVICE_CONSOLE_STREAMS_PER_ORG: '2',
  SERVICE_SHUTDOWN_GRACE_MS: '15000',
  SERVICE_ACCEPT_SELF_SIGNED: 'true',
})
const logText: string[] = []
const sink = new Writable({ write(chunk, _encoding, done) { logText.push(String(chunk)); done() } })
const appliance = await startAppliance(config, { logger: createLogger('info', sink) })
let closed = false
t.teardown(async () => { if (!closed) await appliance.close() })
const admin = appliance.adminUrl
const gw = appliance.gatewayUrl as string

const [allowed, denied] = await Promise.all([agentWithBadge(admin, operatorKey, 'console-allowed'), agentWithBadge(admin, operatorKey, 'console-denied')])
const member = await adminCall(admin, operatorKey, 'POST', '/v1/keys', { name: 'console member', role: 'member' })
const memberKey = member.body.data.key as string
const other = await adminCall(admin, operatorKey, 'POST', '/v1/orgs', { name: 'console-other' })
const otherKey = other.body.data.apiKey.key as string
const otherOrgId = other.body.data.org.id as string
const stranger = await agentWithBadge(admin, otherKey, 'console-stranger')

const HEADER_SECRET = 'hunter2-header-value'
const QUERY_SECRET = 'query-secret-value'
/** Strings that must never leave the process in an event, a stream or a log line. */
const SECRETS = [allowed.token, denied.token, stranger.token, operatorKey, memberKey, otherKey, HEADER_SECRET, QUERY_SECRET]

function noSecrets(t: Test, text: string, what: string): void {
  const found = SECRETS.filter((secret) => text.includes(secret))
  t.same(found.map((s) => s.slice(0, 8)), [], `no secret in ${what}`)
}

async function call(agent: { token: string }, urlPath: string, headers: Record<string, string> = {}): Promise<number> {
  const res = await fetch(`${gw}${urlPath}`, { headers: { authorization: `Bearer ${agent.token}`, 'x-note': HEADER_SECRET, ...headers } })
  await res.arrayBuffer()
  return res.status
}

async function until<T>(ms: number, fn: () => Promise<T | undefined>): Promise<T | undefined> {
  const deadline = Date.now() + ms
  for (;;) {
    const value = await fn()
    if (value !== undefined || Date.now() > deadline) return value
    await new Promise((r) => setTimeout(r, 50))
  }
}

/** GET on the admin plane, keeping the raw text for the secret checks. */
async function get(key: string | null, urlPath: string): Promise<{ status: number; body: any; text: string }> {
  const res = await fetch(`${admin}${urlPath}`, { headers: key === null ? {} : { authorization: `Bearer ${key}` } })
  const text = await res.text()
  return { status: res.status, text, body: text.startsWith('{') ? JSON.parse(text) : text }
}
const list = (key: string, query = ''): Promise<{ status: number; body: any; text: string }> => get(key, `/v1/gateway/decisions${query}`)

interface Stream {
  readonly status: number
  readonly headers: Headers
  readonly text: () => string
  /** The next event (comments excluded) matching `match`, or undefined after `ms`. */
  next(match: (event: SseEvent) => boolean, ms?: number): Promise<SseEvent | undefined>
  /** Whether the server ended the stream within `ms`. */
  ended(ms: number): Promise<boolean>
  close(): void
}

async function openStream(key: string | null, headers: Record<string, string> = {}): Promise<Stream> {
  const abort = new AbortController()
  const res = await fetch(`${admin}/v1/gateway/decisions/stream`, {
    headers: { ...(key === null ? {} : { authorization: `Bearer ${key}` }), 'accept-encoding': 'gzip, br', ...headers },
    signal: abort.signal,
  })
  let raw = ''
  const events: SseEvent[] = []
  const reader = new SseReader(1 << 20)
  let done = false
  const waiters = new Set<() => void>()
  const notify = (): void => { for (const w of waiters) w() }
  if (res.body !== null && res.status === 200) {
    void (async () => {
      try {
        for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
          raw += Buffer.from(chunk).toString('utf8')
          reader.push(chunk, (event) => { if (event.event !== undefined || event.data !== undefined) events.push(event) })
          notify()
        }
      } catch {
        // aborted
      }
      done = true
      notify()
    })()
  }
  const wait = (ms: number, check: () => boolean): Promise<boolean> => new Promise((resolve) => {
    if (check()) return resolve(true)
    const timer = setTimeout(() => { waiters.delete(waiter); resolve(check()) }, ms)
    const waiter = (): void => { if (check()) { clearTimeout(timer); waiters.delete(waiter); resolve(true) } }
    waiters.add(waiter)
  })
  let read = 0
  return {
    status: res.status,
    headers: res.headers,
    text: () => raw,
    async next(match, ms = 5000) {
      let found: SseEvent | undefined
      await wait(ms, () => {
        while (read < events.length) {
          const event = events[read++] as SseEvent
          if (match(event)) {
            found = event
            return true
          }
        }
        return false
      })
      return found
    },
    ended: (ms) => wait(ms, () => done),
    close: () => abort.abort(),
  }
}

const isDecision = (event: SseEvent): boolean => event.event === 'decision'
const dataOf = (event: SseEvent | undefined): any => JSON.parse(event?.data ?? 'null')

// A policy that denies one agent, approved through the admin plane and waited for at the gateway.
const proposed = await adminCall(admin, operatorKey, 'POST', `/v1/orgs/${orgId}/policy/org`, { yaml_content: `version: "1"\ndenied_dids: ["${denied.did}"]\n` })
await adminCall(admin, operatorKey, 'POST', `/v1/orgs/${orgId}/policy/proposals/${proposed.body.id}/approve`)
const deniedOnce = await until(10_000, async () => ((await call(denied, '/denied/probe')) === 403 ? true : undefined))
t.ok(deniedOnce, 'the deny policy reached the gateway')

t.test('the list: allowed and denied requests, their fields, nothing secret', async (t) => {
  t.equal(await call(allowed, `/allowed/thing?token=${QUERY_SECRET}`, { 'x-service-txn': 'console-txn-1' }), 200)
  t.equal(await call(denied, `/denied/thing?token=${QUERY_SECRET}`), 403)
  t.equal(await call(stranger, '/stranger/thing'), 200)
  const res = await list(operatorKey, '?limit=50')
  t.equal(res.status, 200)
  t.equal(res.body.gateway, true, 'a gateway runs here')
  const events = res.body.data as any[]
  t.ok(events.every((e, i) => i === 0 || e.seq > events[i - 1].seq), 'newest last, by seq')
  const allow = events.find((e) => e.path === '/allowed/thing')
  t.match(allow, {
    decision: 'ALLOW', status: 200, agent_did: allowed.did, org_id: orgId, method: 'GET', operation: 'GET /allowed/thing', mode: 'EM-GUARD',
    protocol: 'http', txn_id: 'console-txn-1', breakglass: null, error_code: null,
  })
  t.match(allow.request_id, /^gw-/)
  t.match(allow.gateway_id, /^gw-[0-9a-f]{12}$/, 'the event names the gateway that decided')
  t.ok(logText.join('').includes('"msg":"gateway id"'), 'the gateway id is logged at start')
  t.notOk('pdp_request' in allow, 'the list carries no PDP request')
  const deny = events.find((e) => e.path === '/denied/thing')
  t.match(deny, { decision: 'DENY', status: 403, agent_did: denied.did, org_id: orgId, reason: 'denied_did' })
  t.ok(typeof deny.decision_id === 'string' && deny.decision_id !== '')
  t.match(events.find((e) => e.path === '/stranger/thing'), { org_id: otherOrgId, agent_did: stranger.did })
  noSecrets(t, res.text, 'the list')

  const opened = await get(operatorKey, `/v1/gateway/decisions/${encodeURIComponent(deny.decision_id)}`)
  t.equal(opened.status, 200)
  t.match(opened.body.data, { seq: deny.seq, decision: 'DENY', reason: 'denied_did' })
  t.match(opened.body.data.pdp_request, { subject: { did: denied.did }, action: { operation: 'GET /denied/thing' }, environment: { workspace: orgId } })
  t.equal(opened.body.data.pdp_request.resource.identifier, '/denied/thing?…', 'the query of the target is not shown')
  noSecrets(t, opened.text, 'an opened decision')
  const missing = await get(operatorKey, '/v1/gateway/decisions/no-such-decision')
  t.match(missing, { status: 404, body: { error: 'decision_not_found' } })
  for (const bad of ['x'.repeat(300), 'a%00b', '%ZZ']) {
    const refused = await get(operatorKey, `/v1/gateway/decisions/${bad}`)
    t.equal(refused.status, 400, `a bad decision id (${bad.slice(0, 10)}) is 400`)
    t.type(refused.body.error, 'string', 'with the error shape')
  }
})

t.test('members see their organization\'s agents; operators everything', async (t) => {
  const mine = await list(memberKey, '?limit=1000')
  t.equal(mine.status, 200)
  t.ok(mine.body.data.length > 0)
  t.ok(mine.body.data.every((e: any) => e.org_id === orgId), 'the member sees its org only')
  const theirs = await list(otherKey)
  t.ok(theirs.body.data.length > 0)
  t.ok(theirs.body.data.every((e: any) => e.org_id === otherOrgId && e.agent_did === stranger.did), 'the other org sees its agent only')
  const deny = mine.body.data.find((e: any) => e.decision === 'DENY')
  const hidden = await get(otherKey, `/v1/gateway/decisions/${encodeURIComponent(deny.decision_id)}`)
  t.match(hidden, { status: 404, body: { error: 'decision_not_found' } }, 'another org\'s denial is not there')
  const limited = await list(memberKey, '?limit=1')
  t.equal(limited.body.data.length, 1)
  t.equal(limited.body.data[0].seq, mine.body.data.at(-1).seq, 'limit keeps the newest')
  const bad = await list(memberKey, '?limit=0')
  t.match(bad, { status: 400, body: { error: 'invalid_request' } })
  const anonymous = await get(null, '/v1/gateway/decisions')
  t.equal(anonymous.status, 401)
})

t.test('a DID claimed after the fact: events belong to the organization the badge was issued for', async (t) => {
  // A stranger calls with its own did:key; one badge reuses the jti the other organization's agent holds.
  const nowSeconds = Math.floor(Date.now() / 1000)
  const key = generateKeyPairSync('ed25519').privateKey
  const own = signSelfSignedBadge(key, { jti: 'stranger-own-jti', issuedAt: nowSeconds - 10, expiresAt: nowSeconds + 600 })
  const borrowed = signSelfSignedBadge(key, { jti: stranger.jti, issuedAt: nowSeconds - 10, expiresAt: nowSeconds + 600 })
  t.equal(await call(own, '/self-signed/early'), 200)
  t.equal(await call(borrowed, '/self-signed/borrowed-jti'), 200)
  // Later the other organization registers that DID as its agent, with no proof of possession asked.
  const claimed = await adminCall(admin, otherKey, 'POST', '/v1/agents', { name: 'claimed', domain: 'example.com', did: own.did })
  t.equal(claimed.status, 201)
  const theirs = await list(otherKey, '?limit=1000')
  t.notOk(theirs.body.data.some((e: any) => e.agent_did === own.did), 'the stranger\'s earlier events stay out of the claiming organization\'s view')
  const everything = await list(operatorKey, '?limit=1000')
  const early = everything.body.data.filter((e: any) => e.agent_did === own.did)
  t.equal(early.length, 2, 'operators see both')
  t.ok(early.every((e: any) => e.org_id === null), 'attributed to no organization: the badges were self-signed')
  // Once the organization's own badge for the agent is used, those events are the organization's.
  const issued = await adminCall(admin, otherKey, 'POST', `/v1/agents/${claimed.body.data.id}/badge`, { domain: 'example.com' })
  t.equal(await call({ token: issued.body.data.token }, '/self-signed/issued'), 200)
  const after = await list(otherKey, '?limit=1000')
  t.match(after.body.data.filter((e: any) => e.agent_did === own.did), [{ path: '/self-signed/issued', org_id: otherOrgId }])
})

t.test('the stream: a new denial arrives with its reason; Last-Event-ID resumes; org filtering', async (t) => {
  const operator = await openStream(operatorKey)
  t.teardown(() => operator.close())
  t.equal(operator.status, 200)
  t.match(operator.headers.get('content-type'), /^text\/event-stream/)
  t.equal(operator.headers.get('content-encoding'), null, 'not compressed, though the client offered it')
  t.equal(operator.headers.get('cache-control'), 'no-store')
  const outsider = await openStream(otherKey)
  t.teardown(() => outsider.close())

  t.equal(await call(denied, '/denied/streamed'), 403)
  t.equal(await call(stranger, '/stranger/streamed'), 200)
  const event = await operator.next((e) => isDecision(e) && dataOf(e).path === '/denied/streamed')
  t.ok(event !== undefined, 'the denial arrives on the operator\'s stream')
  t.equal(event?.id, String(dataOf(event).seq), 'id is the seq')
  t.match(dataOf(event), { decision: 'DENY', reason: 'denied_did', agent_did: denied.did, org_id: orgId })
  t.ok(await operator.next((e) => isDecision(e) && dataOf(e).path === '/stranger/streamed'), 'and the other org\'s request too')

  const seen = await outsider.next((e) => isDecision(e) && dataOf(e).path === '/stranger/streamed')
  t.ok(seen, 'the other org sees its own agent\'s request')
  t.notMatch(outsider.text(), /\/denied\/streamed/, 'but not the denial of another org\'s agent')

  const heartbeat = await until(2000, async () => (operator.text().includes(': heartbeat\n\n') ? true : undefined))
  t.ok(heartbeat, 'a heartbeat comment while idle')

  // Resume: everything after the given id comes from the buffer at once.
  const resumed = await openStream(operatorKey, { 'last-event-id': String(Number(event?.id) - 1) })
  t.teardown(() => resumed.close())
  const first = await resumed.next(isDecision)
  t.equal(first?.id, event?.id, 'the stream resumes right after Last-Event-ID')
  noSecrets(t, operator.text() + outsider.text() + resumed.text(), 'the streams')
  resumed.close()
  outsider.close()
  operator.close()
})

t.test('a resume from before the buffer starts with a gap event; a decision that left the buffer is 404', async (t) => {
  const oldest = (await list(operatorKey, '?limit=1000')).body.data[0]
  for (let i = 0; i < 20; i++) t.equal(await call(allowed, `/allowed/fill-${i}`), 200)
  const resumed = await openStream(operatorKey, { 'last-event-id': String(oldest.seq) })
  t.teardown(() => resumed.close())
  const gap = await resumed.next(() => true)
  t.equal(gap?.event, 'gap', 'the first event says what was lost')
  const first = (await list(operatorKey, '?limit=1000')).body.data[0]
  t.same(dataOf(gap), { from: oldest.seq + 1, to: first.seq - 1 })
  t.equal(gap?.id, undefined, 'a gap has no id, so a reconnect resumes after the last delivered event')
  const next = await resumed.next(isDecision)
  t.equal(Number(next?.id), first.seq, 'then the buffer from its oldest event')
  resumed.close()
  if (oldest.decision_id !== null) {
    const gone = await get(operatorKey, `/v1/gateway/decisions/${encodeURIComponent(oldest.decision_id)}`)
    t.match(gone, { status: 404, body: { error: 'decision_not_found' } })
  }
  await new Promise((r) => setTimeout(r, 300))
})

t.test('stream refusals: no credential, a bad Last-Event-ID, and the caps', async (t) => {
  const anonymous = await openStream(null)
  t.equal(anonymous.status, 401, 'authentication before any stream byte')
  t.match(anonymous.headers.get('content-type'), /application\/json/)
  const bad = await openStream(operatorKey, { 'last-event-id': 'abc' })
  t.equal(bad.status, 400)
  const huge = await get(operatorKey, '/v1/gateway/decisions?limit=abc')
  t.match(huge, { status: 400, body: { error: 'invalid_request' } })
  const tooLong = await fetch(`${admin}/v1/gateway/decisions/stream`, { headers: { authorization: `Bearer ${operatorKey}`, 'last-event-id': '9'.repeat(100) } })
  t.equal(tooLong.status, 400, 'an over-long Last-Event-ID')
  await tooLong.arrayBuffer()
  // Closed streams give their slots back once the server saw the close.
  await new Promise((r) => setTimeout(r, 300))
  const a = await openStream(memberKey)
  const b = await openStream(memberKey)
  t.teardown(() => { a.close(); b.close() })
  t.equal(a.status, 200)
  t.equal(b.status, 200)
  const third = await fetch(`${admin}/v1/gateway/decisions/stream`, { headers: { authorization: `Bearer ${operatorKey}` } })
  t.equal(third.status, 429, 'a third stream of one org is refused')
  t.equal(((await third.json()) as { error: string }).error, 'too_many_streams')
  const c = await openStream(otherKey)
  t.teardown(() => c.close())
  t.equal(c.status, 200)
  const fourth = await fetch(`${admin}/v1/gateway/decisions/stream`, { headers: { authorization: `Bearer ${otherKey}` } })
  t.equal(fourth.status, 503, 'the process cap')
  t.equal(((await fourth.json()) as { error: string }).error, 'stream_limit_reached')
  a.close()
  b.close()
  c.close()
  await new Promise((r) => setTimeout(r, 300))
})

t.test('break-glass uses', async (t) => {
  const now = Math.floor(Date.now() / 1000)
  const jti = `bg-console-${now}`
  const token = signBreakglassToken({
    jti, iat: now, exp: now + 300, iss: 'console-test', sub: 'oncall@example.com', reason: 'incident 42',
    scope: { methods: ['GET'], routes: ['/denied'] },
  }, breakglass.privateKey)
  SECRETS.push(token)
  t.equal(await call(denied, '/denied/override', { 'x-service-breakglass': token }), 200, 'the override lets the denied agent through')
  const uses = await get(operatorKey, '/v1/breakglass/uses')
  t.equal(uses.status, 200)
  t.match(uses.body.data.at(-1), { jti, operator: 'oncall@example.com', reason: 'incident 42', agent_did: denied.did, org_id: orgId, path: '/denied/override', method: 'GET' })
  noSecrets(t, uses.text, 'the break-glass uses')
  const asMember = await get(memberKey, '/v1/breakglass/uses')
  t.match(asMember, { status: 403, body: { error: 'forbidden' } }, 'admin only')
  const asOther = await get(otherKey, '/v1/breakglass/uses')
  t.same(asOther.body.data, [], 'another org\'s admin sees no override of this org\'s agent')
  const events = (await list(operatorKey, '?limit=1000')).body.data as any[]
  t.match(events.find((e) => e.path === '/denied/override'), { decision: 'ALLOW', breakglass: { jti }, decision_id: `breakglass:${jti}` })
})

t.test('gateway status and authority keys', async (t) => {
  const status = await get(memberKey, '/v1/gateway/status')
  t.equal(status.status, 200)
  t.match(status.body.data, { gateway: true, source: 'local', ready: true, stale: false, bundle_state: 'fresh', mode: 'EM-GUARD', route_modes: ['EM-GUARD'], pdp: 'embedded', note: null })
  t.match(status.body.data.gateway_id, /^gw-[0-9a-f]{12}$/, 'the gateway id generated at start')
  t.ok(typeof status.body.data.bundle_revision === 'string' && status.body.data.bundle_revision !== '')
  t.ok(Number.isInteger(status.body.data.bundle_age_seconds) && status.body.data.bundle_age_seconds >= 0)
  t.match(status.body.data, { workspace: orgId.toLowerCase(), registry_revision: status.body.data.bundle_revision, in_sync: true },
    'the gateway enforces the registry\'s current bundle of this organization')
  t.match((await get(otherKey, '/v1/gateway/status')).body.data, { gateway: true, workspace: null, registry_revision: null, in_sync: null },
    'another organization is not told whose policies the gateway enforces')
  // A newly approved policy: the registry's revision moves first, the gateway follows at its next pull.
  const next = await adminCall(admin, operatorKey, 'POST', `/v1/orgs/${orgId}/policy/org`, { yaml_content: `version: "1"\ndenied_dids: ["${denied.did}", "did:web:status.example.com"]\n` })
  await adminCall(admin, operatorKey, 'POST', `/v1/orgs/${orgId}/policy/proposals/${next.body.id}/approve`)
  const moved = await get(operatorKey, '/v1/gateway/status')
  t.not(moved.body.data.registry_revision, status.body.data.registry_revision, 'the approval made a new revision')
  const followed = await until(10_000, async () => {
    const now = (await get(operatorKey, '/v1/gateway/status')).body.data
    return now.in_sync === true && now.bundle_revision === moved.body.data.registry_revision ? now : undefined
  })
  t.ok(followed, 'and the gateway is back in sync with it')

  const before = await get(memberKey, '/v1/authority/keys')
  t.equal(before.status, 200)
  t.equal(before.body.data.length, 1)
  t.match(before.body.data[0], { kid: /^service-ca-/, state: 'active', retiresAt: null })
  t.equal(before.body.data[0].createdAt, before.body.data[0].activatedAt)
  const rotated = await rotateKeyFile(config.caKeyPath, Date.now() + 2000)
  const after = await until(8000, async () => {
    const res = await get(memberKey, '/v1/authority/keys')
    return res.body.data.length === 2 ? res : undefined
  })
  t.same(after?.body.data.map((k: any) => [k.kid, k.state]), [[rotated.kid, 'active'], [rotated.previous, 'published']], 'the rotated key signs, the old one stays published')
  t.notMatch(after?.text, /"(d|x|kty|crv)"/, 'no key material')
})

t.test('no secret reached the log', async (t) => {
  appliance.gateway?.gateway.flushLog()
  await new Promise((r) => setTimeout(r, 50))
  noSecrets(t, logText.join(''), 'the log')
})

t.test('an admin-only process answers empty feeds and says no gateway runs there', async (t) => {
  const adminOnly = await startTestAdmin(t)
  const decisions = await adminOnly.request('GET', '/v1/gateway/decisions')
  t.match(decisions, { status: 200, body: { success: true, data: [], gateway: false } })
  const status = await adminOnly.request('GET', '/v1/gateway/status')
  t.match(status.body.data, { gateway: false, source: 'none', note: 'no gateway reports', bundle_revision: null, bundle_state: 'none', pdp: 'unknown' })
  t.not(status.body.data.pdp, null, 'never a raw null PDP')
  const uses = await adminOnly.request('GET', '/v1/breakglass/uses')
  t.match(uses.body, { data: [], gateway: false })
})

t.test('shutdown with an open stream does not hang', async (t) => {
  const open = await openStream(operatorKey)
  t.equal(open.status, 200)
  const started = Date.now()
  closed = true
  await appliance.close()
  t.ok(Date.now() - started < 5000, `closed in ${Date.now() - started} ms, not the 15 s grace period`)
  t.ok(await open.ended(2000), 'the client sees the stream end')
})
