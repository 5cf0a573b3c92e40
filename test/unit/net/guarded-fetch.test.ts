import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import {
  GuardedFetchError,
  checkAgentCardReachability,
  closeGuardedFetch,
  guardedFetch,
  isPublicUnicastAddress,
  type GuardedFetchErrorCode,
} from '../../../src/net/guarded-fetch.js'

const LOCAL = ['127.0.0.1']
const SECRET = 'SECRET-BODY-CONTENT'
const MB = 1024 * 1024

let connections = 0
const routes: Record<string, (req: IncomingMessage, res: ServerResponse) => void> = {
  '/ok': (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json', 'x-test': 'yes' })
    res.end('{"hello":"world"}')
  },
  '/missing': (_req, res) => {
    res.writeHead(404, { 'content-type': 'text/plain' })
    res.end(SECRET)
  },
  '/redirect': (_req, res) => {
    res.writeHead(302, { location: 'http://127.0.0.1:1/elsewhere' })
    res.end(SECRET)
  },
  '/big': (_req, res) => {
    res.writeHead(200, { 'content-length': String(MB) })
    res.end(Buffer.alloc(MB, SECRET))
  },
  '/big-chunked': (_req, res) => {
    // no content-length: the cap must hold while streaming, not only on the declared size
    res.writeHead(200, { 'content-type': 'application/octet-stream' })
    const chunk = Buffer.alloc(16 * 1024, SECRET)
    let sent = 0
    const pump = (): void => {
      while (sent < MB) {
        sent += chunk.length
        if (!res.write(chunk)) return void res.once('drain', pump)
      }
      res.end()
    }
    res.on('error', () => {})
    pump()
  },
  '/exact': (_req, res) => {
    res.writeHead(200)
    res.end(Buffer.alloc(1000, 'a'))
  },
  '/hang': () => {
    // never answer
  },
  '/stall-body': (_req, res) => {
    res.writeHead(200, { 'content-length': '100' })
    res.write('partial')
  },
}

function handler(req: IncomingMessage, res: ServerResponse): void {
  const route = routes[new URL(req.url ?? '/', 'http://x').pathname]
  if (route) route(req, res)
  else {
    res.writeHead(500)
    res.end()
  }
}

async function listen(host?: string): Promise<{ server: Server; port: number }> {
  const server = createServer(handler)
  server.on('connection', () => connections++)
  await new Promise<void>((resolve) => (host === undefined ? server.listen(0, resolve) : server.listen(0, host, resolve)))
  return { server, port: (server.address() as AddressInfo).port }
}

async function close(server: Server): Promise<void> {
  server.closeAllConnections()
  await new Promise<void>((resolve) => server.close(() => resolve()))
}

type Asserts = Pick<typeof t, 'fail' | 'type' | 'equal'>

async function expectCode(t: Asserts, promise: Promise<unknown>, code: GuardedFetchErrorCode, label?: string): Promise<GuardedFetchError | undefined> {
  try {
    await promise
    t.fail(`${label ?? code}: expected ${code}, got a response`)
    return undefined
  } catch (err) {
    t.type(err, GuardedFetchError, label ?? code)
    t.equal((err as GuardedFetchError).code, code, label ?? code)
    return err as GuardedFetchError
  }
}


const main = await listen('127.0.0.1')
const base = `http://127.0.0.1:${main.port}`

t.teardown(async () => {
  await closeGuardedFetch()
  await close(main.server)
})

t.test('address classification allows only public unicast', async (t) => {
  for (const ok of ['8.8.8.8', '1.1.1.1', '93.184.215.14', '2606:4700:4700::1111', '2a00:1450:4001:81b::200e', '::ffff:8.8.8.8']) {
    t.equal(isPublicUnicastAddress(ok), true, ok)
  }
  for (const bad of [
    '127.0.0.1', '127.8.9.10', '10.1.2.3', '172.16.0.1', '192.168.1.1', '169.254.169.254', '0.0.0.0', '255.255.255.255',
    '224.0.0.1', '100.64.0.1', '192.0.2.1', '240.0.0.1', '::1', '::', 'fe80::1', 'fc00::1', 'fd12:3456::1', 'ff02::1',
    '::ffff:127.0.0.1', '::ffff:10.0.0.1', '::ffff:169.254.169.254', '2002:7f00:1::1', '2001:0:4136:e378::1', '64:ff9b::a00:1',
    '2001:db8::1', 'fe80::1%eth0', 'not-an-ip', '',
  ]) {
    t.equal(isPublicUnicastAddress(bad), false, bad)
  }
})

