/**
 * `agent-trust breakglass keygen` and `issue` (docs/wire-contract.md §11): the key pair on disk (never overwritten,
 * private key 0600), tokens the gateway's verifier accepts with the requested scope and lifetime, and
 * clear errors for unusable key files. The module functions are tested directly; one subtest runs the
 * compiled CLI to check the argument handling around them.
 */
import t, { type Test } from 'tap'
import { execFile } from 'node:child_process'
import { generateKeyPairSync } from 'node:crypto'
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { BreakglassKeyError, generateBreakglassKeyPair, issueBreakglassToken, parseBreakglassPrivateKey } from '../../../src/cli/breakglass.js'
import { loadBreakglassPublicKey, verifyBreakglassToken } from '../../../src/core/breakglass.js'
import { CLI } from '../../helpers/compiled.js'

// Run directly with node, tap's default 30 s budget is too short for start-up on a busy machine.
t.setTimeout(120_000)
const dir = mkdtempSync(path.join(tmpdir(), 'svc-breakglass-'))
t.teardown(() => rmSync(dir, { recursive: true, force: true }))
const file = (name: string): string => path.join(dir, name)

const NOW = 1_800_000_000

t.test('keygen writes an Ed25519 pair, the private key 0600', async (t) => {
  await generateBreakglassKeyPair(file('k1.pem'), file('k1.pub'))
  t.equal(statSync(file('k1.pem')).mode & 0o777, 0o600, 'private key readable by the owner only')
  t.equal(statSync(file('k1.pub')).mode & 0o077 & ~0o044, 0, 'public key not writable by others')
  const privateKey = parseBreakglassPrivateKey(readFileSync(file('k1.pem'), 'utf8'))
  t.equal(privateKey.asymmetricKeyType, 'ed25519')
  t.match(readFileSync(file('k1.pem'), 'utf8'), /^-----BEGIN PRIVATE KEY-----/)
  const publicKey = loadBreakglassPublicKey(readFileSync(file('k1.pub'), 'utf8'))
  t.equal(publicKey.export({ format: 'jwk' }).x, privateKey.export({ format: 'jwk' }).x, 'the two files are one pair')
})

t.test('keygen refuses to overwrite', async (t) => {
  await generateBreakglassKeyPair(file('k2.pem'), file('k2.pub'))
  const before = readFileSync(file('k2.pem'), 'utf8')
  const beforePub = readFileSync(file('k2.pub'), 'utf8')
  await t.rejects(generateBreakglassKeyPair(file('k2.pem'), file('k2.pub')), { code: 'EEXIST' })
  t.equal(readFileSync(file('k2.pem'), 'utf8'), before, 'private key unchanged')
  t.equal(readFileSync(file('k2.pub'), 'utf8'), beforePub, 'public key unchanged')
  writeFileSync(file('existing.pub'), 'keep me')
  await t.rejects(generateBreakglassKeyPair(file('fresh.pem'), file('existing.pub')), { code: 'EEXIST' }, 'an existing public file is not overwritten either')
  t.equal(readFileSync(file('existing.pub'), 'utf8'), 'keep me')
})

