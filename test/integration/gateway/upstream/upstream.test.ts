/**
 * The gateway's forwarder against real sockets (docs/wire-contract.md §9, §13): a recording `node:http` upstream,
 * a small gateway server wired the way the real one is (framing check, route table, forward,
 * sendGatewayError on failure, clientErrorHandler), and clients speaking undici or raw bytes.
 *
 * Covered: method, path, query and bodies (large, chunked, streamed both ways), status and headers,
 * hop-by-hop removal in both directions, identity headers and the strip set, X-Forwarded-* for untrusted
 * and trusted peers, base paths, 502/504, an upstream dying mid-body, clients leaving at every stage,
 * and request-smuggling probes that must never reach the upstream.
 */
import t from 'tap'
import { createHash } from 'node:crypto'
import { once } from 'node:events'
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { connect, type AddressInfo } from 'node:net'
import { Readable } from 'node:stream'
import { setTimeout as sleep } from 'node:timers/promises'
import { Agent, request } from 'undici'
import { sendGatewayError } from '../../../../src/gateway/respond.js'
import { clientErrorHandler, framingProblem } from '../../../../src/gateway/ingress/framing.js'
import { RouteTable } from '../../../../src/gateway/ingress/routes.js'
import { CLIENT_CLOSED_STATUS, HOP_BY_HOP, Upstream, type ForwardOptions, type ForwardResult } from '../../../../src/gateway/upstream/upstream.js'

// ---------------------------------------------------------------------------------------------------
// The recording upstream

interface Seen {
  method: string
  url: string
  rawHeaders: string[]
  headers: IncomingHttpHeaders
  bodyBytes: number
  bodyHash: string
  /** The gateway's connection went away before this upstream finished its response. */
  cutShort: boolean
}

const seen: Seen[] = []
/** Resolved by the streaming-response test to let the upstream send its second part. */
let releaseStream: () => void = () => {}
/** Notified on every upstream body chunk (the streaming-upload test waits on it). */
let onUpstreamBytes: (total: number) => void = () => {}
/** Notified when an upstream response is cut short. */
let onCutShort: (entry: Seen) => void = () => {}

function pattern(size: number): Buffer {
  const out = Buffer.alloc(size)
  for (let i = 0; i < size; i++) out[i] = (i * 31 + 7) & 0xff
  return out
}
const sha = (data: Buffer | string): string => createHash('sha256').update(data).digest('hex')

function upstreamHandler(req: IncomingMessage, res: ServerResponse): void {
  const hash = createHash('sha256')
  const entry: Seen = { method: req.method ?? '', url: req.url ?? '', rawHeaders: req.rawHeaders, headers: req.headers, bodyBytes: 0, bodyHash: '', cutShort: false }
  seen.push(entry)
  res.on('close', () => {
    if (!res.writableFinished) {
      entry.cutShort = true
      onCutShort(entry)
    }
  })
  res.on('error', () => {})
  req.on('error', () => {})
  req.on('data', (chunk: Buffer) => {
    hash.update(chunk)
    entry.bodyBytes += chunk.length
    onUpstreamBytes(entry.bodyBytes)
  })
  req.on('end', () => {
    entry.bodyHash = hash.digest('hex')
    const url = new URL(entry.url, 'http://upstream')
    const name = url.pathname.split('/').pop() ?? ''
    switch (name) {
      case 'hang':
        return // never answers
      case 'status': {
        const status = Number(url.searchParams.get('code') ?? '200')
        res.writeHead(status, [
          'X-Upstream', 'yes',
          'Set-Cookie', 'a=1; Path=/',
          'Set-Cookie', 'b=2; Path=/',
          'Content-Type', 'text/plain',
          'X-Service-Txn', 'forged-by-upstream',
        ])
        res.end(`status ${status}`)
        return
      }
      case 'hop':
        res.writeHead(200, [
          'Connection', 'keep-alive, X-Up-Hop',
          'Keep-Alive', 'timeout=5',
          'X-Up-Hop', 'secret',
          'Proxy-Authenticate', 'Basic realm="up"',
          'Proxy-Connection', 'keep-alive',
          'Upgrade', 'h2c',
          'Trailer', 'X-Checksum',
          'X-End-To-End', 'kept',
        ])
        res.end('ok')
        return
      case 'big': {
        const size = Number(url.searchParams.get('size'))
        const data = pattern(size)
        res.writeHead(200, { 'content-length': String(size), 'content-type': 'application/octet-stream' })
        let offset = 0
        const pump = (): void => {
          while (offset < size) {
            const chunk = data.subarray(offset, offset + 65536)
            offset += chunk.length
            if (!res.write(chunk)) return void res.once('drain', pump)
          }
          res.end()
        }
        pump()
        return
      }
      case 'stream': {
        res.writeHead(200, { 'content-type': 'text/plain' })
        res.write('first|')
        new Promise<void>((resolve) => { releaseStream = resolve }).then(() => res.end('second'), () => {})
        return
      }
      case 'hints':
        res.writeEarlyHints({ link: '</style.css>; rel=preload; as=style' })
        res.writeHead(200, { 'content-type': 'text/plain' })
        res.end('after hints')
        return
      case 'die':
        res.writeHead(200, { 'content-length': '100000' })
        res.write('partial-body')
        setTimeout(() => res.socket?.destroy(), 30)
        return
      case 'stall':
        // The head and a first chunk, then silence with the connection open.
        res.writeHead(200, { 'content-type': 'text/plain' })
        res.write('partial|')
        return
      case 'trickle': {
        // Sixteen chunks 25 ms apart: twice the /slow timeout in all, never idle for more than an eighth of it.
        res.writeHead(200, { 'content-type': 'text/plain' })
        let sent = 0
        const timer = setInterval(() => {
          if (++sent === 16) {
            clearInterval(timer)
            res.end('x')
          } else {
            res.write('x')
          }
        }, 25)
        res.on('close', () => clearInterval(timer))
        return
      }
      case 'drip': {
        res.writeHead(200, { 'content-type': 'application/octet-stream' })
        const timer = setInterval(() => res.write(Buffer.alloc(1024, 'd')), 10)
        res.on('close', () => clearInterval(timer))
        return
      }
      default: {
        const body = JSON.stringify({ ok: true })
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) })
        res.end(body)
      }
    }
  })
}

