/**
 * The strict JSON reader: JSON.parse is the oracle for what it accepts (same values, spelt with any
 * whitespace and escapes), and every refusal beyond JSON.parse (duplicate names, lone surrogates, depth,
 * BOM, invalid UTF-8) is generated as a class as well as shown by example.
 */
import t from 'tap'
import fc from 'fast-check'
import { parseStrictJson, parseStrictJsonText, StrictJsonError, type JsonValue } from '../../../src/core/strict-json.js'
import { propertyRuns } from '../../helpers/property-runs.js'

const encoder = new TextEncoder()
const fatalUtf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true })
const lenientUtf8 = new TextDecoder('utf-8', { ignoreBOM: true })

/** The problem a parse reports, or 'ok'; any exception other than StrictJsonError fails the test. */
function problemOf(parse: () => unknown): string {
  try {
    parse()
    return 'ok'
  } catch (error) {
    if (!(error instanceof StrictJsonError)) throw new Error(`not a StrictJsonError: ${String(error)}`)
    return error.problem
  }
}

function errorOf(parse: () => unknown): StrictJsonError {
  try {
    parse()
  } catch (error) {
    if (error instanceof StrictJsonError) return error
    throw error
  }
  throw new Error('parsed')
}

/** Both entry points agree; the problem of the text reader, which the byte reader must match. */
function problem(text: string): string {
  const fromText = problemOf(() => parseStrictJsonText(text))
  const fromBytes = problemOf(() => parseStrictJson(encoder.encode(text)))
  if (fromText !== fromBytes) throw new Error(`text says ${fromText}, bytes say ${fromBytes}`)
  return fromText
}

/** Deep equality where numbers compare with Object.is, member order counts and objects have no prototype. */
function sameJson(actual: unknown, expected: unknown): boolean {
  if (typeof actual === 'number') return typeof expected === 'number' && Object.is(actual, expected)
  if (typeof actual !== 'object' || actual === null) return actual === expected
  if (typeof expected !== 'object' || expected === null) return false
  if (Array.isArray(actual)) {
    return Array.isArray(expected) && actual.length === expected.length && actual.every((item, i) => sameJson(item, expected[i]))
  }
  if (Array.isArray(expected) || Object.getPrototypeOf(actual) !== null) return false
  const a = actual as Record<string, unknown>
  const e = expected as Record<string, unknown>
  const keys = Object.keys(a)
  const expectedKeys = Object.keys(e)
  return keys.length === expectedKeys.length && keys.every((key, i) => key === expectedKeys[i] && sameJson(a[key], e[key]))
}

/** Both readers give what JSON.parse gives. */
function parsesLikeJsonParse(text: string): boolean {
  const expected: unknown = JSON.parse(text)
  return sameJson(parseStrictJsonText(text), expected) && sameJson(parseStrictJson(encoder.encode(text)), expected)
}

const json = fc.oneof(
  fc.jsonValue({ maxDepth: 5 }),
  fc.jsonValue({ maxDepth: 5, stringUnit: 'binary' }),
  fc.jsonValue({ maxDepth: 5, stringUnit: 'grapheme' }),
)

/** Cycles through random choices drawn by fast-check, so one serialisation is reproducible from its seed. */
class Choices {
  private bitAt = 0
  private spaceAt = 0
  constructor(private readonly bits: readonly boolean[], private readonly spaces: readonly string[]) {}
  bit(): boolean {
    return this.bits[this.bitAt++ % this.bits.length]!
  }
  space(): string {
    return this.spaces[this.spaceAt++ % this.spaces.length]!
  }
  pick(n: number): number {
    let value = 0
    for (let i = 0; i < 8; i++) value = value * 2 + (this.bit() ? 1 : 0)
    return value % n
  }
}
const choices = fc
  .tuple(fc.array(fc.boolean(), { minLength: 1, maxLength: 40 }), fc.array(fc.string({ unit: fc.constantFrom(' ', '\t', '\n', '\r'), maxLength: 3 }), { minLength: 1, maxLength: 10 }))
  .map(([bits, spaces]) => new Choices(bits, spaces))

const SHORT_ESCAPES: Readonly<Record<string, string>> = { '"': '\\"', '\\': '\\\\', '/': '\\/', '\b': '\\b', '\f': '\\f', '\n': '\\n', '\r': '\\r', '\t': '\\t' }

