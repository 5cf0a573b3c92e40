/**
 * The policy workflow (docs/api.md §2.10, §3.4, §4.6, docs/wire-contract.md §7, §13): proposals per scope, atomic
 * approval, rejection, groups and their membership, resolution and simulation for one agent. No
 * Fastify here; routes call these functions with an authenticated principal.
 */
import { randomUUID } from 'node:crypto'
import { agentDidWeb } from '../../core/did.js'
import { ServiceError } from '../../core/errors.js'
import { contentHash, parsePolicyYaml, POLICY_SCHEMA_VERSION } from '../../core/policy/grammar.js'
import { a2aParamsFor, classifyA2a } from '../../core/a2a-methods.js'
import { mcpMethodSpec } from '../../core/mcp-methods.js'
import { canonicalResourceUri } from '../../core/resource-uri.js'
import { messagePdpAction } from '../../core/policy/pdp-action.js'
import { evaluate, MCP_TOOL_CALL_OPERATION } from '../../core/policy/evaluate.js'
import type { PdpDecision, PdpRequest } from '../../core/policy/types.js'
import { TRUST_CODES, type TrustCode } from '../../core/trust-level.js'
import { sqlState, UNIQUE_VIOLATION, type Database, type Queryable } from '../../db/database.js'
import { findAgent, type AgentRow } from '../../db/repositories/agents.js'
import * as groups from '../../db/repositories/groups.js'
import type { GroupRow } from '../../db/repositories/groups.js'
import * as policies from '../../db/repositories/policies.js'
import type { ActiveLayerRow, PolicyDocumentRow, PolicyScope } from '../../db/repositories/policies.js'
import { requireAdmin, type Principal } from '../../core/principal.js'
import { resolveRows, toDocumentView, type PolicyDocumentView, type Resolution } from '../../bundles/policy-documents.js'

/** What the policy service needs from the app. */
export interface PolicyServiceContext {
  readonly db: Database
  /** `host` or `host%3Aport` of this registry's did:web identifiers. */
  readonly registryDidHost: string
}

/** A group as it leaves the process. */
export interface GroupView {
  id: string
  org_id: string
  name: string
  precedence: number
  agent_ids: string[]
  created_at: string
  updated_at: string
}

/** The scope named by a route: the org itself, one group or one agent of the org. */
export type ScopeRef = { type: 'org' } | { type: 'group'; id: string } | { type: 'agent'; id: string }

/** Body of the simulate endpoint (docs/wire-contract.md §13). */
export interface SimulateInput {
  subject?: { did?: string; trust_level?: TrustCode | '' }
  action?: { operation: string; capability_class?: string | null; mcp_tool?: string; http_operation?: string }
  /** An MCP message on an MCP route at `path` (default `/mcp`), asked as the gateway asks it (docs/mcp.md). */
  mcp?: { method: string; name?: string; uri?: string; path?: string }
  /** An A2A JSON-RPC call (either version) on an A2A route at `path` (default `/`), asked as the gateway asks it (docs/a2a.md). */
  a2a?: { method: string; task_id?: string; context_id?: string; skill?: string; path?: string }
  resource?: { identifier?: string; case_insensitive?: boolean }
  context?: Record<string, unknown>
  environment?: Record<string, unknown>
  proposal_id?: string
}

/**
 * A principal of another org gets 404 for the whole org, never 403: the org's existence and contents
 * stay invisible (docs/wire-contract.md §2).
 */
export function requireOrgMember(principal: Principal, orgId: string): string {
  const normalized = orgId.toLowerCase()
  if (principal.orgId.toLowerCase() !== normalized) throw new ServiceError('org_not_found')
  return normalized
}

/** Membership, then the admin role (docs/api.md §5 rule 2). */
export function requireOrgAdmin(principal: Principal, orgId: string): string {
  const normalized = requireOrgMember(principal, orgId)
  requireAdmin(principal)
  return normalized
}

function iso(value: Date | string): string {
  return (value instanceof Date ? value : new Date(value)).toISOString()
}

