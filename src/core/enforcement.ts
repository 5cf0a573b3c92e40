// The enforcement mode table (docs/wire-contract.md §8) as one pure function, so the gateway never
// re-derives per mode what an answer, an obligation result or a stale bundle means.
import { isEnforcementMode, MODE_STRICTNESS, type EnforcementMode } from './enforcement-mode.js'
import { GATEWAY_ERRORS, type GatewayErrorCode } from './gateway-errors.js'

/** Ignoring a string that is not a mode can never lower the configured mode, only fail to raise it. */
export function effectiveMode(configured: EnforcementMode, minimums: readonly (string | null | undefined)[]): EnforcementMode {
  let mode = configured
  for (const minimum of minimums) {
    if (isEnforcementMode(minimum) && MODE_STRICTNESS[minimum] > MODE_STRICTNESS[mode]) mode = minimum
  }
  return mode
}

export const BUILTIN_OBLIGATION_TYPES = ['rate_limit.apply', 'log.enhanced'] as const
export type BuiltinObligationType = (typeof BUILTIN_OBLIGATION_TYPES)[number]

interface EnforcementResponse {
  readonly status: number
  readonly code: GatewayErrorCode
}

const responseOf = (code: GatewayErrorCode): EnforcementResponse => Object.freeze({ status: GATEWAY_ERRORS[code].status, code })

export const ENFORCEMENT_RESPONSES = Object.freeze({
  POLICY_DENIED: responseOf('POLICY_DENIED'),
  PDP_UNAVAILABLE: responseOf('PDP_UNAVAILABLE'),
  OBLIGATION_FAILED: responseOf('OBLIGATION_FAILED'),
  RATE_LIMIT_EXCEEDED: responseOf('rate_limit_exceeded'),
  BUNDLE_STALE: responseOf('BUNDLE_STALE'),
})

export interface PdpObligation {
  type: string
  params?: Record<string, unknown>
}

/** `overLimit` only for an exceeded `rate_limit.apply` (429); bad params are an ordinary failure. */
export type ObligationResult =
  | { status: 'unknown' }
  | { status: 'known'; met: true }
  | { status: 'known'; met: false; overLimit?: boolean }

/** The PDP answer as the gateway saw it; anything but a well-formed ALLOW or DENY is `UNAVAILABLE`. */
export type PdpOutcome =
  | { outcome: 'ALLOW' | 'DENY'; decisionId: string; obligations: PdpObligation[] }
  | { outcome: 'UNAVAILABLE' }

export interface EnforcementInput {
  mode: EnforcementMode
  pdp: PdpOutcome
  /** The embedded bundle is older than `SERVICE_BUNDLE_STALENESS_THRESHOLD`; false for an external PDP. */
  bundleStale: boolean
  /** Per `pdp.obligations` entry; a built-in type without a result counts as not met (fails closed). */
  obligationResults?: readonly (ObligationResult | undefined)[]
}

export interface EnforcementResult {
  forward: boolean
  status?: number
  code?: GatewayErrorCode
  /** `service.policy.decision`. Every refused request is `DENY`, so `ALLOW` always means forwarded. */
  decision: 'ALLOW' | 'DENY' | 'ALLOW_OBSERVE'
  decisionId?: string
  errorCode?: 'PDP_UNAVAILABLE'
  obligationFailures: string[]
  /** Failed or unknown obligation types that did not change the response: log them. */
  logOnly: string[]
  /** Annotated in every mode; EM-STRICT also refuses. */
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

/** The rows, first match wins, and why they stand in that order: docs/wire-contract.md §8. */
export function enforce(input: EnforcementInput): EnforcementResult {
  const { mode, pdp, bundleStale } = input
  // The common case without classification: an ALLOW without obligations, unless stale in EM-STRICT.
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
