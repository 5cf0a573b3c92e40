/**
 * The MCP list filter on both answer types (a JSON body, an SSE stream): what it removes, what it keeps
 * byte for byte, its closed defaults (unnamed items, unreadable bodies and events, the size limit),
 * order and back-pressure with asynchronous verdicts, and two properties: a body split at random bytes
 * filters as the whole body does, and as an independent model of the rules says.
 */
import t from 'tap'
import fc from 'fast-check'
import assert from 'node:assert/strict'
import { createListFilter, type ListFilter, type ListFilterOptions, type ListKind } from '../../../../src/gateway/mcp/list-filter.js'
import { SseEventTooLargeError, sseEvent } from '../../../../src/core/sse.js'
import { propertyRuns } from '../../../helpers/property-runs.js'

type Allowed = ListFilterOptions['allowed']

interface Run {
  out: Buffer
  error: Error | undefined
  filter: ListFilter
}

/** Writes `chunks` through a fresh filter and collects what comes out, or the error that ended it. */
async function run(options: Partial<ListFilterOptions> & Pick<ListFilterOptions, 'mediaType'>, chunks: readonly (string | Buffer)[]): Promise<Run> {
  const filter = createListFilter({ allowed: () => true, maxBytes: 1 << 20, ...options })
  const out: Buffer[] = []
  filter.on('data', (chunk: Buffer) => out.push(chunk))
  const ended = new Promise<Error | undefined>((resolve) => {
    filter.on('end', () => resolve(undefined))
    filter.on('error', resolve)
  })
  for (const chunk of chunks) filter.write(chunk)
  filter.end()
  const error = await ended
  return { out: Buffer.concat(out), error, filter }
}

const ticks = async (n: number): Promise<void> => { for (let i = 0; i < n; i++) await null }

const onlyNames = (...names: string[]): Allowed => (_kind, name) => names.includes(name)
const tool = (name: unknown): { name: unknown } & Record<string, unknown> => ({ name, description: `the ${String(name)} tool`, inputSchema: { type: 'object' } })
const UNREADABLE = { jsonrpc: '2.0', id: null, error: { code: -32603, message: "The gateway could not read the upstream's list answer." } }

// --- application/json ---

t.test('json: a tools/list answer keeps only allowed tools, in order, and every other member', async (t) => {
  const body = { jsonrpc: '2.0', id: 1, result: { tools: [tool('a'), tool('b'), tool('c'), tool('d')], nextCursor: 'page-2', _meta: { x: 1 } } }
  for (const [label, allowed] of [['sync', onlyNames('d', 'b')], ['async', async (_k: ListKind, n: string) => { await ticks(1); return n === 'b' || n === 'd' }]] as const) {
    const r = await run({ mediaType: 'json', allowed }, [JSON.stringify(body, null, 2)])
    t.equal(r.error, undefined)
    t.same(JSON.parse(r.out.toString()), { ...body, result: { tools: [tool('b'), tool('d')], nextCursor: 'page-2', _meta: { x: 1 } } }, `${label}: b and d kept, in the upstream's order`)
    t.same(Object.keys(JSON.parse(r.out.toString()).result), ['tools', 'nextCursor', '_meta'], `${label}: members keep their order`)
    t.same(r.filter.removed, { tools: 2, prompts: 0, resources: 0, resourceTemplates: 0 }, `${label}: two tools counted as removed`)
  }
})

