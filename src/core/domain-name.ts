// Agent, badge and DNS-challenge domains are all normalised here, so one domain has one spelling.
import { ServiceError } from './errors.js'

export const CHALLENGE_LABEL = '_service-challenge'
/** RFC 1035 §2.3.4: a name is at most 253 characters in text form (255 octets on the wire). */
export const MAX_DOMAIN_LENGTH = 253
/** The longest domain whose challenge name `_service-challenge.<domain>` still fits in 253 characters. */
export const MAX_VERIFIABLE_DOMAIN_LENGTH = MAX_DOMAIN_LENGTH - CHALLENGE_LABEL.length - 1

const LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/
const NUMERIC = /^[0-9]+$/

/** An IPv4 literal is refused: it has no DNS zone to publish in. `field` names the input in the message. */
export function normalizeDomain(input: string, field = 'domain'): string {
  // Checked before lower-casing: toLowerCase maps a few non-ASCII letters (U+212A KELVIN SIGN) to ASCII.
  if (!/^[A-Za-z0-9.-]+$/.test(input)) {
    throw new ServiceError('invalid_request', `${field} must be a host name of letters, digits, hyphens and dots.`)
  }
  const domain = input.toLowerCase()
  if (domain.length > MAX_DOMAIN_LENGTH) {
    throw new ServiceError('invalid_request', `${field} must be at most ${MAX_DOMAIN_LENGTH} characters.`)
  }
  const labels = domain.split('.')
  if (!labels.every((label) => LABEL.test(label))) {
    throw new ServiceError('invalid_request', `${field} must be a host name: labels of 1-63 letters, digits or hyphens, not starting or ending with a hyphen, and no trailing dot.`)
  }
  if (NUMERIC.test(labels[labels.length - 1] as string)) {
    throw new ServiceError('invalid_request', `${field} must be a host name, not an IP address.`)
  }
  if (domain.length > MAX_VERIFIABLE_DOMAIN_LENGTH) {
    throw new ServiceError('invalid_request', `${field} must be at most ${MAX_VERIFIABLE_DOMAIN_LENGTH} characters so that ${CHALLENGE_LABEL}.<domain> is a valid name.`)
  }
  return domain
}
