/**
 * W3C DID documents: the one this registry serves per agent (docs/api.md §2.7) and the parsing of documents
 * fetched for did:web resolution, reduced to what verification needs (keys and relationships).
 */
import { jwkToPublicKey, multibaseToPublicKey, publicKeyToMultibase } from './did-key.js'

export const DID_CONTEXTS = ['https://www.w3.org/ns/did/v1', 'https://w3id.org/security/suites/ed25519-2020/v1'] as const

export interface DidDocument {
  '@context': readonly string[]
  id: string
  verificationMethod: { id: string; type: string; controller: string; publicKeyMultibase: string }[]
  authentication: string[]
  assertionMethod: string[]
}

/** The document of an agent of this registry: its registered key is `#key-1`; without one, no methods. */
export function buildAgentDidDocument(did: string, publicKey: Uint8Array | null): DidDocument {
  if (publicKey === null) {
    return { '@context': DID_CONTEXTS, id: did, verificationMethod: [], authentication: [], assertionMethod: [] }
  }
  const keyId = `${did}#key-1`
  return {
    '@context': DID_CONTEXTS,
    id: did,
    verificationMethod: [{ id: keyId, type: 'Ed25519VerificationKey2020', controller: did, publicKeyMultibase: publicKeyToMultibase(publicKey) }],
    authentication: [keyId],
    assertionMethod: [keyId],
  }
}

/** What verification needs from a DID document: Ed25519 keys by method id, and the relationships. */
export interface ResolvedKeys {
  readonly did: string
  readonly keys: ReadonlyMap<string, Uint8Array>
  readonly authentication: ReadonlySet<string>
  readonly assertionMethod: ReadonlySet<string>
}

export class DidDocumentError extends Error {
  readonly code = 'DID_DOCUMENT_INVALID'
  override readonly name = 'DidDocumentError'
}

function absoluteId(did: string, id: string): string {
  return id.startsWith('#') ? `${did}${id}` : id
}

/**
 * Reads a fetched DID document. The document's `id` must be the DID asked for (a host cannot answer
 * for another DID); methods whose key is not Ed25519 are skipped, not trusted.
 */
export function parseDidDocument(did: string, document: unknown): ResolvedKeys {
  if (typeof document !== 'object' || document === null || Array.isArray(document)) throw new DidDocumentError('DID document is not an object')
  const doc = document as Record<string, unknown>
  if (doc.id !== did) throw new DidDocumentError('DID document id does not match the DID')
  const keys = new Map<string, Uint8Array>()
  const readMethod = (method: unknown): string | null => {
    if (typeof method !== 'object' || method === null) return null
    const m = method as Record<string, unknown>
    if (typeof m.id !== 'string') return null
    const id = absoluteId(did, m.id)
    if (m.controller !== undefined && m.controller !== did) return id
    try {
      if (typeof m.publicKeyMultibase === 'string') keys.set(id, multibaseToPublicKey(m.publicKeyMultibase))
      else if (m.publicKeyJwk !== undefined) keys.set(id, jwkToPublicKey(m.publicKeyJwk))
    } catch {
      // not an Ed25519 key: such a method can never verify a signature here
    }
    return id
  }
  const methods = Array.isArray(doc.verificationMethod) ? doc.verificationMethod : []
  for (const method of methods.slice(0, 32)) readMethod(method)
  const relationship = (name: string): Set<string> => {
    const out = new Set<string>()
    const entries = Array.isArray(doc[name]) ? (doc[name] as unknown[]) : []
    for (const entry of entries.slice(0, 32)) {
      const id = typeof entry === 'string' ? absoluteId(did, entry) : readMethod(entry)
      if (id !== null) out.add(id)
    }
    return out
  }
  return { did, keys, authentication: relationship('authentication'), assertionMethod: relationship('assertionMethod') }
}

/**
 * The HTTPS URL of a did:web document (did:web method §3.2): `did:web:host` → `/.well-known/did.json`,
 * `did:web:host:a:b` → `/a/b/did.json`, `%3A` in the host encodes a port.
 */
export function didWebUrl(did: string): URL {
  const match = /^did:web:([^:]+)((?::[^:]+)*)$/.exec(did)
  if (match === null) throw new DidDocumentError('not a did:web DID')
  const host = decodeURIComponent(match[1] as string)
  if (!/^[A-Za-z0-9.-]+(:\d{1,5})?$/.test(host)) throw new DidDocumentError('did:web host is not a host name')
  const segments = (match[2] as string).split(':').filter((s) => s !== '').map((s) => decodeURIComponent(s))
  if (segments.some((s) => s === '.' || s === '..' || s.includes('/') || s.includes('\\'))) {
    throw new DidDocumentError('did:web path segment is not allowed')
  }
  const path = segments.length === 0 ? '/.well-known/did.json' : `/${segments.map(encodeURIComponent).join('/')}/did.json`
  return new URL(`https://${host}${path}`)
}
