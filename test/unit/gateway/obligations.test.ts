/**
 * The gateway's obligation handlers (docs/wire-contract.md §8): the token-bucket RateLimiter behind
 * `rate_limit.apply`, and ObligationHandlers' result per obligation (what a result means is the mode
 * table's business, tested in enforcement.test.ts).
 */
import fc from 'fast-check'
import t from 'tap'
import { MAX_WAIT_MS, ObligationHandlers, RateLimiter, type EnhancedLogContext, type ObligationRun } from '../../../src/gateway/obligations.js'
import { LocalRateLimits } from '../../../src/gateway/rate-limits.js'
import type { PdpObligation } from '../../../src/core/enforcement.js'

const T0 = 1_800_000_000_000
const MET = { status: 'known', met: true }
const UNMET = { status: 'known', met: false }
const OVER = { status: 'known', met: false, overLimit: true }

t.test('RateLimiter: a burst of rpm, then a refusal with a positive wait', async (t) => {
  const limiter = new RateLimiter()
  for (let i = 0; i < 5; i++) t.equal(limiter.take('k', 5, T0), 0, `request ${i + 1} of the burst`)
  const wait = limiter.take('k', 5, T0)
  t.ok(wait > 0, 'the sixth is refused')
  t.equal(wait, 12_000, 'one token every 60 s / 5')
  t.equal(limiter.take('other', 5, T0), 0, 'another key has its own bucket')
})

t.test('RateLimiter: refill over injected time', async (t) => {
  const limiter = new RateLimiter()
  t.equal(limiter.take('k', 60, T0), 0)
  for (let i = 1; i < 60; i++) limiter.take('k', 60, T0)
  t.equal(limiter.take('k', 60, T0), 1000, 'empty: 1 s per token at 60 rpm')
  t.equal(limiter.take('k', 60, T0 + 500), 500, 'half a token refilled: 500 ms more')
  t.equal(limiter.take('k', 60, T0 + 1000), 0, 'a full token after 1 s')
  t.ok(limiter.take('k', 60, T0 + 1000) > 0, 'and only one')
  // A long pause refills to the capacity, never past it.
  let allowed = 0
  while (limiter.take('k', 60, T0 + 3_600_000) === 0) allowed++
  t.equal(allowed, 60, 'a full bucket after an hour, capped at rpm')
})

t.test('RateLimiter: the wait it names is enough', async (t) => {
  // After the burst is spent, at any moment: taking again after the named wait succeeds (the rounding
  // up of the wait must never leave the bucket a float hair short of one token).
  fc.assert(fc.property(fc.integer({ min: 1, max: 1_000 }), fc.integer({ min: 0, max: 59_999 }), (rpm, offset) => {
    // A small key bound: the default preallocates for 100 000 keys, which dominates 300 runs.
    const limiter = new RateLimiter(16)
    for (let i = 0; i < rpm; i++) limiter.take('k', rpm, T0)
    const now = T0 + Math.floor(offset / rpm) // less than one token's refill time
    const wait = limiter.take('k', rpm, now)
    return wait > 0 && limiter.take('k', rpm, now + wait) === 0
  }), { numRuns: 300 })
  t.pass()
})

t.test('property: never more than rpm + elapsed·rpm/60000 allowed', async (t) => {
  fc.assert(fc.property(
    fc.integer({ min: 1, max: 600 }),
    fc.array(fc.integer({ min: 0, max: 5_000 }), { minLength: 1, maxLength: 300 }),
    (rpm, gaps) => {
      const limiter = new RateLimiter(16)
      let now = T0
      let allowed = 0
      for (const gap of gaps) {
        now += gap
        if (limiter.take('k', rpm, now) === 0) allowed++
        if (allowed > rpm + ((now - T0) * rpm) / 60_000 + 1e-9) return false
      }
      return true
    },
  ), { numRuns: 300 })
  t.pass()
})

/** The handlers over this process's buckets, which answer synchronously: the decision path waits for nothing. */
function synchronous(handlers: ObligationHandlers): { run: (...args: Parameters<ObligationHandlers['run']>) => ObligationRun } {
  return {
    run(...args) {
      const run = handlers.run(...args)
      if (run instanceof Promise) throw new Error('local rate limits answered through a promise')
      return run
    },
  }
}

function handlers() {
  const logged: { level: string; context: EnhancedLogContext }[] = []
  const h = synchronous(new ObligationHandlers(new LocalRateLimits(), (level, context) => logged.push({ level, context })))
  let contextCalls = 0
  const context = (): EnhancedLogContext => {
    contextCalls++
    return { request_id: 'r-1' }
  }
  return { h, logged, context, contextCalls: () => contextCalls }
}

