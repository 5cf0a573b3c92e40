/**
 * SDK agent keys: generation, the did:key and kid, and the private JWK file (0600, never overwritten,
 * refused when others can read it, round trip to the same key).
 */
import t from 'tap'
import { generateKeyPairSync, sign, verify } from 'node:crypto'
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { decodeDidKey, didKeyVerificationMethodId, jwkToPublicKey } from '../../../src/core/did-key.js'
import { SdkError } from '../../../src/sdk/errors.js'
import { agentKeyFromPrivateKey, didKeyOf, generateAgentKey, loadAgentKey, publicJwkOf, saveAgentKey } from '../../../src/sdk/keys.js'

const dir = mkdtempSync(path.join(tmpdir(), 'svc-sdk-keys-'))
t.teardown(() => rmSync(dir, { recursive: true, force: true }))
const file = (name: string): string => path.join(dir, name)

async function sdkError(pending: Promise<unknown>): Promise<SdkError | null> {
  const error = await pending.then(() => null, (e: unknown) => e)
  return error instanceof SdkError ? error : null
}

t.test('generateAgentKey: Ed25519, did:key of the public key, kid its verification method', async (t) => {
  const key = generateAgentKey()
  t.equal(key.privateKey.asymmetricKeyType, 'ed25519')
  t.equal(key.privateKey.type, 'private')
  t.match(key.did, /^did:key:z6Mk[1-9A-HJ-NP-Za-km-z]+$/)
  t.equal(Buffer.from(decodeDidKey(key.did)).toString('base64url'), key.publicJwk.x, 'the DID holds the public key')
  t.equal(key.kid, didKeyVerificationMethodId(key.did))
  t.equal(key.kid, `${key.did}#${key.did.slice('did:key:'.length)}`)
  t.strictSame(Object.keys(key.publicJwk).sort(), ['crv', 'kty', 'x'], 'public JWK has no private member')
  t.same(jwkToPublicKey(key.publicJwk), decodeDidKey(key.did), 'the public JWK is acceptable as publicKeyJwk')
  t.not(generateAgentKey().did, key.did, 'fresh keys differ')
  const data = Buffer.from('x')
  t.ok(verify(null, data, key.publicKey, sign(null, data, key.privateKey)), 'the pair signs and verifies')
  t.equal(didKeyOf(key.publicKey), key.did, 'didKeyOf a public key')
  t.equal(didKeyOf(key.privateKey), key.did, 'didKeyOf a private key')
  t.strictSame(publicJwkOf(key.privateKey), key.publicJwk)
})

t.test('agentKeyFromPrivateKey refuses public and non-Ed25519 keys', async (t) => {
  const ed = generateKeyPairSync('ed25519')
  t.throws(() => agentKeyFromPrivateKey(ed.publicKey), { code: 'invalid_argument' })
  t.throws(() => agentKeyFromPrivateKey(generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey), { code: 'invalid_argument' })
  t.throws(() => publicJwkOf(generateKeyPairSync('x25519').publicKey), { code: 'invalid_argument' })
})

t.test('save and load: 0600, round trip to the same key', async (t) => {
  const key = generateAgentKey()
  await saveAgentKey(key, file('a.json'), file('a.pub.json'))
  t.equal(statSync(file('a.json')).mode & 0o777, 0o600, 'private file readable by the owner only')
  t.equal(statSync(file('a.pub.json')).mode & 0o022, 0, 'public file not writable by others')
  const privateJwk = JSON.parse(readFileSync(file('a.json'), 'utf8')) as Record<string, unknown>
  t.strictSame(Object.keys(privateJwk).sort(), ['crv', 'd', 'kty', 'x'])
  t.strictSame(JSON.parse(readFileSync(file('a.pub.json'), 'utf8')), key.publicJwk, 'the public file is the public JWK, no d')
  const loaded = await loadAgentKey(file('a.json'))
  t.equal(loaded.did, key.did)
  t.equal(loaded.kid, key.kid)
  const data = Buffer.from('round trip')
  t.ok(verify(null, data, key.publicKey, sign(null, data, loaded.privateKey)), 'the loaded private key is the saved one')
})

t.test('save never overwrites, and a refused public file leaves no private file behind', async (t) => {
  const first = generateAgentKey()
  await saveAgentKey(first, file('b.json'))
  const before = readFileSync(file('b.json'), 'utf8')
  const again = await sdkError(saveAgentKey(generateAgentKey(), file('b.json')))
  t.equal(again?.code, 'key_file_exists', 'an existing private file is refused')
  t.equal(readFileSync(file('b.json'), 'utf8'), before, 'and left unchanged')
  t.equal((await loadAgentKey(file('b.json'))).did, first.did)

  writeFileSync(file('taken.pub'), 'keep me')
  const pub = await sdkError(saveAgentKey(generateAgentKey(), file('c.json'), file('taken.pub')))
  t.equal(pub?.code, 'key_file_exists', 'an existing public file is refused')
  t.equal(readFileSync(file('taken.pub'), 'utf8'), 'keep me')
  t.notOk(existsSync(file('c.json')), 'the private file written before is removed again')
})

t.test('load refuses readable, corrupt and foreign key files without echoing them', async (t) => {
  const key = generateAgentKey()
  await saveAgentKey(key, file('d.json'))
  chmodSync(file('d.json'), 0o644)
  t.equal((await sdkError(loadAgentKey(file('d.json'))))?.code, 'key_file_permissions', 'group/world-readable refused')
  chmodSync(file('d.json'), 0o600)
  t.equal((await loadAgentKey(file('d.json'))).did, key.did, 'accepted again once 0600')

  const secret = JSON.parse(readFileSync(file('d.json'), 'utf8')) as { d: string; x: string }
  const cases: Array<[string, string]> = [
    ['not JSON', `garbage ${secret.d}`],
    ['a public JWK', JSON.stringify(key.publicJwk)],
    ['an EC key', JSON.stringify(generateKeyPairSync('ec', { namedCurve: 'P-256' }).privateKey.export({ format: 'jwk' }))],
    ['x of another key', JSON.stringify({ kty: 'OKP', crv: 'Ed25519', d: secret.d, x: generateAgentKey().publicJwk.x })],
    ['an array', '[]'],
  ]
  for (const [label, text] of cases) {
    writeFileSync(file('bad.json'), text, { mode: 0o600 })
    chmodSync(file('bad.json'), 0o600)
    const error = await sdkError(loadAgentKey(file('bad.json')))
    t.equal(error?.code, 'invalid_key_file', label)
    t.notMatch(error?.message ?? '', secret.d, `${label}: the private key is not in the message`)
  }
  const missing = await loadAgentKey(file('missing.json')).then(() => null, (e: unknown) => e as NodeJS.ErrnoException)
  t.equal(missing?.code, 'ENOENT')
})
