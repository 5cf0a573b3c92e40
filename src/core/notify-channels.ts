// Notified inside the writing transaction, so a listener hears of a change exactly when it commits.

/** A badge was revoked; the payload is its jti. */
export const REVOCATION_CHANNEL = 'service_revocations'
/** An org's effective policy may have changed (documents, groups, agents, trust levels); the payload is the org id. */
export const POLICY_CHANNEL = 'service_policies'
/** An API key's rights changed (deleted, revoked, or its creator's role changed); the payload is the key id. */
export const API_KEY_CHANNEL = 'service_api_keys'
