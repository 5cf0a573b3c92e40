/**
 * fast-check settings for property tests: a fixed seed and a modest run count in CI, so a failure
 * reproduces; `FC_NUM_RUNS=100000 FC_SEED=<n>` gives a larger or different local run.
 */
export function propertyOptions(defaultRuns: number): { seed: number; numRuns: number } {
  const runs = Number(process.env.FC_NUM_RUNS)
  const seed = Number(process.env.FC_SEED)
  return {
    seed: Number.isSafeInteger(seed) ? seed : 20261125,
    numRuns: Number.isSafeInteger(runs) && runs > 0 ? runs : defaultRuns,
  }
}
