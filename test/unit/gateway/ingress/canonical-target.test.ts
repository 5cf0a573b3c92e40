/**
 * The canonical request target: the spellings an outside review used to walk around a DENY, every
 * refused form, and properties over random targets built from the characters that make paths
 * ambiguous (`/ . % ; # \ a A` and their encodings).
 */
import t from 'tap'
import fc from 'fast-check'
import { canonicalTarget, lowerCasePath } from '../../../../src/gateway/ingress/canonical-target.js'
import { propertyRuns } from '../../../helpers/property-runs.js'

function canon(raw: string): string {
  const out = { path: '', query: '' }
  const problem = canonicalTarget(raw, out)
  return problem === null ? out.path + out.query : `REFUSED: ${problem}`
}

t.test('the review\'s spellings of /admin/x and /secret reach one canonical path', async (t) => {
  const cases: [string, string][] = [
    ['/public/../admin/x', '/admin/x'],
    ['/./admin/x', '/admin/x'],
    ['/public/%2e%2e/admin/x', '/admin/x'],
    ['/public/%2E%2E/admin/x', '/admin/x'],
    ['/public/.%2e/admin/x', '/admin/x'],
    ['/%61dmin/x', '/admin/x'],
    ['/%73ecret', '/secret'],
    ['//admin//x', '/admin/x'],
    ['/admin/./x', '/admin/x'],
    ['/a/b/../../admin/x', '/admin/x'],
    ['/../admin/x', '/admin/x'],
    ['/../../admin/x', '/admin/x'],
    ['/secret/', '/secret/'],
    ['/Admin/x', '/Admin/x'],
    ['/secret?x=1', '/secret?x=1'],
  ]
  for (const [raw, expected] of cases) t.equal(canon(raw), expected, raw)
})

t.test('normalisation: escapes, characters a path may not carry raw, dots and slashes', async (t) => {
  const cases: [string, string][] = [
    ['/', '/'],
    ['/a/b', '/a/b'],
    ['/a/b/', '/a/b/'],
    ['/a/b/.', '/a/b/'],
    ['/a/b/..', '/a/'],
    ['/..', '/'],
    ['//a///b//', '/a/b/'],
    ['/a%c3%a9', '/a%C3%A9'],
    ['/a%7e%2D%5f', '/a~-_'],
    ['/a|b', '/a%7Cb'],
    ['/a"b<c>', '/a%22b%3Cc%3E'],
    ['/a{b}^`[]', '/a%7Bb%7D%5E%60%5B%5D'],
    ['/a%20b', '/a%20b'],
    ['/a%3Fb%23c', '/a%3Fb%23c'],
    ['/100%25', '/100%25'],
    ['/100%25off', '/100%25off'],
    ['/.well-known/x', '/.well-known/x'],
    ['/a/.b/..c/c..', '/a/.b/..c/c..'],
    ["/a!$&'()*+,=:@b", "/a!$&'()*+,=:@b"],
    ['/a?x=%41&y=/../z', '/a?x=%41&y=/../z'],
    ['/a?', '/a?'],
  ]
  for (const [raw, expected] of cases) t.equal(canon(raw), expected, raw)
})

t.test('forms whose meaning differs between servers are refused', async (t) => {
  const refused = [
    '/ops/..;/admin/x', '/ops#/../admin/x', '/a;b', '/admin;jsessionid=1/x', '/a%3bb', '/a%3Bb',
    '/a%2fb', '/a%2Fb', '/a%5cb', '/a%5Cb', '/a%00', '/a%0a', '/a%0D', '/a%7f', '/a%1f',
    '/a\\b', '\\admin', '/a#b', '/a?x#y',
    '/a%zz', '/a%2', '/a%', '/a%g0', '/a?x=%zz', '/a?x=%',
    '/a%2541', '/a%25%32%65', '/%252e%252e/admin',
    '*', 'http://gateway/admin/x', 'https://h/x', 'h:80', '',
  ]
  for (const raw of refused) t.match(canon(raw), /^REFUSED: /, JSON.stringify(raw))
})

t.test('lowerCasePath lower-cases letters but keeps escapes upper case', async (t) => {
  t.equal(lowerCasePath('/Admin/%C3%A9X'), '/admin/%C3%A9x')
  t.equal(lowerCasePath('/already/lower'), '/already/lower')
})

// ---------------------------------------------------------------------------------------------------
// Properties

