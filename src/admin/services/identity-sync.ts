/**
 * Applies the identity provider's user-sync events (docs/wire-contract.md §2) to users, organizations and
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
import * as apiKeys from '../../db/repositories/api-keys.js'
import type { RevokeReason } from '../../db/repositories/api-keys.js'
import * as identity from '../../db/repositories/identity.js'
import type { Role } from '../../core/principal.js'
import { setMembership } from '../../db/repositories/users.js'
import { notifyKeyChanges } from './credentials.js'
import { isRecord } from '../../core/json-objects.js'

/** How long delivery ids are kept for replay detection. */
const DELIVERY_RETENTION_DAYS = 30
const MAX_ID = 200
const MAX_NAME = 200
// RFC 3696 (errata) puts the longest address at 254 characters; 320 leaves room and stays bounded.
const MAX_EMAIL = 320

/** What an event did to API keys, for the audit log (the key id and why). */
export interface KeyChange {
  readonly keyId: string
  readonly orgId: string
  /** A revocation reason, or `creator_role_changed` when the key's rights were capped or restored. */
  readonly reason: RevokeReason | 'creator_role_changed'
}

export interface SyncResult {
  /** True when the event type is not one this service acts on (it is still recorded as delivered). */
  readonly ignored: boolean
  /** API keys revoked or re-capped by the event, already announced on the key channel. */
  readonly keys: readonly KeyChange[]
}

type Json = Record<string, unknown>

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
  const addresses = Array.isArray(data.email_addresses) ? data.email_addresses.filter(isRecord) : []
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
  const org = isRecord(data.organization) ? data.organization : {}
  const user = isRecord(data.public_user_data) ? data.public_user_data : {}
  const externalOrgId = requiredId(org.id, 'data.organization.id', type)
  return {
    externalOrgId,
    orgName: organizationName(org, externalOrgId),
    userId: requiredId(user.user_id, 'data.public_user_data.user_id', type),
    userName: fullName(user.first_name, user.last_name),
  }
}

const revoked = (rows: { id: string; org_id: string }[], reason: RevokeReason): KeyChange[] =>
  rows.map((row) => ({ keyId: row.id, orgId: row.org_id, reason }))

/**
 * Applies one event; returns null when the type is not handled, else the API keys it changed. Keys act
 * for the user who created them: losing the user, the membership or the organization's link revokes
 * them (kept as a record, with the reason); a role change re-caps them at the next authentication.
 */
async function apply(tx: Queryable, type: string, data: Json): Promise<KeyChange[] | null> {
  switch (type) {
    case 'user.created':
    case 'user.updated': {
      const id = requiredId(data.id, 'data.id', type)
      const username = optionalString(data.username)
      const displayName = fullName(data.first_name, data.last_name) ?? (username === null ? null : truncateText(username, MAX_NAME))
      await identity.putUserProfile(tx, { id, email: primaryEmail(data), displayName })
      return []
    }
    case 'user.deleted': {
      const id = requiredId(data.id, 'data.id', type)
      const keys = revoked(await apiKeys.revokeKeysOfCreator(tx, id, null, 'creator_deleted'), 'creator_deleted')
      await identity.deleteUser(tx, id)
      return keys
    }
    case 'organization.created':
    case 'organization.updated': {
      const externalId = requiredId(data.id, 'data.id', type)
      await identity.putOrganization(tx, externalId, organizationName(data, externalId), true)
      return []
    }
    case 'organization.deleted': {
      // Tenant data (agents, keys, policies, badges) is never destroyed by a webhook: the organization is
      // unlinked and its memberships dropped, and an operator decides what happens to the rest.
      const orgId = await identity.unlinkOrganization(tx, requiredId(data.id, 'data.id', type))
      if (orgId === null) return []
      return revoked(await apiKeys.revokeKeysOfOrganization(tx, orgId, 'organization_unlinked'), 'organization_unlinked')
    }
    case 'organizationMembership.created':
    case 'organizationMembership.updated': {
      const ref = membershipRef(data, type)
      const orgId = await identity.putOrganization(tx, ref.externalOrgId, ref.orgName, false)
      await identity.ensureUser(tx, ref.userId, ref.userName)
      const role = roleOf(data.role)
      const before = await identity.findMembershipRole(tx, orgId, ref.userId)
      await setMembership(tx, orgId, ref.userId, role)
      if (before === null || before === role) return []
      const keys = await apiKeys.liveKeysOfCreator(tx, ref.userId, orgId)
      return keys.map((key) => ({ keyId: key.id, orgId: key.org_id, reason: 'creator_role_changed' as const }))
    }
    case 'organizationMembership.deleted': {
      const ref = membershipRef(data, type)
      const orgId = await identity.findOrganizationIdByExternalId(tx, ref.externalOrgId)
      if (orgId === null) return []
      await identity.deleteMembership(tx, orgId, ref.userId)
      return revoked(await apiKeys.revokeKeysOfCreator(tx, ref.userId, orgId, 'membership_removed'), 'membership_removed')
    }
    default:
      return null
  }
}

/**
 * Applies a verified event under its Svix delivery id, in one transaction with the replay record: a
 * delivery id seen before is refused (400) and changes nothing; a failed event records nothing, so
 * the provider's retry can succeed.
 */
export async function applyIdentityEvent(db: Database, deliveryId: string, event: unknown): Promise<SyncResult> {
  if (!isRecord(event) || typeof event.type !== 'string' || event.type === '' || event.type.length > MAX_NAME || !isRecord(event.data)) {
    throw invalid('The event must be an object with a string "type" and an object "data".')
  }
  const type = event.type
  const data = event.data
  return db.transaction(async (tx) => {
    if (!(await identity.recordDelivery(tx, deliveryId, type))) {
      throw invalid('This webhook delivery (svix-id) was already processed; replays are refused.')
    }
    const keys = await apply(tx, type, data)
    // Delivered on commit: every instance drops these keys from its cache at once.
    await notifyKeyChanges(tx, (keys ?? []).map((key) => key.keyId))
    await identity.pruneDeliveries(tx, DELIVERY_RETENTION_DAYS)
    return { ignored: keys === null, keys: keys ?? [] }
  })
}
