// The PDP request is built only on a decision-cache miss; only a remote PDP answers through a promise.
import type { VerifiedChain } from '../../core/envelope.js'
import type { PdpRequest } from '../../core/policy/types.js'
import { isoTimeAt } from '../../telemetry/request-log.js'
import type { GatewayContext } from '../context.js'
import { DecisionCache } from '../decision-cache.js'
import { messagePdpAction } from '../../core/policy/pdp-action.js'
import type { PdpAnswer, PolicyDecisionPoint } from '../pdp/pdp.js'
import type { RequestScope } from '../request-scope.js'
import type { GatewaySnapshot } from '../snapshot/snapshot.js'
import type { VerifiedBadge } from './badge.js'
import { enforceDecision } from './enforce.js'
import { forward } from './forward.js'
import { fail } from './refuse.js'

/** The answer when the bundle is stale in EM-STRICT: the PDP is not asked (docs/api.md §8). */
const STALE_IN_STRICT: PdpAnswer = Object.freeze({ outcome: 'UNAVAILABLE', reason: 'bundle_stale' })
/** A list item the embedded PDP already denied under this bundle revision. */
const LISTING_DENIED: PdpAnswer = Object.freeze({ outcome: 'DENY', decisionId: '', obligations: [], ttl: 0 })

/** What a message (MCP) or call (A2A) is decided as; null: the HTTP request itself. */
export interface DecisionQuestion {
  readonly operation: string
  /** The name, URI or id the question is about: `resource.identifier` (else the request target). */
  readonly addressed: string | undefined
  readonly tool: string | undefined
  /** An A2A message's skill (docs/a2a.md, "Skills"). */
  readonly skill?: string | undefined
}

export function decide(ctx: GatewayContext, scope: RequestScope): void {
  // Badge-only mode: the verified badge is the whole decision.
  if (ctx.pdp === null) {
    scope.decision = 'ALLOW'
    return forward(ctx, scope)
  }
  const answer = askPdp(ctx, scope, scope.question)
  if (answer instanceof Promise) {
    answer.then((settled) => enforceDecision(ctx, scope, settled)).catch((error: unknown) => fail(ctx, scope, error))
    return
  }
  enforceDecision(ctx, scope, answer)
}

/**
 * The answer about the request, or on an MCP route about `question`, through the decision cache; a promise
 * only from a remote PDP on a miss. Only called with a PDP.
 */
export function askPdp(
  ctx: GatewayContext, scope: RequestScope, question: DecisionQuestion | null, forListing = false,
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
    ? DecisionCache.key(badge.decisionSubject, scope.operationMethod, scope.target, scope.mode, leafId)
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
  const request = pdpRequest(ctx, scope, question, badge, chain)
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

/** The PDP request of docs/api.md §2.12 (built only on a decision-cache miss). */
function pdpRequest(ctx: GatewayContext, scope: RequestScope, question: DecisionQuestion | null, badge: VerifiedBadge, chain: VerifiedChain | null): PdpRequest {
  const time = isoTimeAt(scope.nowMs)
  const workspace = ctx.config.workspace
  const httpOperation = scope.operationMethod + ' ' + scope.path
  const identifier = question?.addressed ?? scope.target
  const action = question === null ? { operation: httpOperation, capability_class: null } : messagePdpAction(question.operation, httpOperation, question)
  return {
    pip_version: 'service.pip.v1',
    subject: { did: badge.claims.sub, badge_jti: badge.claims.jti, ial: badge.claims.ial, trust_level: badge.trustCode },
    action,
    resource: scope.route?.caseInsensitive === true ? { identifier, case_insensitive: true } : { identifier },
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
