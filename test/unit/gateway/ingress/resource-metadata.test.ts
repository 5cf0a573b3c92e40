/**
 * Resource servers as the gateway precomputes them: the metadata path and URL of a resource (RFC 9728 §3),
 * the challenge strings (RFC 6750 §3, RFC 9728 §5.1), the audience comparison (RFC 8707) and the table of
 * metadata documents, whose issuer follows the snapshot.
 */
import t from 'tap'
import { defaultResource, metadataPathOf, metadataUrlOf, resourceIdentifierProblem } from '../../../../src/core/protected-resource.js'
import { HEADER_VALUE } from '../../../../src/http/header-syntax.js'
import { ResourceMetadataTable, resourceServer } from '../../../../src/gateway/ingress/resource-metadata.js'
import { meantFor } from '../../../../src/gateway/identity/badge.js'

t.test('default resources and metadata locations', async (t) => {
  t.equal(defaultResource('https://gw.example.com', '/'), 'https://gw.example.com', 'prefix "/": the public URL itself')
  t.equal(defaultResource('https://gw.example.com', '/mcp'), 'https://gw.example.com/mcp')
  t.equal(defaultResource('https://gw.example.com', '/mcp/'), 'https://gw.example.com/mcp', 'without the trailing "/"')
  t.equal(defaultResource('https://example.com/gw', '/mcp'), 'https://example.com/gw/mcp')
  const cases: [string, string, string][] = [
    ['https://gw.example.com', '/.well-known/oauth-protected-resource', 'https://gw.example.com/.well-known/oauth-protected-resource'],
    ['https://gw.example.com/', '/.well-known/oauth-protected-resource', 'https://gw.example.com/.well-known/oauth-protected-resource'],
    ['https://gw.example.com/mcp', '/.well-known/oauth-protected-resource/mcp', 'https://gw.example.com/.well-known/oauth-protected-resource/mcp'],
    ['https://gw.example.com/a/b/', '/.well-known/oauth-protected-resource/a/b', 'https://gw.example.com/.well-known/oauth-protected-resource/a/b'],
    ['https://GW.example.com:443/x', '/.well-known/oauth-protected-resource/x', 'https://gw.example.com/.well-known/oauth-protected-resource/x'],
    ['http://127.0.0.1:8000/x', '/.well-known/oauth-protected-resource/x', 'http://127.0.0.1:8000/.well-known/oauth-protected-resource/x'],
  ]
  for (const [resource, path, url] of cases) {
    t.equal(metadataPathOf(resource), path, `${resource}: path`)
    t.equal(metadataUrlOf(resource), url, `${resource}: URL`)
  }
})

t.test('what a resource identifier may be', async (t) => {
  for (const good of ['https://gw.example.com', 'http://localhost:8000/mcp', 'https://a/b/']) t.equal(resourceIdentifierProblem(good), null, good)
  const bad: [string, RegExp][] = [
    ['/mcp', /not a valid URL/], ['mcp', /not a valid URL/], ['urn:example:mcp', /http or https/], ['ftp://a', /http or https/],
    ['https://a/?', /query/], ['https://a/?x=1', /query/], ['https://a/#', /fragment/], ['https://a/#x', /fragment/], ['https://u@a/', /credentials/],
    // `new URL` would trim or drop these, so the identifier would not be the string a client sends back.
    [' https://a/mcp', /whitespace/], ['https://a/mcp\n', /whitespace/], ['https://a/m\tcp', /whitespace/], ['https://a/m"cp', /whitespace/],
  ]
  for (const [value, problem] of bad) t.match(resourceIdentifierProblem(value), problem, value)
})

t.test('challenges: ready strings, valid header values, the error first', async (t) => {
  const server = resourceServer('https://gw.example.com/mcp', false)
  const metadata = 'resource_metadata="https://gw.example.com/.well-known/oauth-protected-resource/mcp"'
  t.equal(server.challenge, `Bearer ${metadata}`)
  t.equal(server.invalidTokenChallenge, `Bearer error="invalid_token", ${metadata}`)
  t.strictSame(server.scopeChallenges, ['SS', 'REG', 'DV', 'OV', 'EV'].map((code) => `Bearer error="insufficient_scope", scope="trust:${code}", ${metadata}`))
  t.equal(server.metadataPath, '/.well-known/oauth-protected-resource/mcp')
  t.ok(Object.isFrozen(server) && Object.isFrozen(server.scopeChallenges), 'shared by every request, so frozen')
  // A resource with characters that would end a quoted string is percent-encoded by the URL parser.
  const odd = resourceServer('https://gw.example.com/a"b\\c d', false)
  for (const value of [odd.challenge, odd.invalidTokenChallenge, ...odd.scopeChallenges]) {
    t.ok(HEADER_VALUE.test(value), 'a valid header value')
    t.equal(value.match(/"/g)?.length, value.includes('scope=') ? 6 : value.includes('error=') ? 4 : 2, 'no stray quote')
  }
})

t.test('the audience: exact match, or none unless required', async (t) => {
  const open = resourceServer('https://gw.example.com/mcp', false)
  const strict = resourceServer('https://gw.example.com/mcp', true)
  t.ok(meantFor([], open), 'no audience: accepted')
  t.notOk(meantFor([], strict), 'no audience on a route that requires one: refused')
  for (const server of [open, strict]) {
    t.ok(meantFor(['https://gw.example.com/mcp'], server))
    t.ok(meantFor(['https://other', 'https://gw.example.com/mcp'], server), 'one of several')
    t.notOk(meantFor(['https://other'], server))
    t.notOk(meantFor(['https://gw.example.com/mcp/'], server), 'a trailing "/" is another string')
    t.notOk(meantFor(['https://GW.example.com/mcp'], server), 'so is another case')
    t.notOk(meantFor(['https://gw.example.com'], server), 'a prefix is not the resource')
    t.notOk(meantFor([''], server))
  }
})

t.test('the metadata table: exact paths, documents that follow the issuer', async (t) => {
  const mcp = resourceServer('https://gw.example.com/mcp', false)
  const root = resourceServer('https://gw.example.com', false)
  const table = new ResourceMetadataTable([mcp, root, mcp])
  t.equal(table.size, 2, 'the same server listed twice counts once')
  t.equal(table.find('/.well-known/oauth-protected-resource/mcp'), mcp)
  t.equal(table.find('/.well-known/oauth-protected-resource'), root)
  for (const miss of ['/.well-known/oauth-protected-resource/mcp/', '/.well-known/oauth-protected-resource/MCP', '/mcp', '/', '/.well-known/oauth-protected-resourcex']) {
    t.equal(table.find(miss), undefined, `${miss}: none`)
  }
  const first = table.document(mcp, 'https://registry.test')
  t.strictSame(JSON.parse(first), { resource: 'https://gw.example.com/mcp', authorization_servers: ['https://registry.test'], bearer_methods_supported: ['header'] })
  t.equal(table.document(mcp, 'https://registry.test'), first, 'built once per issuer')
  t.strictSame(JSON.parse(table.document(mcp, 'https://registry-2.test')).authorization_servers, ['https://registry-2.test'], 'a new issuer, a new document')
  t.throws(() => new ResourceMetadataTable([mcp, resourceServer('https://other.example.com/mcp', false)]), /share the metadata path/)
})
