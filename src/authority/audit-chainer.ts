/**
 * Turns pending audit records into the hash chain, off every request path (docs/audit.md). Each admin
 * instance runs one: soon after its own writes, on NOTIFY from other processes (the CLI), on a timer, and at
 * start-up, so a restart continues the chain where the head row says it stands. Checkpoints are signed with
 * the authority's current signing key every `checkpointRecords` records or `checkpointIntervalMs`.
 */
import { signCheckpoint } from '../core/audit.js'
import type { Database } from '../db/database.js'
import { AUDIT_PENDING_CHANNEL, chainPendingAudit, type ChainHead } from '../db/repositories/audit.js'
import type { KeyRing } from './key-ring.js'

export interface AuditChainerOptions {
  readonly db: Database
  readonly keyRing: KeyRing
  readonly issuer: string
  readonly checkpointRecords: number
  readonly checkpointIntervalMs: number
  /** How often the chainer looks without being asked (pending records of other instances, time checkpoints). */
  readonly pollMs?: number
  readonly batch?: number
  /** How long after a committed write the chainer runs, so that one run chains the writes of that while. */
  readonly chainDelayMs?: number
  readonly onError?: (error: unknown) => void
}

export class AuditChainer {
  readonly #options: AuditChainerOptions
  #running: Promise<void> | null = null
  #again = false
  #timer: NodeJS.Timeout | null = null
  #soon: NodeJS.Timeout | null = null
  #unlisten: (() => Promise<void>) | null = null
  #stopped = false

  constructor(options: AuditChainerOptions) {
    this.#options = options
  }

  /** Chains what is pending now, then keeps chaining on notifications and the timer. */
  async start(): Promise<void> {
    this.#unlisten = await this.#options.db.listen(AUDIT_PENDING_CHANNEL, () => this.soon(), () => this.soon())
    await this.run()
    const pollMs = this.#options.pollMs ?? 1000
    this.#timer = setInterval(() => this.soon(), pollMs)
    this.#timer.unref()
  }

  /**
   * Asks for a run within chainDelayMs (coalesced): called after every committed audited write. Each run
   * commits on its own, beside the writes; a run per write, or every 50 ms, cost a one-connection admin
   * write 10-40 % (docs/performance.md, "Badge authority").
   */
  soon(): void {
    if (this.#stopped || this.#soon !== null) return
    this.#soon = setTimeout(() => {
      this.#soon = null
      void this.run().catch((error: unknown) => this.#options.onError?.(error))
    }, this.#options.chainDelayMs ?? 200)
  }

  /** Chains until nothing is pending; a call during a run makes the run go round once more. */
  run(forceCheckpoint = false): Promise<void> {
    if (this.#running !== null) {
      this.#again = true
      return this.#running
    }
    this.#running = (async () => {
      try {
        let force = forceCheckpoint
        do {
          this.#again = false
          for (;;) {
            const result = await chainPendingAudit(this.#options.db, this.#options.batch ?? 500, (head, f) => this.#sign(head, f || force))
            force = false
            if (result.chained < (this.#options.batch ?? 500)) break
          }
        } while (this.#again && !this.#stopped)
      } finally {
        this.#running = null
      }
    })()
    return this.#running
  }

  /** Chains what is pending and signs a checkpoint on the head (shut-down, tests, `audit checkpoint`). */
  async checkpoint(): Promise<void> {
    await this.#running?.catch(() => {})
    await this.run(true)
  }

  #sign(head: ChainHead, force: boolean): string | null {
    const due = force ||
      head.seq - head.checkpointSeq >= this.#options.checkpointRecords ||
      Date.now() - head.checkpointAt >= this.#options.checkpointIntervalMs
    if (!due) return null
    const signing = this.#options.keyRing.current.signing
    return signCheckpoint({ chain: head.chain, seq: head.seq, head: head.hash, iat: Math.floor(Date.now() / 1000), iss: this.#options.issuer }, signing)
  }

  /** Stops the timer and the listener; the last run finishes (and signs the head, so a clean stop leaves it signed). */
  async stop(): Promise<void> {
    this.#stopped = true
    if (this.#timer !== null) clearInterval(this.#timer)
    if (this.#soon !== null) clearTimeout(this.#soon)
    this.#soon = null
    await this.#unlisten?.()
    await this.#running?.catch(() => {})
    await this.run(true).catch((error: unknown) => this.#options.onError?.(error))
  }
}
