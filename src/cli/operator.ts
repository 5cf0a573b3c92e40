/**
 * Operator commands of `agent-trust`: `whoami`, `orgs`, `agents`, `badges` and `policy`, clients of a
 * registry's admin API (docs/api.md §4, docs/console.md) through the SDK's HTTP call. Each returns the exit
 * code: 0 ok, 1 the registry refused or could not be reached (or a badge is invalid), 2 usage or
 * configuration error. Every error is one line on stderr (an invalid policy adds one line per problem).
 *
 * The API key never goes through argv, where `ps` and shell history would show it: it comes from
 * `--key-file`, the variable `--key-env` names, or SERVICE_REGISTRY_KEY, and no message ever contains it.
 */
import { closeSync, openSync, unlinkSync, writeSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { flag, option, rejectLeftovers, UsageError } from './args.js'
import { clean, cleanBlock, fields, json, table } from './output.js'
import { helpOrVersion, PROGRAM } from './usage.js'
import { SdkError } from '../sdk/errors.js'
import { callRegistry, registryEndpoint, type RegistryCall } from '../sdk/http.js'
import { isUuid } from '../core/uuid.js'
import { diffStats, lineDiff } from '../core/line-diff.js'
import { TRUST_CODES } from '../core/trust-level.js'

/** Where a command writes and what it reads (tests pass their own; the CLI passes the process's). */
export interface OperatorIo {
  stdout: (text: string) => void
  stderr: (text: string) => void
  env: NodeJS.ProcessEnv
  stdin: () => Promise<string>
}

/** A missing or unusable registry URL or API key: exit 2, like a usage error, without the usage. */
class ConfigurationError extends Error {
  readonly code = 'CLI_CONFIGURATION'
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = []
  for await (const chunk of process.stdin) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(String(chunk)))
  return Buffer.concat(chunks).toString('utf8')
}

/** Standard input for `what`, unless the key already comes from there. */
function stdinFor(c: Common, what: string): void {
  if (c.keyFromStdin) throw new UsageError(`${what} cannot read standard input when --key-file - does`)
}

const defaultIo: OperatorIo = {
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
  env: process.env,
  stdin: readStdin,
}

type Json = Record<string, unknown>

/** The registry as one command sees it: base URL, API key, and where the key came from (for messages). */
class Registry {
  constructor(readonly url: string, private readonly apiKey: string, private readonly keySource: string) {}

  /** The answer's body; the registry's error as an SdkError. */
  async call(method: RegistryCall['method'], path: string, body?: unknown): Promise<unknown> {
    try {
      return await callRegistry({ method, url: registryEndpoint(this.url, path), apiKey: this.apiKey, ...(body === undefined ? {} : { body }) })
    } catch (error) {
      // Name where the refused key came from (never the key), the first thing to check.
      if (error instanceof SdkError && error.code === 'unauthorized') {
        throw new SdkError(error.code, `${error.message} (the API key from ${this.keySource} was not accepted)`, { status: error.status })
      }
      throw error
    }
  }

  /** `data` of a `{success, data}` answer (docs/api.md §2.1), with `nextCursor` when it is a page. */
  async enveloped(method: RegistryCall['method'], path: string, body?: unknown): Promise<{ data: unknown; nextCursor: string | null }> {
    const answer = await this.call(method, path, body)
    if (typeof answer !== 'object' || answer === null || !('data' in answer)) throw new SdkError('invalid_response', 'The registry answer has no data.')
    const { data, nextCursor } = answer as { data: unknown; nextCursor?: unknown }
    return { data, nextCursor: typeof nextCursor === 'string' ? nextCursor : null }
  }
}

/** The options every operator command reads: where the registry is, the key, and the output form. */
interface Common {
  asJson: boolean
  /** The key is read from standard input, which no other option may then read. */
  keyFromStdin: boolean
  connect(): Promise<Registry>
}

const PRINTABLE_KEY = /^[\x21-\x7e]+$/

