/**
 * The server-sent events reader and writer: the WHATWG parsing rules one by one (line ends, comments,
 * the optional space, multi-line data, BOM, id with NUL, retry), the raw bytes handed back with each
 * event, the event size bound, and two properties: a generated stream split at random byte positions
 * reads as the model says and as one chunk does; a written event reads back as its fields.
 */
import t from 'tap'
import fc from 'fast-check'
import assert from 'node:assert/strict'
import { SseEventTooLargeError, SseReader, sseEvent, type SseEvent, type SseFields } from '../../../src/core/sse.js'
import { propertyRuns } from '../../helpers/property-runs.js'

interface Read {
  events: SseEvent[]
  tail: Buffer
}

function read(chunks: readonly (string | Uint8Array)[], maxEventBytes = 1 << 20): Read {
  const reader = new SseReader(maxEventBytes)
  const events: SseEvent[] = []
  for (const chunk of chunks) reader.push(typeof chunk === 'string' ? Buffer.from(chunk) : chunk, (e) => events.push(e))
  return { events, tail: reader.end() }
}

function fields(event: SseEvent): SseFields {
  return { data: event.data, event: event.event, id: event.id, retry: event.retry }
}

const raws = (r: Read): string[] => r.events.map((e) => e.raw.toString('latin1'))

t.test('LF, CRLF and CR all end lines, and each reads the same events', async (t) => {
  const lines = ['event: greeting', 'id: 7', 'data: one', 'data: two', '', 'data: three', '', '']
  const expected = [
    { data: 'one\ntwo', event: 'greeting', id: '7', retry: undefined },
    { data: 'three', event: undefined, id: undefined, retry: undefined },
    { data: undefined, event: undefined, id: undefined, retry: undefined },
  ]
  for (const eol of ['\n', '\r\n', '\r']) {
    const text = lines.map((l) => l + eol).join('')
    const r = read([text])
    t.same(r.events.map(fields), expected, JSON.stringify(eol))
    t.same(raws(r), [
      ['event: greeting', 'id: 7', 'data: one', 'data: two', ''].map((l) => l + eol).join(''),
      `data: three${eol}${eol}`,
      eol,
    ], `${JSON.stringify(eol)}: each event's bytes, blank line included`)
    t.equal(r.tail.length, 0)
  }
  t.same(read(['data: a\r\n\ndata: b\n\r\n']).events.map((e) => e.data), ['a', 'b'], 'mixed line ends in one stream')
})

t.test('a CR at the end of a chunk: an LF in the next chunk completes the line end, anything else starts a new line', async (t) => {
  const mid = read(['data: a\r', '\ndata: b\r\n\r\n'])
  t.same(mid.events.map((e) => e.data), ['a\nb'], 'CR | LF inside an event is one line end, not a blank line')
  t.equal(mid.events[0]?.raw.toString(), 'data: a\r\ndata: b\r\n\r\n')

  const reader = new SseReader(1024)
  const seen: SseEvent[] = []
  reader.push(Buffer.from('data: x\r\r'), (e) => seen.push(e))
  t.equal(seen.length, 1, 'a blank line ending in CR dispatches at once, without waiting for a possible LF')
  t.equal(seen[0]?.raw.toString(), 'data: x\r\r')
  reader.push(Buffer.from('\ndata: y\n\n'), (e) => seen.push(e))
  t.same(seen.map((e) => e.data), ['x', 'y'], 'the LF that completes the CRLF is not another blank line')
  t.equal(seen[1]?.raw.toString(), '\ndata: y\n\n', 'that LF opens the next event\'s bytes, so no byte is lost')

  t.same(read(['data: a\r', '\rdata: b\n\n']).events.map((e) => e.data), ['a', 'b'], 'CR | CR is a line end then a blank line')
  t.same(read(['data: a\r', '', '\n', '\n']).events.map((e) => e.data), ['a'], 'an empty chunk between CR and LF changes nothing')
})

