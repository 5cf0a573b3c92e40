/**
 * Open-loop load at a fixed rate, for latency at equal offered load (bench/gateway.ts).
 *
 * autocannon's rate options cap the requests per connection per second but send each second's quota
 * as fast as the answers come, so the first part of every second is a burst at saturation: no use for
 * "the latency a proxy adds at a given load". Here requests follow a fixed timetable (checked every
 * millisecond, so they leave in groups of rate/1000) whether or not earlier ones were answered, over a
 * keep-alive undici Pool of `connections` sockets. Each latency runs from the moment the request was
 * handed to the pool, so a request that had to wait for a free connection is charged for the wait (no
 * coordinated omission); the timer's own lateness, the same for every proxy, is not counted.
 */
import { Pool, type Dispatcher } from 'undici'
import type { Samples } from './samples.js'

/** What every benchmark load sends (bench/gateway.ts drives autocannon with it too). */
export interface Load {
  url: string
  headers: Record<string, string>
  /** Path of the n-th request. */
  path: (n: number) => string
  /** GET without a body unless said otherwise. */
  method?: 'GET' | 'POST'
  body?: Buffer
}

export interface PacedResult {
  sent: number
  /** Answers with a 2xx status. */
  ok: number
  /** Other statuses and failed requests. */
  failed: number
}

/**
 * One request's handler: the plain dispatch interface, without the promise and body stream of
 * `request()`, so that the load generator (on the upstream's core) stays cheap next to the proxy.
 */
class Timed implements Dispatcher.DispatchHandler {
  #status = 0
  constructor(
    private readonly sentAt: number,
    private readonly result: PacedResult,
    private readonly samples: Samples | null,
    private readonly settle: () => void,
  ) {}

  onConnect(): void {}

  onHeaders(statusCode: number): boolean {
    this.#status = statusCode
    return true
  }

  onData(): boolean {
    return true
  }

  onComplete(): void {
    if (this.#status >= 200 && this.#status < 300) {
      this.result.ok++
      this.samples?.push(performance.now() - this.sentAt)
    } else {
      this.result.failed++
    }
    this.settle()
  }

  onError(): void {
    this.result.failed++
    this.settle()
  }
}

/**
 * An open-loop load generator on one keep-alive pool of `connections` sockets. Phases run one after
 * another on the same sockets, so a warm-up phase also opens the connections: the measured phase then
 * sees steady state, not 50 connections being set up while requests are already due
 * (docs/performance.md, "The gateway benchmark", says what such a start did to a 5 s phase's p99).
 */
export class PacedLoad {
  readonly #pool: Pool

  constructor(private readonly load: Load, connections: number) {
    this.#pool = new Pool(new URL(load.url).origin, { connections, pipelining: 1 })
  }

  /** `rate` requests per second for `seconds`, whether or not earlier ones were answered; resolves once all are answered. */
  async run(options: { rate: number; seconds: number }, samples: Samples | null): Promise<PacedResult> {
    const { load } = this
    const pool = this.#pool
    const result: PacedResult = { sent: 0, ok: 0, failed: 0 }
    const total = Math.round(options.rate * options.seconds)
    const spacingMs = 1000 / options.rate
    let outstanding = 0
    let allAnswered!: () => void
    const finished = new Promise<void>((resolve) => {
      allAnswered = resolve
    })
    const settle = (): void => {
      outstanding--
      if (outstanding === 0 && result.sent === total) allAnswered()
    }
    const send = (): void => {
      outstanding++
      pool.dispatch({ path: load.path(result.sent), method: load.method ?? 'GET', headers: load.headers, body: load.body ?? null }, new Timed(performance.now(), result, samples, settle))
      result.sent++
    }
    const start = performance.now()
    await new Promise<void>((resolve) => {
      const timer = setInterval(() => {
        const due = Math.min(total, Math.floor((performance.now() - start) / spacingMs) + 1)
        while (result.sent < due) send()
        if (result.sent === total) {
          clearInterval(timer)
          resolve()
        }
      }, 1)
    })
    if (outstanding > 0) await finished
    return result
  }

  close(): Promise<void> {
    return this.#pool.close()
  }
}
