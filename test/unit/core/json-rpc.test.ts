/**
 * JSON-RPC 2.0 classification: an example for every rule, then random messages built from valid parts
 * (read back with the right kind and fields, alone and in batches, in order) and random single
 * mutations of them, each of which must be refused. Bodies go through the strict reader, as on the gateway.
 */
import t from 'tap'
import fc from 'fast-check'
import { isJsonRpcProblem, jsonRpcErrorResponse, jsonRpcIdKey, readJsonRpc, type JsonRpcBody, type JsonRpcId, type JsonRpcMessage } from '../../../src/core/json-rpc.js'
import { parseStrictJsonText, type JsonObject, type JsonValue } from '../../../src/core/strict-json.js'
import { propertyRuns } from '../../helpers/property-runs.js'

/** Serialises `body` and reads it the way the gateway will: strict parse, then classification. */
function read(body: unknown, maxBatch?: number): ReturnType<typeof readJsonRpc> {
  return readJsonRpc(parseStrictJsonText(JSON.stringify(body)), maxBatch === undefined ? undefined : { maxBatch })
}

function single(body: unknown): JsonRpcMessage | string {
  const result = read(body)
  if (isJsonRpcProblem(result)) return `${result.problem}: ${result.detail}`
  if (result.batch || result.messages.length !== 1) throw new Error('not a single message')
  return result.messages[0]!
}

function refusal(body: unknown, maxBatch?: number): string {
  const result = read(body, maxBatch)
  return isJsonRpcProblem(result) ? `${result.problem}: ${result.detail}` : 'accepted'
}

/** A message as plain data (the parsed objects have no prototype), for t.same. */
function plain(message: JsonRpcMessage | string): unknown {
  return typeof message === 'string' ? message : JSON.parse(JSON.stringify(message, (_key, value: unknown) => (value === undefined ? '<undefined>' : value)))
}

const V = { jsonrpc: '2.0' }

t.test('requests, notifications and responses are told apart', async (t) => {
  t.same(plain(single({ ...V, id: 7, method: 'tools/call', params: { name: 'x' } })), { kind: 'request', id: 7, method: 'tools/call', params: { name: 'x' } })
  t.same(plain(single({ ...V, id: 'a-1', method: 'tools/list' })), { kind: 'request', id: 'a-1', method: 'tools/list', params: '<undefined>' })
  t.same(plain(single({ ...V, method: 'notifications/initialized' })), { kind: 'notification', method: 'notifications/initialized', params: '<undefined>' })
  t.same(plain(single({ ...V, method: 'n', params: {} })), { kind: 'notification', method: 'n', params: {} })
  t.same(plain(single({ ...V, id: 7, result: { ok: true } })), { kind: 'response', id: 7, result: { ok: true }, error: '<undefined>' })
  t.same(plain(single({ ...V, id: 7, result: null })), { kind: 'response', id: 7, result: null, error: '<undefined>' }, 'a null result is a result')
  t.same(plain(single({ ...V, id: null, error: { code: -32700, message: 'parse error', data: [1] } })),
    { kind: 'response', id: null, result: '<undefined>', error: { code: -32700, message: 'parse error', data: [1] } })
  t.same(plain(single({ ...V, id: 1, method: 'm', extra: { anything: 1 }, _meta: 2 })), { kind: 'request', id: 1, method: 'm', params: '<undefined>' },
    'other members are tolerated')
  const request = single({ ...V, id: 0, method: 'm', params: { a: 1 } })
  t.ok(typeof request !== 'string' && request.kind === 'request' && Object.getPrototypeOf(request.params) === null, 'params is the parsed object')
})

t.test('jsonrpc must be "2.0"', async (t) => {
  for (const body of [{ id: 1, method: 'm' }, { jsonrpc: '1.0', id: 1, method: 'm' }, { jsonrpc: 2.0, id: 1, method: 'm' }, { jsonrpc: null, method: 'm' },
    { jsonrpc: '2.0 ', method: 'm' }, { jsonrpc: ['2.0'], method: 'm' }]) {
    t.equal(refusal(body), 'not_jsonrpc: "jsonrpc" must be "2.0"', JSON.stringify(body))
  }
  for (const body of [1, 'x', null, true]) t.equal(refusal(body), 'not_jsonrpc: a message must be an object', JSON.stringify(body))
})

