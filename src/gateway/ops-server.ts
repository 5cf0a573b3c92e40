// A gateway-only process has no admin plane: this serves its `/healthz`, `/readyz` and `/metrics` the same
// way (docs/wire-contract.md §1, §12).
import { createServer, type Server } from 'node:http'
import type { Registry } from 'prom-client'
import { readinessBody, type ReadinessReport } from '../http/readiness.js'

/** `ready` may answer later: a gateway primary asks its workers. */
export function createOpsServer(deps: { registry: Registry; ready: () => ReadinessReport | Promise<ReadinessReport> }): Server {
  return createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0]
    const send = (status: number, type: string, body: string): void => {
      res.writeHead(status, { 'content-type': type, 'content-length': Buffer.byteLength(body), 'cache-control': 'no-store' })
      res.end(req.method === 'HEAD' ? undefined : body)
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      send(405, 'application/json', JSON.stringify({ error: 'method_not_allowed', message: 'Only GET and HEAD are served here.' }))
      return
    }
    if (path === '/healthz') {
      send(200, 'application/json', JSON.stringify({ status: 'ok' }))
    } else if (path === '/readyz') {
      Promise.resolve(deps.ready()).then(
        (report) => send(report.ready ? 200 : 503, 'application/json', JSON.stringify(readinessBody(report))),
        () => send(500, 'application/json', JSON.stringify({ error: 'internal_error', message: 'An internal error occurred.' })),
      )
    } else if (path === '/metrics') {
      deps.registry.metrics().then(
        (text) => send(200, deps.registry.contentType, text),
        () => send(500, 'application/json', JSON.stringify({ error: 'internal_error', message: 'An internal error occurred.' })),
      )
    } else {
      send(404, 'application/json', JSON.stringify({ error: 'not_found', message: 'The resource does not exist.' }))
    }
  })
}
