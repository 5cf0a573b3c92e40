/**
 * Keyset pagination of list endpoints (docs/wire-contract.md §3, §13): `?limit=` (default 50, 1..500), opaque
 * `?cursor=`, `nextCursor` beside `data`, null on the last page.
 */
import t from 'tap'
import { createOrg, startTestAdmin, type TestAdmin } from '../../helpers/admin.js'
import { expectEnvelope, expectError, sleep, type Asserts } from '../../helpers/expect.js'

interface Listing {
  pages: string[][]
  cursors: (string | null)[]
}

/** Follows nextCursor from the first page to the end and returns every page's ids. */
async function walk(t: Asserts, admin: TestAdmin, path: string, limit: number, key?: string): Promise<Listing> {
  const pages: string[][] = []
  const cursors: (string | null)[] = []
  let cursor: string | null = null
  for (let guard = 0; guard < 20; guard++) {
    const query: string = `?limit=${limit}${cursor === null ? '' : `&cursor=${encodeURIComponent(cursor)}`}`
    const res = await admin.request('GET', `${path}${query}`, key === undefined ? {} : { key })
    expectEnvelope(t, res, 200, `${path} page ${pages.length + 1}`)
    t.ok('nextCursor' in res.body, 'nextCursor is present on every page', {})
    pages.push((res.body.data as { id: string }[]).map((item) => item.id))
    cursor = res.body.nextCursor as string | null
    cursors.push(cursor)
    if (cursor === null) break
  }
  return { pages, cursors }
}

function checkChain(t: Asserts & { same(a: unknown, b: unknown, m: string): boolean }, listing: Listing, expected: string[], label: string): void {
  t.same(listing.pages.map((p) => p.length), [3, 3, 1], `${label}: pages of 3, 3 and 1`)
  t.ok(typeof listing.cursors[0] === 'string' && listing.cursors[0] !== '', `${label}: first page has a cursor`, {})
  t.ok(typeof listing.cursors[1] === 'string' && listing.cursors[1] !== listing.cursors[0], `${label}: second page has a new cursor`, {})
  t.equal(listing.cursors[2], null, `${label}: last page has nextCursor null`, {})
  const all = listing.pages.flat()
  t.equal(new Set(all).size, all.length, `${label}: no duplicates`, {})
  t.same(all, expected, `${label}: every item once, in creation order`)
}

