/**
 * The snapshot source of a gateway-only process: issuer, keys, revocations and bundle pulled from the registry
 * off the request path (docs/architecture.md, "The snapshot"; checks in docs/peer-input-validation.md,
 * "Registry answers"). The registry key is sent only as `X-Service-Registry-Key`, never in an error message.
 */
import { createPublicKey, type KeyObject } from 'node:crypto'
import type { IncomingHttpHeaders } from 'node:http'
import { Pool } from 'undici'
import { bundleDataProblem } from './bundle-data.js'
import type { GatewayBundle, GatewayBundleData, SnapshotHolder, SnapshotSource } from './snapshot.js'
import { isRecord } from '../../core/json-objects.js'
import { BodyTooLargeError, readBoundedBody, type ResponseBody } from '../../net/bounded-body.js'

export type RemotePart = 'issuer' | 'jwks' | 'revocations' | 'bundle'

export interface RemoteSourceOptions {
  registryUrl: string
  registryKey: string
  /** `CA_ISSUER_URL`; null trusts the issuer the registry names, else another one is refused, naming both. */
  configuredIssuer: string | null
  /** Null: no bundle (no embedded PDP). */
  workspace: string | null
  /** Issuer, JWKS and bundle revalidation. */
  pollIntervalMs: number
  revocationPollMs?: number
  /** Each HTTP call, connect to body. */
  requestTimeoutMs?: number
  /** The last good part stays in place. */
  onError?: (what: RemotePart, error: unknown) => void
  /** A bundle answered 304 still swaps a snapshot (to move `confirmedAt`) but is reported unchanged. */
  onRefresh?: (what: RemotePart, changed: boolean) => void
  now?: () => number
}

const DEFAULT_REVOCATION_POLL_MS = 1000
const DEFAULT_REQUEST_TIMEOUT_MS = 5000
/** Bundles carry every resolved policy of an org; anything beyond this is a fault, not a bundle. */
const MAX_BUNDLE_BYTES = 32 * 1024 * 1024
const MAX_BODY_BYTES = 1024 * 1024
const MAX_METADATA_BYTES = 64 * 1024
/** Compared with every badge's `iss` and forwarded as `X-Service-Issuer`, so bounded and visible ASCII. */
const MAX_ISSUER_LENGTH = 1024
const ISSUER_CHARACTERS = /^[\x21-\x7e]+$/
/** Error bodies are read only for their stable `error` code. */
const MAX_ERROR_BODY_BYTES = 4096
const REVOCATION_PAGE_SIZE = 500
/** Subtracted from `since`, so a revocation committed just after the registry read its clock is not missed. */
const REVOCATION_OVERLAP_MS = 5000
/** A cursor chain longer than this (5 million revocations in one sync) means a registry fault. */
const MAX_REVOCATION_PAGES = 10_000
const MIN_INTERVAL_MS = 10
/** A registry publishes its signer and a few retiring keys; more than this is a fault, not a key set. */
export const MAX_JWKS_KEYS = 100
/** Key ids, jtis and revisions reach sets and `If-None-Match`: bounded, visible ASCII. */
const SAFE_ID = /^[\x21-\x7e]{1,256}$/
const ED25519_X = /^[A-Za-z0-9_-]{43}$/
const MAX_CURSOR_LENGTH = 1024
/** `syncedAt` is the next `since`: one far in the future would skip every revocation until then. */
const MAX_SYNCED_AT_AHEAD_MS = 24 * 60 * 60 * 1000
/** An ETag longer than this is not used for revalidation. */
const MAX_ETAG_LENGTH = 1024
const MAX_TIMER_MS = 2 ** 31 - 1

interface KeySet {
  readonly keys: ReadonlyMap<string, KeyObject>
  readonly keysVersion: string
}

type JwksResult = { readonly kind: 'unchanged' } | ({ readonly kind: 'keys'; readonly etag: string | null } & KeySet)

