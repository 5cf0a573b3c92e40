/**
 * The check services with real peers (docs/ext-authz.md): the real `agent-trust serve` process with its
 * gRPC and HTTP check services, a real nginx (Debian's nginx-light) in front of a recording upstream with
 * `auth_request` to the HTTP check, and a @grpc/grpc-js client built from the same proto definitions whose
 * answers are read by field number and applied as Envoy's ext_authz filter applies them.
 *
 * Every refusal case of the gateway's own tests goes three ways, the gateway itself, the gRPC check and
 * nginx, and must come out the same: a missing and a revoked badge, a delegation chain's refusal codes
 * (malformed, bad signature, badge binding, narrowing, depth), a DENY, a PDP that is down in each mode,
 * break-glass, a rate limit. nginx relays only 401 and 403, so there the
 * gateway's status is `X-Service-Status`. Ports 44011-44013 are this file's.
 */
import t, { type Test } from 'tap'
import { execFile } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { adminCall, agentWithBadge, CLI, exitSafeTeardown, SLOW_START, startService } from '../helpers/appliance.js'
import { envoyApply, extAuthzClient, wireFields, type EnvoyOutcome } from '../helpers/ext-authz-client.js'
import { startNginx } from '../helpers/nginx.js'
import { startPdpServer } from '../helpers/pdp-server.js'
import { portAccepts } from '../helpers/processes.js'
import { startUpstream } from '../helpers/upstream-server.js'
import { chainHeaders, generateAgentKey, inspectEnvelope, mintChildEnvelope, mintRootEnvelope, requestPopBadge } from '../../src/sdk/index.js'
import { authorityHash, signEnvelope, type EnvelopePayload } from '../../src/core/envelope.js'
import { didKeyVerificationMethodId } from '../../src/core/did-key.js'

const GRPC_PORT = 44011
const HTTP_PORT = 44012
const NGINX_PORT = 44013
const RUN = randomUUID().slice(0, 8)
t.setTimeout(240_000)

const tracked = exitSafeTeardown(t)
const upstream = await startUpstream(t)
const pdp = await startPdpServer(t)
const dir = mkdtempSync(path.join(tmpdir(), 'svc-e2e-ext-authz-'))
const privateFile = path.join(dir, 'breakglass.key')
const publicFile = path.join(dir, 'breakglass.pub')

function cli(args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [CLI, ...args], { env: { PATH: process.env.PATH, HOME: process.env.HOME }, timeout: 20_000 }, (error, stdout, stderr) => {
      if (error !== null) reject(new Error(`${args.join(' ')}: ${stderr}`))
      else resolve(String(stdout).trim())
    })
  })
}
await cli(['breakglass', 'keygen', '--private', privateFile, '--public', publicFile])

const MODES = [['/observe', 'EM-OBSERVE'], ['/guard', 'EM-GUARD'], ['/delegate', 'EM-DELEGATE'], ['/strict', 'EM-STRICT']] as const
const routesFile = path.join(dir, 'routes.json')
writeFileSync(routesFile, JSON.stringify({
  routes: [
    ...MODES.map(([prefix, mode]) => ({ prefix, mode, upstream: upstream.url })),
    { prefix: '/mcp', mode: 'EM-GUARD', protocol: 'mcp', upstream: upstream.url },
    { prefix: '/mcp-observe', mode: 'EM-OBSERVE', protocol: 'mcp', upstream: upstream.url },
  ],
}))

