/**
 * JSON Schema fragments shared by the admin routes. Every route declares params, body and each
 * response (docs/architecture.md): the body schema rejects unknown fields, the response schema decides exactly
 * which fields leave the process.
 */
import { DEFAULT_PAGE_SIZE, MAX_CURSOR_LENGTH, MAX_PAGE_SIZE } from '../core/pagination.js'
import { VERBATIM } from '../core/safe-text.js'
import { UUID_PATTERN } from '../core/uuid.js'

type Schema = Record<string, unknown>

// A plain pattern, not ajv's `uuid` format: that format also accepts a `urn:uuid:` prefix, which
// PostgreSQL's uuid type refuses (a 500 instead of a 400).
export const uuidParam = { type: 'string', pattern: UUID_PATTERN } as const

export const idParams = {
  type: 'object',
  required: ['id'],
  additionalProperties: false,
  properties: { id: uuidParam },
} as const

/**
 * `?cursor=`: over-long is refused here (`invalid_request`); every other defect, a NUL included, is left
 * to the cursor parser so that it answers `invalid_cursor`.
 */
export function cursorQuery(maxLength: number): Schema {
  return { type: 'string', maxLength, [VERBATIM]: true, description: 'nextCursor of the previous page, opaque' }
}

export const pageQuery = {
  type: 'object',
  additionalProperties: false,
  properties: {
    limit: { type: 'integer', minimum: 1, maximum: MAX_PAGE_SIZE, default: DEFAULT_PAGE_SIZE },
    cursor: cursorQuery(MAX_CURSOR_LENGTH),
  },
} as const

export const nullableString = (maxLength: number): Schema => ({ type: ['string', 'null'], maxLength })

export const errorBody = {
  type: 'object',
  required: ['error', 'message'],
  properties: {
    error: { type: 'string', description: 'stable lower-snake-case code (docs/wire-contract.md §3)' },
    message: { type: 'string' },
    errors: {
      type: 'array',
      description: 'validation problems, where the error has several',
      items: {
        type: 'object',
        properties: { code: { type: 'string' }, path: { type: 'string' }, message: { type: 'string' } },
      },
    },
  },
} as const

/** `{success, data, message?}` (docs/api.md §2.1) around `data`. */
export function envelope(data: Schema): Schema {
  return {
    type: 'object',
    required: ['success', 'data'],
    properties: { success: { type: 'boolean' }, data, message: { type: 'string' } },
  }
}

/** A list envelope: `nextCursor` sits beside `data` (docs/wire-contract.md §13). */
export function listEnvelope(item: Schema): Schema {
  return {
    type: 'object',
    required: ['success', 'data', 'nextCursor'],
    properties: {
      success: { type: 'boolean' },
      data: { type: 'array', items: item },
      nextCursor: { type: ['string', 'null'] },
    },
  }
}

/** Response map: the success schemas given plus the error body for each listed error status. */
export function responses(success: Record<number, Schema>, errorStatuses: readonly number[]): Record<number, Schema> {
  const out: Record<number, Schema> = { ...success }
  for (const status of errorStatuses) out[status] = errorBody
  return out
}

/** Error statuses nearly every authenticated route can answer. */
export const AUTHED_ERRORS = [400, 401, 403, 429, 500] as const