function toGroupView(row: GroupRow): GroupView {
  return {
    id: row.id,
    org_id: row.org_id,
    name: row.name,
    precedence: Number(row.precedence),
    agent_ids: [...(row.agent_ids ?? [])],
    created_at: iso(row.created_at),
    updated_at: iso(row.updated_at),
  }
}

// The stored scope of a route's scope, after checking that the group or agent belongs to the org, so
// documents are never filed under another org's (or a made-up) id.
async function scopeOf(q: Queryable, orgId: string, ref: ScopeRef): Promise<PolicyScope> {
  if (ref.type === 'org') return { orgId, scopeType: 'org', scopeId: orgId }
  const id = ref.id.toLowerCase()
  if (ref.type === 'group') {
    if ((await groups.findGroup(q, orgId, id)) === null) throw new ServiceError('group_not_found')
    return { orgId, scopeType: 'group', scopeId: id }
  }
  if ((await findAgent(q, orgId, id)) === null) throw new ServiceError('agent_not_found')
  return { orgId, scopeType: 'agent', scopeId: id }
}

export async function getActivePolicy(ctx: PolicyServiceContext, principal: Principal, orgId: string, ref: ScopeRef): Promise<PolicyDocumentView> {
  const org = requireOrgMember(principal, orgId)
  const scope = await scopeOf(ctx.db, org, ref)
  const row = await policies.findActiveDocument(ctx.db, scope)
  if (row === null) throw new ServiceError('policy_not_found')
  return toDocumentView(row)
}

export async function getPolicyHistory(ctx: PolicyServiceContext, principal: Principal, orgId: string, ref: ScopeRef): Promise<PolicyDocumentView[]> {
  const org = requireOrgMember(principal, orgId)
  const scope = await scopeOf(ctx.db, org, ref)
  return (await policies.listScopeHistory(ctx.db, scope)).map(toDocumentView)
}

/**
 * Files a new proposal for a scope (POST and PUT alike). The YAML is validated in full first, so an
 * invalid document writes nothing. Version rule: see `nextProposalVersion`.
 */
export async function proposePolicy(
  ctx: PolicyServiceContext, principal: Principal, orgId: string, ref: ScopeRef, yamlContent: string,
): Promise<PolicyDocumentView> {
  const org = requireOrgAdmin(principal, orgId)
  const parsed = parsePolicyYaml(yamlContent)
  if (!parsed.ok) {
    throw new ServiceError('invalid_policy', `The policy has ${parsed.issues.length} problem(s).`, {
      errors: parsed.issues.map((issue) => ({ code: issue.code, path: issue.path, message: issue.message })),
    })
  }
  const row = await ctx.db.transaction(async (tx) => {
    const scope = await scopeOf(tx, org, ref)
    return policies.insertPolicyDocument(tx, {
      ...scope,
      id: randomUUID(),
      version: await policies.nextProposalVersion(tx, scope),
      yamlContent,
      schemaVersion: POLICY_SCHEMA_VERSION,
      contentHash: contentHash(yamlContent),
      createdByUserId: principal.userId,
      createdByType: creatorType(principal),
    })
  })
  return toDocumentView(row)
}

function creatorType(principal: Principal): 'human' | 'api_key' {
  return principal.kind === 'session' ? 'human' : 'api_key'
}

export async function listProposals(ctx: PolicyServiceContext, principal: Principal, orgId: string): Promise<PolicyDocumentView[]> {
  const org = requireOrgMember(principal, orgId)
  return (await policies.listProposals(ctx.db, org)).map(toDocumentView)
}

/**
 * Approves a proposal in one transaction: lock the scope, re-read the proposal under a row lock,
 * supersede the scope's active document, then activate with a guarded UPDATE. The supersede comes first
 * because the one-active index is checked per statement. Of two concurrent approvals the second waits
 * for the first and then finds the document no longer in proposal state: 400.
 */