t.test('comments are ignored; a block of comments only is an event without data', async (t) => {
  const r = read([': keep-alive\n\n:\ndata: x\n: inside\ndata: y\n\n'])
  t.same(r.events.map(fields), [
    { data: undefined, event: undefined, id: undefined, retry: undefined },
    { data: 'x\ny', event: undefined, id: undefined, retry: undefined },
  ])
  t.equal(r.events[0]?.raw.toString(), ': keep-alive\n\n')
})

t.test('field: value drops one optional space; a line without colon is a field with an empty value', async (t) => {
  t.same(read(['data:x\n\n']).events[0]?.data, 'x')
  t.same(read(['data: x\n\n']).events[0]?.data, 'x')
  t.same(read(['data:  x \n\n']).events[0]?.data, ' x ', 'only the first space goes; trailing spaces stay')
  t.same(read(['data\n\n']).events[0]?.data, '', 'a bare "data" line is data ""')
  t.same(read(['data:\ndata:\n\n']).events[0]?.data, '\n', 'two empty data lines are "\\n"')
  t.same(read(['data: a:b: c\n\n']).events[0]?.data, 'a:b: c', 'the value runs to the line end, colons included')
  t.same(read(['Data: x\ndata : y\nfoo: z\ndatum: w\n\n']).events.map(fields), [{ data: undefined, event: undefined, id: undefined, retry: undefined }], 'field names match exactly, case and spaces included; others are ignored')
  t.same(read(['event: a\nevent: b\ndata\n\n']).events[0]?.event, 'b', 'the last event field wins')
  t.same(read(['event\ndata\n\n']).events[0]?.event, '', 'an empty event type is ""')
})

t.test('multi-line data is joined with LF, across chunks', async (t) => {
  const r = read(['data: {"a":\n', 'data: 1}\n', 'data: \n\n'])
  t.equal(r.events[0]?.data, '{"a":\n1}\n')
})

t.test('a leading UTF-8 BOM is skipped once, even split across chunks, and kept in the raw bytes', async (t) => {
  const bom = '\ufeff'
  const whole = read([`${bom}data: x\n\n`])
  t.equal(whole.events[0]?.data, 'x')
  t.same([...whole.events[0]!.raw.subarray(0, 3)], [0xef, 0xbb, 0xbf], 'the BOM is part of the first event\'s bytes')
  const split = read([Buffer.from([0xef]), Buffer.from([0xbb]), Buffer.from([0xbf, 0x64]), 'ata: x\n\n'])
  t.equal(split.events[0]?.data, 'x', 'split byte by byte')
  t.same(read([`${bom}\ndata: x\n\n`]).events.map((e) => e.data), [undefined, 'x'], 'a BOM then a blank line is an empty event')
  t.same(read([`${bom}${bom}data: x\n\n`]).events.map((e) => e.data), [undefined], 'only one BOM is skipped')
  t.same(read([`data: x\n\n${bom}data: y\n\n`]).events.map((e) => e.data), ['x', undefined], 'a BOM later in the stream is part of the field name')
})

t.test('id holding NUL is ignored; an empty id is kept; retry takes ASCII digits only', async (t) => {
  t.same(read(['id: a\0b\ndata\n\n']).events[0]?.id, undefined)
  t.same(read(['id: 1\nid: a\0b\ndata\n\n']).events[0]?.id, '1', 'an id with NUL leaves the earlier id in place')
  t.same(read(['id\ndata\n\n']).events[0]?.id, '', 'an empty id resets the last event id')
  t.same(read(['retry: 1500\ndata\n\n']).events[0]?.retry, 1500)
  for (const bad of ['15s', '-1', ' 1', '1.5', '', '１']) {
    t.same(read([`retry: ${bad}\ndata\n\n`]).events[0]?.retry, undefined, `retry ${JSON.stringify(bad)} is ignored`)
  }
  t.same(read([`retry: ${'9'.repeat(400)}\ndata\n\n`]).events[0]?.retry, Number.MAX_SAFE_INTEGER, 'a huge retry stays an exact integer')
  t.same(read(['retry: 007\ndata\n\n']).events[0]?.retry, 7)
})

