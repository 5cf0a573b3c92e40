/**
 * The Node versions the project declares against the packages it installs: every package in
 * package-lock.json (runtime and development alike, since `npm ci` installs both) must accept the lowest
 * Node version `engines.node` admits, so `npm ci` on a supported Node prints no EBADENGINE warning and
 * no dependency relies on a newer Node than the one the project promises to run on.
 */
import t from 'tap'
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import path from 'node:path'
import { PROJECT_ROOT } from '../../src/core/paths.js'

interface Semver {
  validRange(range: string): string | null
  minVersion(range: string): { version: string } | null
  satisfies(version: string, range: string): boolean
}
// semver is in the tree already (fastify and npm's own tooling use it); it ships no types of its own
const semver = createRequire(import.meta.url)('semver') as Semver

interface LockEntry { readonly version?: string; readonly dev?: boolean; readonly engines?: unknown }
interface Lock { readonly packages: Readonly<Record<string, LockEntry>> }

const read = (name: string): unknown => JSON.parse(readFileSync(path.join(PROJECT_ROOT, name), 'utf8'))
const manifest = read('package.json') as { engines?: { node?: string } }
const lock = read('package-lock.json') as Lock

/** The `engines.node` range of a lock entry; npm ignores the old array form (`["node >= 0.2.0"]`). */
function nodeRange(entry: LockEntry): string | undefined {
  const engines = entry.engines
  if (typeof engines !== 'object' || engines === null || Array.isArray(engines)) return undefined
  const node = (engines as Record<string, unknown>)['node']
  return typeof node === 'string' ? node : undefined
}

const declared = manifest.engines?.node ?? ''
const minimum = semver.validRange(declared) === null ? null : semver.minVersion(declared)?.version ?? null

t.test('the project declares a Node range with a lowest version', async (t) => {
  t.not(semver.validRange(declared), null, `engines.node "${declared}" is a valid range`)
  t.not(minimum, null, 'the range has a lowest version')
  t.equal(nodeRange(lock.packages[''] ?? {}), declared, 'package-lock.json records the same range')
})

t.test('every locked package accepts the lowest declared Node version', async (t) => {
  if (minimum === null) return t.fail('no lowest version to check against')
  const excluding: string[] = []
  let checked = 0
  for (const [where, entry] of Object.entries(lock.packages)) {
    if (where === '') continue
    const range = nodeRange(entry)
    if (range === undefined) continue
    checked++
    // an unparseable range is one npm would warn about too
    const ok = semver.validRange(range) !== null && semver.satisfies(minimum, range)
    if (!ok) excluding.push(`${where.replace(/^.*node_modules\//, '')}@${entry.version ?? '?'} (${entry.dev === true ? 'dev' : 'runtime'}) asks for node ${range}`)
  }
  t.ok(checked > 100, `checked the engines of ${checked} packages`)
  t.same(excluding, [], `no package excludes Node ${minimum}`)
})

t.test('the check sees a package that excludes the minimum', async (t) => {
  // the rule itself, so a silently permissive check cannot pass the test above
  t.equal(semver.satisfies('20.19.0', '>=22'), false)
  t.equal(semver.satisfies('20.19.0', '^20.19.0 || ^22.12.0 || >=23'), true)
  t.equal(semver.satisfies('20.18.1', '^20.19.0 || ^22.12.0 || >=23'), false)
  t.equal(nodeRange({ engines: ['node >= 0.2.0'] }), undefined)
})
