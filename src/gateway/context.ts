// What the stages share across requests, built once per gateway; a stage is a function of this and a scope.
import type { KeyObject } from 'node:crypto'
import type { Tracer } from '@opentelemetry/api'
import type { Config } from '../config/index.js'
import type { EnforcementMode } from '../core/enforcement-mode.js'
import type { DecisionFeed, OverrideLog } from '../telemetry/decision-feed.js'
import type { Logger } from '../telemetry/logger.js'
import { PublicCardCache } from './a2a/card-cache.js'
import type { GatewayMetrics } from '../telemetry/metrics.js'
import { LRUCache } from 'lru-cache'
import { DecisionCache } from './decision-cache.js'
import { ResourceMetadataTable, type ResourceServer } from './ingress/resource-metadata.js'
import type { RouteTable, UnderscoreHeaders, UpstreamProtocol } from './ingress/routes.js'
import { trustedPeerCheck } from './ingress/trusted-peers.js'
import { McpHostCheck } from './mcp/host-check.js'
import { ListAnswerCache } from './mcp/list-cache.js'
import { McpSessions } from './mcp/sessions.js'
import { ObligationHandlers } from './obligations.js'
import { LocalRateLimits, type RateLimits } from './rate-limits.js'
import type { PolicyDecisionPoint } from './pdp/pdp.js'
import type { RequestScope } from './request-scope.js'
import { RequestTelemetry } from './request-telemetry.js'
import type { SnapshotHolder } from './snapshot/snapshot.js'
import { BadgeVerifier } from './identity/badge.js'
import { ChainVerifier, type DidKeySource } from './identity/chain.js'
import { forwarded } from './stages/forward.js'
import type { ForwardDone, Upstream } from './upstream/upstream.js'

export interface RouteTarget {
  readonly upstream: Upstream
  readonly mode: EnforcementMode | null
  /** The upstream ignores the case of paths: the canonical path is lower-cased on this route. */
  readonly caseInsensitive?: boolean
  /**
   * The upstream is declared case-sensitive: paths are decided as sent. With neither flag the gateway cannot
   * know, so a plain HTTP request is decided as sent and case-folded, and the stricter answer applies.
   */
  readonly caseSensitive?: boolean
  readonly headersWithUnderscores?: UnderscoreHeaders
  /** 403 `POLICY_DENIED` bodies leave out the PDP's reason (the log line keeps it). */
  readonly hideDenyReason?: boolean
  /** `mcp`: POST bodies are read as MCP JSON-RPC and decided per message (stages/mcp.ts). */
  readonly protocol?: UpstreamProtocol
  /** An OAuth protected resource: metadata, challenges and the badge audience check (docs/mcp.md, "Authorization"). */
  readonly resourceServer?: ResourceServer
  /** `a2a`: in EM-GUARD and stricter the upstream's public card must carry a trusted signature (stages/a2a-card.ts). */
  readonly requireCardSignature?: boolean
  /** With requireCardSignature: only a signature by this DID's key (or the authority's) counts. */
  readonly cardSigner?: string
}

export interface GatewayDeps {
  readonly config: Config['gateway']
  readonly holder: SnapshotHolder
  /** Null: badge-only mode (no embedded PDP and no endpoint configured). */
  readonly pdp: PolicyDecisionPoint | null
  readonly routes: RouteTable<RouteTarget>
  readonly breakglassKey: KeyObject | null
  readonly logger: Logger
  readonly metrics: GatewayMetrics
  readonly tracer?: Tracer | null
  /** did:web key resolution for delegation envelopes; null: only did:key issuers can be verified. */
  readonly didWeb?: DidKeySource | null
  /** The authority's card signing key, inside the appliance; null: public cards are served unsigned (docs/a2a.md). */
  readonly cardAuthority?: CardAuthority | null
  readonly now?: () => number
  /** The console's decision feed and break-glass log (docs/console.md); null: nothing is kept. */
  readonly feed?: { readonly decisions: DecisionFeed; readonly overrides: OverrideLog } | null
  /** Where `rate_limit.apply` is counted; by default in this process. */
  readonly rateLimits?: RateLimits | null
}

/** The authority's current signing key (the key ring rotates it), for countersigning the public agent cards. */
export interface CardAuthority {
  signingKey(): { readonly privateKey: KeyObject; readonly kid: string }
}

