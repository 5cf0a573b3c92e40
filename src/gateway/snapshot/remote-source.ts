/**
 * The snapshot source of a gateway-only process: issuer, keys, revocations and bundle pulled from the registry
 * off the request path (docs/architecture.md, "The snapshot"). This module schedules: the first load, the
 * polls, and, with `watch`, the registry's push stream, which refreshes just the part an event names and,
 * while it is up, slows the revocation poll to the bundle poll's interval. The calls themselves are
 * registry-client.ts's, the checks of what comes back registry-documents.ts's.
 */
import type { GatewayBundle, SnapshotHolder, SnapshotSource } from './snapshot.js'
import { describe, etagOf, RegistryClient, type Answer } from './registry-client.js'
import {
  parseBundle, parseIssuer, parseJwks, parseRevocationPage, REVOCATION_OVERLAP_MS, REVOCATION_PAGE_SIZE,
  type KeySet, type WatchEvent,
} from './registry-documents.js'
import { RegistryWatch } from './registry-watch.js'

export { MAX_JWKS_KEYS } from './registry-documents.js'

export type RemotePart = 'issuer' | 'jwks' | 'revocations' | 'bundle'

export interface RemoteSourceOptions {
  registryUrl: string
  registryKey: string
  /** `CA_ISSUER_URL`; null trusts the issuer the registry names, else another one is refused, naming both. */
  configuredIssuer: string | null
  /** Null: no bundle (no embedded PDP). */
  workspace: string | null
  /** Issuer, JWKS and bundle revalidation; also the revocation poll's interval while the watch stream is up. */
  pollIntervalMs: number
  revocationPollMs?: number
  /** Each HTTP call, connect to body. */
  requestTimeoutMs?: number
  /** Subscribe to `GET /v1/gateway/watch` (docs/api.md) and poll only as the fallback. */
  watch?: boolean
  /** Delays between watch reconnects: from the first to the longest, doubling. */
  watchBackoffMs?: { readonly min: number; readonly max: number }
  /** The last good part stays in place. */
  onError?: (what: RemotePart, error: unknown) => void
  /** A bundle answered 304 still swaps a snapshot (to move `confirmedAt`) but is reported unchanged. */
  onRefresh?: (what: RemotePart, changed: boolean) => void
  /** The watch stream came up or went down (`error` says why). */
  onWatch?: (up: boolean, error?: unknown) => void
  /** A part refreshed because the watch stream named it (a pushed revocation is applied without a call). */
  onPushed?: (what: Exclude<RemotePart, 'issuer'>) => void
  now?: () => number
}

/** The snapshot source, and whether its push stream is up (for readiness and metrics). */
export interface RemoteSource extends SnapshotSource {
  readonly watching: boolean
  readonly pushUp: boolean
}

const DEFAULT_REVOCATION_POLL_MS = 1000
const DEFAULT_REQUEST_TIMEOUT_MS = 5000
/** Bundles carry every resolved policy of an org; anything beyond this is a fault, not a bundle. */
const MAX_BUNDLE_BYTES = 32 * 1024 * 1024
const MAX_BODY_BYTES = 1024 * 1024
const MAX_METADATA_BYTES = 64 * 1024
/** A cursor chain longer than this (5 million revocations in one sync) means a registry fault. */
const MAX_REVOCATION_PAGES = 10_000
const MIN_INTERVAL_MS = 10
const MAX_TIMER_MS = 2 ** 31 - 1

type JwksResult = { readonly kind: 'unchanged' } | ({ readonly kind: 'keys'; readonly etag: string | null } & KeySet)

interface RevocationsResult {
  readonly jtis: readonly string[]
  readonly syncedAt: string
}

type BundleResult =
  | { readonly kind: 'unchanged'; readonly confirmedAt: number }
  | { readonly kind: 'bundle'; readonly etag: string; readonly bundle: GatewayBundle }

function requireInterval(name: string, value: number): number {
  if (!Number.isFinite(value) || value < MIN_INTERVAL_MS) {
    throw new RangeError(`remote snapshot source: ${name} must be a number of milliseconds >= ${MIN_INTERVAL_MS}`)
  }
  // Node turns a delay beyond a 32-bit int into 1 ms: a very long interval would become a busy loop.
  return Math.min(value, MAX_TIMER_MS)
}

