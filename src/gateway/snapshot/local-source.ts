// The appliance's snapshot source (docs/architecture.md, "The snapshot"): database access is injected
// (src/appliance/snapshot-source.ts), so the gateway never imports `db` or `admin`.
import type { KeyObject } from 'node:crypto'
import type { GatewayBundle, GatewayBundleData, SnapshotContent, SnapshotHolder, SnapshotSource } from './snapshot.js'

export interface LocalSourceDeps {
  readonly issuer: string
  /** The key ring's current verification keys; the object changes identity when the key file reloads. */
  readonly keys: () => ReadonlyMap<string, KeyObject>
  /** jtis of revoked badges that have not expired yet. */
  readonly loadRevoked: () => Promise<readonly string[]>
  /** Null without an embedded PDP; a rejection at start leaves no bundle and is retried like any rebuild. */
  readonly loadBundle: (() => Promise<{ revision: string; data: GatewayBundleData }>) | null
  /** `onResync` runs when the subscription was interrupted (notices may have been missed). */
  readonly watchRevocations: (onRevoked: (jti: string) => void, onResync: () => void) => Promise<() => Promise<void>>
  readonly watchPolicies: (onChange: (orgId: string) => void) => Promise<() => Promise<void>>
  readonly workspace: string | null
  readonly pollIntervalMs: number
  readonly onError: (what: 'revocations' | 'bundle' | 'listen', error: unknown) => void
  readonly now?: () => number
}

/** How often the key ring is checked for a reload (an in-memory identity check, no I/O). */
const KEY_CHECK_MS = 1_000

function keysVersionOf(keys: ReadonlyMap<string, KeyObject>): string {
  return [...keys.keys()].sort().join(',')
}

export function createLocalSource(deps: LocalSourceDeps): SnapshotSource {
  const now = deps.now ?? Date.now
  const timers: NodeJS.Timeout[] = []
  const unsubscribers: (() => Promise<void>)[] = []
  let holder: SnapshotHolder | null = null
  let keysSeen: ReadonlyMap<string, KeyObject> | null = null
  let bundleBuild: Promise<void> | null = null
  let bundleDirty = false
  let closed = false

  async function loadBundle(): Promise<GatewayBundle | null> {
    if (deps.loadBundle === null) return null
    const { revision, data } = await deps.loadBundle()
    return { revision, data, confirmedAt: now() }
  }

  // One bundle rebuild at a time; a NOTIFY during a rebuild schedules exactly one more afterwards, so
  // an approval committed while the previous build was reading is never lost.
  function rebuildBundle(): void {
    if (deps.loadBundle === null || closed) return
    if (bundleBuild !== null) {
      bundleDirty = true
      return
    }
    bundleDirty = false
    bundleBuild = loadBundle()
      .then((bundle) => {
        if (bundle !== null && holder !== null && !closed) holder.update(() => ({ bundle }))
      })
      .catch((error: unknown) => deps.onError('bundle', error))
      .finally(() => {
        bundleBuild = null
        if (bundleDirty) rebuildBundle()
      })
  }

  // jtis announced by NOTIFY while a full reload runs: the query may have started before their commit.
  let announcedDuringReload: Set<string> | null = null

  // A full reload replaces the set (so expired revocations leave memory) rather than growing it.
  async function refreshRevocations(): Promise<void> {
    const announced = new Set<string>()
    announcedDuringReload = announced
    try {
      const jtis = await deps.loadRevoked()
      if (holder === null || closed) return
      const next = new Set(jtis)
      for (const jti of announced) next.add(jti)
      const current = holder.current.revoked
      let same = next.size === current.size
      if (same) for (const jti of next) if (!current.has(jti)) { same = false; break }
      if (!same) holder.update(() => ({ revoked: next }))
    } catch (error) {
      deps.onError('revocations', error)
    } finally {
      if (announcedDuringReload === announced) announcedDuringReload = null
    }
  }

  function checkKeys(): void {
    const keys = deps.keys()
    if (keys === keysSeen || holder === null) return
    keysSeen = keys
    holder.update(() => ({ keys, keysVersion: keysVersionOf(keys) }))
  }

  return {
    async start(target) {
      // Subscribe first: a change committed between the first load and the subscription would
      // otherwise wait for the timer.
      try {
        unsubscribers.push(await deps.watchRevocations((jti) => {
          if (jti === '') return
          announcedDuringReload?.add(jti)
          if (holder === null || holder.current.revoked.has(jti)) return
          holder.update((current) => ({ revoked: new Set(current.revoked).add(jti) }))
        }, () => {
          // The LISTEN connection was down: whatever was announced meanwhile is re-read.
          void refreshRevocations()
          rebuildBundle()
        }))
        if (deps.loadBundle !== null && deps.workspace !== null) {
          const workspace = deps.workspace.toLowerCase()
          unsubscribers.push(await deps.watchPolicies((org) => {
            if (org.toLowerCase() === workspace) rebuildBundle()
          }))
        }
      } catch (error) {
        // Without NOTIFY the timer alone keeps the snapshot fresh; slower, but still correct.
        deps.onError('listen', error)
      }
      keysSeen = deps.keys()
      const announced = new Set<string>()
      announcedDuringReload = announced
      // A bundle that cannot be built yet must not stop the process: the PDP answers UNAVAILABLE under the
      // mode table until the timer or a policy NOTIFY builds one.
      const [revoked, bundle] = await Promise.all([
        deps.loadRevoked(),
        loadBundle().catch((error: unknown) => {
          deps.onError('bundle', error)
          return null
        }),
      ])
      announcedDuringReload = null
      const content: SnapshotContent = {
        issuer: deps.issuer,
        keys: keysSeen,
        keysVersion: keysVersionOf(keysSeen),
        revoked: new Set([...revoked, ...announced]),
        bundle,
      }
      holder = target
      target.swap(content)
      const poll = setInterval(() => {
        void refreshRevocations()
        rebuildBundle()
      }, deps.pollIntervalMs)
      const keyCheck = setInterval(checkKeys, KEY_CHECK_MS)
      poll.unref()
      keyCheck.unref()
      timers.push(poll, keyCheck)
    },
    async close() {
      closed = true
      for (const timer of timers) clearInterval(timer)
      await Promise.all(unsubscribers.map((unsubscribe) => unsubscribe().catch(() => {})))
      await bundleBuild
    },
  }
}
