/**
 * Agent SDK of the agent trust appliance (the package's `main`).
 *
 * - Keys: {@link generateAgentKey}, {@link saveAgentKey} / {@link loadAgentKey} (private JWK, 0600,
 *   never overwritten), {@link didKeyOf}, {@link publicJwkOf}.
 * - Badges: {@link mintSelfSignedBadge} (level 0), {@link requestPopBadge} (IAL-1 proof of possession
 *   against a registry), {@link requestClientCredentialsBadge} (IAL-1 through the OAuth token endpoint,
 *   no API key), {@link verifyBadgeWithJwks} (the gateway's own verifier).
 * - Delegation: {@link mintRootEnvelope}, {@link mintChildEnvelope} (checked locally against the
 *   gateway's narrowing rules), {@link inspectEnvelope} (unverified view), {@link chainHeaders}.
 *
 * Every failure is an {@link SdkError} with a stable `code` (the registry's code when it refused).
 * Nothing here logs, and no error message carries key material or API keys.
 *
 * @packageDocumentation
 */

export { GATEWAY_ERROR_CODES, SdkError, type GatewayErrorCode, type SdkGatewayErrorCode, type SdkLocalErrorCode } from './errors.js'

export {
  agentKeyFromPrivateKey,
  didKeyOf,
  generateAgentKey,
  loadAgentKey,
  publicJwkOf,
  saveAgentKey,
  type AgentKey,
  type PublicJwk,
} from './keys.js'

export {
  fetchJwks,
  jwksKeyMap,
  jwksUrlFor,
  mintSelfSignedBadge,
  verifyBadgeWithJwks,
  type Jwks,
  type SelfSignedBadgeOptions,
  type VerifyBadgeOptions,
} from './badges.js'

export {
  buildPopProof,
  defaultKid,
  POP_PROOF_LIFETIME_SECONDS,
  requestPopBadge,
  requestPopChallenge,
  type IssuedBadge,
  type PopBadgeRequest,
  type PopChallenge,
} from './pop.js'

export {
  buildClientAssertion,
  CLIENT_ASSERTION_LIFETIME_SECONDS,
  CLIENT_ASSERTION_TYPE,
  discoverAuthorizationServer,
  requestClientCredentialsBadge,
  type AuthorizationServerMetadata,
  type ClientCredentialsBadge,
  type ClientCredentialsRequest,
} from './oauth.js'

export {
  ENFORCEMENT_MODES,
  inspectEnvelope,
  mintChildEnvelope,
  mintRootEnvelope,
  type ChildEnvelopeOptions,
  type EnforcementMode,
  type EnvelopeIssuer,
  type EnvelopeSubject,
  type InspectedEnvelope,
  type MintedEnvelope,
  type RootEnvelopeOptions,
} from './envelopes.js'

export { chainHeaders, type ChainHeaders } from './headers.js'

/** Claims and results of badge verification, as the gateway uses them. */
export type { BadgeClaims, BadgeErrorCode, BadgeVerification } from '../core/badge.js'
/** The payload of a delegation envelope (docs/wire-contract.md §10), its JWS `typ` and size limits. */
export type { EnvelopePayload } from '../core/envelope.js'
export { ENVELOPE_TYP, MAX_ENVELOPE_PAYLOAD_BYTES, MAX_PROMPT_SUMMARY_CHARS } from '../core/envelope.js'
/** did:key helpers: the DID of a raw key and its single verification method id. */
export { decodeDidKey, didKeyVerificationMethodId, encodeDidKey } from '../core/did-key.js'
