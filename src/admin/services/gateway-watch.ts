/**
 * What the admin plane pushes to gateway-only processes (`GET /v1/gateway/watch`, docs/api.md): the change
 * notices this process hears, fanned out to every open watch stream. One subscription per process feeds
 * them all: the bundle cache's policy LISTEN, one revocation LISTEN, and the key ring's reloads (each admin
 * instance notices a change of the key file itself). A LISTEN that was lost and restored tells every stream
 * to resync, since what was announced meanwhile is gone.
 */
import type { ServerResponse } from 'node:http'
import type { KeyRing } from '../../authority/key-ring.js'
import type { BundleCache } from '../../bundles/cache.js'
import { ServiceError } from '../../core/errors.js'
import { API_KEY_CHANNEL, REVOCATION_CHANNEL } from '../../core/notify-channels.js'
import { sseEvent } from '../../core/sse.js'
import type { Database } from '../../db/database.js'
import type { Logger } from '../../telemetry/logger.js'

export interface GatewayWatchDeps {
  readonly db: Database
  readonly bundles: BundleCache
  readonly keyRing: KeyRing
  readonly logger: Logger
  /** SERVICE_GATEWAY_WATCH_STREAMS_MAX. */
  readonly maxStreams: number
  /** SERVICE_GATEWAY_WATCH_HEARTBEAT. */
  readonly heartbeatMs: number
}

/** What one stream receives: policy notices of its workspace only (other orgs' ids are not its business). */
export interface WatchFilter {
  readonly workspace: string | null
  /** The registry key the stream was opened with: a stream outlives no change to the key's rights. */
  readonly keyId: string | null
}

/** A stream whose socket holds this much unsent is not reading: it is ended, and reconnects to a resync. */
const MAX_BUFFERED_BYTES = 64 * 1024

class WatchStream {
  #closed = false
  readonly #heartbeat: NodeJS.Timeout

  constructor(
    private readonly res: ServerResponse,
    readonly filter: WatchFilter,
    heartbeatMs: number,
    private readonly onClose: (stream: WatchStream) => void,
  ) {
    this.#heartbeat = setInterval(() => this.write(': heartbeat\n\n'), heartbeatMs)
    this.#heartbeat.unref()
    res.on('close', () => this.close())
    this.write(sseEvent({ event: 'ready', data: JSON.stringify({ heartbeat_ms: heartbeatMs }) }))
  }

  write(chunk: string): void {
    if (this.#closed) return
    if (this.res.writableLength > MAX_BUFFERED_BYTES) {
      this.close()
      return
    }
    this.res.write(chunk)
  }

  close(): void {
    if (this.#closed) return
    this.#closed = true
    clearInterval(this.#heartbeat)
    if (!this.res.writableEnded) this.res.end()
    this.onClose(this)
  }
}

export class GatewayWatchHub {
  readonly #deps: GatewayWatchDeps
  readonly #streams = new Set<WatchStream>()
  readonly #stops: (() => Promise<void> | void)[] = []
  #available = false

  constructor(deps: GatewayWatchDeps) {
    this.#deps = deps
  }

  /** Streams open now. */
  get size(): number {
    return this.#streams.size
  }

  /**
   * Subscribes. `policyListening` says whether the bundle cache's policy LISTEN is up: without it (or
   * without the revocation LISTEN) no stream is served, so gateways keep polling and say so.
   */
  async start(policyListening: boolean): Promise<void> {
    const { bundles, keyRing, db, logger } = this.#deps
    this.#stops.push(bundles.onChange((orgId) => this.#broadcast('policy', { org_id: orgId.toLowerCase() }, orgId.toLowerCase())))
    this.#stops.push(bundles.onResync(() => this.#resync('policy')))
    this.#stops.push(keyRing.onReload(() => this.#broadcast('keys', {})))
    try {
      this.#stops.push(await db.listen(REVOCATION_CHANNEL, (jti) => this.#broadcast('revoked', { jti }), () => this.#resync('revocation')))
      // A deleted or revoked key ends its streams; the gateway's reconnect then meets the authentication again.
      this.#stops.push(await db.listen(API_KEY_CHANNEL, (keyId) => this.#endKey(keyId), () => this.endStreams()))
      this.#available = policyListening
    } catch (error) {
      logger.error({ err: error }, 'gateway watch: LISTEN failed; gateway-only processes keep polling')
    }
  }

  /** Serves one stream on `res` (already hijacked, head not written); throws when none may open. */
  open(res: ServerResponse, filter: WatchFilter): void {
    if (!this.#available) throw new ServiceError('watch_unavailable')
    if (this.#streams.size >= this.#deps.maxStreams) throw new ServiceError('watch_limit_reached')
    res.writeHead(200, {
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-cache, no-transform',
      connection: 'keep-alive',
      // Proxies that buffer responses would hold events back.
      'x-accel-buffering': 'no',
    })
    const stream = new WatchStream(res, filter, this.#deps.heartbeatMs, (closed) => this.#streams.delete(closed))
    this.#streams.add(stream)
  }

  /** Ends every stream (shutdown: open streams would hold server.close() for ever). */
  endStreams(): void {
    for (const stream of [...this.#streams]) stream.close()
  }

  async close(): Promise<void> {
    this.#available = false
    this.endStreams()
    for (const stop of this.#stops.splice(0)) await stop()
  }

  #endKey(keyId: string): void {
    for (const stream of [...this.#streams]) if (stream.filter.keyId === keyId) stream.close()
  }

  #broadcast(event: string, data: Record<string, unknown>, org?: string): void {
    if (this.#streams.size === 0) return
    const chunk = sseEvent({ event, data: JSON.stringify(data) })
    for (const stream of [...this.#streams]) {
      if (org !== undefined && stream.filter.workspace !== org) continue
      stream.write(chunk)
    }
  }

  #resync(which: string): void {
    this.#deps.logger.warn({ channel: which }, 'gateway watch: LISTEN restored after a loss; every watch stream resyncs')
    this.#broadcast('resync', {})
  }
}
