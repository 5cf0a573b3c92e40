import { ServiceError } from './errors.js'
import { isUuid } from './uuid.js'

/** docs/wire-contract.md §3: `?limit=` default 50, at most 500 (more is 400), opaque `?cursor=`, `nextCursor`. */
export const DEFAULT_PAGE_SIZE = 50
export const MAX_PAGE_SIZE = 500

/** Position after the last row of a page in (created_at, id) order. */
export interface PagePosition {
  readonly createdAt: string
  readonly id: string
}

export interface Page<T> {
  readonly items: T[]
  readonly nextCursor: string | null
}

/**
 * The list a cursor belongs to. It is written into the cursor, so a cursor of one list handed to
 * another is refused instead of being read as a position in a table it was never taken from.
 */
export type CursorList = 'agents' | 'api_keys' | 'revocations'

/** The longest cursor accepted; the ones this service writes are about 100 characters. */
export const MAX_CURSOR_LENGTH = 200

const ISO_MILLIS = /^(\d{4})-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/

/**
 * True for a time exactly as `Date.toISOString()` writes it, in years 1 to 9999. The round trip
 * refuses dates that do not exist (February 30 would otherwise roll over in JavaScript and be refused
 * by PostgreSQL), and year 0 is outside what PostgreSQL reads in this notation.
 */
export function isCanonicalIsoMillis(value: string): boolean {
  const match = ISO_MILLIS.exec(value)
  if (match === null || Number(match[1]) < 1) return false
  const ms = Date.parse(value)
  return !Number.isNaN(ms) && new Date(ms).toISOString() === value
}

export function encodeCursor(list: CursorList, position: PagePosition): string {
  return Buffer.from(JSON.stringify([list, position.createdAt, position.id]), 'utf8').toString('base64url')
}

/**
 * Decodes a client cursor of `list`; anything that is not one this service wrote for that list is
 * `invalid_cursor` (400), so nothing a client forges reaches SQL as a value PostgreSQL would refuse.
 * `isId` checks the tie-breaker column's shape (a UUID unless the list says otherwise).
 */
export function decodeCursor(cursor: string | undefined, list: CursorList, isId: (id: string) => boolean = isUuid): PagePosition | null {
  if (cursor === undefined || cursor === '') return null
  try {
    if (cursor.length > MAX_CURSOR_LENGTH || !/^[A-Za-z0-9_-]+$/.test(cursor)) throw new Error('shape')
    const value: unknown = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'))
    if (
      Array.isArray(value) && value.length === 3 && value[0] === list &&
      typeof value[1] === 'string' && isCanonicalIsoMillis(value[1]) &&
      typeof value[2] === 'string' && isId(value[2])
    ) {
      return { createdAt: value[1], id: value[2] }
    }
  } catch {
    // fall through to the uniform error
  }
  throw new ServiceError('invalid_cursor')
}

/**
 * Builds a page from `limit + 1` fetched rows: the extra row only tells whether another page exists.
 */
export function toPage<T>(rows: T[], limit: number, list: CursorList, positionOf: (row: T) => PagePosition): Page<T> {
  if (rows.length <= limit) return { items: rows, nextCursor: null }
  const items = rows.slice(0, limit)
  return { items, nextCursor: encodeCursor(list, positionOf(items[items.length - 1] as T)) }
}

// RFC 3339 date-time (or a bare date), years 0001-9999: the notation PostgreSQL and every client agree on.
const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})(?:[Tt](\d{2}):(\d{2}):(\d{2})(\.\d{1,9})?([Zz]|[+-](\d{2}):(\d{2})))?$/

function daysInMonth(year: number, month: number): number {
  if (month === 2) return year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0) ? 29 : 28
  return [4, 6, 9, 11].includes(month) ? 30 : 31
}

/**
 * Parses a client timestamp (`?since=`) strictly: RFC 3339 with every field in range, or a bare date
 * (midnight UTC). Null for anything else, including what `new Date()` would guess at ("1" is 2001,
 * "+275760-09-13" is past what PostgreSQL stores).
 */
export function parseTimestamp(text: string): Date | null {
  const m = RFC3339.exec(text)
  if (m === null) return null
  const [year, month, day] = [Number(m[1]), Number(m[2]), Number(m[3])]
  if (year < 1 || month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month)) return null
  if (m[4] === undefined) return new Date(Date.parse(`${m[1]}-${m[2]}-${m[3]}T00:00:00.000Z`))
  const [hour, minute, second] = [Number(m[4]), Number(m[5]), Number(m[6])]
  if (hour > 23 || minute > 59 || second > 59) return null
  if (m[9] !== undefined && (Number(m[9]) > 23 || Number(m[10]) > 59)) return null
  const ms = Date.parse(text.toUpperCase().replace(/(\.\d{3})\d+/, '$1'))
  return Number.isNaN(ms) ? null : new Date(ms)
}