interface RevocationsResult {
  readonly jtis: readonly string[]
  readonly syncedAt: string
}

type BundleResult =
  | { readonly kind: 'unchanged'; readonly confirmedAt: number }
  | { readonly kind: 'bundle'; readonly etag: string; readonly bundle: GatewayBundle }

interface Answer {
  readonly status: number
  readonly headers: IncomingHttpHeaders
  /** null for 304 (and for any answer whose body was discarded). */
  readonly body: Buffer | null
}

function header(headers: IncomingHttpHeaders, name: string): string | null {
  const value = headers[name]
  if (Array.isArray(value)) return value[0] ?? null
  return value ?? null
}

/** The ETag to send back in If-None-Match, or null when the registry's is unusable. */
function etagOf(headers: IncomingHttpHeaders): string | null {
  const etag = header(headers, 'etag')
  return etag !== null && etag.length <= MAX_ETAG_LENGTH ? etag : null
}

function requireInterval(name: string, value: number): number {
  if (!Number.isFinite(value) || value < MIN_INTERVAL_MS) {
    throw new RangeError(`remote snapshot source: ${name} must be a number of milliseconds >= ${MIN_INTERVAL_MS}`)
  }
  // Node turns a delay beyond a 32-bit int into 1 ms: a very long interval would become a busy loop.
  return Math.min(value, MAX_TIMER_MS)
}

/** Builds the key map of a JWKS document; only Ed25519 signing keys with a kid are kept (docs/wire-contract.md §5). */
function parseJwks(document: unknown): KeySet {
  if (!isRecord(document) || !Array.isArray(document.keys)) throw new Error('the JWKS has no keys array')
  if (document.keys.length > MAX_JWKS_KEYS) throw new Error(`the JWKS holds more than ${MAX_JWKS_KEYS} keys`)
  const keys = new Map<string, KeyObject>()
  const xs = new Map<string, string>()
  for (const jwk of document.keys) {
    if (!isRecord(jwk) || jwk.kty !== 'OKP' || jwk.crv !== 'Ed25519') continue
    // A kid no badge header could carry as is can never be looked up: skipped like a foreign key type.
    if (typeof jwk.kid !== 'string' || !SAFE_ID.test(jwk.kid) || typeof jwk.x !== 'string') continue
    if (jwk.use !== undefined && jwk.use !== 'sig') continue
    if (jwk.alg !== undefined && jwk.alg !== 'EdDSA' && jwk.alg !== 'Ed25519') continue
    if (xs.has(jwk.kid)) {
      // Two keys under one kid: which one verifies a badge would depend on the order in the document.
      if (xs.get(jwk.kid) !== jwk.x) throw new Error(`the JWKS names two different keys ${JSON.stringify(jwk.kid)}`)
      continue
    }
    let key: KeyObject
    try {
      if (!ED25519_X.test(jwk.x)) throw new Error('not 32 bytes of base64url')
      // Only the public members: a stray `d` must never turn this into a private key object.
      key = createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: jwk.x }, format: 'jwk' })
    } catch {
      throw new Error(`the JWKS key ${JSON.stringify(jwk.kid)} is not a valid Ed25519 public key`)
    }
    keys.set(jwk.kid, key)
    xs.set(jwk.kid, jwk.x)
  }
  // A registry always publishes its signer; an empty set would reject every badge, so it is a fault.
  if (keys.size === 0) throw new Error('the JWKS holds no Ed25519 signing key')
  const keysVersion = [...xs.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([kid, x]) => `${kid}=${x}`).join(',')
  return { keys, keysVersion }
}