t.test('rate_limit.apply: met, then over limit with retryAfterSeconds', async (t) => {
  const { h, context } = handlers()
  const ob: PdpObligation[] = [{ type: 'rate_limit.apply', params: { rpm: 2, key: 'bucket-1' } }]
  const s0 = T0 / 1000
  // rateLimit feeds the X-RateLimit-* headers: the limit, whole tokens left, and when one is next free.
  t.strictSame(h.run(ob, 'did:a', T0, context), { results: [MET], retryAfterSeconds: 0, rateLimit: { limit: 2, remaining: 1, reset: s0 } })
  t.strictSame(h.run(ob, 'did:a', T0, context), { results: [MET], retryAfterSeconds: 0, rateLimit: { limit: 2, remaining: 0, reset: s0 } })
  t.strictSame(h.run(ob, 'did:a', T0, context), { results: [OVER], retryAfterSeconds: 30, rateLimit: { limit: 2, remaining: 0, reset: s0 + 30 } }, '30 s until a token at 2 rpm')
  const almost = h.run(ob, 'did:a', T0 + 29_500, context)
  t.strictSame(almost.results, [OVER])
  t.equal(almost.retryAfterSeconds, 1, 'rounded up to whole seconds')
  t.ok(almost.rateLimit !== null && almost.rateLimit.reset >= s0 + 30 && almost.rateLimit.reset <= s0 + 31, 'reset about 30 s after the first request')
  t.strictSame(h.run(ob, 'did:a', T0 + 30_000, context), { results: [MET], retryAfterSeconds: 0, rateLimit: { limit: 2, remaining: 0, reset: s0 + 30 } })
})

t.test('rate_limit.apply: a vanishing rpm from a PDP names a finite wait and reset', async (t) => {
  const handlers = synchronous(new ObligationHandlers(new LocalRateLimits(new RateLimiter()), () => {}))
  const tiny: PdpObligation[] = [{ type: 'rate_limit.apply', params: { rpm: 1e-300, key: 'k-tiny' } }]
  handlers.run(tiny, 'did:x', 0, () => ({}) as EnhancedLogContext)
  const refused = handlers.run(tiny, 'did:x', 0, () => ({}) as EnhancedLogContext)
  t.equal(refused.retryAfterSeconds, MAX_WAIT_MS / 1000, 'capped at one day')
  t.ok(Number.isFinite(refused.rateLimit?.reset), 'the reset is a number')
})

t.test('rate_limit.apply: the key defaults to the subject DID', async (t) => {
  const { h, context } = handlers()
  t.strictSame(h.run([{ type: 'rate_limit.apply', params: { rpm: 1 } }], 'did:a', T0, context).results, [MET])
  t.strictSame(h.run([{ type: 'rate_limit.apply', params: { rpm: 1, key: 'did:a' } }], 'did:b', T0, context).results, [OVER], 'same bucket as the explicit key did:a')
  t.strictSame(h.run([{ type: 'rate_limit.apply', params: { rpm: 1 } }], 'did:b', T0, context).results, [MET], 'did:b has its own')
})

t.test('rate_limit.apply: bad params are unmet, not over limit', async (t) => {
  const { h, context } = handlers()
  const bad: (Record<string, unknown> | undefined)[] = [
    undefined, {}, { rpm: '5' }, { rpm: 0 }, { rpm: -1 }, { rpm: Number.NaN }, { rpm: Number.POSITIVE_INFINITY },
    { rpm: 5, key: '' }, { rpm: 5, key: 7 }, { rpm: 5, key: ['a'] },
  ]
  for (const params of bad) {
    const ob: PdpObligation = params === undefined ? { type: 'rate_limit.apply' } : { type: 'rate_limit.apply', params }
    t.strictSame(h.run([ob], 'did:a', T0, context), { results: [UNMET], retryAfterSeconds: 0, rateLimit: null }, JSON.stringify(params) ?? 'no params')
  }
})