function common(args: string[], io: OperatorIo): Common {
  const registryOption = option(args, '--registry')
  const keyFile = option(args, '--key-file')
  const keyEnv = option(args, '--key-env')
  const asJson = flag(args, '--json')
  if (keyFile !== undefined && keyEnv !== undefined) throw new UsageError('give --key-file or --key-env, not both')
  return {
    asJson,
    keyFromStdin: keyFile === '-',
    // Called once the command line is known to be right, so a usage error never waits on a file or stdin.
    async connect() {
      const url = registryOption ?? io.env.SERVICE_REGISTRY_URL
      if (url === undefined || url === '') throw new ConfigurationError('no registry: give --registry URL or set SERVICE_REGISTRY_URL')
      let parsed: URL | null = null
      try {
        parsed = new URL(url)
      } catch {
        parsed = null
      }
      const urlSource = registryOption === undefined ? 'SERVICE_REGISTRY_URL' : '--registry'
      if (parsed === null || (parsed.protocol !== 'http:' && parsed.protocol !== 'https:')) throw new ConfigurationError(`${urlSource} is not an http(s) URL`)
      let key: string | undefined
      let source: string
      if (keyFile !== undefined) {
        source = keyFile === '-' ? 'standard input' : keyFile
        try {
          key = keyFile === '-' ? await io.stdin() : await readFile(keyFile, 'utf8')
        } catch (error) {
          const code = (error as NodeJS.ErrnoException).code
          throw new ConfigurationError(`--key-file ${keyFile} cannot be read${typeof code === 'string' ? ` (${code})` : ''}`)
        }
      } else if (keyEnv !== undefined) {
        source = keyEnv
        key = io.env[keyEnv]
      } else {
        source = 'SERVICE_REGISTRY_KEY'
        key = io.env.SERVICE_REGISTRY_KEY
      }
      key = key?.trim()
      if (key === undefined || key === '') {
        throw new ConfigurationError(keyFile === undefined && keyEnv === undefined
          ? 'no API key: set SERVICE_REGISTRY_KEY, or give --key-file FILE or --key-env NAME'
          : `no API key in ${source}`)
      }
      // A line break or space would end up in a header; say so without printing the key.
      if (!PRINTABLE_KEY.test(key)) throw new ConfigurationError(`the API key in ${source} holds spaces or control characters`)
      return new Registry(url, key, source)
    },
  }
}

/** A path segment: never `.` or `..`, which URL parsing would resolve into another route. */
function segment(value: string): string {
  if (value === '' || value === '.' || value === '..') throw new UsageError(`"${clean(value)}" is not an id`)
  return encodeURIComponent(value)
}

function uuid(value: string | undefined, what: string): string {
  if (value === undefined) throw new UsageError(`which ${what}? (a UUID)`)
  if (!isUuid(value)) throw new UsageError(`${what} "${clean(value)}" is not a UUID`)
  return value
}

function positional(args: string[], what: string): string {
  const value = args.shift()
  if (value === undefined || value.startsWith('--')) throw new UsageError(`which ${what}?`)
  return value
}

function required(args: string[], name: string): string {
  const value = option(args, name)
  if (value === undefined) throw new UsageError(`${name} is required`)
  return value
}

function integer(value: string | undefined, name: string, min: number, max: number): number | undefined {
  if (value === undefined) return undefined
  const n = Number(value)
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(n) || n < min || n > max) throw new UsageError(`${name} must be an integer from ${min} to ${max}`)
  return n
}

function list(value: string | undefined, name: string): string[] | undefined {
  if (value === undefined) return undefined
  const items = value.split(',').map((v) => v.trim()).filter((v) => v !== '')
  if (items.length === 0) throw new UsageError(`${name} is an empty list`)
  return items
}

/** `?limit=&cursor=` (and more) of a page, from the options given. */
function pageQuery(args: string[], extra: Record<string, string | undefined> = {}): string {
  const limit = integer(option(args, '--limit'), '--limit', 1, 500)
  const cursor = option(args, '--cursor')
  const params = new URLSearchParams()
  for (const [name, value] of Object.entries({ ...extra, limit: limit?.toString(), cursor })) if (value !== undefined) params.set(name, value)
  const query = params.toString()
  return query === '' ? '' : `?${query}`
}

function records(value: unknown): Json[] {
  if (!Array.isArray(value) || !value.every((item) => typeof item === 'object' && item !== null)) {
    throw new SdkError('invalid_response', 'The registry answer is not a list.')
  }
  return value as Json[]
}

function record(value: unknown): Json {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new SdkError('invalid_response', 'The registry answer is not an object.')
  return value as Json
}

