/**
 * The gateway's stages without sockets: a GatewayContext built as createGateway builds it, around a
 * snapshot holder filled by hand, the embedded PDP (or one the test gives), a logger writing into an
 * array, and small typed fakes for the request, the response and the upstream.
 */
import { generateKeyPairSync, type KeyObject } from 'node:crypto'
import type { IncomingMessage, ServerResponse } from 'node:http'
import { Writable } from 'node:stream'
import { loadConfig } from '../../src/config/index.js'
import { buildBadgeClaims, signBadge } from '../../src/core/badge.js'
import type { PdpRequest, ResolvedPolicy } from '../../src/core/policy/types.js'
import { GatewayContext, type GatewayDeps, type RouteTarget } from '../../src/gateway/context.js'
import { inspectRequestHead } from '../../src/gateway/ingress/framing.js'
import { RouteTable } from '../../src/gateway/ingress/routes.js'
import { createEmbeddedPdp } from '../../src/gateway/pdp/embedded-pdp.js'
import type { PdpAnswer, PolicyDecisionPoint } from '../../src/gateway/pdp/pdp.js'
import { RequestScope } from '../../src/gateway/request-scope.js'
import { SnapshotHolder, type GatewayBundle, type SnapshotContent } from '../../src/gateway/snapshot/snapshot.js'
import type { ForwardDone, ForwardOptions, ForwardResult, Upstream } from '../../src/gateway/upstream/upstream.js'
import { createLogger } from '../../src/telemetry/logger.js'
import { createMetrics, type Metrics } from '../../src/telemetry/metrics.js'

export const ISSUER = 'https://registry.test'
export const SUBJECT = 'did:web:agents.example.com:alpha'
export const STALE_AFTER_MS = 10_000
/** The clock of every stage world: fixed, so ages and expiries are exact. */
export const NOW_MS = 1_800_000_000_000

const authorityKey = generateKeyPairSync('ed25519')
export const AUTHORITY_KEYS: ReadonlyMap<string, KeyObject> = new Map([['k1', authorityKey.publicKey]])

let jtiSequence = 0
/** A badge of the snapshot's authority for `subject`, valid for an hour around NOW_MS. */
export function authorityBadge(subject = SUBJECT, over: { expiresAt?: number; jti?: string } = {}): { token: string; jti: string } {
  const jti = over.jti ?? `jti-stage-${++jtiSequence}`
  const now = Math.floor(NOW_MS / 1000)
  const claims = buildBadgeClaims({
    jti, issuer: ISSUER, subject, issuedAt: now - 10, expiresAt: over.expiresAt ?? now + 3600, ial: '1', level: '2', domain: 'agents.example.com',
  })
  return { token: signBadge(claims, { kid: 'k1', privateKey: authorityKey.privateKey }), jti }
}

/** The caller of {@link StageWorld.verified} scopes. */
export const CALLER = authorityBadge()

/** A resolved policy with no restriction, changed by `over`. */
export function policy(over: Partial<ResolvedPolicy> = {}): ResolvedPolicy {
  return { min_trust_level: null, allowed_dids: null, denied_dids: [], rate_limits: [], operations: [], mcp_tools: [], capability_classes: [], ...over }
}

let revisionSequence = 0
/** A bundle whose org policy is `config`, confirmed `ageMs` before NOW_MS. */
export function bundle(config: ResolvedPolicy = policy(), ageMs = 0): GatewayBundle {
  return { revision: `rev-stage-${++revisionSequence}`, data: { config }, confirmedAt: NOW_MS - ageMs }
}

export function content(over: Partial<SnapshotContent> = {}): SnapshotContent {
  return { issuer: ISSUER, keys: AUTHORITY_KEYS, keysVersion: 'k1', revoked: new Set(), bundle: bundle(), ...over }
}

/** The parts of an IncomingMessage the stages and the forwarder read. */
export class FakeRequest {
  readonly rawHeaders: string[]
  readonly headers: Record<string, string> = {}
  readonly httpVersionMajor = 1
  readonly httpVersionMinor = 1
  readonly socket: { remoteAddress: string | undefined }

