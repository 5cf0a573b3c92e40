/**
 * The SDK's HTTP calls to a registry: JSON in, JSON out, a time limit on every call, and registry errors
 * turned into {@link SdkError} with the registry's code. Uses the global fetch (undici in Node 20).
 */
import { SdkError } from './errors.js'

/** Default time limit of one registry call. */
export const DEFAULT_TIMEOUT_MS = 10_000
// A registry answer larger than this is not one of ours (badges, challenges and JWKS are a few KiB).
const MAX_RESPONSE_BYTES = 1024 * 1024

export interface RegistryCall {
  method: 'GET' | 'POST' | 'PUT' | 'DELETE'
  url: string
  /** Sent as `Authorization: Bearer`; never placed in an error message. */
  apiKey?: string
  /** Sent as JSON. */
  body?: unknown
  /** Sent as `application/x-www-form-urlencoded` (the OAuth token endpoint), instead of `body`. */
  form?: URLSearchParams
  timeoutMs?: number
}

/** Joins a registry base URL (with or without a trailing slash) and an absolute path. */
export function registryEndpoint(registryUrl: string, path: string): string {
  let base: URL
  try {
    base = new URL(registryUrl)
  } catch {
    throw new SdkError('invalid_argument', 'registryUrl is not a URL.')
  }
  if (base.protocol !== 'http:' && base.protocol !== 'https:') throw new SdkError('invalid_argument', 'registryUrl must be http or https.')
  return `${base.origin}${base.pathname.replace(/\/+$/, '')}${path}`
}

function retryAfter(headers: Headers): number | null {
  const value = headers.get('retry-after')
  if (value === null) return null
  const seconds = Number(value)
  return Number.isFinite(seconds) && seconds >= 0 ? seconds : null
}

/**
 * Performs one call and returns the parsed JSON body of a 2xx answer. Any other answer becomes an
 * {@link SdkError} carrying the body's `error` code (or `http_<status>` when the body has none).
 */
export async function callRegistry(call: RegistryCall): Promise<unknown> {
  const headers: Record<string, string> = { accept: 'application/json' }
  if (call.apiKey !== undefined) headers.authorization = `Bearer ${call.apiKey}`
  let body: string | undefined
  if (call.form !== undefined) {
    headers['content-type'] = 'application/x-www-form-urlencoded'
    body = call.form.toString()
  } else if (call.body !== undefined) {
    headers['content-type'] = 'application/json'
    body = JSON.stringify(call.body)
  }
  let response: Response
  try {
    response = await fetch(call.url, {
      method: call.method,
      headers,
      ...(body === undefined ? {} : { body }),
      // A redirect could carry the API key to another host; the registry never redirects its API.
      redirect: 'error',
      signal: AbortSignal.timeout(call.timeoutMs ?? DEFAULT_TIMEOUT_MS),
    })
  } catch (error) {
    const reason = error instanceof Error && error.name === 'TimeoutError' ? 'timed out' : 'could not be reached'
    throw new SdkError('registry_unreachable', `The registry at ${new URL(call.url).origin} ${reason}.`, { cause: error })
  }
  const text = await response.text()
  if (Buffer.byteLength(text) > MAX_RESPONSE_BYTES) {
    throw new SdkError('invalid_response', 'The registry answer is too large.', { status: response.status })
  }
  let answer: unknown = undefined
  try {
    answer = text === '' ? undefined : JSON.parse(text)
  } catch {
    answer = undefined
  }
  if (response.ok) {
    if (answer === undefined) throw new SdkError('invalid_response', 'The registry answer is not JSON.', { status: response.status })
    return answer
  }
  const record = typeof answer === 'object' && answer !== null ? (answer as Record<string, unknown>) : {}
  const code = typeof record.error === 'string' && record.error !== '' ? record.error : `http_${response.status}`
  // `message` in the registry's own errors, `error_description` in OAuth's (RFC 6749 §5.2).
  const described = typeof record.message === 'string' ? record.message : record.error_description
  const message = typeof described === 'string' ? described : `The registry answered ${response.status}.`
  // The registry lists every problem of a document (invalid_policy, invalid_agent_card) beside the code.
  const problems = Array.isArray(record.errors) ? (record.errors as unknown[]) : null
  throw new SdkError(code, message, { status: response.status, retryAfterSeconds: retryAfter(response.headers), problems })
}
