import { createPrivateKey, createPublicKey, generateKeyPairSync, sign, verify } from 'node:crypto'
import t from 'tap'
import {
  DidKeyError,
  decodeDidKey,
  didKeyVerificationMethodId,
  encodeDidKey,
  jwkToPublicKey,
  multibaseToPublicKey,
  publicKeyToJwk,
  publicKeyToMultibase,
} from '../../../src/core/did-key.js'

// W3C CCG did:key Ed25519 test vector: the key derived from the all-zero 32-byte seed.
const VECTOR_DID = 'did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp'
const VECTOR_X = 'O2onvM62pC1io6jQKm8Nc2UyFXcd4kOmOsBIoYtZ2ik'
const VECTOR_HEX = '3b6a27bcceb6a42d62a3a8d02a6f0d73653215771de243a63ac048a18b59da29'

function rawPublicKey(jwkX: string): Uint8Array {
  return new Uint8Array(Buffer.from(jwkX, 'base64url'))
}

t.test('fixed known vector', async (t) => {
  const raw = new Uint8Array(Buffer.from(VECTOR_HEX, 'hex'))
  t.equal(encodeDidKey(raw), VECTOR_DID)
  t.equal(Buffer.from(decodeDidKey(VECTOR_DID)).toString('hex'), VECTOR_HEX)
  t.same(publicKeyToJwk(raw), { kty: 'OKP', crv: 'Ed25519', x: VECTOR_X })
  t.equal(didKeyVerificationMethodId(VECTOR_DID), `${VECTOR_DID}#z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp`)
})

t.test('the vector is the public key of the all-zero seed (derived with node:crypto)', async (t) => {
  // PKCS#8 wrapper of a raw Ed25519 seed (RFC 8410 §7)
  const pkcs8 = Buffer.concat([Buffer.from('302e020100300506032b657004220420', 'hex'), Buffer.alloc(32)])
  const privateKey = createPrivateKey({ key: pkcs8, format: 'der', type: 'pkcs8' })
  const jwk = createPublicKey(privateKey).export({ format: 'jwk' })
  t.equal(jwk.x, VECTOR_X)
  t.equal(encodeDidKey(rawPublicKey(jwk.x!)), VECTOR_DID)
})

t.test('round trips with generated keys and real signatures', async (t) => {
  for (let i = 0; i < 20; i++) {
    const { publicKey, privateKey } = generateKeyPairSync('ed25519')
    const raw = rawPublicKey(publicKey.export({ format: 'jwk' }).x!)
    const did = encodeDidKey(raw)
    t.match(did, /^did:key:z6Mk[1-9A-HJ-NP-Za-km-z]+$/)
    const decoded = decodeDidKey(did)
    t.same(Buffer.from(decoded), Buffer.from(raw))
    t.same(Buffer.from(multibaseToPublicKey(publicKeyToMultibase(raw))), Buffer.from(raw))
    t.same(Buffer.from(jwkToPublicKey(publicKeyToJwk(raw))), Buffer.from(raw))
    // the decoded key really is the signer's key
    const message = Buffer.from(`message ${i}`)
    const signature = sign(null, message, privateKey)
    const rebuilt = createPublicKey({ key: publicKeyToJwk(decoded), format: 'jwk' })
    t.equal(verify(null, message, rebuilt, signature), true)
  }
})

t.test('leading zero bytes survive base58 (leading 1s)', async (t) => {
  // the multicodec prefix keeps the first byte non-zero, so exercise zeros inside the key instead
  const raw = new Uint8Array(32)
  raw[31] = 1
  t.same(Buffer.from(decodeDidKey(encodeDidKey(raw))), Buffer.from(raw))
  const zeros = new Uint8Array(32)
  t.same(Buffer.from(decodeDidKey(encodeDidKey(zeros))), Buffer.from(zeros))
})

// An independent base58btc encoder (BigInt arithmetic) to build inputs the module's encoder refuses to make.
function base58(bytes: Uint8Array): string {
  const alphabet = '123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz'
  let n = BigInt(`0x${Buffer.from(bytes).toString('hex') || '0'}`)
  let out = ''
  while (n > 0n) {
    out = alphabet[Number(n % 58n)]! + out
    n /= 58n
  }
  for (const b of bytes) {
    if (b !== 0) break
    out = `1${out}`
  }
  return out
}

