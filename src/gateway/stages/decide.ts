// The PDP request is built only on a decision-cache miss; only a remote PDP and a rate limit counted in Redis answer through a promise.
import type { VerifiedChain } from '../../core/envelope.js'
import type { PdpRequest } from '../../core/policy/types.js'
import { isoTimeAt } from '../../telemetry/request-log.js'
import type { GatewayContext } from '../context.js'
import type { DecisionQuestion } from '../decision-question.js'
import { DecisionCache } from '../decision-cache.js'
import { messagePdpAction } from '../../core/policy/pdp-action.js'
import type { PdpAnswer, PolicyDecisionPoint } from '../pdp/pdp.js'
import type { RequestScope } from '../request-scope.js'
import type { GatewayBundleData, GatewaySnapshot } from '../snapshot/snapshot.js'
import { lowerCasePath } from '../ingress/canonical-target.js'
import type { VerifiedBadge } from '../identity/badge.js'
import type { EnforcementResult } from '../../core/enforcement.js'
import { AT, GO_ON, RESUMES, resume, type Step } from '../pipeline.js'
import { applyAnswer } from './enforce.js'
import { fail } from './refuse.js'

/** The answer when the bundle is stale in EM-STRICT: the PDP is not asked (docs/api.md §8). */
const STALE_IN_STRICT: PdpAnswer = Object.freeze({ outcome: 'UNAVAILABLE', reason: 'bundle_stale' })
/** A list item the embedded PDP already denied under this bundle revision. */
const LISTING_DENIED: PdpAnswer = Object.freeze({ outcome: 'DENY', decisionId: '', obligations: [], ttl: 0 })

/** The request (or the MCP stream or session end it opens) decided; an override was decided by its token. */
export function decide(ctx: GatewayContext, scope: RequestScope): Step {
  if (scope.override) return GO_ON
  // Badge-only mode: the verified badge is the whole decision.
  if (ctx.pdp === null) {
    scope.decision = 'ALLOW'
    return GO_ON
  }
  const outcome = decideQuestion(ctx, scope, scope.question)
  if (outcome instanceof Promise) {
    outcome.then((settled) => {
      scope.outcome = settled
      resume(ctx, scope, AT.enforce)
    }).catch((error: unknown) => fail(ctx, scope, error))
    return RESUMES
  }
  scope.outcome = outcome
  return GO_ON
}

/**
 * How every stage decides: `question` (null: the HTTP request itself) asked through the decision cache, and
 * the answer applied (obligations, the mode table) and recorded on the scope. The MCP and A2A stages call it
 * per message or call, so a fix to how one protocol is decided is a fix to both; a promise only from a remote
 * PDP on a cache miss or a rate limit counted in Redis.
 */
export function decideQuestion(ctx: GatewayContext, scope: RequestScope, question: DecisionQuestion | null): EnforcementResult | Promise<EnforcementResult> {
  const answer = question === null && foldsCase(ctx, scope) ? askBothCases(ctx, scope) : askPdp(ctx, scope, question)
  return answer instanceof Promise ? answer.then((settled) => applyAnswer(ctx, scope, settled)) : applyAnswer(ctx, scope, answer)
}

/**
 * Whether a plain HTTP request on a route of undeclared case must also be decided case-folded: the upstream
 * may ignore case (Express's and the A2A SDK's default), so `/Admin/x` may reach the handler of `/admin/x`
 * (docs/gateway-request-handling.md, "Path case"). Folding changes nothing when neither the path nor, for the
 * embedded PDP, any operation pattern has an upper-case letter.
 */
function foldsCase(ctx: GatewayContext, scope: RequestScope): boolean {
  const route = scope.route
  if (route === null || route.caseInsensitive === true || route.caseSensitive === true) return false
  if (lowerCasePath(scope.path) !== scope.path) return true
  const bundle = (scope.snapshot as GatewaySnapshot).bundle
  return (ctx.pdp as PolicyDecisionPoint).kind === 'embedded' && bundle !== null && hasUpperCasePathPattern(bundle.data)
}