  constructor(readonly method: string, readonly url: string, headers: readonly (readonly [string, string])[], remoteAddress = '192.0.2.7') {
    this.rawHeaders = headers.flatMap(([name, value]) => [name, value])
    for (const [name, value] of headers) this.headers[name.toLowerCase()] ??= value
    this.socket = { remoteAddress }
  }
}

/** The parts of a ServerResponse a gateway-made answer writes. */
export class FakeResponse {
  statusCode = 0
  readonly headers: Record<string, string> = {}
  body = ''
  headersSent = false
  destroyed = false
  shouldKeepAlive = true

  writeHead(status: number, headers: Record<string, string | number> = {}): this {
    this.statusCode = status
    for (const name of Object.keys(headers)) this.headers[name.toLowerCase()] = String(headers[name])
    this.headersSent = true
    return this
  }

  end(body = ''): this {
    this.body += body
    return this
  }

  destroy(): void {
    this.destroyed = true
  }

  get json(): Record<string, unknown> {
    return JSON.parse(this.body) as Record<string, unknown>
  }
}

/** What the forward stage handed to the upstream. */
export interface Forwarded {
  readonly target: string | undefined
  readonly add: readonly string[]
  readonly txnId: string | undefined
  readonly trustedPeer: boolean
  readonly responseHeaders: readonly string[] | undefined
  readonly headersWithUnderscores: string | undefined
}

/** An upstream that records each forward and completes it at once with `result`. */
export class FakeUpstream {
  readonly forwards: Forwarded[] = []
  result: ForwardResult = { ok: true, status: 200 }

  forwardTo<C>(_req: unknown, _res: unknown, options: ForwardOptions, context: C, done: ForwardDone<C>): void {
    this.forwards.push({
      target: options.target,
      add: [...options.add],
      txnId: options.txnId,
      trustedPeer: options.trustedPeer,
      responseHeaders: options.responseHeaders === undefined ? undefined : [...options.responseHeaders],
      headersWithUnderscores: options.headersWithUnderscores,
    })
    done(context, this.result)
  }
}

export interface StageWorldOptions {
  /** Environment on top of the defaults (EM-GUARD, staleness 10 s). */
  readonly env?: Record<string, string>
  /** Default: the embedded PDP. Null: badge-only mode. */
  readonly pdp?: PolicyDecisionPoint | null
  /** Default: the snapshot of {@link content}. Null: no snapshot yet. */
  readonly content?: SnapshotContent | null
  readonly breakglassKey?: KeyObject | null
  /** Routes besides `/api` (the configured mode); each forwards to the world's upstream. */
  readonly routes?: readonly { prefix: string; target: Omit<RouteTarget, 'upstream'> }[]
  /** The console's decision feed the gateway records into; none by default. */
  readonly feed?: GatewayDeps['feed']
}

export interface StageWorld {
  readonly ctx: GatewayContext
  readonly holder: SnapshotHolder
  readonly upstream: FakeUpstream
  readonly metrics: Metrics
  /** Every log line written so far (request lines are flushed first). */
  logs(): Record<string, unknown>[]
  /** The `gateway request` lines. */
  requestLines(): Record<string, unknown>[]
  /** A request scope as the server's handler creates it, on fake request and response objects. */
  scope(method: string, url: string, headers?: readonly (readonly [string, string])[]): { scope: RequestScope; res: FakeResponse }
  /**
   * A scope as the admit stage hands it on: snapshot, the gateway's headers, route, mode and the
   * transaction id `txn-stage`; `url` must already be canonical.
   */
  admitted(method: string, url: string, headers?: readonly (readonly [string, string])[]): { scope: RequestScope; res: FakeResponse }
  /** An {@link admitted} scope of {@link CALLER}, as the badge stage hands it on: with the verified badge. */
  verified(method: string, url: string, headers?: readonly (readonly [string, string])[]): { scope: RequestScope; res: FakeResponse }
}

/** The transaction id of every {@link StageWorld.admitted} scope. */
export const STAGE_TXN = 'txn-stage'

