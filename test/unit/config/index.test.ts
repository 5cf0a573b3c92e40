import t from 'tap'
import { readFileSync } from 'node:fs'
import fc from 'fast-check'
import { ConfigError, configurationTable, delegationHeadBytes, loadConfig, unknownVariables, VARIABLES } from '../../../src/config/index.js'
import { parseDuration } from '../../../src/core/duration.js'
import { projectPath } from '../../../src/core/paths.js'
import { propertyRuns } from '../../helpers/property-runs.js'

const KEY = `sk_${'A'.repeat(43)}`

t.test('defaults: embedded database in ./data, ports, modes', async (t) => {
  const config = loadConfig({})
  t.equal(config.port, 8080)
  t.equal(config.gateway.port, 8000)
  t.equal(config.database.kind, 'pglite')
  t.match(config.database, { dataDir: /data[/\\]pgdata$/ })
  t.equal(config.issuerUrl, 'http://localhost:8080')
  t.equal(config.registryDidHost, 'localhost%3A8080', 'did:web encodes the port as %3A')
  t.equal(config.gateway.enforcementMode, 'EM-OBSERVE')
  t.equal(config.gateway.pdpTimeoutMs, 500)
  t.equal(config.gateway.bundlePollIntervalMs, 30_000)
  t.equal(config.gateway.bundleStalenessThresholdMs, 300_000)
  t.equal(config.gateway.maxChainDepth, 10)
  t.equal(config.shutdownGraceMs, 20_000)
  t.equal(config.gateway.enabled, false)
  t.ok(Object.isFrozen(config) && Object.isFrozen(config.gateway), 'the config is frozen')
})

t.test('database selection', async (t) => {
  t.same(loadConfig({ DATABASE_URL: 'memory://' }).database, { kind: 'pglite', dataDir: null })
  t.same(loadConfig({ DATABASE_URL: 'postgres://u@h/db' }).database, { kind: 'postgres', url: 'postgres://u@h/db' })
  t.throws(() => loadConfig({ DATABASE_URL: 'mysql://x' }), ConfigError)
  t.throws(() => loadConfig({ ENVIRONMENT: 'production' }), /SERVICE_ALLOW_EMBEDDED_DB/)
  t.equal(loadConfig({ ENVIRONMENT: 'production', SERVICE_ALLOW_EMBEDDED_DB: 'true' }).database.kind, 'pglite')
})

t.test('every problem is reported at once', async (t) => {
  try {
    loadConfig({
      PORT: 'eighty',
      SERVICE_ENFORCEMENT_MODE: 'EM-LOOSE',
      SERVICE_BUNDLE_POLL_INTERVAL: '30 seconds',
      SERVICE_EMBEDDED_PDP: 'maybe',
      SERVICE_WORKSPACE: 'not-a-uuid',
      SERVICE_BOOTSTRAP_API_KEY: 'short',
      REDIS_URL: 'not a url',
      SERVICE_DNS_SERVERS: '1.1.1.1,nonsense',
    })
    t.fail('should throw')
  } catch (error) {
    t.type(error, ConfigError)
    const problems = (error as ConfigError).problems.join('\n')
    for (const name of ['PORT', 'SERVICE_ENFORCEMENT_MODE', 'SERVICE_BUNDLE_POLL_INTERVAL', 'SERVICE_EMBEDDED_PDP', 'SERVICE_WORKSPACE', 'SERVICE_BOOTSTRAP_API_KEY', 'REDIS_URL', 'SERVICE_DNS_SERVERS']) {
      t.match(problems, name, `${name} is named`)
    }
  }
})

