/**
 * A JSON reader stricter than JSON.parse, for bodies every reader must understand the same way (the
 * gateway decides on a JSON-RPC body that the upstream parses again). It accepts exactly RFC 8259 and
 * refuses, besides every syntax error, what parsers are known to read differently: invalid UTF-8, a
 * byte order mark, duplicate member names (compared after unescaping), `\u` escapes that leave a lone
 * surrogate, and nesting past a depth limit. Objects have a null prototype, so `__proto__` is a key.
 */

export type JsonValue = null | boolean | number | string | JsonValue[] | JsonObject
export interface JsonObject { readonly [key: string]: JsonValue }

export type StrictJsonProblem = 'invalid_utf8' | 'bom' | 'syntax' | 'duplicate_key' | 'lone_surrogate' | 'too_deep' | 'empty'

export interface StrictJsonOptions {
  /** Arrays and objects nested deeper than this are refused; default 64. */
  readonly maxDepth?: number
}

/** Why a body is not strict JSON, and where: a byte offset for bytes, a UTF-16 offset for text. */
export class StrictJsonError extends Error {
  readonly code = 'JSON_INVALID'
  constructor(
    readonly problem: StrictJsonProblem,
    readonly offset: number,
    unit: 'byte' | 'character',
    reason: string,
  ) {
    super(`invalid JSON (${problem}): ${reason} at ${unit} ${offset}`)
    this.name = 'StrictJsonError'
  }
}

const DEFAULT_MAX_DEPTH = 64
// The reader recurses once per level, so the limit also bounds the stack it uses.
const MAX_DEPTH_LIMIT = 1000

const TAB = 0x09
const LF = 0x0a
const CR = 0x0d
const SPACE = 0x20
const QUOTE = 0x22
const PLUS = 0x2b
const COMMA = 0x2c
const MINUS = 0x2d
const DOT = 0x2e
const SLASH = 0x2f
const DIGIT_0 = 0x30
const DIGIT_1 = 0x31
const DIGIT_9 = 0x39
const COLON = 0x3a
const UPPER_E = 0x45
const OPEN_BRACKET = 0x5b
const BACKSLASH = 0x5c
const CLOSE_BRACKET = 0x5d
const LOWER_B = 0x62
const LOWER_E = 0x65
const LOWER_F = 0x66
const LOWER_N = 0x6e
const LOWER_R = 0x72
const LOWER_T = 0x74
const LOWER_U = 0x75
const OPEN_BRACE = 0x7b
const CLOSE_BRACE = 0x7d

// A number of at most this many characters with no fraction or exponent is an exact integer (< 2^53).
const EXACT_INTEGER_CHARS = 15

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true })

/** Parses UTF-8 bytes; offsets in errors are byte offsets. */
export function parseStrictJson(bytes: Uint8Array, options?: StrictJsonOptions): JsonValue {
  const maxDepth = depthLimit(options)
  if (bytes.length >= 3 && bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf) {
    throw new StrictJsonError('bom', 0, 'byte', 'byte order mark')
  }
  let text: string
  try {
    text = utf8.decode(bytes)
  } catch {
    throw new StrictJsonError('invalid_utf8', invalidUtf8Offset(bytes), 'byte', 'invalid UTF-8 sequence')
  }
  return new Reader(text, maxDepth, true).document()
}

/** Parses a string already decoded; the same rules, and a raw lone surrogate is refused like an escaped one. */
export function parseStrictJsonText(text: string, options?: StrictJsonOptions): JsonValue {
  const maxDepth = depthLimit(options)
  if (text.charCodeAt(0) === 0xfeff) throw new StrictJsonError('bom', 0, 'character', 'byte order mark')
  if (!(text as unknown as { isWellFormed(): boolean }).isWellFormed()) {
    throw new StrictJsonError('lone_surrogate', loneSurrogateOffset(text), 'character', 'lone surrogate')
  }
  return new Reader(text, maxDepth, false).document()
}

