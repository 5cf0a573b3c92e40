/**
 * The primary of a gateway cluster: forks the workers (node:cluster; Node 20 has no SO_REUSEPORT option, so
 * the primary holds the gateway port and hands connections to the workers round-robin), restarts a worker
 * that dies with a backoff, stops on a crash loop, asks the workers for readiness and metrics, and drains
 * them on shutdown. It serves nothing itself; the caller composes its operations listener or admin plane.
 */
import cluster, { type Worker } from 'node:cluster'
import type { ReadinessReport } from '../http/readiness.js'
import type { Logger } from '../telemetry/logger.js'
import { isWorkerMessage, WORKER_INDEX_VARIABLE, type PrimaryMessage, type WorkerMessage, type WorkerMetrics } from './messages.js'

/** More than `deaths` unplanned worker exits within `windowMs` stop the primary (exit code 1). */
export interface CrashLoopBound {
  readonly deaths: number
  readonly windowMs: number
}

export const DEFAULT_CRASH_LOOP: CrashLoopBound = { deaths: 5, windowMs: 60_000 }
/** First restart delay; it doubles with every death in the crash-loop window, up to RESTART_DELAY_MAX_MS. */
const RESTART_DELAY_MS = 100
const RESTART_DELAY_MAX_MS = 5_000
/** How long the primary waits for a worker's answer to a readiness or metrics question. */
const ANSWER_TIMEOUT_MS = 2_000

export interface WorkerPoolOptions {
  readonly count: number
  /** The script every worker runs (it calls serveAsWorker). */
  readonly exec: string
  /** Variables added to worker `index`'s environment (1-based); they may hold secrets and are never logged. */
  readonly env: (index: number) => Record<string, string>
  readonly logger: Logger
  /** SERVICE_SHUTDOWN_GRACE_MS: a draining worker is killed when it has not exited well after it. */
  readonly shutdownGraceMs: number
  readonly crashLoop?: CrashLoopBound
  /** Called on every unplanned worker exit (a metric counts them). */
  readonly onUnplannedExit?: () => void
  /** Called once when the workers die more often than the crash-loop bound allows; the primary must stop. */
  readonly onCrashLoop: (message: string) => void
}

/** One worker as the primary's readiness lists it. */
export interface WorkerState {
  readonly worker: number
  readonly pid: number | null
  readonly ready: boolean
}

export interface WorkersReadiness {
  readonly total: number
  readonly ready: number
  readonly workers: readonly WorkerState[]
  /** The readiness report of each worker that answered, by worker number. */
  readonly reports: ReadonlyMap<number, ReadinessReport>
}

export interface WorkerPool {
  /** `http://host:port` of the shared gateway listener, as the first worker bound it. */
  readonly gatewayUrl: string
  readonly count: number
  readiness(): Promise<WorkersReadiness>
  /** Each answering worker's metrics (prom-client JSON), by worker number. */
  metrics(): Promise<ReadonlyMap<number, WorkerMetrics>>
  /** Drains every worker (they stop accepting, finish in-flight requests, ship their last report) and waits for their exit. */
  close(): Promise<void>
}

/** A worker that did not start: its own message, which names what is wrong. */
export class WorkerStartError extends Error {
  override readonly name = 'WorkerStartError'
  readonly code = 'WORKER_START_FAILED'
}

interface Slot {
  readonly index: number
  worker: Worker | null
  up: boolean
  restartTimer: NodeJS.Timeout | null
}

