/**
 * The remote snapshot source's watch stream against a registry the test plays (a plain HTTP server on
 * 127.0.0.1): a well-behaved stream refreshes just the part each event names and slows the revocation
 * poll; a hostile one (wrong status or type, oversized or malformed events, events before `ready`,
 * silence past the heartbeat, an early end, binary garbage) is dropped without touching the snapshot,
 * polling carries on, and the source reconnects.
 */
import t, { type Test } from 'tap'
import { generateKeyPairSync, randomBytes } from 'node:crypto'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { createRemoteSource } from '../../../../src/gateway/snapshot/remote-source.js'
import { SnapshotHolder } from '../../../../src/gateway/snapshot/snapshot.js'

t.setTimeout(120_000)
const WORKSPACE = '0190a5e2-7b6c-7def-8abc-0123456789ab'
const OTHER_ORG = '0190a5e2-7b6c-7def-8abc-0123456789ac'
const ISSUER = 'http://localhost:8080'
const KEY = { ...generateKeyPairSync('ed25519').publicKey.export({ format: 'jwk' }), kid: 'service-ca-1', use: 'sig', alg: 'EdDSA' }
const policy = { min_trust_level: null, allowed_dids: null, denied_dids: [], rate_limits: [], operations: [], mcp_tools: [], capability_classes: [] }

type Watch = (req: IncomingMessage, res: ServerResponse) => void

interface FakeRegistry {
  readonly url: string
  readonly calls: Map<string, number>
  /** What the next watch connection gets. */
  watch: Watch
  revoked: string[]
  bundleRevision: string
  readonly watchRequests: IncomingMessage[]
}

const sse = (res: ServerResponse): ServerResponse => res.writeHead(200, { 'content-type': 'text/event-stream' })
const event = (name: string, data: unknown): string => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`
const READY = event('ready', { heartbeat_ms: 200 })

async function startRegistry(t: Test, watch: Watch): Promise<FakeRegistry> {
  const registry: FakeRegistry = { url: '', calls: new Map(), watch, revoked: [], bundleRevision: 'r1', watchRequests: [] }
  const server = createServer((req, res) => {
    const path = (req.url ?? '').split('?')[0] ?? ''
    registry.calls.set(path, (registry.calls.get(path) ?? 0) + 1)
    if (path === '/v1/gateway/watch') {
      registry.watchRequests.push(req)
      registry.watch(req, res)
      return
    }
    const now = new Date().toISOString()
    const body = path === '/.well-known/service-authority' ? { issuer: ISSUER }
      : path === '/.well-known/jwks.json' ? { keys: [KEY] }
      : path === '/v1/revocations' ? { success: true, data: { revocations: registry.revoked.map((jti) => ({ jti, revokedAt: now })), nextCursor: null, syncedAt: now } }
      : path === `/v1/bundles/${WORKSPACE}` ? { revision: registry.bundleRevision, modules: {}, data: { config: policy } }
      : null
    if (body === null) return res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":"not_found"}')
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(body))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => {
    server.closeAllConnections()
    server.close(() => resolve())
  }))
  return Object.assign(registry, { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` })
}

async function startSource(t: Test, registry: FakeRegistry, revocationPollMs = 50) {
  const holder = new SnapshotHolder()
  const states: { up: boolean; error: string | null }[] = []
  const pushed: string[] = []
  const source = createRemoteSource({
    registryUrl: registry.url, registryKey: 'sk_watch_test', configuredIssuer: null, workspace: WORKSPACE,
    pollIntervalMs: 60_000, revocationPollMs, requestTimeoutMs: 1000, watch: true, watchBackoffMs: { min: 20, max: 100 },
    onWatch: (up, error) => states.push({ up, error: error instanceof Error ? error.message : null }),
    onPushed: (part) => pushed.push(part),
  })
  t.teardown(() => source.close())
  await source.start(holder)
  return { source, holder, states, pushed }
}

