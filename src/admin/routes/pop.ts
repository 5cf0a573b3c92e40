import type { FastifyInstance } from 'fastify'
import type { AuthorityContext } from '../../authority/badge-authority.js'
import type { DidResolver } from '../../authority/did-resolver.js'

export interface PopContext extends AuthorityContext {
  readonly resolver: DidResolver
}

/** IAL-1 proof of possession (RFC-003, protocol.md §6): challenge and pop endpoints. */
export function popRoutes(_app: FastifyInstance, _ctx: PopContext): void {
  // routes are added by the PoP work in progress
}