t.test('agents: pages, cursors and limits', async (t) => {
  const admin = await startTestAdmin(t)
  const ids: string[] = []
  for (let i = 0; i < 7; i++) {
    const res = await admin.request('POST', '/v1/agents', { body: { name: `agent-${i}` } })
    t.equal(res.status, 201)
    ids.push(res.body.data.id)
    // creation times are kept to the millisecond: keep them distinct so "creation order" is defined
    await sleep(3)
  }

  await t.test('limit=3 walks 3, 3, 1 in creation order', async (t) => {
    const listing = await walk(t, admin, '/v1/agents', 3)
    checkChain(t, listing, ids, 'agents')
    const first = await admin.request('GET', '/v1/agents?limit=3')
    t.same((first.body.data as { name: string }[]).map((a) => a.name), ['agent-0', 'agent-1', 'agent-2'], 'names of the first page')
    t.notOk('agent_card' in first.body.data[0], 'list items leave the agent card out')
  })

  await t.test('the same cursor gives the same page', async (t) => {
    const first = await admin.request('GET', '/v1/agents?limit=3')
    const cursor = first.body.nextCursor as string
    const a = await admin.request('GET', `/v1/agents?limit=3&cursor=${encodeURIComponent(cursor)}`)
    const b = await admin.request('GET', `/v1/agents?limit=3&cursor=${encodeURIComponent(cursor)}`)
    t.same(a.body.data, b.body.data, 'repeatable')
    t.same((a.body.data as { id: string }[]).map((x) => x.id), ids.slice(3, 6))
    const wider = await admin.request('GET', `/v1/agents?limit=10&cursor=${encodeURIComponent(cursor)}`)
    t.same((wider.body.data as { id: string }[]).map((x) => x.id), ids.slice(3), 'a cursor works with another limit')
    t.equal(wider.body.nextCursor, null)
  })

  await t.test('limit boundaries', async (t) => {
    const exact = await admin.request('GET', '/v1/agents?limit=7')
    t.equal(exact.body.data.length, 7)
    t.equal(exact.body.nextCursor, null, 'a page that holds everything has no next cursor')
    const short = await admin.request('GET', '/v1/agents?limit=6')
    t.equal(short.body.data.length, 6)
    t.type(short.body.nextCursor, 'string', 'one more item means one more page')
    const rest = await admin.request('GET', `/v1/agents?limit=6&cursor=${encodeURIComponent(short.body.nextCursor)}`)
    t.same((rest.body.data as { id: string }[]).map((x) => x.id), [ids[6]])
    t.equal(rest.body.nextCursor, null)
    const byDefault = await admin.request('GET', '/v1/agents')
    t.equal(byDefault.body.data.length, 7, 'default limit is above 7')
    t.equal(byDefault.body.nextCursor, null)
    t.equal((await admin.request('GET', '/v1/agents?limit=1')).body.data.length, 1, 'limit=1 is allowed')
    t.equal((await admin.request('GET', '/v1/agents?limit=500')).status, 200, 'limit=500 is allowed')
    const emptyCursor = await admin.request('GET', '/v1/agents?cursor=')
    t.equal(emptyCursor.status, 200, 'an empty cursor is the first page')
    t.equal(emptyCursor.body.data.length, 7)
  })

  await t.test('bad limits and cursors are 400', async (t) => {
    for (const limit of ['0', '501', 'abc', '-1', '2.5', '1e3', '']) {
      expectError(t, await admin.request('GET', `/v1/agents?limit=${limit}`), 400, 'invalid_request', `limit=${limit}`)
    }
    const notOurs = Buffer.from(JSON.stringify({ after: 3 })).toString('base64url')
    const wrongShape = Buffer.from(JSON.stringify(['not a date', ids[0]])).toString('base64url')
    for (const [label, cursor] of [
      ['garbage', 'garbage'],
      ['punctuation', '!!!'],
      ['not base64 JSON', 'AAAA'],
      ['JSON object', notOurs],
      ['bad date', wrongShape],
    ] as const) {
      expectError(t, await admin.request('GET', `/v1/agents?cursor=${encodeURIComponent(cursor)}`), 400, 'invalid_cursor', `cursor ${label}`)
    }
    expectError(t, await admin.request('GET', `/v1/agents?cursor=${'A'.repeat(201)}`), 400, 'invalid_request', 'cursor longer than 200 characters')
    expectError(t, await admin.request('GET', '/v1/agents?offset=3'), 400, 'invalid_request', 'unknown query parameter')
  })

  await t.test('a cursor that decodes but names no valid position is 400, not 500', async (t) => {
    // Regression: a cursor is only accepted when it holds a millisecond ISO time and a UUID, so nothing
    // reaches PostgreSQL's ::uuid / ::timestamptz casts that they would refuse (a 500 before).
    for (const [label, position] of [
      ['id not a UUID', ['2020-01-01T00:00:00.000Z', 'abc']],
      ['date PostgreSQL cannot read', ['1', ids[0]]],
    ] as const) {
      const cursor = Buffer.from(JSON.stringify(position)).toString('base64url')
      const res = await admin.request('GET', `/v1/agents?cursor=${cursor}`)
      t.ok(res.status < 500, `${label}: not a 5xx`)
      expectError(t, res, 400, 'invalid_cursor', label)
    }
  })

  await t.test('keyset pagination is stable under inserts and deletes', async (t) => {
    const first = await admin.request('GET', '/v1/agents?limit=3')
    // delete the item the cursor points after, and add a new one, between the two calls
    t.equal((await admin.request('DELETE', `/v1/agents/${ids[2]}`)).status, 204)
    await sleep(3)
    const added = await admin.request('POST', '/v1/agents', { body: { name: 'late' } })
    const rest = await walk(t, admin, '/v1/agents', 3)
    t.same(rest.pages.flat(), [...ids.slice(0, 2), ...ids.slice(3), added.body.data.id], 'fresh walk sees the change')
    const second = await admin.request('GET', `/v1/agents?limit=10&cursor=${encodeURIComponent(first.body.nextCursor)}`)
    t.equal(second.status, 200, 'the cursor of a deleted item still works')
    t.same((second.body.data as { id: string }[]).map((x) => x.id), [...ids.slice(3), added.body.data.id], 'continues after the deleted item, no duplicates, new item at the end')
  })

  await t.test('another org neither sees nor pages into these agents', async (t) => {
    const other = await createOrg(admin, 'other')
    const first = await admin.request('GET', '/v1/agents?limit=3')
    const foreign = await admin.request('GET', `/v1/agents?limit=3&cursor=${encodeURIComponent(first.body.nextCursor)}`, { key: other.key })
    t.equal(foreign.status, 200)
    t.same(foreign.body.data, [], 'a borrowed cursor reveals nothing')
    t.equal(foreign.body.nextCursor, null)
  })
})

t.test('keys: pages, cursors and limits', async (t) => {
  const admin = await startTestAdmin(t)
  const initial = await admin.request('GET', '/v1/keys')
  t.equal(initial.body.data.length, 1, 'the bootstrap operator key exists')
  const ids: string[] = [initial.body.data[0].id]
  await sleep(3)
  for (let i = 0; i < 6; i++) {
    const res = await admin.request('POST', '/v1/keys', { body: { name: `key-${i}` } })
    t.equal(res.status, 201)
    ids.push(res.body.data.id)
    await sleep(3)
  }

  const listing = await walk(t, admin, '/v1/keys', 3)
  checkChain(t, listing, ids, 'keys')
  const page = await admin.request('GET', '/v1/keys?limit=3')
  for (const item of page.body.data as Record<string, unknown>[]) t.notOk('key' in item, 'listed keys carry no secret')

  for (const limit of ['0', '501', 'abc']) {
    expectError(t, await admin.request('GET', `/v1/keys?limit=${limit}`), 400, 'invalid_request', `keys limit=${limit}`)
  }
  t.equal((await admin.request('GET', '/v1/keys?limit=500')).status, 200, 'keys limit=500 is allowed')
  expectError(t, await admin.request('GET', '/v1/keys?cursor=garbage'), 400, 'invalid_cursor', 'keys cursor garbage')
  expectError(t, await admin.request('GET', `/v1/keys?cursor=${Buffer.from('[1,2]').toString('base64url')}`), 400, 'invalid_cursor', 'keys cursor of wrong types')

  const other = await createOrg(admin, 'other')
  const foreign = await walk(t, admin, '/v1/keys', 3, other.key)
  t.equal(foreign.pages.flat().length, 1, 'another org pages through its own single key only')
  t.notOk(foreign.pages.flat().some((id) => ids.includes(id)), 'and none of this org\'s keys')
})
