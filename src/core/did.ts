/**
 * DID syntax (W3C DID Core §3.1) and this registry's own did:web identifiers
 * (`did:web:<host, port as %3A>:agents:<id>`, docs/wire-contract.md §5).
 */

// method-name = 1*method-char (a-z, 0-9); method-specific-id = *( *idchar ":" ) 1*idchar, with pct-encoding.
const DID_SYNTAX = /^did:[a-z0-9]+:(?:(?:[A-Za-z0-9._-]|%[0-9A-Fa-f]{2})*:)*(?:[A-Za-z0-9._-]|%[0-9A-Fa-f]{2})+$/
export const MAX_DID_LENGTH = 512

export function isDid(value: string): boolean {
  return value.length <= MAX_DID_LENGTH && DID_SYNTAX.test(value)
}

/** `host` or `host%3Aport` of an issuer URL: the prefix of the registry's did:web identifiers (W3C did:web encodes a port as %3A). */
export function registryDidHostOf(issuerUrl: string): string {
  const url = new URL(issuerUrl)
  return url.port === '' ? url.hostname : `${url.hostname}%3A${url.port}`
}

/** `did:web:<host>:agents:`, the namespace of this registry's agents; an agent's did:web is it plus the agent id. */
export function agentDidWebPrefix(registryDidHost: string): string {
  return `did:web:${registryDidHost}:agents:`
}

export function agentDidWeb(registryDidHost: string, agentId: string): string {
  return agentDidWebPrefix(registryDidHost) + agentId
}

/**
 * When `did` lies in this registry's own `agents` namespace, the agent id it names; else null.
 * The comparison ignores host case because DNS names are case-insensitive.
 */
export function ownAgentIdFromDid(registryDidHost: string, did: string): string | null {
  const prefix = agentDidWebPrefix(registryDidHost.toLowerCase())
  if (!did.toLowerCase().startsWith(prefix)) return null
  return did.slice(prefix.length)
}