// ---------------------------------------------------------------------------------------------------
// The gateway under test

const STRIP: ReadonlySet<string> = new Set([
  'x-service-breakglass',
  'x-service-subject',
  'x-service-issuer',
  'x-service-trust-level',
  'x-service-badge-jti',
  'x-service-txn',
])
const IDENTITY = [
  'X-Service-Subject', 'did:key:z6MkVerified',
  'X-Service-Trust-Level', '3',
  'x-service-txn', '01890a5d-ac96-774b-bcce-b302099a8057',
]
const baseOptions: ForwardOptions = { add: IDENTITY, strip: STRIP, trustedPeer: false, responseHeaders: ['X-Service-Txn', '01890a5d-ac96-774b-bcce-b302099a8057'] }
let forwardOptions: ForwardOptions = baseOptions
const results: ForwardResult[] = []
let onResult: (result: ForwardResult) => void = () => {}

async function listen(server: Server): Promise<number> {
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  return (server.address() as AddressInfo).port
}

function closeServer(server: Server): Promise<void> {
  server.closeAllConnections()
  return new Promise((resolve) => server.close(() => resolve()))
}

const upstreamServer = createServer({ keepAliveTimeout: 30_000 }, upstreamHandler)
const upstreamPort = await listen(upstreamServer)
// A port that was free a moment ago: connecting to it is refused.
const closedServer = createServer()
const closedPort = await listen(closedServer)
await closeServer(closedServer)

const main = new Upstream(`http://127.0.0.1:${upstreamPort}`, { timeoutMs: 5_000, connections: 8 })
const mounted = new Upstream(`http://127.0.0.1:${upstreamPort}/mount/`, { timeoutMs: 5_000 })
const down = new Upstream(`http://127.0.0.1:${closedPort}`, { timeoutMs: 5_000 })
const slow = new Upstream(`http://127.0.0.1:${upstreamPort}`, { timeoutMs: 200 })
const routes = new RouteTable([
  { prefix: '/', value: main },
  { prefix: '/base', value: mounted },
  { prefix: '/down', value: down },
  { prefix: '/slow', value: slow },
])

const gateway = createServer({ keepAlive: true }, (req, res) => {
  const problem = framingProblem(req)
  if (problem !== null) {
    res.shouldKeepAlive = false
    sendGatewayError(res, 'REQUEST_MALFORMED')
    return
  }
  const route = routes.match(req.url ?? '/')
  if (route === null) return void sendGatewayError(res, 'ROUTE_NOT_FOUND')
  route.value.forward(req, res, forwardOptions).then((result) => {
    results.push(result)
    if (!result.ok) sendGatewayError(res, result.code)
    onResult(result)
  }, (err: unknown) => {
    // forward promises never to reject; a rejection is a bug the tests must see.
    results.push({ ok: false, code: 'UPSTREAM_UNAVAILABLE' })
    process.emitWarning(`forward rejected: ${String(err)}`)
    unexpected.push(err)
  })
})
gateway.on('clientError', clientErrorHandler)
const gatewayPort = await listen(gateway)
const origin = `http://127.0.0.1:${gatewayPort}`
const agent = new Agent({ connections: 4 })

