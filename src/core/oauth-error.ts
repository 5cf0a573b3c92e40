// OAuth 2.0 error answers (RFC 6749 §5.2, RFC 8707 §2): OAuth clients read `{error, error_description}`,
// not the admin plane's `{error, message}` (docs/api.md §4.10).

export const OAUTH_ERROR_CODES = [
  'invalid_request',
  'invalid_client',
  'unauthorized_client',
  'unsupported_grant_type',
  'unsupported_response_type',
  'invalid_scope',
  'invalid_target',
  'temporarily_unavailable',
  'server_error',
] as const
export type OAuthErrorCode = (typeof OAUTH_ERROR_CODES)[number]

export interface OAuthErrorBody {
  error: OAuthErrorCode
  error_description: string
}

/** A refusal of an OAuth endpoint: the code, the HTTP status (400 unless said otherwise) and a description. */
export class OAuthError extends Error {
  readonly code: OAuthErrorCode
  readonly status: number
  /** Seconds, for the Retry-After header of a 429 or 503. */
  readonly retryAfterSeconds: number | undefined

  constructor(code: OAuthErrorCode, description: string, options: { status?: number; retryAfterSeconds?: number } = {}) {
    super(description)
    this.name = 'OAuthError'
    this.code = code
    this.status = options.status ?? 400
    this.retryAfterSeconds = options.retryAfterSeconds
  }

  toBody(): OAuthErrorBody {
    return { error: this.code, error_description: this.message }
  }
}
