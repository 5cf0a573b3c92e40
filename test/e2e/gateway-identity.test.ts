/**
 * The gateway in badge-only mode, run as a user runs it (`agent-trust serve` with SERVICE_UPSTREAM_URL, a
 * child process, real sockets): badge verification and its refusal codes, the identity headers the
 * upstream receives, header hygiene, upstream failures, request-smuggling probes on raw sockets, the
 * per-request log line, the console cookie kept from the upstream, an event stream longer than the upstream
 * timeout, and a graceful SIGTERM.
 *
 * Two appliances: A (plain badge-only, the subject of most tests, stopped last with SIGTERM) and B
 * (self-signed badges accepted, a 500 ms upstream timeout and a route to a closed port).
 */
import t from 'tap'
import { createHash, createPrivateKey, generateKeyPairSync, randomUUID } from 'node:crypto'
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs'
import { request as httpRequest, type IncomingHttpHeaders } from 'node:http'
import { connect } from 'node:net'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { buildBadgeClaims, signBadge } from '../../src/core/badge.js'
import { signSelfSignedBadge } from '../../src/core/self-signed-badge.js'
import { adminCall, agentWithBadge, startService, closedPort } from '../helpers/appliance.js'
import type { Asserts } from '../helpers/expect.js'
import { startUpstream, type RecordedRequest } from '../helpers/upstream-server.js'

// Child processes on a shared 2-core machine: the whole file gets more than tap's default 30 s.
t.setTimeout(180_000)

const ISSUER = 'http://registry.test'
const UUID_V7 = /^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/

interface Answer {
  status: number
  headers: IncomingHttpHeaders
  text: string
  json: any
}

/** One request over node:http (not fetch: fetch refuses to send Connection, TE, Upgrade…). */
function send(
  base: string, urlPath: string,
  options: { method?: string; headers?: Record<string, string | string[]>; body?: string | Buffer | Iterable<Buffer> } = {},
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const url = new URL(urlPath, base)
    const headers = { ...options.headers }
    const body = options.body
    // Node's client frames a DELETE/OPTIONS body with neither Content-Length nor chunked unless told.
    if ((typeof body === 'string' || Buffer.isBuffer(body)) && headers['content-length'] === undefined) {
      headers['content-length'] = String(Buffer.byteLength(body))
    }
    const req = httpRequest({
      host: url.hostname, port: url.port, path: url.pathname + url.search, method: options.method ?? 'GET',
      headers, agent: false,
    }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => {
        const text = Buffer.concat(chunks).toString('utf8')
        let json: unknown
        try {
          json = JSON.parse(text)
        } catch {
          json = undefined
        }
        resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json })
      })
      res.on('error', reject)
    })
    req.on('error', reject)
    if (body === undefined) req.end()
    else if (typeof body === 'string' || Buffer.isBuffer(body)) req.end(body)
    else {
      // Streamed: written chunk by chunk without a Content-Length (chunked transfer coding).
      for (const chunk of body) req.write(chunk)
      req.end()
    }
  })
}

/** Raw bytes on a fresh socket; resolves with whatever came back once the peer closed (or after 3 s). */
function rawExchange(base: string, payload: string): Promise<{ text: string; closed: boolean }> {
  const url = new URL(base)
  return new Promise((resolve) => {
    const socket = connect(Number(url.port), url.hostname)
    let text = ''
    let done = false
    const finish = (closed: boolean): void => {
      if (done) return
      done = true
      clearTimeout(timer)
      socket.destroy()
      resolve({ text, closed })
    }
    const timer = setTimeout(() => finish(false), 3000)
    socket.on('data', (c: Buffer) => { text += c.toString('latin1') })
    socket.on('end', () => finish(true))
    socket.on('close', () => finish(true))
    socket.on('error', () => finish(true))
    socket.write(payload)
  })
}

async function pollUntil<T>(deadlineMs: number, fn: () => Promise<T | undefined> | T | undefined, stepMs = 25): Promise<T | undefined> {
  const deadline = Date.now() + deadlineMs
  for (;;) {
    const value = await fn()
    if (value !== undefined) return value
    if (Date.now() > deadline) return undefined
    await new Promise((r) => setTimeout(r, stepMs))
  }
}

