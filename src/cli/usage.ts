/**
 * The help of the `agent-trust` command: one entry per subcommand (synopsis, summary, options), from
 * which the command lists, each subcommand's `--help` and the usage printed with a usage error are
 * all generated, so they cannot drift apart. Loads only the version and the edit distance, so `--help`,
 * `--version` and the one line for a mistyped command stay fast.
 */
import { nearest } from '../core/edit-distance.js'
import { VERSION } from '../version.js'

/** The installed command name (package.json "bin"). */
export const PROGRAM = 'agent-trust'

interface CommandHelp {
  /** What follows the command's name on the command line. */
  readonly synopsis: string
  readonly summary: string
  readonly details?: string
  readonly options?: readonly (readonly [string, string])[]
}

const CONFIGURED_BY_ENVIRONMENT = `Configured by environment variables only ("${PROGRAM} check-config --table" lists them).`

/** The commands of the appliance itself, in the order the top-level help lists them. */
const SERVICE_COMMANDS = {
  serve: {
    synopsis: '',
    summary: 'run the appliance (default); the gateway starts when an upstream is set',
    details: `${CONFIGURED_BY_ENVIRONMENT} The gateway starts too when SERVICE_UPSTREAM_URL or SERVICE_ROUTES_FILE is set, in SERVICE_GATEWAY_WORKERS processes when that is above 1. SIGTERM or SIGINT stops it after in-flight requests finish (SERVICE_SHUTDOWN_GRACE_MS), and so does the end of the process that started it (SERVICE_STOP_WITH_PARENT).`,
  },
  gateway: {
    synopsis: '',
    summary: 'run a gateway-only process against SERVICE_REGISTRY_URL (no database)',
    details: `${CONFIGURED_BY_ENVIRONMENT} Needs SERVICE_REGISTRY_URL, SERVICE_REGISTRY_KEY and SERVICE_UPSTREAM_URL or SERVICE_ROUTES_FILE; /healthz, /readyz and /metrics are on PORT. SERVICE_GATEWAY_WORKERS (a number, or auto) runs it as that many worker processes on one port. It stops as serve does: on SIGTERM or SIGINT, or when the process that started it exits (SERVICE_STOP_WITH_PARENT).`,
  },
  migrate: {
    synopsis: '',
    summary: 'apply pending database migrations and exit',
    details: CONFIGURED_BY_ENVIRONMENT,
  },
  'check-config': {
    synopsis: '[--table|--schema]',
    summary: 'validate the environment and exit (or print the variable table / JSON Schema)',
    details: 'Unknown SERVICE_* variables are warnings (exit 0); every problem is reported at once and exits 2.',
    options: [
      ['--table', 'print the configuration variables as a Markdown table'],
      ['--schema', 'print the JSON Schema the environment is checked against'],
    ],
  },
  bootstrap: {
    synopsis: '',
    summary: 'make sure the default organization and operator key exist, then exit',
    details: CONFIGURED_BY_ENVIRONMENT,
  },
  'keys create': {
    synopsis: '--operator [--name NAME]',
    summary: 'create another operator API key (printed once)',
    options: [
      ['--operator', 'required: an operator key of the default organization (org keys come from POST /v1/keys)'],
      ['--name NAME', 'the key\'s name (default "operator key")'],
    ],
  },
  'keys rotate': {
    synopsis: '',
    summary: 'add an authority key and make it the signer (old keys stay published)',
  },
  'keys retire': {
    synopsis: '<kid> [--force]',
    summary: 'remove an authority key; refused while its badges are unexpired',
    options: [
      ['<kid>', 'the key to remove (the signing key cannot be retired)'],
      ['--force', 'retire it even while badges it signed are unexpired'],
    ],
  },
  'audit verify': {
    synopsis: '--jwks FILE|URL [--file EXPORT.jsonl | --database-url URL] [--require-signed-head]',
    summary: 'verify the audit trail\'s hash chain and signed checkpoints; names the first record that does not verify (docs/audit.md)',
    options: [
      ['--jwks FILE|URL', 'the authority\'s JWK set (`/.well-known/jwks.json` of the admin plane, or a saved copy)'],
      ['--file EXPORT.jsonl', 'an export of `GET /v1/audit/export` instead of a database'],
      ['--database-url URL', 'a PostgreSQL URL; default: the configured database (DATABASE_URL, or the embedded one)'],
      ['--require-signed-head', 'fail when the last records are not yet covered by a signed checkpoint'],
    ],
  },
  'breakglass keygen': {
    synopsis: '--private FILE --public FILE',
    summary: 'make an Ed25519 break-glass key pair (private 0600, public PEM)',
    options: [
      ['--private FILE', 'where the private key goes (PKCS#8 PEM, mode 0600, never overwritten)'],
      ['--public FILE', 'where the public key goes (PEM; give it to the gateway as SERVICE_BREAKGLASS_PUBLIC_KEY)'],
    ],
  },
  'breakglass issue': {
    synopsis: '--key FILE --sub OPERATOR --reason TEXT [--ttl SECONDS] [--methods M,..] [--routes R,..] [--iss ISSUER]',
    summary: 'print a break-glass token (default ttl 900 s, max 3600; methods and routes default *)',
    options: [
      ['--key FILE', 'the Ed25519 private key (PKCS#8 PEM or private JWK)'],
      ['--sub OPERATOR', 'who overrides (the token\'s sub)'],
      ['--reason TEXT', 'why (logged with every request the token lets through)'],
      ['--ttl SECONDS', 'lifetime, 1-3600 (default 900)'],
      ['--methods M,..', 'HTTP methods in scope (default *)'],
      ['--routes R,..', 'route prefixes in scope (default *)'],
      ['--iss ISSUER', 'the token\'s iss (default service-cli)'],
    ],
  },
} as const satisfies Record<string, CommandHelp>