t.test('the MCP allowed hosts and origins: unset is the default, set replaces it, a bad entry stops the start', async (t) => {
  t.equal(loadConfig({}).gateway.mcpAllowedHosts, null)
  t.equal(loadConfig({}).gateway.mcpAllowedOrigins, null)
  const set = loadConfig({ SERVICE_MCP_ALLOWED_HOSTS: 'gw.example.com, internal:9000,*', SERVICE_MCP_ALLOWED_ORIGINS: 'https://app.example.com' }).gateway
  t.strictSame(set.mcpAllowedHosts, ['gw.example.com', 'internal:9000', '*'])
  t.strictSame(set.mcpAllowedOrigins, ['https://app.example.com'])
  t.throws(() => loadConfig({ SERVICE_MCP_ALLOWED_HOSTS: 'gw.example.com/mcp' }), /SERVICE_MCP_ALLOWED_HOSTS: "gw.example.com\/mcp" is not a host/)
  t.throws(() => loadConfig({ SERVICE_MCP_ALLOWED_ORIGINS: 'app.example.com' }), /SERVICE_MCP_ALLOWED_ORIGINS: "app.example.com" is not an http or https origin/)
})

t.test('cross-field rules', async (t) => {
  t.throws(() => loadConfig({ SERVICE_EMBEDDED_PDP: 'true' }), /SERVICE_WORKSPACE: is required/)
  t.throws(() => loadConfig({ SERVICE_REGISTRY_URL: 'http://registry:8080' }), /SERVICE_REGISTRY_KEY/)
  const workspace = '7b0c4c1e-4a8e-4c8b-9d7e-3f2a1b0c9d8e'
  t.throws(
    () => loadConfig({ SERVICE_EMBEDDED_PDP: 'true', SERVICE_WORKSPACE: workspace, SERVICE_PDP_ENDPOINT: 'http://pdp:8181' }),
    /SERVICE_PDP_ENDPOINT: cannot be combined with SERVICE_EMBEDDED_PDP/,
  )
  t.equal(loadConfig({ SERVICE_EMBEDDED_PDP: 'true', SERVICE_WORKSPACE: workspace }).gateway.embeddedPdp, true, 'either alone is fine')
  t.equal(loadConfig({ SERVICE_PDP_ENDPOINT: 'http://pdp:8181' }).gateway.pdpEndpoint, 'http://pdp:8181')
  // Gateway-only: the registry names the issuer; the registry URL is never taken for it, CA_ISSUER_URL only pins it.
  t.equal(loadConfig({ SERVICE_REGISTRY_URL: 'http://registry:8080/', SERVICE_REGISTRY_KEY: 'sk_x' }).gateway.configuredIssuer, null)
  t.equal(loadConfig({ SERVICE_REGISTRY_URL: 'http://registry:8080', SERVICE_REGISTRY_KEY: 'sk_x', CA_ISSUER_URL: 'https://ca.example.com/' }).gateway.configuredIssuer, 'https://ca.example.com')
  t.equal(loadConfig({}).gateway.hideDenyReason, false, 'deny reasons are shown by default')
  t.equal(loadConfig({ SERVICE_HIDE_DENY_REASON: 'true' }).gateway.hideDenyReason, true)
  t.throws(() => loadConfig({ SERVICE_HIDE_DENY_REASON: 'yes' }), /SERVICE_HIDE_DENY_REASON: must be true or false/)
  t.equal(loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }).gateway.tracing, true)
  t.equal(loadConfig({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318', OTEL_SDK_DISABLED: 'true' }).gateway.tracing, false)
  t.equal(loadConfig({ OTEL_TRACES_EXPORTER: 'none', OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' }).gateway.tracing, false)
  t.equal(loadConfig({}).gateway.tracing, false)
  t.throws(() => loadConfig({ ENVIRONMENT: 'production', DATABASE_URL: 'postgres://h/db', SERVICE_DID_WEB_ALLOW_HOSTS: 'test.local' }), /refused when ENVIRONMENT=production/)
  t.throws(() => loadConfig({ ENVIRONMENT: 'production', DATABASE_URL: 'postgres://h/db', CA_ISSUER_URL: 'http://registry.example.com' }), /https/)
  t.throws(() => loadConfig({ PORT: '70000' }), /PORT/)
  for (const bad of ['999.1.1.1', '[:::]', '1.2.3.4:0', '1.2.3.4:70000', 'dns.example.com', '[1.2.3.4]:53']) {
    t.throws(() => loadConfig({ SERVICE_DNS_SERVERS: bad }), /SERVICE_DNS_SERVERS/, `${bad} is refused`)
  }
  t.same(loadConfig({ SERVICE_DNS_SERVERS: '::1,[::1]:5353,10.0.0.1:53' }).dnsServers, ['::1', '[::1]:5353', '10.0.0.1:53'])
})

t.test('the fleet\'s rate limits in Redis: the fallback is local by default, one of three, and only with REDIS_URL', async (t) => {
  const redis = { REDIS_URL: 'redis://127.0.0.1:6379' }
  t.match(loadConfig(redis).gateway, { rateLimitRedisFallback: 'local', rateLimitRedisPrefix: 'agent-trust:ratelimit:' })
  for (const fallback of ['local', 'deny', 'allow']) {
    t.equal(loadConfig({ ...redis, SERVICE_RATE_LIMIT_REDIS_FALLBACK: fallback }).gateway.rateLimitRedisFallback, fallback)
  }
  t.throws(() => loadConfig({ ...redis, SERVICE_RATE_LIMIT_REDIS_FALLBACK: 'drop' }), /SERVICE_RATE_LIMIT_REDIS_FALLBACK: must be one of local, deny, allow/)
  t.throws(() => loadConfig({ SERVICE_RATE_LIMIT_REDIS_FALLBACK: 'deny' }), /SERVICE_RATE_LIMIT_REDIS_FALLBACK: is only for REDIS_URL/, 'a fallback without Redis is refused')
  t.equal(loadConfig({ ...redis, SERVICE_RATE_LIMIT_REDIS_PREFIX: 'fleet-a:' }).gateway.rateLimitRedisPrefix, 'fleet-a:')
})

t.test('typed values', async (t) => {
  const config = loadConfig({
    SERVICE_BOOTSTRAP_API_KEY: KEY,
    SERVICE_EMBEDDED_PDP: 'TRUE',
    SERVICE_WORKSPACE: 'A3F1C2D4-0000-4000-8000-000000000001',
    SERVICE_UPSTREAM_URL: 'http://127.0.0.1:9000',
    SERVICE_DNS_SERVERS: '127.0.0.1:5353, 8.8.8.8',
    CA_ISSUER_URL: 'https://registry.example.com/',
    SERVICE_BUNDLE_STALENESS_THRESHOLD: '1h',
    REDIS_URL: 'redis://127.0.0.1:6379',
    PORT: '',
  })
  t.equal(config.bootstrapApiKey, KEY)
  t.equal(config.gateway.embeddedPdp, true)
  t.equal(config.gateway.workspace, 'a3f1c2d4-0000-4000-8000-000000000001', 'workspace is normalized to lower case')
  t.equal(config.gateway.enabled, true, 'an upstream starts the gateway')
  t.same(config.dnsServers, ['127.0.0.1:5353', '8.8.8.8'])
  t.equal(config.issuerUrl, 'https://registry.example.com', 'trailing slash dropped')
  t.equal(config.registryDidHost, 'registry.example.com')
  t.equal(config.gateway.bundleStalenessThresholdMs, 3_600_000)
  t.equal(config.port, 8080, 'an empty variable means unset')
  t.equal(config.redisUrl, 'redis://127.0.0.1:6379', 'REDIS_URL takes redis:// URLs')
  t.throws(() => loadConfig({ REDIS_URL: 'http://127.0.0.1:6379' }), /REDIS_URL: must be a redis or rediss URL/)
})

t.test('durations', async (t) => {
  t.equal(parseDuration('500ms'), 500)
  t.equal(parseDuration('30s'), 30_000)
  t.equal(parseDuration('5m'), 300_000)
  t.equal(parseDuration('1h'), 3_600_000)
  for (const bad of ['', '0s', '1.5s', '5', '5 m', '1d', '-1s', '1h30m']) t.equal(parseDuration(bad), undefined, `"${bad}" is refused`)
})

t.test('the configuration table lists every variable', async (t) => {
  const table = configurationTable()
  for (const name of Object.keys(VARIABLES)) t.match(table, `\`${name}\``)
})

t.test('slow-client limits: defaults, explicit values, the gateway default and the order check', async (t) => {
  const defaults = loadConfig({})
  t.same(defaults.http, { headersTimeoutMs: 10_000, requestTimeoutMs: 30_000, keepAliveTimeoutMs: 5_000, maxHeadersCount: 100 })
  t.ok(Object.isFrozen(defaults.http), 'frozen like the rest')
  t.equal(defaults.gateway.requestTimeoutMs, 10_000 + 500 + 30_000, 'gateway default: head + PDP + upstream time-outs')
  t.equal(
    loadConfig({ SERVICE_HEADERS_TIMEOUT_MS: '2000', SERVICE_PDP_TIMEOUT_MS: '1000', SERVICE_UPSTREAM_TIMEOUT_MS: '60000' }).gateway.requestTimeoutMs,
    63_000, 'the default follows the three variables',
  )
  const set = loadConfig({
    SERVICE_HEADERS_TIMEOUT_MS: '1500',
    SERVICE_REQUEST_TIMEOUT_MS: '4000',
    SERVICE_GATEWAY_REQUEST_TIMEOUT_MS: '900000',
    SERVICE_KEEP_ALIVE_TIMEOUT_MS: '65000',
    SERVICE_MAX_HEADERS_COUNT: '50',
  })
  t.same(set.http, { headersTimeoutMs: 1500, requestTimeoutMs: 4000, keepAliveTimeoutMs: 65_000, maxHeadersCount: 50 })
  t.equal(set.gateway.requestTimeoutMs, 900_000, 'an explicit gateway limit wins over the derived one')

  for (const [name, bad] of [
    ['SERVICE_HEADERS_TIMEOUT_MS', '10s'], ['SERVICE_HEADERS_TIMEOUT_MS', '0'], ['SERVICE_REQUEST_TIMEOUT_MS', '700000'],
    ['SERVICE_GATEWAY_REQUEST_TIMEOUT_MS', '-1'], ['SERVICE_GATEWAY_REQUEST_TIMEOUT_MS', '3600001'],
    ['SERVICE_KEEP_ALIVE_TIMEOUT_MS', 'forever'], ['SERVICE_MAX_HEADERS_COUNT', '5'], ['SERVICE_MAX_HEADERS_COUNT', '2001'],
  ] as const) {
    t.throws(() => loadConfig({ [name]: bad }), new RegExp(`${name}: `), `${name}=${bad} is refused`)
  }
  t.throws(() => loadConfig({ SERVICE_HEADERS_TIMEOUT_MS: '40000' }), /SERVICE_HEADERS_TIMEOUT_MS: must not exceed SERVICE_REQUEST_TIMEOUT_MS/)
  t.throws(
    () => loadConfig({ SERVICE_HEADERS_TIMEOUT_MS: '5000', SERVICE_GATEWAY_REQUEST_TIMEOUT_MS: '4000' }),
    /SERVICE_HEADERS_TIMEOUT_MS: must not exceed SERVICE_GATEWAY_REQUEST_TIMEOUT_MS/,
  )
  t.equal(loadConfig({ SERVICE_HEADERS_TIMEOUT_MS: '30000' }).http.headersTimeoutMs, 30_000, 'equal limits are allowed')
})

t.test('gateway request head: 64 KiB by default, and never smaller than a chain of SERVICE_MAX_CHAIN_DEPTH needs', async (t) => {
  t.equal(loadConfig({}).gateway.maxHeadBytes, 64 * 1024)
  t.equal(loadConfig({ SERVICE_GATEWAY_MAX_HEAD_BYTES: '200000' }).gateway.maxHeadBytes, 200_000)
  t.ok(delegationHeadBytes(10) <= 64 * 1024, 'the defaults fit together')
  t.ok(delegationHeadBytes(11) > delegationHeadBytes(10), 'a deeper chain needs more')
  for (const bad of ['16383', '1048577', '64k', '-1']) {
    t.throws(() => loadConfig({ SERVICE_GATEWAY_MAX_HEAD_BYTES: bad }), /SERVICE_GATEWAY_MAX_HEAD_BYTES: /, `${bad} is refused`)
  }
  // The deepest chain the default head holds, and one envelope more.
  const deepest = Array.from({ length: 64 }, (_, i) => i + 1).filter((depth) => delegationHeadBytes(depth) <= 64 * 1024).at(-1) as number
  t.equal(loadConfig({ SERVICE_MAX_CHAIN_DEPTH: String(deepest) }).gateway.maxChainDepth, deepest, `depth ${deepest} fits the default head`)
  t.throws(
    () => loadConfig({ SERVICE_MAX_CHAIN_DEPTH: String(deepest + 1) }),
    new RegExp(`SERVICE_GATEWAY_MAX_HEAD_BYTES: 65536 is too small for a delegation chain of SERVICE_MAX_CHAIN_DEPTH=${deepest + 1} envelopes.*at least ${delegationHeadBytes(deepest + 1)}`),
    'one envelope deeper needs a larger head limit',
  )
  t.equal(loadConfig({ SERVICE_MAX_CHAIN_DEPTH: '64', SERVICE_GATEWAY_MAX_HEAD_BYTES: String(delegationHeadBytes(64)) }).gateway.maxChainDepth, 64, 'a larger limit allows the deepest chain')
  t.throws(() => loadConfig({ SERVICE_MAX_CHAIN_DEPTH: '10', SERVICE_GATEWAY_MAX_HEAD_BYTES: '20000' }), /SERVICE_GATEWAY_MAX_HEAD_BYTES: 20000 is too small/)
})

t.test('the configuration table of docs/operations.md is the generated one, and the only copy', async (t) => {
  const operations = readFileSync(projectPath('docs', 'operations.md'), 'utf8')
  const start = operations.indexOf('| Variable | Default | Meaning |')
  t.not(start, -1, 'docs/operations.md has the table')
  const rows: string[] = []
  for (const line of operations.slice(start).split('\n')) {
    if (!line.startsWith('|')) break
    rows.push(line)
  }
  t.equal(rows.join('\n'), configurationTable(), 'docs/operations.md matches `agent-trust check-config --table` (regenerate it)')
  t.notOk(readFileSync(projectPath('README.md'), 'utf8').includes('| Variable | Default | Meaning |'), 'the README links to it instead of keeping a copy')
})

const FC = propertyRuns(200)
const BOOL_VARIABLES = Object.entries(VARIABLES).filter(([, spec]) => spec.kind === 'bool').map(([name]) => name)

t.test('booleans accept only true and false, as the error message says', async (t) => {
  for (const word of ['yes', 'no', '1', '0', 'on', 'off', 'y', 'enabled']) {
    t.throws(() => loadConfig({ SERVICE_EMBEDDED_PDP: word, SERVICE_WORKSPACE: 'a3f1c2d4-0000-4000-8000-000000000001' }),
      /SERVICE_EMBEDDED_PDP: must be true or false/, `SERVICE_EMBEDDED_PDP=${word} is refused`)
  }
  t.equal(loadConfig({ SERVICE_ACCEPT_SELF_SIGNED: 'True' }).gateway.acceptSelfSigned, true, 'case does not matter')
  t.equal(loadConfig({ SERVICE_ACCEPT_SELF_SIGNED: ' false ' }).gateway.acceptSelfSigned, false, 'surrounding blanks do not matter')
  // Any other value of any boolean variable is a configuration error naming that variable.
  fc.assert(fc.property(
    fc.constantFrom(...BOOL_VARIABLES),
    fc.oneof(
      // The words other parsers take for booleans, in any case, then anything at all.
      fc.tuple(fc.constantFrom('yes', 'no', 'y', 'n', '1', '0', 'on', 'off', 't', 'f', 'enable', 'disabled'), fc.boolean())
        .map(([word, upper]) => (upper ? word.toUpperCase() : word)),
      fc.string({ minLength: 1, maxLength: 12 }),
    ).filter((raw) => raw.trim() !== '' && !['true', 'false'].includes(raw.trim().toLowerCase())),
    (name, raw) => {
      try {
        loadConfig({ [name]: raw })
        return false
      } catch (error) {
        return error instanceof ConfigError && error.problems.includes(`${name}: must be true or false`)
      }
    },
  ), FC)
})

t.test('unknown SERVICE_* variables are reported with the nearest known name, and are not errors', async (t) => {
  const config = loadConfig({ SERVICE_UPSTREAM: 'http://127.0.0.1:9000', SERVICE_WORKSPAC: 'x', SERVICE_COLOUR: 'blue', OTHER_THING: '1', PORT: '8080' })
  t.same(config.unknownVariables, [
    { name: 'SERVICE_COLOUR', suggestion: null },
    { name: 'SERVICE_UPSTREAM', suggestion: 'SERVICE_UPSTREAM_URL' },
    { name: 'SERVICE_WORKSPAC', suggestion: 'SERVICE_WORKSPACE' },
  ])
  t.equal(config.gateway.enabled, false, 'the typo does not start the gateway')
  t.same(unknownVariables({ service_workspace: 'x' }), [{ name: 'service_workspace', suggestion: 'SERVICE_WORKSPACE' }], 'a lower-case name is ours too')
  t.same(loadConfig({ SERVICE_GATEWAY_PORT: '0' }).unknownVariables, [], 'known names are not reported')

  // One edit (drop, double or change a character) of any known SERVICE_ name suggests a name at most
  // one edit away, and never passes as known.
  const names = Object.keys(VARIABLES).filter((name) => name.startsWith('SERVICE_'))
  fc.assert(fc.property(
    fc.constantFrom(...names), fc.nat(), fc.constantFrom('drop', 'double', 'change'), fc.constantFrom(...'ABCDEFGHIJKLMNOPQRSTUVWXYZ_'),
    (name, at, edit, letter) => {
      const i = 'SERVICE_'.length + (at % (name.length - 'SERVICE_'.length))
      const typo = edit === 'drop' ? name.slice(0, i) + name.slice(i + 1)
        : edit === 'double' ? name.slice(0, i) + name[i] + name.slice(i)
          : name.slice(0, i) + letter + name.slice(i + 1)
      if (Object.prototype.hasOwnProperty.call(VARIABLES, typo)) return true
      const [found] = unknownVariables({ [typo]: 'x' })
      return found !== undefined && found.name === typo && found.suggestion !== null
    },
  ), FC)
})

t.test('the gateway public URL: default, trailing slash, production rules', async (t) => {
  t.equal(loadConfig({}).gateway.publicUrl, 'http://localhost:8000', 'default: localhost on the gateway port')
  t.equal(loadConfig({ SERVICE_GATEWAY_PORT: '9100' }).gateway.publicUrl, 'http://localhost:9100')
  t.equal(loadConfig({ SERVICE_GATEWAY_PUBLIC_URL: 'https://gw.example.com//' }).gateway.publicUrl, 'https://gw.example.com', 'trailing slashes removed')
  t.equal(loadConfig({ SERVICE_GATEWAY_PUBLIC_URL: 'https://example.com/gw/' }).gateway.publicUrl, 'https://example.com/gw', 'a path is kept')
  t.throws(() => loadConfig({ SERVICE_GATEWAY_PUBLIC_URL: 'ftp://gw' }), /SERVICE_GATEWAY_PUBLIC_URL: must be a http or https URL/)
  t.throws(() => loadConfig({ SERVICE_GATEWAY_PUBLIC_URL: 'https://gw/?x=1' }), /SERVICE_GATEWAY_PUBLIC_URL: must not carry a query/)
  t.throws(() => loadConfig({ SERVICE_GATEWAY_PUBLIC_URL: 'https://gw/#f' }), /SERVICE_GATEWAY_PUBLIC_URL: must not carry a fragment/)
  t.throws(() => loadConfig({ SERVICE_GATEWAY_PUBLIC_URL: 'https://u:p@gw' }), /SERVICE_GATEWAY_PUBLIC_URL: must not carry credentials/)
  const production = { ENVIRONMENT: 'production', DATABASE_URL: 'postgres://h/db', CA_ISSUER_URL: 'https://ca.example.com' }
  t.throws(() => loadConfig({ ...production, SERVICE_GATEWAY_PUBLIC_URL: 'http://gw.example.com' }), /SERVICE_GATEWAY_PUBLIC_URL: must be https:\/\/ when ENVIRONMENT=production/)
  t.throws(() => loadConfig({ ...production, SERVICE_GATEWAY_PUBLIC_URL: 'http://localhost:8000' }), /must be https:\/\//, 'loopback too')
  t.equal(loadConfig({ ...production, SERVICE_GATEWAY_PUBLIC_URL: 'https://gw.example.com' }).gateway.publicUrl, 'https://gw.example.com')
  t.equal(loadConfig(production).gateway.publicUrl, null, 'production has no default')
  t.equal(loadConfig({ ...production, SERVICE_UPSTREAM_URL: 'http://up' }).gateway.upstreamResourceServer, false, 'an HTTP upstream needs no public URL')
  t.throws(
    () => loadConfig({ ...production, SERVICE_UPSTREAM_URL: 'http://up', SERVICE_UPSTREAM_PROTOCOL: 'mcp' }),
    /SERVICE_GATEWAY_PUBLIC_URL: is required when ENVIRONMENT=production and the SERVICE_UPSTREAM_URL route is a resource server/,
  )
  t.throws(
    () => loadConfig({ ...production, SERVICE_UPSTREAM_URL: 'http://up', SERVICE_UPSTREAM_RESOURCE_SERVER: 'true', SERVICE_UPSTREAM_RESOURCE: 'https://api.example.com' }),
    /SERVICE_GATEWAY_PUBLIC_URL: is required/, 'even with a resource of its own',
  )
  t.equal(
    loadConfig({ ...production, SERVICE_UPSTREAM_URL: 'http://up', SERVICE_UPSTREAM_PROTOCOL: 'mcp', SERVICE_UPSTREAM_RESOURCE_SERVER: 'false' }).gateway.upstreamResourceServer,
    false, 'an MCP upstream that is not a resource server needs none',
  )
})

t.test('the SERVICE_UPSTREAM_URL route as a resource server', async (t) => {
  const plain = loadConfig({ SERVICE_UPSTREAM_URL: 'http://up' }).gateway
  t.same([plain.upstreamResourceServer, plain.upstreamResource, plain.upstreamRequireAudience], [false, null, false], 'HTTP: not by default')
  const mcp = loadConfig({ SERVICE_UPSTREAM_URL: 'http://up', SERVICE_UPSTREAM_PROTOCOL: 'mcp' }).gateway
  t.same([mcp.upstreamResourceServer, mcp.upstreamResource, mcp.upstreamRequireAudience], [true, null, false], 'MCP: by default')
  const a2a = loadConfig({ SERVICE_UPSTREAM_URL: 'http://up', SERVICE_UPSTREAM_PROTOCOL: 'a2a' }).gateway
  t.same([a2a.upstreamProtocol, a2a.upstreamResourceServer], ['a2a', false], 'A2A: a protocol of its own, not a resource server by default')
  const set = loadConfig({
    SERVICE_UPSTREAM_URL: 'http://up', SERVICE_UPSTREAM_RESOURCE_SERVER: 'true', SERVICE_UPSTREAM_RESOURCE: 'https://api.example.com/v1', SERVICE_UPSTREAM_REQUIRE_AUDIENCE: 'true',
  }).gateway
  t.same([set.upstreamResourceServer, set.upstreamResource, set.upstreamRequireAudience], [true, 'https://api.example.com/v1', true])
  t.throws(() => loadConfig({ SERVICE_UPSTREAM_RESOURCE_SERVER: 'yes' }), /SERVICE_UPSTREAM_RESOURCE_SERVER: must be true or false/)
  t.throws(() => loadConfig({ SERVICE_UPSTREAM_RESOURCE_SERVER: 'true', SERVICE_UPSTREAM_RESOURCE: 'https://a/x?y' }), /SERVICE_UPSTREAM_RESOURCE: must not carry a query/)
  t.throws(() => loadConfig({ SERVICE_UPSTREAM_RESOURCE_SERVER: 'true', SERVICE_UPSTREAM_RESOURCE: 'https://a/x#y' }), /SERVICE_UPSTREAM_RESOURCE: must not carry a fragment/)
  t.throws(() => loadConfig({ SERVICE_UPSTREAM_RESOURCE_SERVER: 'true', SERVICE_UPSTREAM_RESOURCE: 'urn:x' }), /SERVICE_UPSTREAM_RESOURCE: must be a http or https URL/)
  t.throws(() => loadConfig({ SERVICE_UPSTREAM_RESOURCE: 'https://a/x' }), /SERVICE_UPSTREAM_RESOURCE: is only for a resource-server route/)
  t.throws(() => loadConfig({ SERVICE_UPSTREAM_REQUIRE_AUDIENCE: 'false' }), /SERVICE_UPSTREAM_REQUIRE_AUDIENCE: is only for a resource-server route/)
  t.throws(
    () => loadConfig({ SERVICE_UPSTREAM_PROTOCOL: 'mcp', SERVICE_UPSTREAM_RESOURCE_SERVER: 'false', SERVICE_UPSTREAM_REQUIRE_AUDIENCE: 'true' }),
    /SERVICE_UPSTREAM_REQUIRE_AUDIENCE: is only for a resource-server route/, 'an MCP route that opted out',
  )
  try {
    loadConfig({
      ENVIRONMENT: 'production', DATABASE_URL: 'postgres://h/db', SERVICE_UPSTREAM_URL: 'http://up', SERVICE_UPSTREAM_PROTOCOL: 'mcp',
      SERVICE_UPSTREAM_RESOURCE: 'https://a/#x', SERVICE_GATEWAY_PUBLIC_URL: 'http://gw',
    })
    t.fail('should throw')
  } catch (error) {
    const problems = (error as ConfigError).problems
    t.match(problems, [/SERVICE_GATEWAY_PUBLIC_URL: must be https/, /SERVICE_UPSTREAM_RESOURCE: must not carry a fragment/], 'every problem at once')
    t.equal(problems.length, 2)
  }
})

t.test('console session lifetimes: durations, idle within the maximum', async (t) => {
  t.match(loadConfig({}).console, { sessionIdleMs: 30 * 60_000, sessionMaxMs: 8 * 3_600_000 }, 'defaults 30m and 8h')
  t.match(loadConfig({ SERVICE_CONSOLE_SESSION_IDLE: '90s', SERVICE_CONSOLE_SESSION_MAX: '2h' }).console, { sessionIdleMs: 90_000, sessionMaxMs: 7_200_000 })
  t.throws(() => loadConfig({ SERVICE_CONSOLE_SESSION_IDLE: 'soon' }), /SERVICE_CONSOLE_SESSION_IDLE: must be a duration/)
  t.throws(() => loadConfig({ SERVICE_CONSOLE_SESSION_IDLE: '2h', SERVICE_CONSOLE_SESSION_MAX: '1h' }), /SERVICE_CONSOLE_SESSION_IDLE: must not exceed SERVICE_CONSOLE_SESSION_MAX/)
})

t.test('gateway workers: 1 by default, a count up to 64, or auto (the available parallelism, at most 64)', async (t) => {
  const { availableParallelism } = await import('node:os')
  t.equal(loadConfig({}).gateway.workers, 1, 'one process by default')
  t.equal(loadConfig({ SERVICE_GATEWAY_WORKERS: '4' }).gateway.workers, 4)
  t.equal(loadConfig({ SERVICE_GATEWAY_WORKERS: '64' }).gateway.workers, 64)
  t.equal(loadConfig({ SERVICE_GATEWAY_WORKERS: 'AUTO' }).gateway.workers, Math.min(availableParallelism(), 64))
  for (const bad of ['0', '65', '-1', '1.5', '2x', 'all', '0x2', '1e1']) {
    t.throws(() => loadConfig({ SERVICE_GATEWAY_WORKERS: bad }), /SERVICE_GATEWAY_WORKERS: must be a whole number from 1 to 64, or auto/, `${bad} is refused`)
  }
})
