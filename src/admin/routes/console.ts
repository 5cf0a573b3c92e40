/**
 * The operator console's session, who-am-I and organization listing (docs/console.md, "Sign-in and
 * sessions", "Who am I, organizations").
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { ServiceError } from '../../core/errors.js'
import type { Principal } from '../../core/principal.js'
import type { Database } from '../../db/database.js'
import { presentedCredential, principalOf, resolveCredential, type CredentialResolver } from '../plugins/auth.js'
import { checkOrigin, clearConsoleCookie, consoleCookie, setConsoleCookie } from '../plugins/console-cookie.js'
import { AUTHED_ERRORS, envelope, listEnvelope, pageQuery, responses } from '../schemas.js'
import { principalView, type ConsoleSession, type ConsoleSessions } from '../services/console-sessions.js'
import * as credentials from '../services/credentials.js'
import { acceptedTokenExpiry } from '../services/sessions.js'
import { noteAuditActor } from '../plugins/audit.js'

/** Sign-in attempts per client address per minute, successful or not (a person signs in a few times a day). */
export const SIGN_IN_PER_MINUTE = 30

export const principalSchema = {
  type: 'object',
  required: ['kind', 'org_id', 'org_name', 'role', 'operator', 'key_id', 'user_id'],
  properties: {
    kind: { type: 'string', enum: ['api_key', 'session'] },
    org_id: { type: 'string', format: 'uuid' },
    org_name: { type: ['string', 'null'] },
    role: { type: 'string', enum: ['admin', 'member'] },
    operator: { type: 'boolean' },
    key_id: { type: ['string', 'null'], description: 'the API key acting, for a key or a session made from one' },
    user_id: { type: ['string', 'null'], description: 'the user acting, or the user a key acts for' },
  },
}

const sessionSchema = {
  type: 'object',
  required: ['csrf_token', 'expires_at', 'principal'],
  properties: {
    csrf_token: { type: 'string', description: 'send as X-CSRF-Token on every request that is not GET, HEAD or OPTIONS' },
    expires_at: { type: 'string', format: 'date-time', description: 'the absolute end; the session also ends after the idle time' },
    principal: principalSchema,
  },
}

const orgSchema = {
  type: 'object',
  required: ['id', 'name', 'createdAt'],
  properties: { id: { type: 'string', format: 'uuid' }, name: { type: 'string' }, createdAt: { type: 'string', format: 'date-time' } },
}

export interface ConsoleRouteDeps {
  readonly db: Database
  readonly sessions: ConsoleSessions
  /** Resolves the `api_key` of a sign-in body: API keys only. */
  readonly apiKeyResolver: CredentialResolver
  /** Resolves a sign-in's Authorization header: every resolver the auth plugin uses. */
  readonly resolvers: readonly CredentialResolver[]
  readonly production: boolean
  /** CA_ISSUER_URL's origin, accepted as `Origin` beside the request's own. */
  readonly publicOrigin: string
  readonly countFailedSignIn: (request: FastifyRequest, reply: FastifyReply) => Promise<void>
}

