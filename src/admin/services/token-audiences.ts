/**
 * The organization's token-audience allow-list (docs/api.md §4.10): the exact strings a token from the
 * OAuth token endpoint may carry in `aud`, as a resource or an audience scope. Empty means none.
 */
import { ServiceError } from '../../core/errors.js'
import { requireAdmin, type Principal } from '../../core/principal.js'
import type { Database } from '../../db/database.js'
import * as organizations from '../../db/repositories/organizations.js'

export const MAX_TOKEN_AUDIENCES = 50
export const MAX_TOKEN_AUDIENCE_LENGTH = 512

// Never part of a resource URI or a scope token, and invisible in a listing: refused rather than stored.
const WHITESPACE_OR_CONTROL = /[\s\u0000-\u001f\u007f-\u009f]/u

export async function getTokenAudiences(db: Database, principal: Principal): Promise<{ audiences: string[] }> {
  const audiences = await organizations.findTokenAudiences(db, principal.orgId)
  if (audiences === null) throw new ServiceError('org_not_found')
  return { audiences }
}

/** Replaces the list (admin); duplicates are kept once, in the order given. */
export async function replaceTokenAudiences(db: Database, principal: Principal, audiences: readonly string[]): Promise<{ audiences: string[] }> {
  requireAdmin(principal)
  const problem = audiences.findIndex((audience) => WHITESPACE_OR_CONTROL.test(audience))
  if (problem !== -1) throw new ServiceError('invalid_request', `audiences/${problem} must not contain whitespace or control characters.`)
  const stored = await organizations.setTokenAudiences(db, principal.orgId, [...new Set(audiences)])
  if (stored === null) throw new ServiceError('org_not_found')
  return { audiences: stored }
}