/** The agent-side commands (no configuration or database). */
const AGENT_COMMANDS = {
  'agent keygen': {
    synopsis: '--out FILE [--public FILE]',
    summary: 'make an Ed25519 agent key: private JWK to FILE (0600, never overwritten), public JWK to --public; prints the did:key and kid',
    options: [
      ['--out FILE', 'where the private JWK goes, mode 0600; an existing file is never overwritten, and a file git would not ignore is warned about'],
      ['--public FILE', 'where the public JWK goes'],
    ],
  },
  'badge request': {
    synopsis: '--pop --registry URL --api-key-file FILE --key FILE [--did DID] [--kid KID] [--ttl SECONDS] [--audience A[,A..]] [--json]',
    summary: 'get an IAL-1 badge by proof of possession; prints the token (--json: the whole answer). The API key is read from a file, never from the command line, so it does not show in ps or shell history. --did defaults to the key\'s did:key',
    options: [
      ['--pop', 'required: proof of possession (IAL-0 badges come from POST /v1/agents/{id}/badge)'],
      ['--registry URL', 'the registry (admin plane) base URL'],
      ['--api-key-file FILE', 'a file holding the API key'],
      ['--key FILE', 'the agent\'s private JWK (from agent keygen)'],
      ['--did DID', 'the agent\'s DID (default the key\'s did:key)'],
      ['--kid KID', 'the verification method of a did:web agent'],
      ['--ttl SECONDS', 'badge lifetime, 60-3600'],
      ['--audience A[,A..]', 'audiences to put in the badge'],
      ['--json', 'print the whole answer, not only the token'],
    ],
  },
  token: {
    synopsis: '--issuer URL --key FILE [--client-id ID] [--kid KID] [--resource URL ..] [--scope S] [--json]',
    summary: 'get an IAL-1 badge from the authority\'s OAuth token endpoint (client_credentials, private_key_jwt): the key file is the only credential, no API key. Prints the badge (--json: the whole answer). --client-id defaults to the key\'s did:key',
    options: [
      ['--issuer URL', 'the authority\'s issuer URL; its /.well-known/oauth-authorization-server names the token endpoint'],
      ['--key FILE', 'the agent\'s private JWK (from agent keygen)'],
      ['--client-id ID', 'the agent\'s DID or registry id (default the key\'s did:key)'],
      ['--kid KID', 'the verification method of the key in the DID document'],
      ['--resource URL', 'a resource the badge is for (RFC 8707; repeatable); it must be on the organization\'s token-audience list'],
      ['--scope S', 'space-separated scope, e.g. trust:DV for a badge at that trust level'],
      ['--json', 'print the whole answer, not only the badge'],
    ],
  },
  'badge verify': {
    synopsis: '(--token T | --token-file F|-) --registry URL [--issuer I] [--audience A[,A..]] [--self-signed]',
    summary: 'verify a badge against the registry\'s JWKS; prints the claims (exit 0) or the BADGE_* code (exit 1). --issuer defaults to the registry URL',
    options: [
      ['--token T', 'the badge'],
      ['--token-file F|-', 'a file holding the badge (- for standard input)'],
      ['--registry URL', 'the registry whose JWKS signs badges'],
      ['--issuer I', 'the expected iss (default the registry URL)'],
      ['--audience A[,A..]', 'audiences the badge must name one of'],
      ['--self-signed', 'accept a self-signed level-0 badge'],
    ],
  },
  'envelope mint': {
    synopsis: '--key FILE --issuer-badge-jti J --subject DID [--subject-badge-jti J] --class C [--parent FILE] [--depth N] [--ttl SECONDS] [--mode-min M] [--constraints JSON] [--issuer DID] [--kid KID] [--txn ID] [--prompt-summary TEXT]',
    summary: 'print a delegation envelope (JWS). Root: depth default 0, ttl 300, new txn id. With --parent (FILE or -): txn copied; class, constraints, depth (parent-1) and expiry default to the parent\'s; --subject-badge-jti is required; a child wider than its parent is refused (exit 1). The issuer is the key\'s did:key unless --issuer names another DID of that key',
    options: [
      ['--key FILE', 'the issuer\'s private JWK'],
      ['--issuer-badge-jti J', 'the jti of the issuer\'s badge'],
      ['--subject DID', 'the agent the envelope delegates to'],
      ['--subject-badge-jti J', 'the jti of the subject\'s badge (required with --parent)'],
      ['--class C', 'capability class (required at the root)'],
      ['--parent FILE', 'the parent envelope (- for standard input)'],
      ['--depth N', 'delegation depth remaining, 0-1000'],
      ['--ttl SECONDS', 'lifetime'],
      ['--mode-min M', 'minimum enforcement mode (EM-OBSERVE, EM-GUARD, EM-DELEGATE, EM-STRICT)'],
      ['--constraints JSON', 'a JSON object of constraints'],
      ['--issuer DID', 'another DID of the same key (did:web)'],
      ['--kid KID', 'the key id in the JWS header'],
      ['--txn ID', 'transaction id of a root envelope'],
      ['--prompt-summary TEXT', 'a summary of the prompt behind the delegation'],
    ],
  },
  'envelope inspect': {
    synopsis: '(--jws T | --file F|-)',
    summary: 'print header and payload as JSON, UNVERIFIED (no signature check)',
    options: [
      ['--jws T', 'the envelope'],
      ['--file F|-', 'a file holding the envelope (- for standard input)'],
    ],
  },
} as const satisfies Record<string, CommandHelp>