class RemoteSnapshotSource implements RemoteSource {
  readonly #configuredIssuer: string | null
  readonly #workspace: string | null
  readonly #pollIntervalMs: number
  readonly #revocationPollMs: number
  readonly #options: RemoteSourceOptions
  readonly #now: () => number
  readonly #client: RegistryClient
  readonly #watch: RegistryWatch | null
  readonly #requestTimeoutMs: number

  #holder: SnapshotHolder | null = null
  #started = false
  #closed = false
  #closing: Promise<void> | null = null
  readonly #timers: NodeJS.Timeout[] = []
  /** The running refresh of each part. */
  readonly #running = new Map<RemotePart, Promise<void>>()
  /** Parts asked for again while running: a change announced mid-call must be read by a call made after it. */
  readonly #again = new Set<RemotePart>()
  /** The first load is under way: a stream that comes up meanwhile may have missed what the load read before. */
  #loading = false
  #resyncAfterLoad = false
  /** When the revocations were last synced, so the slowed poll knows when it is due. */
  #revocationsAt = 0

  #jwksEtag: string | null = null
  #revocationsSyncedAt: string | null = null
  #bundleEtag: string | null = null

  constructor(options: RemoteSourceOptions) {
    this.#options = options
    const requestTimeoutMs = requireInterval('requestTimeoutMs', options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS)
    this.#requestTimeoutMs = requestTimeoutMs
    this.#client = new RegistryClient({ registryUrl: options.registryUrl, registryKey: options.registryKey, requestTimeoutMs })
    this.#configuredIssuer = options.configuredIssuer
    this.#workspace = options.workspace
    this.#pollIntervalMs = requireInterval('pollIntervalMs', options.pollIntervalMs)
    this.#revocationPollMs = requireInterval('revocationPollMs', options.revocationPollMs ?? DEFAULT_REVOCATION_POLL_MS)
    this.#now = options.now ?? Date.now
    if (options.watch === true) {
      const query = this.#workspace === null ? '' : `?workspace=${encodeURIComponent(this.#workspace)}`
      this.#watch = new RegistryWatch(this.#client, {
        onUp: () => this.#watchUp(),
        onEvent: (event) => this.#pushed(event),
        onDown: (error, wasUp) => this.#watchDown(error, wasUp),
      }, {
        path: `/v1/gateway/watch${query}`,
        readyTimeoutMs: requestTimeoutMs,
        ...(options.watchBackoffMs === undefined ? {} : { backoffMinMs: options.watchBackoffMs.min, backoffMaxMs: options.watchBackoffMs.max }),
      })
    } else {
      this.#watch = null
    }
  }

  get watching(): boolean {
    return this.#watch !== null
  }

  get pushUp(): boolean {
    return this.#watch?.up ?? false
  }

  async start(holder: SnapshotHolder): Promise<void> {
    if (this.#closed) throw new Error('remote snapshot source: start() after close()')
    if (this.#started) throw new Error('remote snapshot source: start() called twice')
    this.#started = true
    if (this.#watch !== null) {
      // Subscribed first, loaded second: what changes after the load began is then pushed, with no resync.
      this.#watch.start()
      await this.#watch.settled(this.#requestTimeoutMs)
    }
    this.#loading = true
    const [issuer, jwks, revocations, bundle] = await Promise.allSettled([
      this.#fetchIssuer(),
      this.#fetchJwks(),
      this.#fetchRevocations(),
      this.#workspace === null ? this.#checkKey() : this.#fetchBundle(),
    ])
    const failures: string[] = []
    if (issuer.status === 'rejected') failures.push(`issuer: ${describe(issuer.reason)}`)
    if (jwks.status === 'rejected') failures.push(`jwks: ${describe(jwks.reason)}`)
    if (revocations.status === 'rejected') failures.push(`revocations: ${describe(revocations.reason)}`)
    if (bundle.status === 'rejected') failures.push(`${this.#workspace === null ? 'registry key' : 'bundle'}: ${describe(bundle.reason)}`)
    this.#loading = false
    if (failures.length > 0 || this.#closed) {
      // Allow another attempt (a caller may retry while the registry comes up).
      this.#started = false
      this.#resyncAfterLoad = false
      await this.#watch?.stop()
      const why = failures.length > 0 ? failures.join('; ') : 'closed while starting'
      throw new Error(this.#client.redact(`remote snapshot source: no first snapshot from ${this.#client.origin}: ${why}`))
    }
    const keys = (jwks as PromiseFulfilledResult<JwksResult>).value
    const revoked = (revocations as PromiseFulfilledResult<RevocationsResult>).value
    const first = (bundle as PromiseFulfilledResult<BundleResult | null>).value
    // No If-None-Match was sent on the first calls, so 304 cannot be the answer here.
    if (keys.kind !== 'keys' || (first !== null && first.kind !== 'bundle')) {
      this.#started = false
      this.#resyncAfterLoad = false
      await this.#watch?.stop()
      throw new Error('remote snapshot source: the registry answered 304 to an unconditional request')
    }
    this.#jwksEtag = keys.etag
    this.#revocationsSyncedAt = revoked.syncedAt
    this.#revocationsAt = this.#now()
    if (first !== null) this.#bundleEtag = first.etag
    this.#holder = holder
    holder.swap({
      issuer: (issuer as PromiseFulfilledResult<string>).value,
      keys: keys.keys,
      keysVersion: keys.keysVersion,
      revoked: new Set(revoked.jtis),
      bundle: first === null ? null : first.bundle,
    })

    const slow = setInterval(() => {
      this.#tick('issuer')
      this.#tick('jwks')
      if (this.#workspace !== null) this.#tick('bundle')
    }, this.#pollIntervalMs)
    const fast = setInterval(() => {
      // While pushed, a revoked jti arrives on the stream; the poll stays as a safety net at the slow interval.
      if (this.pushUp && this.#now() - this.#revocationsAt < this.#pollIntervalMs) return
      this.#tick('revocations')
    }, this.#revocationPollMs)
    // Polling alone must never keep the process alive: shutdown is driven by the listeners.
    slow.unref()
    fast.unref()
    this.#timers.push(slow, fast)
    if (this.#resyncAfterLoad) {
      this.#resyncAfterLoad = false
      this.#resync()
    }
  }

  close(): Promise<void> {
    this.#closing ??= this.#close()
    return this.#closing
  }

  async #close(): Promise<void> {
    this.#closed = true
    for (const timer of this.#timers) clearInterval(timer)
    this.#timers.length = 0
    await this.#watch?.stop()
    const client = this.#client.close()
    await Promise.allSettled([...this.#running.values()])
    await client
  }

  #watchUp(): void {
    this.#report(() => this.#options.onWatch?.(true))
    if (this.#holder === null) {
      // Before the first load nothing needs re-reading; during it, the load may predate the subscription.
      if (this.#loading) this.#resyncAfterLoad = true
      return
    }
    this.#resync()
  }

  /** Whatever changed while the stream was not up was not pushed: every pushed part is re-read once (mostly 304s). */
  #resync(): void {
    this.#tick('jwks', 'resync')
    this.#tick('revocations', 'resync')
    if (this.#workspace !== null) this.#tick('bundle', 'resync')
  }

  #watchDown(error: unknown, wasUp: boolean): void {
    if (this.#closed) return
    this.#report(() => this.#options.onWatch?.(false, error))
    // Polling takes over at once: the next revocation tick is due now, not a slow interval after the last.
    if (wasUp) this.#tick('revocations')
  }

  #pushed(event: WatchEvent): void {
    if (this.#closed) return
    if (this.#holder === null) {
      // An event during the first load may or may not be in what the load read: re-read once it is done.
      if (this.#loading) this.#resyncAfterLoad = true
      return
    }
    switch (event.kind) {
      case 'policy':
        if (this.#workspace === null || event.orgId !== this.#workspace.toLowerCase()) return
        this.#tick('bundle', 'push')
        return
      case 'keys':
        this.#tick('jwks', 'push')
        return
      case 'revoked': {
        // Adding a revoked jti only tightens, so it is applied as it comes, without a call.
        const changed = this.#addRevoked([event.jti])
        this.#report(() => this.#options.onPushed?.('revocations'))
        this.#report(() => this.#options.onRefresh?.('revocations', changed))
        return
      }
      case 'resync':
        this.#resync()
        return
      default:
    }
  }

  /**
   * Refreshes a part unless it is being refreshed: a poll is then skipped, while a pushed or resync refresh
   * runs again after the running one, whose answer may predate the change.
   */
  #tick(what: RemotePart, cause: 'poll' | 'push' | 'resync' = 'poll'): void {
    if (this.#closed) return
    const pushed = cause === 'push'
    if (this.#running.has(what)) {
      if (cause !== 'poll') this.#again.add(what)
      return
    }
    const run = this.#refresh(what)
      .then(() => {
        if (pushed && what !== 'issuer') this.#report(() => this.#options.onPushed?.(what))
      })
      .catch((error: unknown) => {
        // Calls aborted by close() are not failures worth reporting.
        if (!this.#closed) this.#report(() => this.#options.onError?.(what, error))
      })
      .finally(() => {
        this.#running.delete(what)
        if (this.#again.delete(what)) this.#tick(what, cause)
      })
    this.#running.set(what, run)
  }

  /** Runs a caller's callback; a throwing callback must not break polling or become an unhandled rejection. */
  #report(callback: () => void): void {
    try {
      callback()
    } catch {
      // The caller's logging failed; there is nowhere better to report that.
    }
  }

  async #refresh(what: RemotePart): Promise<void> {
    let changed: boolean
    if (what === 'issuer') changed = this.#applyIssuer(await this.#fetchIssuer())
    else if (what === 'jwks') changed = this.#applyJwks(await this.#fetchJwks())
    else if (what === 'revocations') changed = this.#applyRevocations(await this.#fetchRevocations())
    else changed = this.#applyBundle(await this.#fetchBundle())
    this.#report(() => this.#options.onRefresh?.(what, changed))
  }

  // The apply methods merge only their own part through holder.update, so the refreshes (and any
  // other writer of the holder) never overwrite each other's newer parts.

  #applyIssuer(issuer: string): boolean {
    const holder = this.#holder
    if (this.#closed || holder === null || issuer === holder.current.issuer) return false
    holder.update(() => ({ issuer }))
    return true
  }

  #applyJwks(result: JwksResult): boolean {
    const holder = this.#holder
    if (this.#closed || holder === null || result.kind === 'unchanged') return false
    this.#jwksEtag = result.etag
    // A new ETag over the same keys (e.g. a reordered document) must not drop the gateway's badge cache.
    if (result.keysVersion === holder.current.keysVersion) return false
    holder.update(() => ({ keys: result.keys, keysVersion: result.keysVersion }))
    return true
  }

  #applyRevocations(result: RevocationsResult): boolean {
    if (this.#closed || this.#holder === null) return false
    this.#revocationsSyncedAt = result.syncedAt
    this.#revocationsAt = this.#now()
    return this.#addRevoked(result.jtis)
  }

  #addRevoked(jtis: readonly string[]): boolean {
    const holder = this.#holder
    if (this.#closed || holder === null) return false
    // The overlap re-reads recent revocations; only a jti not yet known is a change worth a swap.
    if (jtis.every((jti) => holder.current.revoked.has(jti))) return false
    holder.update((current) => {
      // A new Set: snapshots are immutable, readers of the previous one keep their view.
      const revoked = new Set(current.revoked)
      for (const jti of jtis) revoked.add(jti)
      return { revoked }
    })
    return true
  }

  #applyBundle(result: BundleResult): boolean {
    const holder = this.#holder
    if (this.#closed || holder === null) return false
    if (result.kind === 'unchanged') {
      const bundle = holder.current.bundle
      if (bundle === null) return false
      // The registry confirmed the bundle is current: its age restarts, so a new snapshot is needed.
      holder.update(() => ({ bundle: Object.freeze({ ...bundle, confirmedAt: result.confirmedAt }) }))
      return false
    }
    this.#bundleEtag = result.etag
    const previous = holder.current.bundle
    holder.update(() => ({ bundle: result.bundle }))
    return previous === null || previous.revision !== result.bundle.revision
  }

  /** The issuer the registry names, refused when the operator configured another. */
  async #fetchIssuer(): Promise<string> {
    const answer = await this.#client.get('/.well-known/service-authority', {}, false, MAX_METADATA_BYTES)
    if (answer.status === 304) throw new Error('the registry answered 304 to an unconditional request')
    const issuer = parseIssuer(json(answer))
    const configured = this.#configuredIssuer
    if (configured !== null && issuer !== configured) {
      throw new Error(
        `the registry signs badges as issuer ${JSON.stringify(issuer)} but CA_ISSUER_URL is ${JSON.stringify(configured)}; ` +
        'every badge would be refused as BADGE_ISSUER_UNTRUSTED (set CA_ISSUER_URL to the registry\'s spelling, or unset it)',
      )
    }
    return issuer
  }

  async #fetchJwks(): Promise<JwksResult> {
    const headers: Record<string, string> = {}
    // Only when keys are loaded: a 304 means "keep what you have", which needs something to keep.
    if (this.#jwksEtag !== null && this.#holder !== null) headers['if-none-match'] = this.#jwksEtag
    // Public endpoint: the key is not sent where it is not needed.
    const answer = await this.#client.get('/.well-known/jwks.json', headers, false, MAX_BODY_BYTES)
    if (answer.status === 304) return { kind: 'unchanged' }
    return { kind: 'keys', etag: etagOf(answer.headers), ...parseJwks(json(answer)) }
  }

  async #fetchRevocations(): Promise<RevocationsResult> {
    const since = this.#revocationsSyncedAt === null
      ? null
      : new Date(Date.parse(this.#revocationsSyncedAt) - REVOCATION_OVERLAP_MS).toISOString()
    const jtis: string[] = []
    let syncedAt: string | null = null
    let cursor: string | null = null
    for (let page = 0; ; page++) {
      if (page >= MAX_REVOCATION_PAGES) throw new Error(`more than ${MAX_REVOCATION_PAGES} pages of revocations in one sync`)
      const query = new URLSearchParams({ limit: String(REVOCATION_PAGE_SIZE) })
      if (since !== null) query.set('since', since)
      if (cursor !== null) query.set('cursor', cursor)
      const answer = await this.#client.get(`/v1/revocations?${query.toString()}`, {}, true, MAX_BODY_BYTES)
      if (answer.status === 304) throw new Error('the registry answered 304 to an unconditional request')
      const parsed = parseRevocationPage(json(answer), Date.now())
      jtis.push(...parsed.jtis)
      // The first page's time is the earliest: the next sync must start before anything later pages missed.
      syncedAt ??= parsed.syncedAt
      if (parsed.nextCursor === null) break
      if (parsed.nextCursor === cursor) throw new Error('the revocations cursor did not advance')
      cursor = parsed.nextCursor
    }
    return { jtis, syncedAt }
  }

  /** Without a workspace nothing else needs the key, so a wrong one would only show much later. */
  async #checkKey(): Promise<null> {
    await this.#client.get('/v1/agents?limit=1', {}, true, MAX_BODY_BYTES)
    return null
  }

  async #fetchBundle(): Promise<BundleResult> {
    const workspace = this.#workspace
    if (workspace === null) throw new Error('no workspace configured')
    const headers: Record<string, string> = { accept: 'application/json' }
    if (this.#bundleEtag !== null && this.#holder !== null && this.#holder.current.bundle !== null) headers['if-none-match'] = this.#bundleEtag
    const answer = await this.#client.get(`/v1/bundles/${encodeURIComponent(workspace)}`, headers, true, MAX_BUNDLE_BYTES)
    // The time of the answer, not of the request: the registry vouched for the bundle at that moment.
    const confirmedAt = this.#now()
    if (answer.status === 304) return { kind: 'unchanged', confirmedAt }
    const bundle = parseBundle(json(answer), confirmedAt)
    return { kind: 'bundle', etag: etagOf(answer.headers) ?? `"${bundle.revision}"`, bundle }
  }
}

function json(answer: Answer): unknown {
  try {
    return JSON.parse((answer.body ?? Buffer.alloc(0)).toString('utf8'))
  } catch {
    throw new Error('the registry answered a body that is not JSON')
  }
}

/** `start` rejects, naming the failed parts, unless all of them load. */
export function createRemoteSource(options: RemoteSourceOptions): RemoteSource {
  return new RemoteSnapshotSource(options)
}
