/**
 * Event streams through the gateway (docs/mcp.md, "Streams"; docs/wire-contract.md §9): a plain SSE upstream on
 * node:http behind a real gateway whose upstream time-out is 300 ms. A `text/event-stream` answer's head
 * reaches the client at once, before any event; its silences are timed by the stream idle limit (none by
 * default), not by the upstream time-out, with or without a request body; every other answer keeps the
 * time-out (504 before a head, a cut connection after one), and its head goes out within a sweep when its
 * body is slower; open streams do not hold the connections ordinary requests need.
 */
import t, { type Test } from 'tap'
import { generateKeyPairSync, randomUUID, type KeyObject } from 'node:crypto'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { Readable } from 'node:stream'
import { setTimeout as sleep } from 'node:timers/promises'
import { request } from 'undici'
import { buildBadgeClaims, signBadge } from '../../../../src/core/badge.js'
import { loadConfig } from '../../../../src/config/index.js'
import type { UpstreamOptions } from '../../../../src/gateway/upstream/upstream.js'
import { GATEWAY_ISSUER, startProtocolGateway } from '../../../helpers/protocol-gateway.js'

t.setTimeout(120_000)

const TIMEOUT_MS = 300
const key = generateKeyPairSync('ed25519')
const POLICY = { min_trust_level: null, allowed_dids: null, denied_dids: [], rate_limits: [], operations: [], mcp_tools: [], capability_classes: [] }

function authorization(): string {
  const now = Math.floor(Date.now() / 1000)
  return `Bearer ${signBadge(buildBadgeClaims({
    jti: `jti-${randomUUID()}`, issuer: GATEWAY_ISSUER, subject: 'did:web:agents.example.com:reader', issuedAt: now - 10, expiresAt: now + 3600, ial: '1', level: '2', domain: 'agents.example.com',
  }), { kid: 'k1', privateKey: key.privateKey as KeyObject })}`
}

/**
 * `/sse?gap=&events=&type=`: the head flushed at once, then `events` events each after `gap` ms.
 * `/late?after=&type=`: the head flushed at once, the body after `after` ms. `/no-head`: never answers.
 */
function upstreamHandler(req: IncomingMessage, res: ServerResponse): void {
  req.resume()
  req.on('end', () => {
    const url = new URL(req.url ?? '/', 'http://upstream')
    const type = url.searchParams.get('type')
    res.on('error', () => {})
    switch (url.pathname.split('/').pop()) {
      case 'sse': {
        const gap = Number(url.searchParams.get('gap'))
        const events = Number(url.searchParams.get('events'))
        res.writeHead(200, { 'content-type': type ?? 'text/event-stream', 'cache-control': 'no-cache' })
        res.flushHeaders()
        void (async () => {
          for (let i = 0; i < events; i++) {
            await sleep(gap)
            if (res.destroyed) return
            res.write(`data: ${i}\n\n`)
          }
          res.end()
        })()
        return
      }
      case 'late': {
        res.writeHead(200, { 'content-type': type ?? 'application/json' })
        res.flushHeaders()
        setTimeout(() => res.end('{"late":true}'), Number(url.searchParams.get('after'))).unref()
        return
      }
      case 'no-head':
        return
    }
    res.writeHead(404).end()
  })
}

async function gateway(t: Test, upstream: UpstreamOptions): Promise<string> {
  const server = createServer(upstreamHandler)
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => {
    server.closeAllConnections()
    server.close(() => resolve())
  }))
  const gw = await startProtocolGateway(t, {
    upstreamUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, authorityKey: key.publicKey, policy: POLICY, upstream,
    routes: (pool) => [{ prefix: '/api', value: { upstream: pool, mode: null } }],
  })
  return gw.url
}

interface Timed {
  readonly status: number
  readonly headers: Record<string, string | string[] | undefined>
  /** ms from sending to the head. */
  readonly headAt: number
  /** ms from sending to each body chunk. */
  readonly chunkAt: number[]
  readonly body: string
  /** The body ended in an error (the gateway cut the connection). */
  readonly cut: boolean
}

async function timed(url: string, init: { method?: 'GET' | 'POST'; body?: Readable } = {}): Promise<Timed> {
  const started = performance.now()
  const answer = await request(url, { method: init.method ?? 'GET', headers: { authorization: authorization(), accept: 'text/event-stream' }, body: init.body ?? null })
  const headAt = performance.now() - started
  const chunkAt: number[] = []
  let body = ''
  let cut = false
  try {
    for await (const chunk of answer.body) {
      chunkAt.push(performance.now() - started)
      body += (chunk as Buffer).toString('utf8')
    }
  } catch {
    cut = true
  }
  return { status: answer.statusCode, headers: answer.headers, headAt, chunkAt, body, cut }
}

t.test('an event stream: its head at once, its silences longer than the upstream time-out kept', async (t) => {
  const gw = await gateway(t, { timeoutMs: TIMEOUT_MS })
  const answer = await timed(`${gw}/api/sse?gap=800&events=2`)
  t.equal(answer.status, 200)
  t.ok(answer.headAt < 600, `the head came before the first event (${Math.round(answer.headAt)} ms; the event at 800)`)
  t.ok(answer.chunkAt[0]! >= 700, 'and the event after it')
  t.notOk(answer.cut, 'two silences of 800 ms did not cut the stream')
  t.equal(answer.body, 'data: 0\n\ndata: 1\n\n', 'every event arrived')
})