function depthLimit(options: StrictJsonOptions | undefined): number {
  const maxDepth = options?.maxDepth ?? DEFAULT_MAX_DEPTH
  if (!Number.isSafeInteger(maxDepth) || maxDepth < 0 || maxDepth > MAX_DEPTH_LIMIT) {
    throw new RangeError(`maxDepth must be an integer from 0 to ${MAX_DEPTH_LIMIT}`)
  }
  return maxDepth
}

/** One pass over the text with charCodeAt; `pos` always points at the next unread character. */
class Reader {
  private pos = 0
  /** What the last {@link escape} stood for. */
  private escaped = ''

  constructor(
    private readonly text: string,
    private readonly maxDepth: number,
    private readonly fromBytes: boolean,
  ) {}

  document(): JsonValue {
    const first = this.skipWhitespace()
    if (this.pos >= this.text.length) this.fail('empty', this.pos, 'no value')
    const value = this.value(first, 0)
    this.skipWhitespace()
    if (this.pos < this.text.length) this.fail('syntax', this.pos, 'content after the value')
    return value
  }

  /** Skips JSON whitespace and returns the code of the next character (NaN at the end). */
  private skipWhitespace(): number {
    const text = this.text
    let pos = this.pos
    let c = text.charCodeAt(pos)
    while (c === SPACE || c === LF || c === CR || c === TAB) c = text.charCodeAt(++pos)
    this.pos = pos
    return c
  }

  private value(c: number, depth: number): JsonValue {
    switch (c) {
      case QUOTE: return this.string()
      case OPEN_BRACE: return this.object(depth + 1)
      case OPEN_BRACKET: return this.array(depth + 1)
      case LOWER_T: return this.literal('true', true)
      case LOWER_F: return this.literal('false', false)
      case LOWER_N: return this.literal('null', null)
      default:
        if (c === MINUS || (c >= DIGIT_0 && c <= DIGIT_9)) return this.number()
        return this.unexpected('a value')
    }
  }

  private object(depth: number): JsonObject {
    if (depth > this.maxDepth) this.fail('too_deep', this.pos, `nesting deeper than ${this.maxDepth}`)
    const object: Record<string, JsonValue> = Object.create(null)
    this.pos++
    let c = this.skipWhitespace()
    if (c === CLOSE_BRACE) {
      this.pos++
      return object
    }
    for (;;) {
      if (c !== QUOTE) return this.unexpected('a member name')
      const keyAt = this.pos
      const key = this.string()
      // JSON values are never undefined, and the null prototype leaves nothing inherited to find.
      if (object[key] !== undefined) this.fail('duplicate_key', keyAt, 'duplicate member name')
      if (this.skipWhitespace() !== COLON) return this.unexpected("':'")
      this.pos++
      object[key] = this.value(this.skipWhitespace(), depth)
      c = this.skipWhitespace()
      if (c === COMMA) {
        this.pos++
        c = this.skipWhitespace()
      } else if (c === CLOSE_BRACE) {
        this.pos++
        return object
      } else {
        return this.unexpected("',' or '}'")
      }
    }
  }

  private array(depth: number): JsonValue[] {
    if (depth > this.maxDepth) this.fail('too_deep', this.pos, `nesting deeper than ${this.maxDepth}`)
    const array: JsonValue[] = []
    this.pos++
    let c = this.skipWhitespace()
    if (c === CLOSE_BRACKET) {
      this.pos++
      return array
    }
    for (;;) {
      array.push(this.value(c, depth))
      c = this.skipWhitespace()
      if (c === COMMA) {
        this.pos++
        c = this.skipWhitespace()
      } else if (c === CLOSE_BRACKET) {
        this.pos++
        return array
      } else {
        return this.unexpected("',' or ']'")
      }
    }
  }

  private literal<T extends JsonValue>(word: string, value: T): T {
    if (!this.text.startsWith(word, this.pos)) this.fail('syntax', this.pos, 'invalid literal')
    this.pos += word.length
    return value
  }

