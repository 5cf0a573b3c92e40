/**
 * The one spelling of an MCP resource URI that the gateway decides on and forwards (docs/mcp.md, "Resource
 * URIs"). The MCP SDK's server reads `params.uri` with WHATWG `new URL()` and looks resources up by its
 * `href`, so `FILE:///a`, `file:/a`, `file://localhost/a`, `file:///x/../a`, ` file:///a` and `file:///a`
 * with a tab inside all reach the resource `file:///a`: deciding on the text the client sent would let one
 * spelling be decided and another executed.
 */

/** Percent-escapes of RFC 3986 unreserved characters, which name the same resource decoded. */
const ESCAPE = /%([0-9A-Fa-f]{2})/g
const UNRESERVED = /^[A-Za-z0-9\-._~]$/

function normaliseEscapes(href: string): string {
  if (!href.includes('%')) return href
  return href.replace(ESCAPE, (escape: string, hex: string) => {
    const char = String.fromCharCode(parseInt(hex, 16))
    return UNRESERVED.test(char) ? char : escape.toUpperCase()
  })
}

function href(text: string): string | null {
  try {
    return new URL(text).href
  } catch {
    return null
  }
}

/**
 * The canonical form of a resource URI: its WHATWG URL serialisation (scheme and special hosts lower-cased,
 * dot segments removed, tabs, newlines and outer spaces dropped, backslashes of special schemes read as `/`,
 * `file:` hosts `localhost` and empty alike), with escapes of unreserved characters decoded and the other
 * escapes' hex upper-cased. Null when the text is not a URL, or when its form does not read back as itself
 * (a form that changes when parsed again could be decided as one resource and served as another).
 */
export function canonicalResourceUri(raw: string): string | null {
  const first = href(raw)
  if (first === null) return null
  const canonical = normaliseEscapes(first)
  return href(canonical) === canonical ? canonical : null
}

const EXPRESSION = /\{[^{}]*\}/g
const MARKER_PREFIX = 'mcpuritemplatevar'

/**
 * A resource template (RFC 6570) in the same canonical form as the URIs it expands to: its literal text
 * canonicalised with each `{…}` expression held in place; null when that literal text is no URL.
 */
export function canonicalUriTemplate(raw: string): string | null {
  if (!raw.includes('{')) return canonicalResourceUri(raw)
  if (raw.toLowerCase().includes(MARKER_PREFIX)) return null
  const expressions: string[] = []
  const marked = raw.replace(EXPRESSION, (expression: string) => `${MARKER_PREFIX}${expressions.push(expression) - 1}x`)
  const canonical = canonicalResourceUri(marked)
  if (canonical === null) return null
  let restored = canonical
  for (let i = 0; i < expressions.length; i++) {
    const marker = `${MARKER_PREFIX}${i}x`
    const at = restored.indexOf(marker)
    if (at < 0 || restored.indexOf(marker, at + 1) >= 0) return null
    restored = restored.slice(0, at) + expressions[i]! + restored.slice(at + marker.length)
  }
  return restored
}
