/**
 * The console's session cookie never leaves the admin plane through the gateway (docs/console.md, "The
 * cookie never leaves"): a browser that signed in to the console sends `agent_trust_console` to the gateway
 * too when both share a host, and no upstream receives it, on an HTTP, MCP or A2A route or in the anonymous
 * public card fetch; no upstream answer may set it either. Every other cookie arrives as the client sent it.
 * A property sends random Cookie header spellings (several headers, odd spacing, the cookie twice, names
 * that merely contain the name) over raw sockets through the forwarder and reads what the upstream got.
 */
import t, { type Test } from 'tap'
import fc from 'fast-check'
import { generateKeyPairSync, randomUUID, type KeyObject } from 'node:crypto'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { connect, type AddressInfo } from 'node:net'
import { request as httpRequest } from 'undici'
import { parseCookie } from 'cookie'
import { buildBadgeClaims, signBadge } from '../../../src/core/badge.js'
import { CONSOLE_COOKIE, isConsoleCookiePair } from '../../../src/core/console-cookie.js'
import { consoleCookie } from '../../../src/admin/plugins/console-cookie.js'
import { STRIP } from '../../../src/gateway/request-scope.js'
import { Upstream } from '../../../src/gateway/upstream/upstream.js'
import { propertyRuns } from '../../helpers/property-runs.js'
import { GATEWAY_ISSUER, startProtocolGateway } from '../../helpers/protocol-gateway.js'

t.setTimeout(120_000)

const key = generateKeyPairSync('ed25519')
const SECRET = 'xK3v9QmW2pL7nR4tY8uB1cD6fG0hJ5sA3eZ9wV2qN7o'
const POLICY = { min_trust_level: null, allowed_dids: null, denied_dids: [], rate_limits: [], operations: [], mcp_tools: [], capability_classes: [] }

function badge(): string {
  const now = Math.floor(Date.now() / 1000)
  return signBadge(buildBadgeClaims({
    jti: `jti-${randomUUID()}`, issuer: GATEWAY_ISSUER, subject: 'did:web:agents.example.com:browser', issuedAt: now - 10, expiresAt: now + 3600, ial: '1', level: '3', domain: 'agents.example.com',
  }), { kid: 'k1', privateKey: key.privateKey as KeyObject })
}

interface Recorded {
  readonly url: string
  /** The Cookie header values as they arrived, in order. */
  readonly cookies: string[]
  readonly raw: string[]
}

/** An upstream that records each request's Cookie headers and answers by path. */
async function recordingUpstream(t: Test): Promise<{ url: string; seen: Recorded[] }> {
  const seen: Recorded[] = []
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const cookies: string[] = []
    for (let i = 0; i < req.rawHeaders.length; i += 2) if (req.rawHeaders[i]!.toLowerCase() === 'cookie') cookies.push(req.rawHeaders[i + 1]!)
    seen.push({ url: req.url ?? '', cookies, raw: req.rawHeaders })
    req.resume()
    req.on('end', () => {
      if ((req.url ?? '').includes('agent-card.json')) {
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ name: 'agent', description: 'd', version: '1' }))
      } else if ((req.url ?? '').endsWith('/plants')) {
        res.writeHead(200, [
          'content-type', 'text/plain',
          'set-cookie', `${CONSOLE_COOKIE}=planted; Path=/; HttpOnly`,
          'set-cookie', 'theme=dark; Path=/',
          'set-cookie', ` ${CONSOLE_COOKIE} =planted2; Domain=example.com`,
          'set-cookie', `${CONSOLE_COOKIE}_x=1`,
        ]).end('ok')
      } else {
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"jsonrpc":"2.0","id":1,"result":{}}')
      }
    })
  })
  await listen(t, server)
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen }
}

async function listen(t: Test, server: Server): Promise<void> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => {
    server.closeAllConnections()
    server.close(() => resolve())
  }))
}

function carriesSecret(recorded: Recorded): boolean {
  return recorded.raw.some((value) => value.includes(SECRET))
}

t.test('no route forwards the console cookie; other cookies arrive as sent', async (t) => {
  const upstream = await recordingUpstream(t)
  const gw = await startProtocolGateway(t, {
    upstreamUrl: upstream.url, authorityKey: key.publicKey, policy: POLICY,
    routes: (pool) => [
      { prefix: '/api', value: { upstream: pool, mode: null } },
      { prefix: '/mcp', value: { upstream: pool, mode: null, protocol: 'mcp' } },
      { prefix: '/agent', value: { upstream: pool, mode: null, protocol: 'a2a' } },
    ],
  })
  // Two Cookie headers, as an HTTP/2 hop in front may deliver them, the cookie in both and twice.
  const browser = [
    'cookie', `theme=dark; ${CONSOLE_COOKIE}=${SECRET}; lang=en`,
    'cookie', `${CONSOLE_COOKIE}=${SECRET}`,
    'cookie', `my_${CONSOLE_COOKIE}=kept;  ${CONSOLE_COOKIE}=${SECRET}`,
  ]
  const expected = ['theme=dark; lang=en', `my_${CONSOLE_COOKIE}=kept`]
  const authorization = `Bearer ${badge()}`
  const sent: [string, () => Promise<number>][] = [
    ['HTTP route', async () => (await httpRequest(`${gw.url}/api/x`, { headers: [...browser, 'authorization', authorization] })).statusCode],
    ['MCP route', async () => (await httpRequest(`${gw.url}/mcp`, {
      method: 'POST', body: '{"jsonrpc":"2.0","id":1,"method":"ping"}',
      headers: [...browser, 'authorization', authorization, 'content-type', 'application/json', 'accept', 'application/json, text/event-stream'],
    })).statusCode],
    ['A2A route', async () => (await httpRequest(`${gw.url}/agent`, {
      method: 'POST', body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tasks/get', params: { id: 'task-1' } }),
      headers: [...browser, 'authorization', authorization, 'content-type', 'application/json'],
    })).statusCode],
    ['the anonymous public card', async () => (await httpRequest(`${gw.url}/agent/.well-known/agent-card.json`, { headers: browser })).statusCode],
  ]
  for (const [name, send] of sent) {
    const before = upstream.seen.length
    t.equal(await send(), 200, `${name}: answered`)
    t.equal(upstream.seen.length, before + 1, `${name}: reached the upstream once`)
    const recorded = upstream.seen.at(-1)!
    t.notOk(carriesSecret(recorded), `${name}: the upstream never saw the console cookie`)
    if (name === 'the anonymous public card') t.strictSame(recorded.cookies, [], `${name}: no cookie at all (the gateway's own request)`)
    else t.strictSame(recorded.cookies, expected, `${name}: the other cookies byte for byte, the emptied header dropped`)
  }
})

