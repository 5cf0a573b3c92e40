// OAuth protected resources (RFC 9728, RFC 8707): how a gateway route names itself as one, shared by the
// configuration (SERVICE_UPSTREAM_RESOURCE) and the routes file (docs/wire-contract.md §9, "Routes").

/** The well-known prefix of protected-resource metadata (RFC 9728 §3). */
export const PROTECTED_RESOURCE_WELL_KNOWN = '/.well-known/oauth-protected-resource'

/**
 * Why `value` cannot name a protected resource, or null: an absolute http or https URL without query or
 * fragment (RFC 9728 §1.2), and without credentials, which would be published in the metadata.
 */
export function resourceIdentifierProblem(value: string): string | null {
  // `new URL` trims and drops such characters; the identifier must be the string a client sends back.
  if (/[\s\u0000-\u001f\u007f"\\]/.test(value)) return `must not contain whitespace, control characters, " or \\ (got ${JSON.stringify(value)})`
  let url: URL
  try {
    url = new URL(value)
  } catch {
    return `is not a valid URL (got ${JSON.stringify(value)})`
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') return 'must be an http or https URL'
  // `new URL` drops an empty "?" or "#", so the raw text is checked too.
  if (url.search !== '' || value.includes('?')) return 'must not carry a query'
  if (url.hash !== '' || value.includes('#')) return 'must not carry a fragment'
  if (url.username !== '' || url.password !== '') return 'must not carry credentials'
  return null
}

/** The resource of a route without one of its own: the public URL and the prefix without its trailing `/`. */
export function defaultResource(publicUrl: string, prefix: string): string {
  return publicUrl + (prefix.endsWith('/') ? prefix.slice(0, -1) : prefix)
}

/** The path the metadata of `resource` is served at: the well-known prefix, then the resource's path without a trailing `/`. */
export function metadataPathOf(resource: string): string {
  const path = new URL(resource).pathname
  return PROTECTED_RESOURCE_WELL_KNOWN + (path.endsWith('/') ? path.slice(0, -1) : path)
}

/** The absolute URL of that metadata (RFC 9728 §3.1), as a 401's `resource_metadata` names it. */
export function metadataUrlOf(resource: string): string {
  return new URL(resource).origin + metadataPathOf(resource)
}
