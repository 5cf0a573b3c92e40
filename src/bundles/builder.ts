/**
 * An org's policy state read out of the database: the policy bundle for OPA and the embedded PDP, and
 * the SDK policy context. The bundle is built as data; its two wire forms, the canonical JSON and the
 * OPA tarball, are made from it only when asked for.
 */
import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { agentDidWeb } from '../core/did.js'
import { deepFreeze } from '../core/json-objects.js'
import { projectPath } from '../core/paths.js'
import { resolvePolicy } from '../core/policy/merge.js'
import type { ResolvedPolicy } from '../core/policy/types.js'
import { tarGz } from '../core/tar.js'
import { TRUST_CODES, type TrustCode } from '../core/trust-level.js'
import type { Database, Queryable } from '../db/database.js'
import { listAgents, type AgentRow } from '../db/repositories/agents.js'
import * as groups from '../db/repositories/groups.js'
import type { GroupRow } from '../db/repositories/groups.js'
import * as policies from '../db/repositories/policies.js'
import type { PolicyDocumentRow, PolicyScopeType } from '../db/repositories/policies.js'
import { layerOf, resolveRows, toDocumentView, type LineageView, type PolicyDocumentView } from './policy-documents.js'

/** What building needs: the database, this registry's did:web host and the Rego module every bundle ships. */
export interface BundleSourceContext {
  readonly db: Database
  /** `host` or `host%3Aport` of this registry's did:web identifiers. */
  readonly registryDidHost: string
  /** Source of the Rego module shipped in every bundle. */
  readonly policyModule: string
}

/** An agent as the SDK sees it. */
export interface ContextAgent {
  id: string
  name: string
  did: string
  trust_level: TrustCode
  group_ids: string[]
}

/** The policy context of one org for the SDK. */
export interface PolicyContextView {
  org_id: string
  agents: ContextAgent[]
  groups: { id: string; name: string; precedence: number }[]
  active_policies: { id: string; scope_type: PolicyScopeType; scope_id: string; version: number; yaml_content: string }[]
  pending_proposals: PolicyDocumentView[]
}

/** The `data` document of a bundle. */
export interface BundleData {
  config: ResolvedPolicy
  resolved_policies: { by_agent_did: Record<string, ResolvedPolicy> }
  policy_lineage: { by_agent_did: Record<string, LineageView[]> }
  agents: Record<string, { id: string; name: string; trust_level: TrustCode; group_ids: string[] }>
}

/** One built bundle: its data, and its wire forms made on first use. */
export interface BuiltBundle {
  /** SHA-256 (hex) of the canonical JSON of `{modules, data}`; also the ETag. */
  readonly revision: string
  /** Deep-frozen: the admin plane serialises it and the embedded PDP reads it, so neither may alter it. */
  readonly data: Readonly<BundleData>
  /** The JSON form, `{modules, data, revision}` in canonical bytes. */
  json(): string
  /** The OPA bundle tarball: `.manifest`, `data.json` and the Rego module. */
  tarball(): Buffer
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

function agentDid(ctx: Pick<BundleSourceContext, 'registryDidHost'>, agent: AgentRow): string {
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

/** The SDK policy context of an org, read fresh on every call. */
export async function policyContext(ctx: Pick<BundleSourceContext, 'db' | 'registryDidHost'>, orgId: string): Promise<PolicyContextView> {
  const org = orgId.toLowerCase()
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

/** Makes `make()` once, on the first call. */
function once<T>(make: () => T): () => T {
  let made: { value: T } | null = null
  return () => (made ??= { value: make() }).value
}

/**
 * Builds an org's bundle from the database. The revision is the SHA-256 of the canonical JSON of
 * `{modules, data}`: unchanged policies and agents give the same revision and the same bytes.
 */
export async function buildBundle(ctx: BundleSourceContext, orgId: string): Promise<BuiltBundle> {
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
      // A disabled agent's badges stay valid until they expire: its own policy makes every gateway refuse it.
      out.resolved_policies.by_agent_did[did] = agent.status === 'enabled' ? resolved : { ...resolved, denied_dids: [...resolved.denied_dids, did] }
      out.policy_lineage.by_agent_did[did] = lineage
      out.agents[did] = { id: agent.id, name: agent.name, trust_level: trustCode(agent), group_ids: membership.get(agent.id) ?? [] }
    }
    return out
  })
  const modules = { [POLICY_MODULE_PATH]: ctx.policyModule }
  const revision = createHash('sha256').update(canonicalJson({ modules, data })).digest('hex')
  return {
    revision,
    data: deepFreeze(data),
    json: once(() => canonicalJson({ modules, data, revision })),
    tarball: once(() => tarGz([
      { name: '.manifest', content: canonicalJson({ revision, roots: BUNDLE_ROOTS }) },
      { name: 'data.json', content: canonicalJson(data) },
      { name: POLICY_MODULE_PATH, content: ctx.policyModule },
    ])),
  }
}