  private number(): number {
    const text = this.text
    const start = this.pos
    let pos = start
    let c = text.charCodeAt(pos)
    const negative = c === MINUS
    if (negative) c = text.charCodeAt(++pos)
    let integer = 0
    if (c === DIGIT_0) {
      c = text.charCodeAt(++pos)
      if (c >= DIGIT_0 && c <= DIGIT_9) this.fail('syntax', pos - 1, 'leading zero')
    } else if (c >= DIGIT_1 && c <= DIGIT_9) {
      do {
        integer = integer * 10 + (c - DIGIT_0)
        c = text.charCodeAt(++pos)
      } while (c >= DIGIT_0 && c <= DIGIT_9)
    } else {
      this.pos = pos
      return this.unexpected('a digit')
    }
    let plain = true
    if (c === DOT) {
      plain = false
      c = text.charCodeAt(++pos)
      if (!(c >= DIGIT_0 && c <= DIGIT_9)) {
        this.pos = pos
        return this.unexpected('a digit')
      }
      do c = text.charCodeAt(++pos)
      while (c >= DIGIT_0 && c <= DIGIT_9)
    }
    if (c === LOWER_E || c === UPPER_E) {
      plain = false
      c = text.charCodeAt(++pos)
      if (c === PLUS || c === MINUS) c = text.charCodeAt(++pos)
      if (!(c >= DIGIT_0 && c <= DIGIT_9)) {
        this.pos = pos
        return this.unexpected('a digit')
      }
      do c = text.charCodeAt(++pos)
      while (c >= DIGIT_0 && c <= DIGIT_9)
    }
    this.pos = pos
    if (plain && pos - start <= EXACT_INTEGER_CHARS) return negative ? -integer : integer
    return Number(text.slice(start, pos))
  }

  /** A string whose opening quote is at `pos`; without escapes it is one slice of the text. */
  private string(): string {
    const text = this.text
    const start = this.pos + 1
    let pos = start
    for (;;) {
      const c = text.charCodeAt(pos)
      if (c === QUOTE) {
        this.pos = pos + 1
        return text.slice(start, pos)
      }
      if (c === BACKSLASH) return this.escapedString(start, pos)
      if (!(c >= SPACE)) this.badStringCharacter(pos)
      pos++
    }
  }

  private escapedString(start: number, firstEscape: number): string {
    const text = this.text
    let out = text.slice(start, firstEscape)
    let pos = firstEscape
    let chunk = pos
    for (;;) {
      const c = text.charCodeAt(pos)
      if (c === QUOTE) {
        this.pos = pos + 1
        return out + text.slice(chunk, pos)
      }
      if (c === BACKSLASH) {
        out += text.slice(chunk, pos)
        pos = this.escape(pos)
        out += this.escaped
        chunk = pos
      } else {
        if (!(c >= SPACE)) this.badStringCharacter(pos)
        pos++
      }
    }
  }

  /** Reads the escape at `pos` into {@link escaped} and returns the position after it. */
  private escape(pos: number): number {
    const text = this.text
    switch (text.charCodeAt(pos + 1)) {
      case QUOTE: this.escaped = '"'; return pos + 2
      case BACKSLASH: this.escaped = '\\'; return pos + 2
      case SLASH: this.escaped = '/'; return pos + 2
      case LOWER_B: this.escaped = '\b'; return pos + 2
      case LOWER_F: this.escaped = '\f'; return pos + 2
      case LOWER_N: this.escaped = '\n'; return pos + 2
      case LOWER_R: this.escaped = '\r'; return pos + 2
      case LOWER_T: this.escaped = '\t'; return pos + 2
      case LOWER_U: break
      default: this.fail('syntax', pos, 'invalid escape')
    }
    const unit = this.hex4(pos + 2)
    if (unit < 0xd800 || unit > 0xdfff) {
      this.escaped = String.fromCharCode(unit)
      return pos + 6
    }
    if (unit <= 0xdbff && text.charCodeAt(pos + 6) === BACKSLASH && text.charCodeAt(pos + 7) === LOWER_U) {
      const low = this.hex4(pos + 8)
      if (low >= 0xdc00 && low <= 0xdfff) {
        this.escaped = String.fromCharCode(unit, low)
        return pos + 12
      }
    }
    return this.fail('lone_surrogate', pos, 'escape leaves a lone surrogate')
  }