/** A page: the rows (JSON: `{data, nextCursor}`), and on stderr how to ask for the next one. */
function printPage(io: OperatorIo, c: Common, page: { data: unknown; nextCursor: string | null }, render: (rows: Json[]) => string): void {
  const rows = records(page.data)
  if (c.asJson) {
    io.stdout(json({ data: rows, nextCursor: page.nextCursor }))
    return
  }
  io.stdout(rows.length === 0 ? '(none)\n' : render(rows))
  if (page.nextCursor !== null) io.stderr(`more: --cursor ${clean(page.nextCursor)}\n`)
}

function printRecord(io: OperatorIo, c: Common, data: Json, pairs: readonly (readonly [string, unknown])[]): void {
  io.stdout(c.asJson ? json(data) : fields(pairs))
}

// ---- whoami, orgs ------------------------------------------------------------------------------------

/** GET /v1/me (docs/console.md): the principal the key stands for. */
async function me(registry: Registry): Promise<Json> {
  try {
    return record((await registry.enveloped('GET', '/v1/me')).data)
  } catch (error) {
    // A registry older than /v1/me answers the unknown route with 404 not_found.
    if (error instanceof SdkError && error.code === 'not_found') {
      throw new SdkError('not_found', 'The registry does not serve GET /v1/me (an older appliance?); give --org ORG_ID for policy commands.', { status: 404 })
    }
    throw error
  }
}

async function whoami(args: string[], io: OperatorIo): Promise<number> {
  const c = common(args, io)
  rejectLeftovers(args)
  const data = await me(await c.connect())
  printRecord(io, c, data, [
    ['kind', data.kind], ['org', data.org_name], ['org id', data.org_id], ['role', data.role],
    ['operator', data.operator === true ? 'yes' : 'no'], ['key id', data.key_id], ['user id', data.user_id],
  ])
  return 0
}

const orgColumns = [['id', (o: Json) => o.id], ['name', (o: Json) => o.name], ['created', (o: Json) => o.createdAt]] as const

async function orgs(sub: string | undefined, args: string[], io: OperatorIo): Promise<number> {
  const c = common(args, io)
  if (sub === 'list') {
    const query = pageQuery(args)
    rejectLeftovers(args)
    const page = await (await c.connect()).enveloped('GET', `/v1/orgs${query}`)
    printPage(io, c, page, (rows) => table(rows, orgColumns))
    return 0
  }
  if (sub !== 'create') throw new UsageError('orgs: expected "list" or "create"')
  const name = positional(args, 'name')
  const keyOut = option(args, '--key-out')
  rejectLeftovers(args)
  const registry = await c.connect()
  // The key file is claimed before the organization exists, so a file in the way cannot lose its key.
  let fd: number | null = null
  if (keyOut !== undefined) {
    try {
      fd = openSync(keyOut, 'wx', 0o600)
    } catch (error) {
      throw new ConfigurationError(`--key-out ${keyOut}: ${(error as NodeJS.ErrnoException).code === 'EEXIST' ? 'the file exists (it is never overwritten)' : 'cannot be created'}`)
    }
  }
  let created: Json
  try {
    created = record((await registry.enveloped('POST', '/v1/orgs', { name })).data)
  } catch (error) {
    if (fd !== null && keyOut !== undefined) {
      closeSync(fd)
      unlinkSync(keyOut)
    }
    throw error
  }
  const org = record(created.org)
  const apiKey = record(created.apiKey)
  if (fd !== null) {
    writeSync(fd, `${String(apiKey.key)}\n`)
    closeSync(fd)
  }
  const shown = fd === null ? apiKey : { ...apiKey, key: undefined, keyFile: keyOut }
  if (c.asJson) {
    io.stdout(json({ org, apiKey: shown }))
    return 0
  }
  io.stdout(fields([
    ['org id', org.id], ['name', org.name], ['created', org.createdAt], ['admin key id', apiKey.id],
    fd === null ? ['admin key', `${String(apiKey.key)}  (shown once)`] : ['admin key file', keyOut],
  ]))
  return 0
}

// ---- agents ------------------------------------------------------------------------------------------

const agentColumns = [
  ['id', (a: Json) => a.id], ['name', (a: Json) => a.name], ['domain', (a: Json) => a.domain], ['status', (a: Json) => a.status],
  ['level', (a: Json) => a.trustLevel], ['did', (a: Json) => a.did],
] as const