t.test('a multi-byte character split between chunks decodes whole', async (t) => {
  const bytes = Buffer.from('data: é€😀\n\n')
  for (let cut = 1; cut < bytes.length; cut++) {
    const r = read([bytes.subarray(0, cut), bytes.subarray(cut)])
    t.equal(r.events[0]?.data, 'é€😀', `cut at ${cut}`)
  }
  t.equal(read([Buffer.from([0x64, 0x61, 0x74, 0x61, 0x3a, 0xe2, 0x82, 0x0a, 0x0a])]).events[0]?.data, '\ufffd', 'invalid UTF-8 reads as U+FFFD')
})

t.test('an event over the limit throws, after the events before it; the reader then refuses more', async (t) => {
  const ok = 'data: 12345\n\n' // 13 bytes
  t.equal(read([ok], 13).events.length, 1, 'an event of exactly the limit passes')
  const seen: SseEvent[] = []
  const reader = new SseReader(13)
  t.throws(() => reader.push(Buffer.from(`${ok}data: 123456\n\n`), (e) => seen.push(e)), SseEventTooLargeError, 'a complete event one byte over')
  t.equal(seen.length, 1, 'the event before it was handed over')
  t.throws(() => reader.push(Buffer.from(ok), (e) => seen.push(e)), SseEventTooLargeError, 'sticky')

  const slow = new SseReader(13)
  slow.push(Buffer.from('data: 1234'), () => {})
  t.throws(() => slow.push(Buffer.from('5678'), () => {}), { code: 'SSE_EVENT_TOO_LARGE', limit: 13 }, 'an unfinished event over the limit throws before its end arrives')

  const lines = new SseReader(20)
  t.throws(() => { for (let i = 0; i < 10; i++) lines.push(Buffer.from('data: x\n'), () => {}) }, SseEventTooLargeError, 'many small lines add up')
  t.throws(() => new SseReader(0), RangeError)
})

t.test('end() returns the unfinished event, which is never dispatched', async (t) => {
  const r = read(['data: a\n\ndata: b\n', 'data: c'])
  t.same(r.events.map((e) => e.data), ['a'])
  t.equal(r.tail.toString(), 'data: b\ndata: c')
})

// --- property: a generated stream, split anywhere, reads as its model says ---

const CHARS = ['a', 'Z', ' ', ':', 'é', '€', '😀', '\u0000', '\ufeff', '{', '"']
const value = fc.string({ unit: fc.constantFrom(...CHARS), maxLength: 8 })

type Line =
  | { kind: 'field'; name: 'data' | 'event' | 'id' | 'retry'; value: string; space: boolean }
  | { kind: 'bare'; name: 'data' | 'event' | 'id' }
  | { kind: 'comment'; text: string }
  | { kind: 'unknown'; name: string; value: string }

const line: fc.Arbitrary<Line> = fc.oneof(
  fc.record({ kind: fc.constant('field' as const), name: fc.constantFrom('data' as const, 'data' as const, 'event' as const, 'id' as const), value, space: fc.boolean() }),
  fc.record({ kind: fc.constant('field' as const), name: fc.constant('retry' as const), value: fc.oneof(fc.stringMatching(/^[0-9]{1,4}$/), value), space: fc.boolean() }),
  fc.record({ kind: fc.constant('bare' as const), name: fc.constantFrom('data' as const, 'event' as const, 'id' as const) }),
  fc.record({ kind: fc.constant('comment' as const), text: value }),
  fc.record({ kind: fc.constant('unknown' as const), name: fc.constantFrom('foo', 'Data', 'dat', 'datas', 'é', 'retryx'), value }),
)
const eol = fc.constantFrom('\n', '\r\n', '\r')
const eventModel = fc.record({ lines: fc.array(fc.tuple(line, eol), { maxLength: 5 }), end: eol })
const streamModel = fc.record({
  bom: fc.boolean(),
  events: fc.array(eventModel, { maxLength: 6 }),
  tail: fc.array(fc.tuple(line, eol), { maxLength: 2 }),
})