  /** The four hex digits at `pos` as a number. */
  private hex4(pos: number): number {
    const text = this.text
    const value = (hexDigit(text.charCodeAt(pos)) << 12) | (hexDigit(text.charCodeAt(pos + 1)) << 8)
      | (hexDigit(text.charCodeAt(pos + 2)) << 4) | hexDigit(text.charCodeAt(pos + 3))
    if (value < 0) this.fail('syntax', pos - 2, 'invalid \\u escape')
    return value
  }

  private badStringCharacter(pos: number): never {
    if (pos >= this.text.length) return this.fail('syntax', pos, 'unterminated string')
    return this.fail('syntax', pos, `control character U+${hex(this.text.charCodeAt(pos))} in a string`)
  }

  private unexpected(expected: string): never {
    const pos = this.pos
    if (pos >= this.text.length) return this.fail('syntax', pos, `end of input where ${expected} was expected`)
    return this.fail('syntax', pos, `U+${hex(this.text.codePointAt(pos) ?? 0)} where ${expected} was expected`)
  }

  private fail(problem: StrictJsonProblem, pos: number, reason: string): never {
    if (this.fromBytes) throw new StrictJsonError(problem, utf8Length(this.text, pos), 'byte', reason)
    throw new StrictJsonError(problem, pos, 'character', reason)
  }
}

/** The value of a hex digit, or -1 (negative, so it marks the whole escape invalid once shifted and or-ed). */
function hexDigit(c: number): number {
  if (c >= DIGIT_0 && c <= DIGIT_9) return c - DIGIT_0
  const lower = c | 0x20
  if (lower >= 0x61 && lower <= 0x66) return lower - 0x57
  return -1
}

function hex(code: number): string {
  return code.toString(16).toUpperCase().padStart(4, '0')
}

/** How many UTF-8 bytes the first `end` UTF-16 units of well-formed `text` take. */
function utf8Length(text: string, end: number): number {
  let bytes = 0
  for (let i = 0; i < end && i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (c < 0x80) bytes += 1
    else if (c < 0x800) bytes += 2
    else if (c >= 0xd800 && c <= 0xdbff) {
      bytes += 4
      i++
    } else bytes += 3
  }
  return bytes
}

/** Where the first ill-formed UTF-8 sequence starts (the rules of the WHATWG decoder, used after it failed). */
function invalidUtf8Offset(bytes: Uint8Array): number {
  let i = 0
  while (i < bytes.length) {
    const lead = bytes[i]!
    if (lead < 0x80) {
      i++
      continue
    }
    let following: number
    let low = 0x80
    let high = 0xbf
    if (lead >= 0xc2 && lead <= 0xdf) following = 1
    else if (lead >= 0xe0 && lead <= 0xef) {
      following = 2
      if (lead === 0xe0) low = 0xa0 // overlong
      if (lead === 0xed) high = 0x9f // surrogates
    } else if (lead >= 0xf0 && lead <= 0xf4) {
      following = 3
      if (lead === 0xf0) low = 0x90 // overlong
      if (lead === 0xf4) high = 0x8f // above U+10FFFF
    } else return i
    for (let k = 1; k <= following; k++) {
      const next = bytes[i + k]
      if (next === undefined || next < low || next > high) return i
      low = 0x80
      high = 0xbf
    }
    i += following + 1
  }
  return bytes.length
}

function loneSurrogateOffset(text: string): number {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (c >= 0xdc00 && c <= 0xdfff) return i
    if (c >= 0xd800 && c <= 0xdbff) {
      const next = text.charCodeAt(i + 1)
      if (!(next >= 0xdc00 && next <= 0xdfff)) return i
      i++
    }
  }
  return text.length
}
