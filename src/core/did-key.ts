/**
 * did:key for Ed25519 public keys (W3C CCG did:key method): `did:key:` + multibase base58btc (`z`) of the
 * multicodec `ed25519-pub` varint (0xed 0x01) followed by the 32 raw key bytes. Pure, no I/O.
 */

const DID_KEY_PREFIX = 'did:key:'
const MULTIBASE_BASE58BTC = 'z'
// unsigned-varint encoding of multicodec 0xed (ed25519-pub)
const ED25519_MULTICODEC = Uint8Array.of(0xed, 0x01)
const ED25519_KEY_LENGTH = 32
// 34 bytes (prefix + key) is at most 47 base58 characters; anything much longer is not one of our keys and
// would only cost quadratic decoding time.
const MAX_MULTIBASE_LENGTH = 64

/** A DID, multibase value or JWK that is not a valid Ed25519 did:key / public key. */
export class DidKeyError extends Error {
  readonly code = 'DID_KEY_INVALID'
  override readonly name = 'DidKeyError'
}

// Base58btc (Bitcoin alphabet) is written here rather than pulled from a package: it is a few lines, and
// the keys it handles are 34 bytes, so the simple quadratic algorithm is more than fast enough.
const BASE58_ALPHABET = '123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz'
const BASE58_INDEX = new Map<string, number>([...BASE58_ALPHABET].map((c, i) => [c, i]))

function base58Encode(bytes: Uint8Array): string {
  let zeros = 0
  while (zeros < bytes.length && bytes[zeros] === 0) zeros++
  // little-endian base-58 digits of the big-endian byte string
  const digits: number[] = []
  for (let i = zeros; i < bytes.length; i++) {
    let carry = bytes[i]!
    for (let j = 0; j < digits.length; j++) {
      carry += digits[j]! * 256
      digits[j] = carry % 58
      carry = Math.floor(carry / 58)
    }
    while (carry > 0) {
      digits.push(carry % 58)
      carry = Math.floor(carry / 58)
    }
  }
  let out = '1'.repeat(zeros)
  for (let i = digits.length - 1; i >= 0; i--) out += BASE58_ALPHABET[digits[i]!]
  return out
}

function base58Decode(text: string): Uint8Array {
  let zeros = 0
  while (zeros < text.length && text[zeros] === '1') zeros++
  // little-endian base-256 bytes
  const bytes: number[] = []
  for (let i = zeros; i < text.length; i++) {
    const value = BASE58_INDEX.get(text[i]!)
    if (value === undefined) throw new DidKeyError(`Invalid base58btc character '${text[i]}'.`)
    let carry = value
    for (let j = 0; j < bytes.length; j++) {
      carry += bytes[j]! * 58
      bytes[j] = carry & 0xff
      carry >>= 8
    }
    while (carry > 0) {
      bytes.push(carry & 0xff)
      carry >>= 8
    }
  }
  const out = new Uint8Array(zeros + bytes.length)
  for (let i = 0; i < bytes.length; i++) out[zeros + i] = bytes[bytes.length - 1 - i]!
  return out
}

function assertRawKey(raw: Uint8Array): void {
  if (!(raw instanceof Uint8Array) || raw.length !== ED25519_KEY_LENGTH) {
    throw new DidKeyError(`An Ed25519 public key must be exactly ${ED25519_KEY_LENGTH} bytes.`)
  }
}

/** Multibase (`z` + base58btc) of the multicodec-prefixed Ed25519 key, as used in `publicKeyMultibase`. */
export function publicKeyToMultibase(raw: Uint8Array): string {
  assertRawKey(raw)
  const prefixed = new Uint8Array(ED25519_MULTICODEC.length + raw.length)
  prefixed.set(ED25519_MULTICODEC, 0)
  prefixed.set(raw, ED25519_MULTICODEC.length)
  return MULTIBASE_BASE58BTC + base58Encode(prefixed)
}

