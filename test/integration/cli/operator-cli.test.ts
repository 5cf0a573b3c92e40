/**
 * The operator commands (`agents`, `badges`, `policy`, `orgs create`) as a scripter runs them: the compiled
 * CLI in child processes against a real admin plane (port 0) and database. The workflow end to end (an
 * agent, a badge issued, verified, revoked; policies proposed, listed, approved, rejected with a reason;
 * simulations that allow and deny), a member key refused a write, and the one-line errors for a missing or
 * wrong key, an unreachable registry and bad input. Policy commands get --org here; the org from GET /v1/me
 * (and `whoami`, `orgs list`) is tested in operator-cli-me.test.ts.
 */
import t from 'tap'
import { execFile } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { stringify } from 'yaml'
import { createOrg, startTestAdmin } from '../../helpers/admin.js'
import { CLI } from '../../helpers/compiled.js'

t.setTimeout(280_000)
const dir = mkdtempSync(path.join(tmpdir(), 'svc-operator-cli-'))
t.teardown(() => rmSync(dir, { recursive: true, force: true }))
const file = (name: string): string => path.join(dir, name)

interface Run { code: number; stdout: string; stderr: string }

const admin = await startTestAdmin(t)
const org = await createOrg(admin, 'cli-org')
const member = await admin.request('POST', '/v1/keys', { key: org.key, body: { name: 'reader', role: 'member' } })
const memberKey = member.body.data.key as string
/** Every key the tests hold: none may ever appear in what the CLI prints. */
const secrets = [admin.operatorKey, org.key, memberKey]
const printed: string[] = []

/** The CLI with only the environment given (not the test's), so nothing leaks in from the outside. */
function cli(args: string[], env: Record<string, string> = { SERVICE_REGISTRY_KEY: org.key }, input?: string): Promise<Run> {
  return new Promise((resolve) => {
    const child = execFile(process.execPath, [CLI, ...args], {
      timeout: 60_000, env: { PATH: process.env.PATH ?? '', SERVICE_REGISTRY_URL: admin.url, ...env },
    }, (error, stdout, stderr) => {
      printed.push(stdout, stderr)
      resolve({ code: error === null ? 0 : typeof error.code === 'number' ? error.code : 1, stdout, stderr })
    })
    child.stdin?.end(input ?? '')
  })
}

async function cliJson(args: string[], env?: Record<string, string>): Promise<any> {
  const run = await cli([...args, '--json'], env)
  if (run.code !== 0) throw new Error(`${args.join(' ')}: exit ${run.code}: ${run.stderr}`)
  return JSON.parse(run.stdout)
}

const NO_STACK = /\n\s+at |\.js:\d+/

