/**
 * The names an MCP route answers to, against DNS rebinding (docs/mcp.md, "Host and Origin"): a page that
 * had its own name resolve to the gateway's address still sends that name in `Host` and its origin in
 * `Origin`, so both are compared with lists the operator wrote, never with what a request claims.
 */

/** The loopback names a rebinding page cannot send: a browser puts the name it resolved in Host. */
export const LOOPBACK_NAMES: readonly string[] = Object.freeze(['localhost', '127.0.0.1', '[::1]'])

/** A name and its port (`''` when the value carries none), lower case. */
export interface HostAndPort {
  readonly name: string
  readonly port: string
}

const BRACKETED = /^(\[[0-9a-f:.]+\])(?::([0-9]{1,5}))?$/
const NAMED = /^([a-z0-9_-]+(?:\.[a-z0-9_-]+)*)(?::([0-9]{1,5}))?$/

/** A Host value (or an allowed-hosts entry) as name and port; null when it is not one (userinfo, a path, junk). */
export function parseHostAndPort(value: string): HostAndPort | null {
  const lower = value.toLowerCase()
  const match = BRACKETED.exec(lower) ?? NAMED.exec(lower)
  if (match === null) return null
  const port = match[2] ?? ''
  if (port !== '' && Number(port) > 65535) return null
  // Leading zeros spell the same port.
  return { name: match[1]!, port: port === '' ? '' : String(Number(port)) }
}

/** The ports a name is accepted on: null for any. */
type Ports = ReadonlySet<string> | null

/** A Host without a port means the scheme's default, which the gateway behind a proxy cannot know: 80 or 443. */
function portsOf(port: string): ReadonlySet<string> {
  return port === '80' || port === '443' ? new Set([port, '']) : new Set([port])
}

/**
 * The hosts an MCP route accepts: `configured` when given (`*`: any), else the host of `publicUrl` on its
 * port and the loopback names on any port.
 */
export class AllowedHosts {
  readonly #names = new Map<string, Ports>()
  readonly #any: boolean

  constructor(configured: readonly string[] | null, publicUrl: string | null) {
    this.#any = configured?.includes('*') === true
    if (configured !== null) {
      for (const entry of configured) {
        const parsed = parseHostAndPort(entry)
        if (parsed !== null) this.#add(parsed.name, parsed.port === '' ? null : portsOf(parsed.port))
      }
      return
    }
    for (const name of LOOPBACK_NAMES) this.#add(name, null)
    if (publicUrl !== null) {
      const url = new URL(publicUrl)
      const parsed = parseHostAndPort(url.host)
      if (parsed !== null) this.#add(parsed.name, portsOf(url.port !== '' ? url.port : url.protocol === 'https:' ? '443' : '80'))
    }
  }

  #add(name: string, ports: Ports): void {
    const known = this.#names.get(name)
    if (known === null) return
    if (known === undefined || ports === null) return void this.#names.set(name, ports)
    this.#names.set(name, new Set([...known, ...ports]))
  }

  /** Whether a Host (or X-Forwarded-Host) value names this gateway; a value that is not a host never does. */
  allows(value: string): boolean {
    if (this.#any) return true
    const parsed = parseHostAndPort(value)
    if (parsed === null) return false
    const ports = this.#names.get(parsed.name)
    return ports === null || (ports !== undefined && ports.has(parsed.port))
  }
}

/** An origin as browsers serialise it (scheme, host, port), or null when the value is not one (`null` included). */
export function originOf(value: string): string | null {
  const trimmed = value.trim()
  if (!URL.canParse(trimmed)) return null
  const url = new URL(trimmed)
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return null
  if (url.username !== '' || url.password !== '' || url.search !== '' || url.hash !== '' || (url.pathname !== '/' && url.pathname !== '')) return null
  return url.origin
}

/**
 * The origins an MCP route accepts in `Origin`: `configured` when given (`*`: any), else the origin of
 * `publicUrl` and the http and https origins of the loopback names on any port.
 */
export class AllowedOrigins {
  readonly #origins = new Set<string>()
  readonly #any: boolean
  readonly #loopback: boolean

  constructor(configured: readonly string[] | null, publicUrl: string | null) {
    this.#any = configured?.includes('*') === true
    this.#loopback = configured === null
    for (const entry of configured ?? (publicUrl === null ? [] : [publicUrl])) {
      const origin = entry === publicUrl ? new URL(entry).origin : originOf(entry)
      if (origin !== null) this.#origins.add(origin)
    }
  }

  allows(value: string): boolean {
    if (this.#any) return true
    const origin = originOf(value)
    if (origin === null) return false
    if (this.#origins.has(origin)) return true
    if (!this.#loopback) return false
    const host = new URL(origin).hostname
    return LOOPBACK_NAMES.includes(host)
  }
}

/** A sentence for each entry of SERVICE_MCP_ALLOWED_HOSTS that is not a host. */
export function allowedHostsProblems(entries: readonly string[]): string[] {
  return entries.filter((entry) => entry !== '*' && parseHostAndPort(entry) === null).map((entry) => `"${entry}" is not a host name or host:port`)
}

/** A sentence for each entry of SERVICE_MCP_ALLOWED_ORIGINS that is not an origin. */
export function allowedOriginsProblems(entries: readonly string[]): string[] {
  return entries.filter((entry) => entry !== '*' && originOf(entry) === null).map((entry) => `"${entry}" is not an http or https origin (scheme://host[:port])`)
}