t.test('json: each kind names its items by its own member; an item without a string name is removed', async (t) => {
  const cases: [ListKind, string, Record<string, unknown>[], string[]][] = [
    ['tools', 'tools', [tool('ok'), tool(7), tool(null), { description: 'no name' }], ['ok']],
    ['prompts', 'prompts', [{ name: 'ok' }, { title: 'ok' }, { name: ['ok'] }], ['ok']],
    ['resources', 'resources', [{ uri: 'file:///ok', name: 'ok' }, { name: 'file:///ok' }, { uri: { href: 'file:///ok' } }], ['file:///ok']],
    ['resourceTemplates', 'resourceTemplates', [{ uriTemplate: 'file:///{ok}', name: 'x' }, { uri: 'file:///{ok}', name: 'file:///{ok}' }], ['file:///{ok}']],
  ]
  for (const [kind, member, items, names] of cases) {
    const asked: string[] = []
    const allowed: Allowed = (k, name) => { asked.push(`${k}:${name}`); return true }
    const body = { jsonrpc: '2.0', id: 'req', result: { [member]: [...items, null, 'ok', 3] } }
    const r = await run({ mediaType: 'json', allowed }, [JSON.stringify(body)])
    const kept = JSON.parse(r.out.toString()).result[member] as unknown[]
    t.same(kept, items.slice(0, 1), `${kind}: only the item named by its own member is kept`)
    t.same(asked, names.map((n) => `${kind}:${n}`), `${kind}: the verdict is asked with the kind and the name`)
    t.equal(r.filter.removed[kind], items.length + 2, `${kind}: every unnamed item counted`)
  }
})

t.test('json: only a verdict of exactly true keeps an item', async (t) => {
  const allowed = ((_k: ListKind, name: string) => (name === 'yes' ? true : name === 'truthy' ? 1 : Promise.resolve('true'))) as unknown as Allowed
  const body = { jsonrpc: '2.0', id: 1, result: { tools: [tool('yes'), tool('truthy'), tool('promised')] } }
  const r = await run({ mediaType: 'json', allowed }, [JSON.stringify(body)])
  t.same(JSON.parse(r.out.toString()).result.tools, [tool('yes')])
})

t.test('json: a body with nothing to rewrite passes byte for byte', async (t) => {
  const cases: [string, string][] = [
    ['an error answer', '{"jsonrpc":"2.0", "id":1, "error":{"code":-32601,"message":"no"}}'],
    ['a list member that is not an array', '{"jsonrpc":"2.0", "id":1, "result":{"tools":{"0":{"name":"x"}}}}'],
    ['a list member outside the result', '{"jsonrpc":"2.0", "id":1, "result":{"content":[]}, "tools":[{"name":"x"}]}'],
    ['a tool result', '{"jsonrpc":"2.0", "id":1, "result":{"content":[{"type":"text","text":"tools"}]}}'],
    ['a notification', '{"jsonrpc":"2.0", "method":"notifications/tools/list_changed"}'],
    ['a JSON string', '"hello"'],
    ['text that cannot hold a list member, JSON or not', '{"id":1} {"id":2}'],
    ['an empty body', ''],
  ]
  for (const [label, body] of cases) {
    const r = await run({ mediaType: 'json', allowed: () => false }, [body])
    t.equal(r.out.toString(), body, label)
  }
})

t.test('json: a list answer is filtered whatever its id, and every list member of a result', async (t) => {
  const list = `{ "jsonrpc": "2.0",\n  "id": 1, "result": {"tools": [{"name":"secret"}, {"name":"a"}]} }`
  for (const [label, body] of [
    ['the number 1', list],
    ['the string "1"', list.replace('"id": 1', '"id": "1"')],
    ['a fraction', list.replace('"id": 1', '"id": 1.5')],
    ['null', list.replace('"id": 1', '"id": null')],
    ['no id at all', list.replace('"id": 1,', '')],
    ['a member name spelt with escapes', list.replace('"tools"', '"t\\u006fols"')],
  ] as const) {
    const r = await run({ mediaType: 'json', allowed: onlyNames('a') }, [body])
    t.same(JSON.parse(r.out.toString()).result.tools, [{ name: 'a' }], label)
  }
  const both = JSON.stringify({ jsonrpc: '2.0', id: 1, result: { tools: [tool('x'), tool('a')], prompts: [{ name: 'a' }, { name: 'x' }], resources: [{ uri: 'x' }] } })
  const r = await run({ mediaType: 'json', allowed: onlyNames('a') }, [both])
  t.same(JSON.parse(r.out.toString()).result, { tools: [tool('a')], prompts: [{ name: 'a' }], resources: [] })
  t.same(r.filter.removed, { tools: 1, prompts: 1, resources: 1, resourceTemplates: 0 })
})

