import { destination as pinoDestination, pino, type Logger, type LoggerOptions } from 'pino'
import { cachedIsoTime } from './request-log.js'

/**
 * Paths whose values never reach a log line: credentials in headers, secrets in bodies and objects.
 * Fastify's request serializer logs no headers by default; these paths guard anything logged by hand.
 */
export const REDACT_PATHS = [
  'req.headers.authorization',
  'req.headers["x-service-registry-key"]',
  'req.headers["x-service-badge"]',
  'req.headers["x-service-breakglass"]',
  'req.headers.cookie',
  'headers.authorization',
  'headers["x-service-registry-key"]',
  'headers["x-service-badge"]',
  'headers["x-service-breakglass"]',
  '*.key',
  '*.secret',
  '*.token',
  '*.apiKey',
  '*.api_key',
  '*.password',
  '*.proof_jws',
  '*.d',
  'key',
  'secret',
  'token',
  'apiKey',
]

const BASE = { service: 'agent-trust-service' }

// pino's isoTime formats a Date per line; lines within one millisecond share the string instead.
const isoTimeCached = (): string => `,"time":"${cachedIsoTime()}"`

export function loggerOptions(level: string): LoggerOptions {
  return {
    level,
    base: BASE,
    redact: { paths: REDACT_PATHS, censor: '[redacted]' },
    timestamp: isoTimeCached,
    // Errors are logged by type, code, message and cause only: stack traces stay out of logs (they
    // reveal file paths and internals, and operators get the code and message they need to act).
    serializers: {
      err: (error: unknown) => describeError(error),
    },
  }
}

/** How many causes deep an error is described; a longer chain is cut there. */
const MAX_CAUSE_DEPTH = 3

/** An error as the log shows it: type, message, its stable code, and what it was caused by. */
export function describeError(error: unknown, depth = 0): Record<string, unknown> {
  if (!(error instanceof Error)) return { type: typeof error, message: String(error) }
  const code = (error as { code?: unknown }).code
  const described: Record<string, unknown> = { type: error.name, message: error.message }
  if (typeof code === 'string') described.code = code
  if (error.cause !== undefined && depth < MAX_CAUSE_DEPTH) described.cause = describeError(error.cause, depth + 1)
  return described
}

/**
 * The process logger. By default it writes to stdout asynchronously: a synchronous write costs a system
 * call per line on the request path (docs/performance.md has the figure), while asynchronous writes
 * coalesce the lines that arrive during a write. No minimum buffer length, so
 * a quiet service still shows each line at once. Whoever ends the process calls `logger.flush()` first
 * (main.ts does).
 */
export function createLogger(level: string, destination?: NodeJS.WritableStream): Logger {
  if (destination !== undefined) return pino(loggerOptions(level), destination)
  return pino(loggerOptions(level), pinoDestination({ dest: 1, sync: false }))
}

export type { Logger }
