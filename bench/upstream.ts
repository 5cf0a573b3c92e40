/**
 * The benchmarks' upstream: a bare keep-alive `node:http` server answering a fixed JSON body, and on
 * `/bench/echo` the headers it received (so a benchmark can check what the gateway forwarded). Each
 * benchmark runs it as a child of its own file (`--role upstream`), so it never shares a process with
 * the load generator.
 */
import { createServer } from 'node:http'

export const UPSTREAM_BODY = JSON.stringify({ ok: true, items: [{ id: 1, name: 'widget', price: 9.5 }, { id: 2, name: 'gadget', price: 12 }] })

/** Starts the upstream and prints `{"msg": "upstream listening", "url": …}` once it listens. */
export function runUpstream(): void {
  const body = Buffer.from(UPSTREAM_BODY)
  const server = createServer({ keepAlive: true }, (req, res) => {
    // Drain any request body before answering; the benchmarks send none.
    req.resume()
    if (req.url === '/bench/echo') {
      const echo = JSON.stringify({ headers: req.headers })
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(echo) })
      res.end(echo)
      return
    }
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length })
    res.end(body)
  })
  // Longer than the proxies' pool keep-alive, so the upstream never closes a connection under them.
  server.keepAliveTimeout = 65_000
  server.listen(0, '127.0.0.1', () => {
    const address = server.address()
    const port = typeof address === 'object' && address !== null ? address.port : 0
    process.stdout.write(`${JSON.stringify({ msg: 'upstream listening', url: `http://127.0.0.1:${port}` })}\n`)
  })
  process.once('SIGTERM', () => {
    server.closeAllConnections()
    server.close(() => process.exit(0))
  })
}
