/**
 * The authority's Ed25519 keys (docs/api.md §5 rule 5, docs/wire-contract.md §5): a JWK set file at CA_KEY_PATH, mode 0600,
 * holding every key with its private `d`, its `kid` (`service-ca-<unix seconds>`) and which one signs.
 * Missing: generated on first start. Unreadable, corrupt or readable by group/others: start-up fails
 * with a message naming the file; the file is never silently replaced.
 */
import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject } from 'node:crypto'
import { constants, promises as fs, watch as watchPath, type FSWatcher } from 'node:fs'
import path from 'node:path'

export class KeyRingError extends Error {
  readonly code = 'KEY_RING_INVALID'
  override readonly name = 'KeyRingError'
}

/** One key as stored in the file (a private OKP JWK plus bookkeeping). */
interface StoredKey {
  kty: 'OKP'
  crv: 'Ed25519'
  x: string
  d: string
  kid: string
  alg: 'EdDSA'
  use: 'sig'
  /** Unix seconds the key was created. */
  created_at: number
}

interface KeyFile {
  keys: StoredKey[]
  /** kid of the key that signs new badges. */
  signing_kid: string
}

export interface PublicJwk {
  kty: 'OKP'
  crv: 'Ed25519'
  x: string
  kid: string
  alg: 'EdDSA'
  use: 'sig'
}

export interface AuthorityKey {
  readonly kid: string
  /** Unix seconds the key was created: `created_at`, else the seconds its kid names. */
  readonly createdAt: number
  readonly publicKey: KeyObject
  readonly publicJwk: PublicJwk
}

/** An immutable view of the key file: swapped whole when the file changes. */
export interface KeyRingSnapshot {
  readonly signing: AuthorityKey & { readonly privateKey: KeyObject }
  readonly keys: ReadonlyMap<string, AuthorityKey>
  /** kid → public key, the shape `verifyBadge` takes: derived once per snapshot, not per verification. */
  readonly verificationKeys: ReadonlyMap<string, KeyObject>
  readonly jwks: { readonly keys: readonly PublicJwk[] }
}

const KID = /^service-ca-\d{1,12}(-\d{1,4})?$/

function newStoredKey(kid: string, createdAt: number): StoredKey {
  const { privateKey } = generateKeyPairSync('ed25519')
  const jwk = privateKey.export({ format: 'jwk' }) as { x: string; d: string }
  return { kty: 'OKP', crv: 'Ed25519', x: jwk.x, d: jwk.d, kid, alg: 'EdDSA', use: 'sig', created_at: createdAt }
}

/** `service-ca-<unix>`; a second key in the same second gets a `-n` suffix so kids stay unique. */
function nextKid(existing: readonly StoredKey[], nowSeconds: number): string {
  const base = `service-ca-${nowSeconds}`
  const taken = new Set(existing.map((k) => k.kid))
  if (!taken.has(base)) return base
  for (let n = 2; ; n++) if (!taken.has(`${base}-${n}`)) return `${base}-${n}`
}

function parseKeyFile(file: string, text: string): KeyFile {
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch (error) {
    throw new KeyRingError(`authority key file ${file} is not valid JSON`, { cause: error })
  }
  const doc = value as Partial<KeyFile> | null
  if (typeof doc !== 'object' || doc === null || !Array.isArray(doc.keys) || doc.keys.length === 0) {
    throw new KeyRingError(`authority key file ${file} has no "keys" array`)
  }
  const kids = new Set<string>()
  for (const [i, key] of doc.keys.entries()) {
    const k = key as Partial<StoredKey>
    if (k?.kty !== 'OKP' || k.crv !== 'Ed25519' || typeof k.x !== 'string' || typeof k.d !== 'string' || typeof k.kid !== 'string' || !KID.test(k.kid)) {
      throw new KeyRingError(`authority key file ${file}: key ${i} is not an Ed25519 private JWK with a service-ca-<unix> kid`)
    }
    if (kids.has(k.kid)) throw new KeyRingError(`authority key file ${file}: duplicate kid ${k.kid}`)
    kids.add(k.kid)
  }
  if (typeof doc.signing_kid !== 'string' || !kids.has(doc.signing_kid)) {
    throw new KeyRingError(`authority key file ${file}: "signing_kid" does not name a key in the file`)
  }
  return doc as KeyFile
}

