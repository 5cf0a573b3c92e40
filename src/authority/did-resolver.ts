/**
 * DID resolution to Ed25519 keys (docs/wire-contract.md §5): did:key locally; did:web of this registry from the
 * database; any other did:web over HTTPS through the guarded fetch (no redirects, no private addresses
 * at connect time, 5 s connect, 10 s total, 64 KiB body), with a bounded cache of successes.
 */
import { LRUCache } from 'lru-cache'
import { request } from 'undici'
import { buildAgentDidDocument, didWebUrl, parseDidDocument, type ResolvedKeys } from '../core/did-document.js'
import { agentDidWeb, ownAgentIdFromDid } from '../core/did.js'
import { decodeDidKey, didKeyVerificationMethodId, jwkToPublicKey } from '../core/did-key.js'
import { isUuid } from '../core/uuid.js'
import type { Queryable } from '../db/database.js'
import { findAgentById } from '../db/repositories/agents.js'
import { readBoundedBody } from '../net/bounded-body.js'
import { guardedFetch } from '../net/guarded-fetch.js'

export class DidResolutionError extends Error {
  readonly code = 'DID_RESOLUTION_FAILED'
  override readonly name = 'DidResolutionError'
}

export interface DidResolverOptions {
  /** Where this registry's own agents are looked up; without it, `fetchOwnDocument` must be given. */
  readonly db?: Queryable
  /**
   * A gateway-only process has no database: it asks the registry it syncs from for its own agents'
   * DID documents (a configured, trusted URL, so the private-address guard does not apply).
   */
  readonly fetchOwnDocument?: (agentId: string) => Promise<unknown>
  /** `host` or `host%3Aport`; a function when it follows what the registry names (gateway-only). */
  readonly registryDidHost: string | (() => string)
  /** Hosts exempt from the address guard and allowed over plain HTTP (tests only). */
  readonly allowHosts?: readonly string[]
  readonly cacheTtlMs?: number
}

export class DidResolver {
  readonly #options: DidResolverOptions
  readonly #cache: LRUCache<string, ResolvedKeys>

  constructor(options: DidResolverOptions) {
    this.#options = options
    this.#cache = new LRUCache({ max: 1000, ttl: options.cacheTtlMs ?? 300_000 })
  }

  /** Resolves a DID to its keys and relationships; throws DidResolutionError when it cannot. */
  async resolve(did: string): Promise<ResolvedKeys> {
    if (did.startsWith('did:key:')) return this.#resolveDidKey(did)
    if (!did.startsWith('did:web:')) throw new DidResolutionError('only did:key and did:web are supported')
    const configuredHost = this.#options.registryDidHost
    const host = typeof configuredHost === 'string' ? configuredHost : configuredHost()
    const ownId = ownAgentIdFromDid(host, did)
    if (ownId !== null) return this.#resolveOwnAgent(did, host, ownId)
    const cached = this.#cache.get(did)
    if (cached !== undefined) return cached
    const resolved = await this.#fetchDidWeb(did)
    this.#cache.set(did, resolved)
    return resolved
  }

  /**
   * The key a `kid` names: a DID URL (`did…#fragment`) or a bare DID with exactly one key. Null when the
   * DID resolves but holds no such key; resolution failures throw.
   */
  async resolveKey(kid: string): Promise<Uint8Array | null> {
    const hash = kid.indexOf('#')
    const did = hash === -1 ? kid : kid.slice(0, hash)
    const resolved = await this.resolve(did)
    if (hash !== -1) return resolved.keys.get(kid) ?? null
    return resolved.keys.size === 1 ? [...resolved.keys.values()][0] ?? null : null
  }

