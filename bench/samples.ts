/** Latency samples of the benchmarks (ms): a growable Float64Array, percentiles by sorting a view of it. */
export class Samples {
  #data: Float64Array
  #length = 0
  /** `capacity`: samples held before the first growth (a long run doubles it as it goes). */
  constructor(capacity = 1 << 12) {
    this.#data = new Float64Array(capacity)
  }
  get length(): number {
    return this.#length
  }
  push(value: number): void {
    if (this.#length === this.#data.length) {
      const next = new Float64Array(this.#data.length * 2)
      next.set(this.#data)
      this.#data = next
    }
    this.#data[this.#length++] = value
  }
  /** The p-th percentile (nearest rank); NaN without samples. */
  percentile(p: number): number {
    const sorted = this.#data.subarray(0, this.#length).sort()
    if (sorted.length === 0) return NaN
    return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] as number
  }
}
