/**
 * The organization of the agent behind a gateway decision, looked up when the admin plane reads the
 * feed rather than on the gateway's request path (docs/console.md, "Live decisions"): the gateway knows
 * only the badge's DID. An agent's DID belongs to one organization; a minute's cache keeps a busy stream
 * to one query per new agent, and bounds how long a deleted agent's org is still named.
 */
import { LRUCache } from 'lru-cache'
import { ownAgentIdFromDid } from '../../core/did.js'
import { UUID_PATTERN } from '../../core/uuid.js'
import type { Database } from '../../db/database.js'
import { agentOrgs } from '../../db/repositories/agents.js'

const UUID = new RegExp(UUID_PATTERN)
/** Boxed, so a DID without an agent (a self-signed badge) is cached as well. */
interface Entry {
  readonly orgId: string | null
}

export class AgentOrgs {
  readonly #db: Database
  readonly #registryDidHost: string
  readonly #cache = new LRUCache<string, Entry>({ max: 20_000, ttl: 60_000 })

  constructor(db: Database, registryDidHost: string) {
    this.#db = db
    this.#registryDidHost = registryDidHost
  }

  /** DID → organization id (null: no agent of this registry holds it). */
  async resolve(dids: Iterable<string>): Promise<Map<string, string | null>> {
    const out = new Map<string, string | null>()
    const ids = new Map<string, string>()
    const explicit: string[] = []
    for (const did of dids) {
      if (out.has(did)) continue
      const cached = this.#cache.get(did)
      if (cached !== undefined) {
        out.set(did, cached.orgId)
        continue
      }
      out.set(did, null)
      const id = ownAgentIdFromDid(this.#registryDidHost, did)
      if (id !== null && UUID.test(id)) ids.set(id.toLowerCase(), did)
      else explicit.push(did)
    }
    if (ids.size === 0 && explicit.length === 0) return out
    const missing = [...ids.values(), ...explicit]
    const rows = await agentOrgs(this.#db, [...ids.keys()], explicit)
    for (const row of rows) {
      const viaId = ids.get(String(row.id).toLowerCase())
      if (viaId !== undefined) out.set(viaId, String(row.org_id))
      if (row.did !== null && out.has(row.did)) out.set(row.did, String(row.org_id))
    }
    for (const did of missing) this.#cache.set(did, { orgId: out.get(did) ?? null })
    return out
  }
}
