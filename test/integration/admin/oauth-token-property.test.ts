/**
 * The token endpoint under random change (docs/api.md §4.10): a valid client assertion with any single
 * header or claim member changed, removed or added, keeping its signature or signed again by a key
 * other than the agent's, never yields a token, answers 400 invalid_client and writes no badge. The
 * unchanged assertion is redeemed after each refusal (by a fresh agent each run, so that the per-DID
 * limit never binds), which shows the refusal was for the change and not for another reason.
 */
import fc from 'fast-check'
import t from 'tap'
import { generateKeyPairSync, randomUUID, sign, type KeyObject } from 'node:crypto'
import { startTestAdmin, type TestAdmin } from '../../helpers/admin.js'
import { ed25519Identity } from '../../helpers/fixtures.js'
import { propertyRuns } from '../../helpers/property-runs.js'

t.setTimeout(240_000)

const ISSUER = 'http://registry.test:8080'
const JWT_BEARER = 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer'

type Member = Record<string, unknown>
const DELETE = Symbol('delete')
const b64 = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString('base64url')
const signJws = (key: KeyObject, header: Member, claims: Member): string => {
  const input = `${b64(header)}.${b64(claims)}`
  return `${input}.${sign(null, Buffer.from(input), key).toString('base64url')}`
}

async function post(admin: TestAdmin, assertion: string): Promise<{ status: number; body: any }> {
  const res = await fetch(`${admin.url}/oauth/token`, {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ grant_type: 'client_credentials', client_assertion_type: JWT_BEARER, client_assertion: assertion }),
  })
  return { status: res.status, body: await res.json() }
}

async function badgeCount(admin: TestAdmin): Promise<number> {
  const rows = await admin.database.db.query<{ n: number }>('SELECT count(*)::int AS n FROM badges')
  return Number(rows[0]?.n ?? -1)
}

const admin = await startTestAdmin(t, { SERVICE_RATE_LIMIT_PER_MINUTE: '100000' })
const attacker = generateKeyPairSync('ed25519').privateKey

const mutationArb = fc.record({
  part: fc.constantFrom('header' as const, 'claims' as const),
  member: fc.oneof(fc.constantFrom('alg', 'typ', 'kid', 'iss', 'sub', 'aud', 'iat', 'exp', 'nbf', 'jti'), fc.string({ minLength: 1, maxLength: 8 })),
  value: fc.oneof(fc.constant<unknown>(DELETE), fc.jsonValue()),
  resign: fc.boolean(),
})

t.test('no single change of a valid assertion yields a token', async (t) => {
  let runs = 0
  await fc.assert(fc.asyncProperty(mutationArb, async (m) => {
    const identity = ed25519Identity()
    const created = await admin.request('POST', '/v1/agents', { body: { name: 'property', did: identity.didKey } })
    if (created.status !== 201) throw new Error(`agent creation failed: ${created.status}`)
    const iat = Math.floor(Date.now() / 1000)
    const header: Member = { alg: 'EdDSA', typ: 'JWT' }
    const claims: Member = { iss: identity.didKey, sub: identity.didKey, aud: ISSUER, iat, exp: iat + 300, jti: randomUUID() }
    const original = signJws(identity.privateKey, header, claims)
    const target = m.part === 'header' ? { ...header } : { ...claims }
    if (m.value === DELETE) delete target[m.member]
    else target[m.member] = m.value
    const [mutatedHeader, mutatedClaims] = m.part === 'header' ? [target, claims] : [header, target]
    const input = `${b64(mutatedHeader)}.${b64(mutatedClaims)}`
    fc.pre(input !== original.slice(0, original.lastIndexOf('.')))
    runs++
    const mutated = m.resign ? signJws(attacker, mutatedHeader, mutatedClaims) : `${input}.${original.slice(original.lastIndexOf('.') + 1)}`

    const before = await badgeCount(admin)
    const refused = await post(admin, mutated)
    if (refused.status !== 400 || refused.body.error !== 'invalid_client' || await badgeCount(admin) !== before) return false
    // The assertion as signed still works: the refusal was for the change.
    return (await post(admin, original)).status === 200
  }), propertyRuns(40))
  t.ok(runs >= 40, `${runs} changed assertions sent`)
})
