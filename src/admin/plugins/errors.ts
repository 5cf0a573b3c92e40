/**
 * The one place the admin plane writes error responses: every failure leaves as
 * `{"error": <stable code>, "message": <text>}` (docs/wire-contract.md §3) with the status of docs/api.md §7, and a 5xx
 * never carries internals.
 */
import type { FastifyError, FastifyInstance } from 'fastify'
import { ERRORS, isServiceError, type ErrorCode } from '../../core/errors.js'

interface ErrorReply {
  status: number
  body: { error: string; message: string } & Record<string, unknown>
}

const FASTIFY_CODES: Record<string, ErrorCode> = {
  FST_ERR_CTP_BODY_TOO_LARGE: 'payload_too_large',
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 'unsupported_media_type',
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 'invalid_request',
  FST_ERR_CTP_EMPTY_JSON_BODY: 'invalid_json',
  FST_ERR_CTP_INVALID_JSON_BODY: 'invalid_json',
}

function reply(code: ErrorCode, message?: string, extra?: Record<string, unknown>): ErrorReply {
  return { status: ERRORS[code].status, body: { error: code, message: message ?? ERRORS[code].message, ...extra } }
}

// Connection-level failures of the database (network errors, PostgreSQL class 08 "connection exception",
// 57P01-57P03 shutdown / cannot connect now): the request may succeed once the database is back, so the
// answer is 503, not 500 (which would say the service itself is broken).
const DB_UNAVAILABLE_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EHOSTUNREACH', '57P01', '57P02', '57P03'])
const DB_UNAVAILABLE_MESSAGES = /^(Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error|Connection terminated unexpectedly)/

function databaseUnavailable(error: unknown): boolean {
  if (!(error instanceof Error)) return false
  const code = (error as { code?: unknown }).code
  if (typeof code === 'string' && (DB_UNAVAILABLE_CODES.has(code) || code.startsWith('08'))) return true
  return DB_UNAVAILABLE_MESSAGES.test(error.message)
}

export function toErrorReply(error: unknown): ErrorReply {
  if (isServiceError(error)) return reply(error.code, error.message, error.details)
  const fastifyError = error as Partial<FastifyError> & { validation?: unknown; validationContext?: string }
  if (fastifyError.validation !== undefined) {
    if (fastifyError.validationContext === 'params') return reply('invalid_id', `Invalid path parameter: ${fastifyError.message ?? ''}`.trim())
    // Fastify's message names the part and the field ("body/name must be string"): safe and useful.
    return reply('invalid_request', fastifyError.message)
  }
  const mapped = fastifyError.code === undefined ? undefined : FASTIFY_CODES[fastifyError.code]
  if (mapped !== undefined) return reply(mapped)
  if (error instanceof SyntaxError) return reply('invalid_json')
  if (databaseUnavailable(error)) return reply('service_unavailable')
  const status = typeof fastifyError.statusCode === 'number' ? fastifyError.statusCode : 500
  // Prototype-poisoning rejections and other client errors raised by Fastify itself.
  if (status === 400) return reply('invalid_request', 'The request body is not acceptable.')
  if (status === 404) return reply('not_found')
  if (status === 405) return reply('method_not_allowed')
  if (status === 413) return reply('payload_too_large')
  if (status === 415) return reply('unsupported_media_type')
  if (status === 503) return reply('service_unavailable')
  return reply('internal_error')
}

export function registerErrorHandling(app: FastifyInstance): void {
  app.setErrorHandler((error, request, res) => {
    const { status, body } = toErrorReply(error)
    if (status >= 500) request.log.error({ err: error, code: body.error }, 'request failed')
    else request.log.info({ code: body.error, status }, 'request rejected')
    void res.code(status).type('application/json; charset=utf-8').send(body)
  })
  app.setNotFoundHandler((_request, res) => {
    void res.code(404).send({ error: 'not_found', message: 'No such route.' })
  })
}
