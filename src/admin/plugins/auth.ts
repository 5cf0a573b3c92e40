/**
 * Resolves the caller's principal before the body is read, so an unauthenticated request is answered
 * 401 without parsing anything (docs/api.md §5 rule 1). Routes opt out with `config: { auth: 'public' }`.
 * It is a root-level onRequest hook, so it runs before the rate limiter's route-level hook: the limiter
 * then counts the authenticated key, and failures are counted per address by `onFailure`.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { ServiceError } from '../../core/errors.js'
import type { Principal } from '../../core/principal.js'

export type AuthMode = 'required' | 'public'

/** A way to turn a presented credential into a principal (API keys now, session tokens later). */
export type CredentialResolver = (credential: string) => Promise<Principal | null>

declare module 'fastify' {
  interface FastifyRequest {
    principal: Principal | null
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

export function registerAuth(
  app: FastifyInstance,
  resolvers: readonly CredentialResolver[],
  onFailure: (request: FastifyRequest, reply: FastifyReply) => Promise<void>,
): void {
  app.decorateRequest('principal', null)
  app.addHook('onRequest', async (request, reply) => {
    // Unknown routes fall through to the 404 handler; public routes need nothing.
    if (request.is404) return
    if (request.routeOptions.config.auth === 'public') {
      await identifyRegistryClient(request, resolvers)
      return
    }
    let credential: string | null
    try {
      credential = presentedCredential(request)
    } catch (error) {
      await onFailure(request, reply)
      throw error
    }
    if (credential === null) {
      await onFailure(request, reply)
      throw new ServiceError('unauthorized', 'Credentials are required.')
    }
    for (const resolve of resolvers) {
      let principal: Principal | null
      try {
        principal = await resolve(credential)
      } catch (error) {
        // A refused credential (a revoked key) counts as a failed authentication like an unknown one.
        if (error instanceof ServiceError && error.status === 401) await onFailure(request, reply)
        throw error
      }
      if (principal !== null) {
        request.principal = principal
        return
      }
    }
    await onFailure(request, reply)
    throw new ServiceError('unauthorized', 'The credential is not valid.')
  })
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
