/**
 * Who is calling the admin plane, and the role checks every service applies to it. The auth plugin
 * resolves one principal per request; the registry, authority and policy services read it.
 */
import { ServiceError } from './errors.js'

/** A user's role in an organization. */
export type Role = 'admin' | 'member'

export interface Principal {
  readonly kind: 'api_key' | 'session'
  readonly orgId: string
  readonly role: Role
  /** Platform owner of the deployment: creates orgs, sets trust levels 3-4. */
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
