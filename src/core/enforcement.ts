/**
 * The enforcement mode table (docs/api.md §8, docs/wire-contract.md §8, §10 and §13) as one pure function, so the gateway
 * never re-derives per mode what a PDP answer, an obligation result or a stale bundle means for the
 * request. No I/O: the gateway evaluates, runs the obligation handlers, then asks `enforce` what to do.
 */
import { isEnforcementMode, MODE_STRICTNESS, type EnforcementMode } from './enforcement-mode.js'
import { GATEWAY_ERRORS, type GatewayErrorCode } from './gateway-errors.js'

/**
 * The strictest of `configured` and every valid `enforcement_mode_min` in a delegation chain.
 *
 * `null` and `undefined` (no minimum) and strings that are not one of the four modes are ignored: the
 * envelope verifier already rejects an unknown mode, so one reaching this point came from a caller that
 * skipped validation, and ignoring it can never lower the configured mode, only fail to raise it.
 */
export function effectiveMode(configured: EnforcementMode, minimums: readonly (string | null | undefined)[]): EnforcementMode {
  let mode = configured
  for (const minimum of minimums) {
    if (isEnforcementMode(minimum) && MODE_STRICTNESS[minimum] > MODE_STRICTNESS[mode]) mode = minimum
  }
  return mode
}

/** Obligation types with a built-in gateway handler (docs/wire-contract.md §8). */
export const BUILTIN_OBLIGATION_TYPES = ['rate_limit.apply', 'log.enhanced'] as const
/** A built-in obligation type. */
export type BuiltinObligationType = (typeof BUILTIN_OBLIGATION_TYPES)[number]

interface EnforcementResponse {
  readonly status: number
  readonly code: GatewayErrorCode
}

const responseOf = (code: GatewayErrorCode): EnforcementResponse => Object.freeze({ status: GATEWAY_ERRORS[code].status, code })

/** Gateway-made responses of the mode table (docs/wire-contract.md §9 and §13), their statuses from the gateway error catalogue. */
export const ENFORCEMENT_RESPONSES = Object.freeze({
  POLICY_DENIED: responseOf('POLICY_DENIED'),
  PDP_UNAVAILABLE: responseOf('PDP_UNAVAILABLE'),
  OBLIGATION_FAILED: responseOf('OBLIGATION_FAILED'),
  RATE_LIMIT_EXCEEDED: responseOf('rate_limit_exceeded'),
  BUNDLE_STALE: responseOf('BUNDLE_STALE'),
})

/** An obligation as the PDP returned it. */
export interface PdpObligation {
  type: string
  params?: Record<string, unknown>
}

/**
 * What the gateway's handler made of one PDP obligation.
 *
 * - `unknown`: no handler for the type.
 * - `known` with `met: true`: the handler applied it.
 * - `known` with `met: false`: the handler could not meet it; for `rate_limit.apply` set `overLimit: true`
 *   when the cause is an exceeded limit (429), leave it unset when the obligation itself could not be
 *   applied (for example bad params), which is an ordinary failure.
 */
export type ObligationResult =
  | { status: 'unknown' }
  | { status: 'known'; met: true }
  | { status: 'known'; met: false; overLimit?: boolean }

/** The PDP answer as the gateway saw it; anything but a well-formed ALLOW or DENY is `UNAVAILABLE`. */
export type PdpOutcome =
  | { outcome: 'ALLOW' | 'DENY'; decisionId: string; obligations: PdpObligation[] }
  | { outcome: 'UNAVAILABLE' }

/** Everything `enforce` needs to know about one request. */
export interface EnforcementInput {
  /** The effective mode (see `effectiveMode`). */
  mode: EnforcementMode
  pdp: PdpOutcome
  /** The embedded bundle is older than `SERVICE_BUNDLE_STALENESS_THRESHOLD`; false for an external PDP. */
  bundleStale: boolean
  /**
   * One entry per `pdp.obligations` entry, same order. A missing entry is classified here: an unknown
   * type counts as `unknown`, a built-in type as `known` and not met (its handler reported nothing, so it
   * cannot be shown to be met; failing closed matters in EM-STRICT and is only logged in EM-DELEGATE).
   */
  obligationResults?: readonly (ObligationResult | undefined)[]
}

/** What the gateway does with the request. */
export interface EnforcementResult {
  /** Forward upstream; when false, answer `status` with `{"error": code}`. */
  forward: boolean
  status?: number
  code?: GatewayErrorCode
  /** `service.policy.decision`. Every refused request is `DENY`, so `ALLOW` always means forwarded. */
  decision: 'ALLOW' | 'DENY' | 'ALLOW_OBSERVE'
  /** `service.policy.decision_id` when the PDP answered. */
  decisionId?: string
  /** `service.policy.error_code`. */
  errorCode?: 'PDP_UNAVAILABLE'
  /** Obligation types that caused the refusal. */
  obligationFailures: string[]
  /** Obligation types that failed or are unknown but did not change the response: log them. */
  logOnly: string[]
  /** `staleness.bundle_stale`: the caller annotates telemetry in every mode (EM-STRICT also refuses). */
  bundleStale: boolean
}

const BUILTIN = new Set<string>(BUILTIN_OBLIGATION_TYPES)

type Classified = { type: string; kind: 'met' | 'unmet' | 'over_limit' | 'unknown' }