t.test('method: a non-empty string of at most 256 characters', async (t) => {
  t.equal(refusal({ ...V, id: 1, method: 'm'.repeat(256) }), 'accepted')
  for (const method of ['', 'm'.repeat(257), 1, null, true, ['m'], { m: 1 }]) {
    t.match(refusal({ ...V, id: 1, method }), /^not_jsonrpc: "method" must be/, JSON.stringify(method).slice(0, 20))
    t.match(refusal({ ...V, method }), /^not_jsonrpc: "method" must be/, `notification ${JSON.stringify(method).slice(0, 20)}`)
  }
})

t.test('request ids: a string of at most 256 characters or a safe integer, never null', async (t) => {
  for (const id of ['', 'x'.repeat(256), 0, -1, Number.MAX_SAFE_INTEGER, Number.MIN_SAFE_INTEGER, '1', '1.5']) {
    const message = single({ ...V, id, method: 'm' })
    t.ok(typeof message !== 'string' && message.kind === 'request' && message.id === id, JSON.stringify(id).slice(0, 20))
  }
  for (const id of [null, 1.5, -0.5, 2 ** 53, -(2 ** 53), 1e300, 'x'.repeat(257), true, [], [1], {}]) {
    t.match(refusal({ ...V, id, method: 'm' }), /^not_jsonrpc: "id" of a request must be/, JSON.stringify(id).slice(0, 20))
  }
  const onePointZero = readJsonRpc(parseStrictJsonText('{"jsonrpc":"2.0","id":1.0,"method":"m"}'))
  t.ok(!isJsonRpcProblem(onePointZero) && onePointZero.messages[0]!.kind === 'request', '1.0 reads as the integer 1 (JSON has one number type)')
  t.ok(isJsonRpcProblem(readJsonRpc(parseStrictJsonText('{"jsonrpc":"2.0","id":9007199254740993,"method":"m"}'))), 'an id past 2^53 is refused')
})

t.test('params, when present, is an object', async (t) => {
  for (const params of [[], [1, 2], null, 'p', 1, true]) {
    t.equal(refusal({ ...V, id: 1, method: 'm', params }), 'not_jsonrpc: "params" must be an object', JSON.stringify(params))
    t.equal(refusal({ ...V, method: 'm', params }), 'not_jsonrpc: "params" must be an object', `notification ${JSON.stringify(params)}`)
  }
})

t.test('a request or notification carries no result or error', async (t) => {
  for (const extra of [{ result: 1 }, { error: { code: 1, message: 'm' } }, { result: null }]) {
    t.match(refusal({ ...V, id: 1, method: 'm', ...extra }), /must not have "result" or "error"/)
    t.match(refusal({ ...V, method: 'm', ...extra }), /must not have "result" or "error"/)
  }
})

t.test('responses: an id, exactly one of result and error, and a well-formed error', async (t) => {
  t.match(refusal({ ...V, result: 1 }), /must have "method" .* or "id"/)
  t.match(refusal({ ...V }), /must have "method" .* or "id"/)
  t.match(refusal({ ...V, id: 1 }), /exactly one of "result" and "error"/)
  t.match(refusal({ ...V, id: 1, result: 1, error: { code: 1, message: 'm' } }), /exactly one of "result" and "error"/)
  for (const id of [1.5, 2 ** 53, true, [], {}, 'x'.repeat(257)]) t.match(refusal({ ...V, id, result: 1 }), /"id" of a response must be/, JSON.stringify(id).slice(0, 20))
  for (const id of [null, 0, 'r', Number.MAX_SAFE_INTEGER]) t.equal(refusal({ ...V, id, result: 1 }), 'accepted', JSON.stringify(id))
  for (const error of [null, [], 'e', 1]) t.match(refusal({ ...V, id: 1, error }), /"error" must be an object/, JSON.stringify(error))
  for (const code of [undefined, 1.5, '1', null, 2 ** 53]) {
    t.match(refusal({ ...V, id: 1, error: { code, message: 'm' } }), /"error.code" must be an integer/, String(code))
  }
  for (const message of [undefined, 1, null, ['m']]) {
    t.match(refusal({ ...V, id: 1, error: { code: -32600, message } }), /"error.message" must be a string/, String(message))
  }
})