/** The `issuer` of the registry's metadata document: an absolute http(s) URL as badges spell it. */
function parseIssuer(document: unknown): string {
  if (!isRecord(document) || typeof document.issuer !== 'string') throw new Error('the authority metadata has no issuer')
  const issuer = document.issuer
  if (issuer.length > MAX_ISSUER_LENGTH || !ISSUER_CHARACTERS.test(issuer)) {
    throw new Error(`the authority issuer is longer than ${MAX_ISSUER_LENGTH} characters or not visible ASCII`)
  }
  let url: URL
  try {
    url = new URL(issuer)
  } catch {
    throw new Error('the authority issuer is not an absolute URL')
  }
  // RFC 8414 §2's rule for an issuer identifier, with http allowed as CA_ISSUER_URL allows it.
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error('the authority issuer is not an http or https URL')
  if (url.username !== '' || url.password !== '' || issuer.includes('?') || issuer.includes('#')) {
    throw new Error('the authority issuer carries credentials, a query or a fragment')
  }
  return issuer
}

function parseRevocationPage(document: unknown, nowMs: number): { jtis: string[]; nextCursor: string | null; syncedAt: string } {
  if (!isRecord(document) || document.success !== true || !isRecord(document.data)) {
    throw new Error('the revocations answer is not a success envelope')
  }
  const data = document.data
  if (!Array.isArray(data.revocations)) throw new Error('the revocations answer has no revocations array')
  // The page size was asked for; a longer page would let one answer grow the revoked set without bound.
  if (data.revocations.length > REVOCATION_PAGE_SIZE) throw new Error(`a revocations page holds more than ${REVOCATION_PAGE_SIZE} entries`)
  const jtis: string[] = []
  for (const entry of data.revocations) {
    if (!isRecord(entry) || typeof entry.jti !== 'string' || entry.jti === '') throw new Error('a revocation has no jti')
    if (!SAFE_ID.test(entry.jti)) throw new Error('a revocation has a jti of more than 256 characters or outside visible ASCII')
    jtis.push(entry.jti)
  }
  // The cursor sits in `data` (docs/wire-contract.md §4) and beside it (§13); either will do.
  const cursor = data.nextCursor !== undefined ? data.nextCursor : document.nextCursor
  if (cursor !== null && cursor !== undefined && (typeof cursor !== 'string' || cursor === '' || cursor.length > MAX_CURSOR_LENGTH)) {
    throw new Error('the revocations answer has an invalid nextCursor')
  }
  const syncedAt = data.syncedAt
  const syncedAtMs = typeof syncedAt === 'string' && syncedAt.length <= 64 ? Date.parse(syncedAt) : Number.NaN
  // From the epoch to the gateway's clock plus skew: the next `since` (minus the overlap) must be a valid date.
  if (!(syncedAtMs >= REVOCATION_OVERLAP_MS && syncedAtMs <= nowMs + MAX_SYNCED_AT_AHEAD_MS)) {
    throw new Error('the revocations answer has no valid syncedAt')
  }
  return { jtis, nextCursor: typeof cursor === 'string' ? cursor : null, syncedAt: syncedAt as string }
}

function parseBundle(document: unknown, confirmedAt: number): GatewayBundle {
  if (!isRecord(document)) throw new Error('the bundle is not a JSON object')
  if (typeof document.revision !== 'string' || document.revision === '') throw new Error('the bundle has no revision')
  // The revision becomes an ETag sent back in If-None-Match: a header-unsafe one would fail every poll.
  if (!SAFE_ID.test(document.revision)) throw new Error('the bundle revision is longer than 256 characters or not visible ASCII')
  if (!isRecord(document.data)) throw new Error('the bundle has no data object')
  if (!isRecord(document.modules)) throw new Error('the bundle has no modules object')
  const problem = bundleDataProblem(document.data)
  if (problem !== null) throw new Error(`the bundle data is not what the evaluator reads: ${problem}`)
  return Object.freeze({ revision: document.revision, data: document.data as GatewayBundleData, confirmedAt })
}

/** No cause: the message is redacted of the registry key, and a library's error could hold what was redacted. */
class RegistryCallError extends Error {
  readonly code = 'REGISTRY_CALL_FAILED'
  override readonly name = 'RegistryCallError'
}