/** The request decided as sent, then (when that allows) case-folded; the stricter answer applies. */
function askBothCases(ctx: GatewayContext, scope: RequestScope): PdpAnswer | Promise<PdpAnswer> {
  const exact = askPdp(ctx, scope, null)
  if (exact instanceof Promise) return exact.then((settled) => foldedAfter(ctx, scope, settled))
  return foldedAfter(ctx, scope, exact)
}

function foldedAfter(ctx: GatewayContext, scope: RequestScope, exact: PdpAnswer): PdpAnswer | Promise<PdpAnswer> {
  if (exact.outcome !== 'ALLOW') return exact
  const folded = askPdp(ctx, scope, null, false, true)
  return folded instanceof Promise ? folded.then((settled) => stricterAnswer(exact, settled)) : stricterAnswer(exact, folded)
}

/** `exact` allowed: the folded answer when it does not, else the exact one bound by both answers' obligations. */
function stricterAnswer(exact: Extract<PdpAnswer, { decisionId: string }>, folded: PdpAnswer): PdpAnswer {
  if (folded.outcome !== 'ALLOW' || folded.obligations.length === 0) return folded.outcome === 'ALLOW' ? exact : folded
  const seen = new Set(exact.obligations.map((obligation) => JSON.stringify(obligation)))
  const extra = folded.obligations.filter((obligation) => !seen.has(JSON.stringify(obligation)))
  return extra.length === 0 ? exact : { ...exact, obligations: [...exact.obligations, ...extra], ttl: Math.min(exact.ttl, folded.ttl) }
}

const upperCasePatterns = new WeakMap<object, boolean>()

/** Whether any operation pattern of the bundle has an upper-case letter in its path; computed once per bundle. */
function hasUpperCasePathPattern(data: GatewayBundleData): boolean {
  let known = upperCasePatterns.get(data)
  if (known === undefined) {
    const policies = [data.config, ...Object.values(data.resolved_policies?.by_agent_did ?? {})]
    known = policies.some((policy) => {
      const operations = (policy as { operations?: unknown } | undefined)?.operations
      return Array.isArray(operations) && operations.some((rule: unknown) => {
        const pattern = (rule as { pattern?: unknown } | null)?.pattern
        if (typeof pattern !== 'string') return false
        const path = pattern.slice(pattern.indexOf(' ') + 1)
        return lowerCasePath(path) !== path
      })
    })
    upperCasePatterns.set(data, known)
  }
  return known
}

/**
 * The answer about the request, or on an MCP route about `question`, through the decision cache; a promise
 * only from a remote PDP on a miss. Only called with a PDP.
 */
export function askPdp(
  ctx: GatewayContext, scope: RequestScope, question: DecisionQuestion | null, forListing = false, folded = false,
): PdpAnswer | Promise<PdpAnswer> {
  const pdp = ctx.pdp as PolicyDecisionPoint
  const snapshot = scope.snapshot as GatewaySnapshot
  const badge = scope.badge as VerifiedBadge
  const chain = scope.chain
  let stale = false
  if (pdp.kind === 'embedded' && snapshot.bundle !== null) {
    const age = scope.nowMs - snapshot.bundle.confirmedAt
    stale = age > ctx.staleAfterMs
    if (stale) {
      scope.bundleStale = true
      scope.bundleAgeMs = age
    }
  }
  // Nothing a stale bundle decides can be trusted in EM-STRICT; the mode table refuses first.
  if (stale && scope.mode === 'EM-STRICT') return STALE_IN_STRICT

  const leafId = chain === null ? '' : chain.leaf.envelope_id
  const key = question === null
    ? DecisionCache.key(badge.decisionSubject, folded ? scope.operationMethod + ' folded' : scope.operationMethod, folded ? foldedTarget(scope) : scope.target, scope.mode, leafId)
    : DecisionCache.key(badge.decisionSubject, question.operation + ' ' + scope.operationMethod, questionResource(scope.target, question), scope.mode, leafId)
  const cached = ctx.decisions.get(key, scope.nowMs)
  if (cached !== undefined) {
    ctx.telemetry.decisionHits++
    return cached
  }
  const remembersDenials = forListing && pdp.kind === 'embedded'
  if (remembersDenials && ctx.listingDenials.has(key)) return LISTING_DENIED
  ctx.telemetry.decisionMisses++
  // A cached decision must not outlive the badge or the leaf envelope it was made for.
  const notAfterMs = chain === null ? badge.expiresAt * 1000 : Math.min(badge.expiresAt, chain.leaf.expires_at) * 1000
  const asked = performance.now()
  const request = pdpRequest(ctx, scope, question, badge, chain, folded)
  // Kept by reference for the decision feed (docs/console.md): a denial can be opened with what was asked.
  if (!forListing) scope.pdpRequest = request
  const answer = pdp.decide(request, snapshot)
  if (answer instanceof Promise) {
    return answer.then((settled) => {
      pdpAnswered(ctx, scope, settled, key, notAfterMs, asked)
      return settled
    })
  }
  pdpAnswered(ctx, scope, answer, key, notAfterMs, asked)
  if (remembersDenials && answer.outcome === 'DENY') ctx.listingDenials.set(key, true)
  return answer
}