/** A string literal with a random choice of characters spelt as escapes (a pair's halves together). */
function spellString(value: string, r: Choices): string {
  let out = '"'
  for (const ch of value) {
    const code = ch.charCodeAt(0)
    if (!(code < 0x20 || ch === '"' || ch === '\\') && !r.bit()) {
      out += ch
      continue
    }
    const short = SHORT_ESCAPES[ch]
    if (short !== undefined && r.bit()) {
      out += short
      continue
    }
    for (let i = 0; i < ch.length; i++) {
      const hex = ch.charCodeAt(i).toString(16).padStart(4, '0')
      out += `\\u${r.bit() ? hex.toUpperCase() : hex}`
    }
  }
  return `${out}"`
}

interface Duplicate {
  /** Which object (in document order) gets a second member of an existing name. */
  readonly objectIndex: number
  readonly value: unknown
}

function countObjects(value: unknown): number {
  if (Array.isArray(value)) return value.reduce((n: number, item) => n + countObjects(item), 0)
  if (typeof value !== 'object' || value === null) return 0
  return Object.values(value).reduce((n: number, item) => n + countObjects(item), 1)
}

/** JSON text of `value` with random whitespace between all tokens, random escapes, and maybe a duplicate member. */
function spell(value: unknown, r: Choices, duplicate?: Duplicate): string {
  let objectsSeen = 0
  const go = (v: unknown): string => {
    if (typeof v === 'string') return spellString(v, r)
    if (typeof v !== 'object' || v === null) return JSON.stringify(v)
    if (Array.isArray(v)) return `[${r.space()}${v.map(go).join(`${r.space()},${r.space()}`)}${r.space()}]`
    const members = Object.entries(v).map(([key, item]) => `${spellString(key, r)}${r.space()}:${r.space()}${go(item)}`)
    if (duplicate !== undefined && objectsSeen++ === duplicate.objectIndex) {
      const keys = Object.keys(v)
      const key = keys.length === 0 ? 'k' : keys[r.pick(keys.length)]!
      const extra = `${spellString(key, r)}:${go(duplicate.value)}`
      if (keys.length === 0) members.push(extra)
      members.splice(r.pick(members.length + 1), 0, extra)
    }
    return `{${r.space()}${members.join(`${r.space()},${r.space()}`)}${r.space()}}`
  }
  return `${r.space()}${go(value)}${r.space()}`
}

t.test('JSON.stringify output parses to what JSON.parse gives', async () => {
  fc.assert(fc.property(json, (value) => parsesLikeJsonParse(JSON.stringify(value))), propertyRuns(400))
  fc.assert(fc.property(json, (value) => parsesLikeJsonParse(JSON.stringify(value, null, 2))), propertyRuns(100))
})

t.test('any insignificant whitespace and any escaping parse to what JSON.parse gives', async () => {
  fc.assert(fc.property(json, choices, (value, r) => parsesLikeJsonParse(spell(value, r))), propertyRuns(400))
})

t.test('numbers: every spelling of the grammar reads as JSON.parse reads it', async () => {
  const digits = (min: number, max: number) => fc.string({ unit: fc.constantFrom(...'0123456789'), minLength: min, maxLength: max })
  const number = fc
    .tuple(
      fc.constantFrom('', '-'),
      fc.oneof(fc.constant('0'), fc.tuple(fc.constantFrom(...'123456789'), digits(0, 24)).map(([a, b]) => a + b)),
      fc.option(digits(1, 20).map((d) => `.${d}`), { nil: '' }),
      fc.option(fc.tuple(fc.constantFrom('e', 'E'), fc.constantFrom('', '+', '-'), digits(1, 4)).map((p) => p.join('')), { nil: '' }),
    )
    .map((parts) => parts.join(''))
  fc.assert(fc.property(number, (text) => parsesLikeJsonParse(text) && parsesLikeJsonParse(`[${text}]`)), propertyRuns(1000))
  fc.assert(fc.property(fc.double(), (n) => parsesLikeJsonParse(JSON.stringify(n))), propertyRuns(300))
  fc.assert(fc.property(fc.maxSafeInteger(), (n) => parsesLikeJsonParse(String(n))), propertyRuns(300))
})

