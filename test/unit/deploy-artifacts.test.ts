/**
 * The container and deployment artifacts (Dockerfile, .dockerignore, deploy/) checked against the code
 * they describe: no Docker daemon is needed. A metric renamed in src/telemetry/metrics.ts, a label
 * dropped, an environment variable the config now refuses, or a file the Dockerfile copies that moved
 * makes this file fail instead of a dashboard going blank or an image failing at start-up.
 */
import t, { type Test } from 'tap'
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import path from 'node:path'
import { parseAllDocuments, parse as parseYaml } from 'yaml'
import { createMetrics } from '../../src/telemetry/metrics.js'
import { loadConfig } from '../../src/config/index.js'
import { PROJECT_ROOT } from '../../src/core/paths.js'
import { NODE_FLAGS } from '../../src/node-flags.js'

const ROOT = PROJECT_ROOT
const DEPLOY = path.join(ROOT, 'deploy')
const read = (...p: string[]): string => readFileSync(path.join(ROOT, ...p), 'utf8')

type Doc = Record<string, any> // eslint-disable-line @typescript-eslint/no-explicit-any

function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const full = path.join(dir, name)
    return statSync(full).isDirectory() ? filesUnder(full) : [full]
  })
}

// ---------------------------------------------------------------------------------------------------
// The registry the code builds: metric names, types and label names.
interface MetricInfo { readonly type: string; readonly labels: ReadonlySet<string> }

async function registryMetrics(): Promise<Map<string, MetricInfo>> {
  const { registry } = createMetrics()
  const out = new Map<string, MetricInfo>()
  for (const m of await registry.getMetricsAsJSON()) {
    const labelNames = (registry.getSingleMetric(m.name) as unknown as { labelNames?: string[] }).labelNames ?? []
    out.set(m.name, { type: String(m.type), labels: new Set(labelNames) })
  }
  return out
}

/** Labels Prometheus adds to every series it scrapes. */
const TARGET_LABELS = ['job', 'instance']
const HISTOGRAM_SUFFIXES = ['_bucket', '_sum', '_count'] as const

/** The labels a series name carries, or null when the code exports no such series. */
function seriesLabels(metrics: Map<string, MetricInfo>, name: string): Set<string> | null {
  if (name === 'up') return new Set(TARGET_LABELS)
  const direct = metrics.get(name)
  if (direct !== undefined) return new Set([...direct.labels, ...TARGET_LABELS])
  for (const suffix of HISTOGRAM_SUFFIXES) {
    if (!name.endsWith(suffix)) continue
    const base = metrics.get(name.slice(0, -suffix.length))
    if (base?.type === 'histogram') return new Set([...base.labels, ...TARGET_LABELS, ...(suffix === '_bucket' ? ['le'] : [])])
  }
  return null
}

// ---------------------------------------------------------------------------------------------------
// A small PromQL reader: enough for selectors, grouping clauses and metric names.
interface ParsedExpr {
  readonly metrics: string[]
  readonly selectors: { metric: string; label: string; op: string; value: string }[]
  readonly groupings: string[][]
}

const KEYWORDS = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'and', 'or', 'unless', 'bool', 'offset', 'inf', 'nan'])

function parsePromql(expr: string): ParsedExpr {
  const selectors: ParsedExpr['selectors'] = []
  const groupings: string[][] = []
  let rest = expr.replace(/\[[^\]]*\]/g, ' ') // range and subquery durations ($__rate_interval, 5m)
  rest = rest.replace(/([a-zA-Z_:][\w:]*)?\s*\{([^}]*)\}/g, (_all, metric: string | undefined, body: string) => {
    for (const m of body.matchAll(/([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"/g)) {
      selectors.push({ metric: metric ?? '', label: m[1] as string, op: m[2] as string, value: m[3] as string })
    }
    return metric === undefined ? ' ' : ` ${metric} `
  })
  rest = rest.replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)/g, (_all, _kw, list: string) => {
    groupings.push(list.split(',').map((s) => s.trim()).filter((s) => s !== ''))
    return ' '
  })
  rest = rest.replace(/"(?:[^"\\]|\\.)*"/g, ' ')
  const metrics: string[] = []
  for (const m of rest.matchAll(/(?<![\w.])([a-zA-Z_:][\w:]*)(?![\w:])(?!\s*\()/g)) {
    const name = m[1] as string
    if (!KEYWORDS.has(name.toLowerCase())) metrics.push(name)
  }
  return { metrics, selectors, groupings }
}

