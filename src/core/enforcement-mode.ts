/**
 * The gateway's enforcement modes, weakest first. A route, the configuration and every delegation
 * envelope name one; the effective mode of a request is the strictest of them.
 */
export const ENFORCEMENT_MODES = ['EM-OBSERVE', 'EM-GUARD', 'EM-DELEGATE', 'EM-STRICT'] as const

export type EnforcementMode = (typeof ENFORCEMENT_MODES)[number]

/** Strictness rank of each mode: EM-OBSERVE < EM-GUARD < EM-DELEGATE < EM-STRICT. */
export const MODE_STRICTNESS: Readonly<Record<EnforcementMode, number>> = Object.freeze({
  'EM-OBSERVE': 0,
  'EM-GUARD': 1,
  'EM-DELEGATE': 2,
  'EM-STRICT': 3,
})

export function isEnforcementMode(value: unknown): value is EnforcementMode {
  return typeof value === 'string' && Object.prototype.hasOwnProperty.call(MODE_STRICTNESS, value)
}
