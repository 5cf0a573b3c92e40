import t from 'tap'
import { chmodSync, mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { KeyRing, KeyRingError, loadOrCreateKeyFile, rotateKeyFile } from '../../../src/authority/key-ring.js'

const dir = (): string => mkdtempSync(path.join(tmpdir(), 'keyring-'))

t.test('first start generates a 0600 JWK set; a restart keeps the kid', async (t) => {
  const file = path.join(dir(), 'nested', 'ca-keys.json')
  const first = await loadOrCreateKeyFile(file, Date.UTC(2026, 10, 21) )
  t.equal(first.signing.kid, `service-ca-${Date.UTC(2026, 10, 21) / 1000}`)
  t.equal(statSync(file).mode & 0o777, 0o600)
  const stored = JSON.parse(readFileSync(file, 'utf8'))
  t.equal(stored.keys[0].kty, 'OKP')
  t.type(stored.keys[0].d, 'string', 'the private member is in the file')
  t.equal(stored.signing_kid, first.signing.kid)
  t.notOk('d' in (first.jwks.keys[0] as object), 'but never in the JWKS')
  const again = await loadOrCreateKeyFile(file)
  t.equal(again.signing.kid, first.signing.kid, 'same kid after a restart')
  t.equal(again.jwks.keys[0]?.x, first.jwks.keys[0]?.x, 'same key')
})

t.test('bad files stop start-up with a message naming the file, and are never replaced', async (t) => {
  const cases: [string, (file: string) => void, RegExp][] = [
    ['corrupt JSON', (f) => writeFileSync(f, '{not json', { mode: 0o600 }), /not valid JSON/],
    ['no keys', (f) => writeFileSync(f, '{"keys":[],"signing_kid":"x"}', { mode: 0o600 }), /no "keys"/],
    ['wrong key type', (f) => writeFileSync(f, JSON.stringify({ keys: [{ kty: 'RSA', kid: 'service-ca-1' }], signing_kid: 'service-ca-1' }), { mode: 0o600 }), /not an Ed25519 private JWK/],
    ['signing kid missing', (f) => writeFileSync(f, JSON.stringify({ keys: [{ kty: 'OKP', crv: 'Ed25519', x: 'AAAA', d: 'AAAA', kid: 'service-ca-1' }], signing_kid: 'service-ca-2' }), { mode: 0o600 }), /signing_kid/],
    ['invalid key material', (f) => writeFileSync(f, JSON.stringify({ keys: [{ kty: 'OKP', crv: 'Ed25519', x: 'AAAA', d: 'AAAA', kid: 'service-ca-1' }], signing_kid: 'service-ca-1' }), { mode: 0o600 }), /not a valid Ed25519 key/],
    ['group readable', (f) => { writeFileSync(f, '{}'); chmodSync(f, 0o640) }, /readable by group or others \(mode 640\)/],
    ['world readable', (f) => { writeFileSync(f, '{}'); chmodSync(f, 0o644) }, /chmod 600/],
  ]
  for (const [name, write, message] of cases) {
    const file = path.join(dir(), 'ca-keys.json')
    write(file)
    const before = readFileSync(file, 'utf8')
    await t.rejects(loadOrCreateKeyFile(file), message, name)
    await t.rejects(loadOrCreateKeyFile(file), new RegExp(file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')), `${name}: names the file`)
    t.equal(readFileSync(file, 'utf8'), before, `${name}: the file is left as it was`)
  }
  // A file whose x does not belong to its d.
  const file = path.join(dir(), 'ca-keys.json')
  await loadOrCreateKeyFile(file)
  const other = path.join(dir(), 'other.json')
  await loadOrCreateKeyFile(other)
  const doc = JSON.parse(readFileSync(file, 'utf8'))
  doc.keys[0].x = JSON.parse(readFileSync(other, 'utf8')).keys[0].x
  writeFileSync(file, JSON.stringify(doc), { mode: 0o600 })
  await t.rejects(loadOrCreateKeyFile(file), /does not match its "d"/)
  t.type(new KeyRingError('x'), Error)
})

t.test('a running ring keeps its last good keys when the file turns bad', async (t) => {
  const file = path.join(dir(), 'ca-keys.json')
  const ring = await KeyRing.open(file)
  t.teardown(() => ring.close())
  const kid = ring.current.signing.kid
  await new Promise((r) => setTimeout(r, 20))
  writeFileSync(file, 'garbage', { mode: 0o600 })
  const errors: unknown[] = []
  t.equal(await ring.reloadIfChanged((e) => errors.push(e)), false)
  t.equal(errors.length, 1)
  t.equal(ring.current.signing.kid, kid, 'still signing with the last good key')
})

t.test('rotation in the same second gets a distinct kid', async (t) => {
  const file = path.join(dir(), 'ca-keys.json')
  const now = Date.UTC(2026, 0, 1)
  await loadOrCreateKeyFile(file, now)
  const { kid, previous } = await rotateKeyFile(file, now)
  t.not(kid, previous)
  t.match(kid, /^service-ca-\d+-2$/)
  const ring = await loadOrCreateKeyFile(file)
  t.equal(ring.signing.kid, kid)
  t.equal(ring.keys.size, 2)
})

t.test('a watched ring reloads a rotated file and tells its listeners once per change', async (t) => {
  const file = path.join(dir(), 'ca-keys.json')
  await loadOrCreateKeyFile(file)
  const ring = await KeyRing.open(file)
  t.teardown(() => ring.close())
  let reloads = 0
  const remove = ring.onReload(() => reloads++)
  // An hour between polls: only the directory watch can notice the rename in time.
  ring.watch(3_600_000)
  const { kid } = await rotateKeyFile(file)
  const deadline = Date.now() + 5000
  while (ring.current.signing.kid !== kid && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10))
  t.equal(ring.current.signing.kid, kid, 'the new signer, without waiting for the poll')
  await ring.reloadIfChanged()
  t.equal(reloads, 1, 'one reload, announced once')
  t.equal(await ring.reloadIfChanged(), false, 'an unchanged file is not reloaded')
  remove()
  await rotateKeyFile(file)
  await ring.reloadIfChanged()
  t.equal(reloads, 1, 'a removed listener hears nothing')
})
