/**
 * Agent-side commands of `agent-trust` (no configuration, no database): `agent keygen`, `badge request
 * --pop`, `token`, `badge verify`, `envelope mint`, `envelope inspect`. Thin wrappers over the SDK (src/sdk);
 * each reports its own errors and returns the exit code: 0 ok, 1 runtime failure (or an invalid badge),
 * 2 usage error.
 *
 * Secrets never go through argv, where `ps` and shell history would show them: the API key is read from
 * a file, keys from key files. Nothing printed here ever contains a private key or an API key.
 */
import { execFile } from 'node:child_process'
import { readFile } from 'node:fs/promises'
import path from 'node:path'
import { flag, option, rejectLeftovers, UsageError } from './args.js'
import { AGENT_USAGE, helpOrVersion, PROGRAM } from './usage.js'
import { SdkError } from '../sdk/errors.js'
import { generateAgentKey, loadAgentKey, saveAgentKey } from '../sdk/keys.js'
import { jwksUrlFor, verifyBadgeWithJwks } from '../sdk/badges.js'
import { requestPopBadge } from '../sdk/pop.js'
import { requestClientCredentialsBadge } from '../sdk/oauth.js'
import { ENFORCEMENT_MODES, inspectEnvelope, mintChildEnvelope, mintRootEnvelope, type EnforcementMode } from '../sdk/envelopes.js'


/** Where a command writes (tests pass buffers; the CLI passes the process streams). */
export interface AgentCliIo {
  stdout: (text: string) => void
  stderr: (text: string) => void
}

// The agent commands' usage errors are the CLI's own (exit 2, usage printed).

const defaultIo: AgentCliIo = {
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
}

function required(args: string[], name: string, command: string): string {
  const value = option(args, name)
  if (value === undefined) throw new UsageError(`${command} needs ${name}`)
  return value
}


function integer(value: string | undefined, name: string, min: number, max: number): number | undefined {
  if (value === undefined) return undefined
  const n = Number(value)
  if (!/^-?\d+$/.test(value) || !Number.isSafeInteger(n) || n < min || n > max) throw new UsageError(`${name} must be an integer from ${min} to ${max}`)
  return n
}

function list(value: string | undefined): string[] | undefined {
  if (value === undefined) return undefined
  const items = value.split(',').map((v) => v.trim()).filter((v) => v !== '')
  if (items.length === 0) throw new UsageError('an empty list was given')
  return items
}

async function readText(file: string): Promise<string> {
  return file === '-' ? readStdin() : readFile(file, 'utf8')
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = []
  for await (const chunk of process.stdin) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(String(chunk)))
  return Buffer.concat(chunks).toString('utf8')
}

/** Exactly one of an inline value and a file (or `-` for stdin). */
async function inlineOrFile(args: string[], inline: string, file: string, command: string): Promise<string> {
  const value = option(args, inline)
  const path = option(args, file)
  if ((value === undefined) === (path === undefined)) throw new UsageError(`${command} needs exactly one of ${inline} and ${file}`)
  return (value ?? (await readText(path as string))).trim()
}

const json = (value: unknown): string => `${JSON.stringify(value, null, 2)}\n`

async function keygen(args: string[], io: AgentCliIo): Promise<number> {
  const out = required(args, '--out', 'agent keygen')
  const publicFile = option(args, '--public')
  rejectLeftovers(args)
  const key = generateAgentKey()
  await saveAgentKey(key, out, publicFile)
  io.stdout(json({ did: key.did, kid: key.kid, publicKeyJwk: key.publicJwk }))
  io.stderr(`private key written to ${out} (mode 0600)${publicFile === undefined ? '' : `; public JWK to ${publicFile}`}\n`)
  if (await inGitWorkTreeUnignored(out)) {
    io.stderr(`warning: ${out} is inside a git work tree and not ignored: "git add ." would commit the private key (ignore it, or keep keys outside the tree)\n`)
  }
  return 0
}

/**
 * Whether `file` lies in a git work tree without being ignored, as `git check-ignore` says (exit 1: not
 * ignored; 0: ignored; 128: no work tree). Without git nothing can be committed by mistake: false.
 */
function inGitWorkTreeUnignored(file: string): Promise<boolean> {
  return new Promise((resolve) => {
    execFile('git', ['check-ignore', '-q', path.basename(file)], { cwd: path.dirname(path.resolve(file)), timeout: 5000 }, (error) => {
      resolve(error !== null && error.code === 1)
    })
  })
}

