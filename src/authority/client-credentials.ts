/**
 * The OAuth token endpoint's grant (docs/api.md §4.10): client_credentials with private_key_jwt
 * (RFC 6749 §4.4, RFC 7523), answered with an IAL-1 badge as the access token. Cheap checks come first;
 * the DID is resolved only for an assertion whose claims hold, and nothing is written before the
 * signature verified. No Fastify here: the route hands over the parsed form.
 */
import { checkClientAssertion, CLIENT_ASSERTION_TYPE, verifyClientAssertionKey } from '../core/client-assertion.js'
import type { ResolvedKeys } from '../core/did-document.js'
import { agentDidWeb, isDid, ownAgentIdFromDid } from '../core/did.js'
import { OAuthError } from '../core/oauth-error.js'
import { TRUST_CODES } from '../core/trust-level.js'
import { isUuid } from '../core/uuid.js'
import { sqlState, UNIQUE_VIOLATION, type Queryable } from '../db/database.js'
import * as agents from '../db/repositories/agents.js'
import type { AgentRow } from '../db/repositories/agents.js'
import * as badges from '../db/repositories/badges.js'
import { findDomainVerification } from '../db/repositories/domain-verifications.js'
import { findTokenAudiences } from '../db/repositories/organizations.js'
import { issueBadgeInTransaction, MAX_AUDIENCES, type AuthorityContext } from './badge-authority.js'
import { DidResolutionError } from './did-resolver.js'
import { CHALLENGE_RATE_LIMIT, CHALLENGE_RATE_WINDOW_SECONDS, canonicalDid, ial1Domain } from './pop-challenges.js'

/** Same numbers as the PoP challenge endpoint: both hand out IAL-1 badges per DID. */
export const TOKEN_RATE_LIMIT = CHALLENGE_RATE_LIMIT
export const TOKEN_RATE_WINDOW_SECONDS = CHALLENGE_RATE_WINDOW_SECONDS
export const TOKEN_TTL_SECONDS = 300
export const MAX_SCOPE_TOKENS = 10
export const TRUST_SCOPE_PREFIX = 'trust:'

export interface ClientCredentialsContext extends AuthorityContext {
  readonly resolver: { resolve(did: string): Promise<ResolvedKeys> }
}

/** The form as parsed: a parameter given once is a string, one given several times an array. */
export type TokenForm = Readonly<Record<string, string | readonly string[]>>

export interface TokenRequest {
  readonly form: TokenForm
  /** An Authorization header came with the request (a second authentication method). */
  readonly authorizationHeader: boolean
}

export interface TokenResponse {
  access_token: string
  token_type: 'Bearer'
  expires_in: number
  scope: string
}

export function tokenEndpointUrl(issuer: string): string {
  return `${issuer}/oauth/token`
}

const invalidRequest = (description: string): OAuthError => new OAuthError('invalid_request', description)
const invalidClient = (description: string): OAuthError => new OAuthError('invalid_client', description)

/** Parameters this endpoint reads, so that a description may name them (never an unknown one). */
const KNOWN_PARAMETERS = new Set(['grant_type', 'client_assertion_type', 'client_assertion', 'client_id', 'client_secret', 'scope', 'resource'])

/** RFC 6749 §3.1: no parameter twice, except `resource` (RFC 8707 §2). */
function singleValued(form: TokenForm): Record<string, string> {
  const out: Record<string, string> = Object.create(null) as Record<string, string>
  for (const [name, value] of Object.entries(form)) {
    if (name === 'resource') continue
    if (typeof value !== 'string') {
      throw invalidRequest(KNOWN_PARAMETERS.has(name) ? `The parameter ${name} was given more than once.` : 'A parameter was given more than once.')
    }
    out[name] = value
  }
  return out
}

// RFC 6749 §3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E ), tokens separated by one space.
const SCOPE_TOKEN = /^[\x21\x23-\x5b\x5d-\x7e]+$/

interface ParsedScope {
  /** Asked trust level (1-4), or null for the default REG. */
  level: number | null
  /** Every other token: audience names. */
  audienceNames: string[]
}

function parseScope(scope: string | undefined): ParsedScope | null {
  if (scope === undefined) return null
  const tokens = scope.split(' ')
  if (tokens.some((token) => !SCOPE_TOKEN.test(token))) {
    throw new OAuthError('invalid_scope', 'scope must be scope tokens (printable ASCII without " or \\) separated by single spaces.')
  }
  const unique = [...new Set(tokens)]
  if (unique.length > MAX_SCOPE_TOKENS) throw new OAuthError('invalid_scope', `scope may hold at most ${MAX_SCOPE_TOKENS} tokens.`)
  const trust = unique.filter((token) => token.startsWith(TRUST_SCOPE_PREFIX))
  if (trust.length > 1) throw new OAuthError('invalid_scope', 'scope may ask for one trust level only.')
  let level: number | null = null
  if (trust.length === 1) {
    const code = (trust[0] as string).slice(TRUST_SCOPE_PREFIX.length)
    level = TRUST_CODES.indexOf(code as (typeof TRUST_CODES)[number])
    // Level 0 (SS) is self-signed by definition: the authority never issues it.
    if (level < 1) throw new OAuthError('invalid_scope', 'The trust scope must be trust:REG, trust:DV, trust:OV or trust:EV.')
  }
  return { level, audienceNames: unique.filter((token) => !token.startsWith(TRUST_SCOPE_PREFIX)) }
}

