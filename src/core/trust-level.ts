/**
 * Trust levels. The registry stores a level as an integer 0-4 and a badge carries it as the string
 * '0'-'4'; policies, bundles and the SDK speak the code of the level, which is its index here.
 */
export const TRUST_CODES = ['SS', 'REG', 'DV', 'OV', 'EV'] as const

/** A trust level code: self-signed, registered, domain-, organization- or extended-validated. */
export type TrustCode = (typeof TRUST_CODES)[number]

/** A trust level as a badge's `credentialSubject.level` carries it. */
export type TrustLevel = '0' | '1' | '2' | '3' | '4'

/** The rank of each code (its level), for "at least" comparisons. */
export const TRUST_RANK: ReadonlyMap<string, number> = new Map(TRUST_CODES.map((code, level) => [code, level]))
