/**
 * The bounded HTTP calls a gateway-only process makes to its registry (docs/peer-input-validation.md,
 * "Registry answers"): every call timed out as a whole, bodies read up to a bound, errors named by the
 * registry's stable code only, and the registry key sent only as `X-Service-Registry-Key`, never in a message.
 */
import type { IncomingHttpHeaders } from 'node:http'
import { Pool } from 'undici'
import { isRecord } from '../../core/json-objects.js'
import { abandonBody, BodyTooLargeError, readBoundedBody, type ResponseBody } from '../../net/bounded-body.js'

export interface Answer {
  readonly status: number
  readonly headers: IncomingHttpHeaders
  /** null for 304 (and for any answer whose body was discarded). */
  readonly body: Buffer | null
}

/** An open stream answer: its body is the caller's to read and to abandon. */
export interface OpenStream {
  readonly headers: IncomingHttpHeaders
  readonly body: ResponseBody
  /** Ends the stream (and the connection under it). */
  abort(): void
}

/** Error bodies are read only for their stable `error` code. */
const MAX_ERROR_BODY_BYTES = 4096
/** An ETag longer than this is not used for revalidation. */
const MAX_ETAG_LENGTH = 1024

/** No cause: the message is redacted of the registry key, and a library's error could hold what was redacted. */
export class RegistryCallError extends Error {
  readonly code = 'REGISTRY_CALL_FAILED'
  override readonly name = 'RegistryCallError'
}

export function header(headers: IncomingHttpHeaders, name: string): string | null {
  const value = headers[name]
  if (Array.isArray(value)) return value[0] ?? null
  return value ?? null
}

/** The ETag to send back in If-None-Match, or null when the registry's is unusable. */
export function etagOf(headers: IncomingHttpHeaders): string | null {
  const etag = header(headers, 'etag')
  return etag !== null && etag.length <= MAX_ETAG_LENGTH ? etag : null
}

/** Why a call failed, in words that name no secret: undici's own messages carry no request headers. */
export function describe(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code
    // A refused connection to a name with several addresses is an AggregateError with an empty message.
    let message = error.message
    if (message === '' && error instanceof AggregateError) message = error.errors.map(describe).join(', ')
    if (message === '') message = error.name
    return typeof code === 'string' && !message.includes(code) ? `${message} (${code})` : message
  }
  return String(error)
}

/** Reads the stable `error` code of an error body (docs/wire-contract.md §3), bounded, and always consumes the body. */
async function readErrorCode(body: ResponseBody): Promise<string | null> {
  try {
    const parsed: unknown = JSON.parse((await readBoundedBody(body, MAX_ERROR_BODY_BYTES)).toString('utf8'))
    // Only a code-shaped value: the body is not ours to repeat.
    return isRecord(parsed) && typeof parsed.error === 'string' && /^[A-Za-z_]{1,64}$/.test(parsed.error) ? parsed.error : null
  } catch {
    return null
  }
}

export interface RegistryClientOptions {
  readonly registryUrl: string
  readonly registryKey: string
  /** Each call, connect to body. */
  readonly requestTimeoutMs: number
}

export class RegistryClient {
  readonly #registryKey: string
  readonly #requestTimeoutMs: number
  /** Path prefix of the registry URL (empty at the root), prepended to every endpoint. */
  readonly #basePath: string
  /** Origin only, for messages: a URL with user info must not leak it. */
  readonly origin: string
  readonly #pool: Pool
  /** A long-lived stream has a pool of its own, so it never holds a socket the polls need. */
  readonly #streamPool: Pool
  /** Every in-flight call, so close() can abort them. */
  readonly #inFlight = new Set<AbortController>()
  #closed = false

