/**
 * The public agent card's interface URLs, moved from the upstream's address to the gateway's (docs/a2a.md,
 * "The public card"). Pure: the caller says which URLs are the upstream's and where they go.
 */
import { isRecord } from '../../core/json-objects.js'

/** The upstream a route forwards to: gateway path P goes to `origin` + `basePath` + P. */
export interface UpstreamAddress {
  readonly origin: string
  readonly basePath: string
}

/**
 * The gateway address of `url`, the inverse of forwarding: an URL at the upstream's origin under its base
 * path becomes `publicUrl` + the rest of the path; null for any other URL (another host, credentials in it,
 * or not an URL), which stays as the agent wrote it.
 */
export function gatewayAddressOf(url: string, upstream: UpstreamAddress, publicUrl: string): { url: string; path: string } | null {
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    return null
  }
  if (parsed.origin !== upstream.origin || parsed.username !== '' || parsed.password !== '') return null
  const base = upstream.basePath
  const path = parsed.pathname
  if (base !== '' && path !== base && !path.startsWith(`${base}/`)) return null
  const rest = path.slice(base.length)
  return { url: publicUrl + rest + parsed.search + parsed.hash, path: rest === '' ? '/' : rest }
}

/** One URL's new value, or null to leave it. */
export type UrlMove = (url: string) => string | null

const INTERFACE_LISTS = ['additionalInterfaces', 'supportedInterfaces'] as const

/**
 * A copy of `card` with `url`, `additionalInterfaces[].url` and `supportedInterfaces[].url` moved (0.3 and
 * 1.0 shapes, and the 1.x SDK's legacy card that carries both); every other member is kept as it is.
 */
export function rewriteCardUrls(card: Readonly<Record<string, unknown>>, move: UrlMove): { card: Record<string, unknown>; moved: number } {
  let moved = 0
  const moveIn = (record: Readonly<Record<string, unknown>>): Record<string, unknown> => {
    const url = record.url
    if (typeof url !== 'string') return { ...record }
    const to = move(url)
    if (to === null || to === url) return { ...record }
    moved++
    return { ...record, url: to }
  }
  const result = moveIn(card)
  for (const name of INTERFACE_LISTS) {
    const list = card[name]
    if (Array.isArray(list)) result[name] = list.map((entry: unknown) => (isRecord(entry) ? moveIn(entry) : entry))
  }
  return { card: result, moved }
}
