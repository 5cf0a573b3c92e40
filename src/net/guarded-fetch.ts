// Outbound HTTP for attacker-chosen URLs (Agent Card live checks, did:web; docs/wire-contract.md §5). Against
// SSRF: https only, no credentials or redirects, the address checked at connect time on the address actually
// used (a check before fetching loses to DNS rebinding): docs/peer-input-validation.md, "did:web hosts".
import ipaddr from 'ipaddr.js'
import { lookup as dnsLookup, type LookupAddress, type LookupOptions } from 'node:dns'
import { isIP } from 'node:net'
import { Agent } from 'undici'
import { abandonBody, BodyTooLargeError, readBoundedBody } from './bounded-body.js'

export interface GuardedFetchOptions {
  /** Connect, headers and body together (docs/api.md §8). */
  timeoutMs?: number
  connectTimeoutMs?: number
  maxBodyBytes?: number
  /** Host names exempt from the address guard and allowed over http. Tests only; never in production. */
  allowHosts?: readonly string[]
  method?: 'GET' | 'HEAD'
  headers?: Record<string, string>
}

/** A fully read response. Header names are lower case; repeated headers are joined with ", ". */
export interface GuardedResponse {
  status: number
  headers: Record<string, string>
  body: Buffer
  url: string
}

export type GuardedFetchErrorCode =
  | 'URL_INVALID'
  | 'SCHEME_NOT_ALLOWED'
  | 'ADDRESS_NOT_ALLOWED'
  | 'TIMEOUT'
  | 'BODY_TOO_LARGE'
  | 'REDIRECT_NOT_FOLLOWED'
  | 'CONNECT_FAILED'

/** Why a guarded fetch did not produce a response. The message never contains response content. */
export class GuardedFetchError extends Error {
  readonly code: GuardedFetchErrorCode

  constructor(code: GuardedFetchErrorCode, message: string) {
    super(message)
    this.name = 'GuardedFetchError'
    this.code = code
  }
}

const DEFAULT_TIMEOUT_MS = 10_000
const DEFAULT_CONNECT_TIMEOUT_MS = 5_000
const DEFAULT_MAX_BODY_BYTES = 64 * 1024

// An allow-list: ipaddr.js classes every special-purpose block (loopback, RFC 1918, link-local and the
// metadata address, ULA, CGNAT, …) as something other than `unicast`.
export function isPublicUnicastAddress(address: string): boolean {
  let parsed: ipaddr.IPv4 | ipaddr.IPv6
  try {
    parsed = ipaddr.parse(address)
  } catch {
    return false
  }
  if (parsed.kind() === 'ipv6') {
    const v6 = parsed as ipaddr.IPv6
    // a zone id only makes sense for link-local scopes
    if (v6.zoneId !== undefined) return false
    if (v6.isIPv4MappedAddress()) return v6.toIPv4Address().range() === 'unicast'
    return v6.range() === 'unicast'
  }
  return (parsed as ipaddr.IPv4).range() === 'unicast'
}

function normalizeHost(hostname: string): string {
  const host = hostname.toLowerCase()
  return host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host
}

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void

// Every address of the name must be public, so a name mixing public and private answers cannot be raced
// into the private one.
function guardedLookup(allowed: ReadonlySet<string>) {
  return (hostname: string, options: LookupOptions, callback: LookupCallback): void => {
    dnsLookup(hostname, { ...options, all: true }, (err, addresses) => {
      if (err) return callback(err, [])
      if (addresses.length === 0) {
        return callback(new GuardedFetchError('CONNECT_FAILED', `The host ${hostname} has no address.`), [])
      }
      if (!allowed.has(normalizeHost(hostname)) && !addresses.every((a) => isPublicUnicastAddress(a.address))) {
        return callback(new GuardedFetchError('ADDRESS_NOT_ALLOWED', `The host ${hostname} resolves to a non-public address.`), [])
      }
      // net.connect asks for all addresses when it races families (autoSelectFamily), else for one
      if (options.all) return callback(null, addresses)
      const first = addresses[0]!
      return callback(null, first.address, first.family)
    })
  }
}

// One pooled Agent per exemption list and connect time-out: a small set, fixed by the configuration.
const agents = new Map<string, Agent>()

function agentFor(allowed: ReadonlySet<string>, connectTimeoutMs: number): Agent {
  const key = JSON.stringify([[...allowed].sort(), connectTimeoutMs])
  let agent = agents.get(key)
  if (agent === undefined) {
    agent = new Agent({
      connect: { timeout: connectTimeoutMs, lookup: guardedLookup(allowed) },
      // the per-call AbortSignal bounds the total; keep idle sockets briefly so shutdown is quick
      keepAliveTimeout: 4_000,
    })
    agents.set(key, agent)
  }
  return agent
}

/** Closes every pooled connection; call on shutdown. Later fetches build fresh agents. */
export async function closeGuardedFetch(): Promise<void> {
  const open = [...agents.values()]
  agents.clear()
  await Promise.all(open.map((agent) => agent.close()))
}

function findGuardedError(err: unknown): GuardedFetchError | undefined {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    if (e instanceof GuardedFetchError) return e
  }
  return undefined
}

