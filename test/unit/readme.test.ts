/**
 * The README stays a front door: at most 300 lines (the reference lives in docs/), the two set-up commands
 * exactly as people copy them, and a walkthrough that writes private keys only where git ignores them.
 */
import t from 'tap'
import { readFileSync } from 'node:fs'
import { projectPath } from '../../src/core/paths.js'

const README = readFileSync(projectPath('README.md'), 'utf8')
const GITIGNORE = readFileSync(projectPath('.gitignore'), 'utf8').split('\n').map((line) => line.trim())

t.test('the README is at most 300 lines', async (t) => {
  const lines = README.endsWith('\n') ? README.split('\n').length - 1 : README.split('\n').length
  t.ok(lines <= 300, `README.md has ${lines} lines; move reference material into docs/`)
})

t.test('the set-up commands are there, word for word', async (t) => {
  for (const command of ['npm ci && npm start', 'npm ci && npm test']) {
    t.match(README, new RegExp(`\`\`\`sh\\n${command.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\n\`\`\``), `a sh block of exactly "${command}"`)
  }
})

t.test('the walkthrough writes private keys under data/, which git ignores; *.jwk is ignored everywhere', async (t) => {
  t.ok(GITIGNORE.includes('data/'), '.gitignore ignores data/')
  t.ok(GITIGNORE.includes('*.jwk'), '.gitignore ignores *.jwk')
  const keyFiles = [...README.matchAll(/(?:keygen --out|--key) (\S+)/g)].map((match) => match[1] as string)
  t.ok(keyFiles.length >= 2, 'the walkthrough makes and uses a key file')
  for (const file of keyFiles) t.match(file, /^data\//, `${file} is under data/`)
  t.notMatch(README, /> bot\.json/, 'nor the agent\'s key description in the repository root')
})
