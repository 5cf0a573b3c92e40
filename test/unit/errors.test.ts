/**
 * Errors: every Error subclass in src/ carries a stable `code`, and the log shows an error's code and
 * the chain of causes it wraps (type, code and message each, never a stack).
 */
import t from 'tap'
import { readdirSync, readFileSync } from 'node:fs'
import path from 'node:path'
import ts from 'typescript'
import { projectPath } from '../../src/core/paths.js'
import { describeError } from '../../src/telemetry/logger.js'

const SRC = projectPath('src')
// Error classes whose module is being reshaped elsewhere; each gets its code there.
function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name)
    if (entry.isDirectory()) return sourceFiles(full)
    return entry.name.endsWith('.ts') ? [full] : []
  })
}

interface ErrorClass {
  readonly name: string
  readonly file: string
  readonly base: string
  readonly hasCode: boolean
}

/** Classes with an `extends` clause, whether they declare a `code` member (property or constructor parameter property). */
function classesOf(file: string): ErrorClass[] {
  const source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.ES2022, true)
  const out: ErrorClass[] = []
  const visit = (node: ts.Node): void => {
    if (ts.isClassDeclaration(node) && node.name !== undefined) {
      const base = node.heritageClauses?.find((h) => h.token === ts.SyntaxKind.ExtendsKeyword)?.types[0]?.expression.getText(source)
      if (base !== undefined) {
        const hasCode = node.members.some((member) =>
          (ts.isPropertyDeclaration(member) && member.name.getText(source) === 'code') ||
          (ts.isConstructorDeclaration(member) && member.parameters.some((p) => p.name.getText(source) === 'code' && ts.getModifiers(p) !== undefined)))
        out.push({ name: node.name.text, file: path.relative(SRC, file), base, hasCode })
      }
    }
    ts.forEachChild(node, visit)
  }
  visit(source)
  return out
}

t.test('every Error subclass in src/ carries a stable code', async (t) => {
  const classes = sourceFiles(SRC).flatMap(classesOf)
  // Subclasses of subclasses count too: follow the chain back to Error.
  const errorNames = new Set(['Error'])
  for (let grew = true; grew;) {
    grew = false
    for (const c of classes) {
      if (!errorNames.has(c.name) && errorNames.has(c.base)) {
        errorNames.add(c.name)
        grew = true
      }
    }
  }
  const errors = classes.filter((c) => c.name !== 'Error' && errorNames.has(c.name))
  t.ok(errors.length >= 15, `${errors.length} error classes found`)
  for (const c of errors) {
    t.ok(c.hasCode, `${c.name} (${c.file}) declares a code`)
  }
})

t.test('the log shows an error\'s code and its causes, without stacks', async (t) => {
  const root = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' })
  const middle = new Error('the registry did not answer', { cause: root })
  const top = Object.assign(new Error('start failed', { cause: middle }), { code: 'STARTUP_FAILED' })
  t.same(describeError(top), {
    type: 'Error',
    message: 'start failed',
    code: 'STARTUP_FAILED',
    cause: {
      type: 'Error',
      message: 'the registry did not answer',
      cause: { type: 'Error', message: 'connect ECONNREFUSED 127.0.0.1:5432', code: 'ECONNREFUSED' },
    },
  })
  t.notMatch(JSON.stringify(describeError(top)), /at .*\.js/, 'no stack frames')
  t.same(describeError('text'), { type: 'string', message: 'text' }, 'a thrown non-error')

  let deep: Error = new Error('0')
  for (let i = 1; i <= 10; i++) deep = new Error(String(i), { cause: deep })
  let depth = 0
  for (let d: Record<string, unknown> | undefined = describeError(deep); d !== undefined; d = d.cause as Record<string, unknown> | undefined) depth++
  t.equal(depth, 4, 'a long chain is cut after three causes')
})