/** The 32 raw key bytes of a `z…` Ed25519 multibase value; throws {@link DidKeyError} otherwise. */
export function multibaseToPublicKey(mb: string): Uint8Array {
  if (typeof mb !== 'string' || mb.length === 0) throw new DidKeyError('The multibase value must be a non-empty string.')
  if (!mb.startsWith(MULTIBASE_BASE58BTC)) {
    throw new DidKeyError("The multibase value must use base58btc (prefix 'z').")
  }
  if (mb.length > MAX_MULTIBASE_LENGTH) throw new DidKeyError('The multibase value is too long for an Ed25519 key.')
  const bytes = base58Decode(mb.slice(1))
  if (bytes.length < ED25519_MULTICODEC.length || bytes[0] !== ED25519_MULTICODEC[0] || bytes[1] !== ED25519_MULTICODEC[1]) {
    throw new DidKeyError('The multibase value is not an Ed25519 public key (multicodec 0xed).')
  }
  const key = bytes.slice(ED25519_MULTICODEC.length)
  if (key.length !== ED25519_KEY_LENGTH) {
    throw new DidKeyError(`The Ed25519 key in the multibase value is ${key.length} bytes, expected ${ED25519_KEY_LENGTH}.`)
  }
  return key
}

/** `did:key:z6Mk…` for a raw 32-byte Ed25519 public key. */
export function encodeDidKey(publicKey32: Uint8Array): string {
  return DID_KEY_PREFIX + publicKeyToMultibase(publicKey32)
}

/** The raw Ed25519 public key of a did:key; throws {@link DidKeyError} on a wrong prefix, codec or length. */
export function decodeDidKey(did: string): Uint8Array {
  if (typeof did !== 'string' || !did.startsWith(DID_KEY_PREFIX)) {
    throw new DidKeyError("The DID must start with 'did:key:'.")
  }
  const id = did.slice(DID_KEY_PREFIX.length)
  // a DID URL (path, query, fragment) is not a DID; callers strip the fragment themselves
  if (/[/?#]/.test(id)) throw new DidKeyError('The DID must not carry a path, query or fragment.')
  return multibaseToPublicKey(id)
}

/** The id of the single verification method of a did:key document (`did#multibase`). */
export function didKeyVerificationMethodId(did: string): string {
  return `${did}#${did.slice(DID_KEY_PREFIX.length)}`
}

function base64UrlEncode(bytes: Uint8Array): string {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64url')
}

/** The public JWK (RFC 8037) of a raw Ed25519 key. */
export function publicKeyToJwk(raw: Uint8Array): { kty: 'OKP'; crv: 'Ed25519'; x: string } {
  assertRawKey(raw)
  return { kty: 'OKP', crv: 'Ed25519', x: base64UrlEncode(raw) }
}

/**
 * The raw key of an Ed25519 public JWK. A JWK carrying the private part `d` is refused: a caller that
 * registers or stores it would be holding a secret it must never have.
 */
export function jwkToPublicKey(jwk: unknown): Uint8Array {
  if (typeof jwk !== 'object' || jwk === null || Array.isArray(jwk)) throw new DidKeyError('The JWK must be a JSON object.')
  const own = (name: string): unknown => (Object.prototype.hasOwnProperty.call(jwk, name) ? (jwk as Record<string, unknown>)[name] : undefined)
  if (own('d') !== undefined) throw new DidKeyError("The JWK contains a private key ('d'); send only the public key.")
  if (own('kty') !== 'OKP') throw new DidKeyError("The JWK must have kty 'OKP'.")
  if (own('crv') !== 'Ed25519') throw new DidKeyError("The JWK must have crv 'Ed25519'.")
  const x = own('x')
  // strict unpadded base64url of exactly 32 bytes (43 characters, last one carrying 4 zero bits)
  if (typeof x !== 'string' || !/^[A-Za-z0-9_-]{43}$/.test(x)) {
    throw new DidKeyError("The JWK 'x' must be the base64url encoding of a 32-byte key.")
  }
  const raw = new Uint8Array(Buffer.from(x, 'base64url'))
  if (raw.length !== ED25519_KEY_LENGTH || base64UrlEncode(raw) !== x) {
    throw new DidKeyError("The JWK 'x' must be the base64url encoding of a 32-byte key.")
  }
  return raw
}