t.test('json: a batch filters each list answer and leaves the other elements alone', async (t) => {
  const batch = [
    { jsonrpc: '2.0', id: 1, result: { tools: [tool('a'), tool('x')] } },
    { jsonrpc: '2.0', id: 2, result: { tools: [tool('a'), tool('x')] } },
    { jsonrpc: '2.0', id: 'p', result: { prompts: [{ name: 'x' }, { name: 'a' }], nextCursor: 'c' } },
    { jsonrpc: '2.0', method: 'notifications/message', params: { level: 'info' } },
    7,
  ]
  const r = await run({ mediaType: 'json', allowed: onlyNames('a') }, [JSON.stringify(batch)])
  t.same(JSON.parse(r.out.toString()), [
    { jsonrpc: '2.0', id: 1, result: { tools: [tool('a')] } },
    { jsonrpc: '2.0', id: 2, result: { tools: [tool('a')] } },
    { jsonrpc: '2.0', id: 'p', result: { prompts: [{ name: 'a' }], nextCursor: 'c' } },
    batch[3],
    7,
  ])
  t.same(r.filter.removed, { tools: 2, prompts: 1, resources: 0, resourceTemplates: 0 })
})

t.test('json: an unreadable body becomes the -32603 error, whatever was in it', async (t) => {
  const deep = `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"x"}],"deep":${'['.repeat(100_000)}${']'.repeat(100_000)}}}`
  for (const [label, body] of [
    ['not JSON', '{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"secret"}]}'],
    ['two JSON values', '{"id":1,"result":{"tools":[]}} {"id":2}'],
    ['nested deeper than JSON.stringify can write back', deep],
  ] as const) {
    const r = await run({ mediaType: 'json', allowed: () => true }, [body])
    t.equal(r.error, undefined, `${label}: no stream error`)
    t.same(JSON.parse(r.out.toString()), UNREADABLE, label)
  }
  const bom = await run({ mediaType: 'json', allowed: () => false }, [Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from('{"id":1,"result":{"tools":[{"name":"x"}]}}')])])
  t.same(JSON.parse(bom.out.toString()), { id: 1, result: { tools: [] } }, 'a leading BOM is read past, as a client does')
})

t.test('json: a body over maxBytes becomes the -32603 error; one of exactly maxBytes passes', async (t) => {
  const body = JSON.stringify({ jsonrpc: '2.0', id: 1, result: { tools: [tool('a')] } })
  const size = Buffer.byteLength(body)
  const exact = await run({ mediaType: 'json', maxBytes: size }, [body.slice(0, 10), body.slice(10)])
  t.same(JSON.parse(exact.out.toString()).result.tools, [tool('a')])
  const over = await run({ mediaType: 'json', maxBytes: size - 1 }, [body.slice(0, 10), body.slice(10)])
  t.same(JSON.parse(over.out.toString()), UNREADABLE)
  const unrelated = JSON.stringify({ jsonrpc: '2.0', id: 1, result: { content: [] } })
  const overUnrelated = await run({ mediaType: 'json', maxBytes: unrelated.length - 1 }, [unrelated])
  t.same(JSON.parse(overUnrelated.out.toString()), UNREADABLE, 'the body is not read, so even an answer without a list is replaced')
})

t.test('json: a verdict that throws or rejects ends the stream with its error', async (t) => {
  const body = JSON.stringify({ jsonrpc: '2.0', id: 1, result: { tools: [tool('a'), tool('b')] } })
  const boom = new Error('policy unavailable')
  const thrown = await run({ mediaType: 'json', allowed: () => { throw boom } }, [body])
  t.equal(thrown.error, boom)
  t.equal(thrown.out.length, 0, 'nothing reached the client')
  const rejected = await run({ mediaType: 'json', allowed: async (_k, n) => { if (n === 'b') throw boom; return true } }, [body])
  t.equal(rejected.error, boom)
  t.equal(rejected.out.length, 0)
})