const service = await startService(tracked, {
  SERVICE_ROUTES_FILE: routesFile,
  SERVICE_PDP_ENDPOINT: pdp.url,
  SERVICE_PDP_TIMEOUT_MS: '300',
  SERVICE_ENFORCEMENT_MODE: 'EM-GUARD',
  SERVICE_BREAKGLASS_PUBLIC_KEY: publicFile,
  SERVICE_CHECK_GRPC_PORT: String(GRPC_PORT),
  SERVICE_CHECK_HTTP_PORT: String(HTTP_PORT),
  SERVICE_CHECK_HTTP_PROXIES: 'envoy,nginx,traefik',
}, SLOW_START)
for (const port of [GRPC_PORT, HTTP_PORT]) {
  const deadline = Date.now() + 20_000
  while (!(await portAccepts(port))) {
    if (Date.now() > deadline) throw new Error(`check port ${port} not listening:\n${service.output()}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}
const upstreamPort = new URL(upstream.url).port
const forwardedHeaders = ['subject', 'issuer', 'trust_level', 'badge_jti', 'txn', 'decision_id']
const relayed = ['x_service_error', 'x_service_status', 'retry_after', 'x_ratelimit_limit', 'x_ratelimit_remaining', 'x_ratelimit_reset', 'x_service_decision_id']
const nginx = await startNginx(t, NGINX_PORT, `
  server {
    listen 127.0.0.1:${NGINX_PORT};
    location / {
      auth_request /_check;
${forwardedHeaders.map((h) => `      auth_request_set $svc_${h} $upstream_http_x_service_${h};\n      proxy_set_header X-Service-${h.replace('_', '-')} $svc_${h};`).join('\n')}
      proxy_set_header X-Service-Breakglass "";
${relayed.map((h) => `      auth_request_set $r_${h} $upstream_http_${h};\n      add_header ${h.replaceAll('_', '-')} $r_${h} always;`).join('\n')}
      proxy_pass http://127.0.0.1:${upstreamPort};
    }
    location = /_check {
      internal;
      proxy_pass http://127.0.0.1:${HTTP_PORT}/nginx;
      proxy_pass_request_body off;
      proxy_set_header Content-Length "";
      proxy_set_header X-Original-URI $request_uri;
      proxy_set_header X-Original-Method $request_method;
      proxy_set_header Host $host;
    }
  }
`)
const grpcClient = extAuthzClient(`127.0.0.1:${GRPC_PORT}`)
t.teardown(() => grpcClient.close())

const [agent, doomed, breakglass] = await Promise.all([
  agentWithBadge(service.adminUrl, service.operatorKey, 'ext-authz-agent'),
  agentWithBadge(service.adminUrl, service.operatorKey, 'ext-authz-revoked'),
  cli(['breakglass', 'issue', '--key', privateFile, '--sub', 'oncall@example.com', '--reason', `incident ${RUN}`]),
])

/** What one way of asking made of a request: allowed (forwarded), or the status and error code of the refusal. */
interface Outcome {
  allowed: boolean
  status: number
  error: string | undefined
  headers: Record<string, string>
}

function errorOf(body: string): string | undefined {
  try {
    const parsed = JSON.parse(body) as { error?: unknown }
    if (typeof parsed.error === 'string') return parsed.error
    return (parsed.error as { data?: { error?: string } } | undefined)?.data?.error
  } catch {
    return undefined
  }
}

async function viaGateway(urlPath: string, headers: Record<string, string>, method = 'GET', body?: string): Promise<Outcome> {
  const res = await fetch(`${service.gatewayUrl}${urlPath}`, { method, headers, body })
  const text = await res.text()
  const gatewayMade = res.headers.get('x-service-gateway') === 'error'
  return { allowed: !gatewayMade, status: res.status, error: gatewayMade ? errorOf(text) : undefined, headers: Object.fromEntries(res.headers) }
}

async function viaGrpc(urlPath: string, headers: Record<string, string>, method = 'GET', body?: string): Promise<Outcome & { envoy: EnvoyOutcome }> {
  const { raw } = await grpcClient.check({ method, path: urlPath, host: '127.0.0.1', headers, body: body === undefined ? undefined : Buffer.from(body) })
  const envoy = envoyApply(raw, headers)
  if (envoy.allowed) return { allowed: true, status: 200, error: undefined, headers: envoy.responseHeaders, envoy }
  return { allowed: false, status: envoy.status, error: errorOf(envoy.body), headers: envoy.headers, envoy }
}

async function viaNginx(urlPath: string, headers: Record<string, string>, method = 'GET'): Promise<Outcome> {
  const res = await fetch(`${nginx.url}${urlPath}`, { method, headers })
  await res.text()
  const refused = res.status === 401 || res.status === 403
  const status = Number(res.headers.get('x-service-status') ?? res.status)
  return { allowed: !refused, status: refused ? status : res.status, error: res.headers.get('x-service-error') ?? undefined, headers: Object.fromEntries(res.headers) }
}

const bearer = (token: string): Record<string, string> => ({ authorization: `Bearer ${token}` })

/** The same request three ways; each must agree with the gateway's own answer. */
async function allThree(t: Test, label: string, urlPath: string, headers: Record<string, string>, expected: { status: number; error?: string }): Promise<Outcome[]> {
  const outcomes = [await viaGateway(`${urlPath}/gw`, headers), await viaGrpc(`${urlPath}/grpc`, headers), await viaNginx(`${urlPath}/nginx`, headers)]
  const names = ['gateway', 'gRPC check', 'nginx auth_request']
  outcomes.forEach((outcome, i) => {
    t.equal(outcome.status, expected.status, `${label}, ${names[i]}: ${expected.status}`)
    t.equal(outcome.allowed, expected.error === undefined, `${label}, ${names[i]}: ${expected.error === undefined ? 'allowed' : 'refused'}`)
    if (expected.error !== undefined) t.equal(outcome.error, expected.error, `${label}, ${names[i]}: ${expected.error}`)
  })
  return outcomes
}

t.test('identity refusals: missing badge, revoked badge, malformed chain', async (t) => {
  pdp.respond({ decision: 'ALLOW', ttl: 0 })
  const [, grpc, viaProxy] = await allThree(t, 'no badge', '/guard/none', {}, { status: 401, error: 'BADGE_MISSING' })
  t.equal((grpc as unknown as { envoy: EnvoyOutcome }).envoy.grpcCode, 16, 'gRPC: status.code UNAUTHENTICATED')
  t.equal(viaProxy!.status, 401, 'nginx relays the 401 itself')

  const revoked = await adminCall(service.adminUrl, service.operatorKey, 'POST', `/v1/badges/${doomed.jti}/revoke`, { reason: 'e2e' })
  t.equal(revoked.status, 200, 'revoked on the admin plane')
  const deadline = Date.now() + 10_000
  while ((await viaGateway('/guard/revoked/wait', bearer(doomed.token))).error !== 'BADGE_REVOKED' && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100))
  await allThree(t, 'revoked badge', '/guard/revoked', bearer(doomed.token), { status: 401, error: 'BADGE_REVOKED' })

  await allThree(t, 'malformed chain', '/guard/chain', { ...bearer(agent.token), 'x-service-authority': 'not-an-envelope' }, { status: 400, error: 'ENVELOPE_MALFORMED' })
  await allThree(t, 'malformed chain in EM-OBSERVE', '/observe/chain', { ...bearer(agent.token), 'x-service-authority': 'not-an-envelope' }, { status: 200 })
})

/** An agent with a did:key DID and an IAL-1 badge from the SDK: a delegator or delegate of a chain. */
async function ial1Agent(name: string): Promise<{ did: string; privateKey: import('node:crypto').KeyObject; token: string; jti: string }> {
  const agentKey = generateAgentKey()
  const created = await adminCall(service.adminUrl, service.operatorKey, 'POST', '/v1/agents', { name, domain: 'example.com', did: agentKey.did })
  if (created.status !== 201) throw new Error(`agent create: ${created.status} ${JSON.stringify(created.body)}`)
  const badge = await requestPopBadge({ registryUrl: service.adminUrl, apiKey: service.operatorKey, did: agentKey.did, privateKey: agentKey.privateKey, badgeTtl: 600 })
  return { did: agentKey.did, privateKey: agentKey.privateKey, token: badge.token, jti: badge.jti }
}

t.test('delegation chains: a valid chain passes and each refusal code comes out the same', async (t) => {
  pdp.respond({ decision: 'ALLOW', ttl: 0 })
  const [alice, bob, carol] = await Promise.all(['chain-alice', 'chain-bob', 'chain-carol'].map((name) => ial1Agent(`${name}-${RUN}`)))
  const root = (depthRemaining: number) => mintRootEnvelope({
    issuer: { did: alice.did, privateKey: alice.privateKey, badgeJti: alice.jti },
    subject: { did: bob.did, badgeJti: bob.jti },
    capabilityClass: 'orders.read',
    constraints: { max_items: 10 },
    depthRemaining,
    ttlSeconds: 300,
  })
  const child = (parent: string, capabilityClass: string) => mintChildEnvelope(parent, {
    issuer: { did: bob.did, privateKey: bob.privateKey, badgeJti: bob.jti },
    subject: { did: carol.did, badgeJti: carol.jti },
    capabilityClass,
  }).jws
  // The SDK refuses to mint a child that would not verify, so these are a valid child changed and signed again by bob.
  const resigned = (jws: string, change: (payload: EnvelopePayload) => void): string => {
    const payload = { ...inspectEnvelope(jws).payload } as unknown as EnvelopePayload
    change(payload)
    return signEnvelope(payload, { privateKey: bob.privateKey, kid: didKeyVerificationMethodId(bob.did) })
  }
  const headersOf = (token: string, chain: object): Record<string, string> => ({ ...bearer(token), ...(chain as Record<string, string>) })
  const oneHop = root(1)
  await allThree(t, 'a valid chain', '/guard/chain-ok', headersOf(bob.token, chainHeaders([oneHop.jws], { [alice.did]: alice.token })), { status: 200 })
  const twoHops = chainHeaders([oneHop.jws, child(oneHop.jws, 'orders.read.summary')], { [alice.did]: alice.token, [bob.did]: bob.token })
  await allThree(t, 'a valid two-hop chain', '/guard/chain-ok2', headersOf(carol.token, twoHops), { status: 200 })

  const stolen = chainHeaders([oneHop.jws], { [alice.did]: alice.token })
  await allThree(t, 'an envelope addressed to someone else', '/guard/chain-stolen', headersOf(carol.token, stolen), { status: 403, error: 'ENVELOPE_BADGE_BINDING_FAILED' })
  await allThree(t, 'the delegator\'s badge missing', '/guard/chain-nobadge', headersOf(bob.token, chainHeaders([oneHop.jws], {})), { status: 403, error: 'ENVELOPE_BADGE_BINDING_FAILED' })
  // One character of the signature changed (in its middle, where every bit counts).
  const [head, payload, signature] = oneHop.jws.split('.') as [string, string, string]
  const forged = `${head}.${payload}.${signature.slice(0, 10)}${signature[10] === 'A' ? 'B' : 'A'}${signature.slice(11)}`
  await allThree(t, 'a signature that does not verify', '/guard/chain-forged', headersOf(bob.token, chainHeaders([forged], { [alice.did]: alice.token })), { status: 401, error: 'ENVELOPE_SIGNATURE_INVALID' })
  const widened = resigned(child(oneHop.jws, 'orders.read.summary'), (p) => { p.capability_class = 'orders' })
  const wider = chainHeaders([oneHop.jws, widened], { [alice.did]: alice.token, [bob.did]: bob.token })
  await allThree(t, 'a child wider than its parent', '/guard/chain-wider', headersOf(carol.token, wider), { status: 403, error: 'ENVELOPE_NARROWING_VIOLATION' })
  const leaf = root(0)
  const underLeaf = resigned(child(oneHop.jws, 'orders.read.summary'), (p) => { p.parent_authority_hash = authorityHash(leaf.jws); p.txn_id = leaf.payload.txn_id })
  const tooDeep = chainHeaders([leaf.jws, underLeaf], { [alice.did]: alice.token, [bob.did]: bob.token })
  await allThree(t, 'a hop beyond depth_remaining', '/guard/chain-deep', headersOf(carol.token, tooDeep), { status: 403, error: 'ENVELOPE_DEPTH_EXCEEDED' })
  await allThree(t, 'a stolen envelope in EM-OBSERVE', '/observe/chain-stolen', headersOf(carol.token, stolen), { status: 200 })
})

t.test('a DENY and an allow: headers the upstream receives', async (t) => {
  pdp.respond({ decision: 'DENY', ttl: 0, reason: 'no' })
  const [gw, grpc] = await allThree(t, 'DENY in EM-GUARD', '/guard/denied', bearer(agent.token), { status: 403, error: 'POLICY_DENIED' })
  t.ok(gw!.headers['x-service-decision-id'], 'the gateway names the decision')
  t.ok(grpc!.headers['x-service-decision-id'], 'so does the denied response')
  t.equal((grpc as unknown as { envoy: EnvoyOutcome }).envoy.grpcCode, 7, 'gRPC: status.code PERMISSION_DENIED')
  await allThree(t, 'DENY in EM-OBSERVE', '/observe/denied', bearer(agent.token), { status: 200 })

  pdp.respond({ decision: 'ALLOW', ttl: 0 })
  const forged = { ...bearer(agent.token), 'x-service-subject': 'did:web:forged', 'x-service-breakglass': 'junk' }
  const allowed = await viaGrpc('/guard/allowed', forged)
  t.ok(allowed.allowed, 'gRPC: allowed')
  const upstreamHeaders = (allowed.envoy as Extract<EnvoyOutcome, { allowed: true }>).upstreamHeaders
  t.equal(upstreamHeaders['x-service-subject'], agent.did, 'Envoy sets the verified subject over the forged one')
  t.equal(upstreamHeaders['x-service-badge-jti'], agent.jti, 'and the badge jti')
  t.equal(upstreamHeaders['x-service-breakglass'], undefined, 'and removes the break-glass header')
  t.ok(upstreamHeaders['x-service-txn'], 'and sets the transaction id')

  const proxied = await viaNginx('/guard/allowed/nginx', forged)
  t.equal(proxied.status, 200, 'nginx: forwarded')
  const seen = upstream.requests.find((r) => r.url === '/guard/allowed/nginx')
  t.equal(seen?.headers['x-service-subject'], agent.did, 'the upstream behind nginx receives the verified subject')
  t.equal(seen?.headers['x-service-breakglass'], undefined, 'and no break-glass header')
})

t.test('the answers decode as Envoy reads them, by field number', async (t) => {
  pdp.respond({ decision: 'ALLOW', ttl: 0 })
  const { raw, decoded } = await grpcClient.check({ method: 'GET', path: '/guard/wire', host: '127.0.0.1', headers: bearer(agent.token) })
  const fields = wireFields(raw)
  t.same([...fields.keys()].sort(), [1, 3], 'CheckResponse: status (1) and ok_response (3)')
  t.equal(decoded.ok_response.headers[0].append_action, 2, 'headers overwrite (OVERWRITE_IF_EXISTS_OR_ADD)')
  t.ok(decoded.ok_response.headers_to_remove.includes('x-service-breakglass'), 'headers_to_remove names the break-glass header')

  const refused = await grpcClient.check({ method: 'GET', path: '/guard/wire', host: '127.0.0.1', headers: {} })
  const refusedFields = wireFields(refused.raw)
  t.same([...refusedFields.keys()].sort(), [1, 2], 'a refusal: status (1) and denied_response (2)')
  t.equal(refused.decoded.denied_response.status.code, 401, 'DeniedHttpResponse.status.code 401')
  const challenge = refused.decoded.denied_response.headers.find((h: any) => h.header.key === 'content-type')
  t.ok(challenge, 'the gateway-made answer\'s headers are carried')
  t.match(JSON.parse(refused.decoded.denied_response.body), { error: 'BADGE_MISSING' }, 'and its body')
  t.equal(refused.decoded.status.message, 'BADGE_MISSING', 'status.message names the code')
})

t.test('a PDP that is down, per mode', async (t) => {
  pdp.respond({ status: 500, body: 'down' })
  for (const [prefix] of MODES) {
    const gw = await viaGateway(`${prefix}/down/gw`, bearer(agent.token))
    await allThree(t, `PDP down under ${prefix}`, `${prefix}/down`, bearer(agent.token), { status: gw.status, ...(gw.allowed ? {} : { error: gw.error }) })
  }
  pdp.respond({ decision: 'ALLOW', ttl: 0 })
})

t.test('break-glass overrides a DENY through every way', async (t) => {
  pdp.respond({ decision: 'DENY', ttl: 0 })
  await allThree(t, 'break-glass', '/strict/ops', { ...bearer(agent.token), 'x-service-breakglass': breakglass }, { status: 200 })
  await allThree(t, 'no break-glass', '/strict/ops', bearer(agent.token), { status: 403, error: 'POLICY_DENIED' })
  pdp.respond({ decision: 'ALLOW', ttl: 0 })
})

t.test('a rate limit: 429 with Retry-After and the rate-limit headers', async (t) => {
  for (const [name, ask] of [['gateway', viaGateway], ['gRPC check', viaGrpc], ['nginx', viaNginx]] as const) {
    pdp.respond({ decision: 'ALLOW', ttl: 0, obligations: [{ type: 'rate_limit.apply', params: { rpm: 1, key: `rl-${name.replace(/\W/g, '')}-${RUN}` } }] })
    const first = await ask(`/delegate/limited/${name.replace(/\W/g, '')}`, bearer(agent.token))
    const second = await ask(`/delegate/limited/${name.replace(/\W/g, '')}`, bearer(agent.token))
    t.ok(first.allowed, `${name}: the first passes`)
    t.equal(second.status, 429, `${name}: the second is 429`)
    t.equal(second.error, 'rate_limit_exceeded', `${name}: rate_limit_exceeded`)
    t.ok(Number(second.headers['retry-after']) >= 1, `${name}: Retry-After`)
    t.equal(second.headers['x-ratelimit-limit'], '1', `${name}: X-RateLimit-Limit`)
  }
  pdp.respond({ decision: 'ALLOW', ttl: 0 })
})

const MCP_HEADERS = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' }
const toolCall = (tool: string): string => JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: tool, arguments: {} } })

t.test('MCP: decided per message on the body the proxy sends; without it the enforcing modes refuse', async (t) => {
  pdp.respond({ fn: (request: any) => (request.action?.operation?.includes('forbidden') || JSON.stringify(request).includes('"forbidden"') ? { decision: 'DENY', ttl: 0 } : { decision: 'ALLOW', ttl: 0 }) })
  const headers = { ...bearer(agent.token), ...MCP_HEADERS }
  const gwDenied = await viaGateway('/mcp', headers, 'POST', toolCall('forbidden'))
  const grpcDenied = await viaGrpc('/mcp', headers, 'POST', toolCall('forbidden'))
  t.equal(gwDenied.error, 'POLICY_DENIED', 'the gateway denies the forbidden tool')
  t.equal(grpcDenied.error, 'POLICY_DENIED', 'so does the gRPC check, from the body Envoy sent')
  t.equal(grpcDenied.status, gwDenied.status, `with the gateway's status (${gwDenied.status}, a JSON-RPC answer)`)
  const grpcAllowed = await viaGrpc('/mcp', headers, 'POST', toolCall('allowed'))
  t.ok(grpcAllowed.allowed, 'an allowed tool passes the gRPC check')

  const noBody = await viaGrpc('/mcp', headers, 'POST')
  t.equal(noBody.error, 'CHECK_BODY_MISSING', 'no body in the CheckRequest: CHECK_BODY_MISSING')
  t.equal(noBody.status, 403, '403')
  const nginxPost = await viaNginx('/mcp', headers, 'POST')
  t.equal(nginxPost.error, 'CHECK_BODY_MISSING', 'auth_request sends no body: CHECK_BODY_MISSING through nginx')
  const observed = await viaGrpc('/mcp-observe', headers, 'POST')
  t.ok(observed.allowed, 'EM-OBSERVE lets the undecided request through')

  const envoyHttp = await fetch(`http://127.0.0.1:${HTTP_PORT}/envoy/mcp`, { method: 'POST', headers: { ...headers, 'x-envoy-auth-partial-body': 'false' }, body: toolCall('forbidden') })
  t.equal(envoyHttp.status, 403, 'Envoy HTTP mode: a refusal is never 2xx (the JSON-RPC 200 answer becomes its catalogue status)')
  t.equal(errorOf(await envoyHttp.text()), 'POLICY_DENIED', 'with the JSON-RPC body')
  const partial = await fetch(`http://127.0.0.1:${HTTP_PORT}/envoy/mcp`, { method: 'POST', headers: { ...headers, 'x-envoy-auth-partial-body': 'true' }, body: toolCall('allowed') })
  t.equal(errorOf(await partial.text()), 'CHECK_BODY_MISSING', 'Envoy HTTP mode: a partial body is refused')
  pdp.respond({ decision: 'ALLOW', ttl: 0 })
})

t.test('Traefik ForwardAuth and Envoy HTTP: the request read from each proxy\'s own headers', async (t) => {
  pdp.respond({ decision: 'ALLOW', ttl: 0 })
  const traefik = await fetch(`http://127.0.0.1:${HTTP_PORT}/traefik`, {
    headers: { ...bearer(agent.token), 'x-forwarded-method': 'GET', 'x-forwarded-uri': '/guard/traefik?q=1', 'x-forwarded-host': '127.0.0.1', 'x-forwarded-proto': 'http' },
  })
  t.equal(traefik.status, 200, 'Traefik: allowed')
  t.equal(traefik.headers.get('x-service-subject'), agent.did, 'with the identity headers to copy (authResponseHeaders)')
  const unnamed = await fetch(`http://127.0.0.1:${HTTP_PORT}/traefik`, { headers: bearer(agent.token) })
  t.equal(unnamed.status, 400, 'Traefik without X-Forwarded-Method/-Uri: 400, never a guess')
  const envoy = await fetch(`http://127.0.0.1:${HTTP_PORT}/envoy/guard/envoy-http`, { headers: bearer(agent.token) })
  t.equal(envoy.status, 200, 'Envoy HTTP: allowed')
  t.match(envoy.headers.get('x-envoy-auth-headers-to-remove'), /x-service-breakglass/, 'x-envoy-auth-headers-to-remove lists the break-glass header')
  const missing = await fetch(`http://127.0.0.1:${HTTP_PORT}/envoy/guard/envoy-http`)
  t.equal(missing.status, 401, 'Envoy HTTP: the refusal is the gateway\'s own answer')
  t.ok(missing.headers.get('www-authenticate') === null || missing.status === 401, 'status relayed as is')
})

t.test('the decision feed and metrics show check decisions with the proxy and protocol', async (t) => {
  const deadline = Date.now() + 20_000
  let events: any[] = []
  while (Date.now() < deadline) {
    const res = await adminCall(service.adminUrl, service.operatorKey, 'GET', '/v1/gateway/decisions?limit=1000')
    events = res.status === 200 ? res.body.data as any[] : []
    if (events.some((e) => e.proxy === 'nginx') && events.some((e) => e.proxy === 'envoy-grpc' && e.protocol === 'mcp')) break
    await new Promise((r) => setTimeout(r, 250))
  }
  const grpcDeny = events.find((e) => e.proxy === 'envoy-grpc' && e.path === '/guard/denied/grpc')
  t.match(grpcDeny, { decision: 'DENY', protocol: 'http', mode: 'EM-GUARD', status: 403 }, 'a gRPC check\'s DENY is in the feed')
  t.ok(events.some((e) => e.proxy === 'nginx' && e.path === '/guard/denied/nginx' && e.decision === 'DENY'), 'so is nginx\'s')
  t.ok(events.some((e) => e.proxy === 'envoy-grpc' && e.protocol === 'mcp' && e.decision === 'DENY'), 'an MCP check names its protocol')
  t.ok(events.some((e) => e.proxy === undefined && e.path === '/guard/denied/gw'), 'the gateway\'s own decisions name no proxy')
  const metrics = await (await fetch(`${service.adminUrl}/metrics`)).text()
  t.match(metrics, /service_gateway_checks_total\{proxy="envoy-grpc",protocol="mcp",decision="DENY"/, 'service_gateway_checks_total by proxy, protocol and decision')
  t.match(metrics, /service_gateway_checks_total\{proxy="nginx",protocol="http"/, 'nginx checks counted')
  const line = service.logLines().find((l) => l.check_proxy === 'traefik')
  t.ok(line, 'the request log line names the proxy')
})