/** Label values the code emits from a fixed set (src/gateway/server.ts, src/admin/app.ts). */
const KNOWN_VALUES: Record<string, Record<string, RegExp>> = {
  service_gateway_requests_total: { decision: /^(ALLOW|DENY|ALLOW_OBSERVE|NONE)$/, status_class: /^[1-5]xx$/, mode: /^EM-(OBSERVE|GUARD|DELEGATE|STRICT)$/ },
  service_admin_requests_total: { status_class: /^[1-5]xx$/ },
  service_gateway_cache_lookups_total: { cache: /^(badge|decision)$/, result: /^(hit|miss)$/ },
  service_breakglass_total: { result: /^(accepted|not_configured|[a-z_]+)$/ },
}

/**
 * Checks one expression; `outputLabels` (legend `{{x}}`, alert `$labels.x`) must survive its grouping.
 * Returns the metric names it references.
 */
function checkExpression(
  t: Test, metrics: Map<string, MetricInfo>, where: string, expr: string, outputLabels: string[] = [],
): string[] {
  const parsed = parsePromql(expr)
  t.ok(parsed.metrics.length > 0, `${where}: references a metric`)
  const union = new Set<string>()
  for (const name of parsed.metrics) {
    const labels = seriesLabels(metrics, name)
    t.ok(labels !== null, `${where}: ${name} is exported by the code`)
    for (const l of labels ?? []) union.add(l)
  }
  for (const s of parsed.selectors) {
    const labels = s.metric === '' ? union : seriesLabels(metrics, s.metric)
    if (labels === null) continue
    t.ok(labels.has(s.label), `${where}: ${s.metric} has label ${s.label}`)
    const base = s.metric.replace(/_(bucket|sum|count)$/, '')
    const known = KNOWN_VALUES[s.metric]?.[s.label] ?? KNOWN_VALUES[base]?.[s.label]
    if (known !== undefined && s.op === '=' ) t.match(s.value, known, `${where}: ${s.label}="${s.value}" is a value the code emits`)
  }
  for (const group of parsed.groupings) {
    for (const label of group) t.ok(union.has(label), `${where}: grouping label ${label} belongs to the expression's metrics`)
  }
  for (const label of outputLabels) {
    const kept = parsed.groupings.length === 0 ? union.has(label) : parsed.groupings.every((g) => g.includes(label))
    t.ok(kept, `${where}: label ${label} used in the output survives the expression`)
  }
  return parsed.metrics
}

// Template references only, never `$__rate_interval`-style Grafana built-ins.
const legendLabels = (legend: string | undefined): string[] => [...(legend ?? '').matchAll(/\{\{\s*([a-zA-Z_]\w*)\s*\}\}/g)].map((m) => m[1] as string)
const alertLabels = (text: string): string[] => [...text.matchAll(/\$labels\.([a-zA-Z_]\w*)/g)].map((m) => m[1] as string)

// ---------------------------------------------------------------------------------------------------

t.test('every YAML and JSON file under deploy/ parses', async (t) => {
  const files = filesUnder(DEPLOY).filter((f) => /\.(ya?ml|json)$/.test(f))
  t.ok(files.length >= 6, 'compose, collector, prometheus, alerts, dashboard, provisioning')
  for (const file of files) {
    const text = readFileSync(file, 'utf8')
    if (file.endsWith('.json')) {
      t.doesNotThrow(() => JSON.parse(text), path.relative(ROOT, file))
    } else {
      const docs = parseAllDocuments(text)
      const errors = (Array.isArray(docs) ? docs : [docs]).flatMap((d) => d.errors.map((e) => e.message))
      t.same(errors, [], path.relative(ROOT, file))
    }
  }
})

t.test('the self-test of the PromQL reader', async (t) => {
  const p = parsePromql('histogram_quantile(0.99, sum by (pdp, le) (rate(service_pdp_request_duration_seconds_bucket{job="$job", instance=~"$instance"}[$__rate_interval]))) > 0.25 and up == 1')
  t.same(p.metrics, ['service_pdp_request_duration_seconds_bucket', 'up'])
  t.same(p.groupings, [['pdp', 'le']])
  t.same(p.selectors.map((s) => s.label), ['job', 'instance'])
})

