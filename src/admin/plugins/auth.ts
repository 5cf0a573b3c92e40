/**
 * Resolves the caller's principal before the body is read, so an unauthenticated request is answered
 * 401 without parsing anything (docs/api.md §5 rule 1). Routes opt out with `config: { auth: 'public' }`.
 * It is a root-level onRequest hook, so it runs before the rate limiter's route-level hook: the limiter
 * then counts the authenticated key, and failures are counted per address by `onFailure`.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { ServiceError } from '../../core/errors.js'
import type { Principal } from '../../core/principal.js'
import type { ConsoleSession, ConsoleSessions } from '../services/console-sessions.js'
import { checkCsrf, consoleCookie } from './console-cookie.js'

export type AuthMode = 'required' | 'public'

/** A way to turn a presented credential into a principal (API keys now, session tokens later). */
export type CredentialResolver = (credential: string) => Promise<Principal | null>

declare module 'fastify' {
  interface FastifyRequest {
    principal: Principal | null
    /** The console session when the request was authenticated by the console cookie, else null. */
    consoleSession: ConsoleSession | null
  }
  interface FastifyContextConfig {
    auth?: AuthMode
  }
}

const BEARER = /^Bearer[ \t]+(\S{1,4096})[ \t]*$/i

/**
 * The credential of a request: `Authorization: Bearer <x>` or `X-Service-Registry-Key: <x>`
 * (docs/api.md §5). Both present and different is ambiguous, so it is refused rather than guessed.
 */
export function presentedCredential(request: Pick<FastifyRequest, 'headers'>): string | null {
  const authorization = request.headers.authorization
  const registryKey = request.headers['x-service-registry-key']
  let bearer: string | null = null
  if (authorization !== undefined) {
    const match = BEARER.exec(authorization)
    if (match === null) throw new ServiceError('unauthorized', 'The Authorization header must be "Bearer <credential>".')
    bearer = match[1] as string
  }
  const key = typeof registryKey === 'string' ? registryKey.trim() : null
  if (bearer !== null && key !== null && key !== bearer) {
    throw new ServiceError('unauthorized', 'Authorization and X-Service-Registry-Key carry different credentials.')
  }
  return bearer ?? (key === '' ? null : key)
}

/** The console cookie as a credential (docs/console.md); absent when the app has no console sessions. */
export interface CookieAuth {
  readonly sessions: ConsoleSessions
  /** The admin plane's configured public origin (CA_ISSUER_URL's), accepted as `Origin` beside the request's own. */
  readonly publicOrigin: string
}

export function registerAuth(
  app: FastifyInstance,
  resolvers: readonly CredentialResolver[],
  onFailure: (request: FastifyRequest, reply: FastifyReply) => Promise<void>,
  cookieAuth: CookieAuth | null = null,
): void {
  app.decorateRequest('principal', null)
  app.decorateRequest('consoleSession', null)
  app.addHook('onRequest', async (request, reply) => {
    // Unknown routes fall through to the 404 handler; public routes need nothing.
    if (request.is404) return
    if (request.routeOptions.config.auth === 'public') {
      await identifyRegistryClient(request, resolvers)
      return
    }
    let credential: string | null
    let cookie: string | null = null
    try {
      credential = presentedCredential(request)
      // A header credential wins: the cookie is read only when none is sent.
      if (credential === null && cookieAuth !== null) cookie = consoleCookie(request)
    } catch (error) {
      await onFailure(request, reply)
      throw error
    }
    if (cookie !== null && cookieAuth !== null) {
      const session = await cookieAuth.sessions.authenticate(cookie)
      if (session === null) {
        await onFailure(request, reply)
        throw new ServiceError('unauthorized', 'The console session has ended; sign in again.')
      }
      // Before the handler runs, so a refused request changes nothing.
      checkCsrf(request, session, cookieAuth.publicOrigin)
      request.principal = session.principal
      request.consoleSession = session
      return
    }
    if (credential === null) {
      await onFailure(request, reply)
      throw new ServiceError('unauthorized', 'Credentials are required.')
    }
    const principal = await resolveCredential(resolvers, credential, () => onFailure(request, reply))
    if (principal === null) {
      await onFailure(request, reply)
      throw new ServiceError('unauthorized', 'The credential is not valid.')
    }
    request.principal = principal
  })
}

/**
 * The principal of a credential by the first resolver that knows it, or null. A refused credential (a
 * revoked key) is reported through `onRefused` like an unknown one, then thrown.
 */
export async function resolveCredential(
  resolvers: readonly CredentialResolver[], credential: string, onRefused: () => Promise<void>,
): Promise<Principal | null> {
  for (const resolve of resolvers) {
    let principal: Principal | null
    try {
      principal = await resolve(credential)
    } catch (error) {
      if (error instanceof ServiceError && error.status === 401) await onRefused()
      throw error
    }
    if (principal !== null) return principal
  }
  return null
}

/**
 * On a public route, a valid `X-Service-Registry-Key` (gateways send it when they sync revocations)
 * identifies the caller for the rate limiter only: each gateway then has its own budget instead of
 * sharing one per address, so many gateways behind one NAT do not starve each other's revocation sync.
 * Anything else, including an invalid key, leaves the request anonymous: a public route never fails
 * authentication, and handlers of public routes never read the principal.
 */
async function identifyRegistryClient(request: FastifyRequest, resolvers: readonly CredentialResolver[]): Promise<void> {
  const key = request.headers['x-service-registry-key']
  if (typeof key !== 'string' || !key.startsWith('sk_') || key.length > 4096) return
  for (const resolve of resolvers) {
    const principal = await resolve(key).catch(() => null)
    if (principal !== null) {
      request.principal = principal
      return
    }
  }
}

/** The principal of an authenticated route; a route marked public has none. */
export function principalOf(request: FastifyRequest): Principal {
  if (request.principal === null) throw new ServiceError('unauthorized')
  return request.principal
}
