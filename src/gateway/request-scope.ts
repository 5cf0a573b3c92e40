import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Span } from '@opentelemetry/api'
import type { EnforcementMode } from '../core/enforcement-mode.js'
import type { EnforcementResult, PdpObligation } from '../core/enforcement.js'
import type { PdpRequest } from '../core/policy/types.js'
import type { VerifiedChain } from '../core/envelope.js'
import type { GatewayErrorCode } from '../core/gateway-errors.js'
import type { TrustCode } from '../core/trust-level.js'
import type { CanonicalParts } from './ingress/canonical-target.js'
import type { GatewayHeaders } from './ingress/framing.js'
import type { RouteTarget } from './context.js'
import type { UnderscoreHeaders } from './ingress/routes.js'
import type { A2aExchange } from './a2a/exchange.js'
import type { CheckExchange } from './check/exchange.js'
import type { McpExchange } from './mcp/exchange.js'
import type { McpMessageInfo } from './mcp/methods.js'
import type { GatewaySnapshot } from './snapshot/snapshot.js'
import type { VerifiedBadge } from './identity/badge.js'
import type { ForwardOptions, ResponseFilter } from './upstream/upstream.js'

// A client copy of an identity header the gateway sets must never reach the upstream, nor the break-glass
// token (docs/wire-contract.md §9); badge and envelope headers go on so the upstream may verify them.
export const STRIP: ReadonlySet<string> = new Set([
  'x-service-subject',
  'x-service-issuer',
  'x-service-trust-level',
  'x-service-badge-jti',
  'x-service-txn',
  'x-service-breakglass',
])

export const NO_HEADERS: readonly string[] = Object.freeze([])

/** Pid and start time in base 36; an id is this prefix and a counter. */
export const REQUEST_ID_PREFIX = `gw-${process.pid.toString(36)}-${Date.now().toString(36)}-`
/** Shared by every gateway of the process, so request ids stay unique within it. */
let requestSequence = 0

export type RequestDecision = 'ALLOW' | 'DENY' | 'ALLOW_OBSERVE' | undefined

/**
 * Created with every field so V8 keeps one shape; also the forward options and the upstream's completion
 * context, so the stages allocate no closures, promises or option objects of their own.
 */
export class RequestScope implements GatewayHeaders, ForwardOptions, CanonicalParts {
  // --- inputs ---
  readonly req: IncomingMessage
  readonly res: ServerResponse
  /** performance.now() at arrival. */
  readonly started: number
  /** Epoch ms at arrival: the one clock reading every stage decides with. */
  readonly nowMs: number
  readonly span: Span | null
  /** The id itself is only formatted when a line needs it. */
  readonly sequence: number
  // --- the gateway's request headers (inspectRequestHead) ---
  authorization: string | undefined = undefined
  badgeHeader: string | undefined = undefined
  txnHeader: string | undefined = undefined
  authority: string | undefined = undefined
  authorityChain: string | undefined = undefined
  badgeMap: string | undefined = undefined
  breakglass: string | undefined = undefined
  // --- what the stages found ---
  snapshot: GatewaySnapshot | null = null
  route: RouteTarget | null = null
  /** The canonical path (canonical-target.ts): every stage reads it, the upstream receives it. */
  path = '/'
  query = ''
  method = 'GET'
  /** The method policy and break-glass see: HEAD is governed by the rules for GET (RFC 9110 §9.3.2). */
  operationMethod = 'GET'
  badge: VerifiedBadge | null = null
  chain: VerifiedChain | null = null
  /** A POST on an MCP route (stages/mcp.ts): its messages, and how a refusal is answered. */
  mcp: McpExchange | null = null
  /** On an MCP route, what is being decided: the current message, or the GET or DELETE. */
  question: McpMessageInfo | null = null
  /** A request on an A2A route (stages/a2a.ts): its call, and how a refusal is answered. */
  a2a: A2aExchange | null = null
  /** A check a proxy asked (check/): the request is the one it will forward, and the last stage answers it. */
  check: CheckExchange | null = null
  /** The length of the matched route's prefix: A2A paths are read relative to it. */
  routePrefixLength = 0
  // --- forward options (ForwardOptions) ---
  /** The canonical path and query: the resource the decision is about, and what is forwarded. */
  target = '/'
  headersWithUnderscores: UnderscoreHeaders = 'drop'
  add: readonly string[] = NO_HEADERS
  strip: ReadonlySet<string> = STRIP
  trustedPeer = false
  /** X-RateLimit-* of an applied rate_limit.apply obligation, on the answer either way (docs/wire-contract.md §3). */
  responseHeaders: readonly string[] | undefined = undefined
  txnId: string | undefined = undefined
  /** The body to send instead of the client's stream: an MCP body, read whole to be decided on. */
  body: Buffer | null = null
  /** An MCP route's list answers are filtered (stages/mcp.ts). */
  responseFilter: ResponseFilter | null = null
  // --- the record: log line, metrics, span ---
  mode: EnforcementMode
  decision: RequestDecision = undefined
  /** What the decide stage found, for the enforce stage; null: nothing to enforce (an override, badge-only mode). */
  outcome: EnforcementResult | null = null
  decisionId: string | undefined = undefined
  errorCode: GatewayErrorCode | undefined = undefined
  policyErrorCode: string | undefined = undefined
  /** The PDP's `reason` for a DENY (validated in pdp-answer.ts), logged in every mode. */
  policyReason: string | undefined = undefined
  /** The PDP's `required_trust_level` for a DENY: the level an insufficient_scope challenge asks for. */
  requiredTrustLevel: TrustCode | undefined = undefined
  override = false
  overrideJti: string | undefined = undefined
  bundleStale = false
  bundleAgeMs: number | undefined = undefined
  status = 0
  obligationsLogged: string[] | undefined = undefined
  /** The obligations the PDP attached (a reference to its answer's list), for the decision feed. */
  obligations: readonly PdpObligation[] | undefined = undefined
  /** The PDP request of the last decision asked for this request (not for a list filter): a denial can be opened in the console. */
  pdpRequest: PdpRequest | null = null
  /** Seconds a 429 asks the caller to wait (an exceeded rate_limit.apply). */
  retryAfterSeconds = 0
  /** A chain failure that EM-OBSERVE let through (logged, docs/wire-contract.md §10). */
  chainError: string | undefined = undefined
  delegationDepth: number | undefined = undefined
  /** Set once the log line and metrics are written: a second finish would be a bug. */
  finished = false

  constructor(req: IncomingMessage, res: ServerResponse, started: number, nowMs: number, span: Span | null, mode: EnforcementMode) {
    this.req = req
    this.res = res
    this.started = started
    this.nowMs = nowMs
    this.span = span
    this.sequence = ++requestSequence
    this.mode = mode
  }

  get requestId(): string {
    return REQUEST_ID_PREFIX + this.sequence
  }
}

/** The caller badge's jti when the authority signed it: what the admin plane attributes the event by. */
export function authorityBadgeJti(scope: RequestScope): string | undefined {
  const badge = scope.badge
  return badge === null || badge.selfSigned ? undefined : badge.claims.jti
}