/** Options every operator command reads. */
const CONNECTION_OPTIONS = [
  ['--registry URL', 'the registry (admin plane) base URL (default SERVICE_REGISTRY_URL)'],
  ['--key-file FILE', 'a file holding the API key (- for standard input)'],
  ['--key-env NAME', 'the environment variable holding the API key (default SERVICE_REGISTRY_KEY)'],
  ['--json', 'print the registry\'s answer as JSON, for scripts'],
] as const
const PAGE_OPTIONS = [
  ['--limit N', 'rows per page, 1-500 (default 50)'],
  ['--cursor C', 'the page after the one that printed "more: --cursor C"'],
] as const
const ORG_OPTION = ['--org ID', 'the organization (default the key\'s own, from GET /v1/me)'] as const
const SCOPE_OPTION = ['--scope S', 'org, group:GROUP_ID or agent:AGENT_ID'] as const
const OPERATOR_DETAILS = 'The registry comes from --registry or SERVICE_REGISTRY_URL; the API key from --key-file, --key-env or SERVICE_REGISTRY_KEY, never from the command line. Tables for people, --json for scripts. Exit 1 when the registry refuses or cannot be reached, 2 for a usage or configuration error.'

/** The operator commands: clients of a registry's API (no configuration or database). */
const OPERATOR_COMMANDS = {
  whoami: {
    synopsis: '[--json]',
    summary: 'the principal the API key stands for: organization, role, operator or not (GET /v1/me)',
    details: OPERATOR_DETAILS,
    options: CONNECTION_OPTIONS,
  },
  'orgs list': {
    synopsis: '[--limit N] [--cursor C] [--json]',
    summary: 'organizations: the key\'s own, or all of them for an operator key',
    details: OPERATOR_DETAILS,
    options: [...PAGE_OPTIONS, ...CONNECTION_OPTIONS],
  },
  'orgs create': {
    synopsis: 'NAME [--key-out FILE] [--json]',
    summary: 'operator: create an organization; its first admin API key is printed once (or written to --key-out)',
    details: OPERATOR_DETAILS,
    options: [
      ['NAME', 'the organization\'s name'],
      ['--key-out FILE', 'write the new admin key to FILE (mode 0600, never overwritten) instead of printing it'],
      ...CONNECTION_OPTIONS,
    ],
  },
  'agents list': {
    synopsis: '[--q TEXT] [--limit N] [--cursor C] [--json]',
    summary: 'the organization\'s agents',
    details: OPERATOR_DETAILS,
    options: [['--q TEXT', 'only agents whose name, DID or domain contains TEXT (any case)'], ...PAGE_OPTIONS, ...CONNECTION_OPTIONS],
  },
  'agents show': {
    synopsis: 'AGENT_ID [--json]',
    summary: 'one agent',
    details: OPERATOR_DETAILS,
    options: [['AGENT_ID', 'the agent\'s id (UUID)'], ...CONNECTION_OPTIONS],
  },
  'agents create': {
    synopsis: '--name NAME [--domain D] [--description TEXT] [--did DID] [--json]',
    summary: 'admin: register an agent; without --did it is did:web:<registry host>:agents:<id>',
    details: OPERATOR_DETAILS,
    options: [
      ['--name NAME', 'the agent\'s name, 1-200 characters'],
      ['--domain D', 'its domain (a host name)'],
      ['--description TEXT', 'what it does'],
      ['--did DID', 'an explicit DID'],
      ...CONNECTION_OPTIONS,
    ],
  },
  'agents enable': {
    synopsis: 'AGENT_ID [--json]',
    summary: 'admin: enable an agent',
    details: OPERATOR_DETAILS,
    options: [['AGENT_ID', 'the agent\'s id (UUID)'], ...CONNECTION_OPTIONS],
  },
  'agents disable': {
    synopsis: 'AGENT_ID [--json]',
    summary: 'admin: disable an agent: no new badges, while issued ones stay valid until they expire or are revoked',
    details: OPERATOR_DETAILS,
    options: [['AGENT_ID', 'the agent\'s id (UUID)'], ...CONNECTION_OPTIONS],
  },
  'badges issue': {
    synopsis: 'AGENT --domain D [--ttl SECONDS] [--trust-level L] [--audience A[,A..]] [--json]',
    summary: 'issue an IAL-0 badge to an agent of the organization; prints its jti and the token',
    details: OPERATOR_DETAILS,
    options: [
      ['AGENT', 'the agent\'s id (UUID) or DID'],
      ['--domain D', 'the domain the badge vouches for'],
      ['--ttl SECONDS', 'lifetime, 60-3600 (default 300)'],
      ['--trust-level L', 'REG, DV, OV or EV (or 1-4); at most the agent\'s verified level'],
      ['--audience A[,A..]', 'audiences to put in the badge'],
      ...CONNECTION_OPTIONS,
    ],
  },
  'badges revoke': {
    synopsis: 'JTI [--reason R] [--json]',
    summary: 'revoke a badge of the organization; idempotent, the first time and reason are kept',
    details: OPERATOR_DETAILS,
    options: [['JTI', 'the badge\'s id'], ['--reason R', 'why, kept with the revocation'], ...CONNECTION_OPTIONS],
  },
  'badges verify': {
    synopsis: 'TOKEN|- [--audience A[,A..]] [--json]',
    summary: 'ask the registry whether a badge is valid: signature, expiry, issuer, revocation; exit 1 when it is not',
    details: `${OPERATOR_DETAILS} "${PROGRAM} badge verify" checks a badge locally against the JWKS instead.`,
    options: [['TOKEN|-', 'the badge, or - to read it from standard input'], ['--audience A[,A..]', 'audiences the badge must name one of'], ...CONNECTION_OPTIONS],
  },
  'policy show': {
    synopsis: '--scope S [--org ID] [--json]',
    summary: 'the active policy document of a scope: its version, hash and YAML',
    details: OPERATOR_DETAILS,
    options: [SCOPE_OPTION, ORG_OPTION, ...CONNECTION_OPTIONS],
  },
  'policy propose': {
    synopsis: '--scope S --file FILE|- [--replace] [--org ID] [--json]',
    summary: 'admin: propose a new version of a scope\'s policy; every problem of an invalid one is listed',
    details: `Approving the proposal replaces the scope's whole active document. When the scope has one, the command shows its version and the changed lines and proposes nothing (exit 1) unless --replace is given. ${OPERATOR_DETAILS}`,
    options: [
      SCOPE_OPTION,
      ['--file FILE|-', 'the policy YAML (- for standard input)'],
      ['--replace', 'propose it even though the scope has an active document, which its approval replaces'],
      ORG_OPTION,
      ...CONNECTION_OPTIONS,
    ],
  },
  'policy proposals': {
    synopsis: '[--org ID] [--json]',
    summary: 'pending proposals of every scope, newest first',
    details: OPERATOR_DETAILS,
    options: [ORG_OPTION, ...CONNECTION_OPTIONS],
  },
  'policy approve': {
    synopsis: 'PROPOSAL_ID [--org ID] [--json]',
    summary: 'admin: approve a proposal; it becomes the scope\'s active document',
    details: OPERATOR_DETAILS,
    options: [['PROPOSAL_ID', 'the proposal\'s id (UUID)'], ORG_OPTION, ...CONNECTION_OPTIONS],
  },
  'policy reject': {
    synopsis: 'PROPOSAL_ID --reason R [--org ID] [--json]',
    summary: 'admin: reject a proposal; the reason is kept',
    details: OPERATOR_DETAILS,
    options: [['PROPOSAL_ID', 'the proposal\'s id (UUID)'], ['--reason R', 'why (required)'], ORG_OPTION, ...CONNECTION_OPTIONS],
  },
  'policy simulate': {
    synopsis: '--agent ID (--operation OP | --mcp-tool NAME | --a2a-method M [--skill S]) [--trust-level L] [--proposal ID] [--org ID] [--json]',
    summary: 'the decision the policy gives for an agent\'s request, without making it: decision, reason, decision id; exit 0 for ALLOW and DENY alike',
    details: OPERATOR_DETAILS,
    options: [
      ['--agent ID', 'the agent (UUID)'],
      ['--operation OP', 'an operation, e.g. "GET /reports/**" or mcp.prompt.get'],
      ['--mcp-tool NAME', 'an MCP tools/call of the tool NAME, as the gateway asks it on an MCP route'],
      ['--a2a-method M', 'an A2A call of method M (either version), as the gateway asks it on an A2A route'],
      ['--skill S', 'the skill the A2A message names'],
      ['--trust-level L', 'the caller\'s trust level: SS, REG, DV, OV or EV (or 0-4)'],
      ['--proposal ID', 'evaluate as if this pending proposal were approved'],
      ORG_OPTION,
      ...CONNECTION_OPTIONS,
    ],
  },
} as const satisfies Record<string, CommandHelp>