t.test('private and loopback destinations are refused without connecting', async (t) => {
  const before = connections
  const started = Date.now()
  for (const url of [
    'https://127.0.0.1/',
    `https://127.0.0.1:${main.port}/ok`,
    'https://[::1]/',
    'https://10.0.0.1/',
    'https://169.254.169.254/latest/meta-data/',
    'https://[::ffff:127.0.0.1]/',
    'https://0x7f.1/', // WHATWG URL turns this into 127.0.0.1
    'https://2130706433/',
    'https://[fd00::1]/',
    'https://100.64.0.1/',
  ]) {
    await expectCode(t, guardedFetch(url, { timeoutMs: 5000 }), 'ADDRESS_NOT_ALLOWED', url)
  }
  t.ok(Date.now() - started < 2000, 'refusals are immediate, not time-outs')
  t.equal(connections, before, 'the local server saw no connection')
})

t.test('a name resolving to loopback is refused at connect time', async (t) => {
  const before = connections
  const started = Date.now()
  const err = await expectCode(t, guardedFetch(`https://localhost:${main.port}/ok`, { timeoutMs: 5000 }), 'ADDRESS_NOT_ALLOWED')
  t.match(err?.message, /localhost/)
  t.ok(Date.now() - started < 2000)
  t.equal(connections, before)
  // allowing one host does not open others
  await expectCode(t, guardedFetch('https://localhost/', { allowHosts: LOCAL }), 'ADDRESS_NOT_ALLOWED')
  await expectCode(t, guardedFetch('https://10.0.0.1/', { allowHosts: LOCAL }), 'ADDRESS_NOT_ALLOWED')
})

t.test('scheme and URL rules', async (t) => {
  await expectCode(t, guardedFetch('http://example.com/'), 'SCHEME_NOT_ALLOWED')
  await expectCode(t, guardedFetch(`${base}/ok`), 'SCHEME_NOT_ALLOWED', 'http to an unlisted host')
  await expectCode(t, guardedFetch(`http://localhost:${main.port}/ok`, { allowHosts: LOCAL }), 'SCHEME_NOT_ALLOWED', 'http only for the listed host')
  await expectCode(t, guardedFetch('ftp://example.com/x'), 'SCHEME_NOT_ALLOWED')
  await expectCode(t, guardedFetch('file:///etc/passwd'), 'SCHEME_NOT_ALLOWED')
  await expectCode(t, guardedFetch('not a url'), 'URL_INVALID')
  await expectCode(t, guardedFetch('https://user:pass@example.com/'), 'URL_INVALID')
  await expectCode(t, guardedFetch('https://user@example.com/'), 'URL_INVALID')
  await expectCode(t, guardedFetch(`http://user:pass@127.0.0.1:${main.port}/ok`, { allowHosts: LOCAL }), 'URL_INVALID')
})

t.test('an allowed local server is fetched', async (t) => {
  const res = await guardedFetch(`${base}/ok?x=1`, { allowHosts: LOCAL, headers: { accept: 'application/json' } })
  t.equal(res.status, 200)
  t.equal(res.body.toString(), '{"hello":"world"}')
  t.equal(res.headers['x-test'], 'yes')
  t.equal(res.headers['content-type'], 'application/json')
  t.equal(res.url, `${base}/ok?x=1`)

  const head = await guardedFetch(`${base}/ok`, { allowHosts: LOCAL, method: 'HEAD' })
  t.equal(head.status, 200)
  t.equal(head.body.length, 0)

  const missing = await guardedFetch(`${base}/missing`, { allowHosts: LOCAL })
  t.equal(missing.status, 404, 'non-2xx answers are responses, not errors')
})

