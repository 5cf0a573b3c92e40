/**
 * Client assertions under random change (docs/api.md §4.10): a valid assertion with any single header
 * or claim member changed or removed, and re-signed with the agent's key so that only the rules decide,
 * is accepted exactly when an independent, deliberately simple rule checker says so; the same change
 * without re-signing (the signature of the original kept) is never accepted.
 */
import fc from 'fast-check'
import t from 'tap'
import { generateKeyPairSync, sign } from 'node:crypto'
import { checkClientAssertion, verifyClientAssertionKey } from '../../../src/core/client-assertion.js'
import { didKeyVerificationMethodId, encodeDidKey } from '../../../src/core/did-key.js'
import type { ResolvedKeys } from '../../../src/core/did-document.js'
import { propertyRuns } from '../../helpers/property-runs.js'

const NOW = 1_800_000_000
const ISSUER = 'https://authority.test'
const TOKEN = `${ISSUER}/oauth/token`
const { privateKey, publicKey } = generateKeyPairSync('ed25519')
const der = publicKey.export({ format: 'der', type: 'spki' })
const RAW = new Uint8Array(der.subarray(der.length - 32))
const DID = encodeDidKey(RAW)
const KID = didKeyVerificationMethodId(DID)
const OTHER_DID = encodeDidKey(new Uint8Array(32).fill(7))
const DOCUMENT: ResolvedKeys = { did: DID, keys: new Map([[KID, RAW]]), authentication: new Set([KID]), assertionMethod: new Set([KID]) }

type Member = Record<string, unknown>
const DELETE = Symbol('delete')
const TIMES = [-400, -301, -300, -61, -60, -6, -5, -1, 0, 1, 59, 60, 61, 240, 299, 300, 301, 400].map((d) => NOW + d)

/** Candidate values per member, valid and invalid, near every edge the rules draw. */
const HEADER_CANDIDATES: Record<string, readonly unknown[]> = {
  alg: ['EdDSA', 'eddsa', 'none', 'HS256', 'RS256', 'ES256', '', null, 5],
  typ: ['JWT', 'jwt', 'Jwt', 'pop+jwt', 'at+jwt', 'JOSE', '', null, 5],
  kid: [KID, KID.slice(DID.length), `${DID}#key-1`, `${OTHER_DID}#x`, '', 5, null],
  crit: [['exp'], []],
  jwk: [{ kty: 'OKP', crv: 'Ed25519', x: Buffer.from(RAW).toString('base64url') }],
  x5u: ['https://evil.example/x'],
  b64: [false],
  cty: ['JWT'],
}
const CLAIM_CANDIDATES: Record<string, readonly unknown[]> = {
  iss: [DID, OTHER_DID, '', 'x'.repeat(2049), 5, null],
  sub: [DID, OTHER_DID, '', 5, null],
  aud: [ISSUER, TOKEN, [ISSUER], [TOKEN], [ISSUER, TOKEN], [], `${ISSUER}/`, 'https://elsewhere.test', [5], 5, null],
  iat: [...TIMES, NOW + 0.5, String(NOW), null],
  exp: [...TIMES, NOW + 10.5, String(NOW + 100), null],
  nbf: [...TIMES, 'x', null],
  jti: ['j-2', '', 'x'.repeat(256), 'x'.repeat(257), 'a\u0000b', '\udc00', 5, null],
  scope: ['trust:EV'],
}

const BASE_HEADER: Member = { alg: 'EdDSA', typ: 'JWT' }
const BASE_CLAIMS: Member = { iss: DID, sub: DID, aud: ISSUER, iat: NOW - 10, exp: NOW + 200, jti: 'j-1' }

const b64 = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString('base64url')
const signingInput = (header: Member, claims: Member): string => `${b64(header)}.${b64(claims)}`
const signed = (header: Member, claims: Member): string => {
  const input = signingInput(header, claims)
  return `${input}.${sign(null, Buffer.from(input), privateKey).toString('base64url')}`
}

/** The endpoint's pipeline without the database: claim checks, the client's DID document, the key. */
function accepts(token: string): boolean {
  const checked = checkClientAssertion(token, { audiences: [ISSUER, TOKEN], now: NOW })
  if (!checked.ok) return false
  // Only the agent's own DID resolves here; any other client id names no agent.
  if (checked.assertion.clientId !== DID) return false
  return verifyClientAssertionKey(checked.assertion, DOCUMENT).ok
}