t.test('agents and badges: create, list, show, disable, enable; issue, verify, revoke', async (t) => {
  const created = await cli(['agents', 'create', '--name', 'weather-bot', '--domain', 'weather.example.com', '--description', 'Forecasts'])
  t.equal(created.code, 0, created.stderr)
  t.match(created.stdout, /^id\s+[0-9a-f-]{36}$/m, 'a label-value list')
  t.match(created.stdout, /^status\s+enabled$/m)
  const id = /^id\s+(\S+)$/m.exec(created.stdout)?.[1] as string

  const list = await cli(['agents', 'list'])
  t.equal(list.code, 0, list.stderr)
  t.match(list.stdout, /^ID\s+NAME\s+DOMAIN\s+STATUS\s+LEVEL\s+DID$/m, 'a table with headers')
  t.match(list.stdout, new RegExp(`^${id}\\s+weather-bot\\s+weather\\.example\\.com\\s+enabled\\s+1\\s+did:web:`, 'm'))
  const listed = await cliJson(['agents', 'list', '--limit', '1'])
  t.equal(listed.data.length, 1, '--json: {data, nextCursor}')
  t.ok('nextCursor' in listed)

  const shown = await cliJson(['agents', 'show', id])
  t.match(shown, { id, name: 'weather-bot', domain: 'weather.example.com', description: 'Forecasts', status: 'enabled', trustLevel: '1' })

  const disabled = await cli(['agents', 'disable', id])
  t.equal(disabled.code, 0, disabled.stderr)
  t.match(disabled.stdout, /^status\s+disabled$/m)
  const refused = await cli(['badges', 'issue', id, '--domain', 'weather.example.com'])
  t.equal(refused.code, 1, 'a disabled agent gets no badge')
  t.match(refused.stderr, /^agent-trust: agent_disabled \(403\): /)
  t.equal((await cliJson(['agents', 'enable', id])).status, 'enabled')

  const badge = await cliJson(['badges', 'issue', id, '--domain', 'weather.example.com', '--ttl', '120', '--audience', 'https://api.example.com'])
  t.match(badge, { jti: String, token: String, trustLevel: '1', ial: '0' })
  const tableIssue = await cli(['badges', 'issue', id, '--domain', 'weather.example.com'])
  t.match(tableIssue.stdout, /^token\s+ey[\w-]+\.[\w-]+\.[\w-]+$/m, 'the table shows the token')

  const valid = await cli(['badges', 'verify', badge.token])
  t.equal(valid.code, 0, valid.stderr)
  t.match(valid.stdout, /^valid\s+yes$/m)
  t.match(valid.stdout, new RegExp(`^jti\\s+${badge.jti}$`, 'm'))
  t.match(valid.stdout, /^audience\s+\["https:\/\/api\.example\.com"\]$/m)
  const fromStdin = await cli(['badges', 'verify', '-', '--json'], undefined, `${badge.token}\n`)
  t.match(JSON.parse(fromStdin.stdout), { valid: true, claims: { jti: badge.jti } }, 'the badge from standard input')

  const revoked = await cli(['badges', 'revoke', badge.jti, '--reason', 'rotated'])
  t.equal(revoked.code, 0, revoked.stderr)
  t.match(revoked.stdout, /^revoked\s+yes$/m)
  t.match(revoked.stdout, /^reason\s+rotated$/m)
  const after = await cli(['badges', 'verify', badge.token])
  t.equal(after.code, 1, 'a revoked badge: exit 1')
  t.match(after.stdout, /^valid\s+no\nerror\s+BADGE_REVOKED$/m)
  t.equal((await admin.request('GET', `/v1/badges/${badge.jti}/status`, { key: null })).body.data.reason, 'rotated', 'the registry kept the reason')

  const garbage = await cli(['badges', 'verify', 'not-a-badge', '--json'])
  t.equal(garbage.code, 1)
  t.match(JSON.parse(garbage.stdout), { valid: false, error: String })

  const missing = await cli(['agents', 'show', '00000000-0000-4000-8000-000000000000'])
  t.equal(missing.code, 1)
  t.equal(missing.stderr, 'agent-trust: agent_not_found (404): The agent does not exist.\n', 'one line with the registry\'s code')
})

