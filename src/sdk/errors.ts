/**
 * The one error type of the SDK. A failure the registry reported keeps the registry's stable `error`
 * code and HTTP status (docs/wire-contract.md §3), so callers branch on the same codes the API documents; local
 * refusals (a key file that exists, an envelope that would widen its parent) use SDK codes or the
 * gateway's `ENVELOPE_*` code for the rule they would break. The gateway's codes come from its error
 * catalogue, re-exported here, so an agent reads a gateway refusal's `error` against the same list.
 */
import type { GatewayErrorCode } from '../core/gateway-errors.js'

export { GATEWAY_ERROR_CODES, type GatewayErrorCode } from '../core/gateway-errors.js'

/** Gateway codes the SDK raises itself, before a request could be refused with them. */
export type SdkGatewayErrorCode = Extract<GatewayErrorCode,
  | 'ENVELOPE_MALFORMED'
  | 'ENVELOPE_CAPABILITY_INVALID'
  | 'ENVELOPE_PAYLOAD_TOO_LARGE'
  | 'ENVELOPE_EXPIRED'
  | 'ENVELOPE_CHAIN_BROKEN'
  | 'ENVELOPE_NARROWING_VIOLATION'
  | 'ENVELOPE_DEPTH_EXCEEDED'
  | 'ENVELOPE_BADGE_BINDING_FAILED'
  | 'ENVELOPE_KEY_NOT_BOUND'>

/** Codes the SDK itself raises (the registry's codes pass through as they are). */
export type SdkLocalErrorCode =
  | 'invalid_argument'
  | 'key_file_exists'
  | 'key_file_permissions'
  | 'invalid_key_file'
  | 'registry_unreachable'
  | 'invalid_response'
  | SdkGatewayErrorCode

/**
 * A failed SDK operation. `code` is the registry's `error` code when the registry answered with an
 * error (e.g. `proof_verification_failed`, `agent_not_found`), else one of {@link SdkLocalErrorCode}.
 * Messages never carry key material or API keys.
 */
export class SdkError extends Error {
  /** Stable, machine-readable code. */
  readonly code: string
  /** HTTP status of the registry's answer; null when the failure was local or the network failed. */
  readonly status: number | null
  /** Seconds to wait before retrying, from a 429's `Retry-After`; null otherwise. */
  readonly retryAfterSeconds: number | null
  /** The registry's `errors` list when it sent one (each problem of an invalid policy or card); null otherwise. */
  readonly problems: readonly unknown[] | null

  constructor(
    code: string,
    message: string,
    options: { status?: number | null; retryAfterSeconds?: number | null; problems?: readonly unknown[] | null; cause?: unknown } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause })
    this.name = 'SdkError'
    this.code = code
    this.status = options.status ?? null
    this.retryAfterSeconds = options.retryAfterSeconds ?? null
    this.problems = options.problems ?? null
  }
}
