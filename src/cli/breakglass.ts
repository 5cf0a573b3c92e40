/**
 * `agent-trust breakglass keygen` and `agent-trust breakglass issue` (docs/wire-contract.md §11): an operator keeps the
 * private key offline and mints short-lived, scoped override tokens with it; the gateway holds only the
 * public key (SERVICE_BREAKGLASS_PUBLIC_KEY).
 */
import { createPrivateKey, generateKeyPairSync, randomUUID, type KeyObject } from 'node:crypto'
import { readFile, writeFile } from 'node:fs/promises'
import { signBreakglassToken } from '../core/breakglass.js'

export class BreakglassKeyError extends Error {
  readonly code = 'BREAKGLASS_KEY_INVALID'
  override readonly name = 'BreakglassKeyError'
}

/** Reads an Ed25519 private key from a PKCS#8 PEM or a JWK with `d`. */
export function parseBreakglassPrivateKey(text: string): KeyObject {
  const trimmed = text.trim()
  let key: KeyObject
  try {
    key = trimmed.startsWith('{')
      ? createPrivateKey({ key: JSON.parse(trimmed) as import('node:crypto').JsonWebKey, format: 'jwk' })
      : createPrivateKey({ key: trimmed, format: 'pem' })
  } catch (error) {
    throw new BreakglassKeyError('the break-glass private key file is neither a PKCS#8 PEM nor a private JWK', { cause: error })
  }
  if (key.asymmetricKeyType !== 'ed25519') throw new BreakglassKeyError('the break-glass key must be Ed25519')
  return key
}

export async function generateBreakglassKeyPair(privateFile: string, publicFile: string): Promise<void> {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519')
  // `wx`: never overwrite an existing key by accident.
  await writeFile(privateFile, privateKey.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600, flag: 'wx' })
  await writeFile(publicFile, publicKey.export({ type: 'spki', format: 'pem' }), { mode: 0o644, flag: 'wx' })
}

export async function issueBreakglassToken(options: {
  keyFile: string
  subject: string
  reason: string
  ttlSeconds: number
  methods: string[]
  routes: string[]
  issuer: string
  now?: number
}): Promise<string> {
  const key = parseBreakglassPrivateKey(await readFile(options.keyFile, 'utf8'))
  const iat = options.now ?? Math.floor(Date.now() / 1000)
  return signBreakglassToken({
    jti: randomUUID(),
    iat,
    exp: iat + options.ttlSeconds,
    iss: options.issuer,
    sub: options.subject,
    reason: options.reason,
    scope: { methods: options.methods, routes: options.routes },
  }, key)
}
