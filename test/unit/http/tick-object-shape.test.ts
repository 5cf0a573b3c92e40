/**
 * src/http/tick-object-shape.ts: holding one nextTick queue entry keeps V8's inline caches for the
 * entry's object literal monomorphic across major GCs that run while the queue is empty. Each case runs
 * a child process with --allow-natives-syntax and --expose-gc: bursts of nextTick calls, each followed
 * by an idle full GC (what the memory reducer does to an idle gateway), then a dump of the feedback of
 * `process.nextTick`. The control without the retention shows the failure the module exists to prevent,
 * so a Node upgrade that changes nextTick makes this test say so.
 */
import t from 'tap'
import { spawn } from 'node:child_process'
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { retainTickObjectShape } from '../../../src/http/tick-object-shape.js'
import { compiledModuleUrl } from '../../helpers/compiled.js'

t.setTimeout(120_000)
const dir = mkdtempSync(path.join(tmpdir(), 'svc-tick-shape-'))
t.teardown(() => rmSync(dir, { recursive: true, force: true }))
const MODULE = compiledModuleUrl('http', 'tick-object-shape.js')

const CHILD = `
import { executionAsyncId } from 'node:async_hooks'
import { retainTickObjectShape } from ${JSON.stringify(MODULE)}
if (process.argv[1] === 'retain' && !retainTickObjectShape()) throw new Error('no entry retained')
// A promise reaction runs under an async id of its own only while an async hook is enabled.
console.log('reaction async id', await Promise.resolve().then(() => executionAsyncId()))
const burst = () => new Promise((resolve) => {
  let n = 0
  const step = () => { if (++n < 2000) process.nextTick(step); else resolve() }
  process.nextTick(step)
})
for (let round = 0; round < Number(process.argv[2]); round++) {
  await burst()
  await new Promise((resolve) => setTimeout(resolve, 5))
  globalThis.gc()
}
%DebugPrint(process.nextTick)
`

interface ChildReport {
  /** IC states of the DefineKeyedOwnPropertyInLiteral slots of nextTick after the bursts. */
  states: string[]
  reactionAsyncId: number
}

/**
 * The child's stdout goes to a file: %DebugPrint writes with C stdio, and on a non-blocking pipe a long
 * dump gets cut short.
 */
function runChild(mode: 'retain' | 'none', rounds = 6): Promise<ChildReport> {
  const out = path.join(dir, `${mode}.out`)
  const fd = openSync(out, 'w')
  const child = spawn(process.execPath, ['--allow-natives-syntax', '--expose-gc', '--input-type=module', '-e', CHILD, mode, String(rounds)], { stdio: ['ignore', fd, 'inherit'] })
  closeSync(fd)
  return new Promise((resolve, reject) => {
    child.once('error', reject)
    child.once('exit', (code) => {
      if (code !== 0) return reject(new Error(`child exited with ${String(code)}`))
      const stdout = readFileSync(out, 'utf8')
      resolve({
        states: [...stdout.matchAll(/slot #\d+ DefineKeyedOwnPropertyInLiteral (\w+)/g)].map((m) => m[1]!),
        reactionAsyncId: Number(/^reaction async id (\d+)$/m.exec(stdout)?.[1] ?? NaN),
      })
    })
  })
}

t.test('without the retention, idle GCs drive the literal caches megamorphic (the control)', async (t) => {
  // On a busy machine six idle GCs do not always clear the caches, so the control runs longer and gets
  // three children to show the failure; the retained case below must hold every time.
  const seen: string[][] = []
  for (let attempt = 0; attempt < 3; attempt++) {
    const { states } = await runChild('none', 24)
    t.equal(states.length, 4, 'the literal has four property slots (Node 20 nextTick)')
    seen.push(states)
    if (states.includes('MEGAMORPHIC')) break
  }
  t.ok(seen.some((states) => states.includes('MEGAMORPHIC')), `states: ${seen.map((s) => s.join(', ')).join(' / ')}`)
})

t.test('with one entry retained, every literal cache stays monomorphic', async (t) => {
  const { states, reactionAsyncId } = await runChild('retain')
  t.same(states, ['MONOMORPHIC', 'MONOMORPHIC', 'MONOMORPHIC', 'MONOMORPHIC'])
  t.equal(reactionAsyncId, 0, 'the init hook used to catch the entry is disabled again')
})

t.test('idempotent', async (t) => {
  t.equal(retainTickObjectShape(), true)
  t.equal(retainTickObjectShape(), true)
  const ticked = await new Promise<boolean>((resolve) => process.nextTick(() => resolve(true)))
  t.equal(ticked, true, 'nextTick still runs callbacks')
})