const COMMANDS: Readonly<Record<string, CommandHelp>> = { ...SERVICE_COMMANDS, ...AGENT_COMMANDS, ...OPERATOR_COMMANDS }

/** Commands that take a subcommand. */
export const GROUPS: Readonly<Record<string, readonly string[]>> = {
  keys: ['create', 'rotate', 'retire'],
  audit: ['verify'],
  breakglass: ['keygen', 'issue'],
  agent: ['keygen'],
  badge: ['request', 'verify'],
  envelope: ['mint', 'inspect'],
  orgs: ['list', 'create'],
  agents: ['list', 'show', 'create', 'enable', 'disable'],
  badges: ['issue', 'revoke', 'verify'],
  policy: ['show', 'propose', 'proposals', 'approve', 'reject', 'simulate'],
}

const WIDTH = 100
const COLUMN = 33

/** Words of `text`; a bracketed or parenthesized group (`[--ttl SECONDS]`) stays one word. */
function words(text: string): string[] {
  const result: string[] = []
  let depth = 0
  let word = ''
  for (const char of text) {
    if (/\s/.test(char) && depth === 0) {
      if (word !== '') result.push(word)
      word = ''
      continue
    }
    if (char === '[' || char === '(') depth += 1
    if ((char === ']' || char === ')') && depth > 0) depth -= 1
    word += char
  }
  if (word !== '') result.push(word)
  return result
}

