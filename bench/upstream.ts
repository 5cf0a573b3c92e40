/**
 * The benchmarks' upstream: a bare keep-alive `node:http` server answering a fixed JSON body, on
 * `/bench/echo` the headers it received (so a benchmark can check what the gateway forwarded), and on
 * `POST /mcp` a fixed JSON-RPC answer for the request's id (bench/mcp.ts), on `POST /a2a` an A2A agent's
 * (bench/a2a.ts). Each benchmark runs it as a
 * child of its own file (`--role upstream`), so it never shares a process with the load generator.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import { A2A_PATH, answerA2a } from './a2a.js'
import { answerMcp, MCP_PATH } from './mcp.js'

export const UPSTREAM_BODY = JSON.stringify({ ok: true, items: [{ id: 1, name: 'widget', price: 9.5 }, { id: 2, name: 'gadget', price: 12 }] })

/** Starts the upstream and prints `{"msg": "upstream listening", "url": …}` once it listens. */
export function runUpstream(): void {
  const body = Buffer.from(UPSTREAM_BODY)
  const server = createServer({ keepAlive: true }, (req, res) => {
    if (req.method === 'POST' && req.url === MCP_PATH) return answerJsonRpc(req, res, answerMcp)
    if (req.method === 'POST' && req.url === A2A_PATH) return answerJsonRpc(req, res, answerA2a)
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
  server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
    const address = server.address()
    const port = typeof address === 'object' && address !== null ? address.port : 0
    process.stdout.write(`${JSON.stringify({ msg: 'upstream listening', url: `http://127.0.0.1:${port}` })}\n`)
  })
  process.once('SIGTERM', () => {
    server.closeAllConnections()
    server.close(() => process.exit(0))
  })
}

/** Reads the whole body and writes what `answer` makes of it (an empty body: no content, a notification's 202). */
function answerJsonRpc(req: IncomingMessage, res: ServerResponse, answer: (body: Buffer) => { status: number; body: string }): void {
  const chunks: Buffer[] = []
  req.on('data', (chunk: Buffer) => chunks.push(chunk))
  req.on('end', () => {
    const answered = answer(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks))
    if (answered.body === '') {
      res.writeHead(answered.status, { 'content-length': 0 })
      res.end()
      return
    }
    res.writeHead(answered.status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(answered.body) })
    res.end(answered.body)
  })
}