t.test('policy workflow: propose, list, approve, show; reject with a reason; simulate allow and deny', async (t) => {
  const agent = await cliJson(['agents', 'create', '--name', 'policy-subject'])
  const orgArgs = ['--org', org.orgId]
  writeFileSync(file('org.yaml'), stringify({
    version: '1',
    operations: [{ pattern: 'GET /private/**', allowed_dids: [] }, { pattern: 'a2a.message.*', min_trust_level: 'OV' }],
    mcp_tools: [{ tool: 'delete_*', allowed_dids: [] }],
  }))

  const proposed = await cli(['policy', 'propose', '--scope', 'org', '--file', file('org.yaml'), ...orgArgs])
  t.equal(proposed.code, 0, proposed.stderr)
  t.match(proposed.stdout, /^state\s+proposal$/m)
  t.match(proposed.stdout, /^scope\s+org$/m)
  const proposalId = /^id\s+(\S+)$/m.exec(proposed.stdout)?.[1] as string
  t.match(proposed.stderr, `approve with: agent-trust policy approve ${proposalId}`)
  t.notMatch(proposed.stderr, /active document/, 'a scope without a document: nothing to replace, nothing said')

  const proposals = await cli(['policy', 'proposals', ...orgArgs])
  t.equal(proposals.code, 0, proposals.stderr)
  t.match(proposals.stdout, /^ID\s+SCOPE\s+VERSION\s+PROPOSED BY\s+CREATED$/m)
  t.match(proposals.stdout, new RegExp(`^${proposalId}\\s+org\\s+1\\s`, 'm'))

  const noneYet = await cli(['policy', 'show', '--scope', 'org', ...orgArgs])
  t.equal(noneYet.code, 1)
  t.match(noneYet.stderr, /^agent-trust: policy_not_found \(404\)/)

  const approved = await cli(['policy', 'approve', proposalId, ...orgArgs])
  t.equal(approved.code, 0, approved.stderr)
  t.match(approved.stdout, /^state\s+active$/m)
  const shown = await cli(['policy', 'show', '--scope', 'org', ...orgArgs])
  t.equal(shown.code, 0, shown.stderr)
  t.match(shown.stdout, /^version\s+1$/m)
  t.ok(shown.stdout.endsWith(readFileSync(file('org.yaml'), 'utf8')), 'the YAML follows the document\'s fields')
  t.equal((await cliJson(['policy', 'proposals', ...orgArgs])).length, 0, 'no proposal left')

  // Another org proposal would replace the active document whole: refused without --replace, saying what goes.
  writeFileSync(file('org2.yaml'), 'version: "1"\noperations:\n  - pattern: GET /reports/**\n    min_trust_level: DV\n')
  const unannounced = await cli(['policy', 'propose', '--scope', 'org', '--file', file('org2.yaml'), ...orgArgs])
  t.equal(unannounced.code, 1, 'refused without --replace')
  t.equal(unannounced.stdout, '')
  t.match(unannounced.stderr, /^agent-trust policy propose: the org scope has an active document, version 1 \(sha256:[0-9a-f]{64}, active since \S+\); approving this proposal replaces it whole:\n/, 'the active version')
  t.match(unannounced.stderr, /^ {2}- mcp_tools:$/m, 'a line that would go')
  t.match(unannounced.stderr, /^ {2}\+ {5}min_trust_level: DV$/m, 'a line that would come')
  t.notMatch(unannounced.stderr, /^ {2}[-+] operations:$/m, 'unchanged lines are not shown')
  t.match(unannounced.stderr, /^ {2}7 lines removed, 2 added, 2 unchanged$/m, 'the counts')
  t.match(unannounced.stderr, /\nnothing proposed: give --replace to propose it anyway \("agent-trust policy show --scope org" prints the active document\)\n$/)
  t.equal((await cliJson(['policy', 'proposals', ...orgArgs])).length, 0, 'nothing was proposed')
  const replacing = await cli(['policy', 'propose', '--scope', 'org', '--file', file('org2.yaml'), '--replace', '--json', ...orgArgs])
  t.equal(replacing.code, 0, replacing.stderr)
  const replacement = JSON.parse(replacing.stdout)
  t.match(replacement, { state: 'proposal', scope_type: 'org', version: 2 }, '--replace: proposed, JSON on stdout as usual')
  t.match(replacing.stderr, /active document, version 1 [\s\S]*\n--replace: proposed\n/, 'what it replaces is still said')
  t.equal((await cli(['policy', 'reject', replacement.id, '--reason', 'the first one stays', ...orgArgs])).code, 0)
  const unchanged = await cli(['policy', 'propose', '--scope', 'org', '--file', file('org.yaml'), ...orgArgs])
  t.equal(unchanged.code, 1, 'the same text again is refused too')
  t.match(unchanged.stderr, /^ {2}\(the same text\)\n {2}0 lines removed, 0 added, 9 unchanged$/m)

  // An agent-scope proposal from standard input, rejected with a reason.
  const pending = await cli(['policy', 'propose', '--scope', `agent:${agent.id}`, '--file', '-', '--json', ...orgArgs], undefined, 'version: "1"\nmin_trust_level: EV\n')
  t.equal(pending.code, 0, pending.stderr)
  const pendingDoc = JSON.parse(pending.stdout)
  t.match(pendingDoc, { scope_type: 'agent', scope_id: agent.id, state: 'proposal' })
  t.match((await cli(['policy', 'proposals', ...orgArgs])).stdout, new RegExp(`^${pendingDoc.id}\\s+agent:${agent.id}\\s`, 'm'))

  const simulate = async (...args: string[]): Promise<Run> => cli(['policy', 'simulate', '--agent', agent.id, ...orgArgs, ...args])
  // With the pending proposal in force (--proposal) the EV minimum denies what the active policy allows.
  const asIfApproved = await simulate('--operation', 'GET /public', '--trust-level', 'DV', '--proposal', pendingDoc.id)
  t.match(asIfApproved.stdout, /^decision\s+DENY$/m, `--proposal ${asIfApproved.stderr}`)
  t.match(asIfApproved.stdout, /^required level\s+EV$/m)

  const rejected = await cli(['policy', 'reject', pendingDoc.id, '--reason', 'EV is too strict for now', ...orgArgs])
  t.equal(rejected.code, 0, rejected.stderr)
  t.match(rejected.stdout, /^state\s+rejected$/m)
  t.match(rejected.stdout, /^rejection reason\s+EV is too strict for now$/m)
  const again = await cli(['policy', 'approve', pendingDoc.id, ...orgArgs])
  t.equal(again.code, 1, 'a rejected proposal cannot be approved')
  t.match(again.stderr, /proposal_not_pending \(400\)/)

  for (const [args, decision, reason] of [
    [['--operation', 'GET /public/x'], 'ALLOW', null],
    [['--operation', 'GET /private/x'], 'DENY', 'operation_not_in_allow_list'],
    [['--mcp-tool', 'search'], 'ALLOW', null],
    [['--mcp-tool', 'delete_file'], 'DENY', null],
    [['--a2a-method', 'message/send', '--skill', 'refunds', '--trust-level', 'DV'], 'DENY', 'operation_trust_level_below_minimum'],
    [['--a2a-method', 'message/send', '--skill', 'refunds', '--trust-level', '3'], 'ALLOW', null],
  ] as const) {
    const run = await simulate(...args)
    t.equal(run.code, 0, `${args.join(' ')}: exit 0 whatever the decision ${run.stderr}`)
    t.match(run.stdout, new RegExp(`^decision\\s+${decision}$`, 'm'), `${args.join(' ')}: ${decision}`)
    if (reason !== null) t.match(run.stdout, new RegExp(`^reason\\s+${reason}$`, 'm'))
    t.match(run.stdout, /^decision id\s+\S+$/m, 'a decision id')
  }
  const asJson = await cliJson(['policy', 'simulate', '--agent', agent.id, '--operation', 'GET /private/x', ...orgArgs])
  t.match(asJson, { decision: 'DENY', reason: 'operation_not_in_allow_list', decision_id: String })

  writeFileSync(file('bad.yaml'), 'version: "1"\nmin_trust_level: ZZ\nsurprise: true\n')
  const invalid = await cli(['policy', 'propose', '--scope', 'org', '--file', file('bad.yaml'), '--replace', ...orgArgs])
  t.equal(invalid.code, 1)
  const lines = invalid.stderr.trimEnd().split('\n')
  t.match(lines[0], /^agent-trust: invalid_policy \(400\): /)
  t.ok(lines.length >= 3, 'every problem on a line of its own')
  t.ok(lines.slice(1).some((line) => line.includes('surprise')), 'the unknown key is named')
})

