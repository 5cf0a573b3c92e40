/**
 * What only the remote snapshot source of `agent-trust gateway` does (docs/wire-contract.md §1, §4, §8),
 * against a real admin plane on the backend SERVICE_TEST_DB selects: incremental revocation syncs and
 * their pages, revalidation with If-None-Match, refusing to start without a complete first snapshot,
 * its time and size limits, a registry that goes away, and refreshes that never overlap. What every
 * snapshot source does is in test/helpers/contracts/snapshot-source.ts. Most cases talk to the registry
 * through a small recording proxy, which shows what the source sent (If-None-Match, since, cursors), and
 * which can be taken down, stalled or made to answer something else. Timing is real; every wait polls
 * for its condition with a generous deadline.
 */
import http from 'node:http'
import { randomBytes } from 'node:crypto'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { createOrg, startTestAdmin } from '../../../helpers/admin.js'
import { createWorld, revokeBadge } from '../../../helpers/contracts/snapshot-source.js'
import { closedPort } from '../../../helpers/appliance.js'
import { BACKEND } from '../../../helpers/database.js'
import { sleep } from '../../../helpers/expect.js'
import { waitFor } from '../../../helpers/hostile-http.js'
import { SnapshotHolder, type GatewaySnapshot } from '../../../../src/gateway/snapshot/snapshot.js'
import { createRemoteSource, type RemotePart, type RemoteSourceOptions } from '../../../../src/gateway/snapshot/remote-source.js'

// The tap runner gives every file 300 s (package.json); a direct `node` run would get tap's 30 s default,
// which a PGlite start on a busy machine can use up on its own.
t.setTimeout(300_000)

const admin = await startTestAdmin(t)

interface Teardown {
  teardown(fn: () => unknown): void
}

interface Seen {
  /** The path as the source sent it (before any rewrite). */
  readonly url: string
  /** Arrival time (epoch ms). */
  readonly at: number
  readonly ifNoneMatch: string | undefined
  readonly registryKey: string | undefined
  status: number | null
}

/** A transparent HTTP proxy in front of the admin plane that records every request and can misbehave. */
class RecordingProxy {
  readonly seen: Seen[] = []
  /** Requests whose path matches are held open and never answered. */
  stall: ((url: string) => boolean) | null = null
  /** Changes the path forwarded to the registry (the recorded url stays the original). */
  rewrite: ((url: string) => string) | null = null
  /** Answers instead of the registry when it returns true. */
  override: ((url: string, res: http.ServerResponse) => boolean) | null = null
  readonly #server: http.Server
  readonly #target: URL
  readonly #held = new Set<http.ServerResponse>()
  #port = 0

  private constructor(target: string) {
    this.#target = new URL(target)
    this.#server = http.createServer((req, res) => this.#handle(req, res))
  }

  static async start(t: Teardown, target: string): Promise<RecordingProxy> {
    const proxy = new RecordingProxy(target)
    await proxy.up()
    t.teardown(() => proxy.down())
    return proxy
  }

  get url(): string {
    return `http://127.0.0.1:${this.#port}`
  }

  count(prefix: string): number {
    return this.seen.filter((s) => s.url.startsWith(prefix)).length
  }

