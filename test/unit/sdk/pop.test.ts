/**
 * SDK PoP proof: the proof the SDK signs passes the registry's own claim and key checks
 * (core/pop-proof.ts) for a did:key, with the claims docs/wire-contract.md §6 asks for; a proof signed by another
 * key fails the key check. The HTTP flow against a real registry is in test/integration/sdk/pop.test.ts.
 */
import t from 'tap'
import { checkPopProofClaims, POP_MAX_LIFETIME_SECONDS, verifyPopProofKey } from '../../../src/core/pop-proof.js'
import { decodeDidKey } from '../../../src/core/did-key.js'
import { buildPopProof, defaultKid } from '../../../src/sdk/pop.js'
import { generateAgentKey, type AgentKey } from '../../../src/sdk/keys.js'
import { SdkError } from '../../../src/sdk/errors.js'

const NOW = 1_800_000_000
const ISSUER = 'https://registry.example.com'
const key = generateAgentKey()

const challenge = {
  challenge_id: 'ch-0f8e6f9c-3c4b-4a8e-9d0e-2b1a3c4d5e6f',
  nonce: 'bm9uY2Utbm9uY2Utbm9uY2Utbm9uY2Utbm9uY2Utbm9uY2U',
  aud: ISSUER,
  htu: `${ISSUER}/v1/agents/${key.did}/badge/pop`,
}
const expectations = { challengeId: challenge.challenge_id, nonce: challenge.nonce, did: key.did, audience: ISSUER, htu: challenge.htu, challengeCreatedAt: NOW - 5, now: NOW }
// What the registry's resolver yields for a did:key: its one key, listed under authentication.
const resolvedFor = (k: AgentKey) => ({ did: k.did, keys: new Map([[k.kid, decodeDidKey(k.did)]]), authentication: new Set([k.kid]), assertionMethod: new Set([k.kid]) })

t.test('the proof passes the registry\'s checks', async (t) => {
  const proof = buildPopProof({ challenge, did: key.did, privateKey: key.privateKey, kid: key.kid, now: NOW })
  const [h, p] = proof.split('.')
  t.strictSame(JSON.parse(Buffer.from(h!, 'base64url').toString()), { alg: 'EdDSA', typ: 'pop+jwt', kid: key.kid })
  const claims = JSON.parse(Buffer.from(p!, 'base64url').toString()) as Record<string, unknown>
  t.strictSame(Object.keys(claims).sort(), ['aud', 'cid', 'exp', 'htm', 'htu', 'iat', 'jti', 'nonce', 'sub'])
  t.match(claims, { cid: challenge.challenge_id, nonce: challenge.nonce, sub: key.did, aud: ISSUER, htu: challenge.htu, htm: 'POST', iat: NOW })
  t.ok((claims.exp as number) - NOW <= POP_MAX_LIFETIME_SECONDS && (claims.exp as number) > NOW, 'exp within 60 s of iat')

  const checked = checkPopProofClaims(proof, expectations)
  t.ok(checked.ok, `claims accepted ${JSON.stringify(checked)}`)
  if (!checked.ok) return
  t.match(verifyPopProofKey(checked.proof, resolvedFor(key)), { ok: true }, 'signature accepted with the DID\'s key')

  const other = generateAgentKey()
  const forged = buildPopProof({ challenge, did: key.did, privateKey: other.privateKey, kid: key.kid, now: NOW })
  const forgedChecked = checkPopProofClaims(forged, expectations)
  t.ok(forgedChecked.ok, 'a proof by another key passes the claim stage ...')
  if (forgedChecked.ok) t.match(verifyPopProofKey(forgedChecked.proof, resolvedFor(key)), { ok: false, code: 'proof_verification_failed' }, '... and fails the key stage')
  const late = buildPopProof({ challenge, did: key.did, privateKey: key.privateKey, kid: key.kid, now: NOW - 60 })
  t.match(checkPopProofClaims(late, expectations), { ok: false, code: 'proof_expired' }, 'an old proof expires')
})

t.test('defaultKid', async (t) => {
  t.equal(defaultKid(key.did), key.kid)
  t.equal(defaultKid('did:web:registry.test%3A8080:agents:1'), 'did:web:registry.test%3A8080:agents:1#key-1')
  t.throws(() => defaultKid('did:example:123'), SdkError)
})