t.test('orgs create: operator only; the new admin key printed once, or written to a 0600 file', async (t) => {
  const operator = { SERVICE_REGISTRY_KEY: admin.operatorKey }
  const printedKey = await cli(['orgs', 'create', 'cli-made'], operator)
  t.equal(printedKey.code, 0, printedKey.stderr)
  t.match(printedKey.stdout, /^admin key\s+sk_\S+\s+\(shown once\)$/m)

  const toFile = await cli(['orgs', 'create', 'cli-made-2', '--key-out', file('org2.key'), '--json'], operator)
  t.equal(toFile.code, 0, toFile.stderr)
  const answer = JSON.parse(toFile.stdout)
  t.match(answer, { org: { name: 'cli-made-2' }, apiKey: { keyFile: file('org2.key') } })
  t.notOk('key' in answer.apiKey, 'the key is not printed')
  t.equal(statSync(file('org2.key')).mode & 0o777, 0o600)
  const newKey = readFileSync(file('org2.key'), 'utf8').trim()
  secrets.push(newKey)
  const asNewOrg = await cliJson(['agents', 'list', '--key-file', file('org2.key')], {})
  t.same(asNewOrg.data, [], 'the written key works (--key-file), in its own empty org')

  const exists = await cli(['orgs', 'create', 'cli-made-3', '--key-out', file('org2.key')], operator)
  t.equal(exists.code, 2, 'an existing key file is refused before anything is created')
  t.match(exists.stderr, /never overwritten/)
  t.equal(readFileSync(file('org2.key'), 'utf8').trim(), newKey)

  const notOperator = await cli(['orgs', 'create', 'nope'])
  t.equal(notOperator.code, 1)
  t.equal(notOperator.stderr, 'agent-trust: operator_required (403): Only an operator credential may do this.\n')
})

