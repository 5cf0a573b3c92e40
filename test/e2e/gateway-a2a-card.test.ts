/**
 * The appliance's gateway countersigns the public agent cards it rewrites with the authority's key ring
 * (docs/a2a.md, "The public card"): the child process is started as an operator starts it, the card's
 * signature verified with jose against the JWKS the admin plane publishes; a route requiring a signed card
 * refuses an unsigned one. Both with the gateway in the appliance's process and in two gateway workers.
 */
import t from 'tap'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { createLocalJWKSet, decodeProtectedHeader, flattenedVerify } from 'jose'
import { canonicalCardPayload, type CardSignature } from '../../src/core/card-signatures.js'
import { startService } from '../helpers/appliance.js'

t.setTimeout(240_000)

const agent = createServer((_req, res) => {
  res.writeHead(200, { 'content-type': 'application/json' })
  res.end(JSON.stringify({
    name: 'e2e', description: 'd', version: '1', capabilities: {}, defaultInputModes: [], defaultOutputModes: [], skills: [],
    supportedInterfaces: [{ url: `${origin}/agent`, protocolBinding: 'JSONRPC', protocolVersion: '1.0' }],
  }))
})
await new Promise<void>((resolve) => agent.listen(0, '127.0.0.1', resolve))
t.teardown(() => {
  agent.closeAllConnections()
  agent.close()
})
const origin = `http://127.0.0.1:${(agent.address() as AddressInfo).port}`

const dataDir = mkdtempSync(path.join(tmpdir(), 'svc-e2e-a2a-card-'))
const routesFile = path.join(dataDir, 'routes.json')
writeFileSync(routesFile, JSON.stringify({
  routes: [
    { prefix: '/agent', upstream: origin, protocol: 'a2a' },
    { prefix: '/strict', upstream: origin, protocol: 'a2a', mode: 'EM-STRICT', requireCardSignature: true },
  ],
}))
const PUBLIC = 'https://gw.example.test'
// With gateway workers the card is signed in a worker process, with the key file opened there (docs/operations.md, "Gateway workers").
for (const workers of ['1', '2']) {
  t.test(`SERVICE_GATEWAY_WORKERS=${workers}`, async (t) => {
    const appliance = await startService(t, { SERVICE_DATA_DIR: mkdtempSync(path.join(tmpdir(), 'svc-e2e-a2a-card-')), SERVICE_ROUTES_FILE: routesFile, SERVICE_GATEWAY_PUBLIC_URL: PUBLIC, SERVICE_GATEWAY_WORKERS: workers })
    const gw = appliance.gatewayUrl as string

    t.test('the rewritten card carries the authority countersignature, verifiable with the published JWKS', async (t) => {
      const answer = await fetch(`${gw}/agent/.well-known/agent-card.json`)
      t.equal(answer.status, 200, 'anonymous')
      const card = await answer.json() as Record<string, unknown>
      t.match(card, { supportedInterfaces: [{ url: `${PUBLIC}/agent` }] }, 'the interface names the gateway')
      const [signature] = card.signatures as CardSignature[]
      t.equal((card.signatures as unknown[]).length, 1)
      const header = decodeProtectedHeader(signature!)
      t.match(header, { alg: 'EdDSA', typ: 'JOSE', jku: 'http://registry.test/.well-known/jwks.json' })
      const jwks = await (await fetch(`${appliance.adminUrl}/.well-known/jwks.json`)).json() as { keys: { kid: string }[] }
      t.ok(jwks.keys.some((key) => key.kid === header.kid), "the kid is the authority's")
      const payload = canonicalCardPayload(card)
      if (!payload.ok) throw new Error(payload.message)
      await flattenedVerify({ ...signature!, payload: Buffer.from(payload.bytes).toString('base64url') }, createLocalJWKSet(jwks as never))
      t.pass('the countersignature verifies')
    })

    t.test('a route requiring a signed card refuses the unsigned one', async (t) => {
      const answer = await fetch(`${gw}/strict/.well-known/agent-card.json`)
      t.equal(answer.status, 502)
      t.match(await answer.json(), { error: 'A2A_CARD_SIGNATURE_INVALID' })
    })
  })
}
