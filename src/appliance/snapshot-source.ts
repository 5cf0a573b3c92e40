/**
 * The gateway's snapshot source in the appliance, where the gateway shares the process and the database
 * with the admin plane: keys from the authority key ring, revoked jtis from the database, and the
 * workspace bundle from the bundle cache the admin plane's `/v1/bundles` serves too, so one policy
 * NOTIFY means one build for both. The gateway's local source does the scheduling; this module gives it
 * the database, which the gateway itself never imports.
 */
import type { KeyRing } from '../authority/key-ring.js'
import type { BundleCache } from '../bundles/cache.js'
import type { Config } from '../config/index.js'
import { REVOCATION_CHANNEL } from '../core/notify-channels.js'
import type { Database } from '../db/database.js'
import { listLiveRevokedJtis } from '../db/repositories/badges.js'
import { organizationExists } from '../db/repositories/organizations.js'
import { createLocalSource } from '../gateway/snapshot/local-source.js'
import type { SnapshotSource } from '../gateway/snapshot/snapshot.js'
import type { ReadinessNote } from '../http/readiness.js'
import type { Logger } from '../telemetry/logger.js'

/** A workspace bundle that cannot be built for a reason the operator must fix (not a passing fault). */
export class BundleUnavailableError extends Error {
  override readonly name = 'BundleUnavailableError'
  readonly code = 'workspace_not_found'
}

/**
 * Why the embedded PDP has no bundle yet. Until the first bundle is built the gateway runs with none,
 * which the embedded PDP answers as UNAVAILABLE (the mode table's "PDP unavailable" row); `/readyz`
 * says why, and the log says it once per cause rather than on every retry.
 */
class BundleStatus {
  #problem: ReadinessNote | null = null
  #loaded = false

  constructor(private readonly logger: Logger, private readonly workspace: string | null) {}

  get problem(): ReadinessNote | null {
    return this.#problem
  }

  built(): void {
    if (this.#problem !== null) {
      this.logger.info({ workspace: this.workspace }, 'embedded PDP bundle built; the PDP is available')
    }
    this.#problem = null
    this.#loaded = true
  }

  failed(error: unknown): void {
    // After a first bundle the last good one stays in force and staleness takes over.
    if (this.#loaded) {
      this.logger.warn({ err: error, what: 'bundle' }, 'gateway snapshot refresh failed; keeping the last good snapshot')
      return
    }
    const note = error instanceof BundleUnavailableError
      ? { code: error.code, message: error.message }
      : { code: 'bundle_build_failed', message: 'the workspace bundle could not be built; the process log has the cause' }
    if (this.#problem?.code !== note.code) {
      this.logger.error(
        { reason: note.code, detail: note.message, workspace: this.workspace, err: error },
        'embedded PDP has no bundle; the gateway treats the PDP as unavailable until one is built',
      )
    }
    this.#problem = note
  }
}

export interface ApplianceSnapshotDeps {
  readonly config: Config
  readonly db: Database
  readonly keyRing: KeyRing
  /** The bundle cache the admin plane serves `/v1/bundles` from. */
  readonly bundles: BundleCache
  readonly logger: Logger
}

export interface ApplianceSnapshot {
  readonly source: SnapshotSource
  /** Why the embedded PDP has no bundle yet, for `/readyz`; null when it has one or needs none. */
  bundleProblem(): ReadinessNote | null
}

/** The appliance's gateway snapshot source: key ring and database, refreshed by NOTIFY and a timer. */
export function createApplianceSnapshot(deps: ApplianceSnapshotDeps): ApplianceSnapshot {
  const { config, db, bundles, logger } = deps
  const workspace = config.gateway.workspace
  const status = config.gateway.embeddedPdp ? new BundleStatus(logger, workspace) : null
  const source = createLocalSource({
    issuer: config.issuerUrl,
    keys: () => deps.keyRing.current.verificationKeys,
    loadRevoked: () => listLiveRevokedJtis(db),
    // The source asks only when it wants a rebuild (start, a notice, the timer), so never a cached bundle.
    loadBundle: status !== null && workspace !== null
      ? async () => {
        // An unknown org would build an empty bundle, which allows everything: refuse it instead.
        if (!(await organizationExists(db, workspace))) {
          throw new BundleUnavailableError(`SERVICE_WORKSPACE ${workspace} names no organization in this database`)
        }
        const built = await bundles.get(workspace, { fresh: true })
        status.built()
        return { revision: built.revision, data: built.data }
      }
      : null,
    watchRevocations: (onRevoked, onResync) => db.listen(REVOCATION_CHANNEL, onRevoked, onResync),
    watchPolicies: async (onChange) => {
      const remove = bundles.onChange(onChange)
      return async () => remove()
    },
    workspace,
    pollIntervalMs: config.gateway.bundlePollIntervalMs,
    onError: (what, error) => {
      if (what === 'bundle' && status !== null) status.failed(error)
      else logger.warn({ err: error, what }, 'gateway snapshot refresh failed; keeping the last good snapshot')
    },
  })
  return { source, bundleProblem: () => status?.problem ?? null }
}
