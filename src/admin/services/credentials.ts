/**
 * API keys, organizations and the first-run bootstrap (docs/wire-contract.md §2). Secrets are generated here,
 * shown once, and only their SHA-256 digest is stored.
 */
import { LRUCache } from 'lru-cache'
import { createHash, randomUUID } from 'node:crypto'
import { chmod, mkdir, writeFile } from 'node:fs/promises'
import path from 'node:path'
import {
  apiKeyPrefix, digestsEqual, generateApiKeySecret, hashApiKeySecret, looksLikeApiKey,
} from '../../core/api-key.js'
import { ServiceError } from '../../core/errors.js'
import { decodeCursor, toPage, type Page } from '../../core/pagination.js'
import type { Config } from '../../config/index.js'
import type { Database, Queryable } from '../../db/database.js'
import * as apiKeys from '../../db/repositories/api-keys.js'
import * as orgs from '../../db/repositories/organizations.js'
import * as users from '../../db/repositories/users.js'
import { requireAdmin, requireOperator, type Principal, type Role } from '../../core/principal.js'
import { API_KEY_CHANNEL } from '../../core/notify-channels.js'

export interface ApiKeyView {
  id: string
  name: string
  role: Role
  operator: boolean
  prefix: string
  createdAt: string
  /** The user the key acts for (its creator, or the creator of the key that made it). */
  createdByUserId: string | null
  createdByType: apiKeys.CreatorType
  createdByKeyId: string | null
  revokedAt: string | null
  revokeReason: apiKeys.RevokeReason | null
}

export interface CreatedApiKey extends ApiKeyView {
  /** The full secret: returned by the create call only, never again. */
  key: string
}

export interface OrganizationView {
  id: string
  name: string
  createdAt: string
}

function toKeyView(row: apiKeys.ApiKeyRow): ApiKeyView {
  return {
    id: row.id,
    name: row.name,
    role: row.role,
    operator: row.is_operator,
    prefix: row.key_prefix,
    createdAt: row.created_at.toISOString(),
    createdByUserId: row.created_by_user_id,
    createdByType: row.created_by_type,
    createdByKeyId: row.created_by_key_id,
    revokedAt: row.revoked_at?.toISOString() ?? null,
    revokeReason: row.revoke_reason,
  }
}

function toOrgView(row: orgs.OrganizationRow): OrganizationView {
  return { id: row.id, name: row.name, createdAt: row.created_at.toISOString() }
}

/** Announces changed keys to every instance, which drops them from its cache; inside a transaction, on commit. */
export async function notifyKeyChanges(q: Queryable, keyIds: readonly string[]): Promise<void> {
  if (keyIds.length === 0) return
  await q.query('SELECT pg_notify($1, k) FROM unnest($2::text[]) AS k', [API_KEY_CHANNEL, keyIds])
}

/** Why a presented key is refused although its secret matched, or null when it may act. */
export function keyRefusal(row: apiKeys.ApiKeyAuthRow): apiKeys.RevokeReason | null {
  if (row.revoked_at !== null) return row.revoke_reason ?? 'creator_unknown'
  // Operator keys belong to the deployment's owner, not to a user of the identity provider.
  if (row.is_operator) return null
  if (row.created_by_user_id === null) return 'creator_unknown'
  if (!row.creator_exists) return 'creator_deleted'
  if (row.creator_role === null) return 'membership_removed'
  return null
}

/** A key acts with the lower of its own role and its creator's current role in the key's org. */
export function effectiveRole(row: apiKeys.ApiKeyAuthRow): Role {
  if (row.is_operator) return row.role
  return row.role === 'admin' && row.creator_role === 'admin' ? 'admin' : 'member'
}

/** What the authenticator logs with (a pino logger in the app). */
export interface KeyLog {
  warn(fields: Record<string, unknown>, message: string): void
}

/**
 * Resolves presented secrets to principals. Live keys are cached by digest for a few seconds so the
 * admin plane does not query the database on every request; a deleted key is evicted at once on this
 * instance and through NOTIFY on the others, and the TTL bounds staleness if a notification is missed.
 * Unknown secrets are never cached (their lookups are rate limited per address instead).
 */