t.test('members are read as own members only, so a polluted Object.prototype changes nothing', async (t) => {
  const pollute = { id: 5, result: 1, params: [], jsonrpc: '2.0', method: 'evil', code: 1, message: 'm' }
  for (const key of Object.keys(pollute)) Object.defineProperty(Object.prototype, key, { value: pollute[key as keyof typeof pollute], configurable: true, writable: true })
  let results: ReturnType<typeof readJsonRpc>[]
  try {
    results = ['{"jsonrpc":"2.0","method":"n"}', '{"method":"n"}', '{"jsonrpc":"2.0"}', '{"jsonrpc":"2.0","id":1,"error":{}}']
      .map((text) => readJsonRpc(JSON.parse(text) as JsonValue))
  } finally {
    for (const key of Object.keys(pollute)) delete (Object.prototype as Record<string, unknown>)[key]
  }
  const [notification, noVersion, noMethod, noCode] = results
  t.same(isJsonRpcProblem(notification!) ? notification : plain(notification!.messages[0]!), { kind: 'notification', method: 'n', params: '<undefined>' })
  t.ok(isJsonRpcProblem(noVersion!), 'an inherited "jsonrpc" does not count')
  t.ok(isJsonRpcProblem(noMethod!), 'nor an inherited "method" or "id"')
  t.ok(isJsonRpcProblem(noCode!), 'nor an inherited error code')
})

t.test('batches: non-empty, at most maxBatch, every element checked, the first bad one named', async (t) => {
  const request = { ...V, id: 1, method: 'm' }
  t.equal(refusal([]), 'empty_batch: a batch must hold at least one message')
  t.equal(refusal(Array(100).fill(request)), 'accepted')
  t.equal(refusal(Array(101).fill(request)), 'batch_too_large: a batch holds 101 messages, more than 100')
  t.equal(refusal(Array(3).fill(request), 2), 'batch_too_large: a batch holds 3 messages, more than 2')
  t.equal(refusal([request, request], 2), 'accepted')
  const one = read([request])
  t.ok(!isJsonRpcProblem(one) && one.batch && one.messages.length === 1, 'a batch of one is still a batch')
  const alone = read(request)
  t.ok(!isJsonRpcProblem(alone) && !alone.batch, 'a lone message is not a batch')
  t.equal(refusal([request, request, { ...V, id: 1.5, method: 'm' }, 'x']), 'not_jsonrpc: element 2: "id" of a request must be a string of at most 256 characters or a safe integer')
  t.equal(refusal([[request]]), 'not_jsonrpc: element 0: a message must be an object', 'batches do not nest')
  t.equal(refusal([request, []]), 'not_jsonrpc: element 1: a message must be an object')
})

t.test('jsonRpcErrorResponse writes one JSON-RPC error, escaped by JSON.stringify', async (t) => {
  t.equal(jsonRpcErrorResponse(1, -32600, 'bad'), '{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"bad"}}')
  t.equal(jsonRpcErrorResponse(null, -32700, 'parse error', { problem: 'syntax' }),
    '{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error","data":{"problem":"syntax"}}}')
  const hostileId = 'a"},"result":{"x":1}\n\u2028\\'
  const text = jsonRpcErrorResponse(hostileId, -32001, 'refused "quoted"\n')
  const back = single(JSON.parse(text))
  t.ok(typeof back !== 'string' && back.kind === 'response' && back.id === hostileId && back.result === undefined && back.error?.message === 'refused "quoted"\n',
    'an id full of JSON syntax stays one string')
})

