/**
 * Every administrative write leaves an audit record (docs/audit.md), from one place: the table below
 * names each mutating route's action, and start-up fails for a mutating route that is in neither list.
 * A request of an audited route carries an audit scope and a database bound to it (`request.db`); that
 * database writes the scope's pending record in the same transaction as the request's first write, so a
 * rolled-back write leaves no record. A refused attempt by an authenticated caller is recorded after the
 * response. The scope is passed explicitly, never through AsyncLocalStorage: on Node 20 one store
 * entered puts a hook on every promise of the process (docs/audit.md, "How a write is recorded").
 */
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { changeDigest, takeScopedEntry, type AuditScope } from '../../core/audit.js'
import type { Principal } from '../../core/principal.js'
import { isUuid } from '../../core/uuid.js'
import type { Database, Queryable, QueryOptions } from '../../db/database.js'
import { AUDIT_ROW_TARGETS, canCarryPendingRecord, insertPendingAudit, withPendingRecord } from '../../db/repositories/audit.js'

declare module 'fastify' {
  interface FastifyRequest {
    /** The database the request's handler works through: bound to its audit scope on an audited route. */
    db: Database
    /** The audit scope of an audited route's request, else null. */
    auditScope: AuditScope | null
  }
  interface FastifyContextConfig {
    /** The audit action of a mutating route (set from AUDITED_ROUTES). */
    auditAction?: string
  }
}

/** `METHOD url` of each administrative write → its action. */
export const AUDITED_ROUTES: Readonly<Record<string, string>> = {
  'POST /v1/agents': 'agent.create',
  'PUT /v1/agents/:id': 'agent.update',
  'DELETE /v1/agents/:id': 'agent.delete',
  'POST /v1/agents/:id/enable': 'agent.enable',
  'POST /v1/agents/:id/disable': 'agent.disable',
  'PUT /v1/agents/:id/trust-level': 'agent.trust_level',
  'POST /v1/agents/:id/verify-domain': 'agent.verify_domain',
  'POST /v1/agent-cards/sign': 'agent_card.sign',
  'POST /v1/agents/:id/badge': 'badge.issue',
  'POST /v1/agents/:id/badge/challenge': 'badge.challenge',
  'POST /v1/agents/:id/badge/pop': 'badge.issue_pop',
  'POST /v1/badges/:jti/revoke': 'badge.revoke',
  'POST /oauth/token': 'badge.issue_oauth',
  'POST /v1/keys': 'api_key.create',
  'DELETE /v1/keys/:id': 'api_key.delete',
  'POST /v1/orgs': 'organization.create',
  'PUT /v1/token-audiences': 'token_audiences.set',
  'POST /v1/console/session': 'console.sign_in',
  'DELETE /v1/console/session': 'console.sign_out',
  'POST /v1/webhooks/identity': 'idp.webhook',
}

/** Mutating routes that change nothing the trail is about (checks, simulations), or are recorded elsewhere. */
export const UNAUDITED_ROUTES: ReadonlySet<string> = new Set([
  'POST /v1/badges/verify',
  'POST /v1/agent-cards/validate',
  'POST /v1/agent-cards/verify',
  // each refusal in a report is recorded by the report's ingestion (gateway-reports.ts)
  'POST /v1/gateway/reports',
])

/** Routes matched by pattern (the policy routes live under /v1/orgs/:orgId). */
const AUDITED_PATTERNS: readonly (readonly [RegExp, string])[] = [
  [/^(POST|PUT) \/v1\/orgs\/:orgId\/policy\/(org|groups\/:groupId|agents\/:agentId)$/, 'policy.propose'],
  [/^POST \/v1\/orgs\/:orgId\/policy\/proposals\/:proposalId\/approve$/, 'policy.approve'],
  [/^POST \/v1\/orgs\/:orgId\/policy\/proposals\/:proposalId\/reject$/, 'policy.reject'],
  [/^POST \/v1\/orgs\/:orgId\/groups$/, 'policy_group.create'],
  [/^PUT \/v1\/orgs\/:orgId\/groups\/:groupId$/, 'policy_group.update'],
  [/^DELETE \/v1\/orgs\/:orgId\/groups\/:groupId$/, 'policy_group.delete'],
  [/^PUT \/v1\/orgs\/:orgId\/groups\/:groupId\/agents\/:agentId$/, 'policy_group.add_agent'],
  [/^DELETE \/v1\/orgs\/:orgId\/groups\/:groupId\/agents\/:agentId$/, 'policy_group.remove_agent'],
  [/^POST \/v1\/orgs\/:orgId\/policy\/agents\/:agentId\/simulate$/, ''],
]

const MUTATING = new Set(['POST', 'PUT', 'PATCH', 'DELETE'])

