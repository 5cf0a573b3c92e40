/**
 * The one error catalogue of the service. Every failure a client can see carries a stable code from here
 * (protocol.md §3: lower snake case for the admin plane, upper case for gateway badge/envelope/bundle
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
  forbidden: { status: 403, message: 'The action is not allowed for this principal.' },
  operator_required: { status: 403, message: 'Only an operator credential may do this.' },
  role_not_allowed: { status: 403, message: 'A key cannot be given a role above its creator\'s.' },

  // registry
  agent_not_found: { status: 404, message: 'The agent does not exist.' },
  did_already_registered: { status: 409, message: 'The DID already belongs to another agent.' },
  invalid_did: { status: 400, message: 'The DID is not valid.' },
  invalid_public_key: { status: 400, message: 'The public key is not a valid Ed25519 key.' },
  invalid_agent_card: { status: 400, message: 'The agent card is not valid.' },
  invalid_signed_card: { status: 400, message: 'The signed agent card is malformed.' },
  key_not_found: { status: 404, message: 'The API key does not exist.' },
  org_not_found: { status: 404, message: 'The organization does not exist.' },

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

  constructor(code: ErrorCode, message?: string, details?: Record<string, unknown>) {
    super(message ?? ERRORS[code].message)
    this.name = 'ServiceError'
    this.code = code
    this.status = ERRORS[code].status
    this.details = details
  }
}

export function isServiceError(value: unknown): value is ServiceError {
  return value instanceof ServiceError
}
