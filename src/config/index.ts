/**
 * The only reader of process.env. Every variable of docs/api.md §8 and docs/wire-contract.md is declared once in
 * `VARIABLES`; the table generates the JSON Schema that ajv checks (all errors at once), the typed,
 * frozen `Config`, and the configuration table of docs/operations.md (`agent-trust check-config --table`).
 */
import { Ajv, type ErrorObject } from 'ajv'
import { isIP } from 'node:net'
import { availableParallelism } from 'node:os'
import path from 'node:path'
import { allowedHostsProblems, allowedOriginsProblems } from '../core/allowed-hosts.js'
import { registryDidHostOf } from '../core/did.js'
import { parseDuration } from '../core/duration.js'
import { editDistance } from '../core/edit-distance.js'
import { resourceIdentifierProblem } from '../core/protected-resource.js'
import { ENFORCEMENT_MODES, type EnforcementMode } from '../core/enforcement-mode.js'
import { addFormats } from '../core/json-schema.js'
import { isUuid } from '../core/uuid.js'

/** The proxies the HTTP check service can answer (SERVICE_CHECK_HTTP_PROXIES). */
export const CHECK_HTTP_PROXIES = ['envoy', 'nginx', 'traefik'] as const
export type CheckHttpProxy = (typeof CHECK_HTTP_PROXIES)[number]

/** What a gateway route does with request headers whose name contains `_` (nginx's `underscores_in_headers`). */
export const UNDERSCORE_HEADER_ACTIONS = ['drop', 'reject', 'allow'] as const
export type UnderscoreHeaders = (typeof UNDERSCORE_HEADER_ACTIONS)[number]
/** What an upstream speaks: plain HTTP, or MCP over Streamable HTTP (decided per JSON-RPC message). */
export const UPSTREAM_PROTOCOLS = ['http', 'mcp', 'a2a'] as const
export type UpstreamProtocol = (typeof UPSTREAM_PROTOCOLS)[number]
/** How the gateway counts rate limits while Redis cannot answer (gateway/rate-limits.ts). */
export const RATE_LIMIT_FALLBACKS = ['local', 'deny', 'allow'] as const
export type RateLimitFallback = (typeof RATE_LIMIT_FALLBACKS)[number]

type Kind = 'string' | 'int' | 'bool' | 'duration' | 'url' | 'enum' | 'list'

interface VariableSpec {
  readonly kind: Kind
  readonly default?: string
  readonly min?: number
  readonly max?: number
  readonly values?: readonly string[]
  /** URL schemes accepted by a `url` variable; http and https when not given. */
  readonly schemes?: readonly string[]
  readonly description: string
}