/** The action of a mutating route: a name, '' for one the trail leaves out, undefined for an unknown one. */
export function auditActionOf(method: string, url: string): string | undefined {
  const key = `${method} ${url}`
  if (AUDITED_ROUTES[key] !== undefined) return AUDITED_ROUTES[key]
  if (UNAUDITED_ROUTES.has(key)) return ''
  return AUDITED_PATTERNS.find(([pattern]) => pattern.test(key))?.[1]
}

/** Who a principal is in the trail. */
export function auditActorOf(principal: Principal): { actorType: AuditScope['actorType']; actorId: string | null } {
  if (principal.kind === 'session') return { actorType: 'user', actorId: principal.userId }
  return { actorType: principal.operator ? 'operator' : 'key', actorId: principal.keyId }
}

/** Names the actor of the request's scope when the handler authenticates it itself (console sign-in). */
export function noteAuditActor(request: FastifyRequest, principal: Principal): void {
  const scope = request.auditScope ?? null
  if (scope === null) return
  Object.assign(scope, auditActorOf(principal), { orgId: principal.orgId })
  // The credential signing in is the target, not the new session's row id (the hash of its cookie).
  scope.target ??= principal.keyId ?? principal.userId
}

const TARGET_PARAMS = ['id', 'jti', 'proposalId', 'groupId', 'agentId', 'orgId'] as const

function targetOf(params: unknown): string | null {
  if (params === null || typeof params !== 'object') return null
  const record = params as Record<string, unknown>
  for (const name of TARGET_PARAMS) if (typeof record[name] === 'string') return record[name] as string
  return null
}

export interface AuditPluginOptions {
  /** The database refused attempts are recorded in (the raw one: they are no part of a write). */
  readonly db: Database
  /** Called once a pending record is committed: the chainer runs soon. */
  readonly committed: () => void
  readonly onError: (error: unknown) => void
}

/** A route context with the request's database and audit scope in place of the ones it was registered with. */
export function forRequest<T extends { readonly db: Database }>(ctx: T, request: FastifyRequest): T & { readonly audit: AuditScope | null } {
  return { ...ctx, db: request.db, audit: request.auditScope }
}

/**
 * Gives every request its database: `db` itself, or with `audit` an audited database bound to the scope
 * of an audited route's request.
 */
export function registerRequestDatabase(app: FastifyInstance, db: Database, audit: AuditPluginOptions | null): void {
  // Routes of plugins registered before these decorators (the Swagger UI's) see neither: read them with `?? null`.
  app.decorateRequest('db', null as unknown as Database)
  app.decorateRequest('auditScope', null)
  if (audit === null) {
    app.addHook('onRequest', (request, _reply, done) => {
      request.db = db
      done()
    })
    return
  }
  app.addHook('onRoute', (route) => {
    const methods = (Array.isArray(route.method) ? route.method : [route.method]).filter((m) => MUTATING.has(m))
    for (const method of methods) {
      const action = auditActionOf(method, route.url)
      if (action === undefined) throw new Error(`${method} ${route.url} changes state but names no audit action (src/admin/plugins/audit.ts)`)
      if (action !== '') route.config = { ...(route.config ?? {}), auditAction: action }
    }
  })
  app.addHook('onRequest', (request, _reply, done) => {
    const action = request.routeOptions.config.auditAction
    if (action === undefined) {
      request.db = db
      return done()
    }
    const scope: AuditScope = {
      armed: false, recorded: false, action, actorType: 'key', actorId: null, orgId: null, target: null,
      requestId: request.id, digest: null, committed: audit.committed,
    }
    request.auditScope = scope
    request.db = auditedDatabase(db, scope)
    done()
  })
  app.addHook('preHandler', async (request) => {
    const scope = request.auditScope ?? null
    if (scope === null) return
    if (request.principal !== null) Object.assign(scope, auditActorOf(request.principal), { orgId: request.principal.orgId })
    else if (scope.action === 'idp.webhook') scope.actorType = 'idp'
    const params = request.params as Record<string, unknown> | undefined
    if (typeof params?.orgId === 'string' && isUuid(params.orgId)) scope.orgId = params.orgId.toLowerCase()
    scope.target = targetOf(params)
    scope.digest = changeDigest({ method: request.method, route: request.routeOptions.url, params: params ?? {}, body: request.body ?? null })
    scope.armed = true
  })
  app.addHook('onResponse', async (request, reply) => {
    const scope = request.auditScope ?? null
    if (scope === null || !scope.armed || scope.recorded) return
    // A success that wrote nothing through the database still is one; a refusal is one only when someone was named.
    const refused = reply.statusCode >= 400
    if (refused && request.principal === null && scope.actorId === null && scope.actorType !== 'idp') return
    const entry = takeScopedEntry(scope, refused ? `refused:${reply.statusCode}` : 'success')
    if (entry === null) return
    void insertPendingAudit(audit.db, [entry]).then(audit.committed, audit.onError)
  })
}