t.test('a member key is refused every write with a clear message; reads work', async (t) => {
  const asMember = { SERVICE_REGISTRY_KEY: memberKey }
  t.equal((await cli(['agents', 'list'], asMember)).code, 0, 'a member reads')
  const agent = await cliJson(['agents', 'create', '--name', 'member-target'])
  writeFileSync(file('member.yaml'), 'version: "1"\nmin_trust_level: REG\n')
  for (const args of [
    ['agents', 'create', '--name', 'by-member'],
    ['agents', 'disable', agent.id],
    ['policy', 'propose', '--scope', 'org', '--file', file('member.yaml'), '--replace', '--org', org.orgId],
  ]) {
    const run = await cli(args, asMember)
    t.equal(run.code, 1, `${args.slice(0, 2).join(' ')}: exit 1`)
    t.equal(run.stderr, 'agent-trust: forbidden (403): This action needs the admin role.\n', `${args.slice(0, 2).join(' ')}: one clear line`)
    t.equal(run.stdout, '')
  }
  t.equal((await cliJson(['agents', 'show', agent.id])).status, 'enabled', 'nothing changed')
})

t.test('missing or refused key, unreachable registry, bad input: one line, the right exit code', async (t) => {
  const noKey = await cli(['agents', 'list'], {})
  t.equal(noKey.code, 2)
  t.equal(noKey.stderr, 'agent-trust agents list: no API key: set SERVICE_REGISTRY_KEY, or give --key-file FILE or --key-env NAME\n')

  const noRegistry = await cli(['agents', 'list'], { SERVICE_REGISTRY_URL: '' })
  t.equal(noRegistry.code, 2)
  t.match(noRegistry.stderr, /^agent-trust agents list: no registry: give --registry URL or set SERVICE_REGISTRY_URL\n$/)

  const unsetEnv = await cli(['agents', 'list', '--key-env', 'MY_KEY'], {})
  t.equal(unsetEnv.code, 2)
  t.equal(unsetEnv.stderr, 'agent-trust agents list: no API key in MY_KEY\n')
  t.equal((await cli(['agents', 'list', '--key-env', 'MY_KEY'], { MY_KEY: org.key })).code, 0, '--key-env names the variable')

  const noFile = await cli(['agents', 'list', '--key-file', file('absent.key')], {})
  t.equal(noFile.code, 2)
  t.match(noFile.stderr, /^agent-trust agents list: --key-file \S+absent\.key cannot be read \(ENOENT\)\n$/)

  const wrong = await cli(['agents', 'list'], { SERVICE_REGISTRY_KEY: 'sk_not_a_real_key' })
  t.equal(wrong.code, 1)
  t.match(wrong.stderr, /^agent-trust: unauthorized \(401\): .*\(the API key from SERVICE_REGISTRY_KEY was not accepted\)\n$/)
  t.notMatch(wrong.stderr, /sk_not_a_real_key/, 'the refused key is not echoed')

  const broken = await cli(['agents', 'list'], { SERVICE_REGISTRY_KEY: `${org.key}\nX-Injected: 1` })
  t.equal(broken.code, 2)
  t.equal(broken.stderr, 'agent-trust agents list: the API key in SERVICE_REGISTRY_KEY holds spaces or control characters\n')

  const unreachable = await cli(['agents', 'list', '--registry', 'http://127.0.0.1:1'])
  t.equal(unreachable.code, 1)
  t.equal(unreachable.stderr, 'agent-trust: registry_unreachable: The registry at http://127.0.0.1:1 could not be reached.\n')
  const notUrl = await cli(['agents', 'list', '--registry', 'ftp://registry'])
  t.equal(notUrl.code, 2)
  t.equal(notUrl.stderr, 'agent-trust agents list: --registry is not an http(s) URL\n')

  const agent = '00000000-0000-4000-8000-000000000000'
  for (const [args, message] of [
    [['policy', 'simulate', '--agent', agent, '--org', org.orgId], 'give exactly one of --operation OP, --mcp-tool NAME and --a2a-method M'],
    [['policy', 'simulate', '--agent', agent, '--operation', 'x', '--mcp-tool', 'y'], 'give exactly one of --operation OP, --mcp-tool NAME and --a2a-method M'],
    [['policy', 'simulate', '--agent', agent, '--operation', 'x', '--skill', 's'], '--skill goes with --a2a-method'],
    [['policy', 'simulate', '--agent', agent, '--operation', 'x', '--trust-level', 'HIGH'], '--trust-level must be one of SS, REG, DV, OV, EV (or 0-4)'],
    [['policy', 'simulate', '--agent', 'bot'], '--agent "bot" is not a UUID'],
    [['policy', 'show', '--scope', 'team:1'], '--scope must be org, group:ID or agent:ID, not "team:1"'],
    [['policy', 'show'], '--scope is required'],
    [['policy', 'reject', agent], '--reason is required'],
    [['policy', 'approve'], 'which proposal id? (a UUID)'],
    [['agents', 'show', '../keys'], 'agent id "../keys" is not a UUID'],
    [['agents', 'list', '--limit', '0'], '--limit must be an integer from 1 to 500'],
    [['agents', 'list', 'extra'], 'unexpected arguments: extra'],
    [['agents', 'create'], '--name is required'],
    [['badges', 'revoke', '..'], '".." is not an id'],
    [['badges', 'issue', agent, '--ttl', '5', '--domain', 'd'], '--ttl must be an integer from 60 to 3600'],
    [['agents', 'list', '--key-file', 'a', '--key-env', 'B'], 'give --key-file or --key-env, not both'],
    [['policy', 'propose', '--scope', 'org', '--file', '-', '--key-file', '-'], '--file - cannot read standard input when --key-file - does'],
  ] as const) {
    const run = await cli([...args])
    const name = `${args[0]} ${args[1] ?? ''}`.trim()
    t.equal(run.code, 2, `${args.join(' ')}: exit 2`)
    t.equal(run.stderr, `agent-trust ${name}: ${message} ("agent-trust ${name} --help" shows the usage)\n`, `${args.join(' ')}: one line`)
    t.equal(run.stdout, '')
  }
  const missingFile = await cli(['policy', 'propose', '--scope', 'org', '--file', file('absent.yaml'), '--org', org.orgId])
  t.equal(missingFile.code, 1)
  t.match(missingFile.stderr, /^agent-trust policy propose: ENOENT: no such file or directory, open '.*absent\.yaml'\n$/)

  t.ok(printed.length > 100, 'every run so far is checked')
  t.same(printed.filter((text) => NO_STACK.test(text)), [], 'no stack trace anywhere')
  t.same(printed.filter((text) => secrets.some((secret) => text.includes(secret))), [], 'no API key is ever printed')
})

t.test('--help of every operator command; the policy group lists its commands', async (t) => {
  const group = await cli(['policy', '--help'], {})
  t.equal(group.code, 0)
  for (const sub of ['show', 'propose', 'proposals', 'approve', 'reject', 'simulate']) t.match(group.stdout, new RegExp(`^  policy ${sub} `, 'm'))
  const simulate = await cli(['policy', 'simulate', '--help'], {})
  t.equal(simulate.code, 0)
  t.match(simulate.stdout, /^usage: agent-trust policy simulate --agent ID/)
  t.match(simulate.stdout, /never from the command line/)
})
