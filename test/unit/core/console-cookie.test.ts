/**
 * The console cookie's removal from a `Cookie` header (docs/console.md, "The cookie never leaves"), against
 * two readers: the admin plane's own (what it would take as the credential) and jshttp's `cookie` parser
 * (what Express and Fastify applications behind the gateway read). Over random spellings: spacing, empty
 * parts, the cookie twice, names that merely contain the name, pairs without `=`.
 */
import t from 'tap'
import fc from 'fast-check'
import { parseCookie } from 'cookie'
import { CONSOLE_COOKIE, isConsoleCookiePair, setsConsoleCookie, withoutConsoleCookie } from '../../../src/core/console-cookie.js'
import { consoleCookie } from '../../../src/admin/plugins/console-cookie.js'
import { propertyRuns } from '../../helpers/property-runs.js'

const SECRET = 'c2VjcmV0LXNlc3Npb24tdmFsdWUtMzItYnl0ZXMtbG9uZw'

/** What a header value would be read as by the admin plane: its console cookie, or null. */
function adminReads(value: string): string | null {
  try {
    return consoleCookie({ headers: { cookie: value } })
  } catch {
    // Two different values: refused, but a console cookie all the same.
    return 'two different values'
  }
}

/** The non-empty parts other than console pairs, trimmed: what must survive, in order. */
function otherParts(value: string): string[] {
  return value.split(';').map((part) => part.trim()).filter((part) => part !== '' && !isConsoleCookiePair(part))
}

t.test('examples', async (t) => {
  const cases: [string, string | null][] = [
    [`${CONSOLE_COOKIE}=${SECRET}`, null],
    [`a=1; ${CONSOLE_COOKIE}=${SECRET}; b=2`, 'a=1; b=2'],
    [`${CONSOLE_COOKIE}=${SECRET}; a=1`, 'a=1'],
    [`a=1; ${CONSOLE_COOKIE}=${SECRET}`, 'a=1'],
    [`a=1;${CONSOLE_COOKIE}=${SECRET};b=2`, 'a=1;b=2'],
    [`a=1 ;  \t${CONSOLE_COOKIE} \t= ${SECRET} ;\tb=2`, 'a=1 ;\tb=2'],
    [`${CONSOLE_COOKIE}=one; a=1; ${CONSOLE_COOKIE}=two`, 'a=1'],
    [`${CONSOLE_COOKIE}=; ${CONSOLE_COOKIE}=${SECRET};`, null],
    [`;;${CONSOLE_COOKIE}=${SECRET};; `, null],
    // Names that contain the name are other cookies, kept as sent.
    [`my_${CONSOLE_COOKIE}=1; ${CONSOLE_COOKIE}_x=2; ${CONSOLE_COOKIE}2=3`, `my_${CONSOLE_COOKIE}=1; ${CONSOLE_COOKIE}_x=2; ${CONSOLE_COOKIE}2=3`],
    [`Agent_Trust_Console=1; x=${CONSOLE_COOKIE}`, `Agent_Trust_Console=1; x=${CONSOLE_COOKIE}`],
    // A pair without `=` names no cookie the admin plane reads: kept.
    [`${CONSOLE_COOKIE}; a=1`, `${CONSOLE_COOKIE}; a=1`],
    [`a="q;${CONSOLE_COOKIE}=${SECRET}"`, 'a="q'],
  ]
  for (const [input, expected] of cases) t.equal(withoutConsoleCookie(input), expected, JSON.stringify(input))
  t.ok(setsConsoleCookie(`${CONSOLE_COOKIE}=${SECRET}; HttpOnly; Path=/`))
  t.ok(setsConsoleCookie(` ${CONSOLE_COOKIE} =x`))
  t.ok(setsConsoleCookie(`${CONSOLE_COOKIE}=`))
  t.notOk(setsConsoleCookie(`session=${CONSOLE_COOKIE}; Path=/`))
  t.notOk(setsConsoleCookie(`${CONSOLE_COOKIE}_x=1; Path=/`))
  t.notOk(setsConsoleCookie(`a=1; ${CONSOLE_COOKIE}=2`), 'attributes are not cookies')
})

const blank = fc.constantFrom('', ' ', '  ', '\t', ' \t')
const otherName = fc.oneof(
  fc.constantFrom('a', 'sid', 'theme', `my_${CONSOLE_COOKIE}`, `${CONSOLE_COOKIE}_x`, `${CONSOLE_COOKIE}2`, `x${CONSOLE_COOKIE}`, 'Agent_Trust_Console', 'AGENT_TRUST_CONSOLE', 'agent_trust'),
  fc.stringMatching(/^[A-Za-z0-9_.-]{1,12}$/),
)
const cookieValue = fc.oneof(fc.stringMatching(/^[A-Za-z0-9_=.-]{0,16}$/), fc.constant(CONSOLE_COOKIE), fc.constant(`"${CONSOLE_COOKIE}"`))
const part = fc.oneof(
  { weight: 3, arbitrary: fc.record({ console: fc.constant(true), text: fc.tuple(blank, blank, blank, cookieValue).map(([a, b, c, v]) => `${a}${CONSOLE_COOKIE}${b}=${c}${v}`) }) },
  { weight: 4, arbitrary: fc.record({ console: fc.constant(false), text: fc.tuple(blank, otherName, blank, blank, cookieValue).map(([a, n, b, c, v]) => `${a}${n}${b}=${c}${v}`) }) },
  { weight: 1, arbitrary: fc.record({ console: fc.constant(false), text: fc.oneof(blank, otherName) }) },
)
/** One Cookie header value as a client may spell it (Node trims the whole value, so the model does too). */
const header = fc.array(fc.tuple(part, blank), { minLength: 1, maxLength: 8 }).map((parts) =>
  parts.map(([p, after], i) => (i === 0 ? p.text : `;${after}${p.text}`)).join('').trim(),
)

t.test('property: the console cookie is gone for both readers, everything else is as sent', async (t) => {
  fc.assert(fc.property(header, (value) => {
    const result = withoutConsoleCookie(value)
    const rest = result ?? ''
    if (adminReads(rest) !== null) return false
    if (parseCookie(rest)[CONSOLE_COOKIE] !== undefined) return false
    // Every other pair survives, in order, byte for byte (each pair as the parsers trim it).
    if (JSON.stringify(otherParts(rest)) !== JSON.stringify(otherParts(value))) return false
    const before = { ...parseCookie(value) }
    delete before[CONSOLE_COOKIE]
    if (JSON.stringify({ ...parseCookie(rest) }) !== JSON.stringify(before)) return false
    // Nothing left but separators: the header goes, rather than an empty one.
    if (result !== null && !/[^; \t]/.test(result)) return false
    if (result === null && otherParts(value).length !== 0) return false
    // A header without the cookie is untouched, and so is one that merely mentions the name.
    const noConsolePair = !value.split(';').some(isConsoleCookiePair)
    if (noConsolePair && /[^; \t]/.test(value) && result !== value) return false
    return true
  }), propertyRuns(2000))
  t.pass('held')
})