/** Every environment variable the service reads, with its default and meaning. */
export const VARIABLES = {
  // server (docs/api.md §8)
  DATABASE_URL: { kind: 'string', description: 'PostgreSQL URL; unset = embedded PGlite in SERVICE_DATA_DIR; `memory://` = throw-away embedded database' },
  ENVIRONMENT: { kind: 'enum', values: ['development', 'test', 'staging', 'production'], default: 'development', description: 'runtime environment; `production` tightens defaults' },
  PORT: { kind: 'int', min: 0, max: 65535, default: '8080', description: 'admin plane port' },
  SERVICE_HOST: { kind: 'string', default: '0.0.0.0', description: 'address the listeners bind to' },
  CA_KEY_PATH: { kind: 'string', description: 'authority JWK set file (generated on first start, mode 0600); default `<SERVICE_DATA_DIR>/ca-keys.json`' },
  CA_ISSUER_URL: { kind: 'url', description: 'issuer URL placed in badges; default `http://localhost:<PORT>`. In `agent-trust gateway`, optional: the issuer SERVICE_REGISTRY_URL must name (it refuses to start when the registry names another)' },
  CLERK_SECRET_KEY: { kind: 'string', description: 'identity provider API secret (dashboard sign-in)' },
  CLERK_JWT_KEY: { kind: 'string', description: 'identity provider PEM public key for session tokens' },
  CLERK_WEBHOOK_SECRET: { kind: 'string', description: 'Svix secret of the user-sync webhook' },
  // storage, processes, credentials (docs/wire-contract.md §1-§2)
  SERVICE_DATA_DIR: { kind: 'string', default: './data', description: 'embedded database, bootstrap key file and default key file directory' },
  SERVICE_ALLOW_EMBEDDED_DB: { kind: 'bool', default: 'false', description: 'allow the embedded database when ENVIRONMENT=production' },
  REDIS_URL: { kind: 'url', schemes: ['redis', 'rediss'], description: 'Redis shared by every instance: the admin plane\'s rate-limit counters, the decision store, and the gateways\' `rate_limit.apply` buckets (the appliance\'s gateway and `agent-trust gateway`; docs/operations.md, "Rate limits across the fleet")' },
  SERVICE_SHUTDOWN_GRACE_MS: { kind: 'int', min: 0, max: 600000, default: '20000', description: 'time in-flight requests get to finish on SIGTERM' },
  SERVICE_STOP_WITH_PARENT: { kind: 'bool', default: 'true', description: '`serve` and `gateway` shut down as on SIGTERM once the process that started them has exited (npx, a script, a supervisor; checked every second; docs/operations.md, "Stopping"); `false` for a process meant to outlive it (nohup)' },
  // slow clients (issue 7): every listener; see src/http/server-limits.ts
  SERVICE_HEADERS_TIMEOUT_MS: { kind: 'int', min: 100, max: 600000, default: '10000', description: 'time a client has to send a request head, on every listener; then 408 and the connection is closed' },
  SERVICE_REQUEST_TIMEOUT_MS: { kind: 'int', min: 100, max: 600000, default: '30000', description: 'time a client has to send a whole request (head and body) to the admin plane or the ops listener; then 408' },
  SERVICE_KEEP_ALIVE_TIMEOUT_MS: { kind: 'int', min: 100, max: 600000, default: '5000', description: 'idle keep-alive connections are closed after this; keep it above a load balancer\'s idle time-out' },
  SERVICE_MAX_HEADERS_COUNT: { kind: 'int', min: 16, max: 2000, default: '100', description: 'header lines read per request on the admin plane and the ops listener; more are ignored' },
  SERVICE_BOOTSTRAP_API_KEY: { kind: 'string', description: 'operator API key ensured at start-up (idempotent); `sk_` + at least 43 base64url characters' },
  SERVICE_RATE_LIMIT_PER_MINUTE: { kind: 'int', min: 1, max: 1000000, default: '1000', description: 'admin API requests per minute per API key (per address when unauthenticated)' },
  SERVICE_AUTH_JWKS_URL: { kind: 'url', description: 'JWKS of the identity provider that signs session tokens' },
  SERVICE_AUTH_ISSUER: { kind: 'string', description: 'expected `iss` of session tokens' },
  SERVICE_CONSOLE_SESSION_IDLE: { kind: 'duration', default: '30m', description: 'an operator console session ends after this long without a request (docs/console.md)' },
  SERVICE_CONSOLE_SESSION_MAX: { kind: 'duration', default: '8h', description: 'an operator console session ends this long after sign-in, whatever its use (at the latest at its identity-provider token\'s `exp`)' },
  SERVICE_LOG_LEVEL: { kind: 'enum', values: ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], default: 'info', description: 'pino log level' },
  SERVICE_DNS_SERVERS: { kind: 'list', description: 'comma list of `ip` or `ip:port` resolvers for domain validation' },
  SERVICE_DID_WEB_ALLOW_HOSTS: { kind: 'list', description: 'did:web / agent-card hosts exempt from the private-address guard (tests only; refused in production)' },
  // gateway (docs/api.md §8 PEP configuration, docs/wire-contract.md §1, §8-§13)
  SERVICE_GATEWAY_PORT: { kind: 'int', min: 0, max: 65535, default: '8000', description: 'gateway (PEP) port' },
  SERVICE_GATEWAY_PUBLIC_URL: { kind: 'url', description: 'URL clients reach the gateway at (trailing `/` removed): the default `resource` of resource-server routes (docs/mcp.md, "Authorization"); default `http://localhost:<SERVICE_GATEWAY_PORT>`. When ENVIRONMENT=production: https, and required with any resource-server route' },
  SERVICE_UPSTREAM_URL: { kind: 'url', description: 'upstream the gateway forwards to; setting it starts the gateway' },
  SERVICE_ROUTES_FILE: { kind: 'string', description: 'routes file (path prefix → upstream, optional mode); setting it starts the gateway' },
  SERVICE_UPSTREAM_CASE_INSENSITIVE: { kind: 'bool', default: 'false', description: 'the SERVICE_UPSTREAM_URL upstream matches paths case-insensitively: the gateway lower-cases paths before deciding and forwarding' },
  SERVICE_UPSTREAM_CASE_SENSITIVE: { kind: 'bool', default: 'false', description: 'the SERVICE_UPSTREAM_URL upstream matches paths case-sensitively: paths are decided as sent. With neither this nor SERVICE_UPSTREAM_CASE_INSENSITIVE, a path is decided both as sent and case-folded and the stricter decision applies (docs/gateway-request-handling.md, "Path case")' },
  SERVICE_HEADERS_WITH_UNDERSCORES: { kind: 'enum', values: UNDERSCORE_HEADER_ACTIONS, default: 'drop', description: 'request headers whose name contains `_` on the SERVICE_UPSTREAM_URL route: dropped, refused with 400, or forwarded (a spelling of a gateway header is always dropped)' },
  SERVICE_HIDE_DENY_REASON: { kind: 'bool', default: 'false', description: 'the SERVICE_UPSTREAM_URL route leaves the PDP\'s `reason` out of 403 `POLICY_DENIED` bodies (the request log keeps it)' },
  SERVICE_UPSTREAM_PROTOCOL: { kind: 'enum', values: UPSTREAM_PROTOCOLS, default: 'http', description: 'what the SERVICE_UPSTREAM_URL upstream speaks: `mcp` makes the gateway read each POST as MCP JSON-RPC and decide per message (docs/mcp.md); `a2a` reads each request as an A2A call (JSON-RPC or REST, 0.3 or 1.0) and decides it as one operation (docs/a2a.md)' },
  SERVICE_UPSTREAM_RESOURCE_SERVER: { kind: 'bool', description: 'the SERVICE_UPSTREAM_URL route is an OAuth protected resource (RFC 9728 metadata, `WWW-Authenticate` challenges, badge audience check); unset = true when SERVICE_UPSTREAM_PROTOCOL=mcp, else false' },
  SERVICE_UPSTREAM_RESOURCE: { kind: 'url', description: 'the resource identifier of the SERVICE_UPSTREAM_URL route when it is a resource server (no query or fragment); default SERVICE_GATEWAY_PUBLIC_URL' },
  SERVICE_UPSTREAM_REQUIRE_AUDIENCE: { kind: 'bool', description: 'the SERVICE_UPSTREAM_URL route, a resource server, refuses badges without an `aud` (default false: such badges are accepted)' },
  SERVICE_MCP_MAX_BODY_BYTES: { kind: 'int', min: 1024, max: 67108864, default: '1048576', description: 'largest request body an MCP or A2A route reads; a larger one is 413 MCP_BODY_TOO_LARGE or A2A_BODY_TOO_LARGE' },
  SERVICE_A2A_CARD_CACHE_SECONDS: { kind: 'int', min: 0, max: 3600, default: '60', description: 'longest time the gateway serves a public agent card it fetched, rewrote and signed before fetching it again (less when the agent\'s `Cache-Control` says so; 0: fetched for every request); docs/a2a.md, "The public card"' },
  SERVICE_MCP_ALLOWED_HOSTS: { kind: 'list', description: 'names MCP routes answer to in `Host` (and, from a SERVICE_TRUSTED_PROXIES peer, in `X-Forwarded-Host` and `Forwarded: host=`): `name` (any port) or `name:port`, `*` for any; else 403 MCP_HOST_NOT_ALLOWED. Replaces the default: the host of SERVICE_GATEWAY_PUBLIC_URL, and `localhost`, `127.0.0.1`, `[::1]` on any port (docs/mcp.md, "Host and Origin")' },
  SERVICE_MCP_ALLOWED_ORIGINS: { kind: 'list', description: 'origins (`scheme://host[:port]`) MCP routes accept in `Origin`, `*` for any; a request without `Origin` passes; else 403 MCP_ORIGIN_NOT_ALLOWED. Replaces the default: the origin of SERVICE_GATEWAY_PUBLIC_URL, and http and https origins of `localhost`, `127.0.0.1`, `[::1]` on any port' },
  SERVICE_MCP_METRIC_TOOLS: { kind: 'list', description: 'MCP tool names counted by name in service_gateway_mcp_messages_total (others count under their method only, so labels stay bounded)' },
  SERVICE_UPSTREAM_TIMEOUT_MS: { kind: 'int', min: 1, max: 600000, default: '30000', description: 'time an upstream has for its response head (then 504 UPSTREAM_TIMEOUT) and for each silence in a body that is not an event stream (then the connection is cut)' },
  SERVICE_UPSTREAM_STREAM_IDLE_MS: { kind: 'int', min: 0, max: 86400000, default: '0', description: 'longest silence in a `text/event-stream` answer (an MCP stream) before the gateway cuts it; 0: no limit, a vanished peer is found by TCP keep-alive (docs/mcp.md, "Streams")' },
  SERVICE_GATEWAY_REQUEST_TIMEOUT_MS: { kind: 'int', min: 100, max: 3600000, description: 'time a client has to send a whole request to the gateway; then 408. Default: SERVICE_HEADERS_TIMEOUT_MS + SERVICE_PDP_TIMEOUT_MS + SERVICE_UPSTREAM_TIMEOUT_MS' },
  SERVICE_GATEWAY_MAX_HEAD_BYTES: { kind: 'int', min: 16384, max: 1048576, default: '65536', description: 'largest request head (request line and headers) the gateway reads; a larger one is 431 REQUEST_HEADER_FIELDS_TOO_LARGE. Must leave room for a delegation chain of SERVICE_MAX_CHAIN_DEPTH envelopes: at least 4096 + 5120 × SERVICE_MAX_CHAIN_DEPTH (checked at start)' },
  SERVICE_TRUSTED_PROXIES: { kind: 'list', description: 'peers whose X-Forwarded-* values are kept' },
  SERVICE_CHECK_GRPC_PORT: { kind: 'int', min: 0, max: 65535, description: 'port of the Envoy ext_authz v3 gRPC check service (`envoy.service.auth.v3.Authorization/Check`); unset: not started. Needs the gateway (docs/ext-authz.md)' },
  SERVICE_CHECK_HTTP_PORT: { kind: 'int', min: 0, max: 65535, description: 'port of the HTTP check service for the proxies in SERVICE_CHECK_HTTP_PROXIES; unset: not started. Needs the gateway (docs/ext-authz.md)' },
  SERVICE_CHECK_HTTP_PROXIES: { kind: 'list', description: 'which proxies the HTTP check service answers, each on its own path and reading only its own headers: `envoy` (Envoy\'s HTTP ext_authz: the original method and path under SERVICE_CHECK_ENVOY_PATH_PREFIX), `nginx` (`auth_request` on `/nginx`: X-Original-Method, X-Original-URI), `traefik` (ForwardAuth on `/traefik`: X-Forwarded-Method, -Proto, -Host, -Uri); required with SERVICE_CHECK_HTTP_PORT' },
  SERVICE_CHECK_ENVOY_PATH_PREFIX: { kind: 'string', default: '/envoy', description: 'the `path_prefix` of Envoy\'s HTTP ext_authz service: a check for `/x` arrives as `<prefix>/x`' },
  SERVICE_CHECK_PEERS: { kind: 'list', description: 'addresses or CIDR ranges allowed to ask the check services (whoever can ask names the request being checked); unset: loopback only' },
  SERVICE_REGISTRY_URL: { kind: 'url', description: 'gateway-only mode: admin plane to pull JWKS, revocations and bundles from' },
  SERVICE_REGISTRY_KEY: { kind: 'string', description: 'gateway-only mode: registry API key' },
  SERVICE_GATEWAY_WATCH: { kind: 'bool', default: 'true', description: 'gateway-only mode: subscribe to the registry\'s push stream (`GET /v1/gateway/watch`) and poll only while it is down; `false` polls always (revocations every second)' },
  SERVICE_GATEWAY_WATCH_STREAMS_MAX: { kind: 'int', min: 1, max: 100000, default: '1000', description: 'admin plane: open gateway watch streams it serves at once (one per gateway-only process); one more is 503 `watch_limit_reached` and that gateway polls' },
  SERVICE_GATEWAY_WATCH_HEARTBEAT: { kind: 'duration', default: '15s', description: 'admin plane: interval of the comment line on every gateway watch stream (between 100ms and 5m); a gateway that hears nothing for twice this and a second reconnects and polls meanwhile' },
  SERVICE_EMBEDDED_PDP: { kind: 'bool', default: 'false', description: 'enable the in-process policy evaluator' },
  SERVICE_PDP_ENDPOINT: { kind: 'url', description: 'external PDP URL; empty with no embedded PDP = badge-only mode' },
  SERVICE_PDP_PROTOCOL: { kind: 'enum', values: ['service', 'opa'], default: 'service', description: '`opa` posts `{input}` to `<endpoint>/v1/data/service/policy`' },
  SERVICE_PDP_TIMEOUT_MS: { kind: 'int', min: 1, max: 60000, default: '500', description: 'external PDP time-out' },
  SERVICE_ENFORCEMENT_MODE: { kind: 'enum', values: ENFORCEMENT_MODES, default: 'EM-OBSERVE', description: 'EM-OBSERVE, EM-GUARD, EM-DELEGATE or EM-STRICT' },
  SERVICE_WORKSPACE: { kind: 'string', description: 'workspace (organization) UUID; required for the embedded PDP' },
  SERVICE_BUNDLE_POLL_INTERVAL: { kind: 'duration', default: '30s', description: 'embedded bundle rebuild interval' },
  SERVICE_BUNDLE_STALENESS_THRESHOLD: { kind: 'duration', default: '5m', description: 'bundle age before staleness annotations (EM-STRICT denies)' },
  SERVICE_BREAKGLASS_PUBLIC_KEY: { kind: 'string', description: 'break-glass Ed25519 public key file (PEM or JWK)' },
  SERVICE_PEP_ID: { kind: 'string', description: 'PEP instance id, sent to the PDP as X-Service-PEP-ID, and the gateway\'s `gateway_id` in its decision reports; unset = `gw-` and 12 random hex characters, made once per process and logged at start' },
  SERVICE_GATEWAY_WORKERS: { kind: 'string', default: '1', description: 'gateway processes on the gateway port: `1` = one process, no cluster; `2`-`64` = a primary and that many node:cluster workers; `auto` = the machine\'s available parallelism (at most 64). For `agent-trust gateway` and the appliance\'s gateway (docs/operations.md, "Gateway workers")' },
  SERVICE_GATEWAY_HEARTBEAT_INTERVAL: { kind: 'duration', default: '10s', description: 'the gateway reports its status (routes, PDP, bundle) at least this often, with or without decisions (between 100ms and 1h); the admin plane calls a gateway `stale` after three missed intervals (docs/console.md, "Gateways")' },
  SERVICE_MAX_CHAIN_DEPTH: { kind: 'int', min: 1, max: 64, default: '10', description: 'maximum delegation chain length' },
  SERVICE_ORG_TRUST_BOUNDARY: { kind: 'string', description: 'DID prefix limiting cross-org chains; empty accepts all' },
  SERVICE_ACCEPT_SELF_SIGNED: { kind: 'bool', default: 'false', description: 'accept self-signed level-0 badges at the gateway' },
  // operator console (docs/console.md)
  SERVICE_CONSOLE_DECISIONS_BUFFER: { kind: 'int', min: 1, max: 100000, default: '1000', description: 'gateway decisions the decision store keeps for `GET /v1/gateway/decisions` and its stream (the newest; older ones leave it; with REDIS_URL the stream\'s approximate MAXLEN), and the bound of each gateway\'s queue of decisions not yet reported' },
  SERVICE_CONSOLE_STREAMS_MAX: { kind: 'int', min: 1, max: 10000, default: '100', description: 'open decision streams the admin plane serves at once; one more is 503 `stream_limit_reached`' },
  SERVICE_CONSOLE_STREAMS_PER_ORG: { kind: 'int', min: 1, max: 10000, default: '10', description: 'open decision streams per organization; one more is 429 `too_many_streams`' },
  SERVICE_CONSOLE_HEARTBEAT: { kind: 'duration', default: '15s', description: 'interval of the comment line a decision stream sends so that proxies keep it open' },
  SERVICE_DECISION_LOG_URL: { kind: 'url', description: 'an OPA-compatible decision-log service: every gateway decision the control plane stores is also POSTed there, in batches, as OPA uploads its decision logs (a gzip JSON array of events; docs/console.md, "Export"); unset: no export. When ENVIRONMENT=production: https, or a loopback address' },
  SERVICE_DECISION_LOG_AUTHORIZATION: { kind: 'string', description: 'the `Authorization` header value sent to SERVICE_DECISION_LOG_URL (for example `Bearer <token>`); never logged' },
  SERVICE_DECISIONS_REDIS_PREFIX: { kind: 'string', default: 'agent-trust:decisions:', description: 'with REDIS_URL: prefix of the Redis keys of the shared decision store (a stream `<prefix>events` bounded by XADD MAXLEN ~ SERVICE_CONSOLE_DECISIONS_BUFFER, `<prefix>seq`, the heartbeat hash `<prefix>gateways`); every admin instance of one deployment uses the same' },
  // the audit trail (docs/audit.md)
  SERVICE_AUDIT: { kind: 'bool', default: 'true', description: 'record every administrative write, key rotation, break-glass use and gateway refusal in the hash-chained audit trail (docs/audit.md); `false` is refused when ENVIRONMENT=production' },
  SERVICE_AUDIT_CHECKPOINT_RECORDS: { kind: 'int', min: 1, max: 1000000, default: '1000', description: 'the admin plane signs an audit checkpoint (a JWS naming the chain head) after this many new records' },
  SERVICE_AUDIT_CHECKPOINT_INTERVAL: { kind: 'duration', default: '5m', description: 'and at least this often while new records arrive (between 1s and 24h)' },
  SERVICE_AUDIT_ALLOW_SAMPLE: { kind: 'int', min: 0, max: 1000000, default: '0', description: 'gateway ALLOW decisions recorded in the audit trail: one in N by the gateway\'s event sequence; 0 records none (every DENY, refusal and break-glass use is recorded)' },
  // rate limits across the fleet (docs/operations.md, "Rate limits across the fleet")
  SERVICE_RATE_LIMIT_REDIS_PREFIX: { kind: 'string', default: 'agent-trust:ratelimit:', description: 'with REDIS_URL: prefix of the Redis keys of the gateways\' `rate_limit.apply` buckets (one hash per bucket, `<prefix>` + the SHA-256 of its key, expiring 60 s after its last use); every gateway and admin instance of one deployment uses the same' },
  SERVICE_RATE_LIMIT_REDIS_FALLBACK: { kind: 'enum', values: RATE_LIMIT_FALLBACKS, description: 'with REDIS_URL: how the gateway counts `rate_limit.apply` while Redis cannot answer (not connected, or a command failed or took over 500 ms): `local` (the default when unset: this process\'s bucket, so N processes allow up to N × rpm meanwhile), `deny` (every rate-limited request is over its limit: 429 `rate_limit_exceeded` where the mode enforces limits) or `allow` (let through uncounted); refused without REDIS_URL' },
} as const satisfies Record<string, VariableSpec>