t.test('Grafana dashboard: metrics and labels exist in the registry', async (t) => {
  const metrics = await registryMetrics()
  const dashboard = JSON.parse(read('deploy', 'grafana-dashboard.json')) as Doc
  const panels = (dashboard.panels as Doc[]).flatMap((p) => [p, ...((p.panels as Doc[] | undefined) ?? [])])
  const referenced = new Set<string>()
  let targets = 0
  for (const panel of panels.filter((p) => p.type !== 'row')) {
    t.ok(Array.isArray(panel.targets) && panel.targets.length > 0, `panel "${panel.title}" has queries`)
    for (const target of panel.targets as Doc[]) {
      targets += 1
      t.equal(target.datasource?.uid ?? panel.datasource?.uid, 'prometheus', `panel "${panel.title}" uses the provisioned data source`)
      for (const m of checkExpression(t, metrics, `panel "${panel.title}"`, String(target.expr), legendLabels(target.legendFormat))) referenced.add(m)
    }
  }
  t.ok(targets >= 15, `the dashboard has its queries (${targets})`)

  // Every metric the service defines itself has a panel: a new metric without one fails here.
  const own = [...metrics.keys()].filter((n) => !/^service_(process|nodejs)_/.test(n))
  t.ok(own.length >= 10, 'the registry holds the admin and gateway metrics')
  for (const name of own) {
    const shown = [...referenced].some((r) => r === name || HISTOGRAM_SUFFIXES.some((s) => r === `${name}${s}`))
    t.ok(shown, `${name} is on the dashboard`)
  }
  for (const name of ['service_process_resident_memory_bytes', 'service_nodejs_eventloop_lag_p99_seconds']) {
    t.ok(referenced.has(name), `process panel shows ${name}`)
  }
  t.ok([...referenced].some((r) => r === 'service_pdp_request_duration_seconds_bucket'), 'PDP latency comes from the histogram buckets')
  const exprs = panels.flatMap((p) => ((p.targets as Doc[] | undefined) ?? []).map((x) => String(x.expr)))
  t.ok(exprs.some((e) => /histogram_quantile\(0\.99,[^]*service_pdp_request_duration_seconds_bucket/.test(e)), 'PDP p99')
  t.ok(exprs.some((e) => /histogram_quantile\(0\.5,[^]*service_pdp_request_duration_seconds_bucket/.test(e)), 'PDP p50')
  t.ok(exprs.some((e) => /histogram_quantile\(0\.99,[^]*service_gateway_request_duration_seconds_bucket/.test(e)), 'gateway p99')

  const provisioned = parseYaml(read('deploy', 'grafana', 'provisioning', 'datasources', 'prometheus.yaml')) as Doc
  t.equal(provisioned.datasources[0].uid, 'prometheus', 'the provisioned data source has the uid the dashboard uses')
})

t.test('Prometheus alert rules: metrics, labels and the required alerts', async (t) => {
  const metrics = await registryMetrics()
  const rules = (parseYaml(read('deploy', 'prometheus-alerts.yaml')) as Doc).groups.flatMap((g: Doc) => g.rules as Doc[]) as Doc[]
  const byName = new Map(rules.map((r) => [String(r.alert), r]))
  const required: Record<string, RegExp> = {
    ServiceInstanceDown: /\bup\b/,
    ServicePdpUnavailable: /service_pdp_unavailable_total/,
    ServiceBundleStale: /service_bundle_stale/,
    ServiceGatewayHighDenyRate: /decision="DENY"/,
    ServiceGateway5xxRate: /service_gateway_requests_total\{status_class="5xx"\}/,
    ServiceBreakglassUsed: /service_breakglass_total\{result="accepted"\}/,
    ServiceGatewayLatencyHigh: /histogram_quantile\(0\.99,[^]*service_gateway_request_duration_seconds_bucket/,
  }
  for (const [name, pattern] of Object.entries(required)) {
    t.match(byName.get(name)?.expr, pattern, `alert ${name} exists and watches the right series`)
  }
  for (const rule of rules) {
    const where = `alert ${rule.alert}`
    t.match(rule.labels?.severity, /^(critical|warning|info)$/, `${where}: severity`)
    t.type(rule.annotations?.summary, 'string', `${where}: summary`)
    if (rule.for !== undefined) t.match(rule.for, /^\d+[smh]$/, `${where}: for`)
    const text = `${rule.annotations?.summary ?? ''} ${rule.annotations?.description ?? ''}`
    checkExpression(t, metrics, where, String(rule.expr), alertLabels(text))
  }
  t.equal(byName.size, rules.length, 'alert names are unique')
})

// ---------------------------------------------------------------------------------------------------
// Compose

const compose = (): Doc => parseYaml(read('deploy', 'compose.yaml')) as Doc

/** Compose's `${VAR:-default}` / `${VAR}` substitution with an empty environment. */
function interpolate(value: string): string {
  return value.replace(/\$\{([A-Z0-9_]+)(?::?-([^}]*))?\}/g, (_all, _name, fallback: string | undefined) => fallback ?? '')
}

/** A literal that is allowed in the file: empty, or an interpolation whose default is empty or says "example". */
function isPlaceholder(value: string): boolean {
  const m = /^\$\{[A-Z0-9_]+(?::?-([^}]*))?\}$/.exec(value)
  if (m === null) return false
  const fallback = m[1] ?? ''
  return fallback === '' || /example/i.test(fallback)
}

const SECRET_NAME = /(PASSWORD|SECRET|TOKEN|_KEY$|API_KEY|PRIVATE)/

t.test('compose: services, dependencies and health checks', async (t) => {
  const services = compose().services as Record<string, Doc>
  for (const name of ['appliance', 'postgres', 'redis', 'otel-collector', 'prometheus', 'grafana', 'upstream']) {
    t.ok(services[name] !== undefined, `service ${name}`)
  }
  t.match(services['otel-collector']?.image, /^otel\/opentelemetry-collector-contrib:/)
  t.equal(services.appliance?.build?.dockerfile, 'Dockerfile')
  t.ok(existsSync(path.resolve(DEPLOY, services.appliance?.build?.context ?? '', 'Dockerfile')), 'the build context holds the Dockerfile')

  // The appliance connects to PostgreSQL and Redis at start-up and fails without them.
  const deps = services.appliance?.depends_on as Record<string, { condition: string }>
  t.equal(deps.postgres?.condition, 'service_healthy')
  t.equal(deps.redis?.condition, 'service_healthy')
  t.ok(deps['otel-collector'] !== undefined && deps.upstream !== undefined, 'collector and upstream start first')
  for (const name of ['appliance', 'postgres', 'redis', 'prometheus', 'grafana']) {
    t.ok(Array.isArray(services[name]?.healthcheck?.test), `${name} has a health check`)
  }
  for (const [name, service] of Object.entries(services)) {
    for (const [dep, spec] of Object.entries((service.depends_on ?? {}) as Record<string, { condition?: string }>)) {
      t.ok(services[dep] !== undefined, `${name} depends on an existing service ${dep}`)
      t.match(spec.condition, /^service_(healthy|started|completed_successfully)$/, `${name} → ${dep}: a condition`)
      if (spec.condition === 'service_healthy') t.ok(services[dep]?.healthcheck !== undefined, `${name} waits for ${dep}'s health check`)
    }
    // Relative bind mounts point at files that ship in deploy/.
    for (const volume of (service.volumes ?? []) as string[]) {
      const source = volume.split(':')[0] as string
      if (source.startsWith('.')) t.ok(existsSync(path.resolve(DEPLOY, source)), `${name}: ${source} exists`)
    }
  }
})

t.test('compose: no plain-text secrets', async (t) => {
  const services = compose().services as Record<string, Doc>
  let checked = 0
  for (const [name, service] of Object.entries(services)) {
    for (const [key, raw] of Object.entries((service.environment ?? {}) as Record<string, unknown>)) {
      const value = String(raw ?? '')
      if (SECRET_NAME.test(key)) {
        checked += 1
        t.ok(value === '' || isPlaceholder(value), `${name}.${key} is not a literal secret`)
      }
      // A password inside a URL (DATABASE_URL) counts too.
      const userinfo = /^[a-z][a-z0-9+.-]*:\/\/[^/@:]*:([^@]*)@/i.exec(value)
      if (userinfo !== null) {
        checked += 1
        t.ok(isPlaceholder(userinfo[1] as string), `${name}.${key}: the URL's password is a marked example or comes from the environment`)
      }
    }
  }
  t.ok(checked >= 3, 'the secret-looking values were found and checked')
  t.equal(services.appliance?.environment?.SERVICE_BOOTSTRAP_API_KEY, '${SERVICE_BOOTSTRAP_API_KEY:-}', 'no operator key in the file')
})

t.test('compose: the appliance configuration passes the production cross-checks', async (t) => {
  const services = compose().services as Record<string, Doc>
  const environment = services.appliance?.environment as Record<string, string>
  const env = Object.fromEntries(Object.entries(environment).map(([k, v]) => [k, interpolate(String(v))]))
  const config = loadConfig(env)
  t.equal(config.environment, 'production')
  t.equal(config.database.kind, 'postgres', 'PostgreSQL, not the embedded database')
  t.equal(config.gateway.enabled, true, 'the gateway starts')
  t.equal(config.gateway.tracing, true, 'OTLP export is on')
  t.equal(config.redisUrl !== null, true, 'Redis is used')

  const host = (url: string | null): string => new URL(url ?? 'http://invalid').hostname
  t.equal(host(config.database.kind === 'postgres' ? config.database.url : null), 'postgres')
  t.equal(host(config.redisUrl), 'redis')
  t.equal(host(config.gateway.upstreamUrl), 'upstream', 'SERVICE_UPSTREAM_URL points at the sample upstream')

  // The OTLP endpoint is the collector, on the port of the receiver that speaks the configured protocol.
  const endpoint = new URL(env.OTEL_EXPORTER_OTLP_ENDPOINT ?? '')
  t.equal(endpoint.hostname, 'otel-collector')
  const collector = parseYaml(read('deploy', 'otel-collector.yaml')) as Doc
  const protocols = collector.receivers.otlp.protocols as Record<string, { endpoint: string }>
  const protocol = env.OTEL_EXPORTER_OTLP_PROTOCOL === 'grpc' ? 'grpc' : 'http'
  t.equal(protocols[protocol]?.endpoint, `0.0.0.0:${endpoint.port}`, `the collector's ${protocol} receiver listens on ${endpoint.port} for other containers`)
  t.ok(protocols.grpc !== undefined && protocols.http !== undefined, 'OTLP over gRPC and HTTP')
  t.ok(collector.exporters.debug !== undefined, 'debug exporter')
  t.same(collector.service.pipelines.traces.receivers, ['otlp'])
  t.ok((collector.service.pipelines.traces.exporters as string[]).includes('debug'))
  t.ok((services['otel-collector']?.command as string[]).some((c) => c.includes('/etc/otelcol/config.yaml')) &&
    (services['otel-collector']?.volumes as string[]).some((v) => v.startsWith('./otel-collector.yaml:/etc/otelcol/config.yaml')), 'the collector runs this configuration')

  const ports = (services.appliance?.ports as string[]).map((p) => p.split(':').at(-1)?.split(/\s/)[0])
  t.ok(ports.includes(String(config.port)) && ports.includes(String(config.gateway.port)), 'admin and gateway ports are published')
})

t.test('prometheus.yaml scrapes the appliance and loads the alert rules', async (t) => {
  const services = compose().services as Record<string, Doc>
  const prometheus = parseYaml(read('deploy', 'prometheus.yaml')) as Doc
  const mounts = (services.prometheus?.volumes as string[]).map((v) => v.split(':'))
  const alertsMount = mounts.find(([source]) => source === './prometheus-alerts.yaml')
  t.ok(alertsMount !== undefined, 'the alert rules are mounted')
  t.ok((prometheus.rule_files as string[]).includes(alertsMount?.[1] ?? ''), 'rule_files names the mounted rules')
  const configMount = mounts.find(([source]) => source === './prometheus.yaml')
  t.ok((services.prometheus?.command as string[]).includes(`--config.file=${configMount?.[1]}`), 'Prometheus runs this configuration')

  const job = (prometheus.scrape_configs as Doc[]).find((j) => j.job_name === 'service')
  t.ok(job !== undefined, 'job "service" (the dashboard and the alerts select it)')
  t.equal(job?.metrics_path ?? '/metrics', '/metrics')
  const port = String(services.appliance?.environment?.PORT ?? '8080')
  t.same(job?.static_configs?.[0]?.targets, [`appliance:${port}`], 'the target is the appliance admin port')
})

// ---------------------------------------------------------------------------------------------------
// Dockerfile

interface Instruction { readonly op: string; readonly args: string }

function dockerfileStages(text: string): Instruction[][] {
  const joined = text.replace(/\\\r?\n/g, ' ')
  const stages: Instruction[][] = []
  for (const line of joined.split(/\r?\n/)) {
    const trimmed = line.trim()
    if (trimmed === '' || trimmed.startsWith('#')) continue
    const m = /^(\w+)\s+(.*)$/.exec(trimmed)
    if (m === null) continue
    const op = (m[1] as string).toUpperCase()
    if (op === 'FROM') stages.push([])
    stages.at(-1)?.push({ op, args: (m[2] as string).trim() })
  }
  return stages
}

function dockerignoreMatches(patterns: string[], file: string): boolean {
  let ignored = false
  for (const raw of patterns) {
    const negate = raw.startsWith('!')
    const pattern = (negate ? raw.slice(1) : raw).replace(/^\/+|\/+$/g, '')
    const regex = new RegExp(`^${pattern.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*\*/g, '\u0000').replace(/\*/g, '[^/]*').replace(/\u0000/g, '.*')}(/.*)?$`)
    if (regex.test(file)) ignored = !negate
  }
  return ignored
}

t.test('Dockerfile: multi-stage, non-root, health check, the CLI as entry point', async (t) => {
  const stages = dockerfileStages(read('Dockerfile'))
  t.ok(stages.length >= 2, 'multi-stage')
  const runtime = stages.at(-1) as Instruction[]
  const all = (op: string): string[] => runtime.filter((i) => i.op === op).map((i) => i.args)

  const users = all('USER')
  t.ok(users.length > 0, 'the runtime stage sets USER')
  t.notMatch(users.at(-1), /^(root|0)(:|$)/, 'the final user is not root')

  const healthcheck = all('HEALTHCHECK').at(-1) ?? ''
  t.match(healthcheck, /\/healthz/, 'HEALTHCHECK probes /healthz')
  t.match(healthcheck, /process\.env\.PORT/, 'on $PORT')
  t.match(healthcheck, /CMD \[\s*"node"/, 'with node (slim images have no curl)')

  const pkg = JSON.parse(read('package.json')) as { bin: Record<string, string> }
  const entrypoint = JSON.parse(all('ENTRYPOINT').at(-1) ?? '[]') as string[]
  t.same(entrypoint, ['node', ...NODE_FLAGS, pkg.bin['agent-trust']], 'ENTRYPOINT runs the `agent-trust` command of package.json with the node flags')
  t.ok(existsSync(path.join(ROOT, 'src', 'cli', 'index.ts')), 'whose source exists')
  t.same(JSON.parse(all('CMD').at(-1) ?? '[]'), ['serve'])

  const defaults = loadConfig({})
  const exposed = all('EXPOSE').join(' ').split(/\s+/)
  t.ok(exposed.includes(String(defaults.port)) && exposed.includes(String(defaults.gateway.port)), 'EXPOSE the admin and gateway ports')
  const dataDir = /SERVICE_DATA_DIR=(\S+)/.exec(all('ENV').join(' '))?.[1]
  t.ok(dataDir !== undefined, 'SERVICE_DATA_DIR is set')
  t.ok(all('VOLUME').some((v) => v.includes(`"${dataDir}"`) || v.split(/\s+/).includes(dataDir ?? '')), 'the data directory is a volume')
  t.ok(all('RUN').some((r) => r.includes(dataDir ?? '\u0000') && /chown node/.test(r)), 'the data directory belongs to the runtime user')
})

t.test('Dockerfile: production dependencies only, and the files the code reads at run time', async (t) => {
  const stages = dockerfileStages(read('Dockerfile'))
  const stageName = (stage: Instruction[]): string => /\bAS\s+(\S+)/i.exec(stage[0]?.args ?? '')?.[1] ?? ''
  const byName = new Map(stages.map((s) => [stageName(s), s]))
  const runtime = stages.at(-1) as Instruction[]
  const copies = runtime.filter((i) => i.op === 'COPY')

  // node_modules come from a stage that ran `npm ci --omit=dev`, never from the build stage's full install.
  const modules = copies.find((c) => /\bnode_modules\b/.test(c.args))
  const from = /--from=(\S+)/.exec(modules?.args ?? '')?.[1]
  const source = from === undefined ? runtime : byName.get(from)
  t.ok(source?.some((i) => i.op === 'RUN' && /npm ci\b[^&]*--omit=dev/.test(i.args)), 'node_modules are installed with npm ci --omit=dev')
  t.notOk(source?.some((i) => i.op === 'RUN' && /tsc\b/.test(i.args)), 'not the stage that compiles')

  // The build stage compiles with tsc into dist/ (tsconfig rootDir "."), so dist/src holds src/.
  const build = byName.get('build') ?? []
  t.ok(build.some((i) => i.op === 'RUN' && /tsc -p/.test(i.args)), 'the build stage runs tsc')
  const tsconfig = JSON.parse(read('tsconfig.json')) as { compilerOptions: { outDir: string; rootDir: string } }
  t.same([tsconfig.compilerOptions.outDir, tsconfig.compilerOptions.rootDir], ['dist', '.'], 'tsc writes src/ to dist/src')

  // The runtime WORKDIR must look like the repository where src/core/paths.ts looks: package.json at the
  // root, migrations where src/db/migrate.ts reads them, schemas and the Rego module.
  const workdir = runtime.filter((i) => i.op === 'WORKDIR').at(-1)?.args ?? '/'
  const destinations = copies.flatMap((c) => {
    const parts = c.args.replace(/--\S+/g, '').trim().split(/\s+/)
    const dest = parts.at(-1) as string
    const sources = parts.slice(0, -1)
    return dest.endsWith('/') ? sources.map((s) => path.posix.join(workdir, dest, path.posix.basename(s))) : [path.posix.join(workdir, dest)]
  })
  for (const needed of ['package.json', 'dist/src', 'src/db/migrations', 'schemas', 'policies', 'node_modules']) {
    t.ok(destinations.includes(path.posix.join(workdir, needed)), `${needed} is in ${workdir}`)
  }
  t.ok(readdirSync(path.join(ROOT, 'src', 'db', 'migrations')).some((f) => f.endsWith('.sql')), 'migrations are SQL files in src/db/migrations')
  t.ok(existsSync(path.join(ROOT, 'policies', 'service', 'policy.rego')), 'the Rego module ships from policies/')

  // Every COPY from the build context names something that exists and that .dockerignore keeps.
  const ignore = read('.dockerignore').split(/\r?\n/).map((l) => l.trim()).filter((l) => l !== '' && !l.startsWith('#'))
  let contextCopies = 0
  for (const stage of stages) {
    for (const copy of stage.filter((i) => i.op === 'COPY' && !i.args.includes('--from='))) {
      const parts = copy.args.replace(/--\S+/g, '').trim().split(/\s+/)
      for (const src of parts.slice(0, -1)) {
        contextCopies += 1
        t.ok(existsSync(path.join(ROOT, src)), `COPY source ${src} exists`)
        t.notOk(dockerignoreMatches(ignore, src), `COPY source ${src} is not excluded by .dockerignore`)
      }
    }
  }
  t.ok(contextCopies >= 5, 'the context copies were found')
  for (const excluded of ['node_modules', 'dist', '.git', 'data']) {
    t.ok(dockerignoreMatches(ignore, excluded), `.dockerignore keeps ${excluded} out of the context`)
  }
})

// ---------------------------------------------------------------------------------------------------
// Node flags (src/node-flags.ts): V8 reads them only at start, so every place that starts the
// appliance must pass them; the Dockerfile's ENTRYPOINT is checked above.

t.test('every start point of the appliance passes the node flags', async (t) => {
  t.ok(NODE_FLAGS.length > 0, 'there are flags to pass')
  const pkg = JSON.parse(read('package.json')) as { bin: Record<string, string>; scripts: Record<string, string> }
  t.equal(pkg.scripts.start, `exec node ${NODE_FLAGS.join(' ')} ${pkg.bin['agent-trust']} serve`, 'npm start (exec: test/e2e/npm-start.test.ts says why)')
  // The shebang is what runs the installed `agent-trust` bin; tsc keeps it in the build.
  const shebang = `#!/usr/bin/env -S node ${NODE_FLAGS.join(' ')}`
  t.equal(read('src', 'cli', 'index.ts').split('\n')[0], shebang, 'the shebang of the `agent-trust` command')
  t.equal(read(pkg.bin['agent-trust']).split('\n')[0], shebang, 'and of its build')
  t.match(read('bench', 'appliance.ts'), /spawn\(process\.execPath, \[\.\.\.NODE_FLAGS, /, 'the benchmarks start the appliance with them')
})