export async function approveProposal(ctx: PolicyServiceContext, principal: Principal, orgId: string, proposalId: string): Promise<PolicyDocumentView> {
  const org = requireOrgAdmin(principal, orgId)
  const id = proposalId.toLowerCase()
  const row = await ctx.db.transaction(async (tx) => {
    const first = await policies.findDocument(tx, org, id)
    if (first === null) throw new ServiceError('proposal_not_found')
    if (first.state !== 'proposal') throw notPending(first)
    const scope: PolicyScope = { orgId: org, scopeType: first.scope_type, scopeId: first.scope_id }
    await policies.lockScope(tx, scope)
    const current = await policies.findDocument(tx, org, id, { forUpdate: true })
    if (current === null) throw new ServiceError('proposal_not_found')
    if (current.state !== 'proposal') throw notPending(current)
    await policies.supersedeActive(tx, scope)
    const activated = await policies.activateProposal(tx, org, id, principal.userId)
    if (activated === null) throw notPending(current)
    await policies.notifyPolicyChange(tx, org)
    return activated
  }).catch((error: unknown) => {
    // Only reachable if something bypassed the scope lock; still a lost race, not a server fault.
    if (sqlState(error) === UNIQUE_VIOLATION) throw new ServiceError('proposal_not_pending', 'Another document of this scope was activated concurrently.')
    throw error
  })
  return toDocumentView(row)
}

function notPending(row: PolicyDocumentRow): ServiceError {
  return new ServiceError('proposal_not_pending', `The policy document is ${row.state}, not a proposal.`)
}

export async function rejectProposal(
  ctx: PolicyServiceContext, principal: Principal, orgId: string, proposalId: string, reason: string,
): Promise<PolicyDocumentView> {
  const org = requireOrgAdmin(principal, orgId)
  if (reason.trim() === '') throw new ServiceError('invalid_request', 'reason is required.')
  const id = proposalId.toLowerCase()
  const rejected = await policies.rejectProposal(ctx.db, org, id, reason)
  if (rejected !== null) return toDocumentView(rejected)
  const existing = await policies.findDocument(ctx.db, org, id)
  if (existing === null) throw new ServiceError('proposal_not_found')
  throw notPending(existing)
}

// --- groups ---------------------------------------------------------------------------------------

export async function listGroups(ctx: PolicyServiceContext, principal: Principal, orgId: string): Promise<GroupView[]> {
  const org = requireOrgMember(principal, orgId)
  return (await groups.listGroups(ctx.db, org)).map(toGroupView)
}

export async function getGroup(ctx: PolicyServiceContext, principal: Principal, orgId: string, groupId: string): Promise<GroupView> {
  const org = requireOrgMember(principal, orgId)
  const row = await groups.findGroup(ctx.db, org, groupId.toLowerCase())
  if (row === null) throw new ServiceError('group_not_found')
  return toGroupView(row)
}

function nameTaken(error: unknown): never {
  if (sqlState(error) === UNIQUE_VIOLATION) throw new ServiceError('group_name_taken')
  throw error
}

export async function createGroup(
  ctx: PolicyServiceContext, principal: Principal, orgId: string, input: { name: string; precedence: number },
): Promise<GroupView> {
  const org = requireOrgAdmin(principal, orgId)
  // A new group has no members and no policy yet, so no effective policy changes: no notification.
  const row = await groups.insertGroup(ctx.db, { id: randomUUID(), orgId: org, name: input.name, precedence: input.precedence }).catch(nameTaken)
  return toGroupView(row)
}

export async function updateGroup(
  ctx: PolicyServiceContext, principal: Principal, orgId: string, groupId: string, patch: { name?: string; precedence?: number },
): Promise<GroupView> {
  const org = requireOrgAdmin(principal, orgId)
  const row = await ctx.db.transaction(async (tx) => {
    const updated = await groups.updateGroup(tx, org, groupId.toLowerCase(), patch)
    if (updated === null) throw new ServiceError('group_not_found')
    // a precedence change reorders the merge of every member agent
    await policies.notifyPolicyChange(tx, org)
    return updated
  }).catch(nameTaken)
  return toGroupView(row)
}

