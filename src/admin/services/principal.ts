import { ServiceError } from '../../core/errors.js'
import type { Role } from '../../db/repositories/users.js'

/** Who is calling: resolved once per request by the auth plugin, read by services. */
export interface Principal {
  readonly kind: 'api_key' | 'session'
  readonly orgId: string
  readonly role: Role
  /** Platform owner of the deployment (docs/wire-contract.md §2): creates orgs, sets trust levels 3-4. */
  readonly operator: boolean
  readonly userId: string | null
  readonly keyId: string | null
}

export function requireAdmin(principal: Principal): void {
  if (principal.role !== 'admin') throw new ServiceError('forbidden', 'This action needs the admin role.')
}

export function requireOperator(principal: Principal): void {
  if (!principal.operator) throw new ServiceError('operator_required')
}