t.test('a second member of the same name, spelt with or without escapes, is refused anywhere', async () => {
  const documents = fc.tuple(json, fc.nat(), fc.jsonValue({ maxDepth: 2 }), choices).map(([value, at, extra, r]) => {
    const root = countObjects(value) === 0 ? { k: value } : value
    return { text: spell(root, r, { objectIndex: at % countObjects(root), value: extra }) }
  })
  fc.assert(fc.property(documents, ({ text }) => {
    JSON.parse(text) // the document is otherwise valid
    return problem(text) === 'duplicate_key'
  }), propertyRuns(400))
})

/** Fragments that make JSON ambiguous or invalid, joined at random. */
const FRAGMENTS = [
  '{', '}', '[', ']', ',', ':', '"', '\\', '\\u', '\\ud800', '\\udc00', '\\u00e9', 'u', '0', '1', '9', '-', '+', '.', 'e', 'E',
  'true', 'false', 'null', 'tru', 'NaN', 'Infinity', ' ', '\t', '\n', '\r', '\v', '\f', '\u00a0', '\ufeff', '\u2028', '\u0000',
  '\u001f', '\u007f', 'a', 'é', '😀', '\ud800', '"a"', '"a":', '"\\u0061":', "'", '0x', '/', '\\/', '\\n', '\\x', '//', '/*',
]
const fragments = fc.array(fc.constantFrom(...FRAGMENTS), { maxLength: 24 }).map((parts) => parts.join(''))
const mutated = fc.tuple(json, fc.nat(), fc.constantFrom(...FRAGMENTS), fc.constantFrom('insert', 'delete', 'replace')).map(([value, at, fragment, edit]) => {
  const text = JSON.stringify(value)
  const i = at % (text.length + 1)
  if (edit === 'insert') return text.slice(0, i) + fragment + text.slice(i)
  if (edit === 'delete') return text.slice(0, i) + text.slice(i + 1)
  return text.slice(0, i) + fragment + text.slice(i + 1)
})

/** The readers refuse whatever JSON.parse refuses; what JSON.parse accepts they read alike or refuse for a strict rule. */
function differential(text: string, parse: () => JsonValue): boolean {
  let expected: unknown
  try {
    expected = JSON.parse(text)
  } catch {
    return problemOf(parse) !== 'ok'
  }
  try {
    return sameJson(parse(), expected)
  } catch (error) {
    if (!(error instanceof StrictJsonError)) throw error
    return ['duplicate_key', 'lone_surrogate', 'too_deep'].includes(error.problem)
  }
}

t.test('text JSON.parse refuses is refused, always with a StrictJsonError', async () => {
  fc.assert(fc.property(fc.oneof(fragments, mutated, fc.string({ unit: 'binary', maxLength: 20 })), (text) => {
    // Bytes cannot carry a lone surrogate, so the byte reader is compared on the text the bytes decode to.
    const bytes = encoder.encode(text)
    return differential(text, () => parseStrictJsonText(text)) && differential(lenientUtf8.decode(bytes), () => parseStrictJson(bytes))
  }), propertyRuns(2000))
})

t.test('random bytes: refused with a StrictJsonError, invalid UTF-8 as invalid_utf8 at the first bad byte', async () => {
  const chunk = fc.oneof(fc.uint8Array({ maxLength: 6 }), fc.constantFrom(...FRAGMENTS).map((f) => encoder.encode(f)))
  const bytes = fc.array(chunk, { maxLength: 10 }).map((chunks) => Uint8Array.from(chunks.flatMap((c) => [...c])))
  fc.assert(fc.property(bytes, (input) => {
    let text: string
    try {
      text = fatalUtf8.decode(input)
    } catch {
      const error = errorOf(() => parseStrictJson(input))
      if (input[0] === 0xef && input[1] === 0xbb && input[2] === 0xbf) return error.problem === 'bom'
      const { offset } = error
      // Everything before the offset is well-formed, and a lenient decoder replaces what starts there.
      const before = fatalUtf8.decode(input.subarray(0, offset))
      return error.problem === 'invalid_utf8' && lenientUtf8.decode(input).startsWith(`${before}\ufffd`)
        && !(input[offset] === 0xef && input[offset + 1] === 0xbf && input[offset + 2] === 0xbd)
    }
    return differential(text, () => parseStrictJson(input))
  }), propertyRuns(2000))
})

