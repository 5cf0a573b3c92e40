/**
 * A recording upstream for gateway tests: answers 200 with a JSON echo of what it received and keeps
 * every request (method, url, headers, body) for assertions.
 */
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http'

export interface RecordedRequest {
  method: string
  url: string
  headers: IncomingHttpHeaders
  rawHeaders: string[]
  body: string
}

export interface UpstreamServer {
  readonly url: string
  readonly server: Server
  readonly requests: RecordedRequest[]
  /** Replaces the default echo handler (return true when the handler wrote the response itself). */
  handler: ((req: RecordedRequest, res: import('node:http').ServerResponse) => boolean) | null
  close(): Promise<void>
}

/** The gateway's SERVICE_GATEWAY_MAX_HEAD_BYTES may be up to 1 MiB. */
const UPSTREAM_MAX_HEAD_BYTES = 1024 * 1024

export async function startUpstream(t: { teardown(fn: () => unknown): void }): Promise<UpstreamServer> {
  const requests: RecordedRequest[] = []
  const state: UpstreamServer = {
    url: '',
    server: null as unknown as Server,
    requests,
    handler: null,
    async close() {
      state.server.closeAllConnections()
      await new Promise<void>((resolve) => state.server.close(() => resolve()))
    },
  }
  // The gateway forwards badge and envelope headers unchanged, so the upstream must read heads as large as the gateway does.
  const server = createServer({ maxHeaderSize: UPSTREAM_MAX_HEAD_BYTES }, (req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', () => {
      const recorded: RecordedRequest = {
        method: req.method ?? '', url: req.url ?? '', headers: req.headers, rawHeaders: req.rawHeaders, body: Buffer.concat(chunks).toString('utf8'),
      }
      requests.push(recorded)
      if (state.handler?.(recorded, res) === true) return
      const body = JSON.stringify({ method: recorded.method, url: recorded.url, headers: recorded.headers, body: recorded.body })
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) })
      res.end(body)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const address = server.address()
  ;(state as { url: string }).url = `http://127.0.0.1:${typeof address === 'object' && address !== null ? address.port : 0}`
  ;(state as { server: Server }).server = server
  t.teardown(() => state.close().catch(() => {}))
  return state
}
