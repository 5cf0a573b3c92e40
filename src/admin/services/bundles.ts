/**
 * The SDK policy context (spec §2.11) and the per-org policy bundle for OPA and the embedded PDP
 * (spec §4.7, protocol.md §8), with its in-process cache. No Fastify here.
 */
import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { agentDidWeb } from '../../core/did.js'
import { resolvePolicy } from '../../core/policy/merge.js'
import type { ResolvedPolicy } from '../../core/policy/types.js'
import { TRUST_CODES, type TrustCode } from '../../core/trust-level.js'
import { tarGz } from '../../core/tar.js'
import type { Database, Queryable } from '../../db/database.js'
import { listAgents, type AgentRow } from '../../db/repositories/agents.js'
import * as groups from '../../db/repositories/groups.js'
import type { GroupRow } from '../../db/repositories/groups.js'
import * as policies from '../../db/repositories/policies.js'
import type { PolicyDocumentRow, PolicyScopeType } from '../../db/repositories/policies.js'
import { projectPath } from '../../core/paths.js'
import { layerOf, requireOrgMember, resolveRows, toDocumentView, type LineageView, type PolicyDocumentView } from './policies.js'
import type { Principal } from '../../core/principal.js'

/** What the bundle service needs from the app. */
export interface BundleServiceContext {
  readonly db: Database
  /** `host` or `host%3Aport` of this registry's did:web identifiers. */
  readonly registryDidHost: string
  /** Cached bundles older than this are rebuilt on the next request. */
  readonly pollIntervalMs: number
  /** Source of the Rego module shipped in every bundle. */
  readonly policyModule: string
}

/** An agent as the SDK sees it (spec §2.11). */
export interface ContextAgent {
  id: string
  name: string
  did: string
  trust_level: TrustCode
  group_ids: string[]
}

/** The policy context of one org for the SDK (spec §2.11). */
export interface PolicyContextView {
  org_id: string
  agents: ContextAgent[]
  groups: { id: string; name: string; precedence: number }[]
  active_policies: { id: string; scope_type: PolicyScopeType; scope_id: string; version: number; yaml_content: string }[]
  pending_proposals: PolicyDocumentView[]
}

/** The `data` document of a bundle (protocol.md §8). */
export interface BundleData {
  config: ResolvedPolicy
  resolved_policies: { by_agent_did: Record<string, ResolvedPolicy> }
  policy_lineage: { by_agent_did: Record<string, LineageView[]> }
  agents: Record<string, { id: string; name: string; trust_level: TrustCode; group_ids: string[] }>
}

/** One built bundle in both of its wire forms; `json` and `tarball` are final bytes. */
export interface BuiltBundle {
  readonly revision: string
  readonly json: string
  readonly tarball: Buffer
}

/** The path of the Rego module inside a bundle, and its key in `modules`. */
export const POLICY_MODULE_PATH = 'service/policy.rego'

/** Top-level paths the bundle owns in OPA: the package root plus every `data` key. */
export const BUNDLE_ROOTS = ['service', 'config', 'resolved_policies', 'policy_lineage', 'agents'] as const

const AGENT_PAGE = 500

/** Reads the Rego module once; a missing file is a broken installation, so start-up fails loudly. */
export function loadPolicyModule(): string {
  return readFileSync(projectPath('policies', 'service', 'policy.rego'), 'utf8')
}

/**
 * JSON with object keys sorted (code-point order) at every depth, so the serialization, and with it
 * the revision, depends only on content, not on the order rows or keys were produced in.
 */
export function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_key, inner: unknown) => {
    if (inner === null || typeof inner !== 'object' || Array.isArray(inner)) return inner
    const sorted: Record<string, unknown> = {}
    for (const key of Object.keys(inner).sort()) sorted[key] = (inner as Record<string, unknown>)[key]
    return sorted
  })
}

function trustCode(agent: AgentRow): TrustCode {
  return TRUST_CODES[agent.trust_level] ?? 'REG'
}

function agentDid(ctx: Pick<BundleServiceContext, 'registryDidHost'>, agent: AgentRow): string {
  return agent.did ?? agentDidWeb(ctx.registryDidHost, agent.id)
}

async function allAgents(q: Queryable, orgId: string): Promise<AgentRow[]> {
  const out: AgentRow[] = []
  for (;;) {
    const last = out.at(-1)
    const after = last === undefined ? null : { createdAt: new Date(last.created_at).toISOString(), id: last.id }
    const page = await listAgents(q, orgId, AGENT_PAGE, after)
    // listAgents fetches one row beyond the limit to signal that more follow
    out.push(...page.slice(0, AGENT_PAGE))
    if (page.length <= AGENT_PAGE) return out
  }
}

function groupIdsByAgent(groupRows: readonly GroupRow[]): Map<string, string[]> {
  const out = new Map<string, string[]>()
  for (const group of groupRows) {
    for (const agentId of group.agent_ids ?? []) {
      const list = out.get(agentId) ?? []
      list.push(group.id)
      out.set(agentId, list)
    }
  }
  for (const list of out.values()) list.sort()
  return out
}

// All reads of one build see one snapshot, so a bundle never mixes states from before and after a
// concurrent approval.
async function snapshot<T>(db: Database, work: (q: Queryable) => Promise<T>): Promise<T> {
  return db.transaction(async (tx) => {
    await tx.query('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY')
    return work(tx)
  })
}

