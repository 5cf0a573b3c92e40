/**
 * `GET /v1/gateway/watch` on the admin plane as the composition builds it: the registry key in its header
 * only, the query validated, the workspace the key's own, the number of streams bounded; `ready` at once,
 * then the notices this instance hears: a policy change of the stream's organization (none of another),
 * a revoked jti, a key file change, a heartbeat comment, and `resync` when a LISTEN was lost and restored.
 * Exempt from the per-key rate limit, as gateway reports are.
 */
import t from 'tap'
import { rotateKeyFile } from '../../../src/authority/key-ring.js'
import { SseReader, type SseEvent } from '../../../src/core/sse.js'
import type { Database } from '../../../src/db/database.js'
import { createOrg, startTestAdmin } from '../../helpers/admin.js'
import { approveOrgPolicy, createWorld, revokeBadge } from '../../helpers/contracts/snapshot-source.js'
import { createTestDatabase } from '../../helpers/database.js'

t.setTimeout(120_000)

// The real database, with the LISTEN resync callbacks kept so the test can play a lost connection.
const real = await createTestDatabase(t)
const resyncs: (() => void)[] = []
const db: Database = Object.create(real.db, {
  listen: {
    value: (channel: string, onNotify: (payload: string) => void, onResync?: () => void) => {
      if (onResync !== undefined) resyncs.push(onResync)
      return real.db.listen(channel, onNotify, onResync)
    },
  },
})
const admin = await startTestAdmin(t, {
  SERVICE_GATEWAY_WATCH_STREAMS_MAX: '3', SERVICE_GATEWAY_WATCH_HEARTBEAT: '200ms', SERVICE_RATE_LIMIT_PER_MINUTE: '20',
}, { database: { ...real, db } })
const world = await createWorld(admin, 'watch')
const other = await createOrg(admin, 'watch-other')

interface Stream {
  readonly status: number
  /** The server ended the stream. */
  ended(): boolean
  readonly type: string | null
  readonly body: any
  next(match: (e: SseEvent) => boolean, ms?: number): Promise<SseEvent | undefined>
  readonly raw: () => string
  close(): void
}

async function open(query: string, headers: Record<string, string>): Promise<Stream> {
  const abort = new AbortController()
  const res = await fetch(`${admin.url}/v1/gateway/watch${query}`, { headers, signal: abort.signal })
  if (res.status !== 200) {
    const body = await res.json()
    return { status: res.status, type: res.headers.get('content-type'), body, ended: () => true, next: async () => undefined, raw: () => '', close: () => {} }
  }
  const events: SseEvent[] = []
  let text = ''
  let ended = false
  const reader = new SseReader(1 << 16)
  void (async () => {
    try {
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
        text += Buffer.from(chunk).toString('utf8')
        reader.push(chunk, (e) => events.push(e))
      }
      ended = true
    } catch {
      // aborted
    }
  })()
  let read = 0
  t.teardown(() => abort.abort())
  return {
    status: res.status, type: res.headers.get('content-type'), body: null, ended: () => ended, raw: () => text, close: () => abort.abort(),
    async next(match, ms = 5000) {
      const deadline = Date.now() + ms
      while (Date.now() < deadline) {
        while (read < events.length) {
          const e = events[read++] as SseEvent
          if (match(e)) return e
        }
        await new Promise((r) => setTimeout(r, 10))
      }
      return undefined
    },
  }
}
const key = (k: string): Record<string, string> => ({ 'x-service-registry-key': k })
const named = (name: string) => (e: SseEvent): boolean => e.event === name

t.test('authentication and the query', async (t) => {
  t.match(await open('', {}), { status: 401 }, 'no key')
  t.match(await open('', { authorization: `Bearer ${world.key}` }), { status: 401, body: { error: 'unauthorized' } }, 'a bearer is not the registry key header')
  t.match(await open('', key('sk_wrong')), { status: 401 }, 'a wrong key')
  t.match(await open('?workspace=not-a-uuid', key(world.key)), { status: 400 }, 'a workspace that is no UUID')
  t.match(await open(`?workspace=${world.orgId}&x=1`, key(world.key)), { status: 400 }, 'an unknown parameter')
  t.match(await open(`?workspace=${other.orgId}`, key(world.key)), { status: 404, body: { error: 'org_not_found' } }, 'another organization\'s workspace')
})

