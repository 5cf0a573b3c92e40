// Protocol stage: an MCP or A2A route's body is read and decided per message or call (stages/mcp.ts, a2a.ts).
import type { GatewayContext } from '../context.js'
import { GO_ON, type Step } from '../pipeline.js'
import type { RequestScope } from '../request-scope.js'
import { checkBodyGate } from '../check/check.js'
import { enterA2a } from './a2a.js'
import { enterMcp } from './mcp.js'

export function enterProtocol(ctx: GatewayContext, scope: RequestScope): Step {
  // An MCP or A2A body is read and checked even under an override: its framing rules are not the policy's.
  const protocol = scope.route?.protocol
  if (protocol !== 'mcp' && protocol !== 'a2a') return GO_ON
  // A check decides on the body the proxy sent, when it sent it whole.
  if (scope.check !== null) {
    const step = checkBodyGate(ctx, scope, protocol)
    if (step !== GO_ON) return step
  }
  return protocol === 'mcp' ? enterMcp(ctx, scope) : enterA2a(ctx, scope)
}