/** The SDK policy context of the principal's own org, read fresh on every call. */
export async function policyContext(ctx: Pick<BundleServiceContext, 'db' | 'registryDidHost'>, principal: Principal): Promise<PolicyContextView> {
  const org = principal.orgId.toLowerCase()
  return snapshot(ctx.db, async (q) => {
    const agents = await allAgents(q, org)
    const groupRows = await groups.listGroups(q, org)
    const membership = groupIdsByAgent(groupRows)
    const scopes = [
      { orgId: org, scopeType: 'org' as const, scopeId: org },
      ...groupRows.map((g) => ({ orgId: org, scopeType: 'group' as const, scopeId: g.id })),
      ...agents.map((a) => ({ orgId: org, scopeType: 'agent' as const, scopeId: a.id })),
    ]
    const active: PolicyDocumentRow[] = []
    for (const scope of scopes) {
      const row = await policies.findActiveDocument(q, scope)
      if (row !== null) active.push(row)
    }
    return {
      org_id: org,
      agents: agents.map((agent) => ({
        id: agent.id, name: agent.name, did: agentDid(ctx, agent), trust_level: trustCode(agent), group_ids: membership.get(agent.id) ?? [],
      })),
      groups: groupRows.map((g) => ({ id: g.id, name: g.name, precedence: Number(g.precedence) })),
      active_policies: active.map((row) => ({
        id: row.id, scope_type: row.scope_type, scope_id: row.scope_id, version: Number(row.version), yaml_content: row.yaml_content,
      })),
      pending_proposals: (await policies.listProposals(q, org)).map(toDocumentView),
    }
  })
}

/**
 * Builds an org's bundle from the database. The revision is the SHA-256 of the canonical JSON of
 * `{modules, data}`: unchanged policies and agents give the same revision and the same bytes.
 */
export async function buildBundle(ctx: BundleServiceContext, orgId: string): Promise<BuiltBundle> {
  const org = orgId.toLowerCase()
  const data = await snapshot(ctx.db, async (q): Promise<BundleData> => {
    const agents = await allAgents(q, org)
    const membership = groupIdsByAgent(await groups.listGroups(q, org))
    const orgDoc = await policies.findActiveDocument(q, { orgId: org, scopeType: 'org', scopeId: org })
    const out: BundleData = {
      config: resolvePolicy(orgDoc === null ? [] : [layerOf(orgDoc, null)]).resolved,
      resolved_policies: { by_agent_did: {} },
      policy_lineage: { by_agent_did: {} },
      agents: {},
    }
    for (const agent of agents) {
      const did = agentDid(ctx, agent)
      const { resolved, lineage } = resolveRows(await policies.listActiveLayers(q, org, agent.id))
      out.resolved_policies.by_agent_did[did] = resolved
      out.policy_lineage.by_agent_did[did] = lineage
      out.agents[did] = { id: agent.id, name: agent.name, trust_level: trustCode(agent), group_ids: membership.get(agent.id) ?? [] }
    }
    return out
  })
  const modules = { [POLICY_MODULE_PATH]: ctx.policyModule }
  const revision = createHash('sha256').update(canonicalJson({ modules, data })).digest('hex')
  const tarball = tarGz([
    { name: '.manifest', content: canonicalJson({ revision, roots: BUNDLE_ROOTS }) },
    { name: 'data.json', content: canonicalJson(data) },
    { name: POLICY_MODULE_PATH, content: ctx.policyModule },
  ])
  return { revision, json: canonicalJson({ modules, data, revision }), tarball }
}

interface CacheEntry {
  bundle: BuiltBundle
  builtAt: number
}

/**
 * Built bundles per org. An entry is dropped on a policy NOTIFY for its org and counts as stale after
 * `pollIntervalMs`; the interval is also what picks up changes no NOTIFY announces yet (agents created,
 * deleted, or given another DID or trust level). Concurrent requests share one build.
 */
export class BundleCache {
  private readonly entries = new Map<string, CacheEntry>()
  private readonly building = new Map<string, Promise<BuiltBundle>>()
  // Bumped per NOTIFY: a build that started before the notification must not be cached after it.
  private readonly generations = new Map<string, number>()
  private listening = false

  constructor(private readonly ctx: BundleServiceContext, private readonly now: () => number = Date.now) {}

  /**
   * Whether NOTIFY delivery is up. Until it is, nothing is cached: a change announced before the
   * subscription existed would otherwise be missed for a whole interval.
   */
  setListening(listening: boolean): void {
    this.listening = listening
    if (!listening) this.entries.clear()
  }

  /** Forgets an org's bundle after its policies changed. */
  invalidate(orgId: string): void {
    const org = orgId.toLowerCase()
    this.generations.set(org, (this.generations.get(org) ?? 0) + 1)
    this.entries.delete(org)
    this.building.delete(org)
  }

  /** The org's current bundle, from the cache when fresh, else built (once for concurrent callers). */
  async get(orgId: string): Promise<BuiltBundle> {
    const org = orgId.toLowerCase()
    const entry = this.entries.get(org)
    if (entry !== undefined && this.now() - entry.builtAt < this.ctx.pollIntervalMs) return entry.bundle
    const pending = this.building.get(org)
    if (pending !== undefined) return pending
    const generation = this.generations.get(org) ?? 0
    const startedAt = this.now()
    const build = buildBundle(this.ctx, org).then((bundle) => {
      if (this.listening && (this.generations.get(org) ?? 0) === generation) this.entries.set(org, { bundle, builtAt: startedAt })
      return bundle
    }).finally(() => {
      if (this.building.get(org) === build) this.building.delete(org)
    })
    this.building.set(org, build)
    return build
  }
}

/** The workspace of a bundle request must be the key's own org; any other is 404, never its contents. */
export function requireWorkspace(principal: Principal, workspace: string): string {
  return requireOrgMember(principal, workspace)
}