/** The values of one header as the upstream received them, in order, matched case-insensitively. */
function rawValues(recorded: RecordedRequest, name: string): string[] {
  const out: string[] = []
  for (let i = 0; i < recorded.rawHeaders.length; i += 2) {
    if (recorded.rawHeaders[i]!.toLowerCase() === name) out.push(recorded.rawHeaders[i + 1]!)
  }
  return out
}


// ---------------------------------------------------------------------------------------------------
// Appliance A: badge-only, default settings.
// Appliance B: self-signed badges accepted, short upstream timeout, one route to a closed port.
// Both appliances start together: start-up dominates this file's wall time on a busy machine.
const [upstream, upstreamB] = await Promise.all([startUpstream(t), startUpstream(t)])
const routesDir = mkdtempSync(path.join(tmpdir(), 'svc-e2e-routes-'))
const routesFile = path.join(routesDir, 'routes.json')
writeFileSync(routesFile, JSON.stringify({
  routes: [
    { prefix: '/closed', upstream: `http://127.0.0.1:${await closedPort()}` },
    { prefix: '/', upstream: upstreamB.url },
  ],
}))
const [appliance, applianceB] = await Promise.all([
  startService(t, { SERVICE_UPSTREAM_URL: upstream.url }),
  startService(t, { SERVICE_ROUTES_FILE: routesFile, SERVICE_ACCEPT_SELF_SIGNED: 'true', SERVICE_UPSTREAM_TIMEOUT_MS: '500' }),
])
const gw = appliance.gatewayUrl as string
const opKey = appliance.operatorKey
const agent = await agentWithBadge(appliance.adminUrl, opKey, 'identity-agent')
const bearer = { authorization: `Bearer ${agent.token}` }
/** Every badge token this file hands to a gateway: none may ever appear in the process output. */
const tokens: string[] = [agent.token]

// The authority's own signing key, for badges with times or issuers the admin API would never issue.
const keyFile = JSON.parse(readFileSync(path.join(appliance.dataDir, 'ca-keys.json'), 'utf8')) as {
  signing_kid: string
  keys: { kid: string; x: string; d: string }[]
}
const signing = keyFile.keys.find((k) => k.kid === keyFile.signing_kid)
if (signing === undefined) throw new Error('no signing key in ca-keys.json')
const authorityKey = {
  kid: signing.kid,
  privateKey: createPrivateKey({ key: { kty: 'OKP', crv: 'Ed25519', x: signing.x, d: signing.d }, format: 'jwk' }),
}
function mint(overrides: { issuer?: string; issuedAt: number; expiresAt: number }): string {
  const token = signBadge(buildBadgeClaims({
    jti: randomUUID(), issuer: overrides.issuer ?? ISSUER, subject: agent.did, issuedAt: overrides.issuedAt, expiresAt: overrides.expiresAt,
    ial: '0', level: '1', domain: 'example.com',
  }), authorityKey)
  tokens.push(token)
  return token
}

const gwB = applianceB.gatewayUrl as string
const agentB = await agentWithBadge(applianceB.adminUrl, applianceB.operatorKey, 'identity-agent-b')
tokens.push(agentB.token)

/** Asserts a gateway-made refusal: status, code, the error marker and the transaction id header. */
function expectRefusal(t: Asserts, res: Answer, status: number, code: string, label: string): void {
  t.equal(res.status, status, `${label}: ${status}`, {})
  t.equal(res.json?.error, code, `${label}: ${code}`, {})
  t.equal(typeof res.json?.message, 'string', `${label}: has a message`, {})
  t.equal(res.headers['x-service-gateway'], 'error', `${label}: marked as gateway-made`, {})
}

