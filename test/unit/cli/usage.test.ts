/**
 * The command is installed as `agent-trust` (not `service`, which is Debian's /usr/sbin/service), and
 * `--help`, `-h` and `--version` work at the top level and for every subcommand: help exits 0 and
 * prints a usage line naming the command and the options its parser reads; --version prints
 * package.json's version. Run as the compiled CLI in child processes, as a user would.
 */
import t from 'tap'
import { execFile } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { projectPath } from '../../../src/core/paths.js'
import { CLI } from '../../helpers/compiled.js'

const PACKAGE = JSON.parse(readFileSync(projectPath('package.json'), 'utf8')) as { version: string; bin: Record<string, string> }
const dataDir = mkdtempSync(path.join(tmpdir(), 'svc-cli-help-'))
t.teardown(() => rmSync(dataDir, { recursive: true, force: true }))

interface Run { code: number | null; stdout: string; stderr: string }

function cli(args: string[]): Promise<Run> {
  return new Promise((resolve) => {
    // A throw-away database and data directory: if --help were not understood, nothing real is touched.
    const env = { PATH: process.env.PATH, DATABASE_URL: 'memory://', SERVICE_DATA_DIR: dataDir, PORT: '0', SERVICE_GATEWAY_PORT: '0', SERVICE_HOST: '127.0.0.1', SERVICE_LOG_LEVEL: 'silent' }
    execFile(process.execPath, [CLI, ...args], { timeout: 30_000, env }, (error, stdout, stderr) => {
      resolve({ code: error === null ? 0 : typeof error.code === 'number' ? error.code : null, stdout, stderr })
    })
  })
}

/** Every subcommand and the options its parser reads (from src/cli). */
const COMMANDS: Record<string, string[]> = {
  serve: [],
  gateway: [],
  migrate: [],
  'check-config': ['--table', '--schema'],
  bootstrap: [],
  'keys create': ['--operator', '--name'],
  'keys rotate': [],
  'keys retire': ['<kid>', '--force'],
  'breakglass keygen': ['--private', '--public'],
  'breakglass issue': ['--key', '--sub', '--reason', '--ttl', '--methods', '--routes', '--iss'],
  'agent keygen': ['--out', '--public'],
  'badge request': ['--pop', '--registry', '--api-key-file', '--key', '--did', '--kid', '--ttl', '--audience', '--json'],
  'badge verify': ['--token', '--token-file', '--registry', '--issuer', '--audience', '--self-signed'],
  'envelope mint': ['--key', '--issuer-badge-jti', '--subject', '--subject-badge-jti', '--class', '--parent', '--depth', '--ttl', '--mode-min', '--constraints', '--issuer', '--kid', '--txn', '--prompt-summary'],
  'envelope inspect': ['--jws', '--file'],
  whoami: ['--registry', '--key-file', '--key-env', '--json'],
  'orgs list': ['--limit', '--cursor', '--registry', '--key-file', '--key-env', '--json'],
  'orgs create': ['NAME', '--key-out', '--registry', '--key-file', '--key-env', '--json'],
  'agents list': ['--q', '--limit', '--cursor', '--registry', '--key-file', '--key-env', '--json'],
  'agents show': ['AGENT_ID', '--registry', '--key-file', '--key-env', '--json'],
  'agents create': ['--name', '--domain', '--description', '--did', '--registry', '--key-file', '--key-env', '--json'],
  'agents enable': ['AGENT_ID', '--registry', '--key-file', '--key-env', '--json'],
  'agents disable': ['AGENT_ID', '--registry', '--key-file', '--key-env', '--json'],
  'badges issue': ['AGENT', '--domain', '--ttl', '--trust-level', '--audience', '--registry', '--key-file', '--key-env', '--json'],
  'badges revoke': ['JTI', '--reason', '--registry', '--key-file', '--key-env', '--json'],
  'badges verify': ['TOKEN|-', '--audience', '--registry', '--key-file', '--key-env', '--json'],
  'policy show': ['--scope', '--org', '--registry', '--key-file', '--key-env', '--json'],
  'policy propose': ['--scope', '--file', '--replace', '--org', '--registry', '--key-file', '--key-env', '--json'],
  'policy proposals': ['--org', '--registry', '--key-file', '--key-env', '--json'],
  'policy approve': ['PROPOSAL_ID', '--org', '--registry', '--key-file', '--key-env', '--json'],
  'policy reject': ['PROPOSAL_ID', '--reason', '--org', '--registry', '--key-file', '--key-env', '--json'],
  'policy simulate': ['--agent', '--operation', '--mcp-tool', '--a2a-method', '--skill', '--trust-level', '--proposal', '--org', '--registry', '--key-file', '--key-env', '--json'],
}

const escape = (text: string): string => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')

t.test('package.json installs the command as agent-trust, and no longer as service', async (t) => {
  t.same(Object.keys(PACKAGE.bin), ['agent-trust'])
  t.equal(PACKAGE.bin['agent-trust'], 'dist/src/cli/index.js')
})

