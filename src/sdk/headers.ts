/**
 * The request headers that carry a delegation chain to the gateway (docs/wire-contract.md §9, §10).
 */
import { SdkError } from './errors.js'

/** The three chain headers, ready to merge into a request's headers. */
export interface ChainHeaders {
  /** The leaf envelope (the last of the chain). */
  'X-Service-Authority': string
  /** base64url of the JSON array of every envelope, root first. */
  'X-Service-Authority-Chain': string
  /** base64url of the JSON object DID → badge JWS. */
  'X-Service-Badge-Map': string
}

const COMPACT_JWS = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/

/**
 * Builds the chain headers from the envelopes (root first, leaf last) and the badges of the chain's
 * parties. The gateway needs a badge for every DID in the chain except the caller's own (whose badge
 * travels in `Authorization` / `X-Service-Badge`); including it does no harm.
 */
export function chainHeaders(envelopes: readonly string[], badgeMap: Readonly<Record<string, string>>): ChainHeaders {
  if (!Array.isArray(envelopes) || envelopes.length === 0) throw new SdkError('invalid_argument', 'A chain has at least one envelope.')
  for (const envelope of envelopes) {
    if (typeof envelope !== 'string' || !COMPACT_JWS.test(envelope)) throw new SdkError('invalid_argument', 'Every envelope must be a compact JWS.')
  }
  for (const [did, badge] of Object.entries(badgeMap)) {
    if (!did.startsWith('did:') || typeof badge !== 'string' || !COMPACT_JWS.test(badge)) {
      throw new SdkError('invalid_argument', 'The badge map maps DIDs to compact JWS badges.')
    }
  }
  const encode = (value: unknown): string => Buffer.from(JSON.stringify(value), 'utf8').toString('base64url')
  return {
    'X-Service-Authority': envelopes[envelopes.length - 1] as string,
    'X-Service-Authority-Chain': encode(envelopes),
    'X-Service-Badge-Map': encode(badgeMap),
  }
}