t.test('badge refusals: every bad badge is 401 with its code and nothing reaches the upstream', async (t) => {
  const before = upstream.requests.length
  const now = Math.floor(Date.now() / 1000)

  const missing = await send(gw, '/r/missing')
  expectRefusal(t, missing, 401, 'BADGE_MISSING', 'no badge')
  t.match(missing.headers['x-service-txn'], UUID_V7, 'a refusal carries X-Service-Txn too')

  expectRefusal(t, await send(gw, '/r/garbage', { headers: { authorization: 'Bearer not-a-jws' } }), 401, 'BADGE_MALFORMED', 'garbage bearer')
  expectRefusal(t, await send(gw, '/r/garbage2', { headers: { 'x-service-badge': 'a.b.c' } }), 401, 'BADGE_MALFORMED', 'garbage X-Service-Badge')

  // Tampered: the payload re-encoded with another subject, the original signature kept.
  const [h, p, s] = agent.token.split('.') as [string, string, string]
  const claims = JSON.parse(Buffer.from(p, 'base64url').toString('utf8'))
  claims.sub = 'did:web:attacker.example.com'
  const tampered = `${h}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}.${s}`
  expectRefusal(t, await send(gw, '/r/tampered', { headers: { authorization: `Bearer ${tampered}` } }), 401, 'BADGE_SIGNATURE_INVALID', 'tampered payload')

  const other = await agentWithBadge(appliance.adminUrl, opKey, 'identity-other')
  tokens.push(other.token)
  expectRefusal(t, await send(gw, '/r/conflict', { headers: { authorization: `Bearer ${agent.token}`, 'x-service-badge': other.token } }),
    401, 'BADGE_CONFLICT', 'Authorization and X-Service-Badge differ')

  expectRefusal(t, await send(gw, '/r/expired', { headers: { authorization: `Bearer ${mint({ issuedAt: now - 7200, expiresAt: now - 3600 })}` } }),
    401, 'BADGE_EXPIRED', 'expired an hour ago (beyond the 60 s leeway)')
  expectRefusal(t, await send(gw, '/r/future', { headers: { authorization: `Bearer ${mint({ issuedAt: now + 3600, expiresAt: now + 7200 })}` } }),
    401, 'BADGE_NOT_YET_VALID', 'issued an hour from now')
  expectRefusal(t, await send(gw, '/r/issuer', { headers: { authorization: `Bearer ${mint({ issuer: 'http://evil.test', issuedAt: now, expiresAt: now + 600 })}` } }),
    401, 'BADGE_ISSUER_UNTRUSTED', 'right key, wrong issuer')

  const { privateKey } = generateKeyPairSync('ed25519')
  const selfSigned = signSelfSignedBadge(privateKey, { jti: randomUUID(), issuedAt: now, expiresAt: now + 600 })
  tokens.push(selfSigned.token)
  const selfRes = await send(gw, '/r/self', { headers: { authorization: `Bearer ${selfSigned.token}` } })
  t.equal(selfRes.status, 401, 'self-signed badge refused when SERVICE_ACCEPT_SELF_SIGNED is off')
  t.equal(selfRes.json?.error, 'BADGE_ISSUER_UNTRUSTED', 'self-signed badge refused as an untrusted issuer')

  t.equal(upstream.requests.length, before, 'the upstream received nothing for any refusal')

  // Control: a badge minted the same way with sane times passes, so the refusals above are about
  // the times and the issuer, not about the minting.
  const good = await send(gw, '/r/minted-ok', { headers: { authorization: `Bearer ${mint({ issuedAt: now, expiresAt: now + 600 })}` } })
  t.equal(good.status, 200, 'a badge minted with the authority key and sane times is forwarded')
})

t.test('badge sources: same token in both headers, Basic Authorization plus X-Service-Badge', async (t) => {
  const both = await send(gw, '/src/both', { headers: { authorization: `Bearer ${agent.token}`, 'x-service-badge': agent.token } })
  t.equal(both.status, 200, 'the same token in Authorization and X-Service-Badge is forwarded')

  const basic = 'Basic dXNlcjpwYXNz'
  const res = await send(gw, '/src/basic', { headers: { authorization: basic, 'x-service-badge': agent.token } })
  t.equal(res.status, 200, 'a Basic Authorization does not conflict with X-Service-Badge')
  const seen = upstream.requests.find((r) => r.url === '/src/basic')
  t.same(seen === undefined ? null : rawValues(seen, 'authorization'), [basic], 'the upstream gets the Authorization unchanged')
  t.same(seen === undefined ? null : rawValues(seen, 'x-service-badge'), [agent.token], 'and X-Service-Badge unchanged')
  t.equal(seen?.headers['x-service-subject'], agent.did, 'identity from the X-Service-Badge badge')
})

