/**
 * The pure client-assertion checks (docs/api.md §4.10): the exact edges of the time rules, the order of
 * the checks when several fail, and the key rules (authentication keys only, a kid names one key, at
 * most 16 keys tried without one).
 */
import t from 'tap'
import { sign, type KeyObject } from 'node:crypto'
import {
  ASSERTION_EXP_LEEWAY_SECONDS,
  ASSERTION_IAT_LEEWAY_SECONDS,
  ASSERTION_MAX_LIFETIME_SECONDS,
  checkClientAssertion,
  MAX_ASSERTION_KEYS_TRIED,
  verifyClientAssertionKey,
  type CheckedClientAssertion,
} from '../../../src/core/client-assertion.js'
import type { ResolvedKeys } from '../../../src/core/did-document.js'
import { b64json, didKeyPair } from '../../helpers/fixtures.js'

const NOW = 1_800_000_000
const ISSUER = 'https://authority.test'
const TOKEN = `${ISSUER}/oauth/token`
const EXPECTED = { audiences: [ISSUER, TOKEN], now: NOW }

const agent = didKeyPair()

function assertion(claims: Record<string, unknown> = {}, header: Record<string, unknown> = {}, key: KeyObject = agent.privateKey): string {
  const input = `${b64json({ alg: 'EdDSA', typ: 'JWT', ...header })}.${b64json({ iss: agent.did, sub: agent.did, aud: ISSUER, iat: NOW, exp: NOW + 300, jti: 'j-1', ...claims })}`
  return `${input}.${sign(null, Buffer.from(input), key).toString('base64url')}`
}

function message(token: string): string | null {
  const result = checkClientAssertion(token, EXPECTED)
  return result.ok ? null : result.message
}

function checked(token: string): CheckedClientAssertion {
  const result = checkClientAssertion(token, EXPECTED)
  if (!result.ok) throw new Error(result.message)
  return result.assertion
}

function resolved(did: string, methods: { id: string; key: Uint8Array; auth: boolean }[]): ResolvedKeys {
  return {
    did,
    keys: new Map(methods.map((m) => [m.id, m.key])),
    authentication: new Set(methods.filter((m) => m.auth).map((m) => m.id)),
    assertionMethod: new Set(),
  }
}

t.test('the time rules, at their edges', async (t) => {
  t.equal(message(assertion()), null, 'a fresh assertion passes')
  t.equal(message(assertion({ iat: NOW + ASSERTION_IAT_LEEWAY_SECONDS, exp: NOW + ASSERTION_IAT_LEEWAY_SECONDS + 10 })), null, 'iat 60 s ahead')
  t.match(message(assertion({ iat: NOW + ASSERTION_IAT_LEEWAY_SECONDS + 1, exp: NOW + 100 })), /iat lies in the future/, 'iat 61 s ahead')
  t.equal(message(assertion({ iat: NOW - 100, exp: NOW - ASSERTION_EXP_LEEWAY_SECONDS })), null, 'exp 5 s past')
  t.match(message(assertion({ iat: NOW - 100, exp: NOW - ASSERTION_EXP_LEEWAY_SECONDS - 1 })), /expired/, 'exp 6 s past')
  t.equal(message(assertion({ iat: NOW, exp: NOW + ASSERTION_MAX_LIFETIME_SECONDS })), null, 'exactly 300 s of life')
  t.match(message(assertion({ iat: NOW, exp: NOW + ASSERTION_MAX_LIFETIME_SECONDS + 1 })), /at most 300 seconds/, '301 s of life')
  t.equal(message(assertion({ nbf: NOW + ASSERTION_IAT_LEEWAY_SECONDS })), null, 'nbf 60 s ahead')
  t.match(message(assertion({ nbf: NOW + ASSERTION_IAT_LEEWAY_SECONDS + 1 })), /nbf/, 'nbf 61 s ahead')
  t.match(message(assertion({ exp: NOW + 10.5 })), /exp and iat are required/, 'a fractional exp')
})

