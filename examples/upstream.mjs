// The upstream of the README walkthrough: answers every request with its path and the identity
// headers the gateway added, so you can see what reached it. Usage: node examples/upstream.mjs [port]
import { createServer } from 'node:http'

const port = Number(process.argv[2] ?? 9000)
createServer((req, res) => {
  req.resume()
  const body = JSON.stringify({
    upstream: 'example',
    method: req.method,
    path: req.url,
    subject: req.headers['x-service-subject'] ?? null,
    trust_level: req.headers['x-service-trust-level'] ?? null,
    txn: req.headers['x-service-txn'] ?? null,
  })
  res.writeHead(200, { 'content-type': 'application/json' }).end(body + '\n')
}).listen(port, '127.0.0.1', () => console.log(`example upstream on http://127.0.0.1:${port}`))
