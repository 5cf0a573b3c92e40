/**
 * Registry rules for agents (docs/api.md §2.2, §3.1, docs/wire-contract.md §5): org isolation, DID ownership, public keys
 * and Agent Cards. No Fastify here; routes call these functions with an authenticated principal.
 */
import { randomUUID } from 'node:crypto'
import { validateAgentCard } from '../../core/agent-card.js'
import { agentDidWeb, agentDidWebPrefix, isDid, ownAgentIdFromDid } from '../../core/did.js'
import { normalizeDomain } from '../../core/domain-name.js'
import { jwkToPublicKey, multibaseToPublicKey, publicKeyToJwk } from '../../core/did-key.js'
import { ServiceError } from '../../core/errors.js'
import { decodeCursor, toPage, type Page } from '../../core/pagination.js'
import { sqlState, UNIQUE_VIOLATION, type Database, type Queryable } from '../../db/database.js'
import * as agents from '../../db/repositories/agents.js'
import * as policies from '../../db/repositories/policies.js'
import * as badges from '../../db/repositories/badges.js'
import * as groups from '../../db/repositories/groups.js'
import { REVOCATION_CHANNEL } from '../../core/notify-channels.js'
import type { AgentRow, AgentStatus } from '../../db/repositories/agents.js'
import { requireAdmin, type Principal } from '../../core/principal.js'

export interface AgentView {
  id: string
  name: string
  domain: string | null
  description: string | null
  /** The explicit DID when registered, else this registry's did:web for the agent. */
  did: string
  status: AgentStatus
  trustLevel: string
  publicKeyJwk: Record<string, unknown> | null
  agent_card?: Record<string, unknown> | null
  createdAt: string
  updatedAt: string
}

export interface AgentInput {
  name?: string
  domain?: string | null
  description?: string | null
  did?: string | null
  publicKeyJwk?: unknown
  publicKeyMultibase?: string | null
  agent_card?: unknown
}

export interface RegistryContext {
  readonly db: Database
  /** `host` or `host%3Aport` of this registry's did:web identifiers. */
  readonly registryDidHost: string
}

export function effectiveDid(ctx: RegistryContext, row: AgentRow): string {
  return row.did ?? agentDidWeb(ctx.registryDidHost, row.id)
}

export function toAgentView(ctx: RegistryContext, row: AgentRow, withCard = true): AgentView {
  const view: AgentView = {
    id: row.id,
    name: row.name,
    domain: row.domain,
    description: row.description,
    did: effectiveDid(ctx, row),
    status: row.status,
    trustLevel: String(row.trust_level),
    publicKeyJwk: row.public_key_jwk,
    createdAt: row.created_at.toISOString(),
    updatedAt: row.updated_at.toISOString(),
  }
  if (withCard) view.agent_card = row.agent_card
  return view
}

/**
 * Normalizes an explicit DID. A DID inside this registry's own `agents` namespace is accepted only
 * when it names the agent itself (then nothing is stored): otherwise an agent could claim another
 * agent's registry identity.
 */
function normalizeDid(ctx: RegistryContext, did: string | null | undefined, agentId: string): string | null | undefined {
  if (did === undefined || did === null) return did
  if (!isDid(did)) throw new ServiceError('invalid_did', 'did must be a DID such as did:key:z6Mk… or did:web:example.com')
  const ownId = ownAgentIdFromDid(ctx.registryDidHost, did)
  if (ownId !== null) {
    if (ownId.toLowerCase() !== agentId) {
      throw new ServiceError('invalid_did', 'did lies in this registry\'s namespace and names another agent')
    }
    return null
  }
  return did
}

/**
 * Accepts `publicKeyJwk` or `publicKeyMultibase` (both only when they are the same key). Undefined
 * leaves the stored key alone; null (in whichever field is given) clears it.
 */
function normalizePublicKey(input: AgentInput): Record<string, unknown> | null | undefined {
  const { publicKeyJwk: jwk, publicKeyMultibase: multibase } = input
  if (jwk === undefined && multibase === undefined) return undefined
  let fromJwk: Uint8Array | undefined
  let fromMultibase: Uint8Array | undefined
  try {
    if (jwk !== undefined && jwk !== null) fromJwk = jwkToPublicKey(jwk)
    if (multibase !== undefined && multibase !== null) fromMultibase = multibaseToPublicKey(multibase)
  } catch {
    throw new ServiceError('invalid_public_key', 'The public key must be an Ed25519 key: a JWK {kty:"OKP", crv:"Ed25519", x} without private parts, or a multibase (z…) Ed25519 key.')
  }
  if (fromJwk !== undefined && fromMultibase !== undefined && !Buffer.from(fromJwk).equals(fromMultibase)) {
    throw new ServiceError('invalid_public_key', 'publicKeyJwk and publicKeyMultibase name different keys.')
  }
  const raw = fromJwk ?? fromMultibase
  return raw === undefined ? null : publicKeyToJwk(raw)
}