t.test('jsonRpcIdKey keeps 1 and "1" apart and equal ids together', async (t) => {
  t.not(jsonRpcIdKey(1), jsonRpcIdKey('1'))
  t.not(jsonRpcIdKey(null), jsonRpcIdKey('null'))
  t.equal(jsonRpcIdKey(7), jsonRpcIdKey(7))
  const id = fc.oneof(fc.constant(null), fc.maxSafeInteger(), fc.string({ maxLength: 6 }), fc.constantFrom('1', 1, 'n:1', 's:1', 'null', ''))
  fc.assert(fc.property(id, id, (a, b) => (jsonRpcIdKey(a) === jsonRpcIdKey(b)) === (a === b)), propertyRuns(500))
})

// Random messages built from valid parts; `expected` is what the reader must return for them.
interface Built { readonly body: Record<string, unknown>; readonly expected: JsonRpcMessage }

const requestId: fc.Arbitrary<JsonRpcId> = fc.oneof(fc.maxSafeInteger(), fc.integer({ min: -1000, max: 1000 }), fc.string({ maxLength: 256 }), fc.string({ unit: 'binary', maxLength: 8 }))
const method = fc.oneof(fc.string({ minLength: 1, maxLength: 256 }), fc.constantFrom('tools/call', 'tools/list', 'initialize', 'notifications/cancelled'))
const params = fc.option(fc.dictionary(fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 3 }), { maxKeys: 5 }), { nil: undefined })
/** Members a message may carry besides its own, named so they never collide with JSON-RPC's. */
const extras = fc.dictionary(fc.string({ maxLength: 6 }).map((k) => `x-${k}`), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 3 })

const builtRequest: fc.Arbitrary<Built> = fc.tuple(requestId, method, params, extras).map(([id, m, p, x]) => ({
  body: { ...x, jsonrpc: '2.0', id, method: m, ...(p === undefined ? {} : { params: p }) },
  expected: { kind: 'request', id, method: m, params: p as JsonObject | undefined },
}))
const builtNotification: fc.Arbitrary<Built> = fc.tuple(method, params, extras).map(([m, p, x]) => ({
  body: { ...x, jsonrpc: '2.0', method: m, ...(p === undefined ? {} : { params: p }) },
  expected: { kind: 'notification', method: m, params: p as JsonObject | undefined },
}))
const errorObject = fc.tuple(fc.integer({ min: -40000, max: 40000 }), fc.string({ maxLength: 20 }), fc.option(fc.jsonValue({ maxDepth: 2 }), { nil: undefined }))
  .map(([code, message, data]) => (data === undefined ? { code, message } : { code, message, data }) as JsonObject)
const builtResponse: fc.Arbitrary<Built> = fc.tuple(fc.oneof(requestId, fc.constant(null)), fc.oneof(
  fc.jsonValue({ maxDepth: 3 }).map((result) => ({ result: result as JsonValue })),
  errorObject.map((error) => ({ error })),
), extras).map(([id, outcome, x]) => ({
  body: { ...x, jsonrpc: '2.0', id, ...outcome },
  expected: 'result' in outcome
    ? { kind: 'response', id, result: outcome.result, error: undefined }
    : { kind: 'response', id, result: undefined, error: outcome.error },
}))
const built = fc.oneof(builtRequest, builtNotification, builtResponse)

/** Compares through JSON text: the parsed side has null-prototype objects, and -0 was sent as 0. */
function sameMessage(actual: JsonRpcMessage, expected: JsonRpcMessage): boolean {
  return JSON.stringify(plain(actual)) === JSON.stringify(plain(expected))
}

function accepted(result: ReturnType<typeof readJsonRpc>): JsonRpcBody {
  if (isJsonRpcProblem(result)) throw new Error(`refused: ${result.detail}`)
  return result
}

