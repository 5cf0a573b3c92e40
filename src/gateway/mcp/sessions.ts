/**
 * Which subject each MCP session belongs to (docs/mcp.md, "Sessions"): the upstream's `Mcp-Session-Id`
 * answering an `initialize` is bound to the badge that sent it, and only that subject may use it after.
 * In process and bounded: an evicted or expired binding makes its session unknown, which the client
 * answers by initializing again, as after a restart of the gateway.
 */
import type { IncomingMessage } from 'node:http'
import { LRUCache } from 'lru-cache'
import type { Transform } from 'node:stream'
import { lowerHeaderName } from '../ingress/header-names.js'
import type { VerifiedBadge } from '../identity/badge.js'
import type { ResponseFilter } from '../upstream/upstream.js'

/** Sessions remembered at once; past it the least recently used binding goes. */
export const MCP_SESSIONS_MAX = 100_000
/** A binding unused this long is forgotten: 24 hours, longer than a client keeps a session idle. */
export const MCP_SESSION_IDLE_MS = 24 * 60 * 60 * 1000
/** Longer session ids are not bound (the SDK's are 36 characters), so a binding costs a bounded amount. */
export const MCP_SESSION_ID_MAX_CHARS = 1024

const SESSION_HEADER = 'mcp-session-id'

/**
 * The subject a session is bound to: the badge's issuer and subject, not the badge itself, since a client
 * renews its badge (or raises its trust level) within one session. Two issuers never share a subject.
 */
export function sessionSubject(badge: VerifiedBadge): string {
  return `${badge.claims.iss}\n${badge.claims.sub}`
}

export type SessionRefusal = 'MCP_SESSION_UNKNOWN' | 'MCP_SESSION_FORBIDDEN'

export class McpSessions {
  readonly #owners: LRUCache<string, string>

  constructor(options: { readonly max?: number; readonly idleMs?: number } = {}) {
    this.#owners = new LRUCache<string, string>({ max: options.max ?? MCP_SESSIONS_MAX, ttl: options.idleMs ?? MCP_SESSION_IDLE_MS, updateAgeOnGet: true })
  }

  get size(): number {
    return this.#owners.size
  }

  /** Null when `subject` may use the session; otherwise why not. */
  check(sessionId: string, subject: string): SessionRefusal | null {
    const owner = this.#owners.get(sessionId)
    if (owner === undefined) return 'MCP_SESSION_UNKNOWN'
    return owner === subject ? null : 'MCP_SESSION_FORBIDDEN'
  }

  bind(sessionId: string, subject: string): void {
    if (sessionId.length === 0 || sessionId.length > MCP_SESSION_ID_MAX_CHARS) return
    this.#owners.set(sessionId, subject)
  }

  end(sessionId: string): void {
    this.#owners.delete(sessionId)
  }
}

/** The request's Mcp-Session-Id: undefined without one, null when it comes more than once. */
export function requestSessionId(req: IncomingMessage): string | undefined | null {
  const raw = req.rawHeaders
  let found: string | undefined
  for (let i = 0; i < raw.length; i += 2) {
    if (lowerHeaderName(raw[i]!) !== SESSION_HEADER) continue
    if (found !== undefined) return null
    found = raw[i + 1]!
  }
  return found
}

/** The Mcp-Session-Id of an upstream answer's head (undici's raw headers), or undefined. */
function answerSessionId(rawHeaders: readonly Buffer[]): string | undefined {
  for (let i = 0; i < rawHeaders.length; i += 2) {
    if (lowerHeaderName(rawHeaders[i]!.toString('latin1')) === SESSION_HEADER) return rawHeaders[i + 1]!.toString('latin1').trim()
  }
  return undefined
}

/**
 * Watches the head of an upstream answer for what it says about a session: the session an `initialize`
 * answer created is bound to its subject; a DELETE the upstream accepted ends the binding. The body
 * passes untouched (neither answer is a list the gateway filters).
 */
export class SessionWatch implements ResponseFilter {
  constructor(
    private readonly sessions: McpSessions,
    /** After an initialize: bind the answer's session to this subject; after a DELETE: end this session. */
    private readonly action: { readonly bindTo: string } | { readonly end: string },
    /** The filter the answer's body goes through afterwards (the list filter), if any. */
    private readonly next: ResponseFilter | null = null,
  ) {}

  filterFor(status: number, contentType: string | undefined, contentEncoding: string | undefined, rawHeaders: readonly Buffer[]): Transform | null {
    if (status >= 200 && status < 300) {
      if ('end' in this.action) this.sessions.end(this.action.end)
      else {
        const id = answerSessionId(rawHeaders)
        if (id !== undefined) this.sessions.bind(id, this.action.bindTo)
      }
    }
    return this.next === null ? null : this.next.filterFor(status, contentType, contentEncoding, rawHeaders)
  }
}