const ALPHABET = ['/', '.', '%', ';', '#', '\\', 'a', 'A', '%2e', '%2E', '%2f', '%5c', '%3b', '%61', '%41', '%25', '%00', '..', '//']
const rawTarget = fc.array(fc.constantFrom(...ALPHABET), { maxLength: 24 }).map((parts) => '/' + parts.join(''))

/** Every `%XX` decoded once (invalid escapes left as they are). */
function decodeOnce(text: string): string {
  return text.replace(/%([0-9A-Fa-f]{2})/g, (_m, hex: string) => String.fromCharCode(parseInt(hex, 16)))
}
/** RFC 3986 §5.2.4 dot removal with merged slashes, on an already-split path. */
function removeDots(path: string): string {
  const out: string[] = []
  const segments = path.split('/').slice(1)
  segments.forEach((segment, i) => {
    if (segment === '..') out.pop()
    else if (segment !== '.' && segment !== '') out.push(segment)
    if (i === segments.length - 1 && (segment === '' || segment === '.' || segment === '..') && out.length > 0) out.push('')
  })
  return '/' + out.join('/')
}

t.test('property: the canonical form is a fixed point, so re-deciding the forwarded request gives the same answer', async (t) => {
  fc.assert(fc.property(rawTarget, (raw) => {
    const first = canon(raw)
    if (first.startsWith('REFUSED')) return true
    return canon(first) === first && canon(lowerCasePath(first)) === lowerCasePath(first)
  }), propertyRuns(20_000))
  t.pass()
})

t.test('property: every way a server may read the canonical form reads the same path', async (t) => {
  // Decode then normalise, normalise then decode, decode twice: the three ways servers are known to
  // read a path agree on every canonical form (no dot segment, no separator or escape hidden in one).
  fc.assert(fc.property(rawTarget, (raw) => {
    const c = canon(raw)
    if (c.startsWith('REFUSED')) return true
    const decodeFirst = removeDots(decodeOnce(c))
    const normaliseFirst = decodeOnce(removeDots(c))
    const twice = removeDots(decodeOnce(decodeOnce(c)))
    return decodeFirst === normaliseFirst && decodeFirst === twice && !/[\\;#\0]/.test(decodeFirst) && !decodeFirst.includes('//')
  }), propertyRuns(20_000))
  t.pass()
})

/** Spellings of a canonical path: encoded letters, dot segments, doubled slashes, `x/..` detours. */
function spellingOf(segments: string[]): fc.Arbitrary<string> {
  const letter = (ch: string): fc.Arbitrary<string> => fc.constantFrom(ch, `%${ch.charCodeAt(0).toString(16)}`, `%${ch.charCodeAt(0).toString(16).toUpperCase()}`)
  const segment = (text: string): fc.Arbitrary<string> => fc.tuple(...[...text].map(letter)).map((parts) => parts.join(''))
  const detour = fc.constantFrom('', '/.', '/./.', '/x/..', '/%2e', '/zz/%2E%2e', '/', '//')
  return fc.tuple(...segments.map((s) => fc.tuple(detour, segment(s))), detour).map(([...parts]) => {
    const last = parts.pop() as string
    return (parts as [string, string][]).map(([d, s]) => `${d}/${s}`).join('') + (last.endsWith('/') || last === '' ? '' : last.replace(/\/+$/, ''))
  })
}

t.test('property: no spelling of a protected path canonicalises to anything but that path', async (t) => {
  for (const protectedPath of [['admin', 'x'], ['secret']]) {
    const expected = '/' + protectedPath.join('/')
    fc.assert(fc.property(spellingOf(protectedPath), (raw) => {
      const c = canon(raw)
      // `/.` at the end leaves a trailing slash: the same resource for the policy (see the docs).
      return c === expected || c === `${expected}/` || c.startsWith('REFUSED')
    }), propertyRuns(5_000))
  }
  t.pass()
})

t.test('property: server-specific spellings (path parameters, backslashes, fragments, encoded separators) are refused', async (t) => {
  const trick = fc.constantFrom('/..;', ';x', '\\..\\', '#/..', '%2f..', '%5c..', '%252e%252e', '/%2e%2e;')
  fc.assert(fc.property(fc.tuple(fc.constantFrom('/ops', '/public', ''), trick, fc.constantFrom('/admin/x', '/secret')), ([before, middle, after]) => {
    return canon(before + middle + after).startsWith('REFUSED')
  }), propertyRuns(2_000))
  t.pass()
})