async function badgeRequest(args: string[], io: AgentCliIo): Promise<number> {
  if (!flag(args, '--pop')) throw new UsageError('badge request: only --pop (IAL-1 proof of possession) is offered here; IAL-0 badges come from POST /v1/agents/{id}/badge')
  const command = 'badge request --pop'
  const registryUrl = required(args, '--registry', command)
  const apiKeyFile = required(args, '--api-key-file', command)
  const keyFile = required(args, '--key', command)
  const did = option(args, '--did')
  const kid = option(args, '--kid')
  const badgeTtl = integer(option(args, '--ttl'), '--ttl', 60, 3600)
  const audience = list(option(args, '--audience'))
  const asJson = flag(args, '--json')
  rejectLeftovers(args)
  const apiKey = (await readFile(apiKeyFile, 'utf8')).trim()
  if (apiKey === '') throw new SdkError('invalid_argument', `${apiKeyFile} is empty.`)
  const key = await loadAgentKey(keyFile)
  const badge = await requestPopBadge({
    registryUrl,
    apiKey,
    did: did ?? key.did,
    privateKey: key.privateKey,
    ...(kid === undefined ? {} : { kid }),
    ...(badgeTtl === undefined ? {} : { badgeTtl }),
    ...(audience === undefined ? {} : { audience }),
  })
  io.stdout(asJson ? json(badge) : `${badge.token}\n`)
  return 0
}

/** `token`: a badge from the OAuth token endpoint, the key file being the only credential. */
async function token(args: string[], io: AgentCliIo): Promise<number> {
  const command = 'token'
  const issuer = required(args, '--issuer', command)
  const keyFile = required(args, '--key', command)
  const clientId = option(args, '--client-id')
  const kid = option(args, '--kid')
  const scope = option(args, '--scope')
  const resources: string[] = []
  for (let resource = option(args, '--resource'); resource !== undefined; resource = option(args, '--resource')) resources.push(resource)
  const asJson = flag(args, '--json')
  rejectLeftovers(args)
  const key = await loadAgentKey(keyFile)
  const badge = await requestClientCredentialsBadge({
    issuer,
    clientId: clientId ?? key.did,
    privateKey: key.privateKey,
    // A did:key has one verification method, so naming it spares the authority trying others.
    ...(kid !== undefined ? { kid } : clientId === undefined ? { kid: key.kid } : {}),
    ...(resources.length === 0 ? {} : { resource: resources }),
    ...(scope === undefined ? {} : { scope }),
  })
  io.stdout(asJson ? json(badge) : `${badge.accessToken}\n`)
  return 0
}

async function badgeVerify(args: string[], io: AgentCliIo): Promise<number> {
  const command = 'badge verify'
  const registryUrl = required(args, '--registry', command)
  const issuer = option(args, '--issuer') ?? registryUrl.replace(/\/+$/, '')
  const audience = list(option(args, '--audience'))
  const acceptSelfSigned = flag(args, '--self-signed')
  const token = await inlineOrFile(args, '--token', '--token-file', command)
  rejectLeftovers(args)
  const result = await verifyBadgeWithJwks(token, {
    jwksUrl: jwksUrlFor(registryUrl),
    issuer,
    acceptSelfSigned,
    ...(audience === undefined ? {} : { audience }),
  })
  if (!result.valid) {
    io.stdout(json({ valid: false, error: result.error }))
    return 1
  }
  io.stdout(json({ valid: true, kid: result.kid, claims: result.claims }))
  return 0
}