t.test('messages built from valid parts are read with the right kind and fields', async () => {
  fc.assert(fc.property(built, ({ body, expected }) => {
    const result = accepted(read(body))
    return !result.batch && result.messages.length === 1 && sameMessage(result.messages[0]!, expected)
  }), propertyRuns(500))
})

t.test('batches of valid messages are read in order', async () => {
  fc.assert(fc.property(fc.array(built, { minLength: 1, maxLength: 100 }), (items) => {
    const result = accepted(read(items.map((item) => item.body)))
    return result.batch && result.messages.length === items.length && result.messages.every((m, i) => sameMessage(m, items[i]!.expected))
  }), propertyRuns(100))
})

const BAD_IDS = [null, 1.5, -0.25, 2 ** 53, -(2 ** 53) - 2, 1e21, 'x'.repeat(257), true, false, [], [1], {}, { id: 1 }]
/** One change that makes a valid message invalid, for the kind of message it applies to. */
type Body = Record<string, unknown>
interface Mutation { readonly kinds: readonly JsonRpcMessage['kind'][]; readonly apply: (body: Body) => unknown }
const change = (kinds: JsonRpcMessage['kind'][], apply: (body: Body) => unknown): Mutation => ({ kinds, apply })
const mutation = fc.oneof(
  fc.constantFrom(undefined, '1.0', '2', 2, 2.0, null, '', ' 2.0').map((jsonrpc) => change(['request', 'notification', 'response'], (b) => (jsonrpc === undefined ? delete b.jsonrpc : (b.jsonrpc = jsonrpc)))),
  fc.constantFrom(...BAD_IDS).map((id) => change(['request'], (b) => (b.id = id))),
  fc.constantFrom(...BAD_IDS.slice(1)).map((id) => change(['response'], (b) => (b.id = id))),
  fc.constantFrom([], [1], null, 'p', 0, false).map((p) => change(['request', 'notification'], (b) => (b.params = p))),
  fc.constantFrom('', 'm'.repeat(257), 1, null, [], {}).map((m) => change(['request', 'notification'], (b) => (b.method = m))),
  fc.constantFrom({ result: 1 }, { error: { code: 1, message: 'm' } }).map((extra) => change(['request', 'notification'], (b) => Object.assign(b, extra))),
  fc.constant(change(['response'], (b) => Object.assign(b, { result: 1, error: { code: 1, message: 'm' } }))),
  fc.constant(change(['response'], (b) => (delete b.result, delete b.error))),
  fc.constant(change(['response'], (b) => delete b.id)),
  fc.constantFrom('m', '').map((m) => change(['response'], (b) => (b.method = m))),
  fc.constantFrom(null, [], 'e', { message: 'm' }, { code: 1.5, message: 'm' }, { code: '1', message: 'm' }, { code: 1 }, { code: 1, message: 2 })
    .map((error) => change(['response'], (b) => (delete b.result, (b.error = error)))),
)
const broken = fc.tuple(built, mutation).filter(([{ expected }, m]) => m.kinds.includes(expected.kind)).map(([{ body }, m]) => {
  const copy = { ...body }
  m.apply(copy)
  return copy
})

t.test('a valid message with one rule broken is refused', async () => {
  fc.assert(fc.property(broken, (body) => {
    const result = read(body)
    return isJsonRpcProblem(result) && result.problem === 'not_jsonrpc' && !result.detail.startsWith('element')
  }), propertyRuns(1000))
})

t.test('a batch with one bad element is refused, naming that element', async () => {
  fc.assert(fc.property(fc.array(built, { minLength: 0, maxLength: 20 }), broken, fc.nat(), (items, bad, at) => {
    const bodies: unknown[] = items.map((item) => item.body)
    const index = at % (bodies.length + 1)
    bodies.splice(index, 0, bad)
    const result = read(bodies)
    return isJsonRpcProblem(result) && result.problem === 'not_jsonrpc' && result.detail.startsWith(`element ${index}: `)
  }), propertyRuns(300))
})
