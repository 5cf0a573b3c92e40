/**
 * Application-level group commit for IAL-0 issuance. Recording a badge is commit-bound (the figures:
 * docs/performance.md, "Hot-path choices"), so requests that arrive in the same event-loop turn are
 * recorded by one statement and one commit. Under light load a batch is a single request and nothing waits: the flush is scheduled with
 * setImmediate, not a timer. At most MAX_IN_FLIGHT batch statements run at once; requests that arrive
 * meanwhile gather into the next batch (the more load, the larger the batches, the fewer the commits).
 */
import { sqlState, type Database } from '../db/database.js'
import { insertIal0Badges, type Ial0Insert, type Ial0InsertResult } from '../db/repositories/badges.js'

const MAX_BATCH = 128
const MAX_IN_FLIGHT = 2
const DEADLOCK_DETECTED = '40P01'

interface Pending {
  request: Ial0Insert
  resolve: (result: Ial0InsertResult | null) => void
  reject: (error: unknown) => void
}

export class IssuanceBatcher {
  readonly #db: Database
  readonly #didWebPrefix: string
  readonly #onAudited: () => void
  #queue: Pending[] = []
  #scheduled = false
  #inFlight = 0

  /** `onAudited` runs after a batch that wrote audit records committed (the chainer's cue). */
  constructor(db: Database, didWebPrefix: string, onAudited: () => void = () => {}) {
    this.#db = db
    this.#didWebPrefix = didWebPrefix
    this.#onAudited = onAudited
  }

  /** Records one request with whatever else arrives in this turn; resolves to its own verdict. */
  submit(request: Ial0Insert): Promise<Ial0InsertResult | null> {
    return new Promise((resolve, reject) => {
      this.#queue.push({ request, resolve, reject })
      if (!this.#scheduled) {
        this.#scheduled = true
        setImmediate(() => this.#flush())
      }
    })
  }

  #flush(): void {
    this.#scheduled = false
    while (this.#queue.length > 0 && this.#inFlight < MAX_IN_FLIGHT) {
      const batch = this.#queue.splice(0, MAX_BATCH)
      this.#inFlight++
      void this.#record(batch).finally(() => {
        this.#inFlight--
        this.#flush()
      })
    }
  }

  async #record(batch: Pending[], retried = false): Promise<void> {
    try {
      const results = await insertIal0Badges(this.#db, this.#didWebPrefix, batch.map((p) => p.request))
      batch.forEach((pending, i) => pending.resolve(results[i] ?? null))
      if (batch.some((pending) => pending.request.audit != null)) this.#onAudited()
    } catch (error) {
      // Batches lock in id order and cannot deadlock each other; a deadlock with another writer is
      // resolved by PostgreSQL aborting one side, and the batch simply runs again once.
      if (!retried && sqlState(error) === DEADLOCK_DETECTED) return this.#record(batch, true)
      for (const pending of batch) pending.reject(error)
    }
  }
}
