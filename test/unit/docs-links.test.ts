/**
 * The documentation stays inside the repository and stays connected: no tracked file refers to a
 * document outside it, every relative link (and its #anchor) in a Markdown file leads somewhere, and every
 * `docs/wire-contract.md §N` or `docs/api.md §N` cited anywhere names a section that exists.
 */
import t from 'tap'
import { execFileSync } from 'node:child_process'
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import path from 'node:path'
import { PROJECT_ROOT } from '../../src/core/paths.js'

// Assembled from pieces so that this file does not contain what it looks for.
const OUTSIDE_REFERENCES = [['..', 'shared'].join('/'), ['shared', 'design', ''].join('/'), ['shared', 'spec', ''].join('/'), ['protocol', 'md'].join('.'), ['service', 'spec'].join('-')]

const SKIPPED_DIRECTORIES = new Set(['node_modules', 'dist', '.git', 'data', 'coverage', '.tap', '.build'])

/** Tracked files (git ls-files), or every file outside build and data directories when git is absent. */
function repositoryFiles(): string[] {
  try {
    return execFileSync('git', ['ls-files', '-z'], { cwd: PROJECT_ROOT, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] })
      .split('\0').filter((file) => file !== '' && existsSync(path.join(PROJECT_ROOT, file)))
  } catch {
    const files: string[] = []
    const walk = (dir: string): void => {
      for (const entry of readdirSync(path.join(PROJECT_ROOT, dir), { withFileTypes: true })) {
        const relative = path.posix.join(dir, entry.name)
        if (entry.isDirectory()) {
          if (!SKIPPED_DIRECTORIES.has(entry.name)) walk(relative)
        } else if (entry.isFile()) {
          files.push(relative)
        }
      }
    }
    walk('')
    return files
  }
}

/** The file's text, or null for a binary file. */
function textOf(file: string): string | null {
  const bytes = readFileSync(path.join(PROJECT_ROOT, file))
  return bytes.includes(0) ? null : bytes.toString('utf8')
}

const FILES = repositoryFiles()
const MARKDOWN = FILES.filter((file) => file.endsWith('.md'))

