// The Host and Origin check of MCP routes against DNS rebinding (docs/mcp.md, "Host and Origin"): the
// upstream's own check never sees them, as the gateway sends the upstream's Host.
import type { IncomingMessage } from 'node:http'
import { AllowedHosts, AllowedOrigins } from '../../core/allowed-hosts.js'
import { lowerHeaderName } from '../ingress/header-names.js'

export type HostRefusal = 'MCP_HOST_NOT_ALLOWED' | 'MCP_ORIGIN_NOT_ALLOWED'

export class McpHostCheck {
  readonly #hosts: AllowedHosts
  readonly #origins: AllowedOrigins

  constructor(hosts: readonly string[] | null, origins: readonly string[] | null, publicUrl: string | null) {
    this.#hosts = new AllowedHosts(hosts, publicUrl)
    this.#origins = new AllowedOrigins(origins, publicUrl)
  }

  /**
   * The refusal of a request, or null. Host is always checked (a request without one is refused); a
   * trusted proxy's X-Forwarded-Host and `Forwarded: host=` carry the client's Host, so each of their
   * values must pass too. A request without Origin (not a browser's) passes that check; two Origins do not.
   */
  check(req: IncomingMessage, trustedPeer: boolean): HostRefusal | null {
    const raw = req.rawHeaders
    let host: string | undefined
    let origin: string | undefined
    let origins = 0
    for (let i = 0; i < raw.length; i += 2) {
      const lower = lowerHeaderName(raw[i]!)
      const value = raw[i + 1]!
      if (lower === 'host') host = value
      else if (lower === 'origin') {
        origin = value
        origins++
      } else if (trustedPeer && lower === 'x-forwarded-host') {
        for (const part of value.split(',')) if (!this.#hosts.allows(part.trim())) return 'MCP_HOST_NOT_ALLOWED'
      } else if (trustedPeer && lower === 'forwarded') {
        for (const forwardedHost of forwardedHosts(value)) if (!this.#hosts.allows(forwardedHost)) return 'MCP_HOST_NOT_ALLOWED'
      }
    }
    if (host === undefined || !this.#hosts.allows(host)) return 'MCP_HOST_NOT_ALLOWED'
    if (origin !== undefined && (origins > 1 || !this.#origins.allows(origin))) return 'MCP_ORIGIN_NOT_ALLOWED'
    return null
  }
}

/** The `host=` parameters of a Forwarded value (RFC 7239 §4), quoted or not. */
function forwardedHosts(value: string): string[] {
  const hosts: string[] = []
  for (const element of value.split(',')) {
    for (const pair of element.split(';')) {
      const eq = pair.indexOf('=')
      if (eq === -1 || pair.slice(0, eq).trim().toLowerCase() !== 'host') continue
      const given = pair.slice(eq + 1).trim()
      hosts.push(given.length >= 2 && given.startsWith('"') && given.endsWith('"') ? given.slice(1, -1) : given)
    }
  }
  return hosts
}
