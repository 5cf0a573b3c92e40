/**
 * The bounded body reader: a body is read whole up to its bound and never further, whether the peer
 * declares a length over the bound or streams past it, from a Node stream or a web stream; an
 * abandoned Node stream that reports the abort as an error cannot crash the process.
 */
import t from 'tap'
import { Readable } from 'node:stream'
import { BodyTooLargeError, readBoundedBody } from '../../../src/net/bounded-body.js'

const chunk = (size: number, byte = 0x61): Buffer => Buffer.alloc(size, byte)

/** A Node stream of `count` chunks that counts how many were pulled, and errors when destroyed early (as undici's bodies do). */
function nodeBody(count: number, size: number): { body: Readable; pulled: () => number } {
  let pulled = 0
  let ended = false
  const body = new Readable({
    read() {
      if (pulled === count) {
        ended = true
        this.push(null)
      } else {
        pulled++
        this.push(chunk(size))
      }
    },
    destroy(error, callback) {
      callback(error ?? (ended ? null : new Error('aborted')))
    },
  })
  return { body, pulled: () => pulled }
}

/** A web stream of `count` chunks that records whether it was cancelled. */
function webBody(count: number, size: number): { body: ReadableStream<Uint8Array>; cancelled: () => boolean; pulled: () => number } {
  let pulled = 0
  let cancelled = false
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (pulled === count) controller.close()
      else {
        pulled++
        controller.enqueue(new Uint8Array(size).fill(0x62))
      }
    },
    cancel() {
      cancelled = true
    },
  }, { highWaterMark: 0 })
  return { body, cancelled: () => cancelled, pulled: () => pulled }
}

t.test('a body up to the bound is read whole', async (t) => {
  const exact = nodeBody(4, 256)
  const read = await readBoundedBody(exact.body, 1024)
  t.equal(read.length, 1024, 'exactly the bound')
  t.ok(read.equals(chunk(1024)))
  const web = webBody(2, 100)
  const fromWeb = await readBoundedBody(web.body, 1024, '200')
  t.ok(Buffer.isBuffer(fromWeb), 'a Buffer from a web stream too')
  t.ok(fromWeb.equals(Buffer.alloc(200, 0x62)))
  t.equal((await readBoundedBody(Readable.from([]), 10)).length, 0, 'an empty body')
  const single = await readBoundedBody(Readable.from([new Uint8Array([1, 2, 3])], { objectMode: true }), 10)
  t.same([...single], [1, 2, 3], 'one chunk that is no Buffer')
})

t.test('a streamed body one byte over the bound fails as soon as it passes it', async (t) => {
  const over = nodeBody(1000, 256)
  const errors: unknown[] = []
  const record = (error: unknown): void => {
    errors.push(error)
  }
  process.on('uncaughtException', record)
  t.teardown(() => {
    process.off('uncaughtException', record)
  })
  const failure = await readBoundedBody(over.body, 1024).catch((error: unknown) => error)
  t.ok(failure instanceof BodyTooLargeError)
  t.equal((failure as BodyTooLargeError).code, 'BODY_TOO_LARGE')
  t.equal((failure as BodyTooLargeError).declared, null, 'counted while reading')
  t.ok(over.pulled() <= 6, `stopped after ${over.pulled()} of 1000 chunks`)
  await new Promise((resolve) => setImmediate(resolve))
  t.ok(over.body.destroyed, 'the stream was destroyed')
  t.same(errors, [], 'its abort error crashed nothing')

  const oneByte = await readBoundedBody(Readable.from([chunk(1024), chunk(1)]), 1024).catch((error: unknown) => error)
  t.ok(oneByte instanceof BodyTooLargeError, 'bound + 1 byte')

  const web = webBody(1000, 256)
  await t.rejects(readBoundedBody(web.body, 1024), BodyTooLargeError, 'a web stream')
  await new Promise((resolve) => setImmediate(resolve))
  t.ok(web.pulled() <= 6, `the web stream stopped after ${web.pulled()} chunks`)
  t.ok(web.cancelled(), 'and was cancelled')
})

t.test('a declared length over the bound fails before anything is read', async (t) => {
  const node = nodeBody(10, 256)
  const failure = await readBoundedBody(node.body, 1024, '1025').catch((error: unknown) => error)
  t.ok(failure instanceof BodyTooLargeError)
  t.equal((failure as BodyTooLargeError).declared, 1025)
  t.match((failure as Error).message, /exceeds 1024 bytes \(1025 declared\)/)
  t.equal(node.pulled(), 0, 'nothing was read')
  const web = webBody(10, 256)
  await t.rejects(readBoundedBody(web.body, 1024, 5000), BodyTooLargeError)
  t.ok(web.cancelled(), 'the web stream was cancelled')
  // A declared length that is no number (absent, repeated, garbage) decides nothing: the count does.
  for (const declared of [undefined, null, 'abc', ['10', '10']]) {
    t.equal((await readBoundedBody(nodeBody(2, 10).body, 1024, declared)).length, 20, `declared ${JSON.stringify(declared)}`)
  }
})
