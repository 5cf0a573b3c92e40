/**
 * The OAuth front door end to end (docs/oauth.md): the real MCP SDK client, given only the gateway's MCP URL
 * and the agent's own Ed25519 key (its `PrivateKeyJwtProvider`, client_credentials with private_key_jwt),
 * meets the 401, reads the protected-resource metadata, discovers the authority, obtains a badge at the
 * token endpoint and calls tools through the appliance's gateway (embedded PDP, EM-GUARD). A policy wants
 * OV for `pay`: an agent verified to OV pays at once; one raised to OV after its badge meets 403
 * insufficient_scope, and the SDK's second token request gets it a badge at the level the registry
 * vouches for now; one never raised is refused again. The CLI's `token` command gets a badge the same way,
 * and the walkthrough's client (examples/mcp-oauth-client.mjs) runs as the README shows it.
 */
import t from 'tap'
import { execFile } from 'node:child_process'
import { chmodSync, mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import { stringify } from 'yaml'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { PrivateKeyJwtProvider } from '@modelcontextprotocol/sdk/client/auth-extensions.js'
import { generateApiKeySecret } from '../../src/core/api-key.js'
import { generateAgentKey, type AgentKey } from '../../src/sdk/keys.js'
import { verifyBadgeWithJwks } from '../../src/sdk/badges.js'
import { projectPath } from '../../src/core/paths.js'
import { prepareWorkspace } from '../helpers/workspace.js'
import { adminCall, CLI, closedPort, startService } from '../helpers/appliance.js'
import { startMcpUpstream } from '../helpers/mcp-upstream.js'

t.setTimeout(240_000)

const dataDir = mkdtempSync(path.join(tmpdir(), 'svc-e2e-oauth-'))
const operatorKey = generateApiKeySecret()

const { orgId, databaseEnv } = await prepareWorkspace(t, dataDir, operatorKey)

// The issuer and the gateway's public URL must be the addresses the client really reaches.
const [adminPort, gatewayPort] = [await closedPort(), await closedPort()]
const issuer = `http://127.0.0.1:${adminPort}`
const gatewayOrigin = `http://127.0.0.1:${gatewayPort}`
const upstream = await startMcpUpstream(t, { stateless: false, json: false })
const appliance = await startService(t, {
  ...databaseEnv,
  SERVICE_DATA_DIR: dataDir,
  SERVICE_BOOTSTRAP_API_KEY: operatorKey,
  PORT: String(adminPort),
  CA_ISSUER_URL: issuer,
  SERVICE_GATEWAY_PORT: String(gatewayPort),
  SERVICE_GATEWAY_PUBLIC_URL: gatewayOrigin,
  SERVICE_UPSTREAM_URL: upstream.url,
  SERVICE_UPSTREAM_PROTOCOL: 'mcp',
  SERVICE_EMBEDDED_PDP: 'true',
  SERVICE_WORKSPACE: orgId,
  SERVICE_ENFORCEMENT_MODE: 'EM-GUARD',
})
const mcpUrl = `${appliance.gatewayUrl as string}/mcp`

async function admin(method: string, urlPath: string, body?: unknown): Promise<any> {
  const answer = await adminCall(appliance.adminUrl, operatorKey, method, urlPath, body)
  if (answer.status >= 300) throw new Error(`${method} ${urlPath}: ${answer.status} ${JSON.stringify(answer.body)}`)
  return answer.body
}

/** An agent registered under its did:key, optionally raised to a trust level by the operator. */
async function registerAgent(name: string, trustLevel?: string): Promise<{ key: AgentKey; id: string }> {
  const key = generateAgentKey()
  const created = await admin('POST', '/v1/agents', { name, domain: 'agents.example.com', did: key.did })
  const id = created.data.id as string
  if (trustLevel !== undefined) await admin('PUT', `/v1/agents/${id}/trust-level`, { trustLevel })
  return { key, id }
}

function mcpClient(key: AgentKey, clientId: string): { client: Client; transport: StreamableHTTPClientTransport } {
  const authProvider = new PrivateKeyJwtProvider({
    clientId,
    privateKey: key.privateKey.export({ format: 'jwk' }) as Record<string, unknown>,
    algorithm: 'EdDSA',
  })
  const transport = new StreamableHTTPClientTransport(new URL(mcpUrl), { authProvider })
  return { client: new Client({ name: 'oauth-e2e', version: '1.0.0' }), transport }
}

const textOf = (result: unknown): string => ((result as { content: { text: string }[] }).content[0]?.text ?? '')

// The gateway's resource for the single-upstream route is its public URL; the org allows badges for it.
await admin('PUT', '/v1/token-audiences', { audiences: [gatewayOrigin] })
await admin('POST', `/v1/orgs/${orgId}/policy/org`, { yaml_content: stringify({ version: '1', mcp_tools: [{ tool: 'pay', min_trust_level: 'OV' }] }) })
  .then((proposed) => admin('POST', `/v1/orgs/${orgId}/policy/proposals/${proposed.id}/approve`))
const verified = await registerAgent('oauth-ov', '3')
const plain = await registerAgent('oauth-reg')

t.test('an unmodified MCP client with only the agent key gets a badge and calls a tool', async (t) => {
  const { client, transport } = mcpClient(verified.key, verified.key.did)
  t.teardown(() => client.close())
  await client.connect(transport)
  const result = await client.callTool({ name: 'read_file', arguments: { path: 'README.md' } })
  t.match(textOf(result), /README/, 'the tool answered through the gateway')

  const reached = upstream.reached.filter((r) => r.method === 'POST')
  t.ok(reached.length > 0 && reached.every((r) => String(r.headers['x-service-subject']) === verified.key.did),
    'every message reached the upstream as the agent')
  const unauthenticated = await fetch(mcpUrl, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, body: '{}' })
  t.equal(unauthenticated.status, 401, 'without a badge the gateway asks for one')
  t.equal(unauthenticated.headers.get('www-authenticate'),
    `Bearer resource_metadata="${gatewayOrigin}/.well-known/oauth-protected-resource"`, 'and names its protected-resource metadata')
})

