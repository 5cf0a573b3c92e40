import { createHash, randomBytes, timingSafeEqual } from 'node:crypto'

/** docs/wire-contract.md §2: `sk_` + 32 random bytes in base64url (43 characters). */
export function generateApiKeySecret(): string {
  return `sk_${randomBytes(32).toString('base64url')}`
}

const SECRET_SHAPE = /^sk_[A-Za-z0-9_-]{43,200}$/

/** Cheap shape check before any hashing or database work. */
export function looksLikeApiKey(value: string): boolean {
  return SECRET_SHAPE.test(value)
}

/** Only this digest is stored. SHA-256 suffices: the secret carries 256 bits of entropy, no salt needed. */
export function hashApiKeySecret(secret: string): Buffer {
  return createHash('sha256').update(secret, 'utf8').digest()
}

/** What listings show so a user can tell keys apart without the secret: `sk_` and 6 more characters. */
export function apiKeyPrefix(secret: string): string {
  return secret.slice(0, 9)
}

/** Constant-time comparison of two digests. */
export function digestsEqual(a: Buffer, b: Buffer): boolean {
  return a.length === b.length && timingSafeEqual(a, b)
}