t.test('every class of ill-formed UTF-8 inside a string is invalid_utf8 at its first byte', async () => {
  const bad = fc.oneof(
    fc.integer({ min: 0x80, max: 0xbf }).map((b) => [b]), // continuation without a lead
    fc.constantFrom(0xc0, 0xc1).chain((b) => fc.integer({ min: 0x80, max: 0xbf }).map((c) => [b, c])), // overlong 2-byte
    fc.integer({ min: 0xf5, max: 0xff }).map((b) => [b, 0x80, 0x80, 0x80]), // not a lead byte
    fc.integer({ min: 0x80, max: 0x9f }).map((c) => [0xe0, c, 0x80]), // overlong 3-byte
    fc.integer({ min: 0xa0, max: 0xbf }).map((c) => [0xed, c, 0x80]), // an encoded surrogate
    fc.integer({ min: 0x80, max: 0x8f }).map((c) => [0xf0, c, 0x80, 0x80]), // overlong 4-byte
    fc.integer({ min: 0x90, max: 0xbf }).map((c) => [0xf4, c, 0x80, 0x80]), // above U+10FFFF
    fc.constantFrom([0xc3], [0xe2, 0x82], [0xf0, 0x9f, 0x98]), // truncated
  )
  fc.assert(fc.property(fc.string({ unit: 'binary', maxLength: 8 }), bad, fc.string({ unit: 'binary', maxLength: 8 }), (before, sequence, after) => {
    const head = encoder.encode(`"${before}`)
    const input = Uint8Array.from([...head, ...sequence, ...encoder.encode(`${after}"`)])
    const error = errorOf(() => parseStrictJson(input))
    return error.problem === 'invalid_utf8' && error.offset === head.length
  }), propertyRuns(500))
})

t.test('a \\u escape that leaves a lone surrogate is refused', async () => {
  const lone = fc.oneof(fc.integer({ min: 0xd800, max: 0xdfff }).map((c) => String.fromCharCode(c)), fc.constant('\udc00\ud800'))
  fc.assert(fc.property(fc.string({ unit: 'binary', maxLength: 6 }), lone, fc.string({ unit: 'binary', maxLength: 6 }), (a, surrogate, b) => {
    return problem(JSON.stringify(`${a}${surrogate}${b}`)) === 'lone_surrogate'
  }), propertyRuns(300))
})

t.test('numbers: the RFC grammar and nothing else', async (t) => {
  for (const text of ['01', '-01', '00', '-00', '0123', '+1', '1.', '-1.', '.5', '-.5', '-', '--1', '1e', '1e+', '1E-', '1.e5',
    'NaN', '-NaN', 'Infinity', '-Infinity', '0x10', '1_000', '1;5', '0.5.5', '1e5e5', '١']) {
    t.equal(problem(text), 'syntax', text)
    t.equal(problem(`[${text}]`), 'syntax', `[${text}]`)
  }
  for (const text of ['0', '-0', '1', '-1', '0.5', '-0.5', '1e5', '1E5', '1e+5', '1e-5', '1.5E+10', '0e0', '1e400', '-1e400', '5e-400',
    '999999999999999', '-99999999999999', '9999999999999999', '9007199254740993', '123456789012345678901234567890']) {
    t.ok(parsesLikeJsonParse(text), text)
  }
  t.ok(Object.is(parseStrictJsonText('-0'), -0), '-0 keeps its sign')
  t.match(errorOf(() => parseStrictJsonText('[-012]')).message, /leading zero at character 2$/, 'a leading zero is named as such')
})

t.test('strings: escapes exactly as the RFC, no raw control characters', async (t) => {
  const read = (text: string) => parseStrictJsonText(text)
  t.equal(read('"\\" \\\\ \\/ \\b \\f \\n \\r \\t"'), '" \\ / \b \f \n \r \t')
  t.equal(read('"\\u0041\\u00e9\\u00E9\\u20AC"'), 'Aéé€')
  t.equal(read('"\\ud83d\\ude00"'), '😀')
  t.equal(read('"x\\uD83D\\uDE00y"'), 'x😀y')
  t.equal(read('"\u007f \u00a0 \u2028 😀"'), '\u007f \u00a0 \u2028 😀', 'DEL and non-ASCII are ordinary characters')
  for (const text of ['"a\tb"', '"a\nb"', '"\u0000"', '"\u001f"', '"\r"']) t.equal(problem(text), 'syntax', JSON.stringify(text))
  for (const text of ['"\\a"', '"\\x41"', '"\\U0041"', '"\\u12"', '"\\u12G4"', '"\\u"', "\"\\'\"", '"\\0"', '"\\', '"abc', '"\\u004"',
    "'a'", '"\\ud800\\u12"']) {
    t.equal(problem(text), 'syntax', text)
  }
  for (const text of ['"\\ud800"', '"\\udbff"', '"\\udc00"', '"\\udfff"', '"\\ude00\\ud83d"', '"\\ud800\\u0041"', '"\\ud800x"',
    '"\\ud800\\ud800"', '"\\ud83d\\n"', '{"\\ud800":1}']) {
    t.equal(problem(text), 'lone_surrogate', text)
  }
  t.equal(problemOf(() => parseStrictJsonText('"\ud800"')), 'lone_surrogate', 'a raw lone surrogate in text')
  t.equal(problemOf(() => parseStrictJsonText('"\udc00\ud800"')), 'lone_surrogate', 'a reversed raw pair in text')
})