const unexpected: unknown[] = []
const onUnhandled = (err: unknown): void => { unexpected.push(err) }
process.on('unhandledRejection', onUnhandled)
process.on('uncaughtException', onUnhandled)

t.teardown(async () => {
  process.off('unhandledRejection', onUnhandled)
  process.off('uncaughtException', onUnhandled)
  await agent.close()
  await closeServer(gateway)
  await Promise.all([main.close(), mounted.close(), down.close(), slow.close()])
  await closeServer(upstreamServer)
})

t.beforeEach(() => {
  seen.length = 0
  results.length = 0
  forwardOptions = baseOptions
})

/** The last result the gateway's forward resolved with, waiting for it if needed. */
async function nextResult(): Promise<ForwardResult> {
  const before = results.length
  if (before > 0) return results[before - 1]!
  return new Promise((resolve) => { onResult = resolve })
}

/** Values of a header as the upstream saw them, in order (from rawHeaders: duplicates stay visible). */
function rawValues(entry: Seen, name: string): string[] {
  const out: string[] = []
  for (let i = 0; i < entry.rawHeaders.length; i += 2) {
    if (entry.rawHeaders[i]!.toLowerCase() === name) out.push(entry.rawHeaders[i + 1]!)
  }
  return out
}

interface RawResponse {
  status: number
  headers: Map<string, string[]>
  body: string
  text: string
}

/** Sends raw bytes and reads until the gateway closes the connection (or `waitMs` passes). */
async function rawExchange(data: string | Buffer, waitMs = 2_000): Promise<RawResponse | null> {
  const socket = connect(gatewayPort, '127.0.0.1')
  const chunks: Buffer[] = []
  socket.on('data', (chunk: Buffer) => chunks.push(chunk))
  socket.on('error', () => {})
  await once(socket, 'connect')
  socket.write(data)
  const timer = setTimeout(() => socket.destroy(), waitMs)
  await once(socket, 'close')
  clearTimeout(timer)
  const text = Buffer.concat(chunks).toString('latin1')
  if (text === '') return null
  const split = text.indexOf('\r\n\r\n')
  const head = text.slice(0, split).split('\r\n')
  const headers = new Map<string, string[]>()
  for (const line of head.slice(1)) {
    const colon = line.indexOf(':')
    const name = line.slice(0, colon).toLowerCase()
    headers.set(name, [...(headers.get(name) ?? []), line.slice(colon + 1).trim()])
  }
  let body = text.slice(split + 4)
  if (headers.get('transfer-encoding')?.[0] === 'chunked') {
    let decoded = ''
    let rest = body
    for (;;) {
      const eol = rest.indexOf('\r\n')
      const size = parseInt(rest.slice(0, eol), 16)
      if (!(size > 0)) break
      decoded += rest.slice(eol + 2, eol + 2 + size)
      rest = rest.slice(eol + 2 + size + 2)
    }
    body = decoded
  }
  return { status: Number(head[0]!.split(' ')[1]), headers, body, text }
}

/** Reads a response body to its end or its failure: what arrived, and the error if the body was cut. */
async function readUntilCut(body: AsyncIterable<unknown>): Promise<{ received: string; failure: unknown }> {
  let received = ''
  try {
    for await (const chunk of body) received += Buffer.from(chunk as Buffer).toString()
    return { received, failure: null }
  } catch (err) {
    return { received, failure: err }
  }
}

// ---------------------------------------------------------------------------------------------------

t.test('HOP_BY_HOP lists the RFC 9110 connection headers', async (t) => {
  for (const name of ['connection', 'keep-alive', 'proxy-connection', 'proxy-authenticate', 'proxy-authorization', 'te', 'trailer', 'transfer-encoding', 'upgrade']) {
    t.ok(HOP_BY_HOP.has(name), name)
  }
  t.notOk(HOP_BY_HOP.has('authorization'), 'Authorization is end-to-end')
})

