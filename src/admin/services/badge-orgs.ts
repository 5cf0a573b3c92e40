/**
 * The organization a gateway event belongs to: the one its caller's badge was issued for (docs/console.md,
 * "Who sees which events"). The badge records which organization asked for each badge when it was signed,
 * so the answer is fixed at issuance: a DID registered later by another organization never takes over the
 * events of earlier callers, and a self-signed badge's events belong to no organization (operators only).
 * Looked up when the admin plane reads the feed, never on the gateway's path; a minute's cache keeps a busy
 * stream to one query per new badge.
 */
import { LRUCache } from 'lru-cache'
import type { Database } from '../../db/database.js'
import { badgeOrgs } from '../../db/repositories/badges.js'

/** Boxed, so a jti the authority never issued is cached as well. */
interface Entry {
  readonly orgId: string | null
}

export class BadgeOrgs {
  readonly #db: Database
  readonly #cache = new LRUCache<string, Entry>({ max: 20_000, ttl: 60_000 })

  constructor(db: Database) {
    this.#db = db
  }

  /** Badge jti → organization id (null: not a badge of this authority). */
  async resolve(jtis: Iterable<string>): Promise<Map<string, string | null>> {
    const out = new Map<string, string | null>()
    const missing: string[] = []
    for (const jti of jtis) {
      if (out.has(jti)) continue
      const cached = this.#cache.get(jti)
      out.set(jti, cached === undefined ? null : cached.orgId)
      if (cached === undefined) missing.push(jti)
    }
    if (missing.length === 0) return out
    for (const row of await badgeOrgs(this.#db, missing)) out.set(row.jti, String(row.org_id))
    for (const jti of missing) this.#cache.set(jti, { orgId: out.get(jti) ?? null })
    return out
  }
}