/**
 * Breaks `text` into lines of at most WIDTH columns (a longer word gets a line of its own). The first
 * line starts with `first`, the others with `indent` spaces.
 */
function wrap(text: string, first: string, indent: number): string {
  const lines: string[] = []
  let line = first
  let empty = true
  for (const word of words(text)) {
    if (!empty && line.length + 1 + word.length > WIDTH) {
      lines.push(line)
      line = ' '.repeat(indent)
      empty = true
    }
    line += empty ? word : ` ${word}`
    empty = false
  }
  lines.push(line)
  return lines.join('\n')
}

/** `  name synopsis   summary`, the summary in its own column (on the next line when the left is long). */
function listEntry(left: string, summary: string): string {
  const head = wrap(left, '  ', 2 + left.indexOf(' ') + 1)
  if (!head.includes('\n') && head.length < COLUMN - 1) return wrap(summary, head.padEnd(COLUMN), COLUMN)
  return `${head}\n${wrap(summary, ' '.repeat(COLUMN), COLUMN)}`
}

function commandList(commands: Readonly<Record<string, CommandHelp>>): string {
  return Object.entries(commands).map(([name, help]) => `${listEntry(`${name} ${help.synopsis}`.trim(), help.summary)}\n`).join('')
}

const STANDARD_OPTIONS = [
  ['-h, --help', 'show this help and exit'],
  ['--version', 'print the version and exit'],
] as const