function toSnapshot(file: string, doc: KeyFile): KeyRingSnapshot {
  const keys = new Map<string, AuthorityKey>()
  let signing: KeyRingSnapshot['signing'] | undefined
  for (const stored of doc.keys) {
    let privateKey: KeyObject
    try {
      privateKey = createPrivateKey({ key: { kty: 'OKP', crv: 'Ed25519', x: stored.x, d: stored.d }, format: 'jwk' })
    } catch (error) {
      throw new KeyRingError(`authority key file ${file}: key ${stored.kid} is not a valid Ed25519 key`, { cause: error })
    }
    const publicKey = createPublicKey(privateKey)
    // The public half is derived from `d`, so a file whose `x` does not match its `d` is refused.
    const derivedX = (publicKey.export({ format: 'jwk' }) as { x: string }).x
    if (derivedX !== stored.x) throw new KeyRingError(`authority key file ${file}: key ${stored.kid} has an "x" that does not match its "d"`)
    const publicJwk: PublicJwk = { kty: 'OKP', crv: 'Ed25519', x: stored.x, kid: stored.kid, alg: 'EdDSA', use: 'sig' }
    const createdAt = typeof stored.created_at === 'number' && Number.isSafeInteger(stored.created_at)
      ? stored.created_at
      : Number(/^service-ca-(\d+)/.exec(stored.kid)?.[1] ?? 0)
    const key: AuthorityKey = { kid: stored.kid, createdAt, publicKey, publicJwk }
    keys.set(stored.kid, key)
    if (stored.kid === doc.signing_kid) signing = { ...key, privateKey }
  }
  return Object.freeze({
    signing: signing as KeyRingSnapshot['signing'],
    keys,
    verificationKeys: new Map([...keys].map(([kid, key]) => [kid, key.publicKey])),
    jwks: Object.freeze({ keys: Object.freeze([...keys.values()].map((k) => k.publicJwk)) }),
  })
}

async function readKeyFile(file: string): Promise<KeyFile> {
  let stat
  try {
    stat = await fs.stat(file)
  } catch (error) {
    throw new KeyRingError(`authority key file ${file} cannot be read (${(error as NodeJS.ErrnoException).code ?? 'error'})`, { cause: error })
  }
  if (!stat.isFile()) throw new KeyRingError(`authority key file ${file} is not a regular file`)
  if ((stat.mode & 0o077) !== 0) {
    throw new KeyRingError(`authority key file ${file} is readable by group or others (mode ${(stat.mode & 0o777).toString(8)}); run chmod 600 on it`)
  }
  let text: string
  try {
    text = await fs.readFile(file, 'utf8')
  } catch (error) {
    throw new KeyRingError(`authority key file ${file} cannot be read (${(error as NodeJS.ErrnoException).code ?? 'error'})`, { cause: error })
  }
  return parseKeyFile(file, text)
}

/** Writes the file atomically (temp file 0600 + rename) so a reader never sees half a key set. */
async function writeKeyFile(file: string, doc: KeyFile): Promise<void> {
  const temp = `${file}.${process.pid}.tmp`
  await fs.writeFile(temp, `${JSON.stringify(doc, null, 2)}\n`, { mode: 0o600, flag: 'w' })
  await fs.rename(temp, file)
}

/**
 * Loads the key file, creating it with one fresh key when it does not exist. Creation uses an
 * exclusive open, so instances starting together on a shared volume agree on one key.
 */
export async function loadOrCreateKeyFile(file: string, now = Date.now()): Promise<KeyRingSnapshot> {
  try {
    await fs.access(file, constants.F_OK)
  } catch {
    await fs.mkdir(path.dirname(file), { recursive: true, mode: 0o700 })
    const key = newStoredKey(nextKid([], Math.floor(now / 1000)), Math.floor(now / 1000))
    const doc: KeyFile = { keys: [key], signing_kid: key.kid }
    try {
      await fs.writeFile(file, `${JSON.stringify(doc, null, 2)}\n`, { mode: 0o600, flag: 'wx' })
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') {
        throw new KeyRingError(`authority key file ${file} cannot be created (${(error as NodeJS.ErrnoException).code ?? 'error'})`, { cause: error })
      }
    }
  }
  return toSnapshot(file, await readKeyFile(file))
}

/** `agent-trust keys rotate`: adds a key and makes it the signer; old keys stay published. */
export async function rotateKeyFile(file: string, now = Date.now()): Promise<{ kid: string; previous: string }> {
  const doc = await readKeyFile(file)
  const seconds = Math.floor(now / 1000)
  const key = newStoredKey(nextKid(doc.keys, seconds), seconds)
  const previous = doc.signing_kid
  await writeKeyFile(file, { keys: [...doc.keys, key], signing_kid: key.kid })
  return { kid: key.kid, previous }
}

