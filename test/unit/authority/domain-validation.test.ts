import t from 'tap'
import {
  challengeRecordName, challengeRecordValue, createTxtLookup, generateChallengeToken, joinTxtChunks, parseTrustLevel, txtRecordsContain,
} from '../../../src/authority/domain-validation.js'
import { MAX_VERIFIABLE_DOMAIN_LENGTH, normalizeDomain } from '../../../src/core/domain-name.js'
import { ServiceError } from '../../../src/core/errors.js'
import { startDnsServer, txtRdata } from '../../helpers/dns-server.js'

function codeOf(fn: () => unknown): string | null {
  try {
    fn()
    return null
  } catch (error) {
    return error instanceof ServiceError ? error.code : 'not a ServiceError'
  }
}

async function asyncCodeOf(promise: Promise<unknown>): Promise<string | null> {
  try {
    await promise
    return null
  } catch (error) {
    return error instanceof ServiceError ? error.code : 'not a ServiceError'
  }
}

t.test('domain names are lower-cased and must be host names', async (t) => {
  t.equal(normalizeDomain('Weather.Example.COM'), 'weather.example.com')
  t.equal(normalizeDomain('localhost'), 'localhost', 'a single label is a host name')
  t.equal(normalizeDomain('xn--bcher-kva.example'), 'xn--bcher-kva.example', 'IDNA A-labels pass')
  t.equal(normalizeDomain('a-b.c0.example'), 'a-b.c0.example')
  t.equal(normalizeDomain('1password.com'), '1password.com', 'labels may start with a digit')
  t.equal(normalizeDomain(`${'a'.repeat(63)}.example.com`), `${'a'.repeat(63)}.example.com`, '63-character label')

  const atLimit = `${'a'.repeat(63)}.${'b'.repeat(63)}.${'c'.repeat(63)}.${'d'.repeat(MAX_VERIFIABLE_DOMAIN_LENGTH - 3 * 64)}`
  t.equal(atLimit.length, MAX_VERIFIABLE_DOMAIN_LENGTH)
  t.equal(normalizeDomain(atLimit), atLimit, 'the longest verifiable domain')
  t.equal(challengeRecordName(atLimit).length, 253, 'its challenge name is exactly 253 characters')

  const bad: [string, string][] = [
    ['', 'empty'],
    ['example.com.', 'trailing dot'],
    ['.example.com', 'leading dot'],
    ['a..example.com', 'empty label'],
    ['-a.example.com', 'label starts with a hyphen'],
    ['a-.example.com', 'label ends with a hyphen'],
    [`${'a'.repeat(64)}.example.com`, '64-character label'],
    ['under_score.example.com', 'underscore'],
    ['exa mple.com', 'space'],
    [' example.com', 'leading space'],
    ['example.com/path', 'slash'],
    ['https://example.com', 'URL'],
    ['example.com:443', 'port'],
    ['user@example.com', 'at sign'],
    ['bücher.example', 'non-ASCII'],
    ['\u212Aelvin.example', 'Kelvin sign, which lower-cases to ASCII k'],
    ['192.168.0.1', 'IPv4 literal'],
    ['[::1]', 'IPv6 literal'],
    ['*.example.com', 'wildcard'],
    [`${atLimit}a`, 'one past the verifiable length'],
    [`${'a.'.repeat(127)}a`, '255 characters'],
  ]
  for (const [input, label] of bad) t.equal(codeOf(() => normalizeDomain(input)), 'invalid_request', label)
})

t.test('challenge record format', async (t) => {
  t.equal(challengeRecordName('example.com'), '_service-challenge.example.com')
  t.equal(challengeRecordValue('abc_-123'), 'service-domain-verification=abc_-123')
  const token = generateChallengeToken()
  t.match(token, /^[A-Za-z0-9_-]{43}$/, '32 random bytes in base64url, no padding')
  t.equal(Buffer.from(token, 'base64url').length, 32)
  t.not(generateChallengeToken(), token, 'fresh each time')
  const value = challengeRecordValue(token)
  t.ok(Buffer.byteLength(value) <= 255, 'the value fits one TXT character-string')
})