t.test('issue: a token the gateway verifier accepts, with the given scope and ttl', async (t) => {
  await generateBreakglassKeyPair(file('k3.pem'), file('k3.pub'))
  const publicKey = loadBreakglassPublicKey(readFileSync(file('k3.pub'), 'utf8'))
  const token = await issueBreakglassToken({
    keyFile: file('k3.pem'), subject: 'alice@example.com', reason: 'incident 7', ttlSeconds: 600,
    methods: ['GET', 'POST'], routes: ['/admin'], issuer: 'ops-cli', now: NOW,
  })
  const ok = verifyBreakglassToken(token, { publicKey, now: NOW + 1, method: 'POST', path: '/admin/users' })
  t.ok(ok.ok, 'accepted in scope')
  if (!ok.ok) return
  t.match(ok.claims, { iat: NOW, exp: NOW + 600, iss: 'ops-cli', sub: 'alice@example.com', reason: 'incident 7', scope: { methods: ['GET', 'POST'], routes: ['/admin'] } })
  t.match(ok.claims.jti, /^[0-9a-f-]{36}$/, 'a random UUID jti')
  t.strictSame(verifyBreakglassToken(token, { publicKey, now: NOW + 1, method: 'DELETE', path: '/admin/users' }), { ok: false, reason: 'out_of_scope' }, 'method out of scope')
  t.strictSame(verifyBreakglassToken(token, { publicKey, now: NOW + 1, method: 'GET', path: '/users' }), { ok: false, reason: 'out_of_scope' }, 'route out of scope')
  t.strictSame(verifyBreakglassToken(token, { publicKey, now: NOW + 600 + 30, method: 'GET', path: '/admin' }), { ok: false, reason: 'expired' }, 'expires after ttl (+leeway)')
  const other = generateKeyPairSync('ed25519').publicKey
  t.strictSame(verifyBreakglassToken(token, { publicKey: other, now: NOW, method: 'GET', path: '/admin' }), { ok: false, reason: 'signature' }, 'only the pair\'s key verifies it')
  const second = await issueBreakglassToken({ keyFile: file('k3.pem'), subject: 'a', reason: 'r', ttlSeconds: 60, methods: ['*'], routes: ['*'], issuer: 'i', now: NOW })
  const verdict = verifyBreakglassToken(second, { publicKey, now: NOW, method: 'PATCH', path: '/anything' })
  t.ok(verdict.ok, 'wildcards')
  t.not(verdict.ok && verdict.claims.jti, ok.claims.jti, 'every token has its own jti')
  const fresh = await issueBreakglassToken({ keyFile: file('k3.pem'), subject: 'a', reason: 'r', ttlSeconds: 60, methods: ['*'], routes: ['*'], issuer: 'i' })
  t.ok(verifyBreakglassToken(fresh, { publicKey, now: Math.floor(Date.now() / 1000), method: 'GET', path: '/' }).ok, 'now defaults to the clock')
})

t.test('a private JWK works as the key file', async (t) => {
  const pair = generateKeyPairSync('ed25519')
  writeFileSync(file('jwk.json'), JSON.stringify(pair.privateKey.export({ format: 'jwk' })), { mode: 0o600 })
  const token = await issueBreakglassToken({ keyFile: file('jwk.json'), subject: 's', reason: 'r', ttlSeconds: 60, methods: ['GET'], routes: ['/'], issuer: 'i', now: NOW })
  t.ok(verifyBreakglassToken(token, { publicKey: pair.publicKey, now: NOW, method: 'GET', path: '/x' }).ok)
})

/** Awaits a rejection and checks it is a BreakglassKeyError (tap's class matching compares by name). */
async function keyError(t: Test, pending: Promise<unknown>, message: string, pattern?: RegExp): Promise<void> {
  const error = await pending.then(() => null, (e: unknown) => e)
  t.ok(error instanceof BreakglassKeyError, `${message}: BreakglassKeyError`)
  if (pattern !== undefined) t.match((error as Error | null)?.message, pattern, `${message}: message`)
}