t.test('whitespace: the four RFC characters only', async (t) => {
  t.ok(parsesLikeJsonParse(' \t\r\n[ \t\r\n1 \t\r\n, \t\r\n{ \t\r\n"a" \t\r\n: \t\r\n2 \t\r\n} \t\r\n] \t\r\n'))
  for (const space of ['\v', '\f', '\u00a0', '\u2028', '\u2029', '\u3000', '\u0085', '\u0000']) {
    t.equal(problem(`${space}1`), 'syntax', `leading U+${space.charCodeAt(0).toString(16)}`)
    t.equal(problem(`[1${space}]`), 'syntax', `inner U+${space.charCodeAt(0).toString(16)}`)
  }
})

t.test('structure, literals and trailing content', async (t) => {
  for (const text of ['{"a" 1}', '{"a":1,}', '[1,]', '[,1]', '{,}', '{a:1}', "{'a':1}", '[1 2]', '{"a":1 "b":2}', '[', '{', '{"a":',
    '{"a"', ']', '}', '[}', '{]', ':', '{"a"::1}', '{1:1}', '{null:1}', 'True', 'nul', 'nulll', 'fals', 'undefined',
    '1 2', '{}x', '[]]', '{}}', 'truefalse', 'null null', '"a""b"', '1/**/', '1//']) {
    t.equal(problem(text), 'syntax', text)
  }
  for (const text of ['', ' ', ' \n\t\r ']) t.equal(problem(text), 'empty', JSON.stringify(text))
  t.equal(problemOf(() => parseStrictJson(new Uint8Array(0))), 'empty')
  for (const text of ['true', 'false', 'null', '"s"', '[]', '{}', '[[], {}, [{}]]', '{"a":[1,{"b":null}],"c":"d"}']) t.ok(parsesLikeJsonParse(text), text)
})

t.test('a byte order mark is refused, also when text begins with one', async (t) => {
  const error = errorOf(() => parseStrictJson(Uint8Array.from([0xef, 0xbb, 0xbf, 0x31])))
  t.equal(error.problem, 'bom')
  t.equal(error.offset, 0)
  t.equal(problemOf(() => parseStrictJsonText('\ufeff1')), 'bom')
  t.equal(problem(' \ufeff1'), 'syntax', 'a BOM later on is an unexpected character')
  t.equal(problem('"\ufeff"'), 'ok', 'U+FEFF inside a string is an ordinary character')
})

t.test('depth: 64 levels by default, the option moves the limit, and a deep bomb stays a StrictJsonError', async (t) => {
  const arrays = (n: number) => `${'['.repeat(n)}${']'.repeat(n)}`
  const objects = (n: number) => `${'{"a":'.repeat(n)}1${'}'.repeat(n)}`
  t.equal(problem(arrays(64)), 'ok')
  t.equal(problem(arrays(65)), 'too_deep')
  t.equal(problem(objects(64)), 'ok')
  t.equal(problem(objects(65)), 'too_deep')
  t.equal(problem(`${'[{"a":'.repeat(32)}1${'}]'.repeat(32)}`), 'ok')
  t.equal(problem(`[${'[{"a":'.repeat(32)}1${'}]'.repeat(32)}]`), 'too_deep')
  t.equal(errorOf(() => parseStrictJsonText(arrays(65))).offset, 64, 'at the bracket that goes too deep')
  t.equal(problem('['.repeat(100_000)), 'too_deep')
  t.equal(problemOf(() => parseStrictJsonText('[[1]]', { maxDepth: 2 })), 'ok')
  t.equal(problemOf(() => parseStrictJsonText('[[[1]]]', { maxDepth: 2 })), 'too_deep')
  t.equal(problemOf(() => parseStrictJsonText('1', { maxDepth: 0 })), 'ok')
  t.equal(problemOf(() => parseStrictJsonText('{}', { maxDepth: 0 })), 'too_deep')
  t.equal(problemOf(() => parseStrictJsonText(arrays(1000), { maxDepth: 1000 })), 'ok')
  for (const maxDepth of [-1, 1.5, 1001, Number.NaN]) t.throws(() => parseStrictJsonText('1', { maxDepth }), RangeError, String(maxDepth))
})