/** Deletes a group; its live documents are archived so they cannot resurface under a reused id. */
export async function deleteGroup(ctx: PolicyServiceContext, principal: Principal, orgId: string, groupId: string): Promise<void> {
  const org = requireOrgAdmin(principal, orgId)
  const id = groupId.toLowerCase()
  await ctx.db.transaction(async (tx) => {
    await policies.archiveScope(tx, { orgId: org, scopeType: 'group', scopeId: id })
    if (!(await groups.deleteGroup(tx, org, id))) throw new ServiceError('group_not_found')
    await policies.notifyPolicyChange(tx, org)
  })
}

/** Adds (`member` true) or removes an agent of the org to or from a group; both are idempotent. */
export async function setGroupMembership(
  ctx: PolicyServiceContext, principal: Principal, orgId: string, groupId: string, agentId: string, member: boolean,
): Promise<void> {
  const org = requireOrgAdmin(principal, orgId)
  await ctx.db.transaction(async (tx) => {
    const group = await groups.findGroup(tx, org, groupId.toLowerCase())
    if (group === null) throw new ServiceError('group_not_found')
    const agent = await findAgent(tx, org, agentId.toLowerCase())
    if (agent === null) throw new ServiceError('agent_not_found')
    const changed = member ? await groups.addMember(tx, group.id, agent.id) : await groups.removeMember(tx, group.id, agent.id)
    if (changed) await policies.notifyPolicyChange(tx, org)
  })
}

// --- resolution and simulation --------------------------------------------------------------------

async function agentOf(ctx: PolicyServiceContext, org: string, agentId: string): Promise<AgentRow> {
  const agent = await findAgent(ctx.db, org, agentId.toLowerCase())
  if (agent === null) throw new ServiceError('agent_not_found')
  return agent
}

export async function resolveAgentPolicy(ctx: PolicyServiceContext, principal: Principal, orgId: string, agentId: string): Promise<Resolution> {
  const org = requireOrgMember(principal, orgId)
  const agent = await agentOf(ctx, org, agentId)
  return resolveRows(await policies.listActiveLayers(ctx.db, org, agent.id))
}

/**
 * The active layers with one proposal put in place of its scope's active document, as if approved.
 * A proposal for a group the agent is not in, or for another agent, leaves the layers as they are.
 */
async function layersWithProposal(ctx: PolicyServiceContext, org: string, agent: AgentRow, proposalId: string): Promise<ActiveLayerRow[]> {
  const active = await policies.listActiveLayers(ctx.db, org, agent.id)
  const proposal = await policies.findDocument(ctx.db, org, proposalId.toLowerCase())
  if (proposal === null) throw new ServiceError('proposal_not_found')
  if (proposal.state !== 'proposal') throw notPending(proposal)
  let precedence: number | null = null
  if (proposal.scope_type === 'group') {
    const group = await groups.findGroup(ctx.db, org, proposal.scope_id)
    if (group === null || !group.agent_ids.includes(agent.id)) return active
    precedence = Number(group.precedence)
  } else if (proposal.scope_type === 'agent' && proposal.scope_id !== agent.id) {
    return active
  }
  const rest = active.filter((row) => !(row.scope_type === proposal.scope_type && row.scope_id === proposal.scope_id))
  return [...rest, { ...proposal, precedence }]
}

/**
 * Evaluates a request for an agent with the built-in evaluator (docs/wire-contract.md §13), optionally as if a
 * pending proposal were approved. Reads only; nothing is written.
 */
export async function simulate(
  ctx: PolicyServiceContext, principal: Principal, orgId: string, agentId: string, input: SimulateInput,
): Promise<PdpDecision> {
  const org = requireOrgMember(principal, orgId)
  const agent = await findAgent(ctx.db, org, agentId.toLowerCase())
  if (agent === null) throw new ServiceError('simulate_agent_unknown')
  const rows = input.proposal_id === undefined
    ? await policies.listActiveLayers(ctx.db, org, agent.id)
    : await layersWithProposal(ctx, org, agent, input.proposal_id)
  const { resolved } = resolveRows(rows)
  return evaluate(pdpRequestFor(ctx, org, agent, input), resolved)
}