export const TOP_USAGE = `usage: ${PROGRAM} [command] [options]

commands:
${commandList(SERVICE_COMMANDS)}${listEntry('help', 'show this text')}
${listEntry('version', 'print the version')}

agent-side commands (keys, IAL-1 badges, delegation envelopes; no configuration or database):
${commandList(AGENT_COMMANDS)}
operator commands (clients of a registry: --registry URL or SERVICE_REGISTRY_URL; the API key from
SERVICE_REGISTRY_KEY, --key-file or --key-env; --json for scripts):
${commandList(OPERATOR_COMMANDS)}
options:
${STANDARD_OPTIONS.map(([name, text]) => listEntry(name, text)).join('\n')}

"${PROGRAM} <command> --help" shows a command's options.
`

export const AGENT_USAGE = `agent commands of ${PROGRAM} (no database needed):
${commandList(AGENT_COMMANDS)}
"${PROGRAM} <command> <subcommand> --help" shows a command's options.
`

/** The help of `command` ("serve", "keys retire", or a group such as "keys"), or null if there is none. */
export function helpFor(command: string): string | null {
  const help = COMMANDS[command]
  if (help !== undefined) {
    const options = [...(help.options ?? []), ...STANDARD_OPTIONS]
    return [
      wrap(`${command} ${help.synopsis}`.trim(), `usage: ${PROGRAM} `, 8 + PROGRAM.length),
      '',
      wrap(help.summary, '', 0),
      ...(help.details === undefined ? [] : ['', wrap(help.details, '', 0)]),
      '',
      'options:',
      ...options.map(([name, text]) => listEntry(name, text)),
      '',
    ].join('\n')
  }
  const subcommands = GROUPS[command]
  if (subcommands === undefined) return null
  if (command === 'agent' || command === 'badge' || command === 'envelope') return AGENT_USAGE
  const entries = Object.fromEntries(subcommands.map((sub) => [`${command} ${sub}`, COMMANDS[`${command} ${sub}`] as CommandHelp]))
  return `usage: ${PROGRAM} ${command} <${subcommands.join('|')}> [options]\n\ncommands:\n${commandList(entries)}\n"${PROGRAM} ${command} <command> --help" shows a command's options.\n`
}

