/**
 * The SDK and the agent CLI against a real admin plane (real socket, real database): requestPopBadge
 * obtains an IAL-1 badge for a did:key agent and for a did:web agent of this registry; the badge
 * verifies with verifyBadgeWithJwks against the served JWKS; refusals arrive as SdkError with the
 * registry's code and status; `agent-trust badge request --pop` and `agent-trust badge verify` do the same from
 * the command line without the API key ever appearing in their output.
 */
import t from 'tap'
import { execFile } from 'node:child_process'
import { randomUUID } from 'node:crypto'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { createOrg, startTestAdmin, type TestAdmin } from '../../helpers/admin.js'
import { SdkError } from '../../../src/sdk/errors.js'
import { generateAgentKey, saveAgentKey } from '../../../src/sdk/keys.js'
import { jwksUrlFor, verifyBadgeWithJwks } from '../../../src/sdk/badges.js'
import { requestPopBadge } from '../../../src/sdk/pop.js'
import { CLI } from '../../helpers/compiled.js'

t.setTimeout(240_000)
const dir = mkdtempSync(path.join(tmpdir(), 'svc-sdk-pop-'))
t.teardown(() => rmSync(dir, { recursive: true, force: true }))
const file = (name: string): string => path.join(dir, name)

async function createAgent(admin: TestAdmin, key: string, body: Record<string, unknown>): Promise<{ id: string; did: string }> {
  const res = await admin.request('POST', '/v1/agents', { key, body: { name: `sdk-${randomUUID().slice(0, 8)}`, ...body } })
  if (res.status !== 201) throw new Error(`agent creation failed: ${res.status} ${res.text}`)
  return { id: res.body.data.id, did: res.body.data.did }
}

async function sdkError(pending: Promise<unknown>): Promise<SdkError | null> {
  const error = await pending.then(() => null, (e: unknown) => e)
  return error instanceof SdkError ? error : null
}

function cli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { timeout: 100_000, env: { ...process.env, SERVICE_LOG_LEVEL: 'silent' } }, (error, stdout, stderr) => {
      resolve({ code: error === null ? 0 : typeof error.code === 'number' ? error.code : 1, stdout, stderr })
    })
  })
}

