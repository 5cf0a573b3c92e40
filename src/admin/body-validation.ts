/**
 * How the admin plane validates request input against route schemas. Bodies are checked exactly as
 * sent: no type coercion (the JSON number `4` is not the string `"4"`), so a wrong-typed field is a 400
 * naming it. Path parameters and query strings are text by nature and are parsed into the declared
 * types. The app's validator compiler uses both; a route that must see the raw bytes before parsing
 * (the signed identity webhook) validates its parsed body with the same Ajv and the same wording.
 */
import { Ajv, type ErrorObject } from 'ajv'
import { addFormats } from '../core/json-schema.js'

const COMMON = { allErrors: false, removeAdditional: false, useDefaults: true, strict: false } as const

/** An Ajv for request bodies: no coercion, unknown fields left for `additionalProperties: false` to refuse. */
export function bodyAjv(): Ajv {
  return addFormats(new Ajv({ ...COMMON, coerceTypes: false }))
}

/** An Ajv for path parameters and query strings, whose values arrive as text. */
export function textInputAjv(): Ajv {
  return addFormats(new Ajv({ ...COMMON, coerceTypes: 'array' }))
}

/** Fastify's wording of a validation failure, which names the field by its JSON pointer: `body/trustLevel must be string`. */
export function validationMessage(errors: readonly ErrorObject[] | null | undefined, part = 'body'): string {
  const first = errors?.[0]
  return first === undefined ? `${part} is invalid` : `${part}${first.instancePath} ${first.message ?? 'is invalid'}`
}
