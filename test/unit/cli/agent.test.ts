/**
 * The agent-side CLI commands (`agent-trust agent keygen`, `envelope mint`, `envelope inspect`) run as the
 * compiled CLI in child processes: files and modes, what is printed, chains the gateway's verifier
 * accepts, local refusals (exit 1) and usage errors (exit 2). `badge request --pop` and `badge verify`
 * need a registry and are run in test/integration/sdk/pop.test.ts.
 */
import t from 'tap'
import { execFile, execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { didKeyPublicKey, verifyChain } from '../../../src/core/envelope.js'
import { loadAgentKey } from '../../../src/sdk/keys.js'
import { runAgentCommand } from '../../../src/cli/agent.js'
import { CLI } from '../../helpers/compiled.js'

t.setTimeout(240_000)
const dir = mkdtempSync(path.join(tmpdir(), 'svc-agent-cli-'))
t.teardown(() => rmSync(dir, { recursive: true, force: true }))
const file = (name: string): string => path.join(dir, name)

interface Run { code: number; stdout: string; stderr: string }

function cli(args: string[]): Promise<Run> {
  return new Promise((resolve) => {
    execFile(process.execPath, [CLI, ...args], { timeout: 100_000, env: { ...process.env, SERVICE_LOG_LEVEL: 'silent' } }, (error, stdout, stderr) => {
      resolve({ code: error === null ? 0 : typeof error.code === 'number' ? error.code : 1, stdout, stderr: error?.killed === true ? `killed after the time-out ${stderr}` : stderr })
    })
  })
}

t.test('agent keygen, envelope mint and inspect through the CLI', { timeout: 200_000 }, async (t) => {
  const [a, b, c] = await Promise.all([
    cli(['agent', 'keygen', '--out', file('a.json'), '--public', file('a.pub.json')]),
    cli(['agent', 'keygen', '--out', file('b.json')]),
    cli(['agent', 'keygen', '--out', file('c.json')]),
  ])
  for (const run of [a, b, c]) t.equal(run.code, 0, `keygen succeeds ${run.stderr}`)
  t.equal(statSync(file('a.json')).mode & 0o777, 0o600, 'private key file 0600')
  const keyA = await loadAgentKey(file('a.json'))
  const keyB = await loadAgentKey(file('b.json'))
  const keyC = await loadAgentKey(file('c.json'))
  const printed = JSON.parse(a.stdout) as { did: string; kid: string; publicKeyJwk: unknown }
  t.equal(printed.did, keyA.did, 'prints the did:key of the written key')
  t.equal(printed.kid, keyA.kid, 'and its kid')
  t.strictSame(printed.publicKeyJwk, keyA.publicJwk)
  t.strictSame(JSON.parse(readFileSync(file('a.pub.json'), 'utf8')), keyA.publicJwk, '--public holds the public JWK')
  const d = keyA.privateKey.export({ format: 'jwk' }).d as string
  t.notOk(`${a.stdout}${a.stderr}`.includes(d), 'the private key is never printed')

  const before = readFileSync(file('a.json'), 'utf8')
  const again = await cli(['agent', 'keygen', '--out', file('a.json')])
  t.equal(again.code, 1, 'an existing key file is a runtime failure')
  t.match(again.stderr, /key_file_exists/)
  t.equal(readFileSync(file('a.json'), 'utf8'), before, 'and is not overwritten')

  const root = await cli([
    'envelope', 'mint', '--key', file('a.json'), '--issuer-badge-jti', 'jti-a', '--subject', keyB.did, '--subject-badge-jti', 'jti-b',
    '--class', 'payments.refund', '--depth', '1', '--ttl', '600', '--mode-min', 'EM-GUARD', '--constraints', '{"max_amount":100}',
    '--prompt-summary', 'refund order 42',
  ])
  t.equal(root.code, 0, `root mint ${root.stderr}`)
  const rootJws = root.stdout.trim()
  t.match(rootJws, /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/, 'prints one compact JWS')
  writeFileSync(file('root.jws'), `${rootJws}\n`)

  const [inspected, child, wider, longer, deeper, wrongIssuer, childWithTxn] = await Promise.all([
    cli(['envelope', 'inspect', '--file', file('root.jws')]),
    cli(['envelope', 'mint', '--key', file('b.json'), '--issuer-badge-jti', 'jti-b', '--subject', keyC.did, '--subject-badge-jti', 'jti-c', '--parent', file('root.jws'), '--class', 'payments.refund.small']),
    cli(['envelope', 'mint', '--key', file('b.json'), '--issuer-badge-jti', 'jti-b', '--subject', keyC.did, '--subject-badge-jti', 'jti-c', '--parent', file('root.jws'), '--class', 'payments']),
    cli(['envelope', 'mint', '--key', file('b.json'), '--issuer-badge-jti', 'jti-b', '--subject', keyC.did, '--subject-badge-jti', 'jti-c', '--parent', file('root.jws'), '--ttl', '100000']),
    cli(['envelope', 'mint', '--key', file('b.json'), '--issuer-badge-jti', 'jti-b', '--subject', keyC.did, '--subject-badge-jti', 'jti-c', '--parent', file('root.jws'), '--depth', '1']),
    cli(['envelope', 'mint', '--key', file('c.json'), '--issuer-badge-jti', 'jti-c', '--subject', keyB.did, '--subject-badge-jti', 'jti-b', '--parent', file('root.jws')]),
    cli(['envelope', 'mint', '--key', file('b.json'), '--issuer-badge-jti', 'jti-b', '--subject', keyC.did, '--subject-badge-jti', 'jti-c', '--parent', file('root.jws'), '--txn', 'x']),
  ])
  t.equal(inspected.code, 0, inspected.stderr)
  const view = JSON.parse(inspected.stdout) as { verified: boolean; note: string; header: Record<string, unknown>; payload: Record<string, unknown> }
  t.equal(view.verified, false, 'inspect says it is unverified')
  t.match(view.note, /NOT checked/)
  t.strictSame(view.header, { alg: 'EdDSA', typ: 'service-authority-envelope+jws', kid: keyA.kid })
  t.match(view.payload, {
    issuer_did: keyA.did, subject_did: keyB.did, capability_class: 'payments.refund', constraints: { max_amount: 100 },
    delegation_depth_remaining: 1, enforcement_mode_min: 'EM-GUARD', issuer_badge_jti: 'jti-a', subject_badge_jti: 'jti-b',
    parent_authority_hash: null, prompt_summary: 'refund order 42',
  })
  t.equal((view.payload.expires_at as number) - (view.payload.issued_at as number), 600, '--ttl')

  t.equal(child.code, 0, `child mint ${child.stderr}`)
  const childJws = child.stdout.trim()
  const childView = JSON.parse((await cli(['envelope', 'inspect', '--jws', childJws])).stdout) as { payload: Record<string, unknown> }
  t.match(childView.payload, { txn_id: view.payload.txn_id, issuer_did: keyB.did, subject_did: keyC.did, capability_class: 'payments.refund.small', delegation_depth_remaining: 0, expires_at: view.payload.expires_at })

  // The two printed envelopes form a chain the gateway's verifier accepts (badges stubbed by jti).
  const verdict = await verifyChain([rootJws, childJws], { [keyA.did]: 'badge-a', [keyB.did]: 'badge-b' }, {
    now: Math.floor(Date.now() / 1000), maxDepth: 10, orgTrustBoundary: null, caller: { did: keyC.did, jti: 'jti-c' },
    resolveKey: didKeyPublicKey,
    verifyBadge: (token) => ({ 'badge-a': { did: keyA.did, jti: 'jti-a' }, 'badge-b': { did: keyB.did, jti: 'jti-b' } } as Record<string, { did: string; jti: string }>)[token] ?? null,
  })
  t.ok(verdict.ok, `the CLI's chain verifies ${JSON.stringify(verdict)}`)

  for (const [label, run, code] of [
    ['a wider class', wider, 'ENVELOPE_NARROWING_VIOLATION'],
    ['outliving the parent', longer, 'ENVELOPE_NARROWING_VIOLATION'],
    ['depth not reduced', deeper, 'ENVELOPE_NARROWING_VIOLATION'],
    ['an issuer that is not the parent\'s subject', wrongIssuer, 'ENVELOPE_CHAIN_BROKEN'],
  ] as const) {
    t.equal(run.code, 1, `${label}: refused (exit 1)`)
    t.match(run.stderr, new RegExp(code), `${label}: ${code}`)
    t.equal(run.stdout, '', `${label}: nothing printed`)
  }
  t.equal(childWithTxn.code, 2, '--txn with --parent is a usage error')
})

t.test('usage errors exit 2 with the usage text; help exits 0', { timeout: 200_000 }, async (t) => {
  const runs = await Promise.all([
    cli(['agent', 'keygen']),
    cli(['envelope']),
    cli(['envelope', 'mint', '--key', file('x.json'), '--issuer-badge-jti', 'j', '--subject', 'did:key:z6Mk', '--class', 'a', '--mode-min', 'EM-LAX']),
    cli(['envelope', 'mint', '--key', file('x.json'), '--issuer-badge-jti', 'j', '--subject', 'did:key:z6Mk', '--class', 'a', '--constraints', '[1]']),
    cli(['envelope', 'mint', '--key', file('x.json'), '--issuer-badge-jti', 'j', '--subject', 'did:key:z6Mk', '--class', 'a', '--depth', '-1']),
    cli(['envelope', 'inspect']),
    cli(['badge', 'verify', '--registry', 'http://127.0.0.1:1']),
    cli(['agent', 'keygen', '--out']),
    cli(['agent', 'keygen', '--out', file('y.json'), 'extra']),
  ])
  runs.forEach((run, i) => {
    t.equal(run.code, 2, `case ${i}: exit 2 ${run.stderr.split('\n')[0]}`)
    t.match(run.stderr, /agent keygen --out FILE/, `case ${i}: usage printed`)
    t.equal(run.stdout, '', `case ${i}: nothing on stdout`)
  })
  const typo = await cli(['agent', 'frobnicate'])
  t.equal(typo.code, 2, 'an unknown subcommand: exit 2')
  t.equal(typo.stderr, 'agent-trust: unknown command "agent frobnicate" ("agent-trust agent --help" lists its commands)\n', 'one line, not the usage')
  const help = await cli(['agent', 'help'])
  t.equal(help.code, 0)
  t.match(help.stdout, /badge request --pop/)
  t.match(help.stdout, /never\s+from\s+the\s+command\s+line/, 'the usage says why the API key comes from a file')
  const inspectGarbage = await cli(['envelope', 'inspect', '--jws', 'nope'])
  t.equal(inspectGarbage.code, 1, 'a malformed envelope is a runtime failure')
  t.match(inspectGarbage.stderr, /ENVELOPE_MALFORMED/)
  t.notMatch(inspectGarbage.stderr, /at .*\.js:\d+/, 'no stack trace')
})

t.test('runAgentCommand in-process writes through the given io', async (t) => {
  let out = ''
  let err = ''
  const io = { stdout: (s: string) => { out += s }, stderr: (s: string) => { err += s } }
  t.equal(await runAgentCommand('agent', ['keygen', '--out', file('io.json')], io), 0)
  t.equal(JSON.parse(out).did, (await loadAgentKey(file('io.json'))).did)
  t.match(err, /mode 0600/)
  t.equal(await runAgentCommand('envelope', ['nope'], io), 2)
})

t.test('agent keygen warns when the key file would be committed by "git add ."', async (t) => {
  const repo = file('repo')
  execFileSync('git', ['init', '-q', repo])
  const exposed = await cli(['agent', 'keygen', '--out', path.join(repo, 'bot.jwk')])
  t.equal(exposed.code, 0, 'the key is still written')
  t.match(exposed.stderr, /^warning: \S+bot\.jwk is inside a git work tree and not ignored: "git add \." would commit the private key/m)
  writeFileSync(path.join(repo, '.gitignore'), '*.jwk\n')
  const ignored = await cli(['agent', 'keygen', '--out', path.join(repo, 'other.jwk')])
  t.equal(ignored.code, 0)
  t.notMatch(ignored.stderr, /warning/, 'an ignored file: no warning')
  const outside = await cli(['agent', 'keygen', '--out', file('outside.jwk')])
  t.equal(outside.code, 0)
  t.notMatch(outside.stderr, /warning/, 'outside any work tree: no warning')
})
