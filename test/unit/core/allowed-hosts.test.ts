/**
 * The Host and Origin lists of MCP routes (docs/mcp.md, "Host and Origin"): the defaults, configured lists,
 * and a property over Host spellings with the MCP SDK's own Host check as the oracle: whatever the gateway
 * accepts, the SDK's `hostHeaderValidation` with the same names accepts too, so no spelling reaches a
 * name the operator did not list.
 */
import t from 'tap'
import fc from 'fast-check'
import { hostHeaderValidation } from '@modelcontextprotocol/sdk/server/middleware/hostHeaderValidation.js'
import { AllowedHosts, AllowedOrigins, allowedHostsProblems, allowedOriginsProblems, parseHostAndPort } from '../../../src/core/allowed-hosts.js'
import { propertyRuns } from '../../helpers/property-runs.js'

t.test('the default hosts: the public URL\'s host on its port, the loopback names on any port', async (t) => {
  const hosts = new AllowedHosts(null, 'https://gw.example.com')
  for (const host of ['localhost', 'localhost:8000', 'LOCALHOST:1', '127.0.0.1:65535', '[::1]:3000', '[::1]', 'gw.example.com', 'gw.example.com:443', 'GW.Example.com:0443']) {
    t.ok(hosts.allows(host), host)
  }
  for (const host of [
    'evil.example.com', 'evil.example.com:443', 'gw.example.com:8443', 'gw.example.com:80', 'localhost.evil.example.com', 'localhost@evil.example.com',
    'evil.example.com@localhost', '127.0.0.1.nip.io', '127.1', '0x7f.0.0.1', '[::ffff:127.0.0.1]', 'localhost:99999', 'localhost:', 'localhost/x', '',
    ' ', 'local host', 'localhost.', '[::1', 'gw.example.com.',
  ]) {
    t.notOk(hosts.allows(host), JSON.stringify(host))
  }
  const plain = new AllowedHosts(null, 'http://gw.example.com:8080')
  t.ok(plain.allows('gw.example.com:8080'))
  t.notOk(plain.allows('gw.example.com'), 'a public URL with a port is accepted on that port only')
  t.notOk(new AllowedHosts(null, null).allows('gw.example.com'), 'without a public URL only loopback')
})

t.test('configured hosts replace the default; `*` accepts any', async (t) => {
  const hosts = new AllowedHosts(['gw.example.com', 'internal:9000'], 'https://public.example.com')
  t.ok(hosts.allows('gw.example.com:1234'), 'a name without a port: any port')
  t.ok(hosts.allows('internal:9000'))
  t.notOk(hosts.allows('internal:9001'))
  t.notOk(hosts.allows('localhost'), 'loopback is not added to a configured list')
  t.notOk(hosts.allows('public.example.com'), 'nor is the public URL')
  t.ok(new AllowedHosts(['*'], null).allows('anything.example'))
  t.strictSame(allowedHostsProblems(['gw.example.com', '*', 'a:b', 'x/y', 'evil@host', '[::1]:8000']), [
    '"a:b" is not a host name or host:port', '"x/y" is not a host name or host:port', '"evil@host" is not a host name or host:port',
  ])
  t.strictSame(parseHostAndPort('Example.COM:0080'), { name: 'example.com', port: '80' })
})

t.test('origins: the public URL\'s and loopback ones by default; configured ones replace them', async (t) => {
  const origins = new AllowedOrigins(null, 'https://gw.example.com/base')
  for (const origin of ['https://gw.example.com', 'http://localhost:3000', 'https://127.0.0.1', 'http://[::1]:8000', 'HTTP://LOCALHOST:1']) t.ok(origins.allows(origin), origin)
  for (const origin of ['http://gw.example.com', 'https://gw.example.com:8443', 'http://evil.example.com', 'null', '', 'file://', 'http://localhost.evil.example.com', 'http://evil.example.com/localhost']) {
    t.notOk(origins.allows(origin), JSON.stringify(origin))
  }
  const configured = new AllowedOrigins(['https://app.example.com'], 'https://gw.example.com')
  t.ok(configured.allows('https://app.example.com'))
  t.notOk(configured.allows('http://localhost:3000'), 'loopback is not added to a configured list')
  t.notOk(configured.allows('https://gw.example.com'))
  t.ok(new AllowedOrigins(['*'], null).allows('https://anything.example'))
  t.strictSame(allowedOriginsProblems(['https://app.example.com', '*', 'app.example.com', 'https://a.example.com/path']), [
    '"app.example.com" is not an http or https origin (scheme://host[:port])', '"https://a.example.com/path" is not an http or https origin (scheme://host[:port])',
  ])
})

/** The SDK's own check of a Host value, with these names (port-agnostic, as the SDK is). */
function sdkAccepts(names: readonly string[], host: string): boolean {
  let passed = false
  const res = { status: () => ({ json: () => undefined }) }
  hostHeaderValidation([...names])({ headers: { host } } as never, res as never, () => { passed = true })
  return passed
}

t.test('property: every Host the gateway accepts names an allowed host for the SDK too', async (t) => {
  const names = ['localhost', '127.0.0.1', '[::1]', 'gw.example.com']
  const hosts = new AllowedHosts(null, 'http://gw.example.com')
  const piece = fc.constantFrom(
    'localhost', 'LocalHost', '127.0.0.1', '127.1', '0x7f.0.0.1', '[::1]', '[0:0:0:0:0:0:0:1]', '[::ffff:127.0.0.1]', 'gw.example.com', 'GW.EXAMPLE.COM',
    'evil.example.com', 'example.com', 'gw', '.', '@', ':', ':80', ':443', ':8000', ':0', ':99999', '%2e', '%40', '/', '\\', ' ', '\t', '#', '?', '[', ']', '_', '-',
  )
  const host = fc.array(piece, { minLength: 1, maxLength: 5 }).map((parts) => parts.join(''))
  let accepted = 0
  fc.assert(fc.property(host, (value) => {
    if (!hosts.allows(value)) return true
    accepted++
    return sdkAccepts(names, value)
  }), propertyRuns(2000))
  t.ok(accepted > 50, `the property saw accepted hosts (${accepted})`)
})