function normalizeCard(card: unknown): Record<string, unknown> | null | undefined {
  if (card === undefined || card === null) return card as null | undefined
  const result = validateAgentCard(card)
  if (!result.valid) {
    throw new ServiceError('invalid_agent_card', 'The agent card is not valid; see errors.', { errors: result.errors })
  }
  return card as Record<string, unknown>
}

/** A registered domain is a host name (the one DNS validation and badges can vouch for), lower-cased. */
function normalizeAgentDomain(domain: string | null | undefined): string | null | undefined {
  return domain === undefined || domain === null ? domain : normalizeDomain(domain)
}

function translateUniqueViolation(error: unknown): never {
  if (sqlState(error) === UNIQUE_VIOLATION) throw new ServiceError('did_already_registered')
  throw error
}

/**
 * Runs an agent write and announces the org on NOTIFY `service_policies` in the same transaction: the
 * policy bundles carry the org's agents (DIDs, levels, groups), so their builders must hear of it at once
 * rather than at the next poll. A write that changes nothing (null) announces nothing.
 */
async function withPolicyNotice<T>(ctx: RegistryContext, orgId: string, write: (tx: Queryable) => Promise<T>): Promise<T> {
  return ctx.db.transaction(async (tx) => {
    const result = await write(tx)
    if (result !== null) await policies.notifyPolicyChange(tx, orgId)
    return result
  })
}

export async function createAgent(ctx: RegistryContext, principal: Principal, input: AgentInput & { name: string }): Promise<AgentView> {
  requireAdmin(principal)
  const id = randomUUID()
  const did = normalizeDid(ctx, input.did, id) ?? null
  const publicKeyJwk = normalizePublicKey(input) ?? null
  const agentCard = normalizeCard(input.agent_card) ?? null
  const row = await withPolicyNotice(ctx, principal.orgId, (tx) => agents.insertAgent(tx, {
    id,
    orgId: principal.orgId,
    name: input.name,
    domain: normalizeAgentDomain(input.domain) ?? null,
    description: input.description ?? null,
    did,
    publicKeyJwk,
    agentCard,
  })).catch(translateUniqueViolation)
  return toAgentView(ctx, row)
}

export async function getAgent(ctx: RegistryContext, principal: Principal, id: string): Promise<AgentView> {
  const row = await agents.findAgent(ctx.db, principal.orgId, id)
  if (row === null) throw new ServiceError('agent_not_found')
  return toAgentView(ctx, row)
}

/** The organization's agents; with `search`, those whose name, domain or DID contains it (any case). */
export async function listAgents(
  ctx: RegistryContext, principal: Principal, limit: number, cursor: string | undefined, search?: string,
): Promise<Page<AgentView>> {
  const after = decodeCursor(cursor, 'agents')
  const rows = search === undefined || search === ''
    ? await agents.listAgents(ctx.db, principal.orgId, limit, after)
    : await agents.searchAgents(ctx.db, principal.orgId, search, agentDidWebPrefix(ctx.registryDidHost), limit, after)
  const page = toPage(rows, limit, 'agents', (r) => ({ createdAt: r.created_at.toISOString(), id: r.id }))
  return { items: page.items.map((r) => toAgentView(ctx, r, false)), nextCursor: page.nextCursor }
}

export async function updateAgent(ctx: RegistryContext, principal: Principal, id: string, input: AgentInput): Promise<AgentView> {
  requireAdmin(principal)
  const patch: agents.AgentPatch = {}
  if (input.name !== undefined) patch.name = input.name
  if (input.domain !== undefined) patch.domain = normalizeAgentDomain(input.domain) ?? null
  if (input.description !== undefined) patch.description = input.description
  const did = normalizeDid(ctx, input.did, id)
  if (did !== undefined) patch.did = did
  const publicKeyJwk = normalizePublicKey(input)
  if (publicKeyJwk !== undefined) patch.publicKeyJwk = publicKeyJwk
  const agentCard = normalizeCard(input.agent_card)
  if (agentCard !== undefined) patch.agentCard = agentCard
  const row = await withPolicyNotice(ctx, principal.orgId, (tx) => agents.updateAgent(tx, principal.orgId, id, patch))
    .catch(translateUniqueViolation)
  if (row === null) throw new ServiceError('agent_not_found')
  return toAgentView(ctx, row)
}