const WHITESPACE_OR_CONTROL = /[\s\u0000-\u001f\u007f-\u009f]/u

// RFC 8707 §2: an absolute URI without a fragment.
function parseResources(value: string | readonly string[] | undefined): string[] {
  const values = value === undefined ? [] : typeof value === 'string' ? [value] : value
  for (const resource of values) {
    let ok = /^https?:\/\//i.test(resource) && !resource.includes('#') && !WHITESPACE_OR_CONTROL.test(resource)
    if (ok) {
      try {
        new URL(resource)
      } catch {
        ok = false
      }
    }
    if (!ok) throw new OAuthError('invalid_target', 'Each resource must be an absolute http or https URI without a fragment.')
  }
  return [...new Set(values)]
}

/**
 * The agent a client id names, in any organization: this registry's did:web in any spelling, an
 * explicit DID (unique across organizations), or the agent's UUID. Null when none does.
 */
async function findClient(ctx: ClientCredentialsContext, clientId: string): Promise<AgentRow | null> {
  if (isUuid(clientId)) return agents.findAgentById(ctx.db, clientId.toLowerCase())
  if (!isDid(clientId) || !(clientId.startsWith('did:key:') || clientId.startsWith('did:web:'))) return null
  const did = canonicalDid(ctx.registryDidHost, clientId)
  const own = ownAgentIdFromDid(ctx.registryDidHost, did)
  if (own !== null) return isUuid(own) ? agents.findAgentById(ctx.db, own) : null
  return agents.findAgentByDid(ctx.db, did)
}

/** The DID a badge of the agent names and whose document holds its keys. */
function agentDid(ctx: ClientCredentialsContext, agent: AgentRow): string {
  return agent.did ?? agentDidWeb(ctx.registryDidHost, agent.id)
}

async function resolveClientDid(ctx: ClientCredentialsContext, did: string): Promise<ResolvedKeys> {
  try {
    return await ctx.resolver.resolve(did)
  } catch (error) {
    if (error instanceof DidResolutionError) throw invalidClient(`The client's DID could not be resolved: ${error.message}.`)
    throw error
  }
}

/**
 * A badge of level 2 or more vouches for its domain (docs/wire-contract.md §4): as for IAL-0 issuance,
 * the domain must be verified for the agent, or be its registered domain at an operator-set level 3-4.
 */
async function domainVouchedFor(q: Queryable, agent: AgentRow, domain: string, level: number): Promise<boolean> {
  if (level < 2) return true
  const verification = await findDomainVerification(q, agent.id, domain)
  if (verification?.verified_at != null) return true
  return agent.trust_level >= 3 && agent.domain !== null && agent.domain.toLowerCase() === domain
}

/**
 * Without a trust scope, the highest level the registry vouches for: a client re-asking after an
 * insufficient_scope challenge then gets a level raised since its last badge, with no scope of its own.
 */
async function defaultLevel(q: Queryable, agent: AgentRow, domain: string): Promise<number> {
  return (await domainVouchedFor(q, agent, domain, agent.trust_level)) ? agent.trust_level : 1
}

function checkLevel(agent: AgentRow, level: number): void {
  if (level > agent.trust_level) {
    throw new OAuthError('invalid_scope', `The agent is verified up to trust:${TRUST_CODES[agent.trust_level]}; trust:${TRUST_CODES[level]} was asked for.`)
  }
}

function secondsUntilLeaving(window: badges.IssuanceWindow): number {
  const oldest = window.oldest ?? window.now
  return Math.max(1, Math.ceil((oldest.getTime() + TOKEN_RATE_WINDOW_SECONDS * 1000 - window.now.getTime()) / 1000))
}

/** What the badge grants, as scope tokens (RFC 6749 §5.1: said even when the client asked for none). */
function grantedScope(level: number, audienceNames: readonly string[]): string {
  return [`${TRUST_SCOPE_PREFIX}${TRUST_CODES[level]}`, ...audienceNames].join(' ')
}

