// The routes file (SERVICE_ROUTES_FILE; docs/wire-contract.md §9, "Routes") and the prefix table built from it.
import { readFile } from 'node:fs/promises'
import { UNDERSCORE_HEADER_ACTIONS, UPSTREAM_PROTOCOLS, type UnderscoreHeaders, type UpstreamProtocol } from '../../config/index.js'
import { isDid } from '../../core/did.js'
import { ENFORCEMENT_MODES, type EnforcementMode } from '../../core/enforcement-mode.js'
import { isRecord } from '../../core/json-objects.js'
import { defaultResource, metadataPathOf, resourceIdentifierProblem } from '../../core/protected-resource.js'
import { canonicalTarget, lowerCasePath } from './canonical-target.js'

export type { UnderscoreHeaders, UpstreamProtocol }

export interface RouteDefinition {
  readonly prefix: string
  /** May carry a base path, prepended to the forwarded path. */
  readonly upstream: string
  /** Null: the gateway's default. */
  readonly mode: EnforcementMode | null
  readonly caseInsensitive: boolean
  /** Declared case-sensitive: paths are decided as sent; neither flag: the stricter of both readings. */
  readonly caseSensitive: boolean
  readonly headersWithUnderscores: UnderscoreHeaders
  readonly hideDenyReason: boolean
  readonly protocol: UpstreamProtocol
  /** Null: the route is not an OAuth protected resource (docs/mcp.md, "Authorization"). */
  readonly resourceServer: ResourceServerDefinition | null
  /** A2A: the upstream's public card must carry a signature by a trusted key (docs/a2a.md, "The public card"). */
  readonly requireCardSignature: boolean
  /** With requireCardSignature: the DID whose key must sign the card (else any trusted key); null: any. */
  readonly cardSigner: string | null
}

export interface ResourceServerDefinition {
  /** The `resource` member, else the public URL and the prefix. */
  readonly resource: string
  /** A badge without `aud` is refused too. */
  readonly requireAudience: boolean
}

/** `problems` lists every defect found, not only the first. */
export class RoutesFileError extends Error {
  readonly code = 'ROUTES_FILE_INVALID'
  override readonly name = 'RoutesFileError'
  constructor(
    readonly source: string,
    /** Every problem found, each naming the offending member (`routes[2].upstream: …`). */
    readonly problems: readonly string[],
  ) {
    super(`Invalid routes file ${source}:\n${problems.map((p) => `  - ${p}`).join('\n')}`)
  }
}