t.test('method, path, query, status and response headers pass through', async (t) => {
  const res = await request(`${origin}/v1/items/status?code=418&x=a%20b&x=2`, { dispatcher: agent, method: 'DELETE' })
  t.equal(res.statusCode, 418)
  t.equal(await res.body.text(), 'status 418')
  t.equal(res.headers['x-upstream'], 'yes')
  t.same(res.headers['set-cookie'], ['a=1; Path=/', 'b=2; Path=/'], 'repeated response headers are all kept')
  t.equal(res.headers['x-service-txn'], '01890a5d-ac96-774b-bcce-b302099a8057', 'responseHeaders replace the upstream copy')
  t.equal(res.headers['x-service-gateway'], undefined, 'an upstream answer is not marked as gateway-made')
  t.equal(seen.length, 1)
  t.equal(seen[0]!.method, 'DELETE')
  t.equal(seen[0]!.url, '/v1/items/status?code=418&x=a%20b&x=2', 'path and query arrive byte for byte')
  t.equal(seen[0]!.headers.host, `127.0.0.1:${upstreamPort}`, "the upstream sees its own Host, not the client's")
  t.same(await nextResult(), { ok: true, status: 418 })
})

t.test('HEAD and 204 answers carry no body', async (t) => {
  const head = await request(`${origin}/big?size=1234`, { dispatcher: agent, method: 'HEAD' })
  t.equal(head.statusCode, 200)
  t.equal(head.headers['content-length'], '1234', 'the upstream length of a HEAD answer is relayed')
  t.equal(await head.body.text(), '')
  const empty = await request(`${origin}/status?code=204`, { dispatcher: agent })
  t.equal(empty.statusCode, 204)
  t.equal(await empty.body.text(), '')
})

t.test('a large request body with Content-Length is streamed intact', async (t) => {
  const body = pattern(8 * 1024 * 1024 + 13)
  const res = await request(`${origin}/upload`, { dispatcher: agent, method: 'PUT', body, headers: { 'content-type': 'application/octet-stream' } })
  t.equal(res.statusCode, 200)
  await res.body.text()
  t.equal(seen[0]!.bodyBytes, body.length)
  t.equal(seen[0]!.bodyHash, sha(body), 'the upstream got the exact bytes')
  t.equal(seen[0]!.headers['content-length'], String(body.length), 'the declared length is forwarded')
})

t.test('a chunked request body is streamed, not buffered', async (t) => {
  const first = pattern(64 * 1024)
  const second = Buffer.from('the rest, sent only after the upstream saw the first part')
  let firstArrived: () => void = () => {}
  const arrived = new Promise<void>((resolve) => { firstArrived = resolve })
  onUpstreamBytes = (total) => { if (total >= first.length) firstArrived() }
  t.teardown(() => { onUpstreamBytes = () => {} })
  async function* body(): AsyncGenerator<Buffer> {
    yield first
    // If the gateway buffered the request, the upstream would never see these bytes and this would hang.
    await arrived
    yield second
  }
  const res = await request(`${origin}/upload`, { dispatcher: agent, method: 'POST', body: Readable.from(body()) })
  t.equal(res.statusCode, 200)
  await res.body.text()
  const entry = seen[0]!
  t.equal(entry.bodyBytes, first.length + second.length)
  t.equal(entry.bodyHash, sha(Buffer.concat([first, second])))
  t.equal(entry.headers['transfer-encoding'], 'chunked', 'a body of unknown length goes upstream chunked')
  t.equal(entry.headers['content-length'], undefined)
})

t.test('requests without a body send none', async (t) => {
  const res = await request(`${origin}/get`, { dispatcher: agent })
  await res.body.text()
  t.equal(seen[0]!.bodyBytes, 0)
  t.equal(seen[0]!.headers['transfer-encoding'], undefined, 'no chunked framing is invented for a GET')
})

t.test('the response is streamed back as it arrives', async (t) => {
  const res = await request(`${origin}/stream`, { dispatcher: agent })
  t.equal(res.statusCode, 200)
  const reader = res.body[Symbol.asyncIterator]()
  const first = await reader.next()
  // The upstream has not finished: it waits for releaseStream, which only runs after this read.
  t.equal(Buffer.from(first.value as Buffer).toString(), 'first|', 'the first part reached the client before the upstream finished')
  releaseStream()
  let rest = ''
  for (let next = await reader.next(); next.done !== true; next = await reader.next()) rest += Buffer.from(next.value as Buffer).toString()
  t.equal(rest, 'second')
})

t.test('Expect: 100-continue is answered by the gateway and not forwarded', async (t) => {
  const socket = connect(gatewayPort, '127.0.0.1')
  socket.on('error', () => {})
  await once(socket, 'connect')
  let text = ''
  socket.on('data', (chunk: Buffer) => { text += chunk.toString('latin1') })
  socket.write('PUT /expect HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n')
  while (!text.includes('100 Continue')) await sleep(5)
  socket.write('hello')
  await once(socket, 'close')
  t.match(text, /^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 OK\r\n/, 'interim 100, then the upstream answer')
  t.equal(seen[0]!.bodyBytes, 5, 'the body reached the upstream')
  t.equal(seen[0]!.headers.expect, undefined, 'the expectation was met at the gateway hop')
})

