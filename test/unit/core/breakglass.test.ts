import t from 'tap'
import { createHmac, generateKeyPairSync, sign } from 'node:crypto'
import {
  BREAKGLASS_CLOCK_LEEWAY_SECONDS,
  loadBreakglassPublicKey,
  signBreakglassToken,
  verifyBreakglassToken,
  type BreakglassClaims,
} from '../../../src/core/breakglass.js'

const { publicKey, privateKey } = generateKeyPairSync('ed25519')
const other = generateKeyPairSync('ed25519')
const NOW = 1_800_000_000

const claims = (over: Partial<BreakglassClaims> = {}): BreakglassClaims => ({
  jti: 'bg-1',
  iat: NOW - 60,
  exp: NOW + 600,
  iss: 'ops',
  sub: 'alice@example.com',
  reason: 'incident 42: PDP outage',
  scope: { methods: ['GET', 'post'], routes: ['/admin'] },
  ...over,
})
const check = (token: string, method = 'GET', path = '/admin/users', now = NOW) =>
  verifyBreakglassToken(token, { publicKey, now, method, path })
const b64 = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString('base64url')
const rawToken = (header: unknown, payload: unknown, signature = Buffer.alloc(64, 1).toString('base64url')): string =>
  `${b64(header)}.${b64(payload)}.${signature}`
// Signs any header and payload with the right key, to reach the checks that follow the signature.
const signWithHeader = (header: Record<string, unknown>, payload: unknown): string => {
  const input = `${b64(header)}.${b64(payload)}`
  return `${input}.${sign(null, Buffer.from(input, 'ascii'), privateKey).toString('base64url')}`
}

t.test('a valid token in scope', async (t) => {
  const result = check(signBreakglassToken(claims(), privateKey))
  t.strictSame(result, { ok: true, claims: claims() })
  t.match(check(signBreakglassToken(claims(), privateKey), 'POST', '/admin'), { ok: true }, 'methods compare case-insensitively')
})

t.test('time checks', async (t) => {
  const L = BREAKGLASS_CLOCK_LEEWAY_SECONDS
  t.equal(L, 30)
  t.strictSame(check(signBreakglassToken(claims({ iat: NOW - 700, exp: NOW - 100 }), privateKey)), { ok: false, reason: 'expired' })
  t.match(check(signBreakglassToken(claims({ exp: NOW - L + 1 }), privateKey)), { ok: true }, 'within the exp leeway')
  t.strictSame(check(signBreakglassToken(claims({ exp: NOW - L }), privateKey)), { ok: false, reason: 'expired' }, 'at the end of the leeway')
  t.strictSame(check(signBreakglassToken(claims({ iat: NOW - 60, exp: NOW - 60 + 3601 }), privateKey)), { ok: false, reason: 'lifetime_too_long' })
  t.match(check(signBreakglassToken(claims({ iat: NOW - 60, exp: NOW - 60 + 3600 }), privateKey)), { ok: true }, 'exactly one hour')
  t.strictSame(check(signBreakglassToken(claims({ iat: NOW + L + 1, exp: NOW + 600 }), privateKey)), { ok: false, reason: 'not_yet_valid' })
  t.match(check(signBreakglassToken(claims({ iat: NOW + L, exp: NOW + 600 }), privateKey)), { ok: true }, 'iat within the leeway')
  t.strictSame(check(signBreakglassToken(claims({ iat: NOW, exp: NOW }), privateKey)), { ok: false, reason: 'claims' }, 'exp not after iat')
})

