/**
 * Operator console sessions (docs/console.md, "Sign-in and sessions"): a credential is exchanged once for
 * a random secret carried by an HttpOnly cookie; only its SHA-256 is stored. Every request re-checks what
 * the session was made from, so the session never outlives it: the API key (deleted or revoked ends it)
 * or the identity-provider user's membership (re-read at most every MEMBERSHIP_TTL_MS, as for tokens).
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto'
import { LRUCache } from 'lru-cache'
import { ServiceError } from '../../core/errors.js'
import type { Principal, Role } from '../../core/principal.js'
import type { Database } from '../../db/database.js'
import * as repo from '../../db/repositories/console-sessions.js'
import { findMemberAccess } from '../../db/repositories/identity.js'
import * as orgs from '../../db/repositories/organizations.js'
import type { ApiKeyAuthenticator } from './credentials.js'
import { MEMBERSHIP_TTL_MS } from './sessions.js'

/** 32 random bytes, base64url without padding. */
const SECRET_SHAPE = /^[A-Za-z0-9_-]{43}$/
/** last_seen_at is written at most this often: no write per request, at the price of a minute of idle slack. */
export const TOUCH_INTERVAL_MS = 60_000
const MEMBERSHIP_CACHE_SIZE = 10_000

/** A live session, as the request it authenticated sees it. */
export interface ConsoleSession {
  /** The stored id (the secret's digest), never the secret. */
  readonly id: string
  readonly principal: Principal
  readonly csrfToken: string
  /** The absolute end: the configured maximum, or the identity-provider token's `exp` when earlier. */
  readonly expiresAt: Date
}

/** `GET /v1/me`, and the `principal` of the session answers. */
export interface PrincipalView {
  kind: Principal['kind']
  org_id: string
  org_name: string | null
  role: Role
  operator: boolean
  key_id: string | null
  user_id: string | null
}

export async function principalView(db: Database, principal: Principal): Promise<PrincipalView> {
  const org = await orgs.findOrganization(db, principal.orgId)
  return {
    kind: principal.kind,
    org_id: principal.orgId,
    org_name: org?.name ?? null,
    role: principal.role,
    operator: principal.operator,
    key_id: principal.keyId,
    user_id: principal.userId,
  }
}

export function secretDigest(secret: string): string {
  return createHash('sha256').update(secret, 'utf8').digest('hex')
}

/** Constant-time comparison; the token's length is not a secret. */
export function csrfTokenMatches(session: ConsoleSession, presented: string | undefined): boolean {
  if (presented === undefined) return false
  const expected = Buffer.from(session.csrfToken, 'utf8')
  const given = Buffer.from(presented, 'utf8')
  return expected.length === given.length && timingSafeEqual(expected, given)
}

export class ConsoleSessions {
  readonly #db: Database
  readonly #apiKeys: ApiKeyAuthenticator
  readonly #idleMs: number
  readonly #maxMs: number
  readonly #memberships = new LRUCache<string, { access: { role: Role; isOperator: boolean } | null }>({ max: MEMBERSHIP_CACHE_SIZE, ttl: MEMBERSHIP_TTL_MS })

  constructor(db: Database, apiKeys: ApiKeyAuthenticator, options: { idleMs: number; maxMs: number }) {
    this.#db = db
    this.#apiKeys = apiKeys
    this.#idleMs = options.idleMs
    this.#maxMs = options.maxMs
  }

  /** Seconds the cookie lives (its Max-Age): until the session's absolute end. */
  cookieMaxAge(session: ConsoleSession): number {
    return Math.max(0, Math.floor((session.expiresAt.getTime() - Date.now()) / 1000))
  }

  /**
   * A session for a principal the existing resolvers accepted. `idpExpiresAt` is the session token's
   * `exp` for a principal of kind `session`; one already past signs nobody in. `db` is the sign-in
   * request's (its audit record joins the insert).
   */
  async create(principal: Principal, idpExpiresAt: Date | null, db: Database = this.#db): Promise<{ secret: string; session: ConsoleSession }> {
    if (principal.kind === 'session' && (idpExpiresAt === null || idpExpiresAt.getTime() <= Date.now() || principal.userId === null)) {
      throw new ServiceError('invalid_credentials')
    }
    if (principal.kind === 'api_key' && principal.keyId === null) throw new ServiceError('invalid_credentials')
    const secret = randomBytes(32).toString('base64url')
    const csrfToken = randomBytes(32).toString('base64url')
    const row = await repo.insertConsoleSession(db, {
      id: secretDigest(secret),
      orgId: principal.orgId,
      role: principal.role,
      operator: principal.operator,
      kind: principal.kind,
      apiKeyId: principal.kind === 'api_key' ? principal.keyId : null,
      userId: principal.userId,
      csrfToken,
      maxMs: this.#maxMs,
      idpExpiresAt: principal.kind === 'session' ? idpExpiresAt : null,
    })
    // Sign-in is rare; it also clears sessions past their absolute end, so no timer is needed for that.
    // After the insert: the sign-in's audit record belongs to the new session's statement.
    await repo.deleteExpiredConsoleSessions(this.#db)
    return { secret, session: { id: row.id, principal, csrfToken, expiresAt: endOf(row) } }
  }

  /**
   * The live session a cookie secret names, or null. An expired session, or one whose key or
   * membership is gone, is deleted as it is found.
   */
  async authenticate(secret: string): Promise<ConsoleSession | null> {
    if (!SECRET_SHAPE.test(secret)) return null
    const id = secretDigest(secret)
    const row = await repo.findConsoleSession(this.#db, id, this.#idleMs, TOUCH_INTERVAL_MS)
    if (row === null) return null
    if (row.expired) {
      await repo.deleteConsoleSession(this.#db, id)
      return null
    }
    const principal = await this.#livePrincipal(row)
    if (principal === null) {
      await repo.deleteConsoleSession(this.#db, id)
      return null
    }
    if (row.stale) await repo.touchConsoleSession(this.#db, id)
    return { id, principal, csrfToken: row.csrf_token, expiresAt: endOf(row) }
  }

  /** Signs out; `db` is the sign-out request's. */
  async end(session: ConsoleSession, db: Database = this.#db): Promise<void> {
    await repo.deleteConsoleSession(db, session.id)
  }

  /** What the session acts as now: the key's current rights, or the user's current membership. */
  async #livePrincipal(row: repo.ConsoleSessionRow): Promise<Principal | null> {
    if (row.kind === 'api_key') {
      let principal: Principal | null
      try {
        principal = await this.#apiKeys.authenticateKeyId(row.api_key_id as string)
      } catch (error) {
        // A revoked key ends its sessions like a deleted one.
        if (error instanceof ServiceError && error.code === 'api_key_revoked') return null
        throw error
      }
      return principal !== null && principal.orgId === row.org_id ? principal : null
    }
    const userId = row.user_id as string
    const cacheKey = `${row.org_id}\u0000${userId}`
    let entry = this.#memberships.get(cacheKey)
    if (entry === undefined) {
      entry = { access: await findMemberAccess(this.#db, row.org_id, userId) }
      this.#memberships.set(cacheKey, entry)
    }
    if (entry.access === null) return null
    return { kind: 'session', orgId: row.org_id, role: entry.access.role, operator: entry.access.isOperator, userId, keyId: null }
  }
}

function endOf(row: repo.ConsoleSessionRow): Date {
  return row.idp_expires_at !== null && row.idp_expires_at < row.expires_at ? row.idp_expires_at : row.expires_at
}