export type VariableName = keyof typeof VARIABLES

export interface Config {
  readonly environment: 'development' | 'test' | 'staging' | 'production'
  readonly host: string
  readonly port: number
  readonly logLevel: string
  readonly database: { readonly kind: 'postgres'; readonly url: string } | { readonly kind: 'pglite'; readonly dataDir: string | null }
  readonly dataDir: string
  readonly caKeyPath: string
  readonly issuerUrl: string
  /** `host` or `host%3Aport`: the method-specific id prefix of this registry's did:web identifiers. */
  readonly registryDidHost: string
  readonly redisUrl: string | null
  readonly shutdownGraceMs: number
  /** Shut down when the parent process exits (`serve` and `gateway`). */
  readonly stopWithParent: boolean
  readonly bootstrapApiKey: string | null
  readonly rateLimitPerMinute: number
  /** The operator console (docs/console.md): session lifetimes and the live feed. */
  readonly console: {
    readonly sessionIdleMs: number
    readonly sessionMaxMs: number
    readonly decisionsBuffer: number
    readonly streamsMax: number
    readonly streamsPerOrg: number
    readonly heartbeatMs: number
    /** Key prefix of the shared decision store in Redis. */
    readonly redisPrefix: string
    /** The decision-log sink and its Authorization value; null: no export. */
    readonly decisionLog: { readonly url: string; readonly authorization: string | null } | null
  }
  /** The audit trail (docs/audit.md). */
  readonly audit: {
    readonly enabled: boolean
    readonly checkpointRecords: number
    readonly checkpointIntervalMs: number
    /** One gateway ALLOW in this many is recorded; 0: none. */
    readonly allowSample: number
  }
  /** Slow-client limits of the listeners (src/http/server-limits.ts). */
  readonly http: {
    readonly headersTimeoutMs: number
    /** Admin plane and ops listener; the gateway has its own, `gateway.requestTimeoutMs`. */
    readonly requestTimeoutMs: number
    readonly keepAliveTimeoutMs: number
    readonly maxHeadersCount: number
  }
  readonly auth: {
    readonly jwksUrl: string | null
    readonly issuer: string | null
    readonly clerkSecretKey: string | null
    readonly clerkJwtKey: string | null
    readonly webhookSecret: string | null
  }
  readonly dnsServers: readonly string[]
  readonly didWebAllowHosts: readonly string[]
  readonly gateway: {
    readonly enabled: boolean
    readonly port: number
    readonly upstreamUrl: string | null
    readonly routesFile: string | null
    /** The SERVICE_UPSTREAM_URL route's upstream ignores the case of paths. */
    readonly upstreamCaseInsensitive: boolean
    readonly upstreamCaseSensitive: boolean
    /** What the SERVICE_UPSTREAM_URL route does with request headers whose name contains `_`. */
    readonly headersWithUnderscores: UnderscoreHeaders
    /** The SERVICE_UPSTREAM_URL route does not tell callers why the PDP denied them. */
    readonly hideDenyReason: boolean
    /** What the SERVICE_UPSTREAM_URL upstream speaks. */
    readonly upstreamProtocol: UpstreamProtocol
    /**
     * SERVICE_GATEWAY_PUBLIC_URL without a trailing `/`, or its default; null when ENVIRONMENT=production
     * leaves it unset, where no route may then be a resource server.
     */
    readonly publicUrl: string | null
    /** The SERVICE_UPSTREAM_URL route is a protected resource (SERVICE_UPSTREAM_RESOURCE_SERVER, else by protocol). */
    readonly upstreamResourceServer: boolean
    /** SERVICE_UPSTREAM_RESOURCE; null: the public URL. */
    readonly upstreamResource: string | null
    readonly upstreamRequireAudience: boolean
    readonly mcpMaxBodyBytes: number
    /** SERVICE_A2A_CARD_CACHE_SECONDS. */
    readonly a2aCardCacheSeconds: number
    readonly mcpMetricTools: readonly string[]
    /** SERVICE_MCP_ALLOWED_HOSTS; null: the default (the public URL's host and the loopback names). */
    readonly mcpAllowedHosts: readonly string[] | null
    /** SERVICE_MCP_ALLOWED_ORIGINS; null: the default (the public URL's origin and the loopback origins). */
    readonly mcpAllowedOrigins: readonly string[] | null
    readonly upstreamTimeoutMs: number
    /** SERVICE_UPSTREAM_STREAM_IDLE_MS; 0: event streams have no idle limit. */
    readonly upstreamStreamIdleMs: number
    /** Whole-request receipt limit of the gateway listener (head and body). */
    readonly requestTimeoutMs: number
    /** Largest request head the gateway listener reads (node's `maxHeaderSize`); larger is 431. */
    readonly maxHeadBytes: number
    readonly trustedProxies: readonly string[]
    /** The check services proxies ask (docs/ext-authz.md). */
    readonly check: {
      readonly grpcPort: number | null
      readonly httpPort: number | null
      readonly httpProxies: readonly CheckHttpProxy[]
      readonly envoyPathPrefix: string
      readonly peers: readonly string[]
    }
    readonly registryUrl: string | null
    readonly registryKey: string | null
    readonly embeddedPdp: boolean
    readonly pdpEndpoint: string | null
    readonly pdpProtocol: 'service' | 'opa'
    readonly pdpTimeoutMs: number
    readonly enforcementMode: EnforcementMode
    readonly workspace: string | null
    readonly bundlePollIntervalMs: number
    readonly bundleStalenessThresholdMs: number
    readonly breakglassPublicKeyPath: string | null
    readonly pepId: string | null
    /** SERVICE_GATEWAY_WORKERS resolved (`auto` = the available parallelism): 1 = no cluster. */
    readonly workers: number
    /** How often the gateway reports its status at the least. */
    readonly heartbeatIntervalMs: number
    /** Gateway-only: use the registry's push stream, polling as the fallback. */
    readonly watch: boolean
    /** Admin plane: bound of open watch streams, and their heartbeat interval. */
    readonly watchStreamsMax: number
    readonly watchHeartbeatMs: number
    readonly maxChainDepth: number
    readonly orgTrustBoundary: string | null
    readonly acceptSelfSigned: boolean
    /**
     * CA_ISSUER_URL when it is set, else null. A gateway-only process trusts the issuer its registry
     * names and refuses to start when this one, given, names another.
     */
    readonly configuredIssuer: string | null
    /** OpenTelemetry trace export requested through the standard `OTEL_*` variables. */
    readonly tracing: boolean
    /** Key prefix of the fleet's rate-limit buckets in Redis. */
    readonly rateLimitRedisPrefix: string
    /** How rate limits are counted while Redis cannot answer. */
    readonly rateLimitRedisFallback: RateLimitFallback
  }
  /** `SERVICE_*` variables in the environment that the service does not read (logged at start). */
  readonly unknownVariables: readonly UnknownVariable[]
}