  #resolveDidKey(did: string): ResolvedKeys {
    let key: Uint8Array
    try {
      key = decodeDidKey(did)
    } catch (error) {
      throw new DidResolutionError(error instanceof Error ? error.message : 'invalid did:key', { cause: error })
    }
    const id = didKeyVerificationMethodId(did)
    return { did, keys: new Map([[id, key]]), authentication: new Set([id]), assertionMethod: new Set([id]) }
  }

  /**
   * An agent of this registry: its key from the database or, without one, from the document the
   * registry serves under the canonical DID (lower-case host and UUID). The document is then built and
   * parsed under the DID asked for, so every spelling of the DID resolves alike.
   */
  async #resolveOwnAgent(did: string, registryDidHost: string, agentId: string): Promise<ResolvedKeys> {
    if (!isUuid(agentId)) throw new DidResolutionError('no agent of this registry has that DID')
    const key = await this.#ownAgentKey(registryDidHost, agentId.toLowerCase())
    return parseDidDocument(did, buildAgentDidDocument(did, key))
  }

  async #ownAgentKey(registryDidHost: string, agentId: string): Promise<Uint8Array | null> {
    const { db, fetchOwnDocument } = this.#options
    if (db !== undefined) {
      const row = await findAgentById(db, agentId)
      if (row === null) throw new DidResolutionError('no agent of this registry has that DID')
      return row.public_key_jwk === null ? null : jwkToPublicKey(row.public_key_jwk)
    }
    if (fetchOwnDocument === undefined) throw new DidResolutionError('no agent of this registry has that DID')
    let document: unknown
    try {
      document = await fetchOwnDocument(agentId)
    } catch (error) {
      throw new DidResolutionError('the registry did not answer for its DID document', { cause: error })
    }
    let served: ResolvedKeys
    try {
      served = parseDidDocument(agentDidWeb(registryDidHost, agentId), document)
    } catch (error) {
      throw new DidResolutionError(error instanceof Error ? error.message : 'invalid DID document', { cause: error })
    }
    // The registry serves an agent's document with its one registered key, or none.
    const keys = [...served.keys.values()]
    return keys.length === 1 ? keys[0]! : null
  }

  async #fetchDidWeb(did: string): Promise<ResolvedKeys> {
    let url: URL
    try {
      url = didWebUrl(did)
    } catch (error) {
      throw new DidResolutionError(error instanceof Error ? error.message : 'invalid did:web', { cause: error })
    }
    const allowHosts = this.#options.allowHosts ?? []
    if (allowHosts.includes(url.hostname.toLowerCase())) url.protocol = 'http:'
    let document: unknown
    try {
      const response = await guardedFetch(url.toString(), {
        timeoutMs: 10_000,
        connectTimeoutMs: 5_000,
        maxBodyBytes: MAX_DID_DOCUMENT_BYTES,
        allowHosts,
        headers: { accept: 'application/did+json, application/json' },
      })
      if (response.status !== 200) throw new DidResolutionError(`DID document request answered ${response.status}`)
      document = JSON.parse(response.body.toString('utf8'))
    } catch (error) {
      if (error instanceof DidResolutionError) throw error
      const code = (error as { code?: unknown }).code
      throw new DidResolutionError(`DID document could not be fetched${typeof code === 'string' ? ` (${code})` : ''}`, { cause: error })
    }
    try {
      return parseDidDocument(did, document)
    } catch (error) {
      throw new DidResolutionError(error instanceof Error ? error.message : 'invalid DID document', { cause: error })
    }
  }
}

/** The largest DID document read, from the registry or any did:web host. */
const MAX_DID_DOCUMENT_BYTES = 64 * 1024

/**
 * did:web resolution for a gateway without a database: the registry's own agents' documents come from
 * the registry itself (`/agents/{id}/did.json`), every other did:web through the guarded fetch. The
 * registry's did:web host is that of the issuer it names (`registryDidHost`), not of the URL it is
 * reached by.
 */
export function registryDidResolver(options: {
  readonly registryUrl: string
  readonly registryDidHost: () => string
  readonly allowHosts: readonly string[]
}): DidResolver {
  const base = options.registryUrl.replace(/\/+$/, '')
  return new DidResolver({
    registryDidHost: options.registryDidHost,
    allowHosts: options.allowHosts,
    fetchOwnDocument: async (agentId) => {
      const response = await request(`${base}/agents/${encodeURIComponent(agentId)}/did.json`, { headersTimeout: 5_000, bodyTimeout: 5_000 })
      if (response.statusCode !== 200) {
        await response.body.dump()
        throw new Error(`registry answered ${response.statusCode}`)
      }
      const body = await readBoundedBody(response.body, MAX_DID_DOCUMENT_BYTES, response.headers['content-length'])
      return JSON.parse(body.toString('utf8')) as unknown
    },
  })
}
