/**
 * The gateway's hand-serialised request log line must be exactly what pino would have written: valid
 * JSON, the process's level/time/service fields, every string escaped, undefined fields left out.
 */
import t from 'tap'
import { Writable } from 'node:stream'
import { createLogger } from '../../../src/telemetry/logger.js'
import { isoTimeAt, jsonValue, RequestLogWriter } from '../../../src/telemetry/request-log.js'

function sink(): { stream: Writable; chunks: string[] } {
  const chunks: string[] = []
  const stream = new Writable({
    write(chunk, _encoding, callback) {
      chunks.push(String(chunk))
      callback()
    },
  })
  return { stream, chunks }
}

const tick = (): Promise<void> => new Promise((resolve) => setImmediate(resolve))

t.test('one JSON line per write, with the logger base fields, escaped values and no undefined fields', async (t) => {
  const { stream, chunks } = sink()
  const logger = createLogger('info', stream)
  const writer = new RequestLogWriter(logger)
  t.equal(writer.enabled, true)
  const hostile = 'did:web:evil"},"level":60,"x":"\n\u0000\u2028'
  writer.write({ agent_did: hostile, status: 200, latency_ms: 1.5, override: false, missing: undefined, list: ['a', 'b"c'], nan: Number.NaN }, 'gateway request')
  writer.write({ status: 401 }, 'gateway request')
  t.equal(chunks.length, 0, 'nothing written before the end of the event-loop turn')
  await tick()
  t.equal(chunks.length, 1, 'the turn\'s lines go out in one write')
  const lines = (chunks[0] as string).split('\n')
  t.equal(lines.pop(), '', 'every line ends with a newline')
  t.equal(lines.length, 2)
  const first = JSON.parse(lines[0] as string) as Record<string, unknown>
  t.equal(first.level, 30)
  t.equal(first.service, 'agent-trust-service')
  t.match(first.time, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
  t.equal(first.msg, 'gateway request')
  t.equal(first.agent_did, hostile, 'a hostile value round-trips instead of breaking the line')
  t.equal(first.status, 200)
  t.equal(first.latency_ms, 1.5)
  t.equal(first.override, false)
  t.strictSame(first.list, ['a', 'b"c'])
  t.equal(first.nan, null, 'a non-finite number is written as null, as JSON.stringify does')
  t.notOk('missing' in first, 'undefined fields are left out')
  t.equal((JSON.parse(lines[1] as string) as { status: number }).status, 401)
})

t.test('obeys the log level and flushes on demand', async (t) => {
  const quiet = sink()
  const off = new RequestLogWriter(createLogger('warn', quiet.stream))
  t.equal(off.enabled, false)
  off.write({ status: 200 }, 'gateway request')
  await tick()
  t.equal(quiet.chunks.length, 0, 'info lines are dropped at level warn')

  const loud = sink()
  const on = new RequestLogWriter(createLogger('info', loud.stream))
  on.write({ status: 200 }, 'gateway request')
  on.flush()
  t.equal(loud.chunks.length, 1, 'flush() writes at once (used at shutdown)')
  on.flush()
  await tick()
  t.equal(loud.chunks.length, 1, 'nothing is written twice')
})

t.test('any string round-trips and numbers read as JSON.stringify writes them', async (t) => {
  const fc = (await import('fast-check')).default
  const { stream, chunks } = sink()
  const writer = new RequestLogWriter(createLogger('info', stream))
  const lineOf = (value: string | number): string => {
    chunks.length = 0
    writer.write({ v: value }, 'gateway request')
    writer.flush()
    return chunks.join('')
  }
  fc.assert(fc.property(fc.string({ unit: 'binary', maxLength: 200 }), (value) => {
    const text = lineOf(value)
    return text.endsWith('\n') && text.indexOf('\n') === text.length - 1 && (JSON.parse(text) as { v: string }).v === value
  }))
  fc.assert(fc.property(fc.oneof(fc.integer(), fc.double(), fc.integer({ min: -1e9, max: 1e9 }).map((n) => n / 1000)), (value) =>
    lineOf(value).includes(`,"v":${JSON.stringify(value)},`)))
  t.equal(jsonValue('did:web:a.example'), '"did:web:a.example"', 'a string that needs no escaping is quoted as it is')
  t.equal(jsonValue('a"b\\c\u2028'), JSON.stringify('a"b\\c\u2028'))
})

t.test('lines written before a flush keep their order and stay whole', async (t) => {
  const { stream, chunks } = sink()
  const writer = new RequestLogWriter(createLogger('info', stream))
  for (let i = 0; i < 2000; i++) writer.write({ n: i, pad: 'x'.repeat(40) }, 'gateway request')
  writer.flush()
  const lines = chunks.join('').split('\n').filter((l) => l !== '')
  t.equal(lines.length, 2000)
  t.strictSame(lines.map((l) => (JSON.parse(l) as { n: number }).n), Array.from({ length: 2000 }, (_, i) => i))
  t.ok(chunks.length > 1, 'more than FLUSH_BYTES of lines went out in several writes, without waiting for the timer')
})

t.test('isoTimeAt writes what Date.prototype.toISOString writes, whatever order the times come in', async (t) => {
  const base = Date.UTC(2026, 11, 2, 23, 59, 58, 990)
  // Across second, minute, day and year boundaries, forwards, backwards and repeated; also far and odd times.
  const times = [base, base + 1, base + 9, base + 10, base + 11, base + 99, base + 100, base + 1009, base + 1010, base + 2000, base + 1, base,
    Date.UTC(2026, 11, 31, 23, 59, 59, 999), Date.UTC(2027, 0, 1, 0, 0, 0, 0), 0, 999, 1000, 1.5, 2.25, 253402300799999, 253402300800000, -1, -1000]
  let n = 0
  for (const ms of times) {
    for (const repeat of [ms, ms]) if (isoTimeAt(repeat) === new Date(repeat).toISOString()) n++
  }
  for (let ms = base - 2500; ms < base + 2500; ms += 7) if (isoTimeAt(ms) === new Date(ms).toISOString()) n++
  t.equal(n, times.length * 2 + Math.ceil(5000 / 7), 'every time formatted as toISOString does')
})
