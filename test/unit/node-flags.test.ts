/**
 * src/node-flags.ts: `startedWith` sees a flag given on node's command line or in NODE_OPTIONS, and the
 * flags do what the module says (a larger young generation). Each case runs a child node, since both
 * are fixed when a process starts. Where the flags must be passed is checked in deploy-artifacts.test.ts.
 */
import t from 'tap'
import { execFileSync } from 'node:child_process'
import { NODE_FLAGS } from '../../src/node-flags.js'
import { compiledModuleUrl } from '../helpers/compiled.js'

const MODULE = compiledModuleUrl('node-flags.js')

/**
 * Runs a child that reports `startedWith` for every flag and the young generation's size after enough
 * short-lived garbage to grow it to its maximum.
 */
function child(args: string[], nodeOptions?: string): { started: boolean[]; newSpaceMiB: number } {
  const code = `
    import v8 from 'node:v8'
    import { NODE_FLAGS, startedWith } from ${JSON.stringify(MODULE)}
    let keep = []
    for (let i = 0; i < 3e6; i++) { keep.push({ i, s: 'x' + i }); if (keep.length > 20000) keep = [] }
    const space = v8.getHeapSpaceStatistics().find((s) => s.space_name === 'new_space')
    console.log(JSON.stringify({ started: NODE_FLAGS.map(startedWith), newSpaceMiB: space.space_size / 1048576 }))
  `
  const env = { PATH: process.env.PATH, ...(nodeOptions === undefined ? {} : { NODE_OPTIONS: nodeOptions }) }
  return JSON.parse(execFileSync(process.execPath, [...args, '--input-type=module', '-e', code], { env, encoding: 'utf8' }))
}

t.test('a flag on the command line is seen, and enlarges the young generation', async (t) => {
  const plain = child([])
  t.same(plain.started, NODE_FLAGS.map(() => false), 'without flags, none is reported as given')
  const tuned = child([...NODE_FLAGS])
  t.same(tuned.started, NODE_FLAGS.map(() => true), 'each flag is reported as given')
  t.ok(tuned.newSpaceMiB >= 2 * plain.newSpaceMiB, `young generation ${tuned.newSpaceMiB} MiB with the flags, ${plain.newSpaceMiB} MiB without`)
})

t.test('a flag in NODE_OPTIONS is seen too, bare or quoted as node allows', async (t) => {
  t.same(child([], NODE_FLAGS.join(' ')).started, NODE_FLAGS.map(() => true), 'bare')
  const quoted = ['--no-warnings', ...NODE_FLAGS].map((f) => `"${f}"`).join(' ')
  t.same(child([], quoted).started, NODE_FLAGS.map(() => true), `quoted: ${quoted}`)
  t.same(child([], '"--no-warnings"').started, NODE_FLAGS.map(() => false), 'other options only')
})

t.test('another value of the same flag counts as given (the operator chose it)', async (t) => {
  const other = child(['--max-semi-space-size=32'])
  t.same(other.started, NODE_FLAGS.map((f) => f.startsWith('--max-semi-space-size')))
})