t.test('top level: --help, -h and help list every command; --version prints the package version', async (t) => {
  for (const flag of ['--help', '-h', 'help']) {
    const run = await cli([flag])
    t.equal(run.code, 0, `${flag} exits 0`)
    t.match(run.stdout, /^usage: agent-trust /, `${flag}: a usage line naming agent-trust`)
    for (const command of Object.keys(COMMANDS)) {
      t.match(run.stdout, new RegExp(`^  ${escape(command)}(?=\\s)`, 'm'), `${flag}: lists ${command}`)
    }
    t.notMatch(run.stdout, /\bservice (serve|gateway|agent)\b/, `${flag}: the old name is gone`)
  }
  for (const args of [['--version'], ['version']]) {
    const run = await cli(args)
    t.equal(run.code, 0, `${args.join(' ')} exits 0`)
    t.equal(run.stdout, `${PACKAGE.version}\n`, `${args.join(' ')} prints package.json's version`)
  }
})

t.test('each subcommand: --help and -h print its usage and options; --version the version', async (t) => {
  for (const [command, options] of Object.entries(COMMANDS)) {
    const words = command.split(' ')
    const [help, short, version] = await Promise.all([cli([...words, '--help']), cli([...words, '-h']), cli([...words, '--version'])])
    t.equal(help.code, 0, `${command} --help exits 0 ${help.stderr.split('\n')[0] ?? ''}`)
    t.match(help.stdout, new RegExp(`^usage: agent-trust ${escape(command)}\\b`), `${command} --help: the usage line names it`)
    for (const option of [...options, '--help', '--version']) {
      t.match(help.stdout, new RegExp(`^  (-h, )?${escape(option)}(?=\\s)`, 'm'), `${command} --help lists ${option}`)
    }
    t.equal(help.stderr, '', `${command} --help: nothing on stderr`)
    t.equal(short.code, 0, `${command} -h exits 0`)
    t.equal(short.stdout, help.stdout, `${command} -h prints the same help`)
    t.equal(version.code, 0, `${command} --version exits 0`)
    t.equal(version.stdout, `${PACKAGE.version}\n`, `${command} --version prints the version`)
  }
})

t.test('command groups: --help lists their subcommands; help after other arguments still wins', async (t) => {
  for (const group of ['keys', 'breakglass', 'agent', 'badge', 'envelope', 'orgs', 'agents', 'badges', 'policy']) {
    const run = await cli([group, '--help'])
    t.equal(run.code, 0, `${group} --help exits 0`)
    for (const command of Object.keys(COMMANDS).filter((c) => c.startsWith(`${group} `))) {
      t.match(run.stdout, command, `${group} --help lists ${command}`)
    }
  }
  const late = await cli(['breakglass', 'issue', '--key', 'k.pem', '--help'])
  t.equal(late.code, 0, 'help after other options')
  t.match(late.stdout, /^usage: agent-trust breakglass issue /)
})

t.test('a usage error names the command and prints its usage, exit 2', async (t) => {
  const missing = await cli(['breakglass', 'issue', '--key', 'k.pem'])
  t.equal(missing.code, 2)
  t.match(missing.stderr, /needs --key FILE, --sub OPERATOR and --reason TEXT/)
  t.match(missing.stderr, /usage: agent-trust breakglass issue /, 'the usage of that command')
})

t.test('a mistyped command or subcommand: one line naming the nearest commands, exit 2, no help dump', async (t) => {
  const cases: [string[], string][] = [
    [['gatway'], 'agent-trust: unknown command "gatway"; did you mean gateway? ("agent-trust help" lists every command)\n'],
    [['sreve'], 'agent-trust: unknown command "sreve"; did you mean serve? ("agent-trust help" lists every command)\n'],
    [['bagde', 'request'], 'agent-trust: unknown command "bagde"; did you mean badge? ("agent-trust help" lists every command)\n'],
    [['badgs', 'issue'], 'agent-trust: unknown command "badgs"; did you mean badge or badges? ("agent-trust help" lists every command)\n'],
    [['pol', 'show'], 'agent-trust: unknown command "pol"; did you mean policy? ("agent-trust help" lists every command)\n'],
    [['frobnicate', '--help'], 'agent-trust: unknown command "frobnicate" ("agent-trust help" lists every command)\n'],
    [['--verison'], 'agent-trust: unknown option "--verison"; did you mean --version? ("agent-trust help" lists every command)\n'],
    [['policy', 'porpose', '--scope', 'org'], 'agent-trust: unknown command "policy porpose"; did you mean policy propose? ("agent-trust policy --help" lists its commands)\n'],
    [['agents', 'lst'], 'agent-trust: unknown command "agents lst"; did you mean agents list? ("agent-trust agents --help" lists its commands)\n'],
    [['badge', 'issue'], 'agent-trust: unknown command "badge issue"; did you mean badges issue? ("agent-trust badge --help" lists its commands)\n'],
    [['keys', 'frob'], 'agent-trust: unknown command "keys frob" ("agent-trust keys --help" lists its commands)\n'],
  ]
  for (const [args, line] of cases) {
    const run = await cli([...args])
    t.equal(run.code, 2, `${args.join(' ')} exits 2`)
    t.equal(run.stderr, line, `${args.join(' ')}: one line naming the nearest command`)
    t.equal(run.stdout, '', `${args.join(' ')}: nothing on stdout`)
  }
  const missing = await cli(['policy'])
  t.equal(missing.code, 2, 'a missing subcommand is still a usage error')
  t.match(missing.stderr, /policy: expected "show", "propose"/, 'worded by the command itself')
})