/** A `SERVICE_*` variable no entry of `VARIABLES` names, with the nearest known name when one is close. */
export interface UnknownVariable {
  readonly name: string
  readonly suggestion: string | null
}

/** Thrown with every configuration problem at once; the CLI prints them and exits non-zero. */
export class ConfigError extends Error {
  readonly code = 'CONFIG_INVALID'
  readonly problems: readonly string[]
  constructor(problems: readonly string[]) {
    super(`invalid configuration:\n  - ${problems.join('\n  - ')}`)
    this.name = 'ConfigError'
    this.problems = problems
  }
}

// Only the two words the error message names: `yes`, `1` or `on` look like a choice but are typos for
// some readers and not for others, and a security switch must not depend on which reading the code took.
const BOOL_TRUE = 'true'
const BOOL_FALSE = 'false'

function schemaFor(spec: VariableSpec): Record<string, unknown> {
  switch (spec.kind) {
    case 'int':
      return { type: 'integer', minimum: spec.min, maximum: spec.max }
    case 'bool':
      return { type: 'boolean' }
    case 'duration':
      return { type: 'integer', minimum: 1 }
    case 'url':
      return { type: 'string', format: 'uri', pattern: `^(${(spec.schemes ?? ['http', 'https']).join('|')})://` }
    case 'enum':
      return { type: 'string', enum: spec.values }
    case 'list':
      return { type: 'array', items: { type: 'string', minLength: 1 } }
    case 'string':
      return { type: 'string', minLength: 1 }
  }
}