t.test('SDK proof of possession against a real registry', async (t) => {
  const admin = await startTestAdmin(t)
  const issuer = admin.config.issuerUrl
  const org = await createOrg(admin, `sdk-org-${randomUUID().slice(0, 8)}`)

  await t.test('did:key agent: IAL-1 badge that verifies against the served JWKS', async (t) => {
    const key = generateAgentKey()
    const agent = await createAgent(admin, org.key, { did: key.did })
    const badge = await requestPopBadge({
      registryUrl: admin.url, apiKey: org.key, did: key.did, privateKey: key.privateKey, badgeTtl: 120, audience: 'https://api.example.com',
    })
    t.equal(badge.ial, '1')
    t.equal(badge.subject, key.did)
    t.equal(badge.trustLevel, '1')
    t.same(badge.cnf, { kid: key.kid, jwk: { ...key.publicJwk, kid: key.kid } }, 'cnf names the proven key')
    const rows = await admin.database.db.query<{ agent_id: string; ial: string }>('SELECT agent_id, ial FROM badges WHERE jti = $1', [badge.jti])
    t.match(rows[0], { agent_id: agent.id, ial: '1' }, 'the registry recorded the badge for the agent')

    const verified = await verifyBadgeWithJwks(badge.token, { jwksUrl: jwksUrlFor(admin.url), issuer, audience: ['https://api.example.com'] })
    t.ok(verified.valid, `verifies against the served JWKS ${JSON.stringify(verified)}`)
    if (verified.valid) {
      t.equal(verified.claims.sub, key.did)
      t.equal(verified.claims.ial, '1')
      t.equal(verified.claims.exp - verified.claims.iat, 120, 'badgeTtl honoured')
      t.same(verified.claims.aud, ['https://api.example.com'], 'audience honoured')
      t.match(verified.claims.pop_challenge_id, /^ch-/)
      t.equal(verified.kid, admin.keyRing.current.jwks.keys[0]?.kid, 'signed by the authority key')
    }
    t.match(await verifyBadgeWithJwks(badge.token, { jwksUrl: jwksUrlFor(admin.url), issuer: 'https://other.example.com' }), { valid: false, error: 'BADGE_ISSUER_UNTRUSTED' })
    t.match(await verifyBadgeWithJwks(badge.token, { jwksUrl: jwksUrlFor(admin.url), issuer, audience: ['https://elsewhere.example.com'] }), { valid: false, error: 'BADGE_AUDIENCE_MISMATCH' })
  })

  await t.test('did:web agent of this registry: the default kid #key-1', async (t) => {
    const key = generateAgentKey()
    const agent = await createAgent(admin, org.key, { publicKeyJwk: key.publicJwk })
    t.match(agent.did, /^did:web:/)
    const badge = await requestPopBadge({ registryUrl: `${admin.url}/`, apiKey: org.key, did: agent.did, privateKey: key.privateKey })
    t.equal(badge.subject, agent.did)
    t.equal(badge.cnf?.kid, `${agent.did}#key-1`)
    t.ok((await verifyBadgeWithJwks(badge.token, { jwksUrl: jwksUrlFor(admin.url), issuer })).valid)
  })

  await t.test('refusals carry the registry\'s code and status', async (t) => {
    const key = generateAgentKey()
    await createAgent(admin, org.key, { did: key.did })
    const wrongKey = await sdkError(requestPopBadge({ registryUrl: admin.url, apiKey: org.key, did: key.did, privateKey: generateAgentKey().privateKey }))
    t.equal(wrongKey?.code, 'proof_verification_failed', 'a proof by another key')
    t.equal(wrongKey?.status, 403)

    const unknown = generateAgentKey()
    const notFound = await sdkError(requestPopBadge({ registryUrl: admin.url, apiKey: org.key, did: unknown.did, privateKey: unknown.privateKey }))
    t.equal(notFound?.code, 'agent_not_found', 'a DID no agent of the org holds')
    t.equal(notFound?.status, 404)

    const other = await createOrg(admin, `sdk-other-${randomUUID().slice(0, 8)}`)
    const foreign = await sdkError(requestPopBadge({ registryUrl: admin.url, apiKey: other.key, did: key.did, privateKey: key.privateKey }))
    t.equal(foreign?.code, 'agent_not_found', 'another org\'s key cannot ask for this agent\'s challenge')

    const badKey = `sk_${'A'.repeat(43)}`
    const unauthorized = await sdkError(requestPopBadge({ registryUrl: admin.url, apiKey: badKey, did: key.did, privateKey: key.privateKey }))
    t.equal(unauthorized?.status, 401, 'an unknown API key')
    t.notMatch(unauthorized?.message ?? '', badKey, 'the API key is not in the error')

    const ttl = await sdkError(requestPopBadge({ registryUrl: admin.url, apiKey: org.key, did: key.did, privateKey: key.privateKey, badgeTtl: 5 }))
    t.equal(ttl?.code, 'invalid_ttl', 'a badge TTL out of range')
    t.equal(ttl?.status, 400)

    const down = await sdkError(requestPopBadge({ registryUrl: 'http://127.0.0.1:1', apiKey: org.key, did: key.did, privateKey: key.privateKey }))
    t.equal(down?.code, 'registry_unreachable')
    t.equal(down?.status, null)

    const ok = await requestPopBadge({ registryUrl: admin.url, apiKey: org.key, did: key.did, privateKey: key.privateKey })
    t.equal(ok.subject, key.did, 'the right key still gets its badge afterwards')
  })

  await t.test('CLI: badge request --pop and badge verify', { timeout: 200_000 }, async (t) => {
    const key = generateAgentKey()
    await saveAgentKey(key, file('agent.json'))
    await createAgent(admin, org.key, { did: key.did })
    writeFileSync(file('api-key'), `${org.key}\n`, { mode: 0o600 })
    const base = ['badge', 'request', '--pop', '--registry', admin.url, '--api-key-file', file('api-key'), '--key', file('agent.json')]
    const [plain, asJson, wrongDid, noPop] = await Promise.all([
      cli([...base, '--ttl', '90']),
      cli([...base, '--json', '--audience', 'https://a.example.com,https://b.example.com']),
      cli([...base, '--did', generateAgentKey().did]),
      cli(['badge', 'request', '--registry', admin.url, '--api-key-file', file('api-key'), '--key', file('agent.json')]),
    ])
    t.equal(plain.code, 0, `request succeeds ${plain.stderr}`)
    const token = plain.stdout.trim()
    const verified = await verifyBadgeWithJwks(token, { jwksUrl: jwksUrlFor(admin.url), issuer })
    t.ok(verified.valid && verified.claims.sub === key.did && verified.claims.exp - verified.claims.iat === 90, 'the printed token is an IAL-1 badge with --ttl')
    t.equal(asJson.code, 0, asJson.stderr)
    const answer = JSON.parse(asJson.stdout) as { token: string; ial: string; subject: string }
    t.match(answer, { ial: '1', subject: key.did })
    const claims = await verifyBadgeWithJwks(answer.token, { jwksUrl: jwksUrlFor(admin.url), issuer })
    t.same(claims.valid && claims.claims.aud, ['https://a.example.com', 'https://b.example.com'], '--audience list')
    t.equal(wrongDid.code, 1, 'a DID the org has no agent for fails at run time')
    t.match(wrongDid.stderr, /agent_not_found \(404\)/, 'with the registry code')
    t.equal(noPop.code, 2, 'badge request without --pop is a usage error')
    for (const run of [plain, asJson, wrongDid, noPop]) {
      t.notOk(`${run.stdout}${run.stderr}`.includes(org.key), 'the API key never appears in the output')
      t.notOk(`${run.stdout}${run.stderr}`.includes(JSON.parse(JSON.stringify(key.privateKey.export({ format: 'jwk' }))).d as string), 'nor the private key')
    }

    writeFileSync(file('token'), `${token}\n`)
    const [good, fromFile, wrongIssuer, garbage, both] = await Promise.all([
      cli(['badge', 'verify', '--token', token, '--registry', admin.url, '--issuer', issuer]),
      cli(['badge', 'verify', '--token-file', file('token'), '--registry', admin.url, '--issuer', issuer]),
      cli(['badge', 'verify', '--token', token, '--registry', admin.url]),
      cli(['badge', 'verify', '--token', 'a.b.c', '--registry', admin.url, '--issuer', issuer]),
      cli(['badge', 'verify', '--token', token, '--token-file', file('token'), '--registry', admin.url]),
    ])
    t.equal(good.code, 0, good.stderr)
    t.match(JSON.parse(good.stdout), { valid: true, claims: { sub: key.did, ial: '1', iss: issuer } })
    t.equal(fromFile.code, 0, '--token-file')
    t.equal(wrongIssuer.code, 1, 'the issuer defaults to the registry URL, which is not this authority\'s CA_ISSUER_URL')
    t.strictSame(JSON.parse(wrongIssuer.stdout), { valid: false, error: 'BADGE_ISSUER_UNTRUSTED' })
    t.equal(garbage.code, 1)
    t.equal((JSON.parse(garbage.stdout) as { error: string }).error, 'BADGE_MALFORMED')
    t.equal(both.code, 2, '--token and --token-file together is a usage error')
  })
})
