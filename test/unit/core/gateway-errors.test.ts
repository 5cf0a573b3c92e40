/**
 * The gateway error catalogue is the one list: the documented table is the catalogue, every code the
 * gateway and the SDK use has an entry, refusal call sites pass codes and never statuses, the statuses
 * the README names agree, the SDK's list is the catalogue, and the answers written straight to a socket
 * are the catalogue's, byte for byte.
 */
import t from 'tap'
import { readdirSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { BADGE_ERROR_CODES } from '../../../src/core/badge.js'
import { ENFORCEMENT_RESPONSES } from '../../../src/core/enforcement.js'
import { ENVELOPE_ERROR_CODES, ENVELOPE_ERROR_STATUS } from '../../../src/core/envelope.js'
import { GATEWAY_ERROR_CODES, GATEWAY_ERRORS, gatewayError, type GatewayErrorCode } from '../../../src/core/gateway-errors.js'
import { rawGatewayError } from '../../../src/http/raw-response.js'
import { projectPath } from '../../../src/core/paths.js'
import * as sdk from '../../../src/sdk/index.js'

const catalogue = new Map<string, { status: number; message: string }>(Object.entries(GATEWAY_ERRORS))

/** The .ts files below a source folder, with their text. */
function sources(folder: string): [string, string][] {
  const root = projectPath('src', folder)
  return readdirSync(root, { recursive: true, encoding: 'utf8' })
    .filter((name) => name.endsWith('.ts'))
    .map((name) => [path.join('src', folder, name), readFileSync(path.join(root, name), 'utf8')])
}

t.test('every entry: a code-shaped code, an error status, a message, the code as metric label', async (t) => {
  t.strictSame(GATEWAY_ERROR_CODES, Object.keys(GATEWAY_ERRORS))
  for (const code of GATEWAY_ERROR_CODES) {
    const entry = GATEWAY_ERRORS[code]
    t.match(code, /^[A-Za-z0-9_]{1,64}$/, `${code}: code-shaped`)
    t.equal(entry.code, code, `${code}: names itself`)
    t.ok(entry.status >= 400 && entry.status <= 599, `${code}: status ${entry.status}`)
    t.match(entry.message, /^[A-Z][\x20-\x7e]+\.$/, `${code}: a sentence`)
    t.equal(entry.metricLabel, code, `${code}: metric label`)
    t.ok(Object.isFrozen(entry), `${code}: frozen`)
    t.equal(gatewayError(code), entry, `${code}: found by code`)
  }
  t.equal(gatewayError('constructor'), GATEWAY_ERRORS.GATEWAY_ERROR, 'an inherited name is not a code')
  t.equal(gatewayError('NOT_A_CODE'), GATEWAY_ERRORS.GATEWAY_ERROR, 'an unknown code is GATEWAY_ERROR')
})

t.test('the table in docs/gateway-request-handling.md is the catalogue', async (t) => {
  const doc = readFileSync(projectPath('docs', 'gateway-request-handling.md'), 'utf8')
  const section = doc.slice(doc.indexOf('## Error codes'))
  const rows = [...section.matchAll(/^\| `([A-Za-z0-9_]+)` \| (\d{3}) \| ([^|]+) \|/gm)]
  t.strictSame(rows.map((row) => row[1]), [...GATEWAY_ERROR_CODES], 'the same codes, in the catalogue\'s order')
  for (const [, code, status, message] of rows) {
    const entry = catalogue.get(code!)
    t.equal(Number(status), entry?.status, `${code}: status`)
    t.equal(message?.trim(), entry?.message, `${code}: message`)
  }
})

t.test('statuses named in the README and the docs agree with the catalogue', async (t) => {
  const files = ['README.md', ...readdirSync(projectPath('docs')).filter((name) => name.endsWith('.md')).map((name) => path.join('docs', name))]
  let named = 0
  for (const file of files) {
    const text = readFileSync(projectPath(file), 'utf8')
    for (const [, status, code] of text.matchAll(/\b([1-5]\d\d)\s+`([A-Za-z_]+)`/g)) {
      const entry = catalogue.get(code!)
      if (entry === undefined) continue
      named++
      t.equal(Number(status), entry.status, `${file}: ${status} ${code}`)
    }
  }
  t.ok(named > 20, `the documents name statuses (${named} found)`)
})

t.test('every code the gateway, the mode table and the SDK use has an entry', async (t) => {
  for (const code of [...BADGE_ERROR_CODES, ...ENVELOPE_ERROR_CODES]) t.ok(catalogue.has(code), `${code}`)
  for (const code of ENVELOPE_ERROR_CODES) t.equal(ENVELOPE_ERROR_STATUS[code], catalogue.get(code)?.status, `${code}: the chain rules report the catalogue's status`)
  for (const { status, code } of Object.values(ENFORCEMENT_RESPONSES)) t.equal(status, catalogue.get(code)?.status, `mode table: ${code}`)

  const gateway = [...sources('gateway'), ...sources('http'), ...sources('core')]
  const literals = new Set<string>()
  for (const [file, text] of gateway) {
    for (const [, code] of text.matchAll(/\b(?:refuse\(ctx, scope|sendGatewayError\([^,()]+|rawGatewayError\()\s*,?\s*'([^']+)'/g)) literals.add(`${file}: ${code}`)
    // The forwarder's results carry codes as members.
    if (file.startsWith(path.join('src', 'gateway'))) for (const [, code] of text.matchAll(/\bcode: '([A-Z][A-Z_]+)'/g)) literals.add(`${file}: ${code}`)
    t.notMatch(text, /\brefuse\(ctx, scope, \d/, `${file}: refusals pass a code, not a status`)
    t.notMatch(text, /\bsendGatewayError\([^,()]+, \d/, `${file}: responses pass a code, not a status`)
  }
  t.ok(literals.size >= 10, `the gateway's sources name codes (${literals.size} found)`)
  for (const entry of literals) t.ok(catalogue.has(entry.slice(entry.indexOf(': ') + 2)), entry)

  let sdkCodes = 0
  for (const [file, text] of sources('sdk')) {
    for (const [, code] of text.matchAll(/\b(?:fail|new SdkError)\('([A-Z][A-Z_]+)'/g)) {
      sdkCodes++
      t.ok(catalogue.has(code!), `${file}: ${code} is a gateway code`)
    }
  }
  t.ok(sdkCodes > 5, `the SDK raises gateway codes (${sdkCodes} found)`)
})

t.test('the SDK\'s list is the catalogue', async (t) => {
  t.strictSame(sdk.GATEWAY_ERROR_CODES, Object.keys(GATEWAY_ERRORS))
})

t.test('answers written straight to the socket', async (t) => {
  const raw = (status: string, code: GatewayErrorCode, message: string, extra = ''): string => {
    const body = JSON.stringify({ error: code, message })
    return `HTTP/1.1 ${status}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
      `Cache-Control: no-store\r\nX-Service-Gateway: error\r\n${extra}Connection: close\r\n\r\n${body}`
  }
  t.equal(rawGatewayError('REQUEST_MALFORMED'), raw('400 Bad Request', 'REQUEST_MALFORMED', GATEWAY_ERRORS.REQUEST_MALFORMED.message))
  t.equal(rawGatewayError('REQUEST_HEADER_FIELDS_TOO_LARGE'), raw('431 Request Header Fields Too Large', 'REQUEST_HEADER_FIELDS_TOO_LARGE', GATEWAY_ERRORS.REQUEST_HEADER_FIELDS_TOO_LARGE.message))
  t.equal(rawGatewayError('REQUEST_TIMEOUT'), raw('408 Request Timeout', 'REQUEST_TIMEOUT', 'The request was not received in time.'))
  t.equal(rawGatewayError('METHOD_NOT_ALLOWED', 'Allow: GET\r\n'), raw('405 Method Not Allowed', 'METHOD_NOT_ALLOWED', GATEWAY_ERRORS.METHOD_NOT_ALLOWED.message, 'Allow: GET\r\n'))
})