function classify(obligations: readonly PdpObligation[], results: readonly (ObligationResult | undefined)[] | undefined): Classified[] {
  return obligations.map((obligation, index) => {
    const result = results?.[index]
    const type = obligation.type
    if (result === undefined) return { type, kind: BUILTIN.has(type) ? 'unmet' : 'unknown' }
    if (result.status === 'unknown') return { type, kind: 'unknown' }
    if (result.met) return { type, kind: 'met' }
    // Only the rate limiter has a "try again later" failure; any other unmet obligation is permanent.
    return { type, kind: type === 'rate_limit.apply' && result.overLimit === true ? 'over_limit' : 'unmet' }
  })
}

const refuse = (
  response: EnforcementResponse,
  rest: Omit<EnforcementResult, 'forward' | 'status' | 'code' | 'decision'>,
): EnforcementResult => ({ forward: false, status: response.status, code: response.code, decision: 'DENY', ...rest })

/**
 * Applies the enforcement mode table to one request.
 *
 * Precedence, first match wins:
 * 1. EM-STRICT with a stale bundle: 403 `BUNDLE_STALE`, before the PDP outcome is looked at. The stale
 *    bundle is what the decision would be computed from, so no outcome it produced (nor its absence) can
 *    be trusted; checking it first also gives one stable answer for a stale gateway whatever the PDP did,
 *    and lets the gateway skip evaluation altogether.
 * 2. PDP unavailable: EM-OBSERVE forwards as `ALLOW_OBSERVE` with error code `PDP_UNAVAILABLE`; every
 *    other mode answers 503 `PDP_UNAVAILABLE`.
 * 3. PDP DENY: EM-OBSERVE forwards as `ALLOW_OBSERVE`; every other mode answers 403 `POLICY_DENIED`.
 *    A DENY's obligations are ignored (the PDP sends none; nothing is left to enforce).
 * 4. PDP ALLOW, obligations by mode:
 *    - EM-OBSERVE, EM-GUARD: not enforced; failures and unknown types only go to `logOnly`.
 *    - EM-DELEGATE: best effort, failures and unknown types go to `logOnly`, except an over-limit
 *      `rate_limit.apply`, which answers 429 `rate_limit_exceeded`. docs/wire-contract.md §13 states the 429
 *      without naming modes; docs/api.md §8 says obligations are "not enforced" in EM-OBSERVE and EM-GUARD, so
 *      the 429 applies exactly where obligations are enforced at all, EM-DELEGATE and EM-STRICT. A rate
 *      limit the gateway ignores in the mode whose point is delegated, policy-driven control would make
 *      `rpm` meaningless there.
 *    - EM-STRICT: an unknown type or an unmet obligation answers 403 `OBLIGATION_FAILED`; if the only
 *      failures are over-limit rate limits, 429 `rate_limit_exceeded`. 403 wins over 429 because
 *      retrying later would not help.
 */
export function enforce(input: EnforcementInput): EnforcementResult {
  const { mode, pdp, bundleStale } = input
  // The common case first, without the classification below: an ALLOW without obligations is forwarded
  // in every mode, unless EM-STRICT refuses it for a stale bundle (rule 1).
  if (pdp.outcome === 'ALLOW' && pdp.obligations.length === 0 && !(mode === 'EM-STRICT' && bundleStale)) {
    return { forward: true, decision: 'ALLOW', decisionId: pdp.decisionId, obligationFailures: [], logOnly: [], bundleStale }
  }
  const base = { obligationFailures: [] as string[], logOnly: [] as string[], bundleStale }

  if (mode === 'EM-STRICT' && bundleStale) return refuse(ENFORCEMENT_RESPONSES.BUNDLE_STALE, base)

  if (pdp.outcome === 'UNAVAILABLE') {
    if (mode === 'EM-OBSERVE') return { forward: true, decision: 'ALLOW_OBSERVE', errorCode: 'PDP_UNAVAILABLE', ...base }
    return refuse(ENFORCEMENT_RESPONSES.PDP_UNAVAILABLE, { ...base, errorCode: 'PDP_UNAVAILABLE' })
  }

  const decisionId = pdp.decisionId
  if (pdp.outcome === 'DENY') {
    if (mode === 'EM-OBSERVE') return { forward: true, decision: 'ALLOW_OBSERVE', decisionId, ...base }
    return refuse(ENFORCEMENT_RESPONSES.POLICY_DENIED, { ...base, decisionId })
  }

  const failed = classify(pdp.obligations, input.obligationResults).filter((o) => o.kind !== 'met')
  const types = (kinds: readonly Classified['kind'][]): string[] => failed.filter((o) => kinds.includes(o.kind)).map((o) => o.type)
  const allow: EnforcementResult = { forward: true, decision: 'ALLOW', decisionId, ...base }

  switch (mode) {
    case 'EM-OBSERVE':
    case 'EM-GUARD':
      return { ...allow, logOnly: types(['unknown', 'unmet', 'over_limit']) }
    case 'EM-DELEGATE': {
      const overLimit = types(['over_limit'])
      const logOnly = types(['unknown', 'unmet'])
      if (overLimit.length > 0) {
        return refuse(ENFORCEMENT_RESPONSES.RATE_LIMIT_EXCEEDED, { ...base, decisionId, obligationFailures: overLimit, logOnly })
      }
      return { ...allow, logOnly }
    }
    case 'EM-STRICT': {
      if (failed.length === 0) return allow
      const obligationFailures = failed.map((o) => o.type)
      const response = failed.every((o) => o.kind === 'over_limit')
        ? ENFORCEMENT_RESPONSES.RATE_LIMIT_EXCEEDED
        : ENFORCEMENT_RESPONSES.OBLIGATION_FAILED
      return refuse(response, { ...base, decisionId, obligationFailures })
    }
  }
}