function errorCode(err: unknown): string | undefined {
  for (let e: unknown = err, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) {
    const code = (e as { code?: unknown }).code
    if (typeof code === 'string') return code
  }
  return undefined
}

function flattenHeaders(headers: Record<string, string | string[] | undefined>): Record<string, string> {
  const out: Record<string, string> = Object.create(null) as Record<string, string>
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined) continue
    out[name.toLowerCase()] = Array.isArray(value) ? value.join(', ') : value
  }
  // a null-prototype map keeps hostile header names such as "__proto__" inert; callers get a plain copy
  return { ...out }
}

/** Rejects with {@link GuardedFetchError} only; a 3xx (other than 304) is refused, not followed. */
export async function guardedFetch(url: string, options: GuardedFetchOptions = {}): Promise<GuardedResponse> {
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS
  const connectTimeoutMs = options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS
  const maxBodyBytes = options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES
  const method = options.method ?? 'GET'
  const allowed = new Set((options.allowHosts ?? []).map(normalizeHost))

  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    throw new GuardedFetchError('URL_INVALID', 'The URL is not a valid absolute URL.')
  }
  if (parsed.username !== '' || parsed.password !== '') {
    throw new GuardedFetchError('URL_INVALID', 'The URL must not contain credentials.')
  }
  const host = normalizeHost(parsed.hostname)
  const exempt = allowed.has(host)
  if (parsed.protocol !== 'https:' && !(parsed.protocol === 'http:' && exempt)) {
    throw new GuardedFetchError('SCHEME_NOT_ALLOWED', `The URL scheme ${parsed.protocol} is not allowed; use https.`)
  }
  if (host === '') throw new GuardedFetchError('URL_INVALID', 'The URL has no host.')
  // a literal address never goes through DNS, so the connector's lookup would not see it
  if (isIP(host) !== 0 && !exempt && !isPublicUnicastAddress(host)) {
    throw new GuardedFetchError('ADDRESS_NOT_ALLOWED', `The address ${host} is not a public address.`)
  }

  const controller = new AbortController()
  let timedOut = false
  const timer = setTimeout(() => {
    timedOut = true
    controller.abort(new GuardedFetchError('TIMEOUT', `The request took longer than ${timeoutMs} ms.`))
  }, timeoutMs)

  try {
    const response = await agentFor(allowed, connectTimeoutMs).request({
      origin: parsed.origin,
      path: `${parsed.pathname}${parsed.search}`,
      method,
      headers: options.headers ?? {},
      signal: controller.signal,
    })
    const { statusCode, body } = response
    if (statusCode >= 300 && statusCode < 400 && statusCode !== 304) {
      abandonBody(body)
      throw new GuardedFetchError('REDIRECT_NOT_FOLLOWED', `The server answered ${statusCode}; redirects are not followed.`)
    }
    const content = await readBoundedBody(body, maxBodyBytes, response.headers['content-length']).catch((error: unknown) => {
      if (error instanceof BodyTooLargeError) throw new GuardedFetchError('BODY_TOO_LARGE', `The response body exceeds ${maxBodyBytes} bytes.`)
      throw error
    })
    return { status: statusCode, headers: flattenHeaders(response.headers), body: content, url: parsed.href }
  } catch (err) {
    if (timedOut) throw new GuardedFetchError('TIMEOUT', `The request took longer than ${timeoutMs} ms.`)
    const guarded = findGuardedError(err)
    if (guarded !== undefined) throw guarded
    const code = errorCode(err)
    if (code === 'UND_ERR_CONNECT_TIMEOUT') {
      throw new GuardedFetchError('TIMEOUT', `Connecting took longer than ${connectTimeoutMs} ms.`)
    }
    // only the low-level code is surfaced: it says what failed without echoing anything the server sent
    throw new GuardedFetchError('CONNECT_FAILED', `The request to ${host} failed${code ? ` (${code})` : ''}.`)
  } finally {
    clearTimeout(timer)
  }
}

export interface ReachabilityResult {
  reachable: boolean
  status?: number
  error?: string
  message?: string
  elapsedMs: number
}

/** Only on explicit `live: true` validation (docs/api.md §2.13, docs/wire-contract.md §13); never throws. */
export async function checkAgentCardReachability(url: string, options?: GuardedFetchOptions): Promise<ReachabilityResult> {
  const started = performance.now()
  const elapsed = (): number => Math.round(performance.now() - started)
  try {
    const response = await guardedFetch(url, { ...options, method: 'GET' })
    const reachable = response.status >= 200 && response.status < 300
    return reachable
      ? { reachable, status: response.status, elapsedMs: elapsed() }
      : {
          reachable,
          status: response.status,
          error: 'UNEXPECTED_STATUS',
          message: `The agent card URL answered ${response.status}.`,
          elapsedMs: elapsed(),
        }
  } catch (err) {
    if (err instanceof GuardedFetchError) {
      return { reachable: false, error: err.code, message: err.message, elapsedMs: elapsed() }
    }
    return { reachable: false, error: 'CONNECT_FAILED', message: 'The agent card URL could not be fetched.', elapsedMs: elapsed() }
  }
}