const WRITE = /^\s*(INSERT|UPDATE|DELETE|MERGE)\b|^\s*WITH\b[\s\S]*\b(INSERT\s+INTO|DELETE\s+FROM)\b/i
const RETURNING = /\bRETURNING\b/i

function rowTarget(rows: readonly unknown[]): string | null {
  const row = rows[0] as Record<string, unknown> | undefined
  if (row === undefined) return null
  for (const name of AUDIT_ROW_TARGETS) if (typeof row[name] === 'string') return row[name] as string
  return null
}

// Planning the wrapped statement anew cost more than the record's own insert; each text is prepared once
// per connection under a name of its own (the repositories' texts are a small fixed set).
const preparedNames = new Map<string, string>()
const PREPARED_NAMES_MAX = 1000

function preparedAs(text: string, options: QueryOptions | undefined): QueryOptions | undefined {
  let name = preparedNames.get(text)
  if (name === undefined) {
    if (preparedNames.size >= PREPARED_NAMES_MAX) return undefined
    name = options?.name === undefined ? `audited-write-${preparedNames.size}` : `${options.name}:audited`
    preparedNames.set(text, name)
  }
  return { name }
}

/**
 * Runs a write with the scope's pending record in the same statement (withPendingRecord), the record
 * kept only when the statement returned a row. Null when the statement cannot carry it. `standalone`: the
 * statement is no part of a transaction, so it committed when it answered.
 */
async function recordInStatement(
  q: Queryable, scope: AuditScope, standalone: boolean, text: string, params: readonly unknown[] | undefined, options: QueryOptions | undefined,
): Promise<unknown[] | null> {
  if (!canCarryPendingRecord(text)) return null
  const entry = takeScopedEntry(scope)
  if (entry === null) return null
  const joined = withPendingRecord(text, params ?? [], entry) as { text: string; params: unknown[] }
  const rows = await rollbackForgets(scope, () => q.query(joined.text, joined.params, preparedAs(text, options)))
  if (rows.length === 0) scope.recorded = false
  else if (standalone) scope.committed()
  return rows
}

/** A rolled-back transaction took its pending record with it: the scope may record again (a refusal). */
async function rollbackForgets<T>(scope: AuditScope, work: () => Promise<T>): Promise<T> {
  try {
    return await work()
  } catch (error) {
    scope.recorded = false
    throw error
  }
}

/**
 * An audited request's database: once its scope is armed, the first write (a statement, or a
 * transaction) also inserts the scope's pending record, in the same transaction.
 */
export function auditedDatabase(db: Database, scope: AuditScope): Database {
  const due = (): boolean => scope.armed && !scope.recorded
  return {
    kind: db.kind,
    exec: (script) => db.exec(script),
    listen: (channel, onNotify, onResync) => db.listen(channel, onNotify, onResync),
    ping: () => db.ping(),
    close: () => db.close(),
    async query(text, params, queryOptions) {
      if (!due() || !WRITE.test(text)) return db.query(text, params, queryOptions)
      const joined = await recordInStatement(db, scope, true, text, params, queryOptions)
      if (joined !== null) return joined as never
      const rows = await rollbackForgets(scope, () => db.transaction(async (tx) => {
        const result = await tx.query(text, params, queryOptions)
        // A RETURNING statement that returned nothing changed nothing (an update of a missing row, then a 404).
        if (result.length === 0 && RETURNING.test(text)) return result
        scope.target ??= rowTarget(result)
        const entry = takeScopedEntry(scope)
        if (entry !== null) await insertPendingAudit(tx, [entry])
        return result
      }))
      if (scope.recorded) scope.committed()
      return rows as never
    },
    async transaction(work) {
      if (!due()) return db.transaction(work)
      const result = await rollbackForgets(scope, () => db.transaction(async (tx) => {
        let changed = false
        const watched: Queryable = {
          async query(text, params, queryOptions) {
            if (!scope.recorded && WRITE.test(text)) {
              const joined = await recordInStatement(tx, scope, false, text, params, queryOptions)
              if (joined !== null) return joined as never
            }
            const rows = await tx.query(text, params, queryOptions)
            if (WRITE.test(text) && (rows.length > 0 || !RETURNING.test(text))) {
              changed = true
              scope.target ??= rowTarget(rows)
            }
            return rows as never
          },
          exec: (script) => tx.exec(script),
        }
        const value = await work(watched)
        // A transaction whose writes all found nothing changed nothing: the response decides the record.
        const entry = changed ? takeScopedEntry(scope) : null
        if (entry !== null) await insertPendingAudit(tx, [entry])
        return value
      }))
      if (scope.recorded) scope.committed()
      return result
    },
  }
}