t.test('the badge carries the level the registry verified: an OV agent pays at once', async (t) => {
  const { client, transport } = mcpClient(verified.key, verified.key.did)
  t.teardown(() => client.close())
  await client.connect(transport)
  const paid = await client.callTool({ name: 'pay', arguments: { amount: 5, to: 'bob' } })
  t.equal(textOf(paid), 'paid')
})

t.test('an agent raised to OV after its badge meets insufficient_scope, and the SDK gets a new badge and retries', async (t) => {
  const rising = await registerAgent('oauth-rising')
  const { client, transport } = mcpClient(rising.key, rising.key.did)
  t.teardown(() => client.close())
  await client.connect(transport)
  const read = await client.callTool({ name: 'read_file', arguments: { path: 'README.md' } })
  t.match(textOf(read), /README/, 'at REG the agent may read')

  await admin('PUT', `/v1/agents/${rising.id}/trust-level`, { trustLevel: '3' })
  const before = upstream.rpcMethods().length
  const paid = await client.callTool({ name: 'pay', arguments: { amount: 5, to: 'bob' } })
  t.equal(textOf(paid), 'paid', 'paid after one 403 challenge and one new badge')
  t.strictSame(upstream.rpcMethods().slice(before), ['tools/call'], 'only the retried call reached the upstream')
  const log = appliance.logLines().filter((line) => line.msg === 'gateway request' && line.agent_did === rising.key.did)
  t.ok(log.some((line) => line.status === 403 && line['service.policy.reason'] === 'mcp_tool_trust_level_below_minimum'), 'the first try was denied for its level')
})

t.test('an agent the registry has not verified to OV cannot upgrade: the call fails and nothing is paid', async (t) => {
  const { client, transport } = mcpClient(plain.key, plain.key.did)
  t.teardown(() => client.close())
  await client.connect(transport)
  const before = upstream.rpcMethods().length
  await t.rejects(client.callTool({ name: 'pay', arguments: { amount: 5, to: 'bob' } }), 'the SDK reports the refusal')
  t.notOk(upstream.rpcMethods().slice(before).includes('tools/call'), 'no tools/call reached the upstream')
  const read = await client.callTool({ name: 'read_file', arguments: { path: 'README.md' } })
  t.match(textOf(read), /README/, 'what the policy allows still works')
})

t.test('agent-trust token prints a badge for a key file, bound to that key', async (t) => {
  const keyFile = path.join(dataDir, 'agent.jwk')
  writeFileSync(keyFile, JSON.stringify(plain.key.privateKey.export({ format: 'jwk' })), { mode: 0o600 })
  chmodSync(keyFile, 0o600)
  const run = promisify(execFile)
  const { stdout } = await run(process.execPath, [CLI, 'token', '--issuer', issuer, '--key', keyFile, '--resource', gatewayOrigin])
  const token = stdout.trim()
  const checked = await verifyBadgeWithJwks(token, { jwksUrl: `${issuer}/.well-known/jwks.json`, issuer, audience: [gatewayOrigin] })
  t.equal(checked.valid, true, 'the badge verifies against the authority JWKS with the gateway as audience')
  if (checked.valid) {
    t.equal(checked.claims.sub, plain.key.did, 'its subject is the agent')
    t.equal(checked.claims.cnf?.jwk?.x, plain.key.publicJwk.x, 'it is bound to the key that signed the assertion')
  }
  const refused = await run(process.execPath, [CLI, 'token', '--issuer', issuer, '--key', keyFile, '--resource', 'https://elsewhere.example/mcp'])
    .then(() => null, (error: { code: number; stderr: string }) => error)
  t.equal(refused?.code, 1, 'a resource the organization does not allow exits 1')
  t.match(refused?.stderr ?? '', /invalid_target/, 'with the OAuth error code')
})

t.test('the walkthrough\'s client, examples/mcp-oauth-client.mjs, searches and pays for an OV agent', async (t) => {
  const keyFile = path.join(dataDir, 'verified.jwk')
  writeFileSync(keyFile, JSON.stringify(verified.key.privateKey.export({ format: 'jwk' })), { mode: 0o600 })
  const { stdout } = await promisify(execFile)(process.execPath, [projectPath('examples', 'mcp-oauth-client.mjs')], {
    env: { PATH: process.env.PATH, CLIENT_ID: verified.key.did, KEY_FILE: keyFile, MCP_URL: mcpUrl, ISSUER: issuer },
  })
  t.equal(stdout, '3 hits for "payments":\npaid\n', 'as the README shows it')
})
