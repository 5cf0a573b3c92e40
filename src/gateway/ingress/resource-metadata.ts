/**
 * Routes that are OAuth protected resources (docs/mcp.md, "Authorization"): what each needs per request,
 * computed once (the resource, its RFC 9728 metadata and the `WWW-Authenticate` challenges as ready
 * strings), and the metadata documents the gateway serves for them before any route is matched.
 */
import type { ServerResponse } from 'node:http'
import { metadataPathOf, metadataUrlOf, PROTECTED_RESOURCE_WELL_KNOWN } from '../../core/protected-resource.js'
import { TRUST_CODES } from '../../core/trust-level.js'

export interface ResourceServer {
  /** The resource identifier: published in the metadata, and what a badge's `aud` must contain. */
  readonly resource: string
  /** A badge without `aud` is refused. */
  readonly requireAudience: boolean
  /** The request path the metadata is served at. */
  readonly metadataPath: string
  /** A 401 without a badge (RFC 9728 §5.1). */
  readonly challenge: string
  /** A 401 for a badge that was sent (RFC 6750 §3: the error first). */
  readonly invalidTokenChallenge: string
  /** A 403 for a trust level below the policy's, by the level asked for (0-4; RFC 6750 §3.1). */
  readonly scopeChallenges: readonly string[]
}

export function resourceServer(resource: string, requireAudience: boolean): ResourceServer {
  const metadata = `resource_metadata="${metadataUrlOf(resource)}"`
  return Object.freeze({
    resource,
    requireAudience,
    metadataPath: metadataPathOf(resource),
    challenge: `Bearer ${metadata}`,
    invalidTokenChallenge: `Bearer error="invalid_token", ${metadata}`,
    scopeChallenges: Object.freeze(TRUST_CODES.map((code) => `Bearer error="insufficient_scope", scope="trust:${code}", ${metadata}`)),
  })
}

/** Only GET and HEAD read metadata; this is the `Allow` of a 405 for anything else. */
export const METADATA_METHODS = 'GET, HEAD'

/** The metadata paths of a gateway's resource servers. */
export class ResourceMetadataTable {
  readonly #byPath = new Map<string, ResourceServer>()
  // The document depends on the snapshot's issuer, which rarely changes: rebuilt only when it does.
  readonly #documents = new Map<ResourceServer, { issuer: string; body: string }>()

  /** @throws Error when two resource servers share a metadata path (the routes file reports it first). */
  constructor(servers: readonly ResourceServer[]) {
    for (const server of servers) {
      const known = this.#byPath.get(server.metadataPath)
      if (known === server) continue
      if (known !== undefined) throw new Error(`two resource servers share the metadata path ${server.metadataPath}`)
      this.#byPath.set(server.metadataPath, server)
    }
  }

  get size(): number {
    return this.#byPath.size
  }

  /** The resource server whose metadata `path` (canonical, without query) names, or undefined. */
  find(path: string): ResourceServer | undefined {
    return path.startsWith(PROTECTED_RESOURCE_WELL_KNOWN) ? this.#byPath.get(path) : undefined
  }

  /** The RFC 9728 §2 document: the authorization server is the issuer the gateway trusts. */
  document(server: ResourceServer, issuer: string): string {
    const cached = this.#documents.get(server)
    if (cached !== undefined && cached.issuer === issuer) return cached.body
    const body = JSON.stringify({ resource: server.resource, authorization_servers: [issuer], bearer_methods_supported: ['header'] })
    this.#documents.set(server, { issuer, body })
    return body
  }
}

/**
 * Writes the metadata document: public (no badge, any origin may read it, RFC 9728 §3) and marked as the
 * gateway's own answer. Never throws; returns the status written.
 */
export function sendResourceMetadata(res: ServerResponse, body: string): number {
  try {
    res.writeHead(200, {
      'content-type': 'application/json',
      'content-length': Buffer.byteLength(body),
      'cache-control': 'no-store',
      'access-control-allow-origin': '*',
      'x-service-gateway': 'metadata',
    })
    res.end(body)
  } catch {
    res.destroy()
  }
  return 200
}