/** `POST /oauth/token`: the checks of docs/api.md §4.10 in order, then issuance in one transaction. */
export async function exchangeClientCredentials(ctx: ClientCredentialsContext, request: TokenRequest): Promise<TokenResponse> {
  const form = singleValued(request.form)
  if (request.authorizationHeader) {
    throw invalidRequest('The Authorization header is not accepted here: authenticate with client_assertion only.')
  }
  if (form.grant_type === undefined) throw invalidRequest('grant_type is required.')
  if (form.grant_type !== 'client_credentials') throw new OAuthError('unsupported_grant_type', 'Only the client_credentials grant is supported.')
  if (form.client_secret !== undefined) {
    throw invalidRequest('client_secret is not accepted: one authentication method per request, and this endpoint takes client_assertion only.')
  }
  if (form.client_assertion_type !== CLIENT_ASSERTION_TYPE) throw invalidClient(`client_assertion_type must be ${CLIENT_ASSERTION_TYPE}.`)
  if (form.client_assertion === undefined || form.client_assertion === '') throw invalidClient('client_assertion is required.')
  const scope = parseScope(form.scope)
  const resources = parseResources(request.form.resource)
  const audienceNames = scope?.audienceNames ?? []
  const audience = [...new Set([...resources, ...audienceNames])]
  if (audience.length > MAX_AUDIENCES) throw new OAuthError('invalid_target', `A token may name at most ${MAX_AUDIENCES} audiences.`)

  const now = Math.floor((ctx.now ?? Date.now)() / 1000)
  const checked = checkClientAssertion(form.client_assertion, { audiences: [ctx.issuer, tokenEndpointUrl(ctx.issuer)], now })
  if (!checked.ok) throw invalidClient(checked.message)
  const assertion = checked.assertion
  if (form.client_id !== undefined && form.client_id !== assertion.clientId) throw invalidClient('client_id is not the client assertion\'s iss.')

  const found = await findClient(ctx, assertion.clientId)
  if (found === null) throw invalidClient('No agent is registered under the client id (iss) of the assertion.')
  const subject = agentDid(ctx, found)
  const key = verifyClientAssertionKey(assertion, await resolveClientDid(ctx, subject))
  if (!key.ok) throw invalidClient(key.message)

  // Authenticated from here on: what follows may say what the agent is and is not allowed.
  if (found.status !== 'enabled') throw new OAuthError('unauthorized_client', 'The agent is disabled; no token is issued.')
  const domain = ial1Domain(found, subject)
  const level = scope?.level ?? (await defaultLevel(ctx.db, found, domain))
  checkLevel(found, level)
  const allowed = new Set(audience.length === 0 ? [] : (await findTokenAudiences(ctx.db, found.org_id)) ?? [])
  if (resources.some((resource) => !allowed.has(resource))) {
    throw new OAuthError('invalid_target', 'A resource is not in the organization\'s token-audience allow-list.')
  }
  if (audienceNames.some((name) => !allowed.has(name))) {
    throw new OAuthError('invalid_scope', 'A scope names an audience that is not in the organization\'s token-audience allow-list.')
  }
  if (!(await domainVouchedFor(ctx.db, found, domain, level))) {
    throw new OAuthError('invalid_scope', `trust:${TRUST_CODES[level]} needs a verified domain, and ${domain} is not verified for the agent.`)
  }

  const issued = await ctx.db.transaction(async (tx) => {
    const agent = await agents.lockAgentForIssuance(tx, found.org_id, found.id)
    if (agent === null || agentDid(ctx, agent) !== subject) throw invalidClient('The agent no longer holds the client id of the assertion.')
    if (agent.status !== 'enabled') throw new OAuthError('unauthorized_client', 'The agent is disabled; no token is issued.')
    checkLevel(agent, level)
    await badges.lockClientCredentialsIssuance(tx, subject)
    const window = await badges.clientCredentialsWindow(tx, subject, TOKEN_RATE_WINDOW_SECONDS)
    if (window.count >= TOKEN_RATE_LIMIT) {
      const retryAfterSeconds = secondsUntilLeaving(window)
      throw new OAuthError('temporarily_unavailable',
        `At most ${TOKEN_RATE_LIMIT} tokens per agent DID per ${TOKEN_RATE_WINDOW_SECONDS / 60} minutes; retry in ${retryAfterSeconds} seconds.`,
        { status: 429, retryAfterSeconds })
    }
    return issueBadgeInTransaction(tx, ctx, {
      agent,
      subject,
      level,
      ial: '1',
      domain,
      ttl: TOKEN_TTL_SECONDS,
      audience,
      cnf: { kid: key.kid, jwk: { kty: 'OKP', crv: 'Ed25519', x: Buffer.from(key.publicKey).toString('base64url'), kid: key.kid } },
      clientAssertionJti: assertion.jti,
    })
  }).catch((error: unknown) => {
    // A replayed assertion: the unique index on (subject, assertion jti) refuses the second badge, across instances.
    if (sqlState(error) === UNIQUE_VIOLATION) throw invalidClient('The client assertion was already used (jti).')
    throw error
  })
  return {
    access_token: issued.token,
    token_type: 'Bearer',
    expires_in: TOKEN_TTL_SECONDS,
    scope: grantedScope(level, audienceNames),
  }
}