t.test('bad key files', async (t) => {
  const issue = (keyFile: string) => issueBreakglassToken({ keyFile, subject: 's', reason: 'r', ttlSeconds: 60, methods: ['*'], routes: ['*'], issuer: 'i', now: NOW })
  writeFileSync(file('garbage'), 'not a key at all')
  await keyError(t, issue(file('garbage')), 'garbage')
  await keyError(t, issue(file('garbage')), 'garbage', /neither a PKCS#8 PEM nor a private JWK/)
  writeFileSync(file('bad.json'), '{"kty":"OKP",')
  await keyError(t, issue(file('bad.json')), 'broken JSON')
  await generateBreakglassKeyPair(file('k4.pem'), file('k4.pub'))
  await keyError(t, issue(file('k4.pub')), 'a public key is not a private key')
  const publicJwk = generateKeyPairSync('ed25519').publicKey.export({ format: 'jwk' })
  writeFileSync(file('pub.json'), JSON.stringify(publicJwk))
  await keyError(t, issue(file('pub.json')), 'a public JWK (no d)')
  const ec = generateKeyPairSync('ec', { namedCurve: 'P-256' })
  writeFileSync(file('ec.pem'), ec.privateKey.export({ type: 'pkcs8', format: 'pem' }))
  await keyError(t, issue(file('ec.pem')), 'another key type', /must be Ed25519/)
  const x25519 = generateKeyPairSync('x25519')
  writeFileSync(file('x.pem'), x25519.privateKey.export({ type: 'pkcs8', format: 'pem' }))
  await keyError(t, issue(file('x.pem')), 'x25519 is not Ed25519')
  await t.rejects(issue(file('missing.pem')), { code: 'ENOENT' }, 'a missing file')
  await keyError(t, (async () => parseBreakglassPrivateKey(''))(), 'empty text')
})

function cli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { timeout: 100_000, env: { ...process.env, SERVICE_LOG_LEVEL: 'silent' } }, (error, stdout, stderr) => {
      resolve({ code: error === null ? 0 : typeof error.code === 'number' ? error.code : 1, stdout, stderr: error?.killed === true ? `killed after the time-out ${stderr}` : stderr })
    })
  })
}

// Each CLI start loads the whole appliance module graph (seconds on a busy machine): one keygen, then
// every other invocation at once.
t.test('the CLI around them', { timeout: 200_000 }, async (t) => {
  const keygen = await cli(['breakglass', 'keygen', '--private', file('c.pem'), '--public', file('c.pub')])
  t.equal(keygen.code, 0, `keygen succeeds ${keygen.stderr.slice(0, 200)}`)
  t.equal(statSync(file('c.pem')).mode & 0o777, 0o600)
  const issueArgs = ['breakglass', 'issue', '--key', file('c.pem'), '--sub', 'bob', '--reason', 'outage']
  const [again, issued, defaults, ttlHigh, ttlText, badKey] = await Promise.all([
    cli(['breakglass', 'keygen', '--private', file('c.pem'), '--public', file('c.pub')]),
    cli([...issueArgs, '--ttl', '120', '--methods', 'GET, post', '--routes', '/a,/b']),
    cli(issueArgs),
    cli([...issueArgs, '--ttl', '3601']),
    cli([...issueArgs, '--ttl', 'abc']),
    cli(['breakglass', 'issue', '--key', file('garbage'), '--sub', 'bob', '--reason', 'x']),
  ])
  t.not(again.code, 0, 'a second keygen onto the same files fails')
  t.equal(issued.code, 0, `issue succeeds ${issued.stderr.slice(0, 200)}`)
  const publicKey = loadBreakglassPublicKey(readFileSync(file('c.pub'), 'utf8'))
  const now = Math.floor(Date.now() / 1000)
  const verdict = verifyBreakglassToken(issued.stdout.trim(), { publicKey, now, method: 'POST', path: '/b/x' })
  t.ok(verdict.ok, 'the printed token verifies')
  if (verdict.ok) {
    t.equal(verdict.claims.exp - verdict.claims.iat, 120, '--ttl')
    t.strictSame(verdict.claims.scope, { methods: ['GET', 'post'], routes: ['/a', '/b'] }, 'lists split and trimmed')
    t.equal(verdict.claims.iss, 'service-cli', 'default issuer')
  }
  const dv = verifyBreakglassToken(defaults.stdout.trim(), { publicKey, now, method: 'DELETE', path: '/anything' })
  t.ok(dv.ok && dv.claims.exp - dv.claims.iat === 900 && dv.claims.scope.methods[0] === '*', 'defaults: 900 s, any method and route')
  for (const [label, bad] of [['--ttl 3601', ttlHigh], ['--ttl abc', ttlText], ['bad key file', badKey]] as const) {
    t.not(bad.code, 0, `${label} refused`)
    t.equal(bad.stdout, '', `${label}: no token printed`)
    t.notMatch(bad.stderr, /at .*\.js:\d+/, `${label}: no stack trace`)
  }
})