function lineText(l: Line): string {
  switch (l.kind) {
    case 'field': return `${l.name}:${l.space ? ' ' : ''}${l.value}`
    case 'bare': return l.name
    case 'comment': return `:${l.text}`
    case 'unknown': return `${l.name}: ${l.value}`
  }
}

/** The spec's rules at the level of lines, as an oracle independent of the byte scanner. */
function expectedFields(lines: readonly Line[]): SseFields {
  let data: string | undefined
  let event: string | undefined
  let id: string | undefined
  let retry: number | undefined
  for (const l of lines) {
    if (l.kind === 'comment' || l.kind === 'unknown') continue
    const v = l.kind === 'bare' ? '' : l.space ? l.value : l.value.replace(/^ /, '')
    if (l.name === 'data') data = data === undefined ? v : `${data}\n${v}`
    else if (l.name === 'event') event = v
    else if (l.name === 'id') { if (!v.includes('\0')) id = v }
    else if (/^[0-9]+$/.test(v)) retry = Number(v)
  }
  return { data, event, id, retry }
}

interface Built { bytes: Buffer; raws: Buffer[]; fields: SseFields[]; tail: Buffer }

type StreamModel = { bom: boolean; events: { lines: [Line, string][]; end: string }[]; tail: [Line, string][] }

function build(model: StreamModel): Built {
  let previousEol = ''
  // After a CR, an empty line ended by LF would merge into a CRLF: the model writes such a line end as CRLF.
  const ending = (text: string, e: string): string => {
    const out = text === '' && previousEol === '\r' && e === '\n' ? '\r\n' : e
    previousEol = out
    return out
  }
  const raws: Buffer[] = []
  const out: SseFields[] = []
  let first = true
  for (const ev of model.events) {
    let text = first && model.bom ? '\ufeff' : ''
    first = false
    for (const [l, e] of ev.lines) text += lineText(l) + ending(lineText(l), e)
    text += ending('', ev.end)
    raws.push(Buffer.from(text))
    out.push(expectedFields(ev.lines.map(([l]) => l)))
  }
  let tail = first && model.bom ? '\ufeff' : ''
  for (const [l, e] of model.tail) tail += lineText(l) + ending(lineText(l), e)
  // A tail ending in CR would make a following empty line ambiguous only if more came; the stream ends here.
  return { bytes: Buffer.concat([...raws, Buffer.from(tail)]), raws, fields: out, tail: Buffer.from(tail) }
}

/** A cut at a random byte (so inside UTF-8 sequences too), or right after the n-th CR (inside a CRLF, or not). */
type Cut = { at: number } | { afterCr: number }
const cutsArb = fc.array(fc.oneof(fc.record({ at: fc.nat() }), fc.record({ afterCr: fc.nat() })), { maxLength: 12 })

function split(bytes: Buffer, cuts: readonly Cut[]): Buffer[] {
  const crs = [...bytes.keys()].filter((i) => bytes[i] === 0x0d)
  const positions = cuts.map((c) => ('at' in c ? c.at % (bytes.length + 1) : crs.length === 0 ? 0 : (crs[c.afterCr % crs.length] as number) + 1))
  const at = [...new Set(positions)].sort((a, b) => a - b)
  const chunks: Buffer[] = []
  let start = 0
  for (const cut of at) {
    chunks.push(bytes.subarray(start, cut))
    start = cut
  }
  chunks.push(bytes.subarray(start))
  return chunks
}