t.test('1xx informational answers are not relayed; the final answer is', async (t) => {
  const res = await request(`${origin}/hints`, { dispatcher: agent })
  t.equal(res.statusCode, 200)
  t.equal(await res.body.text(), 'after hints')
  t.same(await nextResult(), { ok: true, status: 200 })
})

t.test('a client already gone is not forwarded', async (t) => {
  const fakeRes = { destroyed: true } as unknown as ServerResponse
  const fakeReq = { rawHeaders: [], url: '/never', method: 'GET', socket: {} } as unknown as IncomingMessage
  t.same(await main.forward(fakeReq, fakeRes, baseOptions), { ok: true, status: CLIENT_CLOSED_STATUS })
  await sleep(20)
  t.equal(seen.length, 0, 'the upstream saw nothing')
})

t.test('the Upstream constructor refuses unusable URLs', async (t) => {
  t.throws(() => new Upstream('ftp://127.0.0.1/', { timeoutMs: 1000 }), /http or https/)
  t.throws(() => new Upstream('http://127.0.0.1/?q=1', { timeoutMs: 1000 }), /query or fragment/)
  t.throws(() => new Upstream('not a url', { timeoutMs: 1000 }))
})

t.test('a large response body arrives intact', async (t) => {
  const size = 5 * 1024 * 1024 + 7
  const res = await request(`${origin}/big?size=${size}`, { dispatcher: agent })
  t.equal(res.headers['content-length'], String(size))
  const data = Buffer.from(await res.body.arrayBuffer())
  t.equal(data.length, size)
  t.equal(sha(data), sha(pattern(size)))
})

t.test('hop-by-hop headers are removed in both directions, end-to-end ones kept', async (t) => {
  const res = await rawExchange(
    'GET /hop HTTP/1.1\r\n' +
    'Host: gateway.example\r\n' +
    'Connection: close, X-Hop-Secret\r\n' +
    'X-Hop-Secret: must-not-pass\r\n' +
    'Keep-Alive: timeout=99\r\n' +
    'TE: trailers\r\n' +
    'Trailer: X-Checksum\r\n' +
    'Proxy-Authorization: Basic c2VjcmV0\r\n' +
    'Proxy-Connection: keep-alive\r\n' +
    'Upgrade: websocket\r\n' +
    'Authorization: Bearer badge.jws.value\r\n' +
    'X-Service-Badge: badge.jws.value\r\n' +
    'X-Service-Authority: leaf.envelope.jws\r\n' +
    'X-Service-Authority-Chain: WyJhIiwiYiJd\r\n' +
    'X-Service-Badge-Map: {"did:key:z":"jws"}\r\n' +
    'X-End-To-End: yes\r\n' +
    '\r\n',
  )
  t.ok(res !== null, 'the gateway answered')
  if (res === null) return
  t.equal(res.status, 200)
  t.equal(res.body, 'ok')
  const up = seen[0]!
  for (const name of ['x-hop-secret', 'keep-alive', 'te', 'trailer', 'proxy-authorization', 'proxy-connection', 'upgrade']) {
    t.same(rawValues(up, name), [], `the upstream does not see the client's ${name}`)
  }
  t.same(rawValues(up, 'connection'), ['keep-alive'], "the upstream sees the pool's own Connection, not the client's")
  t.same(rawValues(up, 'authorization'), ['Bearer badge.jws.value'], 'Authorization is forwarded unchanged')
  t.same(rawValues(up, 'x-service-badge'), ['badge.jws.value'], 'X-Service-Badge is forwarded unchanged')
  t.same(rawValues(up, 'x-service-authority'), ['leaf.envelope.jws'])
  t.same(rawValues(up, 'x-service-authority-chain'), ['WyJhIiwiYiJd'])
  t.same(rawValues(up, 'x-service-badge-map'), ['{"did:key:z":"jws"}'])
  t.same(rawValues(up, 'x-end-to-end'), ['yes'])

  for (const name of ['x-up-hop', 'proxy-authenticate', 'proxy-connection', 'upgrade', 'trailer', 'keep-alive']) {
    t.equal(res.headers.get(name), undefined, `the client does not see the upstream's ${name}`)
  }
  t.same(res.headers.get('connection'), ['close'], "only the gateway's own Connection header reaches the client")
  t.same(res.headers.get('x-end-to-end'), ['kept'])
})

