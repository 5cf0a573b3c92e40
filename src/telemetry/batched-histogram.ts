import type { Metric, Registry } from 'prom-client'

/** One exposition line's own labels: bucket lines carry `le`, the sum and count lines none. */
type Labels = { le?: number | string }
type LabelSet = Readonly<Record<string, string>>

class Series {
  /** Observations per bucket: index i counts values ≤ bounds[i] and > bounds[i - 1]; the last, > every bound. */
  readonly counts: Float64Array
  sum = 0
  count = 0

  constructor(readonly labels: LabelSet, buckets: number) {
    this.counts = new Float64Array(buckets + 1)
  }

  observe(bounds: Float64Array, value: number): void {
    if (!Number.isFinite(value)) return
    let i = 0
    while (i < bounds.length && value > bounds[i]!) i++
    this.counts[i]!++
    this.sum += value
    this.count++
  }
}

export interface HistogramSeries {
  observe(value: number): void
}

/**
 * A histogram observed once per request, counted in typed arrays (docs/performance.md, "Hot-path choices");
 * its scrape output is prom-client's for the same observations (test/unit/telemetry/batched-histogram.test.ts).
 */
export class BatchedHistogram {
  readonly name: string
  readonly help: string
  readonly type = 'histogram'
  readonly aggregator = 'sum'
  readonly #bounds: Float64Array
  /** As prom-client's metrics have it (tools that read a registry's label names use it). */
  readonly labelNames: readonly string[]
  /** By label values joined with NUL (label values are fixed names here: PDP kinds, never user input). */
  readonly #series = new Map<string, Series>()
  readonly #unlabelled: Series | null
  /** Bumped by reset(): handles from labels() look their series up again. */
  #generation = 0

  constructor(options: { name: string; help: string; buckets: readonly number[]; labelNames?: readonly string[]; registers?: readonly Registry[] }) {
    const sorted = [...options.buckets].sort((a, b) => a - b)
    if (sorted.length === 0 || sorted.some((b, i) => !Number.isFinite(b) || (i > 0 && b === sorted[i - 1]))) {
      throw new TypeError(`${options.name}: buckets must be distinct finite numbers`)
    }
    const labelNames = options.labelNames ?? []
    if (labelNames.includes('le')) throw new TypeError(`${options.name}: le is a reserved label name`)
    this.name = options.name
    this.help = options.help
    this.#bounds = Float64Array.from(sorted)
    this.labelNames = [...labelNames]
    this.#unlabelled = labelNames.length === 0 ? new Series({}, sorted.length) : null
    if (this.#unlabelled !== null) this.#series.set('', this.#unlabelled)
    // The registry reads metrics through get()/reset() only; prom-client's types list its own classes.
    for (const registry of options.registers ?? []) registry.registerMetric(this as unknown as Metric)
  }

  /** Records one value (seconds) of an unlabelled histogram. Values that are not finite are ignored, as they cannot be summed. */
  observe(value: number): void {
    if (this.#unlabelled === null) throw new TypeError(`${this.name}: a labelled histogram observes through labels()`)
    this.#unlabelled.observe(this.#bounds, value)
  }

  /** The series of one label set, values in the order of `labelNames`; keep the handle, it is the fast path. */
  labels(...values: string[]): HistogramSeries {
    if (values.length !== this.labelNames.length) {
      throw new TypeError(`${this.name}: ${this.labelNames.length} label values expected, got ${values.length}`)
    }
    const key = values.join('\u0000')
    const labels: Record<string, string> = {}
    this.labelNames.forEach((name, i) => {
      labels[name] = values[i]!
    })
    const bounds = this.#bounds
    let series: Series | null = null
    let generation = -1
    return {
      observe: (value: number): void => {
        if (series === null || generation !== this.#generation) {
          if (!Number.isFinite(value)) return
          generation = this.#generation
          series = this.#series.get(key) ?? null
          if (series === null) {
            series = new Series(labels, bounds.length)
            this.#series.set(key, series)
          }
        }
        series.observe(bounds, value)
      },
    }
  }

  get(): { name: string; help: string; type: string; aggregator: string; values: { labels: Labels; sharedLabels: LabelSet; value: number; metricName: string }[] } {
    const values: { labels: Labels; sharedLabels: LabelSet; value: number; metricName: string }[] = []
    const bucket = `${this.name}_bucket`
    for (const series of this.#series.values()) {
      const shared = series.labels
      let cumulative = 0
      for (let i = 0; i < this.#bounds.length; i++) {
        cumulative += series.counts[i]!
        values.push({ labels: { le: this.#bounds[i]! }, sharedLabels: shared, value: cumulative, metricName: bucket })
      }
      values.push(
        { labels: { le: '+Inf' }, sharedLabels: shared, value: series.count, metricName: bucket },
        { labels: {}, sharedLabels: shared, value: series.sum, metricName: `${this.name}_sum` },
        { labels: {}, sharedLabels: shared, value: series.count, metricName: `${this.name}_count` },
      )
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values }
  }

  reset(): void {
    this.#generation++
    const series = this.#unlabelled
    if (series === null) {
      this.#series.clear()
      return
    }
    series.counts.fill(0)
    series.sum = 0
    series.count = 0
  }
}