t.test('claims and header', async (t) => {
  t.equal(message(assertion({ aud: TOKEN })), null, 'aud: the token endpoint')
  t.equal(message(assertion({ aud: [TOKEN] })), null, 'aud: one-element array')
  t.match(message(assertion({ aud: [] })), /exactly one audience/, 'aud: empty array')
  t.match(message(assertion({ aud: [ISSUER, ISSUER] })), /exactly one audience/, 'aud: the issuer twice')
  t.match(message(assertion({ aud: [5] })), /aud must be the issuer/, 'aud: a number in an array')
  t.match(message(assertion({ aud: 5 })), /aud is missing or not a string/, 'aud: a number')
  t.equal(message(assertion({}, { typ: 'Jwt' })), null, 'typ case-insensitive')
  t.match(message(assertion({}, { typ: 5 })), /typ must be/, 'typ a number')
  t.match(message(assertion({}, { kid: '' })), /kid must be a non-empty string/, 'an empty kid')
  t.match(message(assertion({ iss: '', sub: '' })), /iss and sub must be non-empty/, 'empty iss and sub')
  t.equal(message(assertion({ jti: 'x'.repeat(256) })), null, '256-character jti')
  t.match(message(assertion({ jti: '\ud800' })), /jti must be/, 'jti with a lone surrogate')
  t.match(message(assertion({ jti: 5 })), /jti must be/, 'jti a number')
  for (const param of ['jku', 'x5u', 'x5c', 'b64']) {
    t.match(message(assertion({}, { [param]: 'x' })), new RegExp(`"${param}"`), `header ${param}`)
  }
  t.match(message(`${b64json({ alg: 'EdDSA' })}.${b64json({})}.${Buffer.alloc(32).toString('base64url')}`), /64-byte/, 'a short signature')
  t.match(message('a.b'), /not a compact JWS/, 'two parts')
  t.match(message(`x${assertion()}`), /not a compact JWS/, 'a header that is not base64url JSON')
  const ok = checked(assertion({}, { kid: agent.kid }))
  t.equal(ok.clientId, agent.did)
  t.equal(ok.kid, agent.kid)
  t.equal(ok.jti, 'j-1')
})

t.test('the order of the checks', async (t) => {
  // Each pair breaks two rules; the one documented first is reported.
  t.match(message(assertion({ aud: 'x' }, { typ: 'pop+jwt' })), /typ/, 'typ before aud')
  t.match(message(assertion({ sub: 'other', aud: 'x' })), /iss and sub/, 'iss = sub before aud')
  t.match(message(assertion({ aud: 'x', exp: 'soon' })), /aud/, 'aud before the times')
  t.match(message(assertion({ iat: NOW + 120, exp: NOW - 100 })), /iat/, 'iat before exp')
  t.match(message(assertion({ iat: NOW - 1000, exp: NOW - 100 })), /expired/, 'expiry before the lifetime')
  t.match(message(assertion({ exp: NOW + 400, nbf: NOW + 120 })), /at most 300/, 'lifetime before nbf')
  t.match(message(assertion({ nbf: NOW + 120, jti: undefined })), /nbf/, 'nbf before jti')
})

t.test('keys: authentication only, a kid names one, at most 16 tried', async (t) => {
  const other = didKeyPair()
  const doc = resolved(agent.did, [{ id: agent.kid, key: agent.raw, auth: true }])
  const good = verifyClientAssertionKey(checked(assertion()), doc)
  t.ok(good.ok, 'the authentication key verifies')
  t.equal(good.ok && good.kid, agent.kid)
  const relative = verifyClientAssertionKey(checked(assertion({}, { kid: agent.kid.slice(agent.did.length) })), doc)
  t.ok(relative.ok, 'a kid relative to the DID (#fragment)')

  const assertionOnly = resolved(agent.did, [{ id: agent.kid, key: agent.raw, auth: false }])
  t.notOk(verifyClientAssertionKey(checked(assertion()), assertionOnly).ok, 'a key outside authentication does not count')
  t.notOk(verifyClientAssertionKey(checked(assertion({}, { kid: agent.kid })), assertionOnly).ok, 'not even named by kid')

  const two = resolved(agent.did, [{ id: `${agent.did}#a`, key: other.raw, auth: true }, { id: `${agent.did}#b`, key: agent.raw, auth: true }])
  const second = verifyClientAssertionKey(checked(assertion()), two)
  t.ok(second.ok, 'without kid each authentication key is tried')
  t.equal(second.ok && second.kid, `${agent.did}#b`, 'and the verifying one is reported')
  t.notOk(verifyClientAssertionKey(checked(assertion({}, { kid: `${agent.did}#a` })), two).ok, 'with a kid, only that key')

  const decoys = Array.from({ length: MAX_ASSERTION_KEYS_TRIED }, (_, i) => ({ id: `${agent.did}#d${i}`, key: other.raw, auth: true }))
  const crowded = resolved(agent.did, [...decoys, { id: `${agent.did}#real`, key: agent.raw, auth: true }])
  t.notOk(verifyClientAssertionKey(checked(assertion()), crowded).ok, 'the 17th key is not tried')
  t.ok(verifyClientAssertionKey(checked(assertion({}, { kid: `${agent.did}#real` })), crowded).ok, 'a kid reaches it')
  t.match(verifyClientAssertionKey(checked(assertion()), resolved(agent.did, [])), { ok: false, message: /lists no Ed25519 authentication key/ })
})