  /** Listens (again, on the same port after `down`). */
  async up(): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      this.#server.once('error', reject)
      this.#server.listen(this.#port, '127.0.0.1', () => {
        this.#server.off('error', reject)
        resolve()
      })
    })
    this.#port = (this.#server.address() as AddressInfo).port
  }

  /** Stops listening and cuts every open connection, as a registry that went away. */
  async down(): Promise<void> {
    for (const res of this.#held) res.destroy()
    this.#held.clear()
    if (!this.#server.listening) return
    const closed = new Promise<void>((resolve) => this.#server.close(() => resolve()))
    this.#server.closeAllConnections()
    await closed
  }

  #handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const url = req.url ?? '/'
    const entry: Seen = {
      url,
      at: Date.now(),
      ifNoneMatch: req.headers['if-none-match'],
      registryKey: req.headers['x-service-registry-key'] as string | undefined,
      status: null,
    }
    this.seen.push(entry)
    if (this.stall?.(url) === true) {
      this.#held.add(res)
      res.on('close', () => this.#held.delete(res))
      return
    }
    if (this.override?.(url, res) === true) {
      entry.status = res.statusCode
      return
    }
    const upstream = http.request({
      host: this.#target.hostname,
      port: this.#target.port,
      method: req.method,
      path: this.rewrite === null ? url : this.rewrite(url),
      headers: { ...req.headers, host: this.#target.host },
    }, (answer) => {
      entry.status = answer.statusCode ?? null
      res.writeHead(answer.statusCode ?? 502, answer.headers)
      answer.pipe(res)
    })
    upstream.on('error', () => {
      if (!res.headersSent) res.writeHead(502)
      res.end()
    })
    req.pipe(upstream)
  }
}

interface Running {
  holder: SnapshotHolder
  errors: { what: RemotePart; error: unknown }[]
  refreshes: { what: RemotePart; changed: boolean }[]
  close(): Promise<void>
  start(): Promise<void>
}

/** A source with recorders for its callbacks; closed in teardown (close is idempotent). */
function source(t: Teardown, options: Omit<RemoteSourceOptions, 'configuredIssuer' | 'onError' | 'onRefresh'> & { configuredIssuer?: string | null }): Running {
  const holder = new SnapshotHolder()
  const errors: Running['errors'] = []
  const refreshes: Running['refreshes'] = []
  const remote = createRemoteSource({
    configuredIssuer: null,
    ...options,
    onError: (what, error) => errors.push({ what, error }),
    onRefresh: (what, changed) => refreshes.push({ what, changed }),
  })
  t.teardown(() => remote.close())
  return { holder, errors, refreshes, close: () => remote.close(), start: () => remote.start(holder) }
}

t.test(`a revocation reaches the snapshot within about a second, incrementally (${BACKEND})`, async (t) => {
  const w = await createWorld(admin, 'remote-revoke')
  await revokeBadge(admin, w, w.badges[0]!.jti)
  const proxy = await RecordingProxy.start(t, admin.url)
  const s = source(t, { registryUrl: proxy.url, registryKey: w.key, workspace: w.orgId, pollIntervalMs: 60_000 })
  await s.start()
  const first = s.holder.current
  t.notOk(first.revoked.has(w.badges[1]!.jti))

  const revokedAt = Date.now()
  await revokeBadge(admin, w, w.badges[1]!.jti)
  t.ok(await waitFor(() => s.holder.current.revoked.has(w.badges[1]!.jti), 5000), 'the new revocation arrived')
  t.ok(Date.now() - revokedAt < 5000, `within the default 1 s poll (took ${Date.now() - revokedAt} ms)`)
  const now = s.holder.current
  t.ok(now.revoked.has(w.badges[0]!.jti), 'earlier revocations stay')
  t.ok(now.version > first.version, 'a new snapshot was swapped in')
  t.notOk(first.revoked.has(w.badges[1]!.jti), 'the earlier snapshot was not mutated')
  t.equal(now.keys, first.keys, 'keys untouched by a revocation refresh')
  t.equal(now.bundle, first.bundle, 'bundle untouched by a revocation refresh')
  t.ok(s.refreshes.some((r) => r.what === 'revocations' && r.changed), 'onRefresh(revocations, true)')

  const polls = proxy.seen.filter((r) => r.url.startsWith('/v1/revocations'))
  t.notOk(new URL(polls[0]!.url, 'http://x').searchParams.has('since'), 'the first sync reads everything')
  const later = polls.slice(1).map((r) => ({ at: r.at, since: new URL(r.url, 'http://x').searchParams.get('since') }))
  t.ok(later.length > 0 && later.every(({ since }) => since !== null && !Number.isNaN(Date.parse(since))), 'later syncs are incremental (since=)')
  // since = the previous syncedAt minus the 5 s overlap: at least 5 s before the request (same host clock)
  t.ok(later.every(({ at, since }) => at - Date.parse(since!) >= 4900 && at - Date.parse(since!) < 30_000), 'since reaches about 5 s back')
  t.ok(polls.every((r) => r.registryKey === w.key), 'revocation polls carry the registry key')

  // A quiet poll adds nothing and swaps nothing.
  const quiet = s.holder.current
  const count = proxy.count('/v1/revocations')
  t.ok(await waitFor(() => proxy.count('/v1/revocations') >= count + 2, 5000), 'polling continues')
  t.equal(s.holder.current.revoked, quiet.revoked, 'no new set without a new revocation')
  t.same(s.errors, [], 'no errors')
})

t.test(`revocation pages are followed through nextCursor (${BACKEND})`, async (t) => {
  const w = await createWorld(admin, 'remote-pages')
  await revokeBadge(admin, w, w.badges[0]!.jti)
  await revokeBadge(admin, w, w.badges[1]!.jti)
  const proxy = await RecordingProxy.start(t, admin.url)
  // Pages of one: the real registry then answers real cursors for every revocation.
  proxy.rewrite = (url) => url.replace(/([?&])limit=\d+/, '$1limit=1')
  const s = source(t, { registryUrl: proxy.url, registryKey: w.key, workspace: null, pollIntervalMs: 60_000, revocationPollMs: 60_000 })
  await s.start()
  const revoked = s.holder.current.revoked
  t.ok(revoked.has(w.badges[0]!.jti) && revoked.has(w.badges[1]!.jti), 'both revocations loaded')
  const cursors = proxy.seen.filter((r) => r.url.startsWith('/v1/revocations') && new URL(r.url, 'http://x').searchParams.has('cursor'))
  t.ok(cursors.length >= 1, `later pages were asked for with a cursor (${cursors.length})`)
  t.ok(proxy.seen.every((r) => !r.url.startsWith('/v1/revocations') || new URL(r.url, 'http://x').searchParams.get('limit') === '500'), 'the source asks for pages of 500')
})

t.test(`304 keeps the bundle and the keys but moves confirmedAt (${BACKEND})`, async (t) => {
  const w = await createWorld(admin, 'remote-304')
  const proxy = await RecordingProxy.start(t, admin.url)
  let clock = 1_000_000
  const s = source(t, {
    registryUrl: proxy.url, registryKey: w.key, workspace: w.orgId, pollIntervalMs: 100, revocationPollMs: 60_000, now: () => clock,
  })
  await s.start()
  const first = s.holder.current
  t.equal(first.bundle!.confirmedAt, 1_000_000, 'confirmedAt comes from the injected clock')

  clock = 2_000_000
  t.ok(await waitFor(() => s.holder.current.bundle!.confirmedAt === 2_000_000, 5000), 'confirmedAt moved')
  const now = s.holder.current
  t.ok(now.version > first.version, 'a new snapshot carries the new confirmedAt')
  t.equal(now.bundle!.revision, first.bundle!.revision, 'same revision')
  t.equal(now.bundle!.data, first.bundle!.data, 'the data document was kept, not refetched')
  t.equal(first.bundle!.confirmedAt, 1_000_000, 'the previous snapshot was not mutated')
  t.equal(now.keys, first.keys, 'keys kept')

  const etag = `"${first.bundle!.revision}"`
  const bundlePolls = proxy.seen.filter((r) => r.url.startsWith('/v1/bundles/'))
  t.ok(bundlePolls.slice(1).some((r) => r.ifNoneMatch === etag && r.status === 304), 'revalidated with If-None-Match and answered 304')
  t.equal(bundlePolls[0]!.ifNoneMatch, undefined, 'the first fetch is unconditional')
  t.ok(await waitFor(() => proxy.seen.some((r) => r.url === '/.well-known/jwks.json' && r.ifNoneMatch !== undefined && r.status === 304), 5000), 'JWKS revalidated too (304)')
  t.notOk(proxy.seen.some((r) => r.url === '/.well-known/jwks.json' && r.registryKey !== undefined), 'the key is not sent to the public JWKS')
  t.ok(s.refreshes.some((r) => r.what === 'bundle' && !r.changed), 'onRefresh(bundle, false)')
  t.ok(s.refreshes.some((r) => r.what === 'jwks' && !r.changed), 'onRefresh(jwks, false)')
  t.same(s.errors, [])
})

t.test(`start refuses without a complete first snapshot, and never names the key (${BACKEND})`, async (t) => {
  const w = await createWorld(admin, 'remote-refuse')
  const wrongKey = `sk_${randomBytes(32).toString('base64url')}`
  const wrong = source(t, { registryUrl: admin.url, registryKey: wrongKey, workspace: w.orgId, pollIntervalMs: 100 })
  const error = await wrong.start().then(() => null, (e: unknown) => e as Error)
  t.ok(error instanceof Error, 'an unknown key: start rejects')
  t.match(error!.message, /bundle: .*401/, 'names the bundle and the status')
  t.notOk(error!.message.includes(wrongKey), 'the key is not in the message')
  t.notOk(wrong.holder.ready, 'no snapshot was swapped in')

  const other = await createOrg(admin, 'remote-refuse-other')
  const foreign = source(t, { registryUrl: admin.url, registryKey: other.key, workspace: w.orgId, pollIntervalMs: 100 })
  const foreignError = await foreign.start().then(() => null, (e: unknown) => e as Error)
  t.match(foreignError?.message, /bundle: .*404 \(org_not_found\)/, "another org's workspace: 404 with its code")
  t.notOk(foreignError!.message.includes(other.key))

  const port = await closedPort()
  const down = source(t, { registryUrl: `http://127.0.0.1:${port}`, registryKey: w.key, workspace: w.orgId, pollIntervalMs: 100 })
  const downError = await down.start().then(() => null, (e: unknown) => e as Error)
  t.match(downError?.message, /jwks: .*revocations: .*bundle: /, 'an unreachable registry: all three parts named')
  t.match(downError?.message, /ECONNREFUSED/, 'and why')
  t.notOk(downError!.message.includes(w.key))

  // A failed start leaves no timers behind: no callbacks fire afterwards.
  await sleep(400)
  t.same([...wrong.errors, ...foreign.errors, ...down.errors], [], 'no polling after a failed start')
})

t.test(`start enforces the time limit and the body cap (${BACKEND})`, async (t) => {
  const w = await createWorld(admin, 'remote-limits')
  const proxy = await RecordingProxy.start(t, admin.url)
  proxy.stall = (url) => url.startsWith('/.well-known/jwks.json')
  const slow = source(t, { registryUrl: proxy.url, registryKey: w.key, workspace: w.orgId, pollIntervalMs: 100, requestTimeoutMs: 300 })
  const started = Date.now()
  const slowError = await slow.start().then(() => null, (e: unknown) => e as Error)
  t.match(slowError?.message, /jwks: .*timed out after 300 ms/, 'a stalled JWKS fails start')
  t.ok(Date.now() - started < 4000, 'promptly')

  proxy.stall = null
  proxy.override = (url, res) => {
    if (!url.startsWith('/.well-known/jwks.json')) return false
    res.writeHead(200, { 'content-type': 'application/json' })
    // 2 MiB of valid JSON, streamed without a content-length, so only the running count can stop it
    res.write('{"keys":[],"pad":"')
    for (let i = 0; i < 32; i++) res.write('x'.repeat(64 * 1024))
    res.end('"}')
    return true
  }
  const big = source(t, { registryUrl: proxy.url, registryKey: w.key, workspace: w.orgId, pollIntervalMs: 100 })
  const bigError = await big.start().then(() => null, (e: unknown) => e as Error)
  t.match(bigError?.message, /jwks: .*over the 1048576 byte limit/, 'an oversized JWKS fails start')
})

t.test(`a registry that goes down: last snapshot kept, onError called, recovery (${BACKEND})`, async (t) => {
  const w = await createWorld(admin, 'remote-down')
  await revokeBadge(admin, w, w.badges[0]!.jti)
  const proxy = await RecordingProxy.start(t, admin.url)
  let clock = 1_000_000
  const s = source(t, {
    registryUrl: proxy.url, registryKey: w.key, workspace: w.orgId,
    pollIntervalMs: 100, revocationPollMs: 100, requestTimeoutMs: 1000, now: () => clock,
  })
  await s.start()
  const first = s.holder.current

  await proxy.down()
  clock = 2_000_000
  const failed = (what: RemotePart): boolean => s.errors.some((e) => e.what === what)
  t.ok(await waitFor(() => failed('jwks') && failed('revocations') && failed('bundle'), 8000), 'onError for jwks, revocations and bundle')
  const kept = s.holder.current
  await sleep(500)
  t.equal(s.holder.current, kept, 'no swaps while the registry is down')
  t.equal(kept.keys, first.keys, 'the last keys are kept')
  t.ok(kept.revoked.has(w.badges[0]!.jti), 'the last revoked set is kept')
  t.equal(kept.bundle!.revision, first.bundle!.revision, 'the last bundle is kept')
  t.ok(kept.bundle!.confirmedAt < 2_000_000, 'confirmedAt stood still, so the bundle ages')
  t.ok(s.errors.every(({ error }) => error instanceof Error && error.message.startsWith('GET ')), 'each error is an Error naming the call')
  t.notOk(s.errors.some(({ error }) => (error as Error).message.includes(w.key)), 'no error carries the key')

  // The registry comes back: polling resumes on its own.
  await revokeBadge(admin, w, w.badges[1]!.jti)
  await proxy.up()
  t.ok(await waitFor(() => s.holder.current.bundle!.confirmedAt === 2_000_000, 8000), 'the bundle is confirmed again')
  t.ok(await waitFor(() => s.holder.current.revoked.has(w.badges[1]!.jti), 8000), 'a revocation made meanwhile arrives')
})

t.test(`refreshes never overlap, and close() aborts the call in flight and stops polling (${BACKEND})`, async (t) => {
  const w = await createWorld(admin, 'remote-close')
  const proxy = await RecordingProxy.start(t, admin.url)
  const s = source(t, {
    registryUrl: proxy.url, registryKey: w.key, workspace: w.orgId,
    pollIntervalMs: 50, revocationPollMs: 50, requestTimeoutMs: 20_000,
  })
  await s.start()
  const bundlesBefore = proxy.count('/v1/bundles/')
  proxy.stall = (url) => url.startsWith('/v1/bundles/')
  t.ok(await waitFor(() => proxy.count('/v1/bundles/') > bundlesBefore, 5000), 'a bundle poll is stalled')
  await sleep(600)
  t.equal(proxy.count('/v1/bundles/'), bundlesBefore + 1, 'no second bundle poll while the first is running (12 ticks skipped)')
  const jwksCount = proxy.count('/.well-known/jwks.json')
  t.ok(await waitFor(() => proxy.count('/.well-known/jwks.json') > jwksCount + 2, 5000), 'the other parts keep polling meanwhile')

  const closing = Date.now()
  await s.close()
  t.ok(Date.now() - closing < 5000, 'close() did not wait for the 20 s request limit: the stalled call was aborted')
  const total = proxy.seen.length
  await sleep(600)
  t.equal(proxy.seen.length, total, 'no request after close()')
  t.same(s.errors, [], 'the aborted call is not reported as an error')
  const snapshot: GatewaySnapshot = s.holder.current
  t.ok(snapshot.bundle !== null, 'the holder keeps its last snapshot after close')
  await s.close()
  t.pass('close() is idempotent')
})
