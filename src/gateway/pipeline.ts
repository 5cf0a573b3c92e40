/**
 * The order of the stages every request goes through, the gateway's own and a proxy's check alike
 * (docs/architecture.md, "The path of a proxied request"):
 *
 *   admit → badge → chain → break-glass → protocol → decide → enforce → last
 *
 * and the last stage forwards to the upstream, or, for a check a proxy asked (src/gateway/check/), answers
 * that proxy with the decision. A stage returns GO_ON, ANSWERED (through stages/refuse, or an answer of its
 * own), or RESUMES: it waits for a body or a promise and then carries on itself through {@link resume}.
 * The loop below is the only caller of a stage, so a stage costs a call and no allocation; only the chain
 * stage, a remote PDP and a rate limit counted in Redis wait (docs/performance.md, "Hot-path choices").
 */
import { answerCheck } from './check/check.js'
import type { GatewayContext } from './context.js'
import type { RequestScope } from './request-scope.js'
import { admit } from './stages/admit.js'
import { checkBadge } from './stages/badge.js'
import { checkBreakglass } from './stages/breakglass.js'
import { checkChain } from './stages/chain.js'
import { decide } from './stages/decide.js'
import { enforceDecision } from './stages/enforce.js'
import { forward } from './stages/forward.js'
import { enterProtocol } from './stages/protocol.js'

export const GO_ON = 0
export const ANSWERED = 1
export const RESUMES = 2
export type Step = typeof GO_ON | typeof ANSWERED | typeof RESUMES

export type Stage = (ctx: GatewayContext, scope: RequestScope) => Step

const STAGES: readonly Stage[] = [admit, checkBadge, checkChain, checkBreakglass, enterProtocol, decide, enforceDecision]

/** Where {@link resume} starts: a stage that waited names the one after it. */
export const AT = { admit: 0, badge: 1, chain: 2, breakglass: 3, protocol: 4, decide: 5, enforce: 6, last: 7 } as const

/** Runs the stages from `from` until one answers or waits; after the last of them, the request is allowed. */
export function resume(ctx: GatewayContext, scope: RequestScope, from: number): void {
  for (let i = from; i < STAGES.length; i++) if (STAGES[i]!(ctx, scope) !== GO_ON) return
  last(ctx, scope)
}

/** The allowed request: forwarded by the gateway, or the allow answered to the proxy that asked. */
function last(ctx: GatewayContext, scope: RequestScope): void {
  if (scope.check === null) forward(ctx, scope)
  else answerCheck(ctx, scope)
}