/** Why a call failed, in words that name no secret: undici's own messages carry no request headers. */
function describe(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code
    // A refused connection to a name with several addresses is an AggregateError with an empty message.
    let message = error.message
    if (message === '' && error instanceof AggregateError) message = error.errors.map(describe).join(', ')
    if (message === '') message = error.name
    return typeof code === 'string' && !message.includes(code) ? `${message} (${code})` : message
  }
  return String(error)
}

class RemoteSnapshotSource implements SnapshotSource {
  readonly #registryKey: string
  readonly #configuredIssuer: string | null
  readonly #workspace: string | null
  readonly #pollIntervalMs: number
  readonly #revocationPollMs: number
  readonly #requestTimeoutMs: number
  readonly #onError: ((what: RemotePart, error: unknown) => void) | undefined
  readonly #onRefresh: ((what: RemotePart, changed: boolean) => void) | undefined
  readonly #now: () => number
  /** Path prefix of the registry URL (empty at the root), prepended to every endpoint. */
  readonly #basePath: string
  /** Origin only, for messages: a URL with user info must not leak it. */
  readonly #origin: string
  readonly #pool: Pool

  #holder: SnapshotHolder | null = null
  #started = false
  #closed = false
  #closing: Promise<void> | null = null
  readonly #timers: NodeJS.Timeout[] = []
  /** The running refresh of each part; a tick is skipped while its part is still running. */
  readonly #running = new Map<RemotePart, Promise<void>>()
  /** Every in-flight call, so close() can abort them. */
  readonly #inFlight = new Set<AbortController>()

  #jwksEtag: string | null = null
  #revocationsSyncedAt: string | null = null
  #bundleEtag: string | null = null

