/**
 * The one place the admin plane writes error responses: every failure leaves as
 * `{"error": <stable code>, "message": <text>}` (docs/wire-contract.md §3) with the status of docs/api.md §7, and a 5xx
 * never carries internals.
 */
import type { FastifyError, FastifyInstance, FastifyReply } from 'fastify'
import { ERRORS, isServiceError, type ErrorCode } from '../../core/errors.js'
import { OAuthError, type OAuthErrorBody } from '../../core/oauth-error.js'

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

/** RFC 6749 §5.1: token answers, errors included, are never stored by a cache. */
export function setNoStore(reply: FastifyReply): void {
  void reply.header('cache-control', 'no-store').header('pragma', 'no-cache')
}

interface OAuthErrorReply {
  status: number
  body: OAuthErrorBody
}

// Words a schema refusal of the token form: a parameter typed string that arrived as an array was repeated.
function validationDescription(error: { validation?: unknown; message?: string }): string {
  const first = Array.isArray(error.validation) ? (error.validation[0] as { keyword?: string; instancePath?: string } | undefined) : undefined
  if (first?.keyword === 'type' && /^\/[a-z_]{1,32}$/.test(first.instancePath ?? '')) {
    return `The parameter ${(first.instancePath as string).slice(1)} was given more than once.`
  }
  if (first?.keyword === 'safeText') return 'A parameter holds U+0000 or an unpaired UTF-16 surrogate.'
  return 'The request parameters are not acceptable.'
}

/**
 * The OAuth endpoints' answer to any failure (RFC 6749 §5.2 `{error, error_description}`): the same
 * classification as {@link toErrorReply}, with the OAuth codes. 413 and 415 keep their status; a 5xx
 * still carries nothing internal.
 */
export function toOAuthErrorReply(error: unknown): OAuthErrorReply {
  if (error instanceof OAuthError) return { status: error.status, body: error.toBody() }
  const fastifyError = error as Partial<FastifyError> & { validation?: unknown }
  if (fastifyError.validation !== undefined) return { status: 400, body: { error: 'invalid_request', error_description: validationDescription(fastifyError) } }
  const generic = toErrorReply(error)
  switch (generic.body.error) {
    case 'payload_too_large':
      return { status: 413, body: { error: 'invalid_request', error_description: 'The request body exceeds the size limit of this endpoint.' } }
    case 'unsupported_media_type':
      return { status: 415, body: { error: 'invalid_request', error_description: 'The body must be application/x-www-form-urlencoded (UTF-8).' } }
    case 'rate_limit_exceeded':
      return { status: 429, body: { error: 'temporarily_unavailable', error_description: generic.body.message } }
    case 'service_unavailable':
      return { status: 503, body: { error: 'temporarily_unavailable', error_description: ERRORS.service_unavailable.message } }
    case 'internal_error':
      return { status: 500, body: { error: 'server_error', error_description: ERRORS.internal_error.message } }
    default:
      return { status: 400, body: { error: 'invalid_request', error_description: generic.body.message } }
  }
}

/** For an encapsulated scope of OAuth endpoints: every failure in the OAuth shape, never cached. */
export function registerOAuthErrorHandling(scope: FastifyInstance): void {
  scope.setErrorHandler((error, request, res) => {
    const { status, body } = toOAuthErrorReply(error)
    if (status >= 500) request.log.error({ err: error, code: body.error }, 'request failed')
    else request.log.info({ code: body.error, status }, 'request rejected')
    if (error instanceof OAuthError && error.retryAfterSeconds !== undefined) void res.header('retry-after', error.retryAfterSeconds)
    setNoStore(res)
    void res.code(status).type('application/json; charset=utf-8').send(body)
  })
}