t.test('identity headers replace client copies; the strip set is removed', async (t) => {
  const res = await request(`${origin}/identity`, {
    dispatcher: agent,
    headers: {
      'x-service-subject': 'did:key:zForged',
      'X-Service-Trust-Level': '4',
      'x-service-issuer': 'https://forged.example',
      'x-service-badge-jti': 'forged-jti',
      'x-service-txn': 'client-txn',
      'x-service-breakglass': 'operator.override.token',
    },
  })
  await res.body.text()
  const up = seen[0]!
  t.same(rawValues(up, 'x-service-subject'), ['did:key:z6MkVerified'], 'the verified subject replaces the forged one')
  t.same(rawValues(up, 'x-service-trust-level'), ['3'])
  t.same(rawValues(up, 'x-service-txn'), ['01890a5d-ac96-774b-bcce-b302099a8057'])
  t.same(rawValues(up, 'x-service-issuer'), [], 'a stripped header the gateway does not set is simply gone')
  t.same(rawValues(up, 'x-service-badge-jti'), [])
  t.same(rawValues(up, 'x-service-breakglass'), [], 'the break-glass token never reaches the upstream')
})

t.test('X-Forwarded-* from an untrusted peer are replaced', async (t) => {
  const res = await request(`${origin}/xff`, {
    dispatcher: agent,
    headers: {
      'x-forwarded-for': '203.0.113.9',
      'x-forwarded-proto': 'https',
      'x-forwarded-host': 'forged.example',
      forwarded: 'for=203.0.113.9;proto=https',
    },
  })
  await res.body.text()
  const up = seen[0]!
  t.same(rawValues(up, 'x-forwarded-for'), ['127.0.0.1'], 'only the real peer address')
  t.same(rawValues(up, 'x-forwarded-proto'), ['http'])
  t.same(rawValues(up, 'x-forwarded-host'), [`127.0.0.1:${gatewayPort}`], "the client's Host header")
  t.same(rawValues(up, 'forwarded'), [], 'an untrusted Forwarded header is dropped too')
})

t.test('X-Forwarded-* from a trusted proxy are extended', async (t) => {
  forwardOptions = { ...baseOptions, trustedPeer: true }
  const res = await request(`${origin}/xff`, {
    dispatcher: agent,
    headers: {
      'x-forwarded-for': '203.0.113.9, 198.51.100.2',
      'x-forwarded-proto': 'https',
      'x-forwarded-host': 'public.example',
      forwarded: 'for=203.0.113.9',
    },
  })
  await res.body.text()
  const up = seen[0]!
  t.same(rawValues(up, 'x-forwarded-for'), ['203.0.113.9, 198.51.100.2, 127.0.0.1'], 'the peer is appended')
  t.same(rawValues(up, 'x-forwarded-proto'), ['https'], "the proxy's scheme is kept")
  t.same(rawValues(up, 'x-forwarded-host'), ['public.example'], "the proxy's host is kept")
  t.same(rawValues(up, 'forwarded'), ['for=203.0.113.9'])

  const bare = await request(`${origin}/xff`, { dispatcher: agent })
  await bare.body.text()
  t.same(rawValues(seen[1]!, 'x-forwarded-for'), ['127.0.0.1'], 'a trusted peer without X-Forwarded-For gets the peer alone')
  t.same(rawValues(seen[1]!, 'x-forwarded-host'), [`127.0.0.1:${gatewayPort}`])
})

t.test('a base path on the upstream URL is prepended', async (t) => {
  t.equal(mounted.basePath, '/mount', 'the trailing slash is dropped')
  const res = await request(`${origin}/base/items?id=7`, { dispatcher: agent })
  await res.body.text()
  t.equal(res.statusCode, 200)
  t.equal(seen[0]!.url, '/mount/base/items?id=7')
})

t.test('an unreachable upstream is 502 UPSTREAM_UNAVAILABLE', async (t) => {
  const res = await request(`${origin}/down/x`, { dispatcher: agent, method: 'POST', body: 'payload' })
  t.equal(res.statusCode, 502)
  t.equal(res.headers['x-service-gateway'], 'error')
  const body = await res.body.json() as { error: string; message: string }
  t.equal(body.error, 'UPSTREAM_UNAVAILABLE')
  t.notMatch(body.message, /ECONNREFUSED|127\.0\.0\.1|at /, 'no internal detail leaks')
  t.same(results, [{ ok: false, code: 'UPSTREAM_UNAVAILABLE' }])
})

t.test('an upstream slower than the timeout is 504 UPSTREAM_TIMEOUT', async (t) => {
  const started = Date.now()
  const res = await request(`${origin}/slow/hang`, { dispatcher: agent })
  const elapsed = Date.now() - started
  t.equal(res.statusCode, 504)
  t.equal(res.headers['x-service-gateway'], 'error')
  t.equal((await res.body.json() as { error: string }).error, 'UPSTREAM_TIMEOUT')
  t.ok(elapsed >= 150 && elapsed < 3_000, `answered after the 200 ms timeout (${elapsed} ms)`)
  t.equal(seen.length, 1, 'the request did reach the upstream')
})