export function consoleRoutes(app: FastifyInstance, deps: ConsoleRouteDeps): void {
  const tags = ['console']
  const { db, sessions } = deps

  const sessionData = async (session: ConsoleSession): Promise<Record<string, unknown>> => ({
    csrf_token: session.csrfToken,
    expires_at: session.expiresAt.toISOString(),
    principal: await principalView(db, session.principal),
  })

  const consoleSessionOf = (request: FastifyRequest): ConsoleSession => {
    if (request.consoleSession === null) throw new ServiceError('unauthorized', 'No console session: sign in with POST /v1/console/session.')
    return request.consoleSession
  }

  app.post<{ Body: { api_key?: string } }>('/v1/console/session', {
    // The handler authenticates the credential itself: the body's key or the Authorization header.
    config: { auth: 'public', rateLimit: { max: SIGN_IN_PER_MINUTE, timeWindow: 60_000, keyGenerator: (request) => `signin:${request.ip}` } },
    schema: {
      tags, summary: 'Sign in to the console: a credential exchanged for a session cookie',
      description: 'Body `{api_key}`, or `{}` with `Authorization: Bearer <identity-provider session token>`. Sets the HttpOnly cookie `agent_trust_console`.',
      body: {
        type: 'object', additionalProperties: false,
        properties: { api_key: { type: 'string', minLength: 1, maxLength: 4096 } },
      },
      response: responses({ 201: envelope(sessionSchema) }, [400, 401, 403, 413, 415, 429, 500, 503]),
    },
  }, async (request, reply) => {
    // Another site's page cannot sign a browser in to a session of its choosing: the body must be JSON
    // (a cross-site form cannot send that without a preflight this plane never grants), and a browser's
    // Origin must be this plane's.
    checkOrigin(request, deps.publicOrigin)
    const signInFailed = async (): Promise<never> => {
      await deps.countFailedSignIn(request, reply)
      throw new ServiceError('invalid_credentials')
    }
    let header: string | null
    try {
      header = presentedCredential(request)
    } catch {
      return signInFailed()
    }
    const bodyKey = request.body?.api_key
    if (bodyKey !== undefined && header !== null) {
      throw new ServiceError('invalid_request', 'Give one credential: api_key in the body or an Authorization header.')
    }
    const credential = bodyKey ?? header
    if (credential === null) throw new ServiceError('invalid_request', 'Give api_key in the body or an Authorization header.')
    let principal: Principal | null
    try {
      principal = await resolveCredential(bodyKey !== undefined ? [deps.apiKeyResolver] : deps.resolvers, credential, async () => {})
    } catch (error) {
      // A revoked key answers like an unknown one: sign-in tells nothing about why.
      if (error instanceof ServiceError && error.status === 401) principal = null
      else throw error
    }
    if (principal === null) return signInFailed()
    noteAuditActor(request, principal)
    const { secret, session } = await sessions.create(principal, principal.kind === 'session' ? acceptedTokenExpiry(credential) : null, request.db)
      .catch((error: unknown) => (error instanceof ServiceError && error.code === 'invalid_credentials' ? signInFailed() : Promise.reject(error)))
    setConsoleCookie(request, reply, deps.production, secret, sessions.cookieMaxAge(session))
    void reply.header('cache-control', 'no-store')
    return reply.code(201).send({ success: true, data: await sessionData(session) })
  })

  // Every console page load asks here before anyone has signed in, so "no session" is an ordinary
  // answer (200, data null) rather than a 401 that browsers report as a failed request. The route reads
  // the cookie itself, as the auth hook would, and answers only the session that cookie names.
  app.get('/v1/console/session', {
    config: { auth: 'public' },
    schema: {
      tags, summary: 'The console session of the cookie (a page load reads its CSRF token here); data null without one',
      description: 'Answers 200 with `data: null` when the request has no console cookie, names no live session (the cookie is then cleared), or carries a header credential (which is no console session).',
      response: responses({ 200: envelope({ ...sessionSchema, type: ['object', 'null'] }) }, [401, 429, 500, 503]),
    },
  }, async (request, reply) => {
    void reply.header('cache-control', 'no-store')
    // A header credential wins over the cookie everywhere, and it is no console session.
    if (request.headers.authorization !== undefined || request.headers['x-service-registry-key'] !== undefined) return { success: true, data: null }
    let secret: string | null
    try {
      secret = consoleCookie(request)
    } catch (error) {
      // Two different console cookies stay a 401 and a failed authentication, as on every other route.
      await deps.countFailedSignIn(request, reply)
      throw error
    }
    if (secret === null) return { success: true, data: null }
    const session = await sessions.authenticate(secret)
    if (session === null) {
      // A cookie that names no live session counts as a failed authentication, as it does elsewhere.
      await deps.countFailedSignIn(request, reply)
      clearConsoleCookie(request, reply, deps.production)
      return { success: true, data: null }
    }
    return { success: true, data: await sessionData(session) }
  })

  app.delete('/v1/console/session', {
    schema: { tags, summary: 'Sign out: the session deleted and the cookie cleared (needs X-CSRF-Token)', response: responses({ 204: { type: 'null' } }, AUTHED_ERRORS) },
  }, async (request, reply) => {
    await sessions.end(consoleSessionOf(request), request.db)
    clearConsoleCookie(request, reply, deps.production)
    return reply.code(204).send()
  })

  app.get('/v1/me', {
    schema: { tags: ['organizations'], summary: 'Who the credential is: kind, organization, role', response: responses({ 200: envelope(principalSchema) }, AUTHED_ERRORS) },
  }, async (request) => ({ success: true, data: await principalView(db, principalOf(request)) }))

  app.get<{ Querystring: { limit: number; cursor?: string } }>('/v1/orgs', {
    schema: {
      tags: ['organizations'], summary: 'Organizations: an operator sees all, anyone else their own', querystring: pageQuery,
      response: responses({ 200: listEnvelope(orgSchema) }, AUTHED_ERRORS),
    },
  }, async (request) => {
    const page = await credentials.listOrganizations(db, principalOf(request), request.query.limit, request.query.cursor)
    return { success: true, data: page.items, nextCursor: page.nextCursor }
  })
}
