// Every mode and outcome meets here, so the mode table (core/enforcement.ts) is applied in one place.
import { enforce, type EnforcementResult } from '../../core/enforcement.js'
import type { GatewayContext } from '../context.js'
import { argumentsBytes } from '../mcp/methods.js'
import type { AppliedRateLimit, EnhancedLogContext, ObligationRun } from '../obligations.js'
import type { PdpAnswer } from '../pdp/pdp.js'
import { NO_HEADERS, type RequestScope } from '../request-scope.js'
import type { VerifiedBadge } from '../identity/badge.js'
import { AT, GO_ON, resume, type Step } from '../pipeline.js'
import { refuse } from './refuse.js'

function rateLimitHeaderList(limit: AppliedRateLimit): string[] {
  return [
    'x-ratelimit-limit', String(limit.limit),
    'x-ratelimit-remaining', String(limit.remaining),
    'x-ratelimit-reset', String(limit.reset),
  ]
}

/** Enforce stage: the decide stage's outcome goes on when it forwards, else its refusal is answered. */
export function enforceDecision(ctx: GatewayContext, scope: RequestScope): Step {
  const outcome = scope.outcome
  if (outcome === null || outcome.forward) return GO_ON
  return refuseOutcome(ctx, scope, outcome)
}

/** The pipeline from the enforce stage with `outcome` decided. */
export function enforceOutcome(ctx: GatewayContext, scope: RequestScope, outcome: EnforcementResult): void {
  scope.outcome = outcome
  resume(ctx, scope, AT.enforce)
}

/**
 * Runs the answer's obligations and the mode table, and records the outcome on the scope. A promise only
 * when a rate limit is counted in Redis (rate-limits.ts); an answer without obligations never waits.
 */
export function applyAnswer(ctx: GatewayContext, scope: RequestScope, answer: PdpAnswer): EnforcementResult | Promise<EnforcementResult> {
  if (answer.outcome === 'ALLOW' && answer.obligations.length > 0) {
    // Only a verified badge reaches a decision.
    const did = (scope.badge as VerifiedBadge).claims.sub
    const run = ctx.obligations.run(answer.obligations, did, scope.nowMs, () => enhancedLogContext(scope, answer.decisionId))
    return run instanceof Promise ? run.then((settled) => recordOutcome(scope, answer, settled)) : recordOutcome(scope, answer, run)
  }
  return recordOutcome(scope, answer, null)
}

function recordOutcome(scope: RequestScope, answer: PdpAnswer, run: ObligationRun | null): EnforcementResult {
  if (run !== null) scope.retryAfterSeconds = run.retryAfterSeconds
  const outcome = enforce({ mode: scope.mode, pdp: answer, bundleStale: scope.bundleStale, obligationResults: run?.results })
  scope.decision = outcome.decision
  scope.decisionId = outcome.decisionId
  scope.policyErrorCode = outcome.errorCode
  if (answer.outcome === 'DENY') {
    scope.policyReason = answer.reason
    scope.requiredTrustLevel = answer.requiredTrustLevel
  }
  if (outcome.logOnly.length > 0) scope.obligationsLogged = outcome.logOnly
  if (answer.outcome !== 'UNAVAILABLE' && answer.obligations.length > 0) scope.obligations = answer.obligations
  const rateLimit = run?.rateLimit ?? null
  if (rateLimit !== null) scope.responseHeaders = rateLimitHeaderList(rateLimit)
  return outcome
}

/**
 * The `log.enhanced` line: what was asked and by whom; of an MCP call the tool and its arguments' size, of an
 * A2A call its method, version, ids and skill; never a message's content.
 */
function enhancedLogContext(scope: RequestScope, decisionId: string): EnhancedLogContext {
  const { sub: did, jti } = (scope.badge as VerifiedBadge).claims
  const question = scope.question
  const a2a = scope.a2a?.call
  return {
    request_id: scope.requestId, txn_id: scope.txnId, agent_did: did, badge_jti: jti,
    method: scope.method, path: scope.path, mode: scope.mode, 'service.policy.decision_id': decisionId,
    headers: Object.keys(scope.req.headers),
    ...(question === null ? {} : {
      'mcp.method.name': question.method,
      'gen_ai.tool.name': question.tool,
      'mcp.tool.arguments_bytes': argumentsBytes(question),
    }),
    ...(a2a == null ? {} : {
      'a2a.method.name': a2a.method,
      'a2a.protocol.version': a2a.version,
      'a2a.operation': a2a.operation,
      'a2a.task.id': a2a.taskId,
      'a2a.context.id': a2a.contextId,
      'a2a.skill': a2a.skill,
    }),
  }
}

/** Answers a refused outcome: its code, the rate-limit headers, and for a denial the decision id and reason. */
export function refuseOutcome(ctx: GatewayContext, scope: RequestScope, outcome: EnforcementResult): Step {
  const code = outcome.code ?? 'GATEWAY_ERROR'
  const extra: Record<string, string> = {}
  const limits = scope.responseHeaders ?? NO_HEADERS
  for (let i = 0; i < limits.length; i += 2) extra[limits[i] as string] = limits[i + 1] as string
  if (code === 'rate_limit_exceeded') extra['retry-after'] = String(Math.max(1, scope.retryAfterSeconds))
  // A denial tells the caller which decision to ask about and, unless the route hides it, why.
  const details = code === 'POLICY_DENIED'
    ? { decision_id: scope.decisionId, reason: scope.route?.hideDenyReason === true ? undefined : scope.policyReason }
    : undefined
  return refuse(ctx, scope, code, extra, details)
}
