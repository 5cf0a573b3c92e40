/**
 * fast-check settings for property tests: a fixed seed and a modest run count, so CI is repeatable and
 * quick. `FC_NUM_RUNS=<n>` replaces the count for a longer local run; the seed
 * stays fixed unless `FC_SEED` is set too (a failure prints the seed and path to replay it).
 */
export function propertyRuns(ciRuns: number): { numRuns: number; seed: number } {
  const runs = Number(process.env.FC_NUM_RUNS)
  const seed = Number(process.env.FC_SEED)
  return {
    numRuns: Number.isSafeInteger(runs) && runs > 0 ? runs : ciRuns,
    seed: Number.isSafeInteger(seed) ? seed : 0x5eed,
  }
}