/** Puts back on each event the LF that, after a chunk ending in the CR of a CRLF, opened the next one. */
function rejoinCrLf(raws: readonly Buffer[], tail: Buffer): { raws: string[]; tail: string } {
  const out = raws.map((r) => r.toString('latin1'))
  let rest = tail.toString('latin1')
  for (let i = 0; i < out.length; i++) {
    const next = i + 1 < out.length ? out[i + 1] as string : rest
    if (out[i]!.endsWith('\r') && next.startsWith('\n')) {
      out[i] += '\n'
      if (i + 1 < out.length) out[i + 1] = next.slice(1)
      else rest = rest.slice(1)
    }
  }
  return { raws: out, tail: rest }
}

t.test('property: a generated stream reads as its model, in one chunk and split at random bytes', async (t) => {
  fc.assert(fc.property(streamModel, cutsArb, (model, cuts) => {
    const built = build(model)
    const whole = read([built.bytes])
    assert.deepEqual(whole.events.map(fields), built.fields, 'one chunk: the model\'s fields')
    assert.deepEqual(raws(whole), built.raws.map((r) => r.toString('latin1')), 'one chunk: each event\'s exact bytes')
    assert.equal(whole.tail.toString('latin1'), built.tail.toString('latin1'), 'one chunk: the unfinished tail')
    const chunked = read(split(built.bytes, cuts))
    assert.deepEqual(chunked.events.map(fields), built.fields, 'split: the model\'s fields')
    const rejoined = rejoinCrLf(chunked.events.map((e) => e.raw), chunked.tail)
    assert.deepEqual(rejoined.raws, raws(whole), 'split: the same bytes per event')
    assert.equal(rejoined.tail, whole.tail.toString('latin1'), 'split: the same tail')
    const byByte = read([...built.bytes].map((b) => Buffer.from([b])))
    assert.deepEqual(byByte.events.map(fields), built.fields, 'byte by byte: the model\'s fields')
  }), propertyRuns(300))
  t.pass('the property held')
})

// --- the writer ---

t.test('sseEvent writes each field on its line and splits data into data lines', async (t) => {
  t.equal(sseEvent({ data: '{"a":1}' }), 'data: {"a":1}\n\n')
  t.equal(sseEvent({ event: 'message', id: '42', retry: 10, data: 'a\nb\r\nc\rd' }), 'event: message\nid: 42\nretry: 10\ndata: a\ndata: b\ndata: c\ndata: d\n\n')
  t.equal(sseEvent({}), '\n', 'no field: a blank line')
  t.equal(sseEvent({ data: '' }), 'data: \n\n', 'empty data is still data')
})

t.test('sseEvent refuses fields that would change the stream\'s framing or be ignored', async (t) => {
  for (const bad of ['a\nb', 'a\rb', '\r\n']) {
    t.throws(() => sseEvent({ event: bad }), RangeError, `event ${JSON.stringify(bad)}`)
    t.throws(() => sseEvent({ id: bad }), RangeError, `id ${JSON.stringify(bad)}`)
  }
  t.throws(() => sseEvent({ id: 'a\0b' }), RangeError, 'id with NUL')
  for (const bad of [-1, 1.5, Number.NaN, Number.POSITIVE_INFINITY, 2 ** 53]) t.throws(() => sseEvent({ retry: bad }), RangeError, `retry ${bad}`)
})

t.test('property: a written event reads back as its fields', async (t) => {
  const text = fc.string({ unit: fc.constantFrom(...CHARS, '\n', '\r'), maxLength: 10 })
  const noBreak = value
  fc.assert(fc.property(
    fc.record({ data: fc.option(text, { nil: undefined }), event: fc.option(noBreak, { nil: undefined }), id: fc.option(noBreak.map((s) => s.replace(/\0/g, '')), { nil: undefined }), retry: fc.option(fc.nat(), { nil: undefined }) }),
    (f) => {
      const r = read([sseEvent(f)])
      assert.equal(r.events.length, 1)
      assert.deepEqual(fields(r.events[0] as SseEvent), { ...f, data: f.data?.replace(/\r\n|\r/g, '\n') })
    }), propertyRuns(300))
  t.pass('the property held')
})