function agentPairs(a: Json): [string, unknown][] {
  return [
    ['id', a.id], ['name', a.name], ['did', a.did], ['domain', a.domain], ['description', a.description], ['status', a.status],
    ['trust level', a.trustLevel], ['public key', a.publicKeyJwk === null || a.publicKeyJwk === undefined ? null : 'set'],
    ['agent card', a.agent_card === null || a.agent_card === undefined ? null : 'registered'], ['created', a.createdAt], ['updated', a.updatedAt],
  ]
}

async function agents(sub: string | undefined, args: string[], io: OperatorIo): Promise<number> {
  const c = common(args, io)
  switch (sub) {
    case 'list': {
      const q = option(args, '--q')
      const query = pageQuery(args, { q })
      rejectLeftovers(args)
      const page = await (await c.connect()).enveloped('GET', `/v1/agents${query}`)
      printPage(io, c, page, (rows) => table(rows, agentColumns))
      return 0
    }
    case 'show': {
      const id = uuid(args.shift(), 'agent id')
      rejectLeftovers(args)
      const agent = record((await (await c.connect()).enveloped('GET', `/v1/agents/${id}`)).data)
      printRecord(io, c, agent, agentPairs(agent))
      return 0
    }
    case 'create': {
      const name = required(args, '--name')
      const domain = option(args, '--domain')
      const description = option(args, '--description')
      const did = option(args, '--did')
      rejectLeftovers(args)
      const body = { name, ...(domain === undefined ? {} : { domain }), ...(description === undefined ? {} : { description }), ...(did === undefined ? {} : { did }) }
      const agent = record((await (await c.connect()).enveloped('POST', '/v1/agents', body)).data)
      printRecord(io, c, agent, agentPairs(agent))
      return 0
    }
    case 'enable':
    case 'disable': {
      const id = uuid(args.shift(), 'agent id')
      rejectLeftovers(args)
      const agent = record((await (await c.connect()).enveloped('POST', `/v1/agents/${id}/${sub}`)).data)
      printRecord(io, c, agent, [['id', agent.id], ['name', agent.name], ['status', agent.status]])
      return 0
    }
    default:
      throw new UsageError('agents: expected "list", "show", "create", "enable" or "disable"')
  }
}

// ---- badges ------------------------------------------------------------------------------------------

/** "1"-"4" or a code (REG, DV, OV, EV; SS too where a level 0 is meant), as `codes` or digits. */
function trustLevel(value: string | undefined, name: string, as: 'digit' | 'code'): string | undefined {
  if (value === undefined) return undefined
  const upper = value.toUpperCase()
  const index = /^[0-4]$/.test(upper) ? Number(upper) : (TRUST_CODES as readonly string[]).indexOf(upper)
  const min = as === 'digit' ? 1 : 0
  if (index < min) throw new UsageError(`${name} must be one of ${TRUST_CODES.slice(min).join(', ')} (or ${min}-4)`)
  return as === 'digit' ? String(index) : TRUST_CODES[index]
}

