/**
 * Property tests of the input checks behind clean refusals: the stored-text check, the cursor parser
 * and the `since` parser. Each bug these fix (a NUL, a lone surrogate, an impossible date reaching SQL)
 * was one member of a class, so the classes are generated. Fixed seed; `FC_NUM_RUNS` raises the runs.
 */
import t from 'tap'
import fc from 'fast-check'
import { ServiceError } from '../../../src/core/errors.js'
import { decodeCursor, encodeCursor, parseTimestamp } from '../../../src/core/pagination.js'
import { findUnsafeText, isSafeText, truncateText } from '../../../src/core/safe-text.js'

const RUNS = Number(process.env.FC_NUM_RUNS ?? 300)
const SEED = 18_2026

function check<T>(arbitrary: fc.Arbitrary<T>, predicate: (value: T) => boolean | void): void {
  fc.assert(fc.property(arbitrary, predicate), { numRuns: RUNS, seed: SEED })
}

/** Any UTF-16 code units, so lone surrogates, reversed pairs and NULs all occur. */
const utf16 = fc.array(fc.integer({ min: 0, max: 0xffff }), { maxLength: 12 }).map((units) => String.fromCharCode(...units))
const edgy = fc.array(fc.constantFrom(0, 0x41, 0xd800, 0xdbff, 0xdc00, 0xdfff, 0xe9, 0xfffd), { maxLength: 6 }).map((units) => String.fromCharCode(...units))
const text = fc.oneof(fc.string({ maxLength: 12 }), fc.string({ unit: 'binary', maxLength: 12 }), utf16, edgy)

/** The oracle: text survives a UTF-8 round trip unchanged (no lone surrogate) and holds no NUL. */
function storable(value: string): boolean {
  return Buffer.from(value, 'utf8').toString('utf8') === value && !value.includes('\u0000')
}

t.test('isSafeText agrees with the UTF-8 round trip', async () => {
  check(text, (value) => isSafeText(value) === storable(value))
})

const { tree } = fc.letrec((tie) => ({
  tree: fc.oneof({ depthSize: 'small', withCrossShrink: true },
    text, fc.integer(), fc.boolean(), fc.constant(null),
    fc.array(tie('tree'), { maxLength: 4 }),
    fc.dictionary(text, tie('tree'), { maxKeys: 4 })),
}))

function allStorable(value: unknown): boolean {
  if (typeof value === 'string') return storable(value)
  if (Array.isArray(value)) return value.every(allStorable)
  if (typeof value === 'object' && value !== null) return Object.entries(value).every(([k, v]) => storable(k) && allStorable(v))
  return true
}

t.test('findUnsafeText finds an unsafe string or key anywhere, and its pointer is itself safe', async () => {
  check(tree, (value) => {
    const found = findUnsafeText(value)
    if (found === null) return allStorable(value)
    return !allStorable(value) && found.reason === 'unsafe_text' && found.path.startsWith('/') && isSafeText(found.path)
  })
})

t.test('findUnsafeText skips x-verbatim fields and only those', async () => {
  const schema = { type: 'object', properties: { token: { type: 'string', 'x-verbatim': true }, name: { type: 'string' } } }
  check(fc.tuple(text, text), ([token, name]) => {
    const found = findUnsafeText({ token, name }, schema)
    return storable(name) ? found === null : found?.path === '/name'
  })
})

t.test('truncateText never splits a surrogate pair', async () => {
  check(fc.tuple(fc.string({ unit: 'grapheme', maxLength: 30 }), fc.integer({ min: 1, max: 40 })), ([value, max]) => {
    const cut = truncateText(value, max)
    return storable(cut) === storable(value) && value.startsWith(cut) && cut.length <= max && (value.length <= max ? cut === value : cut.length >= max - 1)
  })
})

// Years 1-9999: the span PostgreSQL and ISO 8601 basic notation share.
const MIN_MS = new Date('0001-01-01T00:00:00.000Z').getTime()
const MAX_MS = new Date('9999-12-31T23:59:59.999Z').getTime()
const storedTime = fc.integer({ min: MIN_MS, max: MAX_MS }).map((ms) => new Date(ms))

/** Independent of the parser: a time PostgreSQL reads back as the same instant (years 1-9999, real dates). */
function pgAcceptsTime(value: string): boolean {
  const year = Number(value.slice(0, 4))
  return /^\d{4}-/.test(value) && year >= 1 && !Number.isNaN(Date.parse(value)) && new Date(value).toISOString() === value
}

