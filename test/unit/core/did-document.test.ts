/**
 * A did:web host is a peer: whatever JSON it serves, parseDidDocument either returns keys it could
 * read or throws DidDocumentError (which the resolver reports as a resolution failure), and the keys
 * it returns are 32-byte Ed25519 keys of at most 32 methods.
 */
import t from 'tap'
import fc from 'fast-check'
import { DidDocumentError, parseDidDocument } from '../../../src/core/did-document.js'
import { propertyRuns } from '../../helpers/property-runs.js'

const DID = 'did:web:agents.example.com:alice'

t.test('property: any JSON document is keys or a DidDocumentError', async (t) => {
  const method = fc.record({
    id: fc.oneof(fc.string(), fc.constant('#key-1'), fc.jsonValue()),
    type: fc.string(),
    controller: fc.oneof(fc.constant(DID), fc.jsonValue()),
    publicKeyMultibase: fc.oneof(fc.string(), fc.constant('z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK'), fc.jsonValue()),
    publicKeyJwk: fc.oneof(fc.jsonValue(), fc.record({ kty: fc.constantFrom('OKP', 'RSA'), crv: fc.constantFrom('Ed25519', 'X25519'), x: fc.string() })),
  }, { requiredKeys: [] })
  const document = fc.oneof(
    fc.jsonValue(),
    fc.record({
      id: fc.oneof(fc.constant(DID), fc.jsonValue()),
      verificationMethod: fc.oneof(fc.array(method, { maxLength: 40 }), fc.jsonValue()),
      authentication: fc.oneof(fc.array(fc.oneof(fc.string(), method), { maxLength: 40 }), fc.jsonValue()),
      assertionMethod: fc.jsonValue(),
    }, { requiredKeys: [] }),
  )
  fc.assert(
    fc.property(document, (doc) => {
      try {
        const resolved = parseDidDocument(DID, doc)
        if (resolved.keys.size > 32 * 2) throw new Error('too many keys')
        for (const key of resolved.keys.values()) if (!(key instanceof Uint8Array) || key.length !== 32) throw new Error('not an Ed25519 key')
      } catch (error) {
        if (!(error instanceof DidDocumentError)) throw error
      }
    }),
    propertyRuns(500),
  )
  t.pass('held')
})
