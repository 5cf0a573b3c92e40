/**
 * src/http/server-limits.ts on the ops listener of gateway-only mode (a bare node:http server with no
 * clientError listener of its own), over real sockets: the head and request limits answer 408 in the
 * admin plane's error shape, header lines past the cap are not read, and the listener added for the
 * time-outs keeps node's own 400/431 for other client errors. The admin plane and the gateway are
 * covered end to end in test/e2e/hostile-inputs.test.ts.
 */
import t from 'tap'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Registry } from 'prom-client'
import { loadConfig } from '../../../src/config/index.js'
import { createOpsServer } from '../../../src/gateway/ops-server.js'
import { applyServerLimits, serverLimits } from '../../../src/http/server-limits.js'
import { rawExchange, rawRequest } from '../../helpers/hostile-http.js'

const config = loadConfig({
  SERVICE_HEADERS_TIMEOUT_MS: '400',
  SERVICE_REQUEST_TIMEOUT_MS: '800',
  SERVICE_KEEP_ALIVE_TIMEOUT_MS: '500',
  SERVICE_MAX_HEADERS_COUNT: '20',
})

async function started(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.closeAllConnections(); server.close() })
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

const ops = createOpsServer({ registry: new Registry(), ready: () => ({ ready: true, checks: {} }) })
applyServerLimits(ops, serverLimits(config, 'ops'))
const OPS = await started(ops)
const host = new URL(OPS).host

t.test('the limits are set on the server', async (t) => {
  t.equal(ops.headersTimeout, 400)
  t.equal(ops.requestTimeout, 800)
  t.equal(ops.keepAliveTimeout, 500)
  t.equal(ops.maxHeadersCount, 20)
  const gateway = serverLimits(config, 'gateway')
  t.equal(gateway.maxHeadersCount, null, 'the gateway keeps node\'s header count (it forwards what it reads)')
  t.equal(gateway.requestTimeoutMs, config.gateway.requestTimeoutMs)
  t.throws(() => applyServerLimits(createServer(), { ...gateway, headersTimeoutMs: 2000, requestTimeoutMs: 1000 }), RangeError)
})

t.test('an unfinished head is answered 408 after the head limit', async (t) => {
  const started = Date.now()
  const exchange = await rawExchange(OPS, `GET /healthz HTTP/1.1\r\nHost: ${host}\r\nX-Slow: `)
  const status = await exchange.status
  const elapsed = Date.now() - started
  exchange.socket.destroy()
  t.equal(status, 408)
  t.ok(elapsed >= 350 && elapsed < 2000, `after about 400 ms (${elapsed} ms)`)
  const body = JSON.parse(exchange.received().slice(exchange.received().indexOf('\r\n\r\n') + 4)) as unknown
  t.same(body, { error: 'request_timeout', message: 'The request was not received in time.' })
})

t.test('an unfinished body: the connection is closed at the request limit', async (t) => {
  const started = Date.now()
  const exchange = await rawExchange(OPS, `GET /healthz HTTP/1.1\r\nHost: ${host}\r\nContent-Length: 100\r\n\r\n`, 'abc')
  // the ops listener answers at once without reading the body; node keeps reading it to find the next
  // request, so only the request limit ends the connection (with a 408 after the answer, as node itself
  // does: RFC 9110 §15.5.9 lets a server send it on a connection it is about to close)
  const status = await exchange.status
  await new Promise<void>((resolve) => exchange.socket.once('close', () => resolve()))
  const elapsed = Date.now() - started
  t.equal(status, 200, 'answered without the body')
  t.ok(elapsed >= 750 && elapsed < 2000, `closed after about 800 ms (${elapsed} ms)`)
  t.same(exchange.received().match(/HTTP\/1\.1 \d{3}/g), ['HTTP/1.1 200', 'HTTP/1.1 408'], 'the answer, then 408 as the connection closes')
})

t.test('other client errors keep node\'s own answers', async (t) => {
  const garbage = await rawExchange(OPS, 'NOT HTTP AT ALL\r\n\r\n')
  t.equal(await garbage.status, 400, 'a malformed request line: 400')
  garbage.socket.destroy()
  const huge = await rawExchange(OPS, `GET /healthz HTTP/1.1\r\nHost: ${host}\r\nX-Big: ${'b'.repeat(20_000)}\r\n\r\n`)
  t.equal(await huge.status, 431, 'a head over 16 KiB: 431')
  huge.socket.destroy()
})

t.test('header lines past the cap are not read', async (t) => {
  const filler = Array.from({ length: 25 }, (_, i) => [`x-filler-${i}`, 'f'] as [string, string])
  const res = await rawRequest(OPS, 'GET', '/healthz', { headers: [...filler, ['x-late', 'yes']] })
  t.equal(res.status, 200, 'the ops listener still serves the request')
  // node leaves lines past the cap out of req.headers (what Fastify and the ops listener read)
  const seen: Record<string, unknown>[] = []
  const probe = createServer((req, res) => { seen.push({ ...req.headers }); res.end() })
  applyServerLimits(probe, serverLimits(config, 'ops'))
  const PROBE = await started(probe)
  await rawRequest(PROBE, 'GET', '/', { headers: [['x-early', 'yes'], ...filler, ['x-late', 'yes']] })
  t.equal(Object.keys(seen[0] ?? {}).length, 20, 'only the first 20 lines are read')
  t.equal(seen[0]?.['x-early'], 'yes', 'a line within the cap is read')
  t.equal(seen[0]?.['x-late'], undefined, 'the line past the cap is not')
})