  constructor(options: RegistryClientOptions) {
    let url: URL
    try {
      url = new URL(options.registryUrl)
    } catch {
      throw new Error('remote snapshot source: the registry URL is not a valid URL')
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      throw new Error('remote snapshot source: the registry URL must be http or https')
    }
    if (typeof options.registryKey !== 'string' || options.registryKey === '') {
      throw new Error('remote snapshot source: a registry key is required')
    }
    this.#registryKey = options.registryKey
    this.#requestTimeoutMs = options.requestTimeoutMs
    this.#basePath = url.pathname.replace(/\/+$/, '')
    this.origin = url.origin
    const limits = { connect: { timeout: this.#requestTimeoutMs }, headersTimeout: this.#requestTimeoutMs }
    // Three kinds of poll at most run at once; a few spare sockets cover the start-up burst.
    this.#pool = new Pool(url.origin, { connections: 4, bodyTimeout: this.#requestTimeoutMs, ...limits })
    // bodyTimeout 0: silence on a stream is bounded by the watch's heartbeat check, not by undici.
    this.#streamPool = new Pool(url.origin, { connections: 1, bodyTimeout: 0, ...limits })
  }

  get closed(): boolean {
    return this.#closed
  }

  /** 200 and 304 only; other statuses reject with the registry's error code, never its body text. */
  async get(path: string, extraHeaders: Record<string, string>, withKey: boolean, maxBytes: number): Promise<Answer> {
    if (this.#closed) throw new RegistryCallError('the source is closed')
    const controller = new AbortController()
    this.#inFlight.add(controller)
    let timedOut = false
    // headersTimeout/bodyTimeout bound each phase; this bounds the whole call (a slow trickle included).
    const timer = setTimeout(() => {
      timedOut = true
      controller.abort()
    }, this.#requestTimeoutMs)
    timer.unref()
    const endpoint = path.split('?')[0] ?? path
    try {
      const response = await this.#pool.request({
        method: 'GET',
        path: `${this.#basePath}${path}`,
        headers: this.#headers(extraHeaders, withKey),
        signal: controller.signal,
        headersTimeout: this.#requestTimeoutMs,
        bodyTimeout: this.#requestTimeoutMs,
      })
      const { statusCode, headers: responseHeaders, body } = response
      if (statusCode === 304) {
        await body.dump()
        return { status: 304, headers: responseHeaders, body: null }
      }
      if (statusCode !== 200) {
        const code = await readErrorCode(body)
        throw new RegistryCallError(`GET ${endpoint} answered ${statusCode}${code === null ? '' : ` (${code})`}`)
      }
      const content = await readBoundedBody(body, maxBytes, header(responseHeaders, 'content-length')).catch((error: unknown) => {
        if (!(error instanceof BodyTooLargeError)) throw error
        const size = error.declared === null ? 'a body' : `a body of ${error.declared} bytes`
        throw new RegistryCallError(`GET ${endpoint} answered ${size}, over the ${maxBytes} byte limit`)
      })
      return { status: 200, headers: responseHeaders, body: content }
    } catch (error) {
      if (timedOut) throw new RegistryCallError(`GET ${endpoint} timed out after ${this.#requestTimeoutMs} ms`)
      throw this.#failure(endpoint, controller, error)
    } finally {
      clearTimeout(timer)
      this.#inFlight.delete(controller)
    }
  }

  /**
   * Opens a long-lived GET (the watch stream) with the registry key: only the answer's head is timed; a
   * status other than 200 or a content type other than `expectedType` rejects like {@link get}.
   */
  async stream(path: string, expectedType: string): Promise<OpenStream> {
    if (this.#closed) throw new RegistryCallError('the source is closed')
    const controller = new AbortController()
    this.#inFlight.add(controller)
    const endpoint = path.split('?')[0] ?? path
    const release = (): void => {
      this.#inFlight.delete(controller)
    }
    try {
      const response = await this.#streamPool.request({
        method: 'GET',
        path: `${this.#basePath}${path}`,
        headers: this.#headers({ accept: expectedType }, true),
        signal: controller.signal,
        headersTimeout: this.#requestTimeoutMs,
        bodyTimeout: 0,
      })
      const { statusCode, headers, body } = response
      if (statusCode !== 200) {
        const code = await readErrorCode(body)
        throw new RegistryCallError(`GET ${endpoint} answered ${statusCode}${code === null ? '' : ` (${code})`}`)
      }
      const type = (header(headers, 'content-type') ?? '').split(';')[0]?.trim().toLowerCase()
      if (type !== expectedType) {
        abandonBody(body)
        throw new RegistryCallError(`GET ${endpoint} answered a content type other than ${expectedType}`)
      }
      body.once('close', release)
      return {
        headers,
        body,
        abort: () => {
          release()
          controller.abort()
          abandonBody(body)
        },
      }
    } catch (error) {
      release()
      throw this.#failure(endpoint, controller, error)
    }
  }

  async close(): Promise<void> {
    this.#closed = true
    for (const controller of this.#inFlight) controller.abort()
    await Promise.allSettled([this.#pool.close(), this.#streamPool.destroy()])
  }

  /** Belt and braces: no message this client builds may carry the key, whatever a library put in it. */
  redact(message: string): string {
    return message.split(this.#registryKey).join('[redacted]')
  }

  #headers(extra: Record<string, string>, withKey: boolean): Record<string, string> {
    const headers: Record<string, string> = { 'user-agent': 'service-gateway', ...extra }
    if (withKey) headers['x-service-registry-key'] = this.#registryKey
    return headers
  }

  #failure(endpoint: string, controller: AbortController, error: unknown): RegistryCallError {
    if (this.#closed && controller.signal.aborted) return new RegistryCallError(`GET ${endpoint} aborted: the source is closing`)
    if (error instanceof RegistryCallError) return error
    return new RegistryCallError(this.redact(`GET ${endpoint} failed: ${describe(error)}`))
  }
}