async function waitFor(condition: () => boolean, timeoutMs = 5000): Promise<boolean> {
  const deadline = Date.now() + timeoutMs
  while (!condition()) {
    if (Date.now() > deadline) return false
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
  return true
}
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

t.test('a well-behaved stream: each event refreshes its part only, and the revocation poll stops', async (t) => {
  let stream: ServerResponse | null = null
  const registry = await startRegistry(t, (_req, res) => {
    stream = sse(res)
    res.write(READY)
    const heartbeat = setInterval(() => res.write(': heartbeat\n\n'), 100)
    res.on('close', () => clearInterval(heartbeat))
  })
  const { source, holder, pushed } = await startSource(t, registry)
  t.ok(source.pushUp, 'the stream is up when start() returns: it is subscribed before the first load')
  const request = registry.watchRequests[0] as IncomingMessage
  t.equal(request.headers['x-service-registry-key'], 'sk_watch_test', 'the registry key, in its header')
  t.match(request.url, `workspace=${WORKSPACE}`, 'the workspace asks for its organization\'s policy notices')
  t.equal(registry.calls.get('/v1/revocations'), 1, 'one load, after the subscription: nothing to re-read')
  const before = new Map(registry.calls)
  await sleep(400)
  t.equal(registry.calls.get('/v1/revocations'), before.get('/v1/revocations'), 'no revocation poll while pushed (the poll interval is 50 ms)')

  const live = stream as unknown as ServerResponse
  live.write(event('revoked', { jti: 'jti-pushed-1' }))
  t.ok(await waitFor(() => holder.current.revoked.has('jti-pushed-1')), 'a pushed jti is revoked')
  t.equal(registry.calls.get('/v1/revocations'), before.get('/v1/revocations'), 'without a call')

  live.write(': heartbeat\n\nevent: someday\ndata: {"x":1}\n\nretry: 10\n\n')
  live.write(event('keys', {}))
  t.ok(await waitFor(() => registry.calls.get('/.well-known/jwks.json') === (before.get('/.well-known/jwks.json') ?? 0) + 1), 'keys: the JWKS is fetched again')

  registry.bundleRevision = 'r2'
  live.write(event('policy', { org_id: OTHER_ORG }))
  await sleep(200)
  t.equal(holder.current.bundle?.revision, 'r1', 'another organization\'s notice is not this gateway\'s')
  live.write(event('policy', { org_id: WORKSPACE.toUpperCase() }))
  t.ok(await waitFor(() => holder.current.bundle?.revision === 'r2'), 'its own organization\'s: the bundle is fetched again')
  t.ok(source.pushUp, 'comments, unknown kinds and retry fields leave the stream up')
  t.same(new Set(pushed), new Set(['revocations', 'jwks', 'bundle']), 'every pushed refresh is counted by part')
  t.equal(registry.watchRequests.length, 1, 'one stream')

  // Down: polling at once; up again: every pushed part re-read. Nothing announced meanwhile is lost.
  registry.revoked.push('jti-while-away')
  live.end()
  t.ok(await waitFor(() => registry.watchRequests.length === 2 && source.pushUp), 'reconnected')
  t.ok(await waitFor(() => holder.current.revoked.has('jti-while-away')), 'a revocation made while it was away is read (the fallback poll runs at once, the reconnect re-reads)')
})

t.test('a hostile stream is dropped: the snapshot stays, polling carries on, the source reconnects', async (t) => {
  const oversized = `event: revoked\ndata: {"jti":"${'a'.repeat(5000)}"}\n\n`
  const cases: [string, Watch, RegExp][] = [
    ['a 503', (_req, res) => res.writeHead(503, { 'content-type': 'application/json' }).end('{"error":"watch_limit_reached"}'), /answered 503 \(watch_limit_reached\)/],
    ['JSON instead of events', (_req, res) => res.writeHead(200, { 'content-type': 'application/json' }).end('{}'), /content type other than text\/event-stream/],
    ['an event over the bound', (_req, res) => { sse(res).write(READY); res.write(oversized) }, /exceeds 4096 bytes/],
    ['a line without end', (_req, res) => { sse(res).write(READY); res.write(`data: ${'x'.repeat(8000)}`) }, /exceeds 4096 bytes/],
    ['a jti with a line break', (_req, res) => { sse(res).write(READY); res.write(event('revoked', { jti: 'a\u0000b' })) }, /revoked has no jti/],
    ['a jti that is a number', (_req, res) => { sse(res).write(READY); res.write(event('revoked', { jti: 7 })) }, /revoked has no jti/],
    ['a policy notice without an org id', (_req, res) => { sse(res).write(READY); res.write(event('policy', { org_id: '../x' })) }, /policy has no org_id/],
    ['data that is not JSON', (_req, res) => { sse(res).write(READY); res.write('event: keys\ndata: {\n\n') }, /not JSON/],
    ['an event before ready', (_req, res) => { sse(res).write(event('keys', {})) }, /before ready/],
    ['ready without a usable heartbeat', (_req, res) => { sse(res).write(event('ready', { heartbeat_ms: 1e12 })) }, /heartbeat_ms/],
    ['a second ready', (_req, res) => { sse(res).write(READY + READY) }, /second ready/],
    ['silence past the heartbeat', (_req, res) => { sse(res).write(event('ready', { heartbeat_ms: 100 })) }, /silent for 1200 ms/],
    ['no ready at all', (_req, res) => { sse(res).write(': hello\n\n') }, /silent for 1000 ms/],
    ['an early end', (_req, res) => { sse(res).end(READY) }, /ended/],
  ]
  for (const [label, watch, message] of cases) {
    await t.test(label, async (t) => {
      const registry = await startRegistry(t, watch)
      const { source, holder, states } = await startSource(t, registry)
      const version = holder.current.version
      t.ok(await waitFor(() => states.some((s) => !s.up && message.test(s.error ?? '')), 5000), `down, saying why (${states.find((s) => !s.up)?.error})`)
      t.ok(await waitFor(() => registry.watchRequests.length >= 2, 5000), 'reconnects')
      registry.revoked.push('jti-polled')
      t.ok(await waitFor(() => holder.current.revoked.has('jti-polled'), 5000), 'polling still carries revocations')
      t.notOk([...holder.current.revoked].some((jti) => jti !== 'jti-polled'), 'nothing the stream sent was applied')
      t.ok(holder.current.version > version || holder.current.revoked.has('jti-polled'))
      t.notOk(source.pushUp && !states.some((s) => s.up), 'never up without a ready')
    })
  }

  await t.test('binary garbage: nothing crashes', async (t) => {
    const registry = await startRegistry(t, (_req, res) => {
      sse(res).write(READY)
      for (let i = 0; i < 50; i++) res.write(randomBytes(64))
      res.write(event('revoked', { jti: 'jti-after-garbage' }))
    })
    const { holder } = await startSource(t, registry)
    await sleep(500)
    registry.revoked.push('jti-polled')
    t.ok(await waitFor(() => holder.current.revoked.has('jti-polled') || holder.current.revoked.has('jti-after-garbage'), 5000), 'the source lives on')
    for (const jti of holder.current.revoked) t.match(jti, /^jti-(polled|after-garbage)$/, 'only well-formed jtis')
  })
})

t.test('down then up: polling takes over at once and stops again on reconnect', async (t) => {
  let refuse = true
  const registry = await startRegistry(t, (_req, res) => {
    if (refuse) return res.writeHead(503, { 'content-type': 'application/json' }).end('{"error":"watch_unavailable"}')
    sse(res).write(READY)
  })
  const { source } = await startSource(t, registry)
  const polled = registry.calls.get('/v1/revocations') ?? 0
  await sleep(300)
  t.ok((registry.calls.get('/v1/revocations') ?? 0) >= polled + 3, 'the 50 ms revocation poll runs while the stream is refused')
  t.notOk(source.pushUp)
  refuse = false
  t.ok(await waitFor(() => source.pushUp, 5000), 'up once the registry serves the stream')
  await sleep(100)
  const settled = registry.calls.get('/v1/revocations') ?? 0
  await sleep(400)
  t.equal(registry.calls.get('/v1/revocations'), settled, 'and the poll stops')
})