t.test('signature and header', async (t) => {
  t.strictSame(check(signBreakglassToken(claims(), other.privateKey)), { ok: false, reason: 'signature' }, 'another key')
  const good = signBreakglassToken(claims(), privateKey)
  const [h, , s] = good.split('.')
  t.strictSame(check(`${h}.${b64({ ...claims(), scope: { methods: ['*'], routes: ['*'] } })}.${s}`), { ok: false, reason: 'signature' }, 'tampered payload')
  t.strictSame(check(`${b64({ alg: 'none' })}.${b64(claims())}.`), { ok: false, reason: 'malformed' }, 'alg none without signature')
  t.strictSame(check(rawToken({ alg: 'none' }, claims())), { ok: false, reason: 'alg' }, 'alg none')
  const hsInput = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64(claims())}`
  const hs = `${hsInput}.${createHmac('sha256', 'secret').update(hsInput).digest('base64url')}`
  t.strictSame(check(hs), { ok: false, reason: 'alg' }, 'HS256')
  const jwk = other.publicKey.export({ format: 'jwk' })
  t.strictSame(check(signWithHeader({ alg: 'EdDSA', jwk }, claims())), { ok: false, reason: 'malformed' }, 'embedded jwk header')
  t.strictSame(check('not a token'), { ok: false, reason: 'malformed' })
  t.strictSame(check(`${h}.${b64(claims())}.${s}`.repeat(60)), { ok: false, reason: 'malformed' }, 'over 8 KiB')
  const rsa = generateKeyPairSync('rsa', { modulusLength: 1024 })
  t.strictSame(verifyBreakglassToken(good, { publicKey: rsa.publicKey, now: NOW, method: 'GET', path: '/admin' }), { ok: false, reason: 'signature' }, 'wrong key type')
})

t.test('claims', async (t) => {
  const { reason: _reason, ...noReason } = claims()
  const bad: [string, unknown][] = [
    ['missing reason', noReason],
    ['empty reason', { ...claims(), reason: '  ' }],
    ['missing jti', { ...claims(), jti: undefined }],
    ['numeric sub', { ...claims(), sub: 7 }],
    ['string exp', { ...claims(), exp: String(NOW + 600) }],
    ['fractional iat', { ...claims(), iat: NOW - 0.5 }],
    ['no scope', { ...claims(), scope: undefined }],
    ['scope methods not an array', { ...claims(), scope: { methods: 'GET', routes: ['*'] } }],
    ['scope route not a string', { ...claims(), scope: { methods: ['GET'], routes: [1] } }],
  ]
  for (const [name, payload] of bad) {
    t.strictSame(check(signWithHeader({ alg: 'EdDSA', typ: 'JWT' }, payload)), { ok: false, reason: 'claims' }, name)
  }
})

t.test('scope', async (t) => {
  const scoped = (methods: string[], routes: string[]) => signBreakglassToken(claims({ scope: { methods, routes } }), privateKey)
  const cases: [string[], string[], string, string, boolean][] = [
    [['GET'], ['/admin'], 'DELETE', '/admin', false],
    [['*'], ['/admin'], 'DELETE', '/admin', true],
    [['get'], ['/admin'], 'GET', '/admin', true],
    [['GET'], ['/admin'], 'GET', '/admin', true],
    [['GET'], ['/admin'], 'GET', '/admin/x/y', true],
    [['GET'], ['/admin'], 'GET', '/administrator', false],
    [['GET'], ['/admin'], 'GET', '/adm', false],
    [['GET'], ['/admin/'], 'GET', '/admin/x', true],
    [['GET'], ['/admin/'], 'GET', '/admin/', true],
    [['GET'], ['/admin/'], 'GET', '/admin', false],
    [['GET'], ['/admin/'], 'GET', '/administrator', false],
    [['GET'], ['/v1/agents/42'], 'GET', '/v1/agents/42', true],
    [['GET'], ['/v1/agents/42'], 'GET', '/v1/agents/420', false],
    [['GET'], ['*'], 'GET', '/anything/at/all', true],
    [['GET'], ['/other', '/admin'], 'GET', '/admin/x', true],
    [['GET'], ['/admin'], 'GET', '/admin?x=/y', true],
    [['GET'], ['/admin'], 'GET', '/admin/x?debug=1', true],
    [['GET'], ['/admin'], 'GET', '/administrator?path=/admin', false],
    [['GET'], ['/x'], 'GET', '/x?', true],
    [['GET'], ['/admin'], 'GET', '/admin/../users', false],
    [['GET'], ['/admin'], 'GET', '/admin/%2e%2e/users', false],
    [['GET'], ['/admin'], 'GET', '/admin%2f..%2fusers', false],
    [['GET'], ['*'], 'GET', '/admin/../users', true],
    [['GET'], [], 'GET', '/admin', false],
    [[], ['*'], 'GET', '/admin', false],
  ]
  for (const [methods, routes, method, path, ok] of cases) {
    const result = check(scoped(methods, routes), method, path)
    t.strictSame(result.ok ? true : result.reason, ok ? true : 'out_of_scope', `${JSON.stringify(methods)} ${JSON.stringify(routes)} ${method} ${path}`)
  }
})

t.test('loading the public key', async (t) => {
  const token = signBreakglassToken(claims(), privateKey)
  const pem = publicKey.export({ format: 'pem', type: 'spki' }).toString()
  const fromPem = loadBreakglassPublicKey(`\n${pem}\n`)
  t.match(verifyBreakglassToken(token, { publicKey: fromPem, now: NOW, method: 'GET', path: '/admin' }), { ok: true }, 'PEM SPKI')
  const jwk = publicKey.export({ format: 'jwk' })
  const fromJwk = loadBreakglassPublicKey(JSON.stringify({ ...jwk, kid: 'bg', use: 'sig' }))
  t.match(verifyBreakglassToken(token, { publicKey: fromJwk, now: NOW, method: 'GET', path: '/admin' }), { ok: true }, 'JWK')

  const privateJwk = JSON.stringify(privateKey.export({ format: 'jwk' }))
  t.throws(() => loadBreakglassPublicKey(privateJwk), /private key \("d"\)/, 'a JWK with d is refused')
  t.throws(() => loadBreakglassPublicKey(privateKey.export({ format: 'pem', type: 'pkcs8' }).toString()), /private keys are refused/)
  t.throws(() => loadBreakglassPublicKey('{"kty":"EC","crv":"P-256","x":"a","y":"b"}'), /kty "OKP", crv "Ed25519"/)
  t.throws(() => loadBreakglassPublicKey('{"kty":"OKP","crv":"Ed25519","x":"AAAA"}'), /not a valid Ed25519 public key/)
  t.throws(() => loadBreakglassPublicKey('{not json'), /not valid JSON/)
  t.throws(() => loadBreakglassPublicKey('[]'), /PEM SPKI public key or a JWK/)
  t.throws(() => loadBreakglassPublicKey(''), /PEM SPKI public key or a JWK/)
  t.throws(() => loadBreakglassPublicKey('-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----'), /could not be parsed/)
  const rsaPem = generateKeyPairSync('rsa', { modulusLength: 1024 }).publicKey.export({ format: 'pem', type: 'spki' }).toString()
  t.throws(() => loadBreakglassPublicKey(rsaPem), /expected an Ed25519 key, got rsa/)
})