t.test('json and sse: a verdict that throws after another rejected leaves no rejection unhandled', async (t) => {
  const boom = new Error('policy unavailable')
  const unhandled: unknown[] = []
  const listener = (reason: unknown): void => { unhandled.push(reason) }
  process.on('unhandledRejection', listener)
  t.teardown(() => { process.off('unhandledRejection', listener) })
  const allowed: Allowed = (_k, name) => {
    if (name === 'a') return Promise.reject(boom)
    throw boom
  }
  const body = JSON.stringify([{ id: 1, result: { tools: [tool('a'), tool('b')] } }, { id: 2, result: { tools: [tool('a'), tool('b')] } }])
  for (const mediaType of ['json', 'sse'] as const) {
    const r = await run({ mediaType, allowed }, [mediaType === 'json' ? body : `data: ${body}\n\n`])
    t.equal(r.error, boom, `${mediaType}: the stream ends with the error`)
  }
  await new Promise((resolve) => setTimeout(resolve, 10))
  t.same(unhandled, [], 'no unhandled rejection')
})

t.test('json and sse: verdicts resolving out of order keep the upstream order', async (t) => {
  const names = Array.from({ length: 20 }, (_, i) => `t${i}`)
  // Later items resolve first: item i waits 20 - i microtask turns.
  const allowed: Allowed = async (_k, name) => { const i = Number(name.slice(1)); await ticks(20 - i); return i % 2 === 0 }
  const body = JSON.stringify({ jsonrpc: '2.0', id: 1, result: { tools: names.map(tool) } })
  const json = await run({ mediaType: 'json', allowed }, [body])
  t.same(JSON.parse(json.out.toString()).result.tools.map((x: { name: string }) => x.name), names.filter((_, i) => i % 2 === 0))
  const sse = await run({ mediaType: 'sse', allowed }, [`data: ${body}\n\n`])
  t.same(JSON.parse(sse.out.toString().slice('data: '.length)).result.tools.map((x: { name: string }) => x.name), names.filter((_, i) => i % 2 === 0))
})

t.test('json: a 50-tool list keeps exactly the allowed tools', async (t) => {
  const tools = Array.from({ length: 50 }, (_, i) => ({ ...tool(`tool_${i}`), annotations: { readOnlyHint: i % 2 === 0 } }))
  const allowedNames = new Set(tools.filter((_, i) => i % 3 === 0 || i === 49).map((x) => x.name as string))
  const body = JSON.stringify({ jsonrpc: '2.0', id: 50, result: { tools, nextCursor: 'next' } })
  const r = await run({ mediaType: 'json', allowed: (_k, n) => allowedNames.has(n) }, [body])
  const out = JSON.parse(r.out.toString())
  t.same(out.result.tools, tools.filter((x) => allowedNames.has(x.name as string)))
  t.equal(out.result.tools.length, 18)
  t.equal(out.result.nextCursor, 'next')
  t.equal(r.filter.removed.tools, 32)
})

// --- text/event-stream ---

const notification = { jsonrpc: '2.0', method: 'notifications/progress', params: { progressToken: 1, progress: 0.5 } }
const serverRequest = { jsonrpc: '2.0', id: 1, method: 'sampling/createMessage', params: { messages: [], maxTokens: 1 } }
const toolsAnswer = { jsonrpc: '2.0', id: 1, result: { tools: [tool('a'), tool('secret'), tool('b')], nextCursor: 'n' } }

t.test('sse: notifications and a server request before the answer pass byte for byte; the answer is filtered with its fields', async (t) => {
  const head = `: stream open\r\n\r\nevent: message\r\ndata: ${JSON.stringify(notification)}\r\n\r\nid: 41\ndata: ${JSON.stringify(serverRequest)}\n\n`
  const answer = `event: message\nid: 42\nretry: 3000\ndata: ${JSON.stringify(toolsAnswer)}\n\n`
  const tail = `data: ${JSON.stringify({ jsonrpc: '2.0', id: 2, result: { tools: [tool('secret')] } })}\n\n`
  for (const [label, allowed] of [['sync', onlyNames('a', 'b')], ['async', async (_k: ListKind, n: string) => { await ticks(3); return n !== 'secret' }]] as const) {
    const r = await run({ mediaType: 'sse', allowed }, [head + answer + tail])
    t.equal(r.error, undefined)
    const filtered = sseEvent({ event: 'message', id: '42', retry: 3000, data: JSON.stringify({ ...toolsAnswer, result: { tools: [tool('a'), tool('b')], nextCursor: 'n' } }) })
    const tailFiltered = sseEvent({ data: JSON.stringify({ jsonrpc: '2.0', id: 2, result: { tools: [] } }) })
    t.equal(r.out.toString(), head + filtered + tailFiltered, `${label}: the server request is no answer and passes; every list answer is filtered, whatever its id`)
    t.same(r.filter.removed, { tools: 2, prompts: 0, resources: 0, resourceTemplates: 0 })
  }
})