export class GatewayContext {
  readonly config: Config['gateway']
  readonly holder: SnapshotHolder
  readonly pdp: PolicyDecisionPoint | null
  /** The PDP's kind as the metrics label it: `none` in badge-only mode. */
  readonly pdpKind: string
  readonly routes: RouteTable<RouteTarget>
  /** Null when no route is a resource server: then no request looks for metadata. */
  readonly resourceMetadata: ResourceMetadataTable | null
  readonly breakglassKey: KeyObject | null
  readonly cardAuthority: CardAuthority | null
  readonly logger: Logger
  readonly metrics: GatewayMetrics
  readonly tracer: Tracer | null
  /** Epoch ms; the one clock of the gateway (tests set it). */
  readonly now: () => number
  readonly telemetry: RequestTelemetry
  /** Accepted break-glass overrides, for `GET /v1/breakglass/uses`; null: not kept. */
  readonly overrides: OverrideLog | null
  readonly badges: BadgeVerifier
  readonly decisions: DecisionCache
  /**
   * Keys the embedded PDP denied while a list answer was filtered: its answer is a function of the bundle,
   * so it holds until the revision changes, and a list need not evaluate its hidden items every time.
   * Never consulted for a call, which is decided afresh as every DENY is (docs/mcp.md, "Lists").
   */
  readonly listingDenials = new LRUCache<string, true>({ max: 50_000 })
  /** Filtered list answers of the embedded PDP (mcp/list-cache.ts), emptied with the decisions. */
  readonly listAnswers = new ListAnswerCache()
  /** The public agent cards served on A2A routes (docs/a2a.md, "The public card"). */
  readonly publicCards = new PublicCardCache()
  readonly chains: ChainVerifier
  readonly obligations: ObligationHandlers
  /** SERVICE_TRUSTED_PROXIES. */
  readonly isTrustedPeer: (address: string | undefined) => boolean
  /** The Host and Origin an MCP route accepts (SERVICE_MCP_ALLOWED_HOSTS, SERVICE_MCP_ALLOWED_ORIGINS). */
  readonly mcpHostCheck: McpHostCheck
  /** The subject each MCP session belongs to (docs/mcp.md, "Sessions"). */
  readonly mcpSessions = new McpSessions()
  /** `environment.pep_id` of PDP requests: `''` when SERVICE_PEP_ID is unset. */
  readonly pepId: string
  readonly staleAfterMs: number
  /** The upstream's completion callback: one function per gateway, so a forward makes no closure. */
  readonly forwarded: ForwardDone<RequestScope>

  constructor(deps: GatewayDeps) {
    const { config, logger } = deps
    this.config = config
    this.holder = deps.holder
    this.pdp = deps.pdp
    this.pdpKind = deps.pdp?.kind ?? 'none'
    this.routes = deps.routes
    const servers = deps.routes.entries.flatMap((route) => (route.value.resourceServer === undefined ? [] : [route.value.resourceServer]))
    this.resourceMetadata = servers.length === 0 ? null : new ResourceMetadataTable(servers)
    this.breakglassKey = deps.breakglassKey
    this.cardAuthority = deps.cardAuthority ?? null
    this.logger = logger
    this.metrics = deps.metrics
    this.tracer = deps.tracer ?? null
    this.now = deps.now ?? Date.now
    const telemetry = new RequestTelemetry(logger, deps.metrics, this.pdpKind, config.mcpMetricTools, deps.feed?.decisions ?? null)
    this.overrides = deps.feed?.overrides ?? null
    this.telemetry = telemetry
    this.badges = new BadgeVerifier({
      acceptSelfSigned: config.acceptSelfSigned,
      onLookup: (hit) => {
        if (hit) telemetry.badgeHits++
        else telemetry.badgeMisses++
      },
    })
    this.decisions = new DecisionCache()
    this.chains = new ChainVerifier({
      maxDepth: config.maxChainDepth,
      orgTrustBoundary: config.orgTrustBoundary,
      didWeb: deps.didWeb ?? null,
      badges: this.badges,
    })
    this.obligations = new ObligationHandlers(deps.rateLimits ?? new LocalRateLimits(), (level, context) => {
      ;(logger as unknown as Record<string, (obj: unknown, msg: string) => void>)[level]?.(context, 'gateway enhanced request log')
    })
    this.isTrustedPeer = trustedPeerCheck(config.trustedProxies)
    this.mcpHostCheck = new McpHostCheck(config.mcpAllowedHosts ?? null, config.mcpAllowedOrigins ?? null, config.publicUrl)
    this.pepId = config.pepId ?? ''
    this.staleAfterMs = config.bundleStalenessThresholdMs
    this.forwarded = (scope, result) => forwarded(this, scope, result)
  }
}

/**
 * Drops caches derived from an older snapshot when a new one is swapped in: verified badges depend on
 * the key set, embedded decisions on the bundle revision.
 */
export function clearCachesOnSwap(ctx: GatewayContext): void {
  let keysVersion: string | null = null
  let bundleRevision: string | null = null
  ctx.holder.onSwap((snapshot) => {
    if (keysVersion !== null && snapshot.keysVersion !== keysVersion) ctx.badges.clear()
    keysVersion = snapshot.keysVersion
    const revision = snapshot.bundle?.revision ?? null
    if (revision !== bundleRevision) {
      ctx.decisions.clear()
      ctx.listingDenials.clear()
      ctx.listAnswers.clear()
    }
    bundleRevision = revision
  })
}