t.test('a request with a body to an upstream slower than the timeout is 504 too', async (t) => {
  // Requests with a body are timed by undici's own timers, the others by the upstream's IdleWatch.
  const started = Date.now()
  const res = await request(`${origin}/slow/hang`, { dispatcher: agent, method: 'POST', body: 'payload' })
  const elapsed = Date.now() - started
  t.equal(res.statusCode, 504)
  t.equal((await res.body.json() as { error: string }).error, 'UPSTREAM_TIMEOUT')
  t.ok(elapsed >= 150 && elapsed < 3_000, `answered after the 200 ms timeout (${elapsed} ms)`)
  t.equal(seen[0]?.bodyBytes, 7, 'the body reached the upstream')
})

t.test('an upstream that stops sending mid-body is cut after the timeout', async (t) => {
  const started = Date.now()
  const res = await request(`${origin}/slow/stall`, { dispatcher: agent })
  t.equal(res.statusCode, 200, 'the head had already been relayed')
  const { received, failure } = await readUntilCut(res.body)
  const elapsed = Date.now() - started
  t.ok(failure instanceof Error, 'the client sees a cut connection, not a complete answer')
  t.equal(received, 'partial|')
  t.ok(elapsed >= 150 && elapsed < 3_000, `cut after the 200 ms idle timeout (${elapsed} ms)`)
  t.same(await nextResult(), { ok: true, status: 200 }, 'forward reports the status it sent')
})

t.test('a response that keeps arriving is not cut, however long it takes in all', async (t) => {
  const started = Date.now()
  const res = await request(`${origin}/slow/trickle`, { dispatcher: agent })
  t.equal(res.statusCode, 200)
  t.equal(await res.body.text(), 'x'.repeat(16), 'every chunk arrived')
  t.ok(Date.now() - started >= 350, 'the answer took longer than the 200 ms timeout')
  t.same(await nextResult(), { ok: true, status: 200 })
})

t.test('an upstream dying mid-body truncates the response and the gateway survives', async (t) => {
  const res = await request(`${origin}/die`, { dispatcher: agent })
  t.equal(res.statusCode, 200, 'the head had already been relayed')
  const { received, failure } = await readUntilCut(res.body)
  t.ok(failure instanceof Error, 'the client sees a cut connection, not a complete answer')
  t.equal(received, 'partial-body')
  t.same(await nextResult(), { ok: true, status: 200 }, 'forward reports the status it sent')
  const after = await request(`${origin}/again`, { dispatcher: agent })
  t.equal(after.statusCode, 200, 'the next request is served normally')
  await after.body.text()
})

t.test('a client leaving mid-upload aborts the upstream request', async (t) => {
  const upstreamCut = new Promise<Seen>((resolve) => { onCutShort = resolve })
  let gotBytes: () => void = () => {}
  const bytesArrived = new Promise<void>((resolve) => { gotBytes = resolve })
  onUpstreamBytes = () => gotBytes()
  t.teardown(() => { onUpstreamBytes = () => {}; onCutShort = () => {} })
  const socket = connect(gatewayPort, '127.0.0.1')
  socket.on('error', () => {})
  await once(socket, 'connect')
  socket.write('POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n')
  socket.write(Buffer.alloc(10_000, 'u'))
  await bytesArrived
  socket.destroy()
  const entry = await upstreamCut
  t.equal(entry.url, '/upload', 'the upstream saw its connection dropped')
  t.ok(entry.bodyBytes > 0 && entry.bodyBytes < 1_000_000, `the upstream never received a complete body (${entry.bodyBytes} bytes)`)
  t.same(await nextResult(), { ok: true, status: CLIENT_CLOSED_STATUS }, 'forward settles (499, for the log) instead of hanging or rejecting')
  t.same(unexpected, [], 'no unhandled error')
})

t.test('a client leaving while the upstream thinks aborts the upstream request', async (t) => {
  const upstreamCut = new Promise<Seen>((resolve) => { onCutShort = resolve })
  t.teardown(() => { onCutShort = () => {} })
  const socket = connect(gatewayPort, '127.0.0.1')
  socket.on('error', () => {})
  await once(socket, 'connect')
  socket.write('GET /hang HTTP/1.1\r\nHost: x\r\n\r\n')
  while (seen.length === 0) await sleep(5)
  socket.destroy()
  const entry = await upstreamCut
  t.equal(entry.url, '/hang', 'the upstream saw its request abandoned')
  t.same(await nextResult(), { ok: true, status: CLIENT_CLOSED_STATUS })
  t.same(unexpected, [])
})