t.test('cursors: every position round-trips, and nothing else decodes', async (t) => {
  check(fc.tuple(storedTime, fc.uuid()), ([date, id]) => {
    const position = { createdAt: date.toISOString(), id }
    const decoded = decodeCursor(encodeCursor('agents', position), 'agents')
    return decoded?.createdAt === position.createdAt && decoded.id === id
  })
  const outcome = (cursor: string): 'ok' | 'invalid_cursor' | 'other' => {
    try {
      const position = decodeCursor(cursor, 'agents')
      return position === null || (pgAcceptsTime(position.createdAt) && /^[0-9a-f-]{36}$/i.test(position.id)) ? 'ok' : 'other'
    } catch (error) {
      return error instanceof ServiceError && error.code === 'invalid_cursor' ? 'invalid_cursor' : 'other'
    }
  }
  // Any text, and the base64url of any JSON (including near-misses of the real shape).
  const nearMiss = fc.tuple(
    fc.constantFrom('agents', 'api_keys', 'revocations', 'x'),
    fc.oneof(fc.date({ noInvalidDate: true }).map((d) => d.toISOString()), fc.string({ maxLength: 30 }),
      fc.tuple(fc.integer({ min: 0, max: 99999 }), fc.integer({ min: 0, max: 13 }), fc.integer({ min: 0, max: 32 }))
        .map(([y, m, d]) => `${String(y).padStart(4, '0')}-${String(m).padStart(2, '0')}-${String(d).padStart(2, '0')}T00:00:00.000Z`)),
    fc.oneof(fc.uuid(), text),
  )
  check(fc.oneof(text, fc.jsonValue().map((v) => Buffer.from(JSON.stringify(v) ?? '').toString('base64url')),
    nearMiss.map((v) => Buffer.from(JSON.stringify(v)).toString('base64url'))), (cursor) => outcome(cursor) !== 'other')
  // Well-formed cursors of the right list whose only defect may be the date.
  const dates = fc.tuple(fc.integer({ min: 0, max: 10000 }), fc.integer({ min: 0, max: 13 }), fc.integer({ min: 0, max: 32 }), fc.integer({ min: 0, max: 25 }))
    .map(([y, m, d, h]) => `${String(y).padStart(4, '0')}-${String(m).padStart(2, '0')}-${String(d).padStart(2, '0')}T${String(h).padStart(2, '0')}:00:00.000Z`)
  check(fc.tuple(dates, fc.uuid()), ([date, id]) => outcome(Buffer.from(JSON.stringify(['agents', date, id])).toString('base64url')) !== 'other')
  t.pass('no cursor makes the parser throw anything but invalid_cursor, or accept a position PostgreSQL would refuse')
})

t.test('since: RFC 3339 times of years 1-9999 parse to the same instant; nothing else escapes the range', async () => {
  check(storedTime, (date) => parseTimestamp(date.toISOString())?.getTime() === date.getTime())
  check(fc.tuple(storedTime, fc.integer({ min: -23 * 60, max: 23 * 60 })), ([date, offsetMinutes]) => {
    // The same instant written with an offset.
    const local = new Date(date.getTime() + offsetMinutes * 60_000)
    const iso = local.toISOString()
    // The written form must itself be in years 1-9999.
    if (local.getUTCFullYear() < 1 || local.getUTCFullYear() > 9999) return true
    const sign = offsetMinutes < 0 ? '-' : '+'
    const abs = Math.abs(offsetMinutes)
    const text = `${iso.slice(0, 23)}${sign}${String(Math.floor(abs / 60)).padStart(2, '0')}:${String(abs % 60).padStart(2, '0')}`
    return parseTimestamp(text)?.getTime() === date.getTime()
  })
  const fields = fc.tuple(
    fc.integer({ min: 0, max: 10000 }), fc.integer({ min: 0, max: 13 }), fc.integer({ min: 0, max: 32 }),
    fc.integer({ min: 0, max: 25 }), fc.integer({ min: 0, max: 61 }), fc.integer({ min: 0, max: 61 }),
  )
  check(fields, ([y, mo, d, h, mi, s]) => {
    const pad = (n: number, w = 2): string => String(n).padStart(w, '0')
    const parsed = parseTimestamp(`${pad(y, 4)}-${pad(mo)}-${pad(d)}T${pad(h)}:${pad(mi)}:${pad(s)}Z`)
    const valid = y >= 1 && y <= 9999 && mo >= 1 && mo <= 12 && d >= 1 && h <= 23 && mi <= 59 && s <= 59 &&
      d <= new Date(Date.UTC(2000, mo, 0)).getUTCDate() - (mo === 2 && !(y % 4 === 0 && (y % 100 !== 0 || y % 400 === 0)) ? 1 : 0)
    if (!valid) return parsed === null
    return parsed !== null && parsed.getUTCFullYear() === y && parsed.getUTCMonth() === mo - 1 && parsed.getUTCDate() === d &&
      parsed.getUTCHours() === h && parsed.getUTCMinutes() === mi && parsed.getUTCSeconds() === s
  })
  check(fc.oneof(text, fc.string({ unit: 'binary', maxLength: 40 })), (value) => {
    const parsed = parseTimestamp(value)
    // An offset can move year 1 or 9999 across the boundary by a day; PostgreSQL stores both sides.
    return parsed === null || (!Number.isNaN(parsed.getTime()) && parsed.getTime() >= MIN_MS - 86_400_000 && parsed.getTime() <= MAX_MS + 86_400_000)
  })
})