async function badges(sub: string | undefined, args: string[], io: OperatorIo): Promise<number> {
  const c = common(args, io)
  switch (sub) {
    case 'issue': {
      // The agent's UUID or DID, as the issuance route takes it.
      const agent = segment(positional(args, 'agent (id or DID)'))
      const domain = required(args, '--domain')
      const ttl = integer(option(args, '--ttl'), '--ttl', 60, 3600)
      const level = trustLevel(option(args, '--trust-level'), '--trust-level', 'digit')
      const audience = list(option(args, '--audience'), '--audience')
      rejectLeftovers(args)
      const body = { domain, ...(ttl === undefined ? {} : { ttl }), ...(level === undefined ? {} : { trustLevel: level }), ...(audience === undefined ? {} : { audience }) }
      const badge = record((await (await c.connect()).enveloped('POST', `/v1/agents/${agent}/badge`, body)).data)
      printRecord(io, c, badge, [
        ['jti', badge.jti], ['subject', badge.subject], ['trust level', badge.trustLevel], ['ial', badge.ial], ['expires', badge.expiresAt], ['token', badge.token],
      ])
      return 0
    }
    case 'revoke': {
      const jti = segment(positional(args, 'badge (jti)'))
      const reason = option(args, '--reason')
      rejectLeftovers(args)
      const revoked = record((await (await c.connect()).enveloped('POST', `/v1/badges/${jti}/revoke`, reason === undefined ? {} : { reason })).data)
      printRecord(io, c, revoked, [['jti', revoked.jti], ['revoked', revoked.revoked === true ? 'yes' : 'no'], ['revoked at', revoked.revokedAt], ['reason', revoked.reason]])
      return 0
    }
    case 'verify': {
      const given = positional(args, 'badge (the token, or - for standard input)')
      const audience = list(option(args, '--audience'), '--audience')
      rejectLeftovers(args)
      if (given === '-') stdinFor(c, 'the badge')
      const registry = await c.connect()
      const token = (given === '-' ? await io.stdin() : given).trim()
      const result = record((await registry.enveloped('POST', '/v1/badges/verify', { token, ...(audience === undefined ? {} : { audience }) })).data)
      const claims = typeof result.claims === 'object' && result.claims !== null ? (result.claims as Json) : {}
      const subject = typeof claims.vc === 'object' && claims.vc !== null ? ((claims.vc as Json).credentialSubject as Json | undefined) : undefined
      const at = (seconds: unknown): unknown => (typeof seconds === 'number' ? new Date(seconds * 1000).toISOString() : seconds)
      printRecord(io, c, result, result.valid === true
        ? [['valid', 'yes'], ['jti', claims.jti], ['subject', claims.sub], ['issuer', claims.iss], ['trust level', subject?.level], ['domain', subject?.domain],
            ['ial', claims.ial], ['audience', claims.aud], ['issued', at(claims.iat)], ['expires', at(claims.exp)], ['kid', result.kid]]
        : [['valid', 'no'], ['error', result.error]])
      // As `badge verify`: an invalid badge is exit 1, so a script can branch on the code alone.
      return result.valid === true ? 0 : 1
    }
    default:
      throw new UsageError('badges: expected "issue", "revoke" or "verify"')
  }
}

// ---- policy ------------------------------------------------------------------------------------------

/** `org`, `group:ID` or `agent:ID` → the path under /policy. */
function scopePath(scope: string): string {
  if (scope === 'org') return 'org'
  const match = /^(group|agent):(.*)$/.exec(scope)
  if (match === null) throw new UsageError(`--scope must be org, group:ID or agent:ID, not "${clean(scope)}"`)
  const [, kind, id] = match as unknown as [string, string, string]
  return `${kind}s/${uuid(id, `${kind} id`)}`
}

const scopeOf = (doc: Json): string => (doc.scope_type === 'org' ? 'org' : `${String(doc.scope_type)}:${String(doc.scope_id)}`)

function documentPairs(doc: Json): [string, unknown][] {
  return [
    ['id', doc.id], ['scope', scopeOf(doc)], ['state', doc.state], ['version', doc.version], ['content hash', doc.content_hash],
    ['proposed by', doc.created_by_user_id ?? doc.created_by_type], ['approved by', doc.approved_by_user_id],
    ...(doc.rejection_reason === null || doc.rejection_reason === undefined ? [] : [['rejection reason', doc.rejection_reason] as [string, unknown]]),
    ['created', doc.created_at], ['updated', doc.updated_at],
  ]
}

const proposalColumns = [
  ['id', (d: Json) => d.id], ['scope', (d: Json) => scopeOf(d)], ['version', (d: Json) => d.version],
  ['proposed by', (d: Json) => d.created_by_user_id ?? d.created_by_type], ['created', (d: Json) => d.created_at],
] as const

/** The scope's active document, or null when it has none (404 `policy_not_found`). */
async function activeDocument(registry: Registry, path: string): Promise<Json | null> {
  try {
    return record(await registry.call('GET', path))
  } catch (error) {
    if (error instanceof SdkError && error.code === 'policy_not_found') return null
    throw error
  }
}

/** Changed lines shown before the rest is only counted: enough to recognise the document. */
const DIFF_LINES_SHOWN = 20

/**
 * What approving a proposal of `yaml` would replace: the active version, and the changed lines of a
 * line diff (the first DIFF_LINES_SHOWN of them), with how to go on when `replace` was not given.
 */