t.test('self-signed level-0 badge: accepted with SERVICE_ACCEPT_SELF_SIGNED=true, trust level 0', async (t) => {
  const now = Math.floor(Date.now() / 1000)
  const { privateKey } = generateKeyPairSync('ed25519')
  const selfSigned = signSelfSignedBadge(privateKey, { jti: randomUUID(), issuedAt: now, expiresAt: now + 600 })
  tokens.push(selfSigned.token)
  const res = await send(gwB, '/self/ok', { headers: { authorization: `Bearer ${selfSigned.token}` } })
  t.equal(res.status, 200, 'forwarded')
  const seen = upstreamB.requests.find((r) => r.url === '/self/ok')
  t.equal(seen?.headers['x-service-trust-level'], '0', 'X-Service-Trust-Level 0')
  t.equal(seen?.headers['x-service-subject'], selfSigned.did, 'the subject is the did:key')
  t.equal(seen?.headers['x-service-issuer'], selfSigned.did, 'the issuer is the did:key itself')
  // The switch accepts self-signed badges only: an authority badge still has to verify.
  const before = upstreamB.requests.length
  const forged = signSelfSignedBadge(privateKey, { jti: randomUUID(), issuedAt: now - 7200, expiresAt: now - 3600 })
  tokens.push(forged.token)
  expectRefusal(t, await send(gwB, '/self/expired', { headers: { authorization: `Bearer ${forged.token}` } }), 401, 'BADGE_EXPIRED', 'expired self-signed badge')
  t.equal(upstreamB.requests.length, before, 'the expired self-signed badge reached nothing')
})

t.test('revocation: a verified, cached badge is refused within one second of the revoke call', async (t) => {
  const victim = await agentWithBadge(appliance.adminUrl, opKey, 'identity-revoked')
  tokens.push(victim.token)
  const headers = { authorization: `Bearer ${victim.token}` }
  t.equal((await send(gw, '/rev/first', { headers })).status, 200, 'verified and cached by a first request')
  t.equal((await send(gw, '/rev/second', { headers })).status, 200, 'served from the badge cache')
  const revoked = await adminCall(appliance.adminUrl, opKey, 'POST', `/v1/badges/${victim.jti}/revoke`, { reason: 'e2e' })
  t.equal(revoked.status, 200, 'revoked on the admin plane')
  let last: Answer | undefined
  const refused = await pollUntil(1000, async () => {
    last = await send(gw, '/rev/after', { headers })
    return last.status === 401 ? last : undefined
  })
  t.ok(refused !== undefined, 'refused within one second')
  t.equal(last?.json?.error, 'BADGE_REVOKED', 'with BADGE_REVOKED')
  // Once refused, it stays refused and nothing more reaches the upstream.
  const count = upstream.requests.length
  expectRefusal(t, await send(gw, '/rev/again', { headers }), 401, 'BADGE_REVOKED', 'revoked badge, later request')
  t.equal(upstream.requests.length, count, 'the revoked badge reaches nothing')
})