t.test('TXT chunks join per record, and only an exact record matches', async (t) => {
  t.same(joinTxtChunks([['abc', 'def'], ['x'], []]), ['abcdef', 'x', ''])
  t.same(joinTxtChunks([]), [])
  const value = 'service-domain-verification=tok'
  t.ok(txtRecordsContain([['v=spf1 -all'], ['service-domain-', 'verification=tok']], value), 'split record joins')
  t.notOk(txtRecordsContain([['service-domain-verification=tok', 'x']], value), 'extra text in the same record')
  t.notOk(txtRecordsContain([['service-domain-verification=to'], ['k']], value), 'two records are not joined together')
  t.notOk(txtRecordsContain([['SERVICE-DOMAIN-VERIFICATION=tok']], value), 'case matters')
  t.notOk(txtRecordsContain([[' service-domain-verification=tok']], value), 'whitespace matters')
  t.notOk(txtRecordsContain([], value))
})

t.test('trust levels', async (t) => {
  for (const ok of ['1', '2', '3', '4']) t.equal(parseTrustLevel(ok), Number(ok))
  for (const bad of ['0', '5', '', '3 ', '03', 'three', 3, 2.5, -1, null, undefined, true, ['3'], {}]) {
    t.equal(codeOf(() => parseTrustLevel(bad)), 'invalid_trust_level', JSON.stringify(bad) ?? 'undefined')
  }
})

t.test('the test DNS server splits long TXT values into 255-byte character-strings', async (t) => {
  const rdata = txtRdata('x'.repeat(300))
  t.equal(rdata.length, 302)
  t.equal(rdata[0], 255)
  t.equal(rdata[256], 45)
  t.same([...txtRdata('')], [0], 'an empty value is one empty character-string')
})

t.test('TXT lookups through a configured server', async (t) => {
  const dns = await startDnsServer(t)
  const lookup = createTxtLookup([dns.server])
  const long = `service-domain-verification=${'t'.repeat(300)}`
  dns.setTxt('_service-challenge.example.com', ['v=spf1 -all', long])
  const records = await lookup('_service-challenge.example.com')
  t.same(records.map((r) => r.map((c) => c.length)).sort(), [[11], [255, long.length - 255]].sort(), 'a long value arrives in chunks')
  t.ok(txtRecordsContain(records, long), 'and joins back to the published value')
  t.same(await lookup('_SERVICE-challenge.Example.com'), records, 'names are case-insensitive')

  t.same(await lookup('_service-challenge.unknown.example'), [], 'NXDOMAIN is "not published"')
  dns.setTxt('_service-challenge.empty.example', [])
  t.same(await lookup('_service-challenge.empty.example'), [], 'NODATA is "not published"')

  dns.setServfail('_service-challenge.broken.example')
  t.equal(await asyncCodeOf(lookup('_service-challenge.broken.example')), 'dns_lookup_failed', 'SERVFAIL')

  dns.setSilent('_service-challenge.slow.example')
  const started = Date.now()
  const quick = createTxtLookup([dns.server], { timeoutMs: 100, tries: 6, deadlineMs: 400 })
  t.equal(await asyncCodeOf(quick('_service-challenge.slow.example')), 'dns_lookup_failed', 'no answer')
  t.ok(Date.now() - started < 3000, 'the deadline cuts the retries short (6.3 s without it)')

  const refused = createTxtLookup(['127.0.0.1:1'], { timeoutMs: 200, tries: 1 })
  t.equal(await asyncCodeOf(refused('_service-challenge.example.com')), 'dns_lookup_failed', 'nobody listening')

  t.throws(() => createTxtLookup(['not an address']), 'a malformed server fails when the lookup is built')
})
