// A decision-log collector in a few lines: it accepts the uploads of SERVICE_DECISION_LOG_URL (OPA's
// decision-log service API: POST, a gzip-compressed JSON array of events) and writes one JSON line per
// decision to standard output, for any log shipper to pick up. PORT (default 8686) and the path /logs.
//   node examples/decision-log-sink.mjs > decisions.jsonl &
//   SERVICE_DECISION_LOG_URL=http://localhost:8686/logs npm start
import { createServer } from 'node:http'
import { gunzip } from 'node:zlib'

const port = Number(process.env.PORT ?? 8686)
const LIMIT = 16 * 1024 * 1024

const server = createServer((req, res) => {
  if (req.method !== 'POST' || new URL(req.url, 'http://sink').pathname !== '/logs') return res.writeHead(404).end()
  const chunks = []
  let size = 0
  req.on('data', (chunk) => {
    size += chunk.length
    if (size > LIMIT) req.destroy()
    else chunks.push(chunk)
  })
  req.on('end', () => {
    const body = Buffer.concat(chunks)
    const decode = req.headers['content-encoding'] === 'gzip' ? (cb) => gunzip(body, { maxOutputLength: LIMIT }, cb) : (cb) => cb(null, body)
    decode((error, text) => {
      let events
      try {
        if (error) throw error
        events = JSON.parse(text.toString('utf8'))
        if (!Array.isArray(events)) throw new Error('not an array')
      } catch {
        return res.writeHead(400).end()
      }
      for (const event of events) process.stdout.write(JSON.stringify(event) + '\n')
      res.writeHead(204).end()
    })
  })
})
server.listen(port, () => process.stderr.write(`decision-log sink on http://localhost:${server.address().port}/logs\n`))