t.test('identity headers: verified values replace client copies; badge and envelope headers pass unchanged', async (t) => {
  const res = await send(gw, '/id/headers?x=1', {
    headers: {
      authorization: `Bearer ${agent.token}`,
      'x-service-subject': 'did:web:forged.example.com',
      'x-service-issuer': 'http://forged.test',
      'x-service-trust-level': '4',
      'x-service-badge-jti': 'forged-jti',
      'x-service-authority': 'authority-envelope-value',
      'x-service-authority-chain': 'chain-a, chain-b',
      'x-service-badge-map': '{"did:web:x":"token"}',
      'x-forwarded-for': '203.0.113.9',
      'x-forwarded-host': 'forged.example.com',
      'x-forwarded-proto': 'https',
      connection: 'x-foo',
      'x-foo': 'hop-value',
      'keep-alive': 'timeout=5',
      te: 'trailers',
      'proxy-authorization': 'Basic cHJveHk6c2VjcmV0',
      'x-kept': 'end-to-end',
    },
  })
  t.equal(res.status, 200)
  const seen = upstream.requests.find((r) => r.url === '/id/headers?x=1')
  if (seen === undefined) return t.fail('the upstream did not receive the request')
  t.same(rawValues(seen, 'x-service-subject'), [agent.did], 'X-Service-Subject: the badge sub, exactly once')
  t.same(rawValues(seen, 'x-service-issuer'), [ISSUER], 'X-Service-Issuer: the authority, exactly once')
  t.same(rawValues(seen, 'x-service-trust-level'), ['1'], 'X-Service-Trust-Level: 1 (REG), exactly once')
  t.same(rawValues(seen, 'x-service-badge-jti'), [agent.jti], 'X-Service-Badge-JTI: the badge jti, exactly once')
  t.same(rawValues(seen, 'authorization'), [`Bearer ${agent.token}`], 'Authorization forwarded unchanged')
  t.same(rawValues(seen, 'x-service-authority'), ['authority-envelope-value'], 'X-Service-Authority unchanged')
  t.same(rawValues(seen, 'x-service-authority-chain'), ['chain-a, chain-b'], 'X-Service-Authority-Chain unchanged')
  t.same(rawValues(seen, 'x-service-badge-map'), ['{"did:web:x":"token"}'], 'X-Service-Badge-Map unchanged')
  for (const hop of ['x-foo', 'keep-alive', 'te', 'proxy-authorization']) {
    t.same(rawValues(seen, hop), [], `hop-by-hop ${hop} removed`)
  }
  t.notOk(rawValues(seen, 'connection').some((v) => /x-foo/i.test(v)), 'the client Connection header is not forwarded')
  t.same(rawValues(seen, 'x-kept'), ['end-to-end'], 'an ordinary end-to-end header is kept')
  t.same(rawValues(seen, 'x-forwarded-for'), ['127.0.0.1'], 'X-Forwarded-For replaced by the peer (not appended): the peer is no trusted proxy')
  t.same(rawValues(seen, 'x-forwarded-proto'), ['http'], 'X-Forwarded-Proto from the connection')
  t.same(rawValues(seen, 'x-forwarded-host'), [new URL(gw).host], 'X-Forwarded-Host from the client Host, not the forged value')

  // The Upgrade header, in a request of its own (with Connection: upgrade Node would switch protocols).
  const up = await send(gw, '/id/upgrade', { headers: { ...bearer, upgrade: 'h2c' } })
  t.equal(up.status, 200)
  const seenUp = upstream.requests.find((r) => r.url === '/id/upgrade')
  t.same(seenUp === undefined ? null : rawValues(seenUp, 'upgrade'), [], 'Upgrade removed')
})

t.test('X-Service-Txn: generated as a UUIDv7, kept when sane, replaced when not', async (t) => {
  const absent = await send(gw, '/txn/absent', { headers: bearer })
  const seenAbsent = upstream.requests.find((r) => r.url === '/txn/absent')
  t.match(seenAbsent?.headers['x-service-txn'], UUID_V7, 'absent: a UUIDv7 (version nibble 7, variant 10)')
  t.equal(absent.headers['x-service-txn'], seenAbsent?.headers['x-service-txn'], 'the client gets the same id back')

  const sane = 'client-txn:42.a_b'
  const kept = await send(gw, '/txn/sane', { headers: { ...bearer, 'x-service-txn': sane } })
  const seenSane = upstream.requests.find((r) => r.url === '/txn/sane')
  t.same(seenSane === undefined ? null : rawValues(seenSane, 'x-service-txn'), [sane], 'a sane client id is forwarded, once')
  t.equal(kept.headers['x-service-txn'], sane, 'and echoed to the client')

  for (const [label, value] of [['300 characters', 'a'.repeat(300)], ['spaces', 'has some spaces'], ['quotes', '"quoted"']] as const) {
    const urlPath = `/txn/bad-${label.replace(/\W/g, '')}`
    const res = await send(gw, urlPath, { headers: { ...bearer, 'x-service-txn': value } })
    const seen = upstream.requests.find((r) => r.url === urlPath)
    const values = seen === undefined ? [] : rawValues(seen, 'x-service-txn')
    t.equal(values.length, 1, `${label}: exactly one X-Service-Txn upstream`)
    t.match(values[0], UUID_V7, `${label}: replaced by a fresh UUIDv7`)
    t.equal(res.headers['x-service-txn'], values[0], `${label}: the client gets the fresh id`)
  }
})