/**
 * The resource part of a question's cache key: the target holds no space and each JSON string form no raw
 * quote, so the parts read one way only.
 */
function questionResource(target: string, question: DecisionQuestion): string {
  let resource = question.addressed === undefined ? target : target + ' ' + JSON.stringify(question.addressed)
  if (question.skill !== undefined) resource += ' skill ' + JSON.stringify(question.skill)
  return resource
}

function pdpAnswered(ctx: GatewayContext, scope: RequestScope, answer: PdpAnswer, key: string, notAfterMs: number, asked: number): void {
  ctx.telemetry.pdpDuration.observe((performance.now() - asked) / 1000)
  if (answer.outcome === 'UNAVAILABLE') ctx.metrics.pdpUnavailable.labels(ctx.pdpKind, answer.reason).inc()
  else ctx.decisions.set(key, answer, scope.nowMs, notAfterMs)
}

/** The target with its path lower-cased (the query keeps its case, as on a case-insensitive route). */
function foldedTarget(scope: RequestScope): string {
  const path = lowerCasePath(scope.path)
  return scope.query === '' ? path : path + scope.query
}

/** The PDP request of docs/api.md §2.12 (built only on a decision-cache miss). */
function pdpRequest(
  ctx: GatewayContext, scope: RequestScope, question: DecisionQuestion | null, badge: VerifiedBadge, chain: VerifiedChain | null, folded: boolean,
): PdpRequest {
  const time = isoTimeAt(scope.nowMs)
  const workspace = ctx.config.workspace
  const httpOperation = scope.operationMethod + ' ' + (folded ? lowerCasePath(scope.path) : scope.path)
  const identifier = question?.addressed ?? (folded ? foldedTarget(scope) : scope.target)
  const action = question === null ? { operation: httpOperation, capability_class: null } : messagePdpAction(question.operation, httpOperation, question)
  return {
    pip_version: 'service.pip.v1',
    subject: { did: badge.claims.sub, badge_jti: badge.claims.jti, ial: badge.claims.ial, trust_level: badge.trustCode },
    action,
    resource: folded || scope.route?.caseInsensitive === true ? { identifier, case_insensitive: true } : { identifier },
    context: chain === null
      ? { txn_id: scope.txnId as string, enforcement_mode: scope.mode }
      : {
        txn_id: scope.txnId as string,
        enforcement_mode: scope.mode,
        leaf_capability: chain.leaf.capability_class,
        delegation_depth: chain.depth,
        leaf_constraints: chain.leaf.constraints,
        parent_constraints: chain.depth > 1 ? (chain.envelopes[chain.depth - 2]?.constraints ?? null) : null,
      },
    environment: workspace === null
      ? { pep_id: ctx.pepId, time }
      : { workspace, pep_id: ctx.pepId, time },
  }
}
