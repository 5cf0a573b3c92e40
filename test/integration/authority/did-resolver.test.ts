/**
 * did:web resolution of this registry's own agents: from the database (the appliance) and from the
 * registry's served document (a gateway without a database). A UUID is recognised in either case, so
 * every spelling of an agent's did:web resolves to the same key, under the DID that was asked for.
 */
import t from 'tap'
import { generateKeyPairSync, randomUUID } from 'node:crypto'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { DidResolutionError, DidResolver, registryDidResolver } from '../../../src/authority/did-resolver.js'
import { buildAgentDidDocument } from '../../../src/core/did-document.js'
import { agentDidWeb } from '../../../src/core/did.js'
import { jwkToPublicKey, publicKeyToJwk } from '../../../src/core/did-key.js'
import { insertAgent } from '../../../src/db/repositories/agents.js'
import { insertOrganization } from '../../../src/db/repositories/organizations.js'
import { BACKEND, createTestDatabase } from '../../helpers/database.js'

const HOST = 'registry.test%3A8080'
const database = await createTestDatabase(t)
const orgId = randomUUID()
await insertOrganization(database.db, { id: orgId, name: 'did-resolver' })
const agentId = randomUUID()
const jwk = publicKeyToJwk(Buffer.from(generateKeyPairSync('ed25519').publicKey.export({ format: 'jwk' }).x as string, 'base64url'))
const key = jwkToPublicKey(jwk)
await insertAgent(database.db, {
  id: agentId, orgId, name: 'resolved', domain: null, description: null, did: null, publicKeyJwk: jwk, agentCard: null,
})
const spellings = [agentDidWeb(HOST, agentId), agentDidWeb(HOST, agentId.toUpperCase()), agentDidWeb(HOST.toUpperCase(), agentId.toUpperCase())]

t.test(`own agents from the database, any spelling of the UUID (${BACKEND})`, async (t) => {
  const resolver = new DidResolver({ db: database.db, registryDidHost: HOST })
  for (const did of spellings) {
    const resolved = await resolver.resolve(did)
    t.equal(resolved.did, did, `${did}: resolved under the DID asked for`)
    t.same([...resolved.keys.values()], [key], `${did}: the agent's key`)
    t.same(await resolver.resolveKey(`${did}#key-1`), key, `${did}: its #key-1`)
  }
  await t.rejects(resolver.resolve(agentDidWeb(HOST, randomUUID())), DidResolutionError, 'an unknown agent')
  await t.rejects(resolver.resolve(agentDidWeb(HOST, 'not-a-uuid')), DidResolutionError, 'not a UUID')
})

t.test('own agents from the registry\'s served document, any spelling of the UUID', async (t) => {
  const asked: string[] = []
  const resolver = new DidResolver({
    registryDidHost: () => HOST,
    fetchOwnDocument: async (id) => {
      asked.push(id)
      // What the registry serves: the document under its canonical DID.
      return buildAgentDidDocument(agentDidWeb(HOST, id), id === agentId ? key : null)
    },
  })
  for (const did of spellings) {
    const resolved = await resolver.resolve(did)
    t.equal(resolved.did, did, `${did}: resolved under the DID asked for`)
    t.same(await resolver.resolveKey(`${did}#key-1`), key, `${did}: its #key-1`)
  }
  t.ok(asked.length > 0 && asked.every((id) => id === agentId), 'the registry is asked for the lower-case UUID')

  const other = randomUUID()
  const keyless = await resolver.resolve(agentDidWeb(HOST, other))
  t.equal(keyless.keys.size, 0, 'an agent without a key resolves to no keys')
  const lying = new DidResolver({ registryDidHost: HOST, fetchOwnDocument: async () => buildAgentDidDocument(agentDidWeb(HOST, other), key) })
  await t.rejects(lying.resolve(agentDidWeb(HOST, agentId)), DidResolutionError, 'a document for another agent is refused')
})

t.test('a gateway without a database reads its registry\'s DID documents with a bound', async (t) => {
  const endlessId = randomUUID()
  let written = 0
  const server = createServer((req, res) => {
    const id = /^\/agents\/([^/]+)\/did\.json$/.exec(req.url ?? '')?.[1] ?? ''
    if (id !== endlessId) {
      res.setHeader('content-type', 'application/json')
      res.end(JSON.stringify(buildAgentDidDocument(agentDidWeb(HOST, id), key)))
      return
    }
    // A registry gone wrong: a document that never ends, written as fast as the client reads it.
    res.writeHead(200, { 'content-type': 'application/json' })
    const filler = Buffer.alloc(16 * 1024, 0x20)
    const pump = (): void => {
      while (!res.destroyed) {
        written += filler.length
        if (!res.write(filler)) {
          res.once('drain', pump)
          return
        }
      }
    }
    res.write('{"id": "')
    pump()
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => {
    server.closeAllConnections()
    server.close(() => resolve())
  }))
  const resolver = registryDidResolver({
    registryUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`,
    registryDidHost: () => HOST,
    allowHosts: [],
  })
  t.same(await resolver.resolveKey(`${agentDidWeb(HOST, agentId)}#key-1`), key, 'a document of the registry resolves')
  // Unbounded, the read would go on for as long as the registry writes; a deadline makes that a failure.
  const deadline = new Promise<'still reading'>((resolve) => setTimeout(() => resolve('still reading'), 5_000).unref())
  const outcome = await Promise.race([resolver.resolve(agentDidWeb(HOST, endlessId)).catch((error: unknown) => error), deadline])
  t.ok(outcome instanceof DidResolutionError, 'an endless document is refused')
  // The loopback's socket buffers hold a few MiB beyond the 64 KiB the resolver reads.
  t.ok(written < 32 * 1024 * 1024, `reading stopped at the bound (${written} bytes written by then)`)
})