t.test('method, path, query and bodies arrive intact; upstream status and headers come back', async (t) => {
  const body = JSON.stringify({ hello: 'wörld', n: [1, 2, 3] })
  const res = await send(gw, '/body/json?a=1&b=two%20words&a=3', {
    method: 'POST', headers: { ...bearer, 'content-type': 'application/json' }, body,
  })
  t.equal(res.status, 200)
  const seen = upstream.requests.find((r) => r.url === '/body/json?a=1&b=two%20words&a=3')
  t.equal(seen?.method, 'POST', 'method')
  t.equal(seen?.body, body, 'body byte for byte')
  t.equal(seen?.headers['content-type'], 'application/json', 'content-type')

  for (const method of ['PUT', 'PATCH', 'DELETE']) {
    const r = await send(gw, `/body/method-${method}`, { method, headers: { ...bearer, 'content-type': 'text/plain' }, body: `${method} body` })
    t.equal(r.status, 200)
    const s = upstream.requests.find((x) => x.url === `/body/method-${method}`)
    t.equal(s?.method, method, `${method} forwarded`)
    t.equal(s?.body, `${method} body`, `${method} body forwarded`)
  }

  // 1 MiB streamed with chunked transfer coding: 16 chunks of 64 KiB, each a different letter.
  const chunks = Array.from({ length: 16 }, (_, i) => Buffer.alloc(64 * 1024, 97 + i))
  const digest = createHash('sha256').update(Buffer.concat(chunks)).digest('hex')
  const streamed = await send(gw, '/body/stream', { method: 'POST', headers: { ...bearer, 'content-type': 'application/octet-stream' }, body: chunks })
  t.equal(streamed.status, 200)
  const seenStream = upstream.requests.find((r) => r.url === '/body/stream')
  t.equal(seenStream?.body.length, 1024 * 1024, '1 MiB arrived')
  t.equal(seenStream === undefined ? null : createHash('sha256').update(seenStream.body).digest('hex'), digest, 'in order, byte for byte')

  upstream.handler = (req, out) => {
    if (req.url !== '/body/created') return false
    out.writeHead(201, [
      ['content-type', 'text/plain'], ['x-upstream-header', 'from-upstream'], ['set-cookie', 'a=1'], ['set-cookie', 'b=2'],
      ['x-service-txn', 'upstream-must-not-win'],
    ].flat())
    out.end('made it')
    return true
  }
  t.teardown(() => { upstream.handler = null })
  const created = await send(gw, '/body/created', { method: 'POST', headers: { ...bearer, 'x-service-txn': 'txn-created-1' }, body: 'x' })
  t.equal(created.status, 201, 'upstream status')
  t.equal(created.text, 'made it', 'upstream body')
  t.equal(created.headers['x-upstream-header'], 'from-upstream', 'upstream header')
  t.same(created.headers['set-cookie'], ['a=1', 'b=2'], 'repeated headers kept')
  t.equal(created.headers['x-service-txn'], 'txn-created-1', "the gateway's X-Service-Txn replaces an upstream copy")
  t.notOk('x-service-gateway' in created.headers, 'an upstream answer is not marked as gateway-made')
  upstream.handler = null
})

t.test('upstream failures: closed port → 502, silent upstream → 504 after SERVICE_UPSTREAM_TIMEOUT_MS', async (t) => {
  const headers = { authorization: `Bearer ${agentB.token}` }
  expectRefusal(t, await send(gwB, '/closed/x', { headers }), 502, 'UPSTREAM_UNAVAILABLE', 'closed port')

  upstreamB.handler = (req) => req.url.startsWith('/hang') // never answers
  t.teardown(() => { upstreamB.handler = null })
  const started = Date.now()
  const res = await send(gwB, '/hang/x', { headers })
  expectRefusal(t, res, 504, 'UPSTREAM_TIMEOUT', 'upstream never answers')
  t.ok(Date.now() - started < 10_000, 'the timeout is the configured one, not a default of tens of seconds')
  t.ok(upstreamB.requests.some((r) => r.url === '/hang/x'), 'the request did reach the silent upstream')
  upstreamB.handler = null
})

