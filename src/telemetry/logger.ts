import { destination as pinoDestination, pino, type Logger, type LoggerOptions } from 'pino'
import { cachedIsoTime } from './request-log.js'

// Credentials and secrets never reach a log line; Fastify logs no headers, these guard what is logged by hand.
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
    // No stack traces in logs: they reveal paths and internals, and the code and message are what operators act on.
    serializers: {
      err: (error: unknown) => describeError(error),
    },
  }
}

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

// Asynchronous writes by default (docs/performance.md, "Hot-path choices"); whoever ends the process calls
// `logger.flush()` first.
export function createLogger(level: string, destination?: NodeJS.WritableStream): Logger {
  if (destination !== undefined) return pino(loggerOptions(level), destination)
  return pino(loggerOptions(level), pinoDestination({ dest: 1, sync: false }))
}

export type { Logger }
