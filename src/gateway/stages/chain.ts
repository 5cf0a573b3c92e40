// Chain stage: the delegation envelopes, verified by identity/chain.ts; the mode they raise applies from here on.
import type { ChainFailure, VerifiedChain } from '../../core/envelope.js'
import { effectiveMode } from '../../core/enforcement.js'
import type { GatewayContext } from '../context.js'
import type { VerifiedBadge } from '../identity/badge.js'
import { AT, GO_ON, RESUMES, resume, type Step } from '../pipeline.js'
import type { RequestScope } from '../request-scope.js'
import type { GatewaySnapshot } from '../snapshot/snapshot.js'
import { fail, refuse } from './refuse.js'

/** With envelope headers the request continues once the chain is verified (did:web keys may need resolving). */
export function checkChain(ctx: GatewayContext, scope: RequestScope): Step {
  if (scope.authority === undefined && scope.authorityChain === undefined) return GO_ON
  const badge = scope.badge as VerifiedBadge
  ctx.chains.verify(
    { authority: scope.authority, chain: scope.authorityChain, badgeMap: scope.badgeMap },
    { did: badge.claims.sub, jti: badge.claims.jti },
    scope.snapshot as GatewaySnapshot,
    Math.floor(scope.nowMs / 1000),
  ).then((result) => chainVerified(ctx, scope, result)).catch((error: unknown) => fail(ctx, scope, error))
  return RESUMES
}

function chainVerified(ctx: GatewayContext, scope: RequestScope, result: VerifiedChain | ChainFailure | null): void {
  if (result !== null && !result.ok) {
    // The configured mode decides: an invalid chain cannot raise it. EM-OBSERVE logs and proceeds.
    if (scope.mode !== 'EM-OBSERVE') {
      refuse(ctx, scope, result.code)
      return
    }
    scope.chainError = result.code
    ctx.logger.warn({ request_id: scope.requestId, code: result.code, envelope: result.index, detail: result.detail }, 'delegation chain refused (EM-OBSERVE: request proceeds)')
  } else if (result !== null) {
    scope.chain = result
    scope.delegationDepth = result.depth
    scope.mode = effectiveMode(scope.mode, result.modeMinimums)
  }
  resume(ctx, scope, AT.breakglass)
}