function parseConstraints(text: string | undefined): Record<string, unknown> | undefined {
  if (text === undefined) return undefined
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch {
    throw new UsageError('--constraints must be JSON')
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new UsageError('--constraints must be a JSON object')
  return value as Record<string, unknown>
}

async function envelopeMint(args: string[], io: AgentCliIo): Promise<number> {
  const command = 'envelope mint'
  const keyFile = required(args, '--key', command)
  const issuerBadgeJti = required(args, '--issuer-badge-jti', command)
  const subject = required(args, '--subject', command)
  const subjectBadgeJti = option(args, '--subject-badge-jti')
  const capabilityClass = option(args, '--class')
  const parentFile = option(args, '--parent')
  const depth = integer(option(args, '--depth'), '--depth', 0, 1000)
  const ttl = integer(option(args, '--ttl'), '--ttl', 1, 366 * 86_400)
  const modeMin = option(args, '--mode-min')
  const constraints = parseConstraints(option(args, '--constraints'))
  const issuerDid = option(args, '--issuer')
  const kid = option(args, '--kid')
  const txnId = option(args, '--txn')
  const promptSummary = option(args, '--prompt-summary')
  rejectLeftovers(args)
  if (modeMin !== undefined && !(ENFORCEMENT_MODES as readonly string[]).includes(modeMin)) {
    throw new UsageError(`--mode-min must be one of ${ENFORCEMENT_MODES.join(', ')}`)
  }
  if (!subject.startsWith('did:')) throw new UsageError('--subject must be a DID')
  const key = await loadAgentKey(keyFile)
  const issuer = {
    did: issuerDid ?? key.did,
    privateKey: key.privateKey,
    badgeJti: issuerBadgeJti,
    ...(kid === undefined ? (issuerDid === undefined ? { kid: key.kid } : {}) : { kid }),
  }
  const common = {
    ...(constraints === undefined ? {} : { constraints }),
    ...(modeMin === undefined ? {} : { enforcementModeMin: modeMin as EnforcementMode }),
    ...(promptSummary === undefined ? {} : { promptSummary }),
  }
  let jws: string
  if (parentFile === undefined) {
    if (capabilityClass === undefined) throw new UsageError('envelope mint needs --class for a root envelope')
    jws = mintRootEnvelope({
      issuer,
      subject: { did: subject, badgeJti: subjectBadgeJti ?? null },
      capabilityClass,
      depthRemaining: depth ?? 0,
      ttlSeconds: ttl ?? 300,
      ...(txnId === undefined ? {} : { txnId }),
      ...common,
    }).jws
  } else {
    if (txnId !== undefined) throw new UsageError('--txn cannot be given with --parent: a child carries its parent\'s txn_id')
    if (subjectBadgeJti === undefined) throw new UsageError('envelope mint --parent needs --subject-badge-jti (null only at the root)')
    const parent = (await readText(parentFile)).trim()
    jws = mintChildEnvelope(parent, {
      issuer,
      subject: { did: subject, badgeJti: subjectBadgeJti },
      ...(capabilityClass === undefined ? {} : { capabilityClass }),
      ...(depth === undefined ? {} : { depthRemaining: depth }),
      ...(ttl === undefined ? {} : { ttlSeconds: ttl }),
      ...common,
    }).jws
  }
  io.stdout(`${jws}\n`)
  return 0
}

async function envelopeInspect(args: string[], io: AgentCliIo): Promise<number> {
  const jws = await inlineOrFile(args, '--jws', '--file', 'envelope inspect')
  rejectLeftovers(args)
  const { header, payload } = inspectEnvelope(jws)
  io.stdout(json({ verified: false, note: 'decoded only: the signature, key binding and times were NOT checked', header, payload }))
  return 0
}

async function dispatch(command: string, args: string[], io: AgentCliIo): Promise<number> {
  const answer = helpOrVersion([command, ...args])
  if (answer !== null) {
    io.stdout(answer)
    return 0
  }
  if (command === 'token') return token(args, io)
  const sub = args.shift()
  if (command === 'agent' && sub === 'keygen') return keygen(args, io)
  if (command === 'badge' && sub === 'request') return badgeRequest(args, io)
  if (command === 'badge' && sub === 'verify') return badgeVerify(args, io)
  if (command === 'envelope' && sub === 'mint') return envelopeMint(args, io)
  if (command === 'envelope' && sub === 'inspect') return envelopeInspect(args, io)
  const expected = { agent: '"keygen"', badge: '"request" or "verify"', envelope: '"mint" or "inspect"' }[command] ?? 'a subcommand'
  throw new UsageError(`${command}: expected ${expected}`)
}

/**
 * Runs `agent-trust <command> …` for command `agent`, `badge`, `token` or `envelope` and returns the exit code.
 * Errors are written to `io.stderr` as one line (a registry or SDK error with its code), never a stack.
 */
export async function runAgentCommand(command: string, args: string[], io: AgentCliIo = defaultIo): Promise<number> {
  try {
    return await dispatch(command, [...args], io)
  } catch (error) {
    if (error instanceof UsageError) {
      io.stderr(`${error.message}\n\n${AGENT_USAGE}`)
      return 2
    }
    if (error instanceof SdkError) {
      io.stderr(`${PROGRAM}: ${error.code}${error.status === null ? '' : ` (${error.status})`}: ${error.message}\n`)
      return 1
    }
    const code = (error as NodeJS.ErrnoException | null)?.code
    const message = error instanceof Error ? error.message : String(error)
    io.stderr(`${PROGRAM}: ${typeof code === 'string' ? `${code}: ` : ''}${message}\n`)
    return 1
  }
}
