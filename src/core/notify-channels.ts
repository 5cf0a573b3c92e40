/**
 * The PostgreSQL NOTIFY channels. A write announces itself in the same transaction as the change, so a
 * listener hears of it exactly when it commits; the admin plane, the authority and the appliance's
 * gateway snapshot all listen or notify on these names.
 */

/** A badge was revoked; the payload is its jti. */
export const REVOCATION_CHANNEL = 'service_revocations'
/** An org's effective policy may have changed (documents, groups, agents, trust levels); the payload is the org id. */
export const POLICY_CHANNEL = 'service_policies'
/** An API key's rights changed (deleted, revoked, or its creator's role changed); the payload is the key id. */
export const API_KEY_CHANNEL = 'service_api_keys'
