/**
 * The one error catalogue of the service. Every failure a client can see carries a stable code from here
 * (docs/wire-contract.md §3: lower snake case for the admin plane, upper case for gateway badge/envelope/bundle
 * codes). The code doubles as the log field and the metric label, so never build codes dynamically.
 */

export interface ErrorDefinition {
  readonly status: number
  readonly message: string
}

export const ERRORS = {
  // generic input problems
  invalid_request: { status: 400, message: 'The request is invalid.' },
  invalid_json: { status: 400, message: 'The request body is not valid JSON.' },
  unsupported_media_type: { status: 415, message: 'Request bodies must be application/json.' },
  payload_too_large: { status: 413, message: 'The request body exceeds the size limit.' },
  invalid_id: { status: 400, message: 'The identifier in the path is not valid.' },
  invalid_cursor: { status: 400, message: 'The pagination cursor is not valid.' },
  not_found: { status: 404, message: 'The resource does not exist.' },
  method_not_allowed: { status: 405, message: 'The method is not allowed on this resource.' },

  // credentials and permissions
  unauthorized: { status: 401, message: 'Missing or invalid credentials.' },
  api_key_revoked: { status: 401, message: 'The API key was revoked: the user it acts for no longer has access to its organization.' },
  forbidden: { status: 403, message: 'The action is not allowed for this principal.' },
  operator_required: { status: 403, message: 'Only an operator credential may do this.' },
  role_not_allowed: { status: 403, message: 'A key cannot be given a role above its creator\'s.' },
  // operator console sessions (docs/console.md)
  invalid_credentials: { status: 401, message: 'The credential does not sign in.' },
  csrf_failed: { status: 403, message: 'A request authenticated by the console cookie needs the session\'s X-CSRF-Token and, when Origin is sent, this origin.' },

  // registry
  agent_not_found: { status: 404, message: 'The agent does not exist.' },
  did_already_registered: { status: 409, message: 'The DID already belongs to another agent.' },
  invalid_did: { status: 400, message: 'The DID is not valid.' },
  invalid_public_key: { status: 400, message: 'The public key is not a valid Ed25519 key.' },
  invalid_agent_card: { status: 400, message: 'The agent card is not valid.' },
  invalid_signed_card: { status: 400, message: 'The signed agent card is malformed.' },
  agent_card_missing: { status: 409, message: 'The agent has no agent card to sign.' },
  agent_card_mismatch: { status: 409, message: 'The card given is not the agent\'s registered card.' },
  key_not_found: { status: 404, message: 'The API key does not exist.' },
  org_not_found: { status: 404, message: 'The organization does not exist.' },

  // badge issuance (docs/api.md §4.4, docs/wire-contract.md §4)
  missing_domain: { status: 400, message: 'domain is required.' },
  invalid_trust_level: { status: 400, message: 'trustLevel must be "1", "2", "3" or "4".' },
  invalid_ttl: { status: 400, message: 'The badge TTL must be between 60 and 3600 seconds.' },
  conflicting_fields: { status: 400, message: 'Two aliases of one field were given different values.' },
  invalid_mode: { status: 400, message: 'mode must be "ial0" on this endpoint; IAL-1 uses /badge/challenge and /badge/pop.' },
  agent_disabled: { status: 403, message: 'The agent is disabled; no badge is issued.' },
  trust_level_not_verified: { status: 403, message: 'The requested trust level is above the level verified for the agent.' },
  domain_not_verified: { status: 403, message: 'The domain is not verified for this agent.' },
  badge_not_found: { status: 404, message: 'The badge does not exist.' },
  domain_not_registered: { status: 400, message: 'The agent has no domain to verify; set one or pass domain.' },
  dns_lookup_failed: { status: 502, message: 'The DNS lookup for the domain failed.' },

  // proof of possession (docs/wire-contract.md §6)
  invalid_challenge_ttl: { status: 400, message: 'challenge_ttl must be between 1 and 600 seconds.' },
  invalid_challenge_id: { status: 400, message: 'challenge_id is not a challenge id.' },
  challenge_not_found: { status: 404, message: 'The challenge does not exist.' },
  subject_mismatch: { status: 403, message: 'The proof subject is not the DID of the challenge.' },
  challenge_used: { status: 403, message: 'The challenge was already used.' },
  challenge_expired: { status: 403, message: 'The challenge has expired.' },
  invalid_proof: { status: 400, message: 'The proof is not a valid pop+jwt for this challenge.' },
  cid_mismatch: { status: 403, message: 'The proof names another challenge.' },
  audience_mismatch: { status: 403, message: 'The proof audience is not this authority.' },
  htu_mismatch: { status: 403, message: 'The proof htu is not this endpoint.' },
  iat_invalid: { status: 403, message: 'The proof iat is not acceptable.' },
  exp_too_long: { status: 403, message: 'The proof expires more than 60 seconds after it was issued.' },
  proof_expired: { status: 403, message: 'The proof has expired.' },
  kid_not_found: { status: 403, message: 'The proof kid is not a verification method of the DID.' },
  key_not_in_authentication: { status: 403, message: 'The proof key is not listed for authentication.' },
  proof_verification_failed: { status: 403, message: 'The proof signature does not verify.' },
  did_resolution_failed: { status: 502, message: 'The DID could not be resolved.' },

  // policy service (docs/api.md §4.6, docs/wire-contract.md §7)
  invalid_policy: { status: 400, message: 'The policy document is not valid.' },
  policy_not_found: { status: 404, message: 'No policy document is active for this scope.' },
  proposal_not_found: { status: 404, message: 'The policy proposal does not exist.' },
  proposal_not_pending: { status: 400, message: 'The policy document is not in proposal state.' },
  stored_policy_invalid: { status: 409, message: 'An active policy document no longer passes the policy grammar; approve a replacement for its scope.' },
  group_not_found: { status: 404, message: 'The group does not exist.' },
  group_name_taken: { status: 409, message: 'The organization already has a group with this name.' },
  simulate_agent_unknown: { status: 400, message: 'The agent to simulate for does not exist.' },
  simulate_request_invalid: { status: 400, message: 'Give either action or mcp; an MCP method that names a tool, prompt or resource needs mcp.name or mcp.uri.' },

  // operator console (docs/console.md)
  decision_not_found: { status: 404, message: 'The decision is not in the decision store (it left it, or it was never reported).' },
  decision_store_unavailable: { status: 503, message: 'The shared decision store (Redis) does not answer; retry later.' },
  session_not_allowed: { status: 403, message: 'Only an API key (a gateway\'s registry key) may send gateway reports, not a console session.' },
  too_many_streams: { status: 429, message: 'The organization has as many decision streams open as it may; close one first.' },
  stream_limit_reached: { status: 503, message: 'The admin plane serves as many decision streams as it may; retry later.' },
  invalid_last_event_id: { status: 400, message: 'Last-Event-ID must be a sequence number this stream sent.' },
  watch_limit_reached: { status: 503, message: 'The admin plane serves as many gateway watch streams as it may; poll, and retry later.' },
  watch_unavailable: { status: 503, message: 'The admin plane does not hear the database\'s change notices; poll, and retry later.' },

  // limits and availability
  rate_limit_exceeded: { status: 429, message: 'Too many requests.' },
  service_unavailable: { status: 503, message: 'The service is temporarily unavailable.' },
  internal_error: { status: 500, message: 'An internal error occurred.' },
} as const satisfies Record<string, ErrorDefinition>

export type ErrorCode = keyof typeof ERRORS

/** A failure with a stable code; the admin plane's error handler turns it into `{error, message}`. */
export class ServiceError extends Error {
  readonly code: ErrorCode
  readonly status: number
  /** Extra, client-safe detail (for example validation problems with paths). Never internals. */
  readonly details: Record<string, unknown> | undefined

  constructor(code: ErrorCode, message?: string, details?: Record<string, unknown>, options?: ErrorOptions) {
    super(message ?? ERRORS[code].message, options)
    this.name = 'ServiceError'
    this.code = code
    this.status = ERRORS[code].status
    this.details = details
  }
}

export function isServiceError(value: unknown): value is ServiceError {
  return value instanceof ServiceError
}