t.test('connections are pooled per configuration', async (t) => {
  const { server, port } = await listen('127.0.0.1')
  t.teardown(() => close(server))
  let seen = 0
  server.on('connection', () => seen++)
  for (let i = 0; i < 6; i++) {
    const res = await guardedFetch(`http://127.0.0.1:${port}/ok`, { allowHosts: LOCAL })
    t.equal(res.status, 200)
  }
  // a fresh Agent per call would open one connection per request; the shared pool reuses kept-alive
  // sockets (undici may open a second one while the first request is still being marked complete)
  t.ok(seen >= 1 && seen <= 2, `six sequential requests used ${seen} connection(s)`)
})

t.test('an allowed host name goes through the guarded lookup', async (t) => {
  const { server, port } = await listen()
  t.teardown(() => close(server))
  const res = await guardedFetch(`http://localhost:${port}/ok`, { allowHosts: ['LOCALHOST'] })
  t.equal(res.status, 200)
})

t.test('redirects are not followed', async (t) => {
  const err = await expectCode(t, guardedFetch(`${base}/redirect`, { allowHosts: LOCAL }), 'REDIRECT_NOT_FOLLOWED')
  t.match(err?.message, /302/)
  t.notMatch(err?.message, new RegExp(SECRET))
  const reach = await checkAgentCardReachability(`${base}/redirect`, { allowHosts: LOCAL })
  t.match(reach, { reachable: false, error: 'REDIRECT_NOT_FOLLOWED' })
})

t.test('bodies are capped', async (t) => {
  for (const path of ['/big', '/big-chunked']) {
    const started = Date.now()
    const err = await expectCode(t, guardedFetch(`${base}${path}`, { allowHosts: LOCAL, timeoutMs: 5000 }), 'BODY_TOO_LARGE', path)
    t.notMatch(err?.message, new RegExp(SECRET))
    t.ok(Date.now() - started < 4000, `${path} is cut off, not read to the end`)
  }
  await expectCode(t, guardedFetch(`${base}/exact`, { allowHosts: LOCAL, maxBodyBytes: 999 }), 'BODY_TOO_LARGE', 'one byte over')
  const exact = await guardedFetch(`${base}/exact`, { allowHosts: LOCAL, maxBodyBytes: 1000 })
  t.equal(exact.body.length, 1000, 'a body of exactly the limit is accepted')
  // the pool still works after aborted responses
  t.equal((await guardedFetch(`${base}/ok`, { allowHosts: LOCAL })).status, 200)
})

t.test('time-outs', async (t) => {
  for (const path of ['/hang', '/stall-body']) {
    const started = Date.now()
    await expectCode(t, guardedFetch(`${base}${path}`, { allowHosts: LOCAL, timeoutMs: 300 }), 'TIMEOUT', path)
    const elapsed = Date.now() - started
    t.ok(elapsed >= 250 && elapsed < 2000, `${path} gave up after ~300 ms (${elapsed} ms)`)
  }
})

t.test('connection failures', async (t) => {
  const { server, port } = await listen('127.0.0.1')
  await close(server)
  const err = await expectCode(t, guardedFetch(`http://127.0.0.1:${port}/`, { allowHosts: LOCAL }), 'CONNECT_FAILED')
  t.match(err?.message, /ECONNREFUSED/)
})

t.test('checkAgentCardReachability', async (t) => {
  const ok = await checkAgentCardReachability(`${base}/ok`, { allowHosts: LOCAL })
  t.match(ok, { reachable: true, status: 200 })
  t.equal(ok.error, undefined)
  t.type(ok.elapsedMs, 'number')
  t.ok(ok.elapsedMs >= 0)

  const missing = await checkAgentCardReachability(`${base}/missing`, { allowHosts: LOCAL })
  t.match(missing, { reachable: false, status: 404 })
  t.notMatch(missing.message ?? '', new RegExp(SECRET))

  t.match(await checkAgentCardReachability('https://127.0.0.1/'), { reachable: false, error: 'ADDRESS_NOT_ALLOWED' })
  t.match(await checkAgentCardReachability(`${base}/ok`), { reachable: false, error: 'SCHEME_NOT_ALLOWED' })
  const slow = await checkAgentCardReachability(`${base}/hang`, { allowHosts: LOCAL, timeoutMs: 300 })
  t.match(slow, { reachable: false, error: 'TIMEOUT' })
  t.ok(slow.elapsedMs >= 250 && slow.elapsedMs < 2000)
})
