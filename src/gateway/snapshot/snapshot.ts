// Immutable and swapped whole, off the request path (docs/architecture.md, "The snapshot"): a request reads
// `holder.current` once and never waits on I/O.
import type { KeyObject } from 'node:crypto'
import type { ResolvedPolicy } from '../../core/policy/types.js'

/** The parts of a bundle's `data` document (docs/wire-contract.md §8) the embedded evaluator reads. */
export interface GatewayBundleData {
  config?: ResolvedPolicy | Record<string, unknown>
  resolved_policies?: { by_agent_did?: Record<string, ResolvedPolicy> }
  [key: string]: unknown
}

export interface GatewayBundle {
  readonly revision: string
  readonly data: GatewayBundleData
  /** Epoch ms the bundle was last confirmed current (built, fetched or answered 304): its age starts here. */
  readonly confirmedAt: number
}

export interface GatewaySnapshot {
  /** Increases with every swap; caches derived from an older snapshot compare it. */
  readonly version: number
  readonly issuer: string
  readonly keys: ReadonlyMap<string, KeyObject>
  /** Identity of the key set: changes exactly when `keys` changes (the badge cache is dropped then). */
  readonly keysVersion: string
  readonly revoked: ReadonlySet<string>
  /** The workspace bundle, or null when no embedded PDP is configured or none was loaded yet. */
  readonly bundle: GatewayBundle | null
}

/** What a source hands to the holder; the holder assigns `version`. */
export type SnapshotContent = Omit<GatewaySnapshot, 'version'>

/** Holds the current snapshot; sources call `swap`, the gateway reads `current`. */
export class SnapshotHolder {
  #current: GatewaySnapshot | null = null
  #version = 0
  readonly #listeners: ((snapshot: GatewaySnapshot) => void)[] = []

  /** The current snapshot; throws before the first swap (the gateway starts only after one). */
  get current(): GatewaySnapshot {
    if (this.#current === null) throw new Error('no gateway snapshot loaded yet')
    return this.#current
  }

  get ready(): boolean {
    return this.#current !== null
  }

  swap(content: SnapshotContent): GatewaySnapshot {
    const next = Object.freeze({ ...content, version: ++this.#version })
    this.#current = next
    for (const listener of this.#listeners) listener(next)
    return next
  }

  /** Merges a change into the current snapshot (for example one revoked jti from a NOTIFY). */
  update(change: (current: GatewaySnapshot) => Partial<SnapshotContent>): GatewaySnapshot {
    const current = this.current
    const { version: _version, ...rest } = current
    return this.swap({ ...rest, ...change(current) })
  }

  onSwap(listener: (snapshot: GatewaySnapshot) => void): void {
    this.#listeners.push(listener)
  }
}

/** A producer of snapshots: the database in the appliance, the registry's HTTP API in `agent-trust gateway`. */
export interface SnapshotSource {
  /** Loads the first snapshot into the holder (rejects when it cannot), then keeps it fresh. */
  start(holder: SnapshotHolder): Promise<void>
  /** Stops timers and subscriptions; the holder keeps its last snapshot. */
  close(): Promise<void>
}