t.test('sse: an event whose data could hold a list and is not JSON is dropped; comments, events without data and data that cannot hold one pass', async (t) => {
  const pass = ': ping\n\nevent: keepalive\nid: 3\n\nretry: 10\n\nid: prime-1\nretry: 1000\ndata: \n\ndata: not json\n\ndata:  \n\n'
  const r = await run({ mediaType: 'sse' }, [`${pass}data: {"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"x"}]\n\ndata: not json, "prompts"\n\ndata: "\\u0074"\n\ndata: {"id":1,\ndata: "result":{"tools":[]}}\n\n`])
  t.equal(r.out.toString(), `${pass}${sseEvent({ data: '"\\u0074"' })}${sseEvent({ data: '{"id":1,"result":{"tools":[]}}' })}`, 'truncated and non-JSON data that names a list dropped; multi-line JSON data read joined')
})

t.test('sse: a list answer that cannot be written back is dropped', async (t) => {
  const deep = `{"id":1,"result":{"tools":[{"name":"x"}]},"deep":${'['.repeat(100_000)}${']'.repeat(100_000)}}`
  const r = await run({ mediaType: 'sse' }, [`data: ${deep}\n\n: after\n\n`])
  t.equal(r.error, undefined)
  t.equal(r.out.toString(), ': after\n\n')
})

t.test('sse: an event over maxBytes ends the stream with an error, after the events before it', async (t) => {
  const first = 'data: {"jsonrpc":"2.0","method":"x"}\n\n'
  const r = await run({ mediaType: 'sse', maxBytes: 64 }, [first, `data: ${'x'.repeat(40)}`, `${'y'.repeat(40)}\n\n`])
  t.type(r.error, SseEventTooLargeError)
  t.equal(r.out.toString(), first)
  const same = await run({ mediaType: 'sse', maxBytes: 64 }, [`${first}data: ${'x'.repeat(80)}\n\n`])
  t.type(same.error, SseEventTooLargeError, 'in the same chunk')
  t.equal(same.out.toString(), first, 'the event before it still passed')
})

t.test('sse: each event leaves as soon as it is complete; an unfinished last event is dropped', async (t) => {
  const filter = createListFilter({ mediaType: 'sse', allowed: () => true, maxBytes: 1024 })
  const out: string[] = []
  filter.on('data', (chunk: Buffer) => out.push(chunk.toString()))
  filter.write('data: {"a":1}\n\ndata: {"b"')
  await new Promise((resolve) => setImmediate(resolve))
  t.same(out, ['data: {"a":1}\n\n'], 'the complete event is out before the stream goes on')
  filter.write(':2}\n')
  filter.end('data: {"c":3}')
  await new Promise((resolve) => filter.on('end', resolve))
  t.same(out, ['data: {"a":1}\n\n'], 'never completed: dropped at the end')
})

t.test('sse: a pending verdict holds the following events and chunks (back-pressure through the callback)', async (t) => {
  let release: (v: boolean) => void = () => {}
  const allowed: Allowed = () => new Promise<boolean>((resolve) => { release = resolve })
  const filter = createListFilter({ mediaType: 'sse', allowed, maxBytes: 1024, })
  const out: string[] = []
  filter.on('data', (chunk: Buffer) => out.push(chunk.toString()))
  filter.write(': before\n\ndata: {"id":1,"result":{"tools":[{"name":"a"}]}}\n\n: same chunk\n\n')
  filter.write(': next chunk\n\n')
  await ticks(10)
  t.same(out, [': before\n\n'], 'nothing after the undecided answer has left')
  t.ok(filter.writableLength > 0, 'the next chunk waits in the writable buffer')
  release(true)
  filter.end()
  await new Promise((resolve) => filter.on('end', resolve))
  t.same(out, [': before\n\n', 'data: {"id":1,"result":{"tools":[{"name":"a"}]}}\n\n', ': same chunk\n\n', ': next chunk\n\n'])
})