const ROUTE_KEYS = new Set([
  'prefix', 'upstream', 'mode', 'caseInsensitive', 'caseSensitive', 'headersWithUnderscores', 'hideDenyReason', 'protocol', 'resourceServer', 'resource', 'requireAudience',
  'requireCardSignature', 'cardSigner',
])
const MODES: ReadonlySet<string> = new Set(ENFORCEMENT_MODES)
// Whitespace and control characters can never appear in a request target, so such a prefix would
// silently never match; refusing it surfaces the typo at start-up.
const BAD_PREFIX_CHARS = /[\s\u0000-\u001f\u007f?#]/

function checkPrefix(value: unknown, where: string, problems: string[]): value is string {
  if (typeof value !== 'string') {
    problems.push(`${where}: must be a string`)
    return false
  }
  const before = problems.length
  if (!value.startsWith('/')) problems.push(`${where}: must start with "/" (got ${JSON.stringify(value)})`)
  if (value.includes('?') || value.includes('#')) problems.push(`${where}: must not contain "?" or "#"`)
  else if (BAD_PREFIX_CHARS.test(value)) problems.push(`${where}: must not contain whitespace or control characters`)
  else if (value.startsWith('/')) {
    // Requests are matched in canonical form, so a prefix in any other form would never match.
    const canonical = { path: '', query: '' }
    const problem = canonicalTarget(value, canonical)
    if (problem !== null) problems.push(`${where}: ${problem}`)
    else if (canonical.path !== value) problems.push(`${where}: must be in canonical form (${JSON.stringify(canonical.path)})`)
  }
  return problems.length === before
}

function checkBoolean(value: unknown, where: string, problems: string[]): boolean {
  if (value === undefined || typeof value === 'boolean') return true
  problems.push(`${where}: must be true or false (got ${JSON.stringify(value)})`)
  return false
}

function checkUpstream(value: unknown, where: string, problems: string[]): value is string {
  if (typeof value !== 'string') {
    problems.push(`${where}: must be a string`)
    return false
  }
  let url: URL
  try {
    url = new URL(value)
  } catch {
    problems.push(`${where}: is not a valid URL (got ${JSON.stringify(value)})`)
    return false
  }
  const before = problems.length
  if (url.protocol !== 'http:' && url.protocol !== 'https:') problems.push(`${where}: must be an http or https URL`)
  // `new URL` drops an empty "?" or "#", so the raw text is checked too.
  if (url.search !== '' || value.includes('?')) problems.push(`${where}: must not carry a query`)
  if (url.hash !== '' || value.includes('#')) problems.push(`${where}: must not carry a fragment`)
  // Credentials in a routes file would be a secret in plain config, and the pool would not send them.
  if (url.username !== '' || url.password !== '') problems.push(`${where}: must not carry credentials`)
  return problems.length === before
}

/** Why a resource's metadata could never be found (its path not in the canonical form requests are matched in), or null. */
export function metadataPathProblem(resource: string): string | null {
  const path = metadataPathOf(resource)
  const canonical = { path: '', query: '' }
  const problem = canonicalTarget(path, canonical)
  if (problem !== null) return `its metadata path ${JSON.stringify(path)} cannot be served: ${problem}`
  if (canonical.path !== path) return `its metadata path ${JSON.stringify(path)} is not in canonical form (${JSON.stringify(canonical.path)})`
  return null
}

/** `resourceServer`, `resource` and `requireAudience` of one route; `undefined` when one of them is wrong. */
function resourceServerOf(
  entry: Record<string, unknown>, at: string, protocol: unknown, publicUrl: string | null, prefixOk: boolean, problems: string[],
): ResourceServerDefinition | null | undefined {
  const before = problems.length
  const flag = entry.resourceServer
  checkBoolean(flag, `${at}.resourceServer`, problems)
  const isResourceServer = typeof flag === 'boolean' ? flag : protocol === 'mcp'
  const { resource, requireAudience } = entry
  if (!isResourceServer) {
    if (resource !== undefined) problems.push(`${at}.resource: only for a resource server (resourceServer: true)`)
    if (requireAudience !== undefined) problems.push(`${at}.requireAudience: only for a resource server (resourceServer: true)`)
    return problems.length === before ? null : undefined
  }
  if (resource !== undefined) {
    const problem = typeof resource === 'string' ? resourceIdentifierProblem(resource) : 'must be a string'
    if (problem !== null) problems.push(`${at}.resource: ${problem}`)
  }
  checkBoolean(requireAudience, `${at}.requireAudience`, problems)
  // In production the default would publish localhost in every challenge and metadata document.
  if (publicUrl === null) problems.push(`${at}: a resource server needs SERVICE_GATEWAY_PUBLIC_URL when ENVIRONMENT=production`)
  // A bad prefix is reported already; a default resource built on it would only add a consequence of it.
  if (problems.length !== before || !prefixOk) return undefined
  return {
    resource: typeof resource === 'string' ? resource : defaultResource(publicUrl as string, entry.prefix as string),
    requireAudience: requireAudience === true,
  }
}

/**
 * Every problem is thrown together in one {@link RoutesFileError}. `publicUrl` is SERVICE_GATEWAY_PUBLIC_URL
 * (config `gateway.publicUrl`): null when production leaves it unset.
 */
export function parseRoutes(text: string, source: string, publicUrl: string | null): RouteDefinition[] {
  let doc: unknown
  try {
    doc = JSON.parse(text)
  } catch (err) {
    throw new RoutesFileError(source, [`not valid JSON: ${(err as Error).message}`])
  }
  const problems: string[] = []
  if (!isRecord(doc)) throw new RoutesFileError(source, ['must be a JSON object with a "routes" array'])
  for (const key of Object.keys(doc)) {
    if (key !== 'routes') problems.push(`unknown member "${key}"`)
  }
  const list = doc.routes
  if (!Array.isArray(list)) {
    problems.push('"routes" must be an array')
    throw new RoutesFileError(source, problems)
  }
  if (list.length === 0) problems.push('"routes" must list at least one route')

  const routes: RouteDefinition[] = []
  const seen = new Map<string, number>()
  const metadataPaths = new Map<string, number>()
  list.forEach((entry: unknown, i: number) => {
    const at = `routes[${i}]`
    if (!isRecord(entry)) {
      problems.push(`${at}: must be an object`)
      return
    }
    for (const key of Object.keys(entry)) {
      if (!ROUTE_KEYS.has(key)) problems.push(`${at}: unknown member "${key}"`)
    }
    let ok = true
    if (!('prefix' in entry)) {
      problems.push(`${at}.prefix: is required`)
      ok = false
    } else if (!checkPrefix(entry.prefix, `${at}.prefix`, problems)) ok = false
    const prefixOk = ok
    if (!('upstream' in entry)) {
      problems.push(`${at}.upstream: is required`)
      ok = false
    } else if (!checkUpstream(entry.upstream, `${at}.upstream`, problems)) ok = false
    const mode = entry.mode
    if (mode !== undefined && mode !== null && (typeof mode !== 'string' || !MODES.has(mode))) {
      problems.push(`${at}.mode: must be one of ${ENFORCEMENT_MODES.join(', ')} (got ${JSON.stringify(mode)})`)
      ok = false
    }
    const caseInsensitive = entry.caseInsensitive
    if (!checkBoolean(caseInsensitive, `${at}.caseInsensitive`, problems)) ok = false
    const caseSensitive = entry.caseSensitive
    if (!checkBoolean(caseSensitive, `${at}.caseSensitive`, problems)) ok = false
    else if (caseSensitive === true && caseInsensitive === true) {
      problems.push(`${at}.caseSensitive: a route cannot be both caseSensitive and caseInsensitive`)
      ok = false
    }
    const hideDenyReason = entry.hideDenyReason
    if (!checkBoolean(hideDenyReason, `${at}.hideDenyReason`, problems)) ok = false
    const underscores = entry.headersWithUnderscores
    if (underscores !== undefined && !UNDERSCORE_HEADER_ACTIONS.includes(underscores as UnderscoreHeaders)) {
      problems.push(`${at}.headersWithUnderscores: must be one of ${UNDERSCORE_HEADER_ACTIONS.join(', ')} (got ${JSON.stringify(underscores)})`)
      ok = false
    }
    const protocol = entry.protocol
    if (protocol !== undefined && !UPSTREAM_PROTOCOLS.includes(protocol as UpstreamProtocol)) {
      problems.push(`${at}.protocol: must be one of ${UPSTREAM_PROTOCOLS.join(', ')} (got ${JSON.stringify(protocol)})`)
      ok = false
    }
    const requireCardSignature = entry.requireCardSignature
    if (!checkBoolean(requireCardSignature, `${at}.requireCardSignature`, problems)) ok = false
    else if (requireCardSignature !== undefined && protocol !== 'a2a') {
      problems.push(`${at}.requireCardSignature: only an a2a route serves an agent card`)
      ok = false
    }
    const cardSigner = entry.cardSigner
    if (cardSigner !== undefined) {
      if (typeof cardSigner !== 'string' || !isDid(cardSigner)) {
        problems.push(`${at}.cardSigner: must be a DID (got ${JSON.stringify(cardSigner)})`)
        ok = false
      } else if (requireCardSignature !== true) {
        problems.push(`${at}.cardSigner: needs "requireCardSignature": true`)
        ok = false
      }
    }
    const resourceServer = resourceServerOf(entry, at, protocol, publicUrl, prefixOk, problems)
    if (resourceServer === undefined) ok = false
    else if (resourceServer !== null) {
      const problem = metadataPathProblem(resourceServer.resource)
      const path = metadataPathOf(resourceServer.resource)
      const first = metadataPaths.get(path)
      if (problem !== null) problems.push(`${at}.resource: ${problem}`)
      else if (first !== undefined) problems.push(`${at}.resource: its metadata path ${JSON.stringify(path)} is routes[${first}]'s too`)
      else metadataPaths.set(path, i)
      if (problem !== null || first !== undefined) ok = false
    }
    if (typeof entry.prefix === 'string') {
      const first = seen.get(entry.prefix)
      if (first !== undefined) {
        problems.push(`${at}.prefix: duplicates routes[${first}].prefix ${JSON.stringify(entry.prefix)}`)
        ok = false
      } else seen.set(entry.prefix, i)
    }
    if (ok) {
      routes.push({
        prefix: entry.prefix as string,
        upstream: entry.upstream as string,
        mode: (mode ?? null) as EnforcementMode | null,
        caseInsensitive: caseInsensitive === true,
        caseSensitive: caseSensitive === true,
        headersWithUnderscores: (underscores ?? 'drop') as UnderscoreHeaders,
        hideDenyReason: hideDenyReason === true,
        protocol: (protocol ?? 'http') as UpstreamProtocol,
        resourceServer: resourceServer ?? null,
        requireCardSignature: requireCardSignature === true,
        cardSigner: (cardSigner ?? null) as string | null,
      })
    }
  })
  if (problems.length > 0) throw new RoutesFileError(source, problems)
  return routes
}

/** Reads and validates a routes file; an unreadable file is a {@link RoutesFileError} too. */
export async function loadRoutesFile(file: string, publicUrl: string | null): Promise<RouteDefinition[]> {
  let text: string
  try {
    text = await readFile(file, 'utf8')
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    throw new RoutesFileError(file, [`cannot be read${code === undefined ? '' : ` (${code})`}`])
  }
  return parseRoutes(text, file, publicUrl)
}

export interface RouteMatch<T> {
  readonly prefix: string
  readonly value: T
}

const SLASH = 0x2f
const QUESTION = 0x3f

/**
 * Longest prefix at a `/` boundary (`/api` matches `/api/x`, not `/apix`), sorted longest first, so the first
 * hit is the answer; per request no regular expression and no allocation (the returned entry is preallocated).
 */
export class RouteTable<T> {
  readonly #prefixes: string[]
  // A prefix that ends in "/" already sits on a boundary, so any continuation matches.
  readonly #open: boolean[]
  readonly #caseInsensitive: boolean[]
  readonly #anyCaseInsensitive: boolean
  readonly #entries: RouteMatch<T>[]

  /** @throws Error on a prefix that does not start with `/` or on a duplicate prefix. */
  constructor(entries: readonly { prefix: string; value: T; caseInsensitive?: boolean }[]) {
    const seen = new Set<string>()
    for (const { prefix } of entries) {
      if (!prefix.startsWith('/')) throw new Error(`route prefix must start with "/": ${JSON.stringify(prefix)}`)
      if (seen.has(prefix)) throw new Error(`duplicate route prefix ${JSON.stringify(prefix)}`)
      seen.add(prefix)
    }
    // Array.prototype.sort is stable, so equal lengths keep file order (irrelevant for distinct prefixes).
    const sorted = entries
      .map((e) => ({ match: Object.freeze({ prefix: e.prefix, value: e.value }), caseInsensitive: e.caseInsensitive === true }))
      .sort((a, b) => b.match.prefix.length - a.match.prefix.length)
    this.#entries = sorted.map((e) => e.match)
    this.#caseInsensitive = sorted.map((e) => e.caseInsensitive)
    this.#anyCaseInsensitive = this.#caseInsensitive.includes(true)
    this.#prefixes = sorted.map((e) => (e.caseInsensitive ? lowerCasePath(e.match.prefix) : e.match.prefix))
    this.#open = sorted.map((e) => e.match.prefix.endsWith('/'))
  }

  get size(): number {
    return this.#entries.length
  }

  /** Every route, longest prefix first. */
  get entries(): readonly RouteMatch<T>[] {
    return this.#entries
  }

  /** The longest matching route for a request target (path with optional query), or null. */
  match(path: string): RouteMatch<T> | null {
    const prefixes = this.#prefixes
    const lowered = this.#anyCaseInsensitive ? lowerCasePath(path) : path
    for (let i = 0; i < prefixes.length; i++) {
      const prefix = prefixes[i]!
      const candidate = this.#caseInsensitive[i] ? lowered : path
      if (!candidate.startsWith(prefix)) continue
      if (candidate.length === prefix.length || this.#open[i]) return this.#entries[i]!
      const next = candidate.charCodeAt(prefix.length)
      if (next === SLASH || next === QUESTION) return this.#entries[i]!
    }
    return null
  }
}