/** The JSON Schema of the parsed environment (also printed by `agent-trust check-config --schema`). */
export const CONFIG_SCHEMA = {
  $schema: 'http://json-schema.org/draft-07/schema#',
  $id: 'urn:service:config',
  type: 'object',
  additionalProperties: false,
  properties: Object.fromEntries(
    Object.entries(VARIABLES).map(([name, spec]) => [name, { ...schemaFor(spec), description: spec.description }]),
  ),
} as const

const ajv = new Ajv({ allErrors: true, strict: false })
addFormats(ajv)
const validateParsed = ajv.compile(CONFIG_SCHEMA)

/**
 * Turns raw strings into typed values. A string that does not parse is kept as it is so that the schema
 * check reports it against the variable's expected type, next to every other problem.
 */
function parseValue(spec: VariableSpec, raw: string): unknown {
  switch (spec.kind) {
    case 'int':
      return /^-?\d+$/.test(raw) ? Number(raw) : raw
    case 'bool': {
      const lower = raw.toLowerCase()
      if (lower === BOOL_TRUE) return true
      if (lower === BOOL_FALSE) return false
      return raw
    }
    case 'duration':
      return parseDuration(raw) ?? raw
    case 'list':
      return raw.split(',').map((s) => s.trim()).filter((s) => s.length > 0)
    default:
      return raw
  }
}

function describeAjvError(error: ErrorObject): string {
  const name = error.instancePath.replace(/^\//, '').split('/')[0] ?? ''
  const spec = (VARIABLES as Record<string, VariableSpec>)[name]
  if (spec?.kind === 'duration' && error.keyword === 'type') {
    return `${name}: must be a duration such as 500ms, 30s, 5m or 1h`
  }
  if (spec?.kind === 'bool' && error.keyword === 'type') return `${name}: must be true or false`
  if (error.keyword === 'enum') {
    return `${name}: must be one of ${(error.params as { allowedValues: string[] }).allowedValues.join(', ')}`
  }
  if (error.keyword === 'pattern' && spec?.kind === 'url') {
    return `${name}: must be a ${(spec.schemes ?? ['http', 'https']).join(' or ')} URL`
  }
  return `${name}: ${error.message ?? 'is invalid'}`
}

/** `ip`, `ipv4:port`, `ipv6` or `[ipv6]:port`, with a real address (node's resolver refuses anything else). */
function isResolverAddress(server: string): boolean {
  const bracketed = /^\[([^\]]+)\](?::(\d{1,5}))?$/.exec(server)
  const v4WithPort = /^([^:]+):(\d{1,5})$/.exec(server)
  const [address, port] = bracketed !== null
    ? [bracketed[1], bracketed[2]]
    : v4WithPort !== null ? [v4WithPort[1], v4WithPort[2]] : [server, undefined]
  if (port !== undefined && (Number(port) < 1 || Number(port) > 65535)) return false
  const family = isIP(address ?? '')
  return bracketed !== null ? family === 6 : v4WithPort !== null ? family === 4 : family !== 0
}

