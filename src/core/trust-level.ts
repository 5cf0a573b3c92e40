// Stored as 0-4, carried by badges as '0'-'4'; policies, bundles and the SDK use the code at that index.
export const TRUST_CODES = ['SS', 'REG', 'DV', 'OV', 'EV'] as const

/** Self-signed, registered, domain-, organization- or extended-validated. */
export type TrustCode = (typeof TRUST_CODES)[number]

export type TrustLevel = '0' | '1' | '2' | '3' | '4'

/** The rank of each code (its level), for "at least" comparisons. */
export const TRUST_RANK: ReadonlyMap<string, number> = new Map(TRUST_CODES.map((code, level) => [code, level]))
