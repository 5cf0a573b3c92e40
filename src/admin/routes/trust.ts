import type { FastifyInstance } from 'fastify'
import type { Database } from '../../db/database.js'

export interface TrustContext {
  readonly db: Database
  /** SERVICE_DNS_SERVERS: `ip` or `ip:port` resolvers; empty = the system resolver. */
  readonly dnsServers: readonly string[]
  /** `host` or `host%3Aport` of this registry's did:web identifiers. */
  readonly registryDidHost: string
}

/** Earned trust levels (protocol.md §4): DNS TXT domain validation (level 2), operator levels 3-4. */
export function trustRoutes(_app: FastifyInstance, _ctx: TrustContext): void {
  // routes are added by the domain-validation work in progress
}
