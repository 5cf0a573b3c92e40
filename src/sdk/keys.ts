/**
 * Agent keys: an Ed25519 key pair, its did:key and verification method id, and the private JWK file it
 * lives in. The private file is written with mode 0600 and never overwritten (losing an agent's key to
 * a mistyped path cannot be undone); it is refused on load when group or others can read it, as ssh
 * refuses such keys.
 */
import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject } from 'node:crypto'
import { readFile, stat, unlink, writeFile } from 'node:fs/promises'
import { didKeyVerificationMethodId, encodeDidKey } from '../core/did-key.js'
import { isRecord } from '../core/json-objects.js'
import { SdkError } from './errors.js'

/** An Ed25519 public key as a JWK (RFC 8037); what `publicKeyJwk` of an agent registration takes. */
export interface PublicJwk {
  kty: 'OKP'
  crv: 'Ed25519'
  x: string
}

/** An agent's key pair with its did:key identity. */
export interface AgentKey {
  readonly privateKey: KeyObject
  readonly publicKey: KeyObject
  readonly publicJwk: PublicJwk
  /** `did:key:z6Mk…` of the public key. */
  readonly did: string
  /** The did:key document's verification method id (`did#z6Mk…`), the `kid` of proofs and envelopes. */
  readonly kid: string
}

function ed25519(key: KeyObject, what: string): void {
  if (key.asymmetricKeyType !== 'ed25519') throw new SdkError('invalid_argument', `${what} must be an Ed25519 key.`)
}

/** The public JWK of an Ed25519 private or public key. */
export function publicJwkOf(key: KeyObject): PublicJwk {
  ed25519(key, 'The key')
  const publicKey = key.type === 'private' ? createPublicKey(key) : key
  const { x } = publicKey.export({ format: 'jwk' })
  if (typeof x !== 'string') throw new SdkError('invalid_argument', 'The key has no public part.')
  return { kty: 'OKP', crv: 'Ed25519', x }
}

/** The did:key of an Ed25519 private or public key. */
export function didKeyOf(key: KeyObject): string {
  return encodeDidKey(Buffer.from(publicJwkOf(key).x, 'base64url'))
}

/** The {@link AgentKey} view of an Ed25519 private key. */
export function agentKeyFromPrivateKey(privateKey: KeyObject): AgentKey {
  if (privateKey.type !== 'private') throw new SdkError('invalid_argument', 'An agent key needs the private key.')
  ed25519(privateKey, 'The agent key')
  const publicKey = createPublicKey(privateKey)
  const did = didKeyOf(publicKey)
  return { privateKey, publicKey, publicJwk: publicJwkOf(publicKey), did, kid: didKeyVerificationMethodId(did) }
}

/** Generates a fresh Ed25519 agent key. */
export function generateAgentKey(): AgentKey {
  return agentKeyFromPrivateKey(generateKeyPairSync('ed25519').privateKey)
}

/**
 * Writes the private JWK to `privateFile` (mode 0600) and, when given, the public JWK to `publicFile`
 * (mode 0644). Neither file may exist: an existing file is never overwritten ({@link SdkError}
 * `key_file_exists`), and when the public file is refused the private file just written is removed, so a
 * failed save leaves nothing behind.
 */
export async function saveAgentKey(key: AgentKey, privateFile: string, publicFile?: string): Promise<void> {
  const privateJwk = key.privateKey.export({ format: 'jwk' })
  const exclusive = async (file: string, text: string, mode: number): Promise<void> => {
    try {
      await writeFile(file, text, { mode, flag: 'wx' })
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'EEXIST') throw new SdkError('key_file_exists', `Refusing to overwrite ${file}.`)
      throw error
    }
  }
  await exclusive(privateFile, `${JSON.stringify({ kty: 'OKP', crv: 'Ed25519', x: privateJwk.x, d: privateJwk.d })}\n`, 0o600)
  if (publicFile === undefined) return
  try {
    await exclusive(publicFile, `${JSON.stringify(key.publicJwk)}\n`, 0o644)
  } catch (error) {
    await unlink(privateFile).catch(() => undefined)
    throw error
  }
}

/**
 * Reads a private Ed25519 JWK file written by {@link saveAgentKey} (or any `{kty: OKP, crv: Ed25519,
 * x, d}`). Refuses a file that group or others may read (`key_file_permissions`) and anything that is
 * not such a key (`invalid_key_file`); the file's content never appears in the error.
 */
export async function loadAgentKey(privateFile: string): Promise<AgentKey> {
  const info = await stat(privateFile)
  // POSIX permission bits mean nothing on Windows.
  if (process.platform !== 'win32' && (info.mode & 0o077) !== 0) {
    throw new SdkError('key_file_permissions', `${privateFile} is readable by group or others; chmod 600 it.`)
  }
  const text = await readFile(privateFile, 'utf8')
  let jwk: unknown
  try {
    jwk = JSON.parse(text)
  } catch {
    throw new SdkError('invalid_key_file', `${privateFile} is not a JSON JWK.`)
  }
  const record = isRecord(jwk) ? jwk : {}
  if (record.kty !== 'OKP' || record.crv !== 'Ed25519' || typeof record.d !== 'string' || typeof record.x !== 'string') {
    throw new SdkError('invalid_key_file', `${privateFile} is not a private Ed25519 JWK (kty OKP, crv Ed25519, x, d).`)
  }
  let privateKey: KeyObject
  try {
    privateKey = createPrivateKey({ key: { kty: 'OKP', crv: 'Ed25519', x: record.x, d: record.d }, format: 'jwk' })
  } catch {
    throw new SdkError('invalid_key_file', `${privateFile} does not hold a usable Ed25519 private key.`)
  }
  const key = agentKeyFromPrivateKey(privateKey)
  // Node derives the public key from d; a file whose x names another key was edited or corrupted.
  if (key.publicJwk.x !== record.x) throw new SdkError('invalid_key_file', `${privateFile}: x is not the public key of d.`)
  return key
}