t.test('the console cookie of the same appliance never reaches the upstream', async (t) => {
  // The admin plane and the gateway share a host: a browser signed in to the console sends its cookie to both.
  const signIn = await fetch(`${appliance.adminUrl}/v1/console/session`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ api_key: opKey }),
  })
  t.equal(signIn.status, 201, 'signed in to the console')
  const cookie = /^(agent_trust_console=[A-Za-z0-9_-]+);/.exec(signIn.headers.get('set-cookie') ?? '')?.[1]
  t.ok(cookie, 'with its session cookie')
  const secret = cookie!.split('=')[1]!
  const res = await send(gw, '/cookie/x', { headers: { ...bearer, cookie: `theme=dark; ${cookie!}; lang=en` } })
  t.equal(res.status, 200)
  const recorded = upstream.requests.find((r) => r.url === '/cookie/x')
  t.strictSame(recorded === undefined ? null : rawValues(recorded, 'cookie'), ['theme=dark; lang=en'], 'the other cookies arrive as sent')
  t.notOk(recorded?.rawHeaders.some((value) => value.includes(secret)), 'the console cookie does not')
})

t.test('an event stream outlives SERVICE_UPSTREAM_TIMEOUT_MS (500 ms) in the real process', async (t) => {
  upstreamB.handler = (req, out) => {
    if (req.url !== '/sse/x') return false
    out.writeHead(200, { 'content-type': 'text/event-stream' })
    out.flushHeaders()
    setTimeout(() => out.end('data: late\n\n'), 1_500)
    return true
  }
  t.teardown(() => { upstreamB.handler = null })
  const res = await send(gwB, '/sse/x', { headers: { authorization: `Bearer ${agentB.token}` } })
  t.equal(res.status, 200)
  t.equal(res.text, 'data: late\n\n', 'the event after 1.5 s of silence arrived')
  upstreamB.handler = null
})

t.test('smuggling probes on raw sockets: 400 or closed, the upstream receives nothing', async (t) => {
  const host = new URL(gw).host
  const auth = `Authorization: Bearer ${agent.token}\r\n`
  const smuggled = 'GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n'
  const probes: [string, string][] = [
    ['CL and TE together', `POST /smuggle/1 HTTP/1.1\r\nHost: ${host}\r\n${auth}Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n${smuggled}`],
    ['two Content-Length', `POST /smuggle/2 HTTP/1.1\r\nHost: ${host}\r\n${auth}Content-Length: 0\r\nContent-Length: ${smuggled.length}\r\n\r\n${smuggled}`],
    ['Transfer-Encoding: xchunked', `POST /smuggle/3 HTTP/1.1\r\nHost: ${host}\r\n${auth}Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n${smuggled}`],
    ['Transfer-Encoding: chunked, identity', `POST /smuggle/4 HTTP/1.1\r\nHost: ${host}\r\n${auth}Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n${smuggled}`],
    ['space before the colon', `POST /smuggle/5 HTTP/1.1\r\nHost: ${host}\r\n${auth}Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n${smuggled}`],
    ['bare LF in the request line', `GET /smuggle/6 HTTP/1.1\nHost: ${host}\r\n${auth}\r\n`],
    ['invalid chunk size', `POST /smuggle/7 HTTP/1.1\r\nHost: ${host}\r\n${auth}Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n${smuggled}`],
    // Characters the gateway leaves to its strict parser (framing.ts, STRICT_PARSER): each must be refused there.
    ['NUL in a header value', `GET /smuggle/8 HTTP/1.1\r\nHost: ${host}\r\n${auth}X-A: a\0b\r\n\r\n`],
    ['bare CR in a header value', `GET /smuggle/9 HTTP/1.1\r\nHost: ${host}\r\n${auth}X-A: a\rX-Service-Subject: did:web:evil\r\n\r\n`],
    ['bare LF in a header value', `GET /smuggle/10 HTTP/1.1\r\nHost: ${host}\r\n${auth}X-A: a\nX-Service-Subject: did:web:evil\r\n\r\n`],
    ['control character in a header value', `GET /smuggle/11 HTTP/1.1\r\nHost: ${host}\r\n${auth}X-A: a\x01b\r\n\r\n`],
    ['non-token header name', `GET /smuggle/12 HTTP/1.1\r\nHost: ${host}\r\n${auth}X@A: b\r\n\r\n`],
    ['obs-fold continuation line', `GET /smuggle/13 HTTP/1.1\r\nHost: ${host}\r\n${auth}X-A: a\r\n X-Service-Subject: did:web:evil\r\n\r\n`],
  ]
  const before = upstream.requests.length
  for (const [label, payload] of probes) {
    const { text, closed } = await rawExchange(gw, payload)
    const statuses = [...text.matchAll(/HTTP\/1\.[01] (\d{3})/g)].map((m) => m[1])
    t.ok(statuses.length > 0 ? statuses.every((s) => s === '400') : closed, `${label}: answered 400 or closed (got ${statuses.join(',') || 'nothing'})`)
    t.ok(statuses.length <= 1, `${label}: no second response on the connection`)
    if (statuses.length === 1) t.match(text, /REQUEST_MALFORMED/, `${label}: REQUEST_MALFORMED`)
  }
  // A normal request afterwards: the gateway still serves, and it is the only thing the upstream saw.
  const after = await send(gw, '/smuggle/after', { headers: bearer })
  t.equal(after.status, 200, 'the gateway keeps serving normal requests')
  t.same(upstream.requests.slice(before).map((r) => r.url), ['/smuggle/after'], 'the upstream received nothing from the probes')
})