t.test('an event stream answering a request with a body is timed the same way', async (t) => {
  const gw = await gateway(t, { timeoutMs: TIMEOUT_MS })
  const answer = await timed(`${gw}/api/sse?gap=800&events=2`, { method: 'POST', body: Readable.from([Buffer.from('{"a":'), Buffer.from('1}')]) })
  t.equal(answer.status, 200)
  t.ok(answer.headAt < 600, 'the head came at once')
  t.notOk(answer.cut, 'not cut')
  t.equal(answer.body, 'data: 0\n\ndata: 1\n\n')
})

t.test('the event-stream media type in its spellings; anything else is an ordinary answer', async (t) => {
  const gw = await gateway(t, { timeoutMs: TIMEOUT_MS })
  for (const type of ['text/event-stream; charset=utf-8', 'Text/Event-Stream', 'text/event-stream ;charset=UTF-8']) {
    const answer = await timed(`${gw}/api/sse?gap=600&events=1&type=${encodeURIComponent(type)}`)
    t.ok(answer.headAt < 500 && !answer.cut && answer.body === 'data: 0\n\n', `${type}: a stream`)
  }
  for (const type of ['text/plain', 'text/event-streams', 'application/x-ndjson']) {
    const answer = await timed(`${gw}/api/sse?gap=600&events=1&type=${encodeURIComponent(type)}`)
    t.ok(answer.cut && answer.body === '', `${type}: its 600 ms silence is cut at the upstream time-out`)
  }
})

t.test('ordinary answers keep SERVICE_UPSTREAM_TIMEOUT_MS', async (t) => {
  const gw = await gateway(t, { timeoutMs: TIMEOUT_MS })
  const started = performance.now()
  const silent = await timed(`${gw}/api/no-head`)
  t.equal(silent.status, 504, 'no head within the time-out: 504')
  t.match(JSON.parse(silent.body), { error: 'UPSTREAM_TIMEOUT' })
  t.ok(performance.now() - started < 2_000, 'at the configured time-out')
  const late = await timed(`${gw}/api/late?after=900`)
  t.equal(late.status, 200, 'a head, then a body slower than the time-out')
  t.ok(late.cut, 'the connection is cut')
})

t.test('an ordinary answer\'s head leaves within a sweep when its body is slower', async (t) => {
  // A 5 s time-out is swept every 500 ms.
  const gw = await gateway(t, { timeoutMs: 5_000 })
  const answer = await timed(`${gw}/api/late?after=1500`)
  t.equal(answer.status, 200)
  t.ok(answer.headAt < 1_200, `the head reached the client before the body (${Math.round(answer.headAt)} ms; the body at 1500)`)
  t.equal(answer.body, '{"late":true}')
  t.notOk(answer.cut)
})

t.test('SERVICE_UPSTREAM_STREAM_IDLE_MS cuts a silent stream, never a talking one', async (t) => {
  const gw = await gateway(t, { timeoutMs: TIMEOUT_MS, streamIdleMs: 500 })
  const silent = await timed(`${gw}/api/sse?gap=1200&events=1`)
  t.ok(silent.headAt < 400, 'the head came at once')
  t.ok(silent.cut && silent.body === '', 'a 1200 ms silence is cut at the 500 ms stream limit')
  const talking = await timed(`${gw}/api/sse?gap=250&events=6`)
  t.notOk(talking.cut, 'events every 250 ms for 1.5 s: never cut')
  t.equal(talking.body.split('\n\n').length - 1, 6)
})

t.test('open streams never make ordinary requests wait for a connection', async (t) => {
  // Two ordinary connections; three streams open for a while.
  const gw = await gateway(t, { timeoutMs: 2_000, connections: 2 })
  const streams = [1, 2, 3].map(() => timed(`${gw}/api/sse?gap=1500&events=1`))
  await sleep(200)
  const started = performance.now()
  const ordinary = await request(`${gw}/api/late?after=0`, { headers: { authorization: authorization() } })
  t.equal(ordinary.statusCode, 200)
  t.equal(await ordinary.body.text(), '{"late":true}')
  t.ok(performance.now() - started < 1_000, 'answered while every stream is still open')
  for (const stream of await Promise.all(streams)) t.ok(!stream.cut && stream.headAt < 1_000 && stream.body === 'data: 0\n\n', 'each stream opened at once and ran to its end')
})

t.test('the configuration: no stream idle limit unless one is set', async (t) => {
  const base = { DATABASE_URL: 'memory://', SERVICE_UPSTREAM_URL: 'http://127.0.0.1:1' }
  t.equal(loadConfig(base).gateway.upstreamStreamIdleMs, 0)
  t.equal(loadConfig({ ...base, SERVICE_UPSTREAM_STREAM_IDLE_MS: '3600000' }).gateway.upstreamStreamIdleMs, 3_600_000)
  t.throws(() => loadConfig({ ...base, SERVICE_UPSTREAM_STREAM_IDLE_MS: '-1' }), /SERVICE_UPSTREAM_STREAM_IDLE_MS/)
})