/** A base URL: scheme, host, optional path; nothing a prefix could not follow. */
function publicUrlProblem(url: string): string | null {
  if (!/^https?:\/\//.test(url) || !URL.canParse(url)) return null // the schema check reports it
  const parsed = new URL(url)
  if (parsed.search !== '' || url.includes('?')) return 'must not carry a query'
  if (parsed.hash !== '' || url.includes('#')) return 'must not carry a fragment'
  if (parsed.username !== '' || parsed.password !== '') return 'must not carry credentials'
  return null
}

function isLoopbackUrl(url: string): boolean {
  const host = new URL(url).hostname
  return host === 'localhost' || host === '127.0.0.1' || host === '[::1]'
}

/**
 * The request head a delegation chain of `depth` envelopes needs at the gateway: X-Service-Authority-Chain
 * and X-Service-Badge-Map grow by one envelope and one badge per hop, each base64url-encoded once more;
 * the caller's badge, the leaf repeated in X-Service-Authority, the request line and ordinary headers come
 * once. Sized on envelopes with a full 512-character prompt summary and a few constraints and on badges
 * of this registry (about 4,050 bytes per hop and 2,900 once, as measured by
 * test/e2e/gateway-delegation.test.ts), with a quarter on top. Envelopes with larger constraints need
 * more (a payload may reach 8 KiB).
 */
export function delegationHeadBytes(depth: number): number {
  return HEAD_BYTES_ONCE + depth * HEAD_BYTES_PER_HOP
}
const HEAD_BYTES_ONCE = 4 * 1024
const HEAD_BYTES_PER_HOP = 5 * 1024

/**
 * Reads, validates and freezes the configuration. `env` is injectable so tests and the CLI build configs
 * without touching the real environment.
 */
/**
 * Whether the environment configures OpenTelemetry trace export (docs/wire-contract.md §12): `OTEL_TRACES_EXPORTER`
 * other than `none`, or an OTLP endpoint; `OTEL_SDK_DISABLED=true` wins. The SDK reads the rest of the
 * `OTEL_*` variables itself, as the standard prescribes.
 */
export function tracingRequested(env: NodeJS.ProcessEnv): boolean {
  if (env.OTEL_SDK_DISABLED?.trim().toLowerCase() === 'true') return false
  const exporter = env.OTEL_TRACES_EXPORTER?.trim().toLowerCase()
  if (exporter !== undefined && exporter !== '') return exporter !== 'none'
  return Boolean(env.OTEL_EXPORTER_OTLP_ENDPOINT?.trim() || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT?.trim())
}

/** The most gateway workers one primary forks (each is a Node process with its own pools and caches). */
export const MAX_GATEWAY_WORKERS = 64

/** SERVICE_GATEWAY_WORKERS as a count, or what is wrong with it. */
function gatewayWorkers(value: unknown): number | string {
  const text = String(value ?? '1').toLowerCase()
  if (text === 'auto') return Math.min(Math.max(1, availableParallelism()), MAX_GATEWAY_WORKERS)
  if (!/^[0-9]{1,3}$/.test(text) || Number(text) < 1 || Number(text) > MAX_GATEWAY_WORKERS) {
    return `must be a whole number from 1 to ${MAX_GATEWAY_WORKERS}, or auto`
  }
  return Number(text)
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env): Config {
  const parsed: Record<string, unknown> = {}
  for (const [name, spec] of Object.entries(VARIABLES) as [string, VariableSpec][]) {
    const raw = env[name]
    // An empty variable means "not set": Compose files and shells often export empty values.
    const value = raw === undefined || raw.trim() === '' ? spec.default : raw.trim()
    if (value !== undefined) parsed[name] = parseValue(spec, value)
  }

  const problems: string[] = []
  if (!validateParsed(parsed)) {
    for (const error of validateParsed.errors ?? []) problems.push(describeAjvError(error))
  }
  const v = parsed as Record<string, never>
  const environment = v.ENVIRONMENT as Config['environment']
  const production = environment === 'production'

  const databaseUrl = v.DATABASE_URL as string | undefined
  let database: Config['database'] = { kind: 'pglite', dataDir: null }
  const dataDir = path.resolve(String(v.SERVICE_DATA_DIR ?? './data'))
  if (databaseUrl === undefined) {
    database = { kind: 'pglite', dataDir: path.join(dataDir, 'pgdata') }
  } else if (databaseUrl === 'memory://') {
    database = { kind: 'pglite', dataDir: null }
  } else if (/^postgres(ql)?:\/\//.test(databaseUrl)) {
    database = { kind: 'postgres', url: databaseUrl }
  } else {
    problems.push('DATABASE_URL: must be a postgres:// or postgresql:// URL, or memory://')
  }
  if (production && database.kind === 'pglite' && v.SERVICE_ALLOW_EMBEDDED_DB !== true) {
    problems.push('DATABASE_URL: ENVIRONMENT=production refuses the embedded database unless SERVICE_ALLOW_EMBEDDED_DB=true')
  }

  const bootstrap = v.SERVICE_BOOTSTRAP_API_KEY as string | undefined
  if (bootstrap !== undefined && !/^sk_[A-Za-z0-9_-]{43,}$/.test(bootstrap)) {
    problems.push('SERVICE_BOOTSTRAP_API_KEY: must be sk_ followed by at least 43 base64url characters (32 random bytes)')
  }
  const workspace = v.SERVICE_WORKSPACE as string | undefined
  if (workspace !== undefined && !isUuid(workspace)) problems.push('SERVICE_WORKSPACE: must be a UUID')
  if (v.SERVICE_UPSTREAM_CASE_SENSITIVE && v.SERVICE_UPSTREAM_CASE_INSENSITIVE) {
    problems.push('SERVICE_UPSTREAM_CASE_SENSITIVE: cannot be combined with SERVICE_UPSTREAM_CASE_INSENSITIVE=true')
  }
  if (v.SERVICE_EMBEDDED_PDP === true && workspace === undefined) {
    problems.push('SERVICE_WORKSPACE: is required when SERVICE_EMBEDDED_PDP=true')
  }
  // Two decision points would leave it to the code to pick one silently; the operator must choose.
  if (v.SERVICE_EMBEDDED_PDP === true && v.SERVICE_PDP_ENDPOINT !== undefined) {
    problems.push('SERVICE_PDP_ENDPOINT: cannot be combined with SERVICE_EMBEDDED_PDP=true; configure one decision point')
  }
  const allowHosts = (v.SERVICE_DID_WEB_ALLOW_HOSTS as string[] | undefined) ?? []
  const decisionLogUrl = v.SERVICE_DECISION_LOG_URL as string | undefined
  // Decisions carry DIDs, paths and PDP requests: in production they leave only over TLS or to this machine.
  if (production && decisionLogUrl !== undefined && decisionLogUrl.startsWith('http://') && !isLoopbackUrl(decisionLogUrl)) {
    problems.push('SERVICE_DECISION_LOG_URL: must be https:// (or a loopback address) when ENVIRONMENT=production')
  }
  if (v.SERVICE_DECISION_LOG_AUTHORIZATION !== undefined && decisionLogUrl === undefined) {
    problems.push('SERVICE_DECISION_LOG_AUTHORIZATION: is only for SERVICE_DECISION_LOG_URL')
  }
  if (production && allowHosts.length > 0) {
    problems.push('SERVICE_DID_WEB_ALLOW_HOSTS: is refused when ENVIRONMENT=production')
  }
  if (production && v.SERVICE_AUDIT === false) {
    problems.push('SERVICE_AUDIT: false is refused when ENVIRONMENT=production (the audit trail is part of the security record)')
  }
  if (v.SERVICE_AUDIT_CHECKPOINT_INTERVAL < 1000 || v.SERVICE_AUDIT_CHECKPOINT_INTERVAL > 86_400_000) {
    problems.push('SERVICE_AUDIT_CHECKPOINT_INTERVAL: must be between 1s and 24h')
  }
  for (const problem of allowedHostsProblems((v.SERVICE_MCP_ALLOWED_HOSTS as string[] | undefined) ?? [])) problems.push(`SERVICE_MCP_ALLOWED_HOSTS: ${problem}`)
  for (const problem of allowedOriginsProblems((v.SERVICE_MCP_ALLOWED_ORIGINS as string[] | undefined) ?? [])) problems.push(`SERVICE_MCP_ALLOWED_ORIGINS: ${problem}`)
  for (const server of (v.SERVICE_DNS_SERVERS as string[] | undefined) ?? []) {
    if (!isResolverAddress(server)) problems.push(`SERVICE_DNS_SERVERS: "${server}" is not an ip, ip:port or [ipv6]:port`)
  }
  // A fallback without Redis would read as "limits are shared" while every process counts its own.
  if (v.SERVICE_RATE_LIMIT_REDIS_FALLBACK !== undefined && v.REDIS_URL === undefined) {
    problems.push('SERVICE_RATE_LIMIT_REDIS_FALLBACK: is only for REDIS_URL (without it every gateway process counts its own rate limits)')
  }
  if (v.SERVICE_REGISTRY_URL !== undefined && v.SERVICE_REGISTRY_KEY === undefined) {
    problems.push('SERVICE_REGISTRY_KEY: is required with SERVICE_REGISTRY_URL')
  }
  const issuer = (v.CA_ISSUER_URL as string | undefined) ?? `http://localhost:${Number(v.PORT ?? 8080)}`
  if (production && v.CA_ISSUER_URL !== undefined && issuer.startsWith('http://') && !isLoopbackUrl(issuer)) {
    problems.push('CA_ISSUER_URL: must be https:// when ENVIRONMENT=production')
  }

  const gatewayPort = Number(v.SERVICE_GATEWAY_PORT ?? 8000)
  const givenPublicUrl = (v.SERVICE_GATEWAY_PUBLIC_URL as string | undefined)?.replace(/\/+$/, '')
  if (givenPublicUrl !== undefined) {
    const problem = publicUrlProblem(givenPublicUrl)
    if (problem !== null) problems.push(`SERVICE_GATEWAY_PUBLIC_URL: ${problem}`)
    else if (production && !givenPublicUrl.startsWith('https://')) problems.push('SERVICE_GATEWAY_PUBLIC_URL: must be https:// when ENVIRONMENT=production')
  }
  // In production the default (localhost) would be published in every challenge and metadata document.
  const publicUrl = givenPublicUrl ?? (production ? null : `http://localhost:${gatewayPort}`)
  const resourceServerFlag = v.SERVICE_UPSTREAM_RESOURCE_SERVER as unknown
  const upstreamResourceServer = typeof resourceServerFlag === 'boolean' ? resourceServerFlag : v.SERVICE_UPSTREAM_PROTOCOL === 'mcp'
  const upstreamResource = v.SERVICE_UPSTREAM_RESOURCE as string | undefined
  // A value the schema check refuses (not an http or https URL) is reported once, by it.
  if (upstreamResource !== undefined && /^https?:\/\//.test(upstreamResource) && URL.canParse(upstreamResource)) {
    const problem = resourceIdentifierProblem(upstreamResource)
    if (problem !== null) problems.push(`SERVICE_UPSTREAM_RESOURCE: ${problem}`)
  }
  if (!upstreamResourceServer) {
    if (upstreamResource !== undefined) problems.push('SERVICE_UPSTREAM_RESOURCE: is only for a resource-server route (SERVICE_UPSTREAM_RESOURCE_SERVER=true)')
    if (v.SERVICE_UPSTREAM_REQUIRE_AUDIENCE !== undefined) problems.push('SERVICE_UPSTREAM_REQUIRE_AUDIENCE: is only for a resource-server route (SERVICE_UPSTREAM_RESOURCE_SERVER=true)')
  } else if (publicUrl === null && v.SERVICE_UPSTREAM_URL !== undefined && v.SERVICE_ROUTES_FILE === undefined) {
    problems.push('SERVICE_GATEWAY_PUBLIC_URL: is required when ENVIRONMENT=production and the SERVICE_UPSTREAM_URL route is a resource server')
  }

  // node refuses a head limit longer than the request limit (the request one would always fire first).
  const headersTimeout = v.SERVICE_HEADERS_TIMEOUT_MS as number
  // The gateway streams the body to the upstream while it arrives, and the upstream leg (undici's
  // headers timer, started at dispatch and refreshed only by upstream backpressure or the body's end)
  // already answers 504 once SERVICE_UPSTREAM_TIMEOUT_MS passes: a client-paced upload cannot last
  // longer than the head, the decision and that time-out. So the default whole-request limit is their
  // sum: it cuts no upload that could have succeeded and ends a stalled body instead of holding the
  // connection for node's 300 s. Uploads paced by a slow-reading upstream can outlast it: operators
  // with those set SERVICE_GATEWAY_REQUEST_TIMEOUT_MS explicitly.
  const gatewayRequestTimeout = (v.SERVICE_GATEWAY_REQUEST_TIMEOUT_MS as number | undefined) ??
    headersTimeout + (v.SERVICE_PDP_TIMEOUT_MS as number) + (v.SERVICE_UPSTREAM_TIMEOUT_MS as number)
  const limits = [headersTimeout, v.SERVICE_REQUEST_TIMEOUT_MS, gatewayRequestTimeout] as unknown[]
  // Only comparable once each is a number (a malformed one is already reported above).
  if (limits.every((n) => typeof n === 'number' && Number.isFinite(n))) {
    if (headersTimeout > (v.SERVICE_REQUEST_TIMEOUT_MS as number)) {
      problems.push('SERVICE_HEADERS_TIMEOUT_MS: must not exceed SERVICE_REQUEST_TIMEOUT_MS')
    }
    if (headersTimeout > gatewayRequestTimeout) {
      problems.push('SERVICE_HEADERS_TIMEOUT_MS: must not exceed SERVICE_GATEWAY_REQUEST_TIMEOUT_MS')
    }
  }

  const consoleIdle = v.SERVICE_CONSOLE_SESSION_IDLE as unknown
  const consoleMax = v.SERVICE_CONSOLE_SESSION_MAX as unknown
  const heartbeatInterval = v.SERVICE_GATEWAY_HEARTBEAT_INTERVAL as unknown
  if (typeof heartbeatInterval === 'number' && (heartbeatInterval < 100 || heartbeatInterval > 3_600_000)) {
    problems.push('SERVICE_GATEWAY_HEARTBEAT_INTERVAL: must be between 100ms and 1h')
  }
  const watchHeartbeat = v.SERVICE_GATEWAY_WATCH_HEARTBEAT as unknown
  if (typeof watchHeartbeat === 'number' && (watchHeartbeat < 100 || watchHeartbeat > 300_000)) {
    problems.push('SERVICE_GATEWAY_WATCH_HEARTBEAT: must be between 100ms and 5m')
  }
  if (typeof consoleIdle === 'number' && typeof consoleMax === 'number' && consoleIdle > consoleMax) {
    problems.push('SERVICE_CONSOLE_SESSION_IDLE: must not exceed SERVICE_CONSOLE_SESSION_MAX')
  }

  const maxHeadBytes = v.SERVICE_GATEWAY_MAX_HEAD_BYTES as unknown
  const maxChainDepth = v.SERVICE_MAX_CHAIN_DEPTH as unknown
  if (typeof maxHeadBytes === 'number' && typeof maxChainDepth === 'number' && maxHeadBytes < delegationHeadBytes(maxChainDepth)) {
    problems.push(`SERVICE_GATEWAY_MAX_HEAD_BYTES: ${maxHeadBytes} is too small for a delegation chain of SERVICE_MAX_CHAIN_DEPTH=${maxChainDepth} envelopes with its badge map; set it to at least ${delegationHeadBytes(maxChainDepth)} or lower SERVICE_MAX_CHAIN_DEPTH`)
  }

  const workers = gatewayWorkers(v.SERVICE_GATEWAY_WORKERS as unknown)
  if (typeof workers === 'string') problems.push(`SERVICE_GATEWAY_WORKERS: ${workers}`)
  const check = checkServices(v, problems)
  const gatewayEnabled = v.SERVICE_UPSTREAM_URL !== undefined || v.SERVICE_ROUTES_FILE !== undefined
  if ((check.grpcPort !== null || check.httpPort !== null) && !gatewayEnabled) {
    problems.push('SERVICE_CHECK_GRPC_PORT, SERVICE_CHECK_HTTP_PORT: the check services run the gateway\'s pipeline; set SERVICE_UPSTREAM_URL or SERVICE_ROUTES_FILE')
  }
  if ((check.grpcPort !== null || check.httpPort !== null) && typeof workers === 'number' && workers > 1) {
    problems.push('SERVICE_CHECK_GRPC_PORT, SERVICE_CHECK_HTTP_PORT: not with SERVICE_GATEWAY_WORKERS above 1 (the check services run in one gateway process)')
  }

  if (problems.length > 0) throw new ConfigError(problems)

  const issuerUrl = issuer.replace(/\/+$/, '')
  const registryDidHost = registryDidHostOf(issuerUrl)
  const str = (name: VariableName): string | null => (v[name] as string | undefined) ?? null
  const list = (name: VariableName): readonly string[] => Object.freeze((v[name] as string[] | undefined) ?? [])

  const config: Config = {
    environment,
    host: v.SERVICE_HOST,
    port: v.PORT,
    logLevel: v.SERVICE_LOG_LEVEL,
    database: Object.freeze(database),
    dataDir,
    caKeyPath: path.resolve(str('CA_KEY_PATH') ?? path.join(dataDir, 'ca-keys.json')),
    issuerUrl,
    registryDidHost,
    redisUrl: str('REDIS_URL'),
    shutdownGraceMs: v.SERVICE_SHUTDOWN_GRACE_MS,
    stopWithParent: v.SERVICE_STOP_WITH_PARENT,
    bootstrapApiKey: bootstrap ?? null,
    rateLimitPerMinute: v.SERVICE_RATE_LIMIT_PER_MINUTE,
    console: Object.freeze({
      sessionIdleMs: v.SERVICE_CONSOLE_SESSION_IDLE,
      sessionMaxMs: v.SERVICE_CONSOLE_SESSION_MAX,
      decisionsBuffer: v.SERVICE_CONSOLE_DECISIONS_BUFFER,
      streamsMax: v.SERVICE_CONSOLE_STREAMS_MAX,
      streamsPerOrg: v.SERVICE_CONSOLE_STREAMS_PER_ORG,
      heartbeatMs: v.SERVICE_CONSOLE_HEARTBEAT,
      redisPrefix: v.SERVICE_DECISIONS_REDIS_PREFIX,
      decisionLog: decisionLogUrl === undefined ? null : Object.freeze({ url: decisionLogUrl, authorization: str('SERVICE_DECISION_LOG_AUTHORIZATION') }),
    }),
    audit: Object.freeze({
      enabled: v.SERVICE_AUDIT,
      checkpointRecords: v.SERVICE_AUDIT_CHECKPOINT_RECORDS,
      checkpointIntervalMs: v.SERVICE_AUDIT_CHECKPOINT_INTERVAL,
      allowSample: v.SERVICE_AUDIT_ALLOW_SAMPLE,
    }),
    http: Object.freeze({
      headersTimeoutMs: headersTimeout,
      requestTimeoutMs: v.SERVICE_REQUEST_TIMEOUT_MS,
      keepAliveTimeoutMs: v.SERVICE_KEEP_ALIVE_TIMEOUT_MS,
      maxHeadersCount: v.SERVICE_MAX_HEADERS_COUNT,
    }),
    auth: Object.freeze({
      jwksUrl: str('SERVICE_AUTH_JWKS_URL'),
      issuer: str('SERVICE_AUTH_ISSUER'),
      clerkSecretKey: str('CLERK_SECRET_KEY'),
      clerkJwtKey: str('CLERK_JWT_KEY'),
      webhookSecret: str('CLERK_WEBHOOK_SECRET'),
    }),
    dnsServers: list('SERVICE_DNS_SERVERS'),
    didWebAllowHosts: Object.freeze(allowHosts.map((h) => h.toLowerCase())),
    gateway: Object.freeze({
      enabled: v.SERVICE_UPSTREAM_URL !== undefined || v.SERVICE_ROUTES_FILE !== undefined,
      port: v.SERVICE_GATEWAY_PORT,
      upstreamUrl: str('SERVICE_UPSTREAM_URL'),
      routesFile: str('SERVICE_ROUTES_FILE'),
      upstreamCaseInsensitive: v.SERVICE_UPSTREAM_CASE_INSENSITIVE,
      upstreamCaseSensitive: v.SERVICE_UPSTREAM_CASE_SENSITIVE,
      headersWithUnderscores: v.SERVICE_HEADERS_WITH_UNDERSCORES,
      hideDenyReason: v.SERVICE_HIDE_DENY_REASON,
      upstreamProtocol: v.SERVICE_UPSTREAM_PROTOCOL,
      publicUrl,
      upstreamResourceServer,
      upstreamResource: upstreamResource ?? null,
      upstreamRequireAudience: v.SERVICE_UPSTREAM_REQUIRE_AUDIENCE === true,
      mcpMaxBodyBytes: v.SERVICE_MCP_MAX_BODY_BYTES,
      a2aCardCacheSeconds: v.SERVICE_A2A_CARD_CACHE_SECONDS,
      mcpMetricTools: list('SERVICE_MCP_METRIC_TOOLS'),
      mcpAllowedHosts: v.SERVICE_MCP_ALLOWED_HOSTS === undefined ? null : list('SERVICE_MCP_ALLOWED_HOSTS'),
      mcpAllowedOrigins: v.SERVICE_MCP_ALLOWED_ORIGINS === undefined ? null : list('SERVICE_MCP_ALLOWED_ORIGINS'),
      upstreamTimeoutMs: v.SERVICE_UPSTREAM_TIMEOUT_MS,
      upstreamStreamIdleMs: v.SERVICE_UPSTREAM_STREAM_IDLE_MS,
      requestTimeoutMs: gatewayRequestTimeout,
      maxHeadBytes: v.SERVICE_GATEWAY_MAX_HEAD_BYTES,
      trustedProxies: list('SERVICE_TRUSTED_PROXIES'),
      check,
      registryUrl: str('SERVICE_REGISTRY_URL'),
      registryKey: str('SERVICE_REGISTRY_KEY'),
      embeddedPdp: v.SERVICE_EMBEDDED_PDP,
      pdpEndpoint: str('SERVICE_PDP_ENDPOINT'),
      pdpProtocol: v.SERVICE_PDP_PROTOCOL,
      pdpTimeoutMs: v.SERVICE_PDP_TIMEOUT_MS,
      enforcementMode: v.SERVICE_ENFORCEMENT_MODE,
      workspace: workspace?.toLowerCase() ?? null,
      bundlePollIntervalMs: v.SERVICE_BUNDLE_POLL_INTERVAL,
      bundleStalenessThresholdMs: v.SERVICE_BUNDLE_STALENESS_THRESHOLD,
      breakglassPublicKeyPath: str('SERVICE_BREAKGLASS_PUBLIC_KEY'),
      pepId: str('SERVICE_PEP_ID'),
      workers: workers as number,
      heartbeatIntervalMs: v.SERVICE_GATEWAY_HEARTBEAT_INTERVAL,
      watch: v.SERVICE_GATEWAY_WATCH,
      watchStreamsMax: v.SERVICE_GATEWAY_WATCH_STREAMS_MAX,
      watchHeartbeatMs: v.SERVICE_GATEWAY_WATCH_HEARTBEAT,
      maxChainDepth: v.SERVICE_MAX_CHAIN_DEPTH,
      orgTrustBoundary: str('SERVICE_ORG_TRUST_BOUNDARY'),
      acceptSelfSigned: v.SERVICE_ACCEPT_SELF_SIGNED,
      configuredIssuer: v.CA_ISSUER_URL === undefined ? null : issuerUrl,
      tracing: tracingRequested(env),
      rateLimitRedisPrefix: v.SERVICE_RATE_LIMIT_REDIS_PREFIX,
      rateLimitRedisFallback: (v.SERVICE_RATE_LIMIT_REDIS_FALLBACK as RateLimitFallback | undefined) ?? 'local',
    }),
    unknownVariables: Object.freeze(unknownVariables(env).map((u) => Object.freeze(u))),
  }
  return Object.freeze(config)
}

/** SERVICE_CHECK_*: which check services run and who may ask them; closed by default. */
function checkServices(v: Record<string, unknown>, problems: string[]): Config['gateway']['check'] {
  const grpcPort = (v.SERVICE_CHECK_GRPC_PORT as number | undefined) ?? null
  const httpPort = (v.SERVICE_CHECK_HTTP_PORT as number | undefined) ?? null
  const proxies = (v.SERVICE_CHECK_HTTP_PROXIES as string[] | undefined) ?? []
  for (const proxy of proxies) {
    if (!(CHECK_HTTP_PROXIES as readonly string[]).includes(proxy)) problems.push(`SERVICE_CHECK_HTTP_PROXIES: "${proxy}" is not one of ${CHECK_HTTP_PROXIES.join(', ')}`)
  }
  // Which headers carry the request being checked depends on the proxy: it is configured, never guessed.
  if (httpPort !== null && proxies.length === 0) problems.push('SERVICE_CHECK_HTTP_PROXIES: is required with SERVICE_CHECK_HTTP_PORT (envoy, nginx, traefik)')
  if (httpPort === null && proxies.length > 0) problems.push('SERVICE_CHECK_HTTP_PROXIES: is only for SERVICE_CHECK_HTTP_PORT')
  const prefix = String(v.SERVICE_CHECK_ENVOY_PATH_PREFIX ?? '/envoy')
  if (!/^(\/[A-Za-z0-9._~-]+)+$/.test(prefix)) problems.push('SERVICE_CHECK_ENVOY_PATH_PREFIX: must be a path such as /envoy (segments of letters, digits and ._~-, no trailing /)')
  const peers = (v.SERVICE_CHECK_PEERS as string[] | undefined) ?? ['127.0.0.1', '::1']
  for (const peer of peers) {
    const [address, bits, extra] = peer.split('/')
    const kind = isIP(address ?? '')
    const bitsOk = bits === undefined || (/^[0-9]{1,3}$/.test(bits) && Number(bits) <= (kind === 6 ? 128 : 32))
    if (kind === 0 || !bitsOk || extra !== undefined) problems.push(`SERVICE_CHECK_PEERS: "${peer}" is not an address or CIDR range`)
  }
  const valid = proxies.filter((proxy): proxy is CheckHttpProxy => (CHECK_HTTP_PROXIES as readonly string[]).includes(proxy))
  return Object.freeze({ grpcPort, httpPort, httpProxies: Object.freeze([...new Set(valid)]), envoyPathPrefix: prefix, peers: Object.freeze([...peers]) })
}

/**
 * Variables that look like ours (`SERVICE_` in any case) but are not in `VARIABLES`. Not an error: the
 * environment is shared with other software, but a typo such as `SERVICE_UPSTREAM` would otherwise
 * silently leave a feature off. The suggestion is the nearest known name within a quarter of the
 * name's length (at least 2 edits).
 */
export function unknownVariables(env: NodeJS.ProcessEnv): UnknownVariable[] {
  const known = Object.keys(VARIABLES)
  const out: UnknownVariable[] = []
  for (const name of Object.keys(env).sort()) {
    const upper = name.toUpperCase()
    if (!upper.startsWith('SERVICE_') || Object.prototype.hasOwnProperty.call(VARIABLES, name)) continue
    const limit = Math.max(2, Math.floor(upper.length / 4))
    let suggestion: string | null = null
    let best = Infinity
    for (const candidate of known) {
      const distance = editDistance(upper, candidate)
      if (distance <= limit && distance < best) {
        best = distance
        suggestion = candidate
      }
    }
    out.push({ name, suggestion })
  }
  return out
}

/** One line per unknown variable, as `check-config` prints it and the start-up log words it. */
export function describeUnknownVariable(variable: UnknownVariable): string {
  const name = JSON.stringify(variable.name.slice(0, 100))
  return variable.suggestion === null
    ? `${name} is not a variable this service reads; it is ignored`
    : `${name} is not a variable this service reads; it is ignored (did you mean ${variable.suggestion}?)`
}

/** Markdown rows of the configuration table in docs/operations.md, generated from `VARIABLES`. */
export function configurationTable(): string {
  const rows = Object.entries(VARIABLES as Record<string, VariableSpec>).map(
    ([name, spec]) => `| \`${name}\` | ${spec.default === undefined ? '' : `\`${spec.default}\``} | ${spec.description} |`,
  )
  return ['| Variable | Default | Meaning |', '|---|---|---|', ...rows].join('\n')
}