/**
 * `agent-trust keys retire <kid>`: removes a key from the set. The signing key cannot be retired, and a key
 * that still has unexpired badges is kept unless `force` (their verification would break early).
 */
export async function retireKey(
  file: string,
  kid: string,
  options: { force: boolean; unexpiredBadges: (kid: string) => Promise<number> },
): Promise<void> {
  const doc = await readKeyFile(file)
  if (!doc.keys.some((k) => k.kid === kid)) throw new KeyRingError(`no key ${kid} in ${file}`)
  if (doc.signing_kid === kid) throw new KeyRingError(`${kid} is the signing key; rotate first`)
  const unexpired = await options.unexpiredBadges(kid)
  if (unexpired > 0 && !options.force) {
    throw new KeyRingError(`${kid} still has ${unexpired} unexpired badge(s); retire it after they expire, or use --force`)
  }
  await writeKeyFile(file, { keys: doc.keys.filter((k) => k.kid !== kid), signing_kid: doc.signing_kid })
}

function stampOf(stat: { ino: number; size: number; mtimeMs: number }): string {
  return `${stat.ino}:${stat.size}:${stat.mtimeMs}`
}

/**
 * The running process's key ring: the current snapshot, reloaded when the file changes (rotation and
 * retirement run as separate commands). A reload that fails keeps the last good snapshot.
 */
export class KeyRing {
  #snapshot: KeyRingSnapshot
  readonly #file: string
  /** Inode, size and modification time of the file last loaded: the CLI's rename gives a new inode, and mtimes are coarse. */
  #stamp = ''
  #timer: NodeJS.Timeout | null = null
  #watcher: FSWatcher | null = null
  /** Reloads run one at a time, so one change installs (and announces) one snapshot. */
  #reloading: Promise<boolean> = Promise.resolve(false)
  readonly #reloadListeners = new Set<() => void>()

  private constructor(file: string, snapshot: KeyRingSnapshot) {
    this.#file = file
    this.#snapshot = snapshot
  }

  static async open(file: string): Promise<KeyRing> {
    const ring = new KeyRing(file, await loadOrCreateKeyFile(file))
    ring.#stamp = stampOf(await fs.stat(file))
    return ring
  }

  get current(): KeyRingSnapshot {
    return this.#snapshot
  }

  get file(): string {
    return this.#file
  }

  /** Re-reads the file if it changed; returns whether a new snapshot was installed. */
  reloadIfChanged(onError?: (error: unknown) => void): Promise<boolean> {
    this.#reloading = this.#reloading.then(() => this.#reload(onError))
    return this.#reloading
  }

  async #reload(onError?: (error: unknown) => void): Promise<boolean> {
    try {
      const stamp = stampOf(await fs.stat(this.#file))
      if (stamp === this.#stamp) return false
      this.#snapshot = toSnapshot(this.#file, await readKeyFile(this.#file))
      this.#stamp = stamp
    } catch (error) {
      onError?.(error)
      return false
    }
    for (const listener of this.#reloadListeners) {
      try {
        listener()
      } catch {
        // A listener's failure is its own; the new keys are installed either way.
      }
    }
    return true
  }

  /** Calls `listener` after each reload that installed new keys; answers the function that removes it. */
  onReload(listener: () => void): () => void {
    this.#reloadListeners.add(listener)
    return () => {
      this.#reloadListeners.delete(listener)
    }
  }

  /**
   * Follows the file: a directory watch (the CLI replaces the file by a rename) reloads at once where the
   * file system reports changes, and the poll of its modification time works on every file system.
   */
  watch(intervalMs: number, onError?: (error: unknown) => void): void {
    this.#timer ??= setInterval(() => void this.reloadIfChanged(onError), intervalMs)
    this.#timer.unref()
    if (this.#watcher !== null) return
    try {
      const name = path.basename(this.#file)
      this.#watcher = watchPath(path.dirname(this.#file), { persistent: false }, (_event, changed) => {
        if (changed === null || changed === name) void this.reloadIfChanged(onError)
      })
      // A watch that fails later (the directory removed) leaves the poll in charge.
      this.#watcher.on('error', () => this.#stopWatcher())
    } catch {
      this.#watcher = null
    }
  }

  #stopWatcher(): void {
    this.#watcher?.close()
    this.#watcher = null
  }

  close(): void {
    if (this.#timer !== null) clearInterval(this.#timer)
    this.#timer = null
    this.#stopWatcher()
  }
}