t.test('ready at once, then the notices of this instance, and heartbeats', async (t) => {
  const stream = await open(`?workspace=${world.orgId}`, key(world.key))
  t.equal(stream.status, 200)
  t.match(stream.type, /^text\/event-stream/)
  const ready = await stream.next(named('ready'))
  t.same(JSON.parse(ready?.data ?? '{}'), { heartbeat_ms: 200 }, 'ready names the heartbeat interval')
  const foreign = await open(`?workspace=${other.orgId}`, key(other.key))
  t.ok(await foreign.next(named('ready')))

  await approveOrgPolicy(admin, world, 'version: "1"\nmin_trust_level: DV\n')
  t.same(JSON.parse((await stream.next(named('policy')))?.data ?? '{}'), { org_id: world.orgId }, 'a policy change of its organization')
  await revokeBadge(admin, world, world.badges[0]!.jti)
  t.same(JSON.parse((await stream.next(named('revoked')))?.data ?? '{}'), { jti: world.badges[0]!.jti }, 'a revoked jti')
  await rotateKeyFile(admin.keyRing.file)
  t.ok(await stream.next(named('keys')), 'a key file change, noticed by this instance')
  await new Promise((r) => setTimeout(r, 500))
  t.match(stream.raw(), /: heartbeat\n\n/, 'heartbeat comments')
  t.notOk(await foreign.next(named('policy'), 300), 'another organization\'s stream hears nothing of this one\'s policies')
  stream.close()
  foreign.close()
})

t.test('a lost and restored LISTEN tells every stream to resync', async (t) => {
  const stream = await open(`?workspace=${world.orgId}`, key(world.key))
  t.ok(await stream.next(named('ready')))
  t.ok(resyncs.length >= 2, 'the composition listens with a resync callback (policies, revocations)')
  for (const resync of resyncs) resync()
  t.ok(await stream.next(named('resync')), 'resync')
  stream.close()
})

t.test('a deleted key ends its streams; another key\'s stay', async (t) => {
  const created = await admin.request('POST', '/v1/keys', { key: world.key, body: { name: 'watch-doomed' } })
  t.equal(created.status, 201)
  const doomed = await open('', key(created.body.data.key))
  const kept = await open('', key(world.key))
  t.ok(await doomed.next(named('ready')))
  t.ok(await kept.next(named('ready')))
  const deleted = await admin.request('DELETE', `/v1/keys/${created.body.data.id}`, { key: world.key })
  t.ok(deleted.status < 300, `deleted (${deleted.status})`)
  const deadline = Date.now() + 5000
  while (!doomed.ended() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20))
  t.ok(doomed.ended(), 'the deleted key\'s stream ended')
  t.notOk(kept.ended(), 'the other stream is open')
  t.equal((await open('', key(created.body.data.key))).status, 401, 'and the key opens no new one')
  kept.close()
})

t.test('the number of streams is bounded; a freed slot is reused; no rate limit applies', async (t) => {
  // The earlier tests' streams are gone once the server saw their sockets close.
  const opened = async (): Promise<Stream> => {
    let stream = await open('', key(world.key))
    for (let tries = 0; stream.status === 503 && tries < 50; tries++) {
      await new Promise((r) => setTimeout(r, 20))
      stream = await open('', key(world.key))
    }
    return stream
  }
  const streams: Stream[] = []
  for (let i = 0; i < 3; i++) streams.push(await opened())
  for (const s of streams) t.equal(s.status, 200)
  const refused = await open('', key(world.key))
  t.match(refused, { status: 503, body: { error: 'watch_limit_reached' } }, 'one more than SERVICE_GATEWAY_WATCH_STREAMS_MAX')
  for (const s of streams) s.close()
  // More opens with one key than its 20 a minute: each stream closed frees its slot, and none is limited.
  const statuses: number[] = []
  for (let i = 0; i < 25; i++) {
    const stream = await opened()
    statuses.push(stream.status)
    stream.close()
  }
  t.same(new Set(statuses), new Set([200]), 'every stream opened, past the per-key rate limit, in freed slots')
})
