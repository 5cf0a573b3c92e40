/**
 * Built bundles per org, shared by everyone in the process who serves or enforces them: the admin
 * plane's `/v1/bundles` and, in the appliance, the gateway's snapshot. It is the one listener of the
 * policy NOTIFY channel, so one change means one build, whoever asks first.
 */
import { POLICY_CHANNEL } from '../core/notify-channels.js'
import type { Database } from '../db/database.js'
import { buildBundle, type BuiltBundle, type BundleSourceContext } from './builder.js'

export interface BundleCacheContext extends BundleSourceContext {
  /** Cached bundles older than this are rebuilt on the next request. */
  readonly pollIntervalMs: number
}

export interface BundleCacheOptions {
  readonly now?: () => number
  /** How a bundle is built; the database builder unless a test counts the builds. */
  readonly build?: (ctx: BundleSourceContext, orgId: string) => Promise<BuiltBundle>
}

interface CacheEntry {
  bundle: BuiltBundle
  builtAt: number
}

/**
 * An entry is dropped on a policy NOTIFY for its org and counts as stale after `pollIntervalMs`; the
 * interval also picks up a change whose notice was missed. Concurrent requests share one build.
 */
export class BundleCache {
  private readonly entries = new Map<string, CacheEntry>()
  private readonly building = new Map<string, Promise<BuiltBundle>>()
  // Bumped per NOTIFY: a build that started before the notification must not be cached after it.
  private readonly generations = new Map<string, number>()
  private readonly changeListeners = new Set<(orgId: string) => void>()
  private readonly resyncListeners = new Set<() => void>()
  private readonly now: () => number
  private readonly build: (ctx: BundleSourceContext, orgId: string) => Promise<BuiltBundle>
  private listening = false

  constructor(private readonly ctx: BundleCacheContext, options: BundleCacheOptions = {}) {
    this.now = options.now ?? Date.now
    this.build = options.build ?? buildBundle
  }

  /**
   * Subscribes to the policy NOTIFY channel; resolves to the unsubscribe function. Until it is up,
   * nothing is cached: a change announced before the subscription existed would otherwise be missed
   * for a whole interval.
   */
  async listen(db: Database): Promise<() => Promise<void>> {
    const unlisten = await db.listen(POLICY_CHANNEL, (orgId) => {
      this.invalidate(orgId)
      for (const listener of this.changeListeners) listener(orgId)
    }, () => {
      // The LISTEN connection was lost: any org may have changed meanwhile, unannounced.
      for (const org of [...this.entries.keys(), ...this.building.keys()]) this.invalidate(org)
      for (const listener of this.resyncListeners) listener()
    })
    this.listening = true
    return async () => {
      this.listening = false
      this.entries.clear()
      await unlisten()
    }
  }

  /**
   * Calls `listener` with the org id of every policy notice, after the org's cached bundle was dropped,
   * so a bundle the listener asks for then is built afresh. Answers the function that removes it.
   */
  onChange(listener: (orgId: string) => void): () => void {
    this.changeListeners.add(listener)
    return () => {
      this.changeListeners.delete(listener)
    }
  }

  /** Calls `listener` after the policy LISTEN was lost and restored, once every cached bundle was dropped. */
  onResync(listener: () => void): () => void {
    this.resyncListeners.add(listener)
    return () => {
      this.resyncListeners.delete(listener)
    }
  }

  /** Forgets an org's bundle after its policies changed. */
  invalidate(orgId: string): void {
    const org = orgId.toLowerCase()
    this.generations.set(org, (this.generations.get(org) ?? 0) + 1)
    this.entries.delete(org)
    this.building.delete(org)
  }

  /**
   * The org's current bundle: from the cache when fresh (unless `fresh` asks for a new build), else
   * built, once for concurrent callers.
   */
  async get(orgId: string, options: { fresh?: boolean } = {}): Promise<BuiltBundle> {
    const org = orgId.toLowerCase()
    const entry = this.entries.get(org)
    if (options.fresh !== true && entry !== undefined && this.now() - entry.builtAt < this.ctx.pollIntervalMs) return entry.bundle
    const pending = this.building.get(org)
    if (pending !== undefined) return pending
    const generation = this.generations.get(org) ?? 0
    const startedAt = this.now()
    const build = this.build(this.ctx, org).then((bundle) => {
      if (this.listening && (this.generations.get(org) ?? 0) === generation) this.entries.set(org, { bundle, builtAt: startedAt })
      return bundle
    }).finally(() => {
      if (this.building.get(org) === build) this.building.delete(org)
    })
    this.building.set(org, build)
    return build
  }
}