/** The action and resource as given, or as the gateway builds them for an MCP message or A2A call (stages/decide.ts). */
function actionAndResource(input: SimulateInput): Pick<PdpRequest, 'action' | 'resource'> {
  const caseInsensitive = input.resource?.case_insensitive === true
  const resource = (identifier: string): PdpRequest['resource'] => caseInsensitive ? { identifier, case_insensitive: true } : { identifier }
  const { action, mcp, a2a } = input
  if ([action, mcp, a2a].filter((given) => given !== undefined).length !== 1) throw new ServiceError('simulate_request_invalid')
  if (a2a !== undefined) return a2aActionAndResource(a2a, resource)
  if (action !== undefined) {
    const given: PdpRequest['action'] = { operation: action.operation, capability_class: action.capability_class ?? null }
    if (action.http_operation !== undefined) given.http_operation = action.http_operation
    return { action: given, resource: resource(input.resource?.identifier ?? '') }
  }
  const spec = mcpMethodSpec(mcp!.method)
  const path = mcp!.path ?? '/mcp'
  const given = spec.addressed === null ? undefined : mcp![spec.addressed]
  if (spec.addressed !== null && (given === undefined || given === '')) throw new ServiceError('simulate_request_invalid')
  // The gateway decides a resource under its canonical URI (docs/mcp.md, "Resource URIs"), and refuses one without.
  const addressed = spec.addressed === 'uri' ? canonicalResourceUri(given!) ?? undefined : given
  if (spec.addressed === 'uri' && addressed === undefined) throw new ServiceError('simulate_request_invalid')
  const tool = spec.operation === MCP_TOOL_CALL_OPERATION ? addressed : undefined
  return { action: messagePdpAction(spec.operation, `POST ${path}`, { tool }), resource: resource(addressed ?? path) }
}

/**
 * An A2A call as the gateway classifies it: the JSON-RPC request it would read, with the task id, context
 * id and skill where the gateway finds them, through the gateway's own classifier.
 */
function a2aActionAndResource(a2a: NonNullable<SimulateInput['a2a']>, resource: (identifier: string) => PdpRequest['resource']): Pick<PdpRequest, 'action' | 'resource'> {
  const path = a2a.path ?? '/'
  const params = a2aParamsFor(a2a.method, { taskId: a2a.task_id, contextId: a2a.context_id, skill: a2a.skill })
  const call = classifyA2a({ httpMethod: 'POST', path: '/', versionHeader: undefined, body: { jsonrpc: '2.0', id: 1, method: a2a.method, params } })
  if (call.problem !== undefined) throw new ServiceError('simulate_request_invalid')
  return { action: messagePdpAction(call.operation, `POST ${path}`, { skill: call.skill }), resource: resource(call.taskId ?? call.contextId ?? path) }
}

function pdpRequestFor(ctx: PolicyServiceContext, org: string, agent: AgentRow, input: SimulateInput): PdpRequest {
  const context = input.context ?? {}
  const environment = input.environment ?? {}
  const request: PdpRequest = {
    pip_version: 'service.pip.v1',
    subject: {
      did: input.subject?.did ?? agent.did ?? agentDidWeb(ctx.registryDidHost, agent.id),
      badge_jti: '',
      ial: '',
      trust_level: input.subject?.trust_level ?? TRUST_CODES[agent.trust_level] ?? 'REG',
    },
    ...actionAndResource(input),
    context: {
      txn_id: typeof context.txn_id === 'string' ? context.txn_id : `simulate-${randomUUID()}`,
      enforcement_mode: typeof context.enforcement_mode === 'string' ? context.enforcement_mode : 'EM-OBSERVE',
    },
    environment: {
      workspace: org,
      pep_id: typeof environment.pep_id === 'string' ? environment.pep_id : 'simulate',
      time: typeof environment.time === 'string' ? environment.time : new Date().toISOString(),
    },
  }
  if (input.action?.mcp_tool !== undefined) request.action.mcp_tool = input.action.mcp_tool
  if (typeof context.leaf_capability === 'string') request.context.leaf_capability = context.leaf_capability
  if (typeof context.delegation_depth === 'number') request.context.delegation_depth = context.delegation_depth
  return request
}
