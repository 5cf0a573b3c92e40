/**
 * The layer rules of src/, checked on every import (static, `export … from`, type-only and dynamic).
 * A layer is a top folder of src/ (or a file at its root, named without extension); each may import
 * itself, the layers listed for it below, node builtins and packages, minus the packages it is denied.
 *
 *   core       nothing of ours: the shared vocabulary, pure code and the project paths
 *   sdk        core (the published client must not pull in the service)
 *   config     core
 *   telemetry  core
 *   net        core, telemetry
 *   http       core, config, telemetry
 *   db         core
 *   authority  core, config, db, net, telemetry (never admin: the planes call the authority, not back)
 *   bundles    core, db (the policy bundle builder, shared by the admin route and the appliance)
 *   gateway    core, config, http, net, telemetry (never admin, db or authority: it runs without them)
 *   admin      core, config, db, authority, bundles, http, net, telemetry, version (never gateway)
 *   appliance  everything but admin, cli and main: it feeds the gateway from the database
 *   cluster    core, config, http, telemetry (the gateway workers' primary and worker sides, no gateway code)
 *   version    core
 *   node-flags nothing of ours
 *   cli, main  anything (the composition roots)
 *
 * Packages: gateway, core and sdk never import fastify, @fastify/*, pg or @electric-sql/pglite (the
 * gateway's hot path is node:http, and neither the vocabulary nor the SDK may drag in a web framework or
 * a database driver).
 */
import t from 'tap'
import { readdirSync, readFileSync } from 'node:fs'
import path from 'node:path'
import ts from 'typescript'
import { projectPath } from '../../src/core/paths.js'

const ANY = '*'
const ALLOWED: Readonly<Record<string, readonly string[]>> = {
  core: [],
  sdk: ['core'],
  config: ['core'],
  telemetry: ['core'],
  net: ['core', 'telemetry'],
  http: ['core', 'config', 'telemetry'],
  db: ['core'],
  authority: ['core', 'config', 'db', 'net', 'telemetry'],
  bundles: ['core', 'db'],
  gateway: ['core', 'config', 'http', 'net', 'telemetry'],
  admin: ['core', 'config', 'db', 'authority', 'bundles', 'http', 'net', 'telemetry', 'version'],
  appliance: ['core', 'config', 'db', 'authority', 'bundles', 'gateway', 'http', 'net', 'telemetry'],
  cluster: ['core', 'config', 'http', 'telemetry'],
  version: ['core'],
  'node-flags': [],
  cli: [ANY],
  main: [ANY],
}

const FRAMEWORKS_AND_DRIVERS = ['fastify', '@fastify/*', 'pg', '@electric-sql/pglite']
const DENIED_PACKAGES: Readonly<Record<string, readonly string[]>> = {
  gateway: FRAMEWORKS_AND_DRIVERS,
  core: FRAMEWORKS_AND_DRIVERS,
  sdk: FRAMEWORKS_AND_DRIVERS,
}

const SRC = projectPath('src')

/** One import of one file: the specifier as written and what it names. */
interface ImportEdge {
  readonly file: string
  readonly specifier: string
}

/** Every .ts file under `dir`, as paths relative to src/. */
function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name)
    if (entry.isDirectory()) return sourceFiles(full)
    return entry.name.endsWith('.ts') ? [path.relative(SRC, full)] : []
  })
}

/** The specifiers a source text imports; TypeScript's scanner skips comments and strings. */
function importsOf(text: string): string[] {
  return ts.preProcessFile(text, true, true).importedFiles.map((f) => f.fileName)
}

/** The layer of a path relative to src/: its top folder, or a root file's name without extension. */
function layerOf(relative: string): string {
  const [top] = relative.split(path.sep)
  return (top as string).replace(/\.(ts|js)$/, '')
}

function packageName(specifier: string): string {
  const parts = specifier.split('/')
  return specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0] as string
}

function deniedPackage(layer: string, name: string): boolean {
  return (DENIED_PACKAGES[layer] ?? []).some((rule) => rule.endsWith('/*') ? name.startsWith(rule.slice(0, -1)) : name === rule)
}