export class ApiKeyAuthenticator {
  readonly #db: Queryable
  readonly #cache: LRUCache<string, Principal>
  readonly #log: KeyLog | null

  constructor(db: Queryable, options: { ttlMs?: number; max?: number; log?: KeyLog } = {}) {
    this.#db = db
    this.#cache = new LRUCache({ max: options.max ?? 10_000, ttl: options.ttlMs ?? 5_000 })
    this.#log = options.log ?? null
  }

  async authenticate(secret: string): Promise<Principal | null> {
    if (!looksLikeApiKey(secret)) return null
    const digest = hashApiKeySecret(secret)
    const cacheKey = digest.toString('base64')
    const cached = this.#cache.get(cacheKey)
    if (cached !== undefined) return cached
    const row = await apiKeys.findApiKeyForAuth(this.#db, digest)
    // The lookup is by digest; the constant-time comparison keeps the final check free of timing signal.
    if (row === null || !digestsEqual(row.key_hash, digest)) return null
    const principal = this.#principalOf(row)
    this.#cache.set(cacheKey, principal)
    return principal
  }

  /**
   * The principal of a key named by id (a console session made from it), with the same refusals and
   * cache as a presented secret: null once the key is deleted, `api_key_revoked` once it no longer works.
   */
  async authenticateKeyId(keyId: string): Promise<Principal | null> {
    const cacheKey = `id:${keyId}`
    const cached = this.#cache.get(cacheKey)
    if (cached !== undefined) return cached
    const row = await apiKeys.findApiKeyForAuthById(this.#db, keyId)
    if (row === null) return null
    const principal = this.#principalOf(row)
    this.#cache.set(cacheKey, principal)
    return principal
  }

  #principalOf(row: apiKeys.ApiKeyAuthRow): Principal {
    const refusal = keyRefusal(row)
    if (refusal !== null) {
      // Refusals are not cached: the holder of a revoked key is limited per address like any failure.
      this.#log?.warn({ keyId: row.id, orgId: row.org_id, reason: refusal }, 'api key refused')
      throw new ServiceError('api_key_revoked', `The API key no longer works (${refusal}).`)
    }
    return {
      kind: 'api_key',
      orgId: row.org_id,
      role: effectiveRole(row),
      operator: row.is_operator,
      userId: row.created_by_user_id,
      keyId: row.id,
    }
  }

  /** Forgets a changed key (the cache is small; a scan is cheaper than a second index). */
  evict(keyId: string): void {
    for (const [digest, principal] of this.#cache.entries()) {
      if (principal.keyId === keyId) this.#cache.delete(digest)
    }
  }

  /** Forgets every key: after the NOTIFY listener reconnects, changes may have been missed. */
  clear(): void {
    this.#cache.clear()
  }
}

interface KeyInput {
  orgId: string
  name: string
  role: Role
  operator: boolean
  createdByUserId: string | null
  createdByType: apiKeys.CreatorType
  createdByKeyId: string | null
  secret?: string
}

async function insertKey(q: Queryable, input: KeyInput): Promise<CreatedApiKey> {
  const secret = input.secret ?? generateApiKeySecret()
  const row = await apiKeys.insertApiKey(q, {
    id: randomUUID(),
    orgId: input.orgId,
    name: input.name,
    keyHash: hashApiKeySecret(secret),
    keyPrefix: apiKeyPrefix(secret),
    role: input.role,
    isOperator: input.operator,
    createdByUserId: input.createdByUserId,
    createdByType: input.createdByType,
    createdByKeyId: input.createdByKeyId,
  })
  return { ...toKeyView(row), key: secret }
}

/**
 * `POST /v1/keys`: a key of the caller's org, never with a role above the caller's. It acts for the
 * caller's user: a session's own user, or for a key the user that key acts for (the root of the chain),
 * so a chain of keys never outlives the person at its start.
 */
export async function createApiKey(db: Database, principal: Principal, input: { name: string; role?: Role | undefined }): Promise<CreatedApiKey> {
  const role = input.role ?? principal.role
  if (principal.role === 'member' && role === 'admin') throw new ServiceError('role_not_allowed')
  return insertKey(db, {
    orgId: principal.orgId,
    name: input.name,
    role,
    operator: false,
    createdByUserId: principal.userId,
    createdByType: principal.kind === 'session' ? 'user' : 'key',
    createdByKeyId: principal.keyId,
  })
}

export async function listApiKeys(db: Database, principal: Principal, limit: number, cursor: string | undefined): Promise<Page<ApiKeyView>> {
  const rows = await apiKeys.listApiKeys(db, principal.orgId, limit, decodeCursor(cursor, 'api_keys'))
  const page = toPage(rows, limit, 'api_keys', (r) => ({ createdAt: r.created_at.toISOString(), id: r.id }))
  return { items: page.items.map(toKeyView), nextCursor: page.nextCursor }
}

/**
 * `GET /v1/orgs`: an operator sees every organization, anyone else their own (one page of one). The
 * cursor is checked either way, so a forged one is refused alike.
 */
export async function listOrganizations(db: Database, principal: Principal, limit: number, cursor: string | undefined): Promise<Page<OrganizationView>> {
  const after = decodeCursor(cursor, 'organizations')
  if (!principal.operator) {
    const own = after === null ? await orgs.findOrganization(db, principal.orgId) : null
    return { items: own === null ? [] : [toOrgView(own)], nextCursor: null }
  }
  const rows = await orgs.listOrganizations(db, limit, after)
  const page = toPage(rows, limit, 'organizations', (r) => ({ createdAt: r.created_at.toISOString(), id: r.id }))
  return { items: page.items.map(toOrgView), nextCursor: page.nextCursor }
}

/**
 * Deleting a key is an admin action (a member must not revoke other people's keys), and an operator key
 * can only be deleted by an operator: an org admin of the bootstrap org must not lock the operator out.
 */
export async function deleteApiKey(db: Database, authenticator: ApiKeyAuthenticator, principal: Principal, id: string): Promise<void> {
  requireAdmin(principal)
  await db.transaction(async (tx) => {
    const key = await apiKeys.findApiKey(tx, principal.orgId, id)
    if (key === null) throw new ServiceError('key_not_found')
    if (key.is_operator) requireOperator(principal)
    await apiKeys.deleteApiKey(tx, principal.orgId, id)
    // Delivered on commit to every instance's listener, which evicts the key from its cache.
    await notifyKeyChanges(tx, [id])
  })
  authenticator.evict(id)
}

/**
 * `POST /v1/orgs` (operators only): the org, its first admin user and an admin API key, in one
 * transaction so a failure leaves nothing behind.
 */
export async function createOrganization(
  db: Database,
  input: { name: string },
  creatorKeyId: string | null = null,
): Promise<{ org: OrganizationView; apiKey: CreatedApiKey }> {
  return db.transaction(async (tx) => {
    const org = await orgs.insertOrganization(tx, { id: randomUUID(), name: input.name })
    const user = await users.upsertUser(tx, { id: randomUUID(), displayName: `${input.name} admin` })
    await users.setMembership(tx, org.id, user.id, 'admin')
    // The key acts for the org's local admin user; the operator key that asked for it is recorded.
    const apiKey = await insertKey(tx, {
      orgId: org.id, name: 'initial admin key', role: 'admin', operator: false,
      createdByUserId: user.id, createdByType: 'operator', createdByKeyId: creatorKeyId,
    })
    return { org: toOrgView(org), apiKey }
  })
}

/** `agent-trust keys create --operator`: another operator key in the bootstrap (`default`) organization. */
export async function createOperatorKey(db: Database, name: string): Promise<CreatedApiKey> {
  return db.transaction(async (tx) => {
    const org = await orgs.findOrganizationByName(tx, DEFAULT_ORG_NAME)
    if (org === null) throw new ServiceError('org_not_found', 'No default organization: run `agent-trust bootstrap` first.')
    const user = await users.upsertUser(tx, { id: randomUUID(), displayName: name, isOperator: true })
    await users.setMembership(tx, org.id, user.id, 'admin')
    return insertKey(tx, { orgId: org.id, name, role: 'admin', operator: true, createdByUserId: user.id, createdByType: 'operator', createdByKeyId: null })
  })
}

export const DEFAULT_ORG_NAME = 'default'
export const BOOTSTRAP_KEY_FILE = 'bootstrap-api-key'

/**
 * Where the generated bootstrap key of `database` is written: one file per database, so that pointing a
 * data directory at another database never overwrites the key of the first. The embedded database
 * keeps `bootstrap-api-key`; a PostgreSQL database's file is named by a digest of its URL without the
 * password (`bootstrap-api-key.postgres-<12 hex>`), the throw-away `memory://` one's `….memory`.
 */
export function bootstrapKeyFile(dataDir: string, database: Config['database']): string {
  if (database.kind === 'pglite') return path.join(dataDir, database.dataDir === null ? `${BOOTSTRAP_KEY_FILE}.memory` : BOOTSTRAP_KEY_FILE)
  return path.join(dataDir, `${BOOTSTRAP_KEY_FILE}.postgres-${postgresIdentity(database.url)}`)
}

/** The same digest for every spelling of one PostgreSQL URL that differs only in secrets or form. */
function postgresIdentity(databaseUrl: string): string {
  const url = new URL(databaseUrl)
  url.protocol = 'postgres:'
  url.password = ''
  url.hostname = url.hostname.toLowerCase()
  if (url.port === '5432') url.port = ''
  for (const name of [...url.searchParams.keys()]) {
    if (/pass/i.test(name)) url.searchParams.delete(name)
  }
  url.searchParams.sort()
  return createHash('sha256').update(url.toString()).digest('hex').slice(0, 12)
}

export type BootstrapOutcome =
  | { kind: 'configured-key'; created: boolean }
  | { kind: 'generated-key'; key: string; file: string }
  | { kind: 'nothing-to-do' }

/**
 * docs/wire-contract.md §2 bootstrap. With `SERVICE_BOOTSTRAP_API_KEY`: make sure the default org, an operator
 * admin user and an operator key with exactly that secret exist (idempotent). Without it, and with no
 * organization at all: create them with a random key, written to `keyFile` (0600; bootstrapKeyFile).
 * Runs under an advisory lock so that instances starting together bootstrap once.
 */
export async function bootstrap(db: Database, options: { configuredKey: string | null; keyFile: string }): Promise<BootstrapOutcome> {
  const outcome = await db.transaction(async (tx) => {
    await tx.query('SELECT pg_advisory_xact_lock($1)', [BOOTSTRAP_LOCK_KEY])
    if (options.configuredKey !== null) {
      const existing = await apiKeys.findApiKeyByHash(tx, hashApiKeySecret(options.configuredKey))
      if (existing !== null) return { kind: 'configured-key', created: false } as const
      await createDefaultTenant(tx, options.configuredKey)
      return { kind: 'configured-key', created: true } as const
    }
    if ((await orgs.countOrganizations(tx)) > 0) return { kind: 'nothing-to-do' } as const
    const key = await createDefaultTenant(tx, null)
    return { kind: 'generated-key', key } as const
  })
  if (outcome.kind !== 'generated-key') return outcome
  const file = options.keyFile
  await mkdir(path.dirname(file), { recursive: true, mode: 0o700 })
  await writeFile(file, `${outcome.key}\n`, { mode: 0o600 })
  await chmod(file, 0o600)
  return { kind: 'generated-key', key: outcome.key, file }
}

// Arbitrary constant shared by all instances: the advisory lock key of the bootstrap.
const BOOTSTRAP_LOCK_KEY = 7_405_113_230

async function createDefaultTenant(tx: Queryable, secret: string | null): Promise<string> {
  const org = (await orgs.findOrganizationByName(tx, DEFAULT_ORG_NAME)) ??
    (await orgs.insertOrganization(tx, { id: randomUUID(), name: DEFAULT_ORG_NAME }))
  const user = await users.upsertUser(tx, { id: randomUUID(), displayName: 'bootstrap operator', isOperator: true })
  await users.setMembership(tx, org.id, user.id, 'admin')
  const created = await insertKey(tx, {
    orgId: org.id,
    name: 'bootstrap operator key',
    role: 'admin',
    operator: true,
    createdByUserId: user.id,
    createdByType: 'bootstrap',
    createdByKeyId: null,
    ...(secret === null ? {} : { secret }),
  })
  return created.key
}
