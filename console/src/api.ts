/**
 * The console's one HTTP client. Every request is same-origin with `credentials: 'same-origin'` (the
 * session cookie is HttpOnly, so it is the browser's to send); every write carries the session's CSRF
 * token (docs/console.md "Sign-in and sessions"). No credential is ever kept in storage or in the URL.
 */
import { errorText } from './lib/format.js'

export interface Principal {
  kind: string
  org_id: string
  org_name: string | null
  role: 'admin' | 'member' | string
  operator: boolean
  key_id: string | null
  user_id: string | null
}

export interface SessionData {
  csrf_token: string
  expires_at: string
  principal: Principal
}

export class ApiError extends Error {
  readonly status: number
  readonly code: string | null
  readonly body: unknown
  constructor(status: number, body: unknown) {
    super(errorText(status, body))
    this.status = status
    this.body = body
    this.code = body !== null && typeof body === 'object' && typeof (body as { error?: unknown }).error === 'string'
      ? (body as { error: string }).error
      : null
  }
}

let csrfToken: string | null = null
let onUnauthorized: (() => void) | null = null

export function setCsrfToken(token: string | null): void {
  csrfToken = token
}

/** Called when an authenticated request answers 401 (the session ended): the app goes back to sign-in. */
export function setUnauthorizedHandler(handler: (() => void) | null): void {
  onUnauthorized = handler
}

const WRITES = new Set(['POST', 'PUT', 'PATCH', 'DELETE'])

export interface RequestOptions {
  body?: unknown
  /** Do not treat a 401 as the end of the session (sign-in itself). */
  allow401?: boolean
  /** An identity-provider session token, sent once as `Authorization: Bearer` (sign-in only). */
  bearer?: string
}

/** Sends a request and answers the parsed JSON body (undefined for 204); throws ApiError on a non-2xx answer. */
export async function api<T = unknown>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
  const headers: Record<string, string> = { accept: 'application/json' }
  if (options.body !== undefined) headers['content-type'] = 'application/json'
  if (WRITES.has(method) && csrfToken !== null) headers['x-csrf-token'] = csrfToken
  if (options.bearer !== undefined) headers.authorization = `Bearer ${options.bearer}`
  let response: Response
  try {
    response = await fetch(path, {
      method,
      headers,
      credentials: 'same-origin',
      cache: 'no-store',
      ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
    })
  } catch (error) {
    throw new ApiError(0, { error: 'network_error', message: `The appliance did not answer (${(error as Error).message}).` })
  }
  const text = await response.text()
  let body: unknown = undefined
  if (text !== '') {
    try {
      body = JSON.parse(text)
    } catch {
      body = { error: 'invalid_response', message: text.slice(0, 200) }
    }
  }
  if (!response.ok) {
    if (response.status === 401 && !options.allow401 && onUnauthorized !== null) onUnauthorized()
    throw new ApiError(response.status, body)
  }
  return body as T
}

/** `{success, data}` envelopes (docs/api.md §2.1) answer their data; bare answers are returned as they are. */
export async function apiData<T = unknown>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
  const body = await api<unknown>(method, path, options)
  if (body !== null && typeof body === 'object' && 'success' in body && 'data' in body) return (body as { data: T }).data
  return body as T
}

export interface Page<T> {
  data: T[]
  nextCursor: string | null
}

export async function apiPage<T = unknown>(path: string): Promise<Page<T>> {
  const body = await api<{ data?: T[]; nextCursor?: string | null }>('GET', path)
  return { data: body?.data ?? [], nextCursor: body?.nextCursor ?? null }
}

export const enc = encodeURIComponent