t.test('objects have no prototype: __proto__ and its kin are ordinary own members', async (t) => {
  const value = parseStrictJsonText('{"__proto__": {"x": 1}, "constructor": 2, "toString": 3, "hasOwnProperty": 4}') as Record<string, unknown>
  t.equal(Object.getPrototypeOf(value), null)
  t.same(Object.keys(value), ['__proto__', 'constructor', 'toString', 'hasOwnProperty'])
  t.ok(Object.prototype.hasOwnProperty.call(value, '__proto__'))
  t.equal((value['__proto__'] as Record<string, unknown>)['x'], 1)
  t.equal((value as { x?: unknown }).x, undefined, 'the member did not become a prototype')
  t.equal(({} as { x?: unknown }).x, undefined, 'Object.prototype is untouched')
  t.equal(problem('{"__proto__":1,"__proto__":2}'), 'duplicate_key')
  t.equal(problem('{"toString":1}'), 'ok', 'an inherited name is not a duplicate')
})

t.test('duplicate member names are compared after unescaping', async (t) => {
  for (const text of ['{"a":1,"a":2}', '{"a":1,"\\u0061":2}', '{"\\u0061":1,"a":2}', '{"\\/":1,"/":2}', '{"😀":1,"\\ud83d\\ude00":2}',
    '{"":1,"":1}', '{"a":{"b":1,"b":1}}', '[{"x":1},{"y":1,"y":null}]', '{"a":null,"a":null}']) {
    t.equal(problem(text), 'duplicate_key', text)
  }
  for (const text of ['{"a":1,"A":2}', '{"a":{"a":1}}', '[{"a":1},{"a":1}]', '{"1":1,"01":2}', '{"a":1,"a ":2}']) t.equal(problem(text), 'ok', text)
  const error = errorOf(() => parseStrictJsonText('{"a":1, "\\u0061":2}'))
  t.equal(error.offset, 8, 'at the second name')
})

t.test('errors: code, problem, offset in bytes or characters, and a message that does not echo the input', async (t) => {
  const text = '{"name": "é😀", "secret-value-do-not-log": x}'
  const fromText = errorOf(() => parseStrictJsonText(text))
  const fromBytes = errorOf(() => parseStrictJson(encoder.encode(text)))
  t.ok(fromText instanceof Error)
  t.equal(fromText.code, 'JSON_INVALID')
  t.equal(fromText.name, 'StrictJsonError')
  t.equal(fromText.problem, 'syntax')
  t.equal(fromText.offset, text.indexOf('x}'))
  t.equal(fromBytes.offset, encoder.encode(text.slice(0, text.indexOf('x}'))).length, 'é is 2 bytes, 😀 is 4')
  t.ok(fromText.message.includes(`(syntax)`) && fromText.message.endsWith(`at character ${fromText.offset}`), fromText.message)
  t.ok(fromBytes.message.endsWith(`at byte ${fromBytes.offset}`), fromBytes.message)
  for (const error of [fromText, fromBytes]) {
    t.notMatch(error.message, /secret|name/)
    t.ok(error.message.length < 120, error.message)
  }
  const longGarbage = errorOf(() => parseStrictJsonText(`[1, ${'abcdefgh'.repeat(100)}]`))
  t.ok(longGarbage.message.length < 120 && !longGarbage.message.includes('abcd'), longGarbage.message)
  t.equal(errorOf(() => parseStrictJson(Uint8Array.from([0x22, 0x61, 0xff, 0x22]))).offset, 2)
  t.match(errorOf(() => parseStrictJson(Uint8Array.from([0x22, 0x61, 0xff, 0x22]))).message, /invalid_utf8.*byte 2/)
})