/** Forks `count` workers and resolves once every one is up; rejects with the first start-up failure (and stops the others). */
export async function startWorkerPool(options: WorkerPoolOptions): Promise<WorkerPool> {
  const { logger } = options
  const bound = options.crashLoop ?? DEFAULT_CRASH_LOOP
  cluster.setupPrimary({ exec: options.exec, args: [] })
  const slots: Slot[] = Array.from({ length: options.count }, (_, i) => ({ index: i + 1, worker: null, up: false, restartTimer: null }))
  const deaths: number[] = []
  let stopping = false
  let crashLooped = false
  let nextQuestion = 1
  const pending = new Map<number, (answer: WorkerMessage & { type: 'agent-trust:answer' } | null) => void>()
  let gatewayUrl: string | null = null
  let startup: { resolve: () => void; reject: (error: Error) => void; waiting: number } | null = null

  const fork = (slot: Slot): void => {
    const worker = cluster.fork({ ...options.env(slot.index), [WORKER_INDEX_VARIABLE]: String(slot.index) })
    slot.worker = worker
    slot.up = false
    worker.on('message', (message: unknown) => {
      if (!isWorkerMessage(message)) return
      if (message.type === 'agent-trust:answer') {
        pending.get(message.id)?.(message)
        pending.delete(message.id)
      } else if (message.type === 'agent-trust:up') {
        slot.up = true
        gatewayUrl ??= message.gatewayUrl
        if (startup !== null) {
          if (--startup.waiting === 0) startup.resolve()
        } else {
          logger.info({ worker: slot.index, pid: worker.process.pid }, 'gateway worker restarted')
        }
      } else if (startup !== null) {
        startup.reject(new WorkerStartError(`gateway worker ${slot.index} did not start: ${message.message}`))
      }
    })
    worker.on('exit', (code, signal) => onExit(slot, worker, code, signal))
  }

  const onExit = (slot: Slot, worker: Worker, code: number | null, signal: string | null): void => {
    if (slot.worker !== worker) return
    slot.worker = null
    slot.up = false
    if (stopping) return
    if (startup !== null) {
      startup.reject(new WorkerStartError(`gateway worker ${slot.index} exited during start-up (code ${code}, signal ${signal})`))
      return
    }
    options.onUnplannedExit?.()
    const now = Date.now()
    deaths.push(now)
    while (deaths.length > 0 && (deaths[0] as number) <= now - bound.windowMs) deaths.shift()
    const fields = { worker: slot.index, pid: worker.process.pid, code, signal }
    if (deaths.length > bound.deaths) {
      if (crashLooped) return
      crashLooped = true
      const message = `gateway workers are crash-looping: ${deaths.length} unplanned exits within ${bound.windowMs / 1000} s (more than ${bound.deaths}); stopping`
      logger.error(fields, message)
      options.onCrashLoop(message)
      return
    }
    const delay = Math.min(RESTART_DELAY_MS * 2 ** (deaths.length - 1), RESTART_DELAY_MAX_MS)
    logger.warn({ ...fields, restart_in_ms: delay }, 'gateway worker died; restarting it while the others serve')
    slot.restartTimer = setTimeout(() => {
      slot.restartTimer = null
      if (!stopping) fork(slot)
    }, delay)
  }

  const ask = (worker: Worker, what: 'readiness' | 'metrics'): Promise<(WorkerMessage & { type: 'agent-trust:answer' }) | null> => {
    if (!worker.isConnected()) return Promise.resolve(null)
    const id = nextQuestion++
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        pending.delete(id)
        resolve(null)
      }, ANSWER_TIMEOUT_MS)
      pending.set(id, (answer) => {
        clearTimeout(timer)
        resolve(answer)
      })
      const message: PrimaryMessage = { type: 'agent-trust:ask', id, what }
      try {
        worker.send(message)
      } catch {
        pending.delete(id)
        clearTimeout(timer)
        resolve(null)
      }
    })
  }

  const drain = async (): Promise<void> => {
    stopping = true
    for (const slot of slots) if (slot.restartTimer !== null) clearTimeout(slot.restartTimer)
    const exits = slots.flatMap((slot) => {
      const worker = slot.worker
      if (worker === null || worker.isDead()) return []
      const exited = new Promise<void>((resolve) => worker.once('exit', () => resolve()))
      const message: PrimaryMessage = { type: 'agent-trust:shutdown' }
      try {
        worker.send(message)
      } catch {
        worker.process.kill('SIGTERM')
      }
      return [exited]
    })
    // A worker bounds its own drain by the grace period plus its last report; past that it is killed.
    const killAfter = setTimeout(() => {
      for (const slot of slots) {
        if (slot.worker !== null && !slot.worker.isDead()) {
          logger.warn({ worker: slot.index, pid: slot.worker.process.pid }, 'gateway worker did not finish draining; killed')
          slot.worker.process.kill('SIGKILL')
        }
      }
    }, options.shutdownGraceMs + 10_000)
    await Promise.all(exits)
    clearTimeout(killAfter)
  }

  await new Promise<void>((resolve, reject) => {
    startup = {
      resolve,
      reject: (error) => {
        if (startup === null) return
        startup = null
        reject(error)
      },
      waiting: slots.length,
    }
    for (const slot of slots) fork(slot)
  }).then(() => {
    startup = null
  }, async (error: unknown) => {
    await drain()
    throw error
  })

  return {
    gatewayUrl: gatewayUrl as unknown as string,
    count: slots.length,
    async readiness() {
      const answers = await Promise.all(slots.map(async (slot) => {
        const worker = slot.worker
        const answer = worker === null || !slot.up ? null : await ask(worker, 'readiness')
        return { slot, pid: worker?.process.pid ?? null, report: answer?.readiness ?? null }
      }))
      const reports = new Map<number, ReadinessReport>()
      const workers = answers.map(({ slot, pid, report }) => {
        if (report !== null) reports.set(slot.index, report)
        return { worker: slot.index, pid, ready: report?.ready === true }
      })
      return { total: slots.length, ready: workers.filter((w) => w.ready).length, workers, reports }
    },
    async metrics() {
      const answers = await Promise.all(slots.map(async (slot) => {
        const worker = slot.worker
        const answer = worker === null || !slot.up ? null : await ask(worker, 'metrics')
        return [slot.index, answer?.metrics ?? null] as const
      }))
      const byWorker = new Map<number, WorkerMetrics>()
      for (const [index, metrics] of answers) if (metrics !== null) byWorker.set(index, metrics)
      return byWorker
    },
    close: drain,
  }
}