t.test('sse: a verdict that throws or rejects ends the stream with its error', async (t) => {
  const boom = new Error('policy unavailable')
  const stream = ': a\n\ndata: {"id":1,"result":{"tools":[{"name":"a"}]}}\n\n: b\n\n'
  for (const [label, allowed] of [['throws', () => { throw boom }], ['rejects', async () => { throw boom }]] as const) {
    const r = await run({ mediaType: 'sse', allowed }, [stream])
    t.equal(r.error, boom, label)
    t.equal(r.out.toString(), ': a\n\n', `${label}: nothing from the answer on`)
  }
})

t.test('a filter destroyed while a verdict is pending (the client went away) settles quietly', async (t) => {
  for (const mediaType of ['json', 'sse'] as const) {
    let release: (v: boolean) => void = () => {}
    const filter = createListFilter({ mediaType, allowed: () => new Promise((resolve) => { release = resolve }), maxBytes: 1024 })
    const seen: string[] = []
    filter.on('data', () => seen.push('data'))
    filter.on('error', (e: Error) => seen.push(`error ${e.message}`))
    const body = '{"id":1,"result":{"tools":[{"name":"a"}]}}'
    if (mediaType === 'json') filter.end(body)
    else filter.write(`data: ${body}\n\n: after\n\n`)
    await new Promise((resolve) => setImmediate(resolve))
    filter.destroy()
    release(true)
    await new Promise((resolve) => setTimeout(resolve, 10))
    t.same(seen, [], `${mediaType}: nothing pushed, no error`)
  }
})

t.test('createListFilter refuses options it cannot honour', async (t) => {
  const base = { allowed: () => true }
  t.throws(() => createListFilter({ ...base, mediaType: 'json', maxBytes: 0 }), RangeError)
  t.throws(() => createListFilter({ ...base, mediaType: 'sse', maxBytes: 1.5 }), RangeError)
  t.throws(() => createListFilter({ ...base, mediaType: 'xml' as 'json', maxBytes: 10 }), RangeError)
})

t.test('sse: a chunk ending on the CR of a CRLF gives the same bytes as the whole stream, whatever happens to either event', async (t) => {
  const list = 'data: {"id":1,"result":{"tools":[{"name":"a"},{"name":"b"}]}}'
  const events = { pass: ': keep\r\n\r\n', rewrite: `${list}\r\n\r\n`, drop: 'data: nope "tools"\r\n\r\n' }
  for (const [a, first] of Object.entries(events)) {
    for (const [b, second] of Object.entries(events)) {
      for (const ending of ['', 'data: unfinished']) {
        const bytes = Buffer.from(first + second + ending)
        const whole = await run({ mediaType: 'sse', allowed: onlyNames('a') }, [bytes])
        const cut = first.length - 1
        const split = await run({ mediaType: 'sse', allowed: onlyNames('a') }, [bytes.subarray(0, cut), bytes.subarray(cut, cut + second.length), bytes.subarray(cut + second.length)])
        t.equal(split.out.toString(), whole.out.toString(), `${a} then ${b}${ending === '' ? '' : ', then an unfinished event'}`)
      }
    }
    const bytes = Buffer.from(first)
    const whole = await run({ mediaType: 'sse', allowed: onlyNames('a') }, [bytes])
    const split = await run({ mediaType: 'sse', allowed: onlyNames('a') }, [bytes.subarray(0, -1), bytes.subarray(-1)])
    t.equal(split.out.toString(), whole.out.toString(), `${a}, the stream ending on the LF alone`)
  }
})

// --- properties: split anywhere, filtered as the whole body is and as the model says ---