/** The revocation reason given to the badges of a deleted agent. */
export const AGENT_DELETED = 'agent_deleted'

/**
 * Deletes an agent. Its live (active or proposed) agent-scope policy documents are archived in the same
 * transaction, so a leftover proposal can never be approved for an agent that is gone. Its unexpired badges
 * are revoked with it: once the agent is gone its DID falls back to the organization's policy, which must
 * not hand a deleted (perhaps disabled) agent's badges a second life. The badge records stay.
 */
export async function deleteAgent(ctx: RegistryContext, principal: Principal, id: string): Promise<void> {
  requireAdmin(principal)
  await ctx.db.transaction(async (tx) => {
    const revoked = await badges.revokeAgentBadges(tx, principal.orgId, id, AGENT_DELETED)
    if (!(await agents.deleteAgent(tx, principal.orgId, id))) throw new ServiceError('agent_not_found')
    if (revoked.length > 0) await tx.query('SELECT pg_notify($1, jti) FROM unnest($2::text[]) AS jti', [REVOCATION_CHANNEL, revoked])
    await policies.archiveScope(tx, { orgId: principal.orgId, scopeType: 'agent', scopeId: id })
    await policies.notifyPolicyChange(tx, principal.orgId)
  })
}

export async function setAgentStatus(ctx: RegistryContext, principal: Principal, id: string, status: AgentStatus): Promise<AgentView> {
  requireAdmin(principal)
  const row = await withPolicyNotice(ctx, principal.orgId, (tx) => agents.setAgentStatus(tx, principal.orgId, id, status))
  if (row === null) throw new ServiceError('agent_not_found')
  return toAgentView(ctx, row)
}

/** Public `GET /v1/agents/{id}/status`: `{id, did, status}` only, any org (docs/wire-contract.md §4). */
export async function publicAgentStatus(ctx: RegistryContext, id: string): Promise<{ id: string; did: string; status: AgentStatus }> {
  const row = await agents.findAgentById(ctx.db, id)
  if (row === null) throw new ServiceError('agent_not_found')
  return { id: row.id, did: effectiveDid(ctx, row), status: row.status }
}

/** A badge as the console lists it: its record, never the token (which the registry does not keep). */
export interface BadgeRecordView {
  jti: string
  subject: string
  trustLevel: string
  ial: '0' | '1'
  issuedAt: string
  expiresAt: string
  revoked: boolean
  revokedAt: string | null
  reason: string | null
}

/** `GET /v1/agents/{id}/badges`: the badges issued to an agent of the caller's org, newest first. */
export async function listAgentBadges(
  ctx: RegistryContext, principal: Principal, agentId: string, limit: number, cursor: string | undefined,
): Promise<Page<BadgeRecordView>> {
  const after = decodeCursor(cursor, 'badges')
  if ((await agents.findAgent(ctx.db, principal.orgId, agentId)) === null) throw new ServiceError('agent_not_found')
  const rows = await badges.listAgentBadges(ctx.db, principal.orgId, agentId, limit, after)
  const page = toPage(rows, limit, 'badges', (r) => ({ createdAt: r.issued_at.toISOString(), id: r.jti }))
  return {
    items: page.items.map((r) => ({
      jti: r.jti,
      subject: r.subject,
      trustLevel: String(r.trust_level),
      ial: r.ial,
      issuedAt: r.issued_at.toISOString(),
      expiresAt: r.expires_at.toISOString(),
      revoked: r.revoked_at !== null,
      revokedAt: r.revoked_at?.toISOString() ?? null,
      reason: r.revoke_reason,
    })),
    nextCursor: page.nextCursor,
  }
}

/** `GET /v1/agents/{id}/groups`: the policy groups an agent of the caller's org belongs to. */
export async function listAgentGroups(
  ctx: RegistryContext, principal: Principal, agentId: string,
): Promise<{ id: string; name: string; precedence: number }[]> {
  if ((await agents.findAgent(ctx.db, principal.orgId, agentId)) === null) throw new ServiceError('agent_not_found')
  return groups.listGroupsOfAgent(ctx.db, principal.orgId, agentId)
}