function didOf(prefix: number[], keyLength: number): string {
  return `did:key:z${base58(Uint8Array.from([...prefix, ...Buffer.alloc(keyLength, 7)]))}`
}

t.test('the independent encoder agrees with the module', async (t) => {
  const { publicKey } = generateKeyPairSync('ed25519')
  const raw = rawPublicKey(publicKey.export({ format: 'jwk' }).x!)
  t.equal(encodeDidKey(raw), `did:key:z${base58(Uint8Array.from([0xed, 0x01, ...raw]))}`)
})

t.test('decodeDidKey rejects what is not an Ed25519 did:key', async (t) => {
  const cases: Array<[string, RegExp]> = [
    ['did:web:example.com', /did:key:/],
    ['', /did:key:/],
    ['did:key:', /non-empty/],
    ['did:key:f6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp', /base58btc/],
    ['did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDoo0p', /character/],
    [didOf([0xe7, 0x01], 33), /not an Ed25519/], // secp256k1-pub
    [didOf([0xec, 0x01], 32), /not an Ed25519/], // x25519-pub
    [didOf([0xed], 32), /not an Ed25519/], // truncated varint
    [didOf([0xed, 0x01], 31), /31 bytes/],
    [didOf([0xed, 0x01], 33), /33 bytes/],
    [`${VECTOR_DID}#frag`, /fragment/],
    [`did:key:z${'A'.repeat(80)}`, /too long/],
  ]
  for (const [did, message] of cases) {
    t.throws(() => decodeDidKey(did), { name: 'DidKeyError', message }, did)
  }
  t.equal(didOf([0xed, 0x01], 32).startsWith('did:key:z6Mk'), true, 'the builder makes real did:keys at the right length')
  t.doesNotThrow(() => decodeDidKey(didOf([0xed, 0x01], 32)))
  t.throws(() => multibaseToPublicKey('6Mk'), /base58btc/)
  t.throws(() => encodeDidKey(new Uint8Array(31)), DidKeyError)
  t.throws(() => publicKeyToJwk(new Uint8Array(33)), DidKeyError)
})

t.test('jwkToPublicKey validates and refuses private keys', async (t) => {
  const { publicKey, privateKey } = generateKeyPairSync('ed25519')
  const pub = publicKey.export({ format: 'jwk' })
  t.same(Buffer.from(jwkToPublicKey(pub)), Buffer.from(pub.x!, 'base64url'))
  t.same(Buffer.from(jwkToPublicKey({ ...pub, kid: 'k1', use: 'sig' })), Buffer.from(pub.x!, 'base64url'), 'extra public members are fine')

  const priv = privateKey.export({ format: 'jwk' })
  t.throws(() => jwkToPublicKey(priv), { name: 'DidKeyError', message: /private/ })

  const bad: Array<[unknown, RegExp]> = [
    [null, /object/],
    ['jwk', /object/],
    [[pub], /object/],
    [{ ...pub, kty: 'EC' }, /kty/],
    [{ ...pub, crv: 'X25519' }, /crv/],
    [{ kty: 'OKP', crv: 'Ed25519' }, /'x'/],
    [{ ...pub, x: `${pub.x!}=` }, /'x'/],
    [{ ...pub, x: pub.x!.slice(1) }, /'x'/],
    [{ ...pub, x: Buffer.alloc(33).toString('base64url') }, /'x'/],
    [{ ...pub, x: pub.x!.replace(/.$/, '+') }, /'x'/],
  ]
  for (const [jwk, message] of bad) t.throws(() => jwkToPublicKey(jwk), { name: 'DidKeyError', message })

  // non-canonical last character (unused low bits set) decodes to the same bytes; only one spelling is accepted
  const canonical = Buffer.alloc(32).toString('base64url')
  t.equal(canonical.at(-1), 'A')
  t.throws(() => jwkToPublicKey({ kty: 'OKP', crv: 'Ed25519', x: canonical.slice(0, -1) + 'B' }), DidKeyError)
  // inherited members do not count
  t.throws(() => jwkToPublicKey(Object.create({ kty: 'OKP', crv: 'Ed25519', x: canonical })), DidKeyError)
})