const NAMES = ['read', 'write', 'delete', 'é€', '😀', 'file:///a', 'x']
const kinds: ListKind[] = ['tools', 'prompts', 'resources', 'resourceTemplates']
const memberOf: Record<ListKind, string> = { tools: 'name', prompts: 'name', resources: 'uri', resourceTemplates: 'uriTemplate' }
const idArb = fc.oneof(fc.integer({ min: 0, max: 3 }), fc.constantFrom('0', '1', 'a'))

const itemArb = (kind: ListKind): fc.Arbitrary<unknown> => fc.oneof(
  { weight: 4, arbitrary: fc.record({ [memberOf[kind]]: fc.constantFrom(...NAMES), extra: fc.constantFrom(1, 'two', null) }) },
  { weight: 1, arbitrary: fc.constantFrom({}, null, { [memberOf[kind]]: 5 }, 'x') },
)
const listAnswerArb = fc.constantFrom(...kinds).chain((kind) => fc.record({
  jsonrpc: fc.constant('2.0'),
  id: idArb,
  result: fc.record({ [kind]: fc.array(itemArb(kind), { maxLength: 6 }), nextCursor: fc.constantFrom('c1', 'c2') }, { requiredKeys: [kind] }),
}))
const messageArb = fc.oneof(
  { weight: 3, arbitrary: listAnswerArb },
  { weight: 1, arbitrary: fc.record({ jsonrpc: fc.constant('2.0'), method: fc.constantFrom('notifications/progress', 'ping'), params: fc.constant({ p: 'é' }) }) },
  { weight: 1, arbitrary: fc.record({ jsonrpc: fc.constant('2.0'), id: idArb, method: fc.constant('elicitation/create') }) },
  { weight: 1, arbitrary: fc.record({ jsonrpc: fc.constant('2.0'), id: idArb, error: fc.constant({ code: -1, message: 'no' }) }) },
)
/** The policy: which names each kind allows; the verdict may come late by a few microtask turns. */
const policyArb = fc.record({ allowedNames: fc.subarray(NAMES), async: fc.boolean(), delays: fc.array(fc.nat({ max: 5 }), { minLength: NAMES.length, maxLength: NAMES.length }) })
type Policy = { allowedNames: string[]; async: boolean; delays: number[] }

function allowedOf(policy: Policy): Allowed {
  return (_kind, name) => {
    const verdict = policy.allowedNames.includes(name)
    return policy.async ? ticks(policy.delays[NAMES.indexOf(name)] ?? 0).then(() => verdict) : verdict
  }
}

/** The model of the rules: every list member of a result keeps its named, allowed items; null when there is none. */
function modelFilter(message: unknown, policy: Policy): unknown {
  const m = message as { id?: unknown; result?: Record<string, unknown> }
  if (typeof m !== 'object' || m === null || typeof m.result !== 'object' || m.result === null) return null
  const kind = kinds.find((k) => Array.isArray(m.result![k]))
  if (kind === undefined) return null
  const items = (m.result[kind] as unknown[]).filter((item) => {
    const name = (item as Record<string, unknown> | null)?.[memberOf[kind]]
    return typeof name === 'string' && policy.allowedNames.includes(name)
  })
  return { ...m, result: { ...m.result, [kind]: items } }
}

/** A cut at a random byte, or right after the n-th CR (the one place where chunking changes what a reader sees). */
type Cut = { at: number } | { afterCr: number }
const cutsArb = fc.array(fc.oneof(fc.record({ at: fc.nat() }), fc.record({ afterCr: fc.nat() })), { maxLength: 10 })

function splitAt(bytes: Buffer, cuts: readonly Cut[]): Buffer[] {
  const crs = [...bytes.keys()].filter((i) => bytes[i] === 0x0d)
  const positions = cuts.map((c) => ('at' in c ? c.at % (bytes.length + 1) : crs.length === 0 ? 0 : (crs[c.afterCr % crs.length] as number) + 1))
  const at = [...new Set(positions)].sort((a, b) => a - b)
  const chunks: Buffer[] = []
  let start = 0
  for (const cut of at) { chunks.push(bytes.subarray(start, cut)); start = cut }
  chunks.push(bytes.subarray(start))
  return chunks
}