/** Every rule an import breaks, in words naming the file and the import. */
function violations(edges: readonly ImportEdge[]): string[] {
  const out: string[] = []
  for (const { file, specifier } of edges) {
    const from = layerOf(file)
    const allowed = ALLOWED[from]
    if (allowed === undefined) {
      out.push(`${file}: layer "${from}" has no rule; add it to the layer list`)
      continue
    }
    if (specifier.startsWith('.')) {
      const target = path.relative(SRC, path.resolve(SRC, path.dirname(file), specifier))
      if (target.startsWith('..')) {
        out.push(`${file}: imports ${specifier}, outside src/`)
        continue
      }
      const to = layerOf(target)
      if (to !== from && !allowed.includes(to) && !allowed.includes(ANY)) {
        out.push(`${file}: ${from} must not import ${to} (${specifier})`)
      }
    } else if (!specifier.startsWith('node:') && deniedPackage(from, packageName(specifier))) {
      out.push(`${file}: ${from} must not import the package ${packageName(specifier)} (${specifier})`)
    }
  }
  return out
}

const files = sourceFiles(SRC)
const edges: ImportEdge[] = files.flatMap((file) =>
  importsOf(readFileSync(path.join(SRC, file), 'utf8')).map((specifier) => ({ file, specifier })))

t.test('the import reader sees static, re-exported, type-only and dynamic imports, and nothing in comments or strings', async (t) => {
  const text = [
    "import a from './a.js'",
    "import type { B } from '../b.js'",
    "import {\n  c,\n} from 'pkg'",
    "export * from './e.js'",
    "export { f } from '@scope/f'",
    "const g = await import('./g.js')",
    "// import nope from 'nope'",
    "const s = \"import z from 'z'\"",
  ].join('\n')
  t.same(importsOf(text), ['./a.js', '../b.js', 'pkg', './e.js', '@scope/f', './g.js'])
  t.ok(files.length > 100, `${files.length} source files read`)
  t.ok(edges.some((e) => e.file === 'main.ts' && e.specifier === './admin/app.js'), 'main.ts imports the admin app')
})

t.test('each rule is enforced: a forbidden import is reported', async (t) => {
  const broken: ImportEdge[] = [
    { file: path.join('gateway', 'x.ts'), specifier: '../admin/app.js' },
    { file: path.join('gateway', 'x.ts'), specifier: '../db/database.js' },
    { file: path.join('gateway', 'snapshot', 'x.ts'), specifier: '../../authority/did-resolver.js' },
    { file: path.join('gateway', 'x.ts'), specifier: 'fastify' },
    { file: path.join('gateway', 'x.ts'), specifier: '@fastify/rate-limit' },
    { file: path.join('gateway', 'x.ts'), specifier: 'pg' },
    { file: path.join('admin', 'x.ts'), specifier: '../gateway/server.js' },
    { file: path.join('core', 'x.ts'), specifier: '../config/index.js' },
    { file: path.join('core', 'policy', 'x.ts'), specifier: '../../db/database.js' },
    { file: path.join('sdk', 'x.ts'), specifier: '../gateway/txn-id.js' },
    { file: path.join('sdk', 'x.ts'), specifier: '../db/database.js' },
    { file: path.join('authority', 'x.ts'), specifier: '../admin/services/agents.js' },
    { file: path.join('config', 'x.ts'), specifier: '../gateway/runtime.js' },
    { file: path.join('bundles', 'x.ts'), specifier: '../admin/app.js' },
    { file: path.join('appliance', 'x.ts'), specifier: '../admin/app.js' },
    { file: path.join('newlayer', 'x.ts'), specifier: '../core/did.js' },
    { file: path.join('core', 'x.ts'), specifier: '../../test/helpers/admin.js' },
  ]
  const reported = violations(broken)
  t.equal(reported.length, broken.length, 'every forbidden import is reported')
  for (const line of reported) t.comment(line)
  const fine: ImportEdge[] = [
    { file: path.join('gateway', 'x.ts'), specifier: '../core/did.js' },
    { file: path.join('gateway', 'x.ts'), specifier: 'node:http' },
    { file: path.join('gateway', 'x.ts'), specifier: 'undici' },
    { file: path.join('core', 'policy', 'x.ts'), specifier: '../did.js' },
    { file: path.join('admin', 'x.ts'), specifier: 'fastify' },
    { file: path.join('cli', 'x.ts'), specifier: '../main.js' },
  ]
  t.same(violations(fine), [])
})

t.test('src/ keeps the layer rules', async (t) => {
  t.same(violations(edges), [], 'no import breaks a layer rule')
})