t.test('log.enhanced calls the log function with the level', async (t) => {
  const { h, logged, context, contextCalls } = handlers()
  t.strictSame(h.run([{ type: 'log.enhanced', params: { level: 'warn' } }], 'did:a', T0, context).results, [MET])
  t.strictSame(logged, [{ level: 'warn', context: { request_id: 'r-1' } }])
  t.strictSame(h.run([{ type: 'log.enhanced' }], 'did:a', T0, context).results, [MET], 'no params: info')
  t.equal(logged[1]?.level, 'info')
  for (const level of ['trace', 'debug', 'error', 'fatal']) h.run([{ type: 'log.enhanced', params: { level } }], 'did:a', T0, context)
  t.strictSame(logged.slice(2).map((l) => l.level), ['trace', 'debug', 'error', 'fatal'])
  const before = logged.length
  t.strictSame(h.run([{ type: 'log.enhanced', params: { level: 'verbose' } }], 'did:a', T0, context).results, [UNMET], 'unknown level')
  t.strictSame(h.run([{ type: 'log.enhanced', params: { level: 3 } }], 'did:a', T0, context).results, [UNMET], 'non-string level')
  t.strictSame(h.run([{ type: 'log.enhanced', params: { level: 'silent' } }], 'did:a', T0, context).results, [UNMET], 'silent is not a log level')
  t.equal(logged.length, before, 'nothing logged for bad levels')
  t.equal(contextCalls(), before, 'the context is built only when a line is written')
})

t.test('unknown types, order of results, and the largest wait', async (t) => {
  const { h, context, contextCalls } = handlers()
  t.strictSame(h.run([{ type: 'notify.slack', params: { channel: '#x' } }], 'did:a', T0, context), { results: [{ status: 'unknown' }], retryAfterSeconds: 0, rateLimit: null })
  t.equal(contextCalls(), 0)
  t.strictSame(h.run([], 'did:a', T0, context), { results: [], retryAfterSeconds: 0, rateLimit: null })
  // Exhaust two buckets with different refill speeds; the run reports the longer wait.
  h.run([{ type: 'rate_limit.apply', params: { rpm: 1, key: 'slow' } }, { type: 'rate_limit.apply', params: { rpm: 6, key: 'fast' } }], 'did:a', T0, context)
  for (let i = 0; i < 5; i++) h.run([{ type: 'rate_limit.apply', params: { rpm: 6, key: 'fast' } }], 'did:a', T0, context)
  const run = h.run([
    { type: 'rate_limit.apply', params: { rpm: 6, key: 'fast' } },
    { type: 'x.unknown' },
    { type: 'rate_limit.apply', params: { rpm: 1, key: 'slow' } },
    { type: 'log.enhanced', params: { level: 'info' } },
  ], 'did:a', T0, context)
  t.strictSame(run.results, [OVER, { status: 'unknown' }, OVER, MET], 'one result per obligation, in order')
  t.equal(run.retryAfterSeconds, 60, 'the longer of 10 s and 60 s')
})

t.test('only a rate limit asks the limits, all of an answer\'s at once, and only then may the run wait', async (t) => {
  const asked: unknown[] = []
  const remote = new ObligationHandlers({
    take(requests) {
      asked.push(requests.map(({ key, rpm }) => ({ key, rpm })))
      return Promise.resolve(requests.map((_, i) => (i === 0 ? { wait: 0, remaining: 3, atMs: T0 } : { wait: 2_500, remaining: 0, atMs: T0 })))
    },
  }, () => {})
  const logOnly = remote.run([{ type: 'log.enhanced' }, { type: 'x.other' }], 'did:a', T0, () => ({}))
  t.notOk(logOnly instanceof Promise, 'an answer without a rate limit is settled at once')
  t.strictSame(asked, [], 'and asks nothing')
  const run = remote.run([
    { type: 'rate_limit.apply', params: { rpm: 10 } }, { type: 'log.enhanced' }, { type: 'rate_limit.apply', params: { rpm: 1, key: 'tool' } },
  ], 'did:a', T0, () => ({}))
  t.ok(run instanceof Promise, 'a rate limit counted elsewhere is waited for')
  t.strictSame(asked, [[{ key: 'did:a', rpm: 10 }, { key: 'tool', rpm: 1 }]], 'both limits in one take')
  t.strictSame(await run, { results: [MET, MET, OVER], retryAfterSeconds: 3, rateLimit: { limit: 1, remaining: 0, reset: T0 / 1000 + 3 } }, 'the results in place; the reset from the limiter\'s clock')
  const allowed = new ObligationHandlers({ take: (requests) => requests.map(() => null) }, () => {})
  t.strictSame(allowed.run([{ type: 'rate_limit.apply', params: { rpm: 1 } }], 'did:a', T0, () => ({})), { results: [MET], retryAfterSeconds: 0, rateLimit: null }, 'let through uncounted: met, no headers')
})
