// Earned trust levels (docs/wire-contract.md §4): level 2 by a DNS TXT challenge, 3-4 set by an operator.
// Other TXT records at the name are ignored, so several agents can prove one domain side by side.
import { randomBytes } from 'node:crypto'
import { Resolver } from 'node:dns/promises'
import { CHALLENGE_LABEL, normalizeDomain } from '../core/domain-name.js'
import { ServiceError } from '../core/errors.js'
import { FOREIGN_KEY_VIOLATION, sqlState, type Database } from '../db/database.js'
import * as agents from '../db/repositories/agents.js'
import type { AgentRow } from '../db/repositories/agents.js'
import * as verifications from '../db/repositories/domain-verifications.js'
import { notifyPolicyChange } from '../db/repositories/policies.js'
import { requireAdmin, requireOperator, type Principal } from '../core/principal.js'

export const RECORD_VALUE_PREFIX = 'service-domain-verification='
/** Trust level earned by a verified domain (docs/api.md §2.3: DV). */
export const DV_TRUST_LEVEL = 2

const TOKEN_BYTES = 32

/** `pending` until the record was seen once; `verified` is final for the (agent, domain) pair. */
export type DomainVerificationStatus = 'pending' | 'verified'

/** Snake-case fields: docs/wire-contract.md §13. */
export interface DomainChallengeView {
  domain: string
  record_name: string
  record_value: string
  status: DomainVerificationStatus
}

export function challengeRecordName(domain: string): string {
  return `${CHALLENGE_LABEL}.${domain}`
}

export function challengeRecordValue(token: string): string {
  return `${RECORD_VALUE_PREFIX}${token}`
}

export function generateChallengeToken(): string {
  return randomBytes(TOKEN_BYTES).toString('base64url')
}

/** A value over 255 bytes arrives as several character-strings (RFC 1035 §3.3.14) that form one value. */
export function joinTxtChunks(records: readonly (readonly string[])[]): string[] {
  return records.map((chunks) => chunks.join(''))
}

export function txtRecordsContain(records: readonly (readonly string[])[], expected: string): boolean {
  return joinTxtChunks(records).some((value) => value === expected)
}

/** `'1'`-`'4'` to a level; anything else, the same level as a JSON number included, throws `invalid_trust_level`. */
export function parseTrustLevel(value: unknown): number {
  if (typeof value !== 'string' || !/^[1-4]$/.test(value)) throw new ServiceError('invalid_trust_level')
  return Number(value)
}

/** TXT records of a name as character-string arrays; `[]` when the name or its TXT records do not exist. */
export type TxtLookup = (name: string) => Promise<string[][]>

export interface TxtLookupOptions {
  /** First-try time-out per server (c-ares doubles it on each retry). */
  readonly timeoutMs?: number
  readonly tries?: number
  /** Hard limit for the whole lookup, whatever the servers and retries. */
  readonly deadlineMs?: number
}

/**
 * NXDOMAIN and NODATA mean "not published (yet)"; any other failure throws `dns_lookup_failed`, since it says
 * nothing about whether the record exists. No `servers`: the system's resolvers.
 */
export function createTxtLookup(servers: readonly string[], options: TxtLookupOptions = {}): TxtLookup {
  const timeout = options.timeoutMs ?? 1500
  const tries = options.tries ?? 2
  const deadlineMs = options.deadlineMs ?? 5000
  // Checked once here, so a malformed entry fails at start-up rather than on the first request.
  if (servers.length > 0) new Resolver().setServers([...servers])
  return async (name) => {
    // One resolver per lookup: cancel() aborts every query of a resolver, and only this one may go.
    const resolver = new Resolver({ timeout, tries })
    if (servers.length > 0) resolver.setServers([...servers])
    const timer = setTimeout(() => resolver.cancel(), deadlineMs)
    try {
      return await resolver.resolveTxt(name)
    } catch (error) {
      const code = (error as { code?: unknown }).code
      if (code === 'ENOTFOUND' || code === 'ENODATA') return []
      const reason = typeof code === 'string' && /^E[A-Z]+$/.test(code) ? ` (${code === 'ECANCELLED' ? 'ETIMEOUT' : code})` : ''
      throw new ServiceError('dns_lookup_failed', `The DNS lookup of ${name} failed${reason}; try again later.`, undefined, { cause: error })
    } finally {
      clearTimeout(timer)
    }
  }
}

export interface DomainValidationContext {
  readonly db: Database
  readonly lookupTxt: TxtLookup
}

function challengeView(domain: string, token: string, status: DomainVerificationStatus): DomainChallengeView {
  return { domain, record_name: challengeRecordName(domain), record_value: challengeRecordValue(token), status }
}

/** The first call only creates the challenge; a verified pair answers `verified` without further lookups. */
export async function verifyDomain(
  ctx: DomainValidationContext, principal: Principal, agentId: string, requestedDomain: string | undefined,
): Promise<DomainChallengeView> {
  requireAdmin(principal)
  const agent = await agents.findAgent(ctx.db, principal.orgId, agentId)
  if (agent === null) throw new ServiceError('agent_not_found')
  let domain: string
  if (requestedDomain !== undefined) domain = normalizeDomain(requestedDomain)
  else if (agent.domain !== null && agent.domain !== '') domain = normalizeDomain(agent.domain, 'the agent\'s registered domain')
  else throw new ServiceError('domain_not_registered')

  const existing = await verifications.findDomainVerification(ctx.db, agent.id, domain)
  if (existing === null) {
    const created = await verifications.createDomainVerification(ctx.db, { agentId: agent.id, domain, token: generateChallengeToken() })
      .catch((error: unknown) => {
        // The agent was deleted since it was read.
        if (sqlState(error) === FOREIGN_KEY_VIOLATION) throw new ServiceError('agent_not_found')
        throw error
      })
    return challengeView(domain, created.token, created.verified_at === null ? 'pending' : 'verified')
  }
  if (existing.verified_at !== null) return challengeView(domain, existing.token, 'verified')

  // The lookup runs outside any transaction: a slow resolver must not hold locks or a connection.
  const records = await ctx.lookupTxt(challengeRecordName(domain))
  if (!txtRecordsContain(records, challengeRecordValue(existing.token))) return challengeView(domain, existing.token, 'pending')

  await ctx.db.transaction(async (tx) => {
    const marked = await verifications.markDomainVerified(tx, agent.id, domain, existing.token)
    if (marked === null) {
      // Either a concurrent call verified it first (fine: it raised the level too) or the agent is gone.
      const current = await verifications.findDomainVerification(tx, agent.id, domain)
      if (current?.verified_at == null) throw new ServiceError('agent_not_found')
      return
    }
    await verifications.raiseAgentTrustLevel(tx, agent.id, DV_TRUST_LEVEL)
    // The org's bundles carry agent levels: announce the change like any other policy-relevant write.
    await notifyPolicyChange(tx, agent.org_id)
  })
  return challengeView(domain, existing.token, 'verified')
}

/** Operator only (docs/wire-contract.md §2, §4); lowering a level leaves issued badges as they are. */
export async function setTrustLevel(ctx: Pick<DomainValidationContext, 'db'>, principal: Principal, agentId: string, level: unknown): Promise<AgentRow> {
  requireOperator(principal)
  const parsed = parseTrustLevel(level)
  const row = await ctx.db.transaction(async (tx) => {
    const updated = await verifications.setAgentTrustLevel(tx, agentId, parsed)
    if (updated !== null) await notifyPolicyChange(tx, updated.org_id)
    return updated
  })
  if (row === null) throw new ServiceError('agent_not_found')
  return row
}