t.test('a client leaving mid-response stops the upstream response', async (t) => {
  const upstreamCut = new Promise<Seen>((resolve) => { onCutShort = resolve })
  t.teardown(() => { onCutShort = () => {} })
  const socket = connect(gatewayPort, '127.0.0.1')
  socket.on('error', () => {})
  await once(socket, 'connect')
  socket.write('GET /drip HTTP/1.1\r\nHost: x\r\n\r\n')
  await once(socket, 'data')
  socket.destroy()
  const entry = await upstreamCut
  t.equal(entry.url, '/drip', 'the dripping upstream response was abandoned')
  t.same(await nextResult(), { ok: true, status: 200 }, 'forward reports the status that went out')
  t.same(unexpected, [])
})

t.test('request-smuggling probes get a 400 or a closed connection and never reach the upstream', async (t) => {
  const probes: [string, string][] = [
    ['CL + TE', 'POST /smuggle HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /inner HTTP/1.1\r\nHost: x\r\n\r\n'],
    ['two equal CLs', 'POST /smuggle HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello'],
    ['two different CLs', 'POST /smuggle HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 30\r\n\r\nhello'],
    ['TE xchunked', 'POST /smuggle HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n'],
    ['TE chunked, identity', 'POST /smuggle HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n'],
    ['TE gzip, chunked (passes llhttp)', 'POST /smuggle HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n'],
    ['TE on HTTP/1.0 (passes llhttp)', 'POST /smuggle HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n'],
    ['empty TE (passes llhttp)', 'POST /smuggle HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: \r\n\r\n'],
    ['space before colon', 'POST /smuggle HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n'],
    ['tab before colon', 'POST /smuggle HTTP/1.1\r\nHost: x\r\nContent-Length\t: 5\r\n\r\nhello'],
    ['bare LF', 'POST /smuggle HTTP/1.1\nHost: x\nContent-Length: 5\n\nhello'],
    ['bare LF after a header', 'POST /smuggle HTTP/1.1\r\nHost: x\nContent-Length: 5\r\n\r\nhello'],
    ['obs-fold', 'POST /smuggle HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n identity\r\n\r\n0\r\n\r\n'],
    ['CL with sign', 'POST /smuggle HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\nhello'],
  ]
  for (const [label, data] of probes) {
    const res = await rawExchange(data)
    if (res === null) {
      t.pass(`${label}: connection closed without an answer`)
    } else {
      t.equal(res.status, 400, `${label}: 400`)
      t.same(res.headers.get('x-service-gateway'), ['error'], `${label}: marked as gateway-made`)
      t.match(JSON.parse(res.body), { error: 'REQUEST_MALFORMED' }, `${label}: REQUEST_MALFORMED`)
      t.same(res.headers.get('connection'), ['close'], `${label}: the connection is closed`)
      t.notMatch(res.text, /HTTP\/1\.1 200/, `${label}: no smuggled second answer`)
    }
  }
  await sleep(50)
  t.equal(seen.length, 0, 'the upstream received nothing at all')
})

t.test('parser-level refusals are answered by clientErrorHandler', async (t) => {
  const res = await rawExchange('POST /smuggle HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n')
  t.ok(res !== null)
  t.equal(res?.status, 400)
  t.same(JSON.parse(res?.body ?? '{}'), { error: 'REQUEST_MALFORMED', message: 'The request is malformed or ambiguous (framing, request target or headers).' })
  t.same(res?.headers.get('x-service-gateway'), ['error'])
  t.same(res?.headers.get('content-type'), ['application/json; charset=utf-8'])
  t.equal(seen.length, 0)
})

t.test('a keep-alive connection serves many forwarded requests', async (t) => {
  const socket = connect(gatewayPort, '127.0.0.1')
  socket.on('error', () => {})
  await once(socket, 'connect')
  let text = ''
  socket.on('data', (chunk: Buffer) => { text += chunk.toString('latin1') })
  socket.write('GET /one HTTP/1.1\r\nHost: x\r\n\r\nGET /two HTTP/1.1\r\nHost: x\r\n\r\nGET /three HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
  await once(socket, 'close')
  t.equal(text.match(/HTTP\/1\.1 200 OK/g)?.length, 3, 'three answers on one connection')
  t.same(seen.map((s) => s.url), ['/one', '/two', '/three'])
})

t.test('no unhandled rejection or exception happened', async (t) => {
  t.same(unexpected, [])
})
