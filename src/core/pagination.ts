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

/** Written into the cursor, so a cursor of one list is refused by another rather than misread. */
export type CursorList = 'agents' | 'api_keys' | 'revocations' | 'badges' | 'organizations' | 'audit'

/** The cursors this service writes are about 100 characters. */
export const MAX_CURSOR_LENGTH = 200

const ISO_MILLIS = /^(\d{4})-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/

/** Exactly as `toISOString()` writes it, years 1-9999: the round trip refuses dates that do not exist (February 30). */
export function isCanonicalIsoMillis(value: string): boolean {
  const match = ISO_MILLIS.exec(value)
  if (match === null || Number(match[1]) < 1) return false
  const ms = Date.parse(value)
  return !Number.isNaN(ms) && new Date(ms).toISOString() === value
}

export function encodeCursor(list: CursorList, position: PagePosition): string {
  return Buffer.from(JSON.stringify([list, position.createdAt, position.id]), 'utf8').toString('base64url')
}

/** Anything but a cursor written for `list` is `invalid_cursor`: nothing forged reaches SQL. */
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

/** From `limit + 1` fetched rows: the extra row only tells whether another page exists. */
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

/** RFC 3339 or a bare date; null for what `new Date()` would guess at ("1" is 2001) or PostgreSQL cannot store. */
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