function replacementSummary(scope: string, active: Json, yaml: string, replace: boolean): string {
  const diff = lineDiff(String(active.yaml_content ?? ''), yaml)
  const { added, removed } = diffStats(diff)
  const changed = diff.filter((line) => line.op !== 'same')
  const shown = changed.slice(0, DIFF_LINES_SHOWN).map((line) => `  ${line.op === 'add' ? '+' : '-'} ${cleanBlock(line.text).replace(/\n/g, ' ')}`)
  const lines = [
    `${PROGRAM} policy propose: the ${clean(scope)} scope has an active document, version ${clean(active.version)} (${clean(active.content_hash)}, active since ${clean(active.updated_at)}); approving this proposal replaces it whole:`,
    ...(changed.length === 0 ? ['  (the same text)'] : shown),
    ...(changed.length > shown.length ? [`  … ${changed.length - shown.length} more changed lines`] : []),
    `  ${removed} ${removed === 1 ? 'line' : 'lines'} removed, ${added} added, ${diff.length - changed.length} unchanged`,
    replace
      ? '--replace: proposed'
      : `nothing proposed: give --replace to propose it anyway ("${PROGRAM} policy show --scope ${clean(scope)}" prints the active document)`,
  ]
  return `${lines.join('\n')}\n`
}

/** The principal's organization: --org, else GET /v1/me. */
async function orgOf(registry: Registry, orgOption: string | undefined): Promise<string> {
  if (orgOption !== undefined) return orgOption
  const id = (await me(registry)).org_id
  if (typeof id !== 'string' || !isUuid(id)) throw new SdkError('invalid_response', 'GET /v1/me named no organization.')
  return id
}

async function policy(sub: string | undefined, args: string[], io: OperatorIo): Promise<number> {
  const c = common(args, io)
  const orgOption = option(args, '--org')
  if (orgOption !== undefined) uuid(orgOption, '--org')
  const connect = async (): Promise<{ registry: Registry; base: string }> => {
    const registry = await c.connect()
    return { registry, base: `/v1/orgs/${await orgOf(registry, orgOption)}/policy` }
  }
  switch (sub) {
    case 'show': {
      const scope = scopePath(required(args, '--scope'))
      rejectLeftovers(args)
      const { registry, base } = await connect()
      const doc = record(await registry.call('GET', `${base}/${scope}`))
      if (c.asJson) io.stdout(json(doc))
      else io.stdout(`${fields(documentPairs(doc))}\n${cleanBlock(String(doc.yaml_content ?? '')).replace(/\n?$/, '\n')}`)
      return 0
    }
    case 'propose': {
      const scopeName = required(args, '--scope')
      const scope = scopePath(scopeName)
      const file = required(args, '--file')
      const replace = flag(args, '--replace')
      rejectLeftovers(args)
      if (file === '-') stdinFor(c, '--file -')
      const { registry, base } = await connect()
      const yaml = file === '-' ? await io.stdin() : await readFile(file, 'utf8')
      // Approving a proposal replaces the scope's whole document, so one made without looking would
      // silently drop the rules already in force: say what goes, and go on only when told to.
      const active = await activeDocument(registry, `${base}/${scope}`)
      if (active !== null && !replace) {
        io.stderr(replacementSummary(scopeName, active, yaml, false))
        return 1
      }
      const doc = record(await registry.call('POST', `${base}/${scope}`, { yaml_content: yaml }))
      // Said once the proposal exists, so that a refusal of it stays the one line it always is.
      if (active !== null) io.stderr(replacementSummary(scopeName, active, yaml, true))
      printRecord(io, c, doc, documentPairs(doc))
      if (!c.asJson) io.stderr(`approve with: ${PROGRAM} policy approve ${clean(doc.id)}\n`)
      return 0
    }
    case 'proposals': {
      rejectLeftovers(args)
      const { registry, base } = await connect()
      const docs = records(await registry.call('GET', `${base}/proposals`))
      io.stdout(c.asJson ? json(docs) : docs.length === 0 ? '(none)\n' : table(docs, proposalColumns))
      return 0
    }
    case 'approve':
    case 'reject': {
      const id = uuid(args.shift(), 'proposal id')
      const reason = sub === 'reject' ? required(args, '--reason') : undefined
      rejectLeftovers(args)
      if (reason !== undefined && reason.trim() === '') throw new UsageError('--reason must not be blank')
      const { registry, base } = await connect()
      const doc = record(await registry.call('POST', `${base}/proposals/${id}/${sub}`, reason === undefined ? undefined : { reason }))
      printRecord(io, c, doc, documentPairs(doc))
      return 0
    }
    case 'simulate': {
      const agent = uuid(option(args, '--agent'), '--agent')
      const operation = option(args, '--operation')
      const mcpTool = option(args, '--mcp-tool')
      const a2aMethod = option(args, '--a2a-method')
      const skill = option(args, '--skill')
      const level = trustLevel(option(args, '--trust-level'), '--trust-level', 'code')
      const proposal = option(args, '--proposal')
      rejectLeftovers(args)
      if ([operation, mcpTool, a2aMethod].filter((v) => v !== undefined).length !== 1) {
        throw new UsageError('give exactly one of --operation OP, --mcp-tool NAME and --a2a-method M')
      }
      if (skill !== undefined && a2aMethod === undefined) throw new UsageError('--skill goes with --a2a-method')
      const body = {
        // The three forms of docs/api.md §4.6: an operation as given, an MCP tools/call, an A2A call.
        ...(operation === undefined ? {} : { action: { operation } }),
        ...(mcpTool === undefined ? {} : { mcp: { method: 'tools/call', name: mcpTool } }),
        ...(a2aMethod === undefined ? {} : { a2a: { method: a2aMethod, ...(skill === undefined ? {} : { skill }) } }),
        ...(level === undefined ? {} : { subject: { trust_level: level } }),
        ...(proposal === undefined ? {} : { proposal_id: uuid(proposal, '--proposal') }),
      }
      const { registry, base } = await connect()
      const decision = record(await registry.call('POST', `${base}/agents/${agent}/simulate`, body))
      const obligations = Array.isArray(decision.obligations) ? decision.obligations as Json[] : []
      printRecord(io, c, decision, [
        ['decision', decision.decision], ['reason', decision.reason], ['decision id', decision.decision_id],
        ...(decision.required_trust_level === undefined ? [] : [['required level', decision.required_trust_level] as [string, unknown]]),
        ...(obligations.length === 0 ? [] : [['obligations', obligations.map((o) => o.type).join(', ')] as [string, unknown]]),
      ])
      return 0
    }
    default:
      throw new UsageError('policy: expected "show", "propose", "proposals", "approve", "reject" or "simulate"')
  }
}