  constructor(options: RemoteSourceOptions) {
    let url: URL
    try {
      url = new URL(options.registryUrl)
    } catch {
      throw new Error('remote snapshot source: the registry URL is not a valid URL')
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      throw new Error('remote snapshot source: the registry URL must be http or https')
    }
    if (typeof options.registryKey !== 'string' || options.registryKey === '') {
      throw new Error('remote snapshot source: a registry key is required')
    }
    this.#registryKey = options.registryKey
    this.#configuredIssuer = options.configuredIssuer
    this.#workspace = options.workspace
    this.#pollIntervalMs = requireInterval('pollIntervalMs', options.pollIntervalMs)
    this.#revocationPollMs = requireInterval('revocationPollMs', options.revocationPollMs ?? DEFAULT_REVOCATION_POLL_MS)
    this.#requestTimeoutMs = requireInterval('requestTimeoutMs', options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS)
    this.#onError = options.onError
    this.#onRefresh = options.onRefresh
    this.#now = options.now ?? Date.now
    this.#basePath = url.pathname.replace(/\/+$/, '')
    this.#origin = url.origin
    this.#pool = new Pool(url.origin, {
      // Three kinds of poll at most run at once; a few spare sockets cover the start-up burst.
      connections: 4,
      connect: { timeout: this.#requestTimeoutMs },
      headersTimeout: this.#requestTimeoutMs,
      bodyTimeout: this.#requestTimeoutMs,
    })
  }

  async start(holder: SnapshotHolder): Promise<void> {
    if (this.#closed) throw new Error('remote snapshot source: start() after close()')
    if (this.#started) throw new Error('remote snapshot source: start() called twice')
    this.#started = true
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
    if (failures.length > 0 || this.#closed) {
      // Allow another attempt (a caller may retry while the registry comes up).
      this.#started = false
      const why = failures.length > 0 ? failures.join('; ') : 'closed while starting'
      throw new Error(this.#redact(`remote snapshot source: no first snapshot from ${this.#origin}: ${why}`))
    }
    const keys = (jwks as PromiseFulfilledResult<JwksResult>).value
    const revoked = (revocations as PromiseFulfilledResult<RevocationsResult>).value
    const first = (bundle as PromiseFulfilledResult<BundleResult | null>).value
    // No If-None-Match was sent on the first calls, so 304 cannot be the answer here.
    if (keys.kind !== 'keys' || (first !== null && first.kind !== 'bundle')) {
      this.#started = false
      throw new Error('remote snapshot source: the registry answered 304 to an unconditional request')
    }
    this.#jwksEtag = keys.etag
    this.#revocationsSyncedAt = revoked.syncedAt
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
    const fast = setInterval(() => this.#tick('revocations'), this.#revocationPollMs)
    // Polling alone must never keep the process alive: shutdown is driven by the listeners.
    slow.unref()
    fast.unref()
    this.#timers.push(slow, fast)
  }

  close(): Promise<void> {
    this.#closing ??= this.#close()
    return this.#closing
  }

  async #close(): Promise<void> {
    this.#closed = true
    for (const timer of this.#timers) clearInterval(timer)
    this.#timers.length = 0
    for (const controller of this.#inFlight) controller.abort()
    await Promise.allSettled([...this.#running.values()])
    try {
      await this.#pool.close()
    } catch {
      // Already closed or destroyed: nothing left to release.
    }
  }

  #tick(what: RemotePart): void {
    if (this.#closed || this.#running.has(what)) return
    const run = this.#refresh(what)
      .catch((error: unknown) => {
        // Calls aborted by close() are not failures worth reporting.
        if (!this.#closed) this.#report(() => this.#onError?.(what, error))
      })
      .finally(() => this.#running.delete(what))
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
    this.#report(() => this.#onRefresh?.(what, changed))
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
    const holder = this.#holder
    if (this.#closed || holder === null) return false
    this.#revocationsSyncedAt = result.syncedAt
    // The overlap re-reads recent revocations; only a jti not yet known is a change worth a swap.
    if (result.jtis.every((jti) => holder.current.revoked.has(jti))) return false
    holder.update((current) => {
      // A new Set: snapshots are immutable, readers of the previous one keep their view.
      const revoked = new Set(current.revoked)
      for (const jti of result.jtis) revoked.add(jti)
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
    const answer = await this.#get('/.well-known/service-authority', {}, false, MAX_METADATA_BYTES)
    if (answer.status === 304) throw new Error('the registry answered 304 to an unconditional request')
    const issuer = parseIssuer(this.#json(answer))
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
    const answer = await this.#get('/.well-known/jwks.json', headers, false, MAX_BODY_BYTES)
    if (answer.status === 304) return { kind: 'unchanged' }
    return { kind: 'keys', etag: etagOf(answer.headers), ...parseJwks(this.#json(answer)) }
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
      const answer = await this.#get(`/v1/revocations?${query.toString()}`, {}, true, MAX_BODY_BYTES)
      if (answer.status === 304) throw new Error('the registry answered 304 to an unconditional request')
      const parsed = parseRevocationPage(this.#json(answer), Date.now())
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
    await this.#get('/v1/agents?limit=1', {}, true, MAX_BODY_BYTES)
    return null
  }

  async #fetchBundle(): Promise<BundleResult> {
    const workspace = this.#workspace
    if (workspace === null) throw new Error('no workspace configured')
    const headers: Record<string, string> = { accept: 'application/json' }
    if (this.#bundleEtag !== null && this.#holder !== null && this.#holder.current.bundle !== null) headers['if-none-match'] = this.#bundleEtag
    const answer = await this.#get(`/v1/bundles/${encodeURIComponent(workspace)}`, headers, true, MAX_BUNDLE_BYTES)
    // The time of the answer, not of the request: the registry vouched for the bundle at that moment.
    const confirmedAt = this.#now()
    if (answer.status === 304) return { kind: 'unchanged', confirmedAt }
    const bundle = parseBundle(this.#json(answer), confirmedAt)
    return { kind: 'bundle', etag: etagOf(answer.headers) ?? `"${bundle.revision}"`, bundle }
  }

  #json(answer: Answer): unknown {
    try {
      return JSON.parse((answer.body ?? Buffer.alloc(0)).toString('utf8'))
    } catch {
      throw new Error('the registry answered a body that is not JSON')
    }
  }

  /** 200 and 304 only; other statuses reject with the registry's error code, never its body text. */
  async #get(path: string, extraHeaders: Record<string, string>, withKey: boolean, maxBytes: number): Promise<Answer> {
    if (this.#closed) throw new RegistryCallError('the source is closed')
    const controller = new AbortController()
    this.#inFlight.add(controller)
    let timedOut = false
    // headersTimeout/bodyTimeout bound each phase; this bounds the whole call (a slow trickle included).
    const timer = setTimeout(() => {
      timedOut = true
      controller.abort()
    }, this.#requestTimeoutMs)
    timer.unref()
    const endpoint = path.split('?')[0] ?? path
    try {
      const headers: Record<string, string> = { 'user-agent': 'service-gateway', ...extraHeaders }
      if (withKey) headers['x-service-registry-key'] = this.#registryKey
      const response = await this.#pool.request({
        method: 'GET',
        path: `${this.#basePath}${path}`,
        headers,
        signal: controller.signal,
        headersTimeout: this.#requestTimeoutMs,
        bodyTimeout: this.#requestTimeoutMs,
      })
      const { statusCode, headers: responseHeaders, body } = response
      if (statusCode === 304) {
        await body.dump()
        return { status: 304, headers: responseHeaders, body: null }
      }
      if (statusCode !== 200) {
        const code = await readErrorCode(body)
        throw new RegistryCallError(`GET ${endpoint} answered ${statusCode}${code === null ? '' : ` (${code})`}`)
      }
      const content = await readBoundedBody(body, maxBytes, header(responseHeaders, 'content-length')).catch((error: unknown) => {
        if (!(error instanceof BodyTooLargeError)) throw error
        const size = error.declared === null ? 'a body' : `a body of ${error.declared} bytes`
        throw new RegistryCallError(`GET ${endpoint} answered ${size}, over the ${maxBytes} byte limit`)
      })
      return { status: 200, headers: responseHeaders, body: content }
    } catch (error) {
      if (timedOut) throw new RegistryCallError(`GET ${endpoint} timed out after ${this.#requestTimeoutMs} ms`)
      if (this.#closed && controller.signal.aborted) throw new RegistryCallError(`GET ${endpoint} aborted: the source is closing`)
      if (error instanceof RegistryCallError) throw error
      throw new RegistryCallError(this.#redact(`GET ${endpoint} failed: ${describe(error)}`))
    } finally {
      clearTimeout(timer)
      this.#inFlight.delete(controller)
    }
  }

  /** Belt and braces: no message this source builds may carry the key, whatever a library put in it. */
  #redact(message: string): string {
    return message.split(this.#registryKey).join('[redacted]')
  }
}

/** Reads the stable `error` code of an error body (docs/wire-contract.md §3), bounded, and always consumes the body. */
async function readErrorCode(body: ResponseBody): Promise<string | null> {
  try {
    const parsed: unknown = JSON.parse((await readBoundedBody(body, MAX_ERROR_BODY_BYTES)).toString('utf8'))
    // Only a code-shaped value: the body is not ours to repeat.
    return isRecord(parsed) && typeof parsed.error === 'string' && /^[A-Za-z_]{1,64}$/.test(parsed.error) ? parsed.error : null
  } catch {
    return null
  }
}

/** `start` rejects, naming the failed parts, unless all of them load. */
export function createRemoteSource(options: RemoteSourceOptions): SnapshotSource {
  return new RemoteSnapshotSource(options)
}
