import type { Metric, Registry } from 'prom-client'

/** One exposition line's labels: bucket lines carry `le`, the sum and count lines none. */
type Labels = { le?: number | string }

/**
 * An unlabelled Prometheus histogram for the gateway's per-request latency, counted in a typed array.
 *
 * prom-client's `Histogram.observe` validates and hashes the (empty) label set, then finds the bucket
 * and increments it through an object keyed by the bucket's bound as a string: converting the double
 * to a property key twice per call. On the gateway, where it ran once per request, it cost about as
 * much as the rest of the metrics together (~3,000 instructions, callgrind). Here an observation is a
 * linear scan over a dozen bounds and three additions; the exposition is built only when scraped.
 *
 * The scrape output is the same as prom-client's for the same observations
 * (test/unit/batched-histogram.test.ts holds it to that): `_bucket` lines with cumulative counts per
 * `le`, `+Inf`, `_sum` and `_count`.
 */
export class BatchedHistogram {
  readonly name: string
  readonly help: string
  readonly type = 'histogram'
  readonly aggregator = 'sum'
  readonly #bounds: Float64Array
  /** Observations per bucket: index i counts values ≤ bounds[i] and > bounds[i - 1]; the last, > every bound. */
  readonly #counts: Float64Array
  #sum = 0
  #count = 0

  constructor(options: { name: string; help: string; buckets: readonly number[]; registers?: readonly Registry[] }) {
    const sorted = [...options.buckets].sort((a, b) => a - b)
    if (sorted.length === 0 || sorted.some((b, i) => !Number.isFinite(b) || (i > 0 && b === sorted[i - 1]))) {
      throw new TypeError(`${options.name}: buckets must be distinct finite numbers`)
    }
    this.name = options.name
    this.help = options.help
    this.#bounds = Float64Array.from(sorted)
    this.#counts = new Float64Array(sorted.length + 1)
    // The registry reads metrics through get()/reset() only; prom-client's types list its own classes.
    for (const registry of options.registers ?? []) registry.registerMetric(this as unknown as Metric)
  }

  /** Records one value (seconds). Values that are not finite are ignored, as they cannot be summed. */
  observe(value: number): void {
    if (!Number.isFinite(value)) return
    const bounds = this.#bounds
    let i = 0
    while (i < bounds.length && value > bounds[i]!) i++
    this.#counts[i]!++
    this.#sum += value
    this.#count++
  }

  /** The metric in prom-client's object form, which the registry serialises. */
  get(): { name: string; help: string; type: string; aggregator: string; values: { labels: Labels; value: number; metricName: string }[] } {
    const values: { labels: Labels; value: number; metricName: string }[] = []
    const bucket = `${this.name}_bucket`
    let cumulative = 0
    for (let i = 0; i < this.#bounds.length; i++) {
      cumulative += this.#counts[i]!
      values.push({ labels: { le: this.#bounds[i]! }, value: cumulative, metricName: bucket })
    }
    values.push(
      { labels: { le: '+Inf' }, value: this.#count, metricName: bucket },
      { labels: {}, value: this.#sum, metricName: `${this.name}_sum` },
      { labels: {}, value: this.#count, metricName: `${this.name}_count` },
    )
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values }
  }

  reset(): void {
    this.#counts.fill(0)
    this.#sum = 0
    this.#count = 0
  }
}
