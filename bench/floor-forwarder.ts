/**
 * The floor of bench/gateway.ts: the minimal correct reverse proxy on the same stack as the gateway — a
 * bare `node:http` server forwarding with an undici Pool configured as the gateway's Upstream class
 * (src/gateway/upstream/upstream.ts: 128 keep-alive connections, pipelining 1, 30 s header/body
 * timeouts, 10 s connect timeout), streaming both ways with `pool.dispatch` and removing hop-by-hop
 * headers in both directions. No badge, no policy, no metrics, no log line: whatever the gateway costs
 * above this is the price of its own stages.
 *
 *   UPSTREAM_URL=http://127.0.0.1:9000 PORT=0 node .build/bench/bench/floor-forwarder.js
 *
 * Prints one JSON line `{"msg":"floor forwarder listening","url":"http://127.0.0.1:<port>"}` when ready.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { Pool, type Dispatcher } from 'undici'
import { retainTickObjectShape } from '../src/http/tick-object-shape.js'

// RFC 9110 §7.6.1 plus the de-facto keep-alive / proxy-connection, as the gateway removes them.
const HOP_BY_HOP = new Set([
  'connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer', 'transfer-encoding', 'upgrade',
])

/** Extra hop-by-hop names a sender lists in its Connection header (rare: null when none). */
function connectionTokens(value: string, into: Set<string> | null): Set<string> | null {
  // The usual values name no extra header: skip the split (every upstream answer carries one).
  if (value.length <= 10 && (value === 'keep-alive' || value === 'close' || value.toLowerCase() === 'keep-alive' || value.toLowerCase() === 'close')) return into
  for (const part of value.split(',')) {
    const token = part.trim().toLowerCase()
    if (token === '' || token === 'close' || token === 'keep-alive') continue
    ;(into ??= new Set()).add(token)
  }
  return into
}

function dropNamed(list: string[], names: Set<string>): string[] {
  const kept: string[] = []
  for (let i = 0; i < list.length; i += 2) if (!names.has(list[i]!.toLowerCase())) kept.push(list[i]!, list[i + 1]!)
  return kept
}

/** One forwarded request's undici handler: head and chunks go straight to the client, with back-pressure. */
class Relay implements Dispatcher.DispatchHandler {
  #abort: ((err?: Error) => void) | null = null
  #resume: (() => void) | null = null
  #headSent = false
  #done = false

  constructor(private readonly res: ServerResponse) {
    res.on('close', () => {
      if (!this.#done && !res.writableFinished) this.#abort?.(new Error('client closed'))
    })
    res.on('drain', () => this.#resume?.())
  }

  onConnect(abort: (err?: Error) => void): void {
    this.#abort = abort
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[], resume: () => void): boolean {
    if (statusCode < 200) return true
    this.#resume = resume
    let headers: string[] = []
    let tokens: Set<string> | null = null
    for (let i = 0; i < rawHeaders.length; i += 2) {
      const name = rawHeaders[i]!.toString('latin1')
      const lower = name.toLowerCase()
      if (HOP_BY_HOP.has(lower)) {
        if (lower === 'connection') tokens = connectionTokens(rawHeaders[i + 1]!.toString('latin1'), tokens)
        continue
      }
      headers.push(name, rawHeaders[i + 1]!.toString('latin1'))
    }
    if (tokens !== null) headers = dropNamed(headers, tokens)
    this.res.writeHead(statusCode, headers)
    this.#headSent = true
    return true
  }

  onData(chunk: Buffer): boolean {
    return this.res.write(chunk)
  }

  onComplete(): void {
    this.#done = true
    this.res.end()
  }

  onError(): void {
    if (this.#done) return
    this.#done = true
    if (this.#headSent || this.res.destroyed) {
      this.res.destroy()
      return
    }
    const body = '{"error":"upstream unavailable"}'
    this.res.writeHead(502, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) })
    this.res.end(body)
  }
}

export interface FloorForwarder {
  readonly server: Server
  readonly url: string
  close(): Promise<void>
}

export async function startFloorForwarder(upstreamUrl: string, port = 0, host = '127.0.0.1'): Promise<FloorForwarder> {
  const origin = new URL(upstreamUrl).origin
  // The gateway does this at start (src/http/tick-object-shape.ts); the floor must not run slower for lack of it.
  retainTickObjectShape()
  const timeout = 30_000
  const pool = new Pool(origin, {
    connections: 128,
    pipelining: 1,
    headersTimeout: timeout,
    bodyTimeout: timeout,
    connect: { timeout: 10_000 },
  })
  const server = createServer({ keepAlive: true }, (req: IncomingMessage, res: ServerResponse) => {
    const raw = req.rawHeaders
    let headers: string[] = []
    let tokens: Set<string> | null = null
    let hasBody = false
    for (let i = 0; i < raw.length; i += 2) {
      const name = raw[i]!
      const lower = name.toLowerCase()
      if (HOP_BY_HOP.has(lower)) {
        if (lower === 'connection') tokens = connectionTokens(raw[i + 1]!, tokens)
        else if (lower === 'transfer-encoding') hasBody = true
        continue
      }
      // undici sets Host from the pool's origin and refuses Expect (Node already answered 100-continue).
      if (lower === 'host' || lower === 'expect') continue
      if (lower === 'content-length' && raw[i + 1] !== '0') hasBody = true
      headers.push(name, raw[i + 1]!)
    }
    if (tokens !== null) headers = dropNamed(headers, tokens)
    pool.dispatch(
      { path: req.url ?? '/', method: req.method as Dispatcher.HttpMethod, headers, body: hasBody ? req : null },
      new Relay(res),
    )
  })
  await new Promise<void>((resolve) => server.listen(port, host, resolve))
  const address = server.address()
  const url = `http://${host}:${typeof address === 'object' && address !== null ? address.port : port}`
  return {
    server,
    url,
    async close() {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
      await pool.close()
    },
  }
}

// Run as a process when executed directly (bench/gateway.ts spawns it).
if (process.argv[1] !== undefined && import.meta.url.endsWith(process.argv[1].replace(/\\/g, '/'))) {
  const upstream = process.env.UPSTREAM_URL
  if (upstream === undefined) {
    process.stderr.write('UPSTREAM_URL is required\n')
    process.exit(2)
  }
  const floor = await startFloorForwarder(upstream, Number(process.env.PORT ?? 0))
  process.stdout.write(`${JSON.stringify({ msg: 'floor forwarder listening', url: floor.url })}\n`)
  process.once('SIGTERM', () => {
    void floor.close().then(() => process.exit(0))
  })
}
