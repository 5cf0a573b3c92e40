/**
 * The admin plane's one line per request (docs/operations.md, "Logs"): `request completed` at info,
 * except for the routine polls of gateways, probes and scrapers, which a route marks with
 * `config: ROUTINE_POLL` and which log at debug while they succeed. A gateway syncs its revocations
 * every second, so at info its polls would be most of a quiet appliance's log; a poll that fails
 * (401, 429, a 503 readiness, any 5xx) is no longer routine and stays at info.
 */
import type { FastifyContextConfig } from 'fastify'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** A route machines call on a timer: its successful answers log at debug. */
    routinePoll?: boolean
  }
}

/** The route config of a routine poll, spread beside the route's other config. */
export const ROUTINE_POLL = Object.freeze({ routinePoll: true as const })

/** The level of a request's `request completed` line. */
export function requestLogLevel(config: Pick<FastifyContextConfig, 'routinePoll'> | undefined, status: number): 'debug' | 'info' {
  return config?.routinePoll === true && status < 400 ? 'debug' : 'info'
}
