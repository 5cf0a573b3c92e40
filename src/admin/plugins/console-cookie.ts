/**
 * The operator console's cookie credential (docs/console.md, "Sign-in and sessions"): reading and writing
 * `agent_trust_console`, and the CSRF rule for requests it authenticates.
 */
import type { FastifyReply, FastifyRequest } from 'fastify'
import { CONSOLE_COOKIE, isConsoleCookiePair } from '../../core/console-cookie.js'
import { ServiceError } from '../../core/errors.js'
import { csrfTokenMatches, type ConsoleSession } from '../services/console-sessions.js'

export const CSRF_HEADER = 'x-csrf-token'
const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS'])

/**
 * The console cookie's value, or null without one. Two different values (a cookie planted for a parent
 * domain beside ours) are ambiguous and refused, as two different header credentials are.
 */
export function consoleCookie(request: Pick<FastifyRequest, 'headers'>): string | null {
  const header = request.headers.cookie
  if (header === undefined) return null
  let found: string | null = null
  for (const part of header.split(';')) {
    // The gateway removes exactly these pairs from what it forwards (core/console-cookie.ts).
    if (!isConsoleCookiePair(part)) continue
    const value = part.slice(part.indexOf('=') + 1).trim()
    if (found !== null && found !== value) throw new ServiceError('unauthorized', 'Two different console session cookies were sent.')
    found = value
  }
  return found === '' ? null : found
}

/**
 * `Secure` when the request reached this listener over TLS or the deployment is production (where
 * TLS ends at a proxy in front: the admin plane trusts no forwarded headers, so it cannot see it).
 */
function cookieAttributes(request: FastifyRequest, production: boolean, maxAge: number): string {
  const secure = production || request.protocol === 'https' ? '; Secure' : ''
  return `; HttpOnly; SameSite=Strict; Path=/; Max-Age=${maxAge}${secure}`
}

export function setConsoleCookie(request: FastifyRequest, reply: FastifyReply, production: boolean, secret: string, maxAge: number): void {
  void reply.header('set-cookie', `${CONSOLE_COOKIE}=${secret}${cookieAttributes(request, production, maxAge)}`)
}

export function clearConsoleCookie(request: FastifyRequest, reply: FastifyReply, production: boolean): void {
  void reply.header('set-cookie', `${CONSOLE_COOKIE}=${cookieAttributes(request, production, 0)}`)
}

/**
 * A cookie-authenticated request that may change something must prove it came from the console's own
 * page: the session's CSRF token in `X-CSRF-Token` (a page of another origin cannot read it) and, when
 * the browser says where the request comes from, an `Origin` that is this admin plane: the origin the
 * request was addressed to, or the configured public one (CA_ISSUER_URL) when TLS ends at a proxy.
 */
export function checkCsrf(request: FastifyRequest, session: ConsoleSession, publicOrigin: string): void {
  if (SAFE_METHODS.has(request.method)) return
  const token = request.headers[CSRF_HEADER]
  if (!csrfTokenMatches(session, typeof token === 'string' ? token : undefined)) {
    throw new ServiceError('csrf_failed', 'The X-CSRF-Token header is missing or is not this session\'s token.')
  }
  checkOrigin(request, publicOrigin)
}

/** A browser's `Origin`, when sent, must be this admin plane's (see checkCsrf). */
export function checkOrigin(request: FastifyRequest, publicOrigin: string): void {
  const origin = request.headers.origin
  if (origin === undefined) return
  const given = origin.toLowerCase()
  if (given !== `${request.protocol}://${request.host}`.toLowerCase() && given !== publicOrigin.toLowerCase()) {
    throw new ServiceError('csrf_failed', 'The request comes from another origin.')
  }
}