/** Markdown without fenced code blocks and inline code spans: what is left holds the real links. */
function proseOf(markdown: string): string {
  return markdown.replace(/^[ \t]*(```|~~~)[^\n]*\n[\s\S]*?^[ \t]*\1[ \t]*$/gm, '').replace(/`[^`\n]*`/g, '')
}

/** GitHub's heading anchor: lower case, punctuation dropped, spaces as hyphens. */
function headingSlug(heading: string): string {
  return heading.trim().toLowerCase().replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '').replace(/ /g, '-')
}

/** The headings of a Markdown file (outside code blocks), in order. */
function headingsOf(markdown: string): string[] {
  const headings: string[] = []
  let fence: string | null = null
  for (const line of markdown.split('\n')) {
    const marker = /^[ \t]*(```|~~~)/.exec(line)?.[1]
    if (marker !== undefined) fence = fence === null ? marker : (fence === marker ? null : fence)
    else if (fence === null) {
      const heading = /^#{1,6}[ \t]+(.+?)[ \t#]*$/.exec(line)?.[1]
      if (heading !== undefined) headings.push(heading)
    }
  }
  return headings
}

/** Anchors of a Markdown file as GitHub generates them, duplicates numbered. */
function anchorsOf(markdown: string): Set<string> {
  const seen = new Map<string, number>()
  const anchors = new Set<string>()
  for (const heading of headingsOf(markdown)) {
    const slug = headingSlug(heading)
    const count = seen.get(slug) ?? 0
    seen.set(slug, count + 1)
    anchors.add(count === 0 ? slug : `${slug}-${count}`)
  }
  return anchors
}

t.test('the heading anchors follow GitHub', async (t) => {
  t.equal(headingSlug('8. Policy decisions'), '8-policy-decisions')
  t.equal(headingSlug('2.12 PDP request and response'), '212-pdp-request-and-response')
  t.equal(headingSlug('`/readyz` body'), 'readyz-body')
  t.equal(headingSlug('did:web hosts'), 'didweb-hosts')
  t.equal(headingSlug('External PDP (HTTP and OPA protocols)'), 'external-pdp-http-and-opa-protocols')
  t.strictSame([...anchorsOf('# A\n\n```sh\n# not a heading\n```\n\n## A\n')], ['a', 'a-1'], 'code blocks hold no headings; repeats are numbered')
})

t.test('no tracked file refers to a document outside the repository', async (t) => {
  t.ok(FILES.length > 100 && FILES.includes('README.md'), 'the repository files were listed')
  const found: string[] = []
  for (const file of FILES) {
    const text = textOf(file)
    if (text === null) continue
    text.split('\n').forEach((line, index) => {
      for (const reference of OUTSIDE_REFERENCES) {
        if (line.includes(reference)) found.push(`${file}:${index + 1} refers to ${reference}`)
      }
    })
  }
  t.strictSame(found, [], 'cite docs/ instead')
})

t.test('every relative link in the Markdown files leads to a file (and heading) that exists', async (t) => {
  t.ok(MARKDOWN.includes('docs/wire-contract.md'), 'the Markdown files were listed')
  const anchors = new Map<string, Set<string>>()
  const anchorsOfFile = (file: string): Set<string> => {
    let set = anchors.get(file)
    if (set === undefined) {
      set = anchorsOf(readFileSync(path.join(PROJECT_ROOT, file), 'utf8'))
      anchors.set(file, set)
    }
    return set
  }
  const broken: string[] = []
  let checked = 0
  for (const file of MARKDOWN) {
    const prose = proseOf(readFileSync(path.join(PROJECT_ROOT, file), 'utf8'))
    for (const match of prose.matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
      const link = match[1] as string
      if (/^[a-z][a-z0-9+.-]*:/i.test(link)) continue
      checked++
      const [target = '', anchor] = link.split('#', 2)
      const resolved = target === '' ? file : path.posix.normalize(path.posix.join(path.posix.dirname(file), decodeURIComponent(target)))
      if (resolved.startsWith('../') || path.posix.isAbsolute(resolved)) {
        broken.push(`${file}: ${link} leaves the repository`)
        continue
      }
      if (!existsSync(path.join(PROJECT_ROOT, resolved))) {
        broken.push(`${file}: ${link} names no file`)
        continue
      }
      if (anchor !== undefined && anchor !== '' && resolved.endsWith('.md') && statSync(path.join(PROJECT_ROOT, resolved)).isFile()) {
        if (!anchorsOfFile(resolved).has(anchor)) broken.push(`${file}: ${link} names no heading of ${resolved}`)
      }
    }
  }
  t.ok(checked > 50, `links were found (${checked})`)
  t.strictSame(broken, [], 'every relative link resolves')
})

t.test('every cited section of docs/wire-contract.md and docs/api.md exists', async (t) => {
  const sections = new Map<string, Set<string>>()
  for (const doc of ['wire-contract', 'api']) {
    const numbers = new Set<string>()
    for (const heading of headingsOf(readFileSync(path.join(PROJECT_ROOT, 'docs', `${doc}.md`), 'utf8'))) {
      const number = /^(\d+(?:\.\d+)*)\.?\s/.exec(heading)?.[1]
      if (number !== undefined) numbers.add(number)
    }
    sections.set(doc, numbers)
  }
  t.ok((sections.get('wire-contract')?.size ?? 0) >= 13, 'the wire contract has its numbered sections')
  const missing: string[] = []
  let citations = 0
  for (const file of FILES) {
    const text = textOf(file)
    if (text === null) continue
    for (const match of text.matchAll(/docs\/(wire-contract|api)\.md §(\d+(?:\.\d+)*)/g)) {
      citations++
      const number = (match[2] as string).replace(/\.$/, '')
      if (!sections.get(match[1] as string)?.has(number)) missing.push(`${file}: docs/${match[1]}.md §${number}`)
    }
  }
  t.ok(citations > 0, `citations were found (${citations})`)
  t.strictSame(missing, [], 'every cited section exists')
})