t.test('an upstream answer cannot set the console cookie', async (t) => {
  const upstream = await recordingUpstream(t)
  const gw = await startProtocolGateway(t, {
    upstreamUrl: upstream.url, authorityKey: key.publicKey, policy: POLICY,
    routes: (pool) => [{ prefix: '/api', value: { upstream: pool, mode: null } }],
  })
  const answer = await httpRequest(`${gw.url}/api/plants`, { headers: { authorization: `Bearer ${badge()}` } })
  await answer.body.text()
  t.strictSame(answer.headers['set-cookie'], ['theme=dark; Path=/', `${CONSOLE_COOKIE}_x=1`], 'the console cookie dropped, the others relayed')
})

// -------------------------------------------------------------------------------------------------
// Property: random Cookie header spellings through the forwarder, over raw sockets.

const blank = fc.constantFrom('', ' ', '  ', '\t', ' \t')
const otherName = fc.oneof(
  fc.constantFrom('a', 'sid', `my_${CONSOLE_COOKIE}`, `${CONSOLE_COOKIE}_x`, `${CONSOLE_COOKIE}2`, 'Agent_Trust_Console', 'agent_trust'),
  fc.stringMatching(/^[A-Za-z0-9_.-]{1,10}$/),
)
const value = fc.oneof(fc.stringMatching(/^[A-Za-z0-9_=.-]{0,12}$/), fc.constant(CONSOLE_COOKIE))
const part = fc.oneof(
  fc.tuple(blank, blank, blank).map(([a, b, c]) => `${a}${CONSOLE_COOKIE}${b}=${c}${SECRET}`),
  fc.tuple(blank, otherName, blank, value).map(([a, n, b, v]) => `${a}${n}${b}=${v}`),
  fc.oneof(blank, otherName),
)
// Node trims each field value, as every HTTP/1.1 parser does (RFC 9112 §5): generated values are trimmed.
const cookieHeader = fc.array(fc.tuple(part, blank), { minLength: 1, maxLength: 6 })
  .map((parts) => parts.map(([p, after], i) => (i === 0 ? p : `;${after}${p}`)).join('').trim())
  .filter((header) => header !== '')
const cookieHeaders = fc.array(cookieHeader, { minLength: 1, maxLength: 3 })

const pairs = (headers: readonly string[]): string[] =>
  headers.flatMap((h) => h.split(';')).map((p) => p.trim()).filter((p) => p !== '' && !isConsoleCookiePair(p))

t.test('property: over Cookie header spellings, the upstream gets every other cookie and never the console one', async (t) => {
  const upstream = await recordingUpstream(t)
  const pool = new Upstream(upstream.url, { timeoutMs: 5_000 })
  t.teardown(() => pool.close())
  const front = createServer((req, res) => {
    void pool.forward(req, res, { add: [], strip: STRIP, trustedPeer: false }).then((result) => {
      if (!result.ok) res.writeHead(502).end()
    })
  })
  await listen(t, front)
  const port = (front.address() as AddressInfo).port

  const send = (headers: readonly string[]): Promise<void> => new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1')
    socket.on('error', reject)
    const lines = headers.map((h) => `Cookie: ${h}\r\n`).join('')
    socket.end(`GET /p HTTP/1.1\r\nHost: gw\r\n${lines}Connection: close\r\n\r\n`)
    socket.resume()
    socket.on('close', () => resolve())
  })

  await fc.assert(fc.asyncProperty(cookieHeaders, async (headers) => {
    const before = upstream.seen.length
    await send(headers)
    if (upstream.seen.length !== before + 1) return false
    const got = upstream.seen.at(-1)!.cookies
    const joined = got.join('; ')
    if (carriesSecret(upstream.seen.at(-1)!)) return false
    // The admin plane's reader and jshttp's parser both find no console cookie in what arrived.
    if (consoleCookie({ headers: { cookie: joined } }) !== null || parseCookie(joined)[CONSOLE_COOKIE] !== undefined) return false
    // Every other pair, in order and byte for byte.
    if (JSON.stringify(pairs(got)) !== JSON.stringify(pairs(headers))) return false
    // A header without the console cookie arrives exactly as sent; one that had it is dropped when emptied.
    const untouched = headers.filter((h) => !h.split(';').some(isConsoleCookiePair))
    if (!untouched.every((h) => got.includes(h))) return false
    return got.every((h) => untouched.includes(h) || /[^; \t]/.test(h))
  }), propertyRuns(150))
  t.pass('held')
})