// ---- dispatch ----------------------------------------------------------------------------------------

async function dispatch(command: string, args: string[], io: OperatorIo): Promise<number> {
  if (command === 'whoami') return whoami(args, io)
  const sub = args.shift()
  if (command === 'orgs') return orgs(sub, args, io)
  if (command === 'agents') return agents(sub, args, io)
  if (command === 'badges') return badges(sub, args, io)
  if (command === 'policy') return policy(sub, args, io)
  throw new UsageError(`unknown command: ${command}`)
}

/** One line for a refusal of the registry; what was refused is clear from the code and message. */
function describe(error: SdkError): string {
  const line = `${PROGRAM}: ${error.code}${error.status === null ? '' : ` (${error.status})`}: ${clean(error.message)}`
  const problems = (error.problems ?? []).map((p) => {
    const { path, message, code } = (typeof p === 'object' && p !== null ? p : {}) as Json
    return `  ${clean(path)}: ${clean(message)}${code === undefined ? '' : ` (${clean(code)})`}`
  })
  return [line, ...problems].join('\n') + '\n'
}

/**
 * Runs `agent-trust <command> …` for `whoami`, `orgs`, `agents`, `badges` and `policy`; the exit code.
 * Errors are one line on stderr, never a stack trace; a usage error names the command's --help.
 */
export async function runOperatorCommand(command: string, args: string[], io: OperatorIo = defaultIo): Promise<number> {
  const answer = helpOrVersion([command, ...args])
  if (answer !== null) {
    io.stdout(answer)
    return 0
  }
  const name = command === 'whoami' || args[0] === undefined || args[0].startsWith('-') ? command : `${command} ${args[0]}`
  try {
    return await dispatch(command, [...args], io)
  } catch (error) {
    if (error instanceof UsageError) {
      io.stderr(`${PROGRAM} ${name}: ${error.message} ("${PROGRAM} ${name} --help" shows the usage)\n`)
      return 2
    }
    if (error instanceof ConfigurationError) {
      io.stderr(`${PROGRAM} ${name}: ${error.message}\n`)
      return 2
    }
    if (error instanceof SdkError) {
      io.stderr(describe(error))
      return 1
    }
    const code = (error as NodeJS.ErrnoException | null)?.code
    const message = error instanceof Error ? error.message : String(error)
    // Node's file errors start with their code already.
    const prefix = typeof code === 'string' && !message.startsWith(code) ? `${code}: ` : ''
    io.stderr(`${PROGRAM} ${name}: ${prefix}${clean(message)}\n`)
    return 1
  }
}
