import { pino, type Logger, type LoggerOptions } from 'pino'

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

export function loggerOptions(level: string): LoggerOptions {
  return {
    level,
    base: { service: 'agent-trust-service' },
    redact: { paths: REDACT_PATHS, censor: '[redacted]' },
    timestamp: pino.stdTimeFunctions.isoTime,
    // Errors are logged by type, code and message only: stack traces stay out of logs (they reveal
    // file paths and internals, and operators get the code and message they need to act).
    serializers: {
      err: (error: unknown) => describeError(error),
    },
  }
}

export function describeError(error: unknown): Record<string, unknown> {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code
    return { type: error.name, message: error.message, ...(typeof code === 'string' ? { code } : {}) }
  }
  return { type: typeof error, message: String(error) }
}

export function createLogger(level: string, destination?: NodeJS.WritableStream): Logger {
  return destination === undefined ? pino(loggerOptions(level)) : pino(loggerOptions(level), destination)
}

export type { Logger }