t.test('log: one "gateway request" line per request, with the documented fields', async (t) => {
  const txns = ['log-txn-1', 'log-txn-2', 'log-txn-3']
  for (const txn of txns) t.equal((await send(gw, `/log/${txn}`, { headers: { ...bearer, 'x-service-txn': txn } })).status, 200)
  await send(gw, '/log/refused', { headers: { 'x-service-txn': 'log-txn-refused' } })
  const lines = await pollUntil(5000, () => {
    const found = appliance.logLines().filter((l) => l.msg === 'gateway request' && typeof l.txn_id === 'string' && l.txn_id.startsWith('log-txn-'))
    return found.length >= 4 ? found : undefined
  })
  if (lines === undefined) return t.fail('the log lines did not appear')
  for (const txn of txns) {
    const mine = lines.filter((l) => l.txn_id === txn)
    t.equal(mine.length, 1, `${txn}: exactly one line`)
    const line = mine[0] ?? {}
    t.match(line, { agent_did: agent.did, badge_jti: agent.jti, status: 200, mode: 'EM-OBSERVE', method: 'GET' }, `${txn}: fields`)
    t.equal(typeof line.request_id, 'string', `${txn}: request_id`)
    t.equal(typeof line.latency_ms, 'number', `${txn}: latency_ms`)
  }
  t.equal(new Set(lines.map((l) => l.request_id)).size, lines.length, 'request ids are unique')
  const refused = lines.find((l) => l.txn_id === 'log-txn-refused')
  t.match(refused, { status: 401, error_code: 'BADGE_MISSING' }, 'a refusal is logged with its code')
})

t.test('SIGTERM: an in-flight slow request completes and the process exits 0; no badge ever logged', async (t) => {
  upstream.handler = (req, out) => {
    if (req.url !== '/slow') return false
    setTimeout(() => {
      out.writeHead(200, { 'content-type': 'text/plain' })
      out.end('slow but fine')
    }, 1000)
    return true
  }
  const pending = send(gw, '/slow', { headers: bearer })
  const arrived = await pollUntil(5000, () => upstream.requests.some((r) => r.url === '/slow') || undefined)
  t.ok(arrived, 'the slow request reached the upstream')
  appliance.child.kill('SIGTERM')
  const res = await pending
  t.equal(res.status, 200, 'the in-flight request completed')
  t.equal(res.text, 'slow but fine')
  t.equal(await appliance.exited, 0, 'exit code 0')

  await applianceB.stop()
  const output = appliance.output() + applianceB.output()
  const leaked = tokens.filter((token) => output.includes(token)).length
  t.equal(leaked, 0, 'no badge token appears in either process output')
  // The signature part alone is enough to rebuild nothing, but should not be logged either.
  t.equal(tokens.filter((token) => output.includes(token.split('.')[2] as string)).length, 0, 'nor any badge signature')
})