export function stageWorld(options: StageWorldOptions = {}): StageWorld {
  const config = loadConfig({
    DATABASE_URL: 'memory://',
    CA_ISSUER_URL: ISSUER,
    SERVICE_UPSTREAM_URL: 'http://127.0.0.1:9',
    SERVICE_ENFORCEMENT_MODE: 'EM-GUARD',
    SERVICE_BUNDLE_STALENESS_THRESHOLD: `${STALE_AFTER_MS / 1000}s`,
    ...options.env,
  }).gateway
  const lines: string[] = []
  const sink = new Writable({
    write(chunk, _encoding, callback) {
      for (const line of String(chunk).split('\n')) if (line !== '') lines.push(line)
      callback()
    },
  })
  const logger = createLogger('info', sink)
  const metrics = createMetrics()
  const holder = new SnapshotHolder()
  const initial = options.content === undefined ? content() : options.content
  if (initial !== null) holder.swap(initial)
  const upstream = new FakeUpstream()
  const asUpstream = upstream as unknown as Upstream
  const routes = new RouteTable<RouteTarget>([
    { prefix: '/api', value: { upstream: asUpstream, mode: null } },
    ...(options.routes ?? []).map(({ prefix, target }) => ({ prefix, caseInsensitive: target.caseInsensitive, value: { ...target, upstream: asUpstream } })),
  ])
  const ctx = new GatewayContext({
    config,
    holder,
    pdp: options.pdp === undefined ? createEmbeddedPdp() : options.pdp,
    routes,
    breakglassKey: options.breakglassKey ?? null,
    logger,
    metrics: metrics.gateway,
    now: () => NOW_MS,
    feed: options.feed ?? null,
  })
  const logs = (): Record<string, unknown>[] => {
    ctx.telemetry.flush()
    return lines.map((line) => JSON.parse(line) as Record<string, unknown>)
  }
  return {
    ctx,
    holder,
    upstream,
    metrics,
    logs,
    requestLines: () => logs().filter((line) => line.msg === 'gateway request'),
    scope,
    admitted,
    verified(method, url, headers = []) {
      const made = admitted(method, url, [['authorization', `Bearer ${CALLER.token}`], ...headers])
      const badge = ctx.badges.verify(CALLER.token, holder.current, Math.floor(NOW_MS / 1000))
      if (typeof badge === 'string') throw new Error(`the caller's badge is refused: ${badge}`)
      made.scope.badge = badge
      made.scope.add = badge.identityHeaders
      return made
    },
  }

  function admitted(method: string, url: string, headers: readonly (readonly [string, string])[] = []): { scope: RequestScope; res: FakeResponse } {
    const made = scope(method, url, headers)
    const next = made.scope
    next.snapshot = holder.current
    next.method = method
    next.operationMethod = method === 'HEAD' ? 'GET' : method
    inspectRequestHead(next.req, next, true)
    const queryAt = url.indexOf('?')
    next.path = queryAt === -1 ? url : url.slice(0, queryAt)
    next.query = queryAt === -1 ? '' : url.slice(queryAt)
    next.target = url
    const route = routes.match(next.path)
    if (route === null) throw new Error(`no route for ${url}`)
    next.route = route.value
    next.mode = route.value.mode ?? config.enforcementMode
    next.txnId = STAGE_TXN
    return made
  }

  function scope(method: string, url: string, headers: readonly (readonly [string, string])[] = []): { scope: RequestScope; res: FakeResponse } {
    const res = new FakeResponse()
    const req = new FakeRequest(method, url, headers)
    return { scope: new RequestScope(req as unknown as IncomingMessage, res as unknown as ServerResponse, performance.now(), NOW_MS, null, config.enforcementMode), res }
  }
}

/** A PDP that records each request and answers through `inner` (the embedded PDP by default). */
export function recordingPdp(inner: PolicyDecisionPoint = createEmbeddedPdp()): PolicyDecisionPoint & { readonly calls: PdpRequest[] } {
  const calls: PdpRequest[] = []
  return {
    kind: inner.kind,
    calls,
    decide(request, snapshot): PdpAnswer | Promise<PdpAnswer> {
      calls.push(request)
      return inner.decide(request, snapshot)
    },
    close: async () => {},
  }
}

/** Resolves once the request is finished (refused or forwarded), for stages that continue through a promise. */
export async function finished(scope: RequestScope, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!scope.finished) {
    if (Date.now() > deadline) throw new Error('the request did not finish')
    await new Promise((resolve) => setImmediate(resolve))
  }
}
