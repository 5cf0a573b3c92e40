// The media types and coding of request bodies the gateway reads to decide on (MCP and A2A routes).

const JSON_MEDIA_TYPE = /^application\/(json|a2a\+json)[ \t]*(?:;[ \t]*charset[ \t]*=[ \t]*(?:"utf-8"|utf-8)[ \t]*)?$/i

/** `json` for application/json, `a2a+json` for application/a2a+json (UTF-8 charset only), else null. */
export function jsonMediaType(contentType: string | undefined): 'json' | 'a2a+json' | null {
  if (contentType === undefined) return null
  const match = JSON_MEDIA_TYPE.exec(contentType.trim())
  return match === null ? null : match[1]!.toLowerCase() === 'json' ? 'json' : 'a2a+json'
}

/** Only the identity coding: a body the gateway cannot read is a body it cannot decide on. */
export function isIdentityCoding(contentEncoding: string | undefined): boolean {
  return contentEncoding === undefined || contentEncoding.trim().toLowerCase() === 'identity'
}
