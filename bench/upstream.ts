/**
 * The benchmarks' upstream: a bare keep-alive `node:http` server answering a fixed JSON body, on
 * `/bench/echo` the headers it received (so a benchmark can check what the gateway forwarded), and on
 * `POST /mcp` a fixed JSON-RPC answer for the request's id (bench/mcp.ts). Each benchmark runs it as a
 * child of its own file (`--role upstream`), so it never shares a process with the load generator.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { answerMcp, MCP_PATH } from './mcp.js'

export const UPSTREAM_BODY = JSON.stringify({ ok: true, items: [{ id: 1, name: 'widget', price: 9.5 }, { id: 2, name: 'gadget', price: 12 }] })

/** Starts the upstream and prints `{"msg": "upstream listening", "url": …}` once it listens. */
export function runUpstream(): void {
  const body = Buffer.from(UPSTREAM_BODY)
  const server = createServer({ keepAlive: true }, (req, res) => {
    if (req.method === 'POST' && req.url === MCP_PATH) return answerMcpRequest(req, res)
    // Drain any request body before answering; the other requests carry none.
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

function answerMcpRequest(req: IncomingMessage, res: ServerResponse): void {
  const chunks: Buffer[] = []
  req.on('data', (chunk: Buffer) => chunks.push(chunk))
  req.on('end', () => {
    const answer = answerMcp(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks))
    if (answer.body === '') {
      res.writeHead(answer.status, { 'content-length': 0 })
      res.end()
      return
    }
    res.writeHead(answer.status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(answer.body) })
    res.end(answer.body)
  })
}