const int = (v: unknown): v is number => Number.isSafeInteger(v)
const text = (v: unknown, max: number): v is string => typeof v === 'string' && v.length >= 1 && v.length <= max

/** The rules of docs/api.md §4.10 written out plainly, independent of the module under test. */
function oracle(header: Member, claims: Member): boolean {
  if (header.alg !== 'EdDSA') return false
  if (['crit', 'jwk', 'x5u', 'b64'].some((p) => p in header)) return false
  if (header.typ !== undefined && !(typeof header.typ === 'string' && header.typ.toLowerCase() === 'jwt')) return false
  if (header.kid !== undefined && header.kid !== KID && header.kid !== KID.slice(DID.length)) return false
  if (claims.iss !== DID || claims.sub !== DID) return false
  const aud = claims.aud
  if (!(aud === ISSUER || aud === TOKEN || (Array.isArray(aud) && aud.length === 1 && (aud[0] === ISSUER || aud[0] === TOKEN)))) return false
  if (!int(claims.iat) || !int(claims.exp)) return false
  if (claims.iat > NOW + 60 || claims.exp < NOW - 5 || claims.exp - claims.iat > 300) return false
  if (claims.nbf !== undefined && (!int(claims.nbf) || claims.nbf > NOW + 60)) return false
  return text(claims.jti, 256) && !/[\u0000\ud800-\udfff]/u.test(claims.jti)
}

interface Mutation { part: 'header' | 'claims'; member: string; value: unknown }
const mutationArb = fc.record({
  part: fc.constantFrom('header' as const, 'claims' as const),
  pick: fc.nat({ max: 1000 }),
  which: fc.nat({ max: 1000 }),
  remove: fc.nat({ max: 9 }),
}).map(({ part, pick, which, remove }): Mutation => {
  const table = part === 'header' ? HEADER_CANDIDATES : CLAIM_CANDIDATES
  const members = Object.keys(table)
  const member = members[which % members.length]!
  const candidates = table[member]!
  return { part, member, value: remove === 0 ? DELETE : candidates[pick % candidates.length] }
})

function apply(m: Mutation): { header: Member; claims: Member } {
  const header = { ...BASE_HEADER }
  const claims = { ...BASE_CLAIMS }
  const target = m.part === 'header' ? header : claims
  if (m.value === DELETE) delete target[m.member]
  else target[m.member] = m.value
  return { header, claims }
}

t.test('the unmutated assertion is accepted (else the properties prove nothing)', async (t) => {
  t.ok(oracle(BASE_HEADER, BASE_CLAIMS))
  t.ok(accepts(signed(BASE_HEADER, BASE_CLAIMS)))
})

t.test('re-signed with the agent key: accepted exactly when the rules say so', async (t) => {
  let acceptedCount = 0
  let refusedCount = 0
  fc.assert(fc.property(mutationArb, (m) => {
    const { header, claims } = apply(m)
    const expected = oracle(header, claims)
    if (expected) acceptedCount++
    else refusedCount++
    return accepts(signed(header, claims)) === expected
  }), propertyRuns(2000))
  t.ok(acceptedCount > 50 && refusedCount > 50, `both outcomes drawn (${acceptedCount} accepted, ${refusedCount} refused)`)
})

t.test('not re-signed: any single change is refused', async (t) => {
  const signature = signed(BASE_HEADER, BASE_CLAIMS).split('.')[2]!
  const original = signingInput(BASE_HEADER, BASE_CLAIMS)
  let changed = 0
  fc.assert(fc.property(mutationArb, fc.jsonValue(), fc.boolean(), (m, arbitrary, useArbitrary) => {
    const mutation = useArbitrary && m.value !== DELETE ? { ...m, value: arbitrary } : m
    const { header, claims } = apply(mutation)
    const input = signingInput(header, claims)
    fc.pre(input !== original)
    changed++
    return !accepts(`${input}.${signature}`)
  }), propertyRuns(2000))
  t.ok(changed > 1000, `${changed} changed assertions tried`)
})
