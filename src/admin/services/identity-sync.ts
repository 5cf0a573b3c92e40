/**
 * Applies the identity provider's user-sync events (protocol.md §2) to users, organizations and
 * memberships. The caller has already verified the Svix signature; this module trusts the event's
 * origin but not its shape.
 *
 * Clerk fields read (nothing else of the payload is used):
 * - every event: `type`, `data` (an object)
 * - `user.created` / `user.updated`: `data.id`, `data.email_addresses[].{id, email_address}`,
 *   `data.primary_email_address_id`, `data.first_name`, `data.last_name`, `data.username`
 * - `user.deleted`: `data.id`
 * - `organization.created` / `organization.updated`: `data.id`, `data.name`, `data.slug`
 * - `organization.deleted`: `data.id`
 * - `organizationMembership.created` / `.updated` / `.deleted`: `data.organization.{id, name}`,
 *   `data.public_user_data.{user_id, first_name, last_name}`, `data.role`
 *
 * Svix does not promise delivery order; events are applied as they arrive (a membership event for a user
 * or organization not seen yet creates a minimal row that the later user/organization event fills in).
 */
import { ServiceError } from '../../core/errors.js'
import { isSafeText, truncateText } from '../../core/safe-text.js'
import type { Database, Queryable } from '../../db/database.js'
import * as identity from '../../db/repositories/identity.js'
import { setMembership, type Role } from '../../db/repositories/users.js'

/** How long delivery ids are kept for replay detection. */
const DELIVERY_RETENTION_DAYS = 30
const MAX_ID = 200
const MAX_NAME = 200
// RFC 3696 (errata) puts the longest address at 254 characters; 320 leaves room and stays bounded.
const MAX_EMAIL = 320

export interface SyncResult {
  /** True when the event type is not one this service acts on (it is still recorded as delivered). */
  readonly ignored: boolean
}

type Json = Record<string, unknown>

function isObject(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

function invalid(message: string): ServiceError {
  return new ServiceError('invalid_request', message)
}

function requiredId(value: unknown, field: string, type: string): string {
  if (typeof value !== 'string' || value === '' || value.length > MAX_ID || !isSafeText(value)) {
    throw invalid(`The ${type} event has no usable ${field}.`)
  }
  return value
}

/**
 * A text field of the event, or null when absent. The signature proves the sender, not the content: a
 * NUL or a lone surrogate (which no column can store) refuses the whole event rather than failing in SQL.
 */
function optionalString(value: unknown): string | null {
  if (typeof value !== 'string' || value.trim() === '') return null
  if (!isSafeText(value)) throw invalid('The event holds text with U+0000 or an unpaired UTF-16 surrogate.')
  return value.trim()
}

function fullName(first: unknown, last: unknown): string | null {
  const name = [optionalString(first), optionalString(last)].filter((part) => part !== null).join(' ')
  return name === '' ? null : truncateText(name, MAX_NAME)
}

/** The primary address when Clerk names one, else the first listed. */
function primaryEmail(data: Json): string | null {
  const addresses = Array.isArray(data.email_addresses) ? data.email_addresses.filter(isObject) : []
  const primary = addresses.find((a) => a.id !== undefined && a.id === data.primary_email_address_id) ?? addresses[0]
  const email = primary === undefined ? null : optionalString(primary.email_address)
  if (email !== null && email.length > MAX_EMAIL) throw invalid('The event\'s email address is longer than any valid address.')
  return email
}

/** `org:admin` (Clerk's default admin role) or a bare `admin` is admin; every other role is member. */
export function roleOf(clerkRole: unknown): Role {
  return clerkRole === 'org:admin' || clerkRole === 'admin' ? 'admin' : 'member'
}

function organizationName(data: Json, fallback: string): string {
  return truncateText(optionalString(data.name) ?? optionalString(data.slug) ?? fallback, MAX_NAME)
}

interface MembershipRef {
  readonly externalOrgId: string
  readonly orgName: string
  readonly userId: string
  readonly userName: string | null
}

function membershipRef(data: Json, type: string): MembershipRef {
  const org = isObject(data.organization) ? data.organization : {}
  const user = isObject(data.public_user_data) ? data.public_user_data : {}
  const externalOrgId = requiredId(org.id, 'data.organization.id', type)
  return {
    externalOrgId,
    orgName: organizationName(org, externalOrgId),
    userId: requiredId(user.user_id, 'data.public_user_data.user_id', type),
    userName: fullName(user.first_name, user.last_name),
  }
}

/** Applies one event; returns false when the type is not handled. */
async function apply(tx: Queryable, type: string, data: Json): Promise<boolean> {
  switch (type) {
    case 'user.created':
    case 'user.updated': {
      const id = requiredId(data.id, 'data.id', type)
      const username = optionalString(data.username)
      const displayName = fullName(data.first_name, data.last_name) ?? (username === null ? null : truncateText(username, MAX_NAME))
      await identity.putUserProfile(tx, { id, email: primaryEmail(data), displayName })
      return true
    }
    case 'user.deleted':
      await identity.deleteUser(tx, requiredId(data.id, 'data.id', type))
      return true
    case 'organization.created':
    case 'organization.updated': {
      const externalId = requiredId(data.id, 'data.id', type)
      await identity.putOrganization(tx, externalId, organizationName(data, externalId), true)
      return true
    }
    case 'organization.deleted':
      // Tenant data (agents, keys, policies, badges) is never destroyed by a webhook: the organization is
      // unlinked and its memberships dropped, and an operator decides what happens to the rest.
      await identity.unlinkOrganization(tx, requiredId(data.id, 'data.id', type))
      return true
    case 'organizationMembership.created':
    case 'organizationMembership.updated': {
      const ref = membershipRef(data, type)
      const orgId = await identity.putOrganization(tx, ref.externalOrgId, ref.orgName, false)
      await identity.ensureUser(tx, ref.userId, ref.userName)
      await setMembership(tx, orgId, ref.userId, roleOf(data.role))
      return true
    }
    case 'organizationMembership.deleted': {
      const ref = membershipRef(data, type)
      const orgId = await identity.findOrganizationIdByExternalId(tx, ref.externalOrgId)
      if (orgId !== null) await identity.deleteMembership(tx, orgId, ref.userId)
      return true
    }
    default:
      return false
  }
}

/**
 * Applies a verified event under its Svix delivery id, in one transaction with the replay record: a
 * delivery id seen before is refused (400) and changes nothing; a failed event records nothing, so
 * the provider's retry can succeed.
 */
export async function applyIdentityEvent(db: Database, deliveryId: string, event: unknown): Promise<SyncResult> {
  if (!isObject(event) || typeof event.type !== 'string' || event.type === '' || event.type.length > MAX_NAME || !isObject(event.data)) {
    throw invalid('The event must be an object with a string "type" and an object "data".')
  }
  const type = event.type
  const data = event.data
  return db.transaction(async (tx) => {
    if (!(await identity.recordDelivery(tx, deliveryId, type))) {
      throw invalid('This webhook delivery (svix-id) was already processed; replays are refused.')
    }
    const handled = await apply(tx, type, data)
    await identity.pruneDeliveries(tx, DELIVERY_RETENTION_DAYS)
    return { ignored: !handled }
  })
}