t.test('property json: a body split at random bytes filters as the whole body and as the model', async (t) => {
  const bodyArb = fc.oneof(messageArb, fc.array(messageArb, { minLength: 1, maxLength: 4 }))
  await fc.assert(fc.asyncProperty(bodyArb, policyArb, cutsArb, async (body, policy, cuts) => {
    const bytes = Buffer.from(JSON.stringify(body, null, 1))
    const options = { mediaType: 'json' as const, allowed: allowedOf(policy) }
    const whole = await run(options, [bytes])
    const split = await run(options, splitAt(bytes, cuts))
    assert.equal(split.out.toString(), whole.out.toString(), 'split equals whole')
    const messages = Array.isArray(body) ? body : [body]
    const filtered = messages.map((m) => modelFilter(m, policy))
    if (filtered.every((m) => m === null)) assert.equal(whole.out.toString(), bytes.toString(), 'untouched: byte for byte')
    else {
      const expected = messages.map((m, i) => filtered[i] ?? m)
      assert.equal(whole.out.toString(), JSON.stringify(Array.isArray(body) ? expected : expected[0]), 'filtered as the model says')
    }
  }), propertyRuns(200))
  t.pass('json property held')
})

const eolArb = fc.constantFrom('\n', '\r\n', '\r')
const sseItemArb = fc.oneof(
  { weight: 4, arbitrary: fc.record({ message: messageArb, id: fc.option(fc.constantFrom('7', 'é'), { nil: undefined }), eol: eolArb }) },
  { weight: 1, arbitrary: fc.record({ comment: fc.constantFrom(': ping', ':'), eol: eolArb }) },
  { weight: 1, arbitrary: fc.record({ garbage: fc.constantFrom('data: {"tools":', 'data: nope', 'data: {"id":'), eol: eolArb }) },
)

t.test('property sse: a stream split at random bytes filters as the whole stream and as the model', async (t) => {
  await fc.assert(fc.asyncProperty(fc.array(sseItemArb, { maxLength: 6 }), policyArb, cutsArb, async (items, policy, cuts) => {
    let input = ''
    let expected = ''
    for (const item of items) {
      const e = item.eol
      if ('comment' in item) {
        const text = `${item.comment}${e}${e}`
        input += text
        expected += text
      } else if ('garbage' in item) {
        const text = `${item.garbage}${e}${e}`
        input += text
        // Data that cannot name a list member passes unparsed; data that could and is not JSON is dropped.
        if (!item.garbage.includes('s"')) expected += text
      } else {
        const json = JSON.stringify(item.message)
        const text = `${item.id === undefined ? '' : `id: ${item.id}${e}`}data: ${json}${e}${e}`
        input += text
        const filtered = modelFilter(item.message, policy)
        expected += filtered === null ? text : sseEvent({ id: item.id, data: JSON.stringify(filtered) })
      }
    }
    const bytes = Buffer.from(input)
    const options = { mediaType: 'sse' as const, allowed: allowedOf(policy) }
    const whole = await run(options, [bytes])
    assert.equal(whole.error, undefined)
    assert.equal(whole.out.toString(), expected, 'filtered as the model says')
    const split = await run(options, splitAt(bytes, cuts))
    assert.equal(split.error, undefined)
    assert.equal(split.out.toString(), whole.out.toString(), 'split equals whole')
  }), propertyRuns(200))
  t.pass('sse property held')
})

t.test('an answer with a content coding is never passed for holding no list', async (t) => {
  const coded = Buffer.from([0x1f, 0x8b, 0x08, 0x00, 0x61, 0x62])
  const json = await run({ mediaType: 'json', encoded: true }, [coded])
  t.same(JSON.parse(json.out.toString()), UNREADABLE, 'json: replaced by the error')
  const sse = await run({ mediaType: 'sse', encoded: true }, ['data: x\n\n: comment\n\n'])
  t.equal(sse.out.toString(), ': comment\n\n', 'sse: an event with data that does not parse is dropped')
  const plain = await run({ mediaType: 'json' }, [coded])
  t.same(plain.out, coded, 'without a coding, bytes that cannot hold a list pass')
})
