import { ServiceError } from './errors.js'

/** protocol.md §3: `?limit=` default 50, at most 500 (more is 400), opaque `?cursor=`, `nextCursor`. */
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

const ISO_MILLIS = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

export function encodeCursor(position: PagePosition): string {
  return Buffer.from(JSON.stringify([position.createdAt, position.id]), 'utf8').toString('base64url')
}

/** Decodes a client cursor; anything that is not one of ours is `invalid_cursor` (400). */
export function decodeCursor(cursor: string | undefined): PagePosition | null {
  if (cursor === undefined || cursor === '') return null
  try {
    if (cursor.length > 200 || !/^[A-Za-z0-9_-]+$/.test(cursor)) throw new Error('shape')
    const value: unknown = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'))
    // Only positions this service writes: an ISO time to the millisecond and a UUID. Anything else
    // would reach SQL as a value PostgreSQL refuses, and must be a 400, not a 500.
    if (
      Array.isArray(value) && value.length === 2 &&
      typeof value[0] === 'string' && ISO_MILLIS.test(value[0]) && !Number.isNaN(Date.parse(value[0])) &&
      typeof value[1] === 'string' && UUID.test(value[1])
    ) {
      return { createdAt: value[0], id: value[1] }
    }
  } catch {
    // fall through to the uniform error
  }
  throw new ServiceError('invalid_cursor')
}

/**
 * Builds a page from `limit + 1` fetched rows: the extra row only tells whether another page exists.
 */
export function toPage<T>(rows: T[], limit: number, positionOf: (row: T) => PagePosition): Page<T> {
  if (rows.length <= limit) return { items: rows, nextCursor: null }
  const items = rows.slice(0, limit)
  return { items, nextCursor: encodeCursor(positionOf(items[items.length - 1] as T)) }
}