const HELP_FLAGS = new Set(['--help', '-h'])

/**
 * What the command line `argv` (command first) asks for with `--help`, `-h`, `help` or `--version`, at
 * the top level or for a subcommand; null when it asks for neither, or names no known command.
 */
export function helpOrVersion(argv: readonly string[]): string | null {
  const [command = 'serve', ...rest] = argv
  // `version` as a word too: npx takes a top-level --version for itself.
  if (command === '--version' || command === 'version') return `${VERSION}\n`
  if (command === 'help' || HELP_FLAGS.has(command)) return TOP_USAGE
  const subcommand = rest[0] ?? ''
  const path = GROUPS[command]?.includes(subcommand) === true ? `${command} ${subcommand}` : command
  const help = helpFor(path)
  // An unknown command gets its usage error from the command's own parser.
  if (help === null) return null
  if (rest.some((arg) => HELP_FLAGS.has(arg)) || (path === command && subcommand === 'help')) return help
  if (rest.includes('--version')) return `${VERSION}\n`
  return null
}

/** The words a command line may start with: every command's first word, `help` and `version`. */
const TOP_WORDS: readonly string[] = [...new Set([...Object.keys(COMMANDS).map((name) => name.split(' ')[0] as string), 'help', 'version'])]
const TOP_OPTIONS: readonly string[] = ['--help', '-h', '--version']
const SUBCOMMANDS: readonly string[] = Object.keys(COMMANDS).filter((name) => name.includes(' '))

/** Near enough to be a typo: a third of the word's length, at least one edit. */
const typoLimit = (word: string): number => Math.max(1, Math.floor(word.length / 3))

/** `gateway`, `badge or badges`, `a, b or c`. */
function alternatives(names: readonly string[]): string {
  return names.length === 1 ? (names[0] as string) : `${names.slice(0, -1).join(', ')} or ${names[names.length - 1] as string}`
}

function unknown(what: string, given: string, suggestions: readonly string[], help: string): string {
  const shown = JSON.stringify(given.slice(0, 60))
  const hint = suggestions.length === 0 ? '' : `; did you mean ${alternatives(suggestions)}?`
  return `${PROGRAM}: unknown ${what} ${shown}${hint} ("${help}" ${help === `${PROGRAM} help` ? 'lists every command' : 'lists its commands'})\n`
}

/**
 * The one-line error for a command line whose command or subcommand does not exist, naming the nearest
 * ones by edit distance; null when both are known (or the subcommand is missing, or an option stands in
 * its place: the command's own parser words those). The whole help is not printed: it would bury the
 * line that matters.
 */
export function mistypedCommand(argv: readonly string[]): string | null {
  const [command, sub] = argv
  if (command === undefined) return null
  if (command.startsWith('-')) return TOP_OPTIONS.includes(command) ? null : unknown('option', command, nearest(command, TOP_OPTIONS, typoLimit(command)), `${PROGRAM} help`)
  if (!TOP_WORDS.includes(command)) return unknown('command', command, nearest(command, TOP_WORDS, typoLimit(command)), `${PROGRAM} help`)
  const subcommands = GROUPS[command]
  if (subcommands === undefined || sub === undefined || sub.startsWith('-') || subcommands.includes(sub)) return null
  const within = nearest(sub, subcommands, typoLimit(sub)).map((name) => `${command} ${name}`)
  // `badge issue` is `badges issue`: a typo may be in the group's name as well.
  const full = `${command} ${sub}`
  const suggestions = within.length > 0 ? within : nearest(full, SUBCOMMANDS, typoLimit(full))
  return unknown('command', full, suggestions, `${PROGRAM} ${command} --help`)
}
