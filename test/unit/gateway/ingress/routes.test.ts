/**
 * The gateway's routes file (every validation rule, all problems reported at once), the longest-prefix
 * route table (boundaries, order independence, preallocated results) and the per-request framing check.
 */
import t from 'tap'
import type { IncomingMessage } from 'node:http'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { loadRoutesFile, parseRoutes, RouteTable, RoutesFileError, type RouteDefinition } from '../../../../src/gateway/ingress/routes.js'
import { framingProblem } from '../../../../src/gateway/ingress/framing.js'
import { projectPath } from '../../../../src/core/paths.js'

const text = (value: unknown): string => JSON.stringify(value)
/** SERVICE_GATEWAY_PUBLIC_URL of these tests. */
const PUBLIC = 'https://gw.example.com'

/** The error of a routes text that must fail (an Error, so the test fails, when it parses). */
function errorOf(value: unknown, source = 'routes.json'): RoutesFileError {
  try {
    parseRoutes(typeof value === 'string' ? value : text(value), source, PUBLIC)
  } catch (err) {
    if (err instanceof RoutesFileError) return err
    throw err
  }
  throw new Error(`expected a RoutesFileError for ${text(value)}`)
}
const problemsOf = (value: unknown): readonly string[] => errorOf(value).problems

t.test('a valid file', async (t) => {
  const routes = parseRoutes(
    text({
      routes: [
        { prefix: '/api', upstream: 'http://127.0.0.1:9000', mode: 'EM-STRICT' },
        { prefix: '/', upstream: 'https://backend.internal/base/' },
        { prefix: '/obs', upstream: 'http://[::1]:8080', mode: null },
        { prefix: '/Files', upstream: 'http://files', caseInsensitive: true, headersWithUnderscores: 'allow' },
        { prefix: '/cgi', upstream: 'http://cgi', caseInsensitive: false, caseSensitive: false, headersWithUnderscores: 'reject' },
        { prefix: '/quiet', upstream: 'http://quiet', hideDenyReason: true },
        { prefix: '/told', upstream: 'http://told', hideDenyReason: false },
        { prefix: '/mcp', upstream: 'http://tools', protocol: 'mcp' },
        { prefix: '/plain', upstream: 'http://plain', protocol: 'http' },
        { prefix: '/agent', upstream: 'http://agent', protocol: 'a2a' },
        { prefix: '/signed', upstream: 'http://signed', protocol: 'a2a', requireCardSignature: true },
        { prefix: '/pinned', upstream: 'http://pinned', protocol: 'a2a', requireCardSignature: true, cardSigner: 'did:web:agents.example.com:echo' },
      ],
    }),
    'routes.json',
    PUBLIC,
  )
  const mcpServer = { resource: 'https://gw.example.com/mcp', requireAudience: false }
  t.same(routes, [
    { prefix: '/api', upstream: 'http://127.0.0.1:9000', mode: 'EM-STRICT', caseInsensitive: false, caseSensitive: false, headersWithUnderscores: 'drop', hideDenyReason: false, protocol: 'http', resourceServer: null, requireCardSignature: false, cardSigner: null },
    { prefix: '/', upstream: 'https://backend.internal/base/', mode: null, caseInsensitive: false, caseSensitive: false, headersWithUnderscores: 'drop', hideDenyReason: false, protocol: 'http', resourceServer: null, requireCardSignature: false, cardSigner: null },
    { prefix: '/obs', upstream: 'http://[::1]:8080', mode: null, caseInsensitive: false, caseSensitive: false, headersWithUnderscores: 'drop', hideDenyReason: false, protocol: 'http', resourceServer: null, requireCardSignature: false, cardSigner: null },
    { prefix: '/Files', upstream: 'http://files', mode: null, caseInsensitive: true, caseSensitive: false, headersWithUnderscores: 'allow', hideDenyReason: false, protocol: 'http', resourceServer: null, requireCardSignature: false, cardSigner: null },
    { prefix: '/cgi', upstream: 'http://cgi', mode: null, caseInsensitive: false, caseSensitive: false, headersWithUnderscores: 'reject', hideDenyReason: false, protocol: 'http', resourceServer: null, requireCardSignature: false, cardSigner: null },
    { prefix: '/quiet', upstream: 'http://quiet', mode: null, caseInsensitive: false, caseSensitive: false, headersWithUnderscores: 'drop', hideDenyReason: true, protocol: 'http', resourceServer: null, requireCardSignature: false, cardSigner: null },
    { prefix: '/told', upstream: 'http://told', mode: null, caseInsensitive: false, caseSensitive: false, headersWithUnderscores: 'drop', hideDenyReason: false, protocol: 'http', resourceServer: null, requireCardSignature: false, cardSigner: null },
    { prefix: '/mcp', upstream: 'http://tools', mode: null, caseInsensitive: false, caseSensitive: false, headersWithUnderscores: 'drop', hideDenyReason: false, protocol: 'mcp', resourceServer: mcpServer, requireCardSignature: false, cardSigner: null },
    { prefix: '/plain', upstream: 'http://plain', mode: null, caseInsensitive: false, caseSensitive: false, headersWithUnderscores: 'drop', hideDenyReason: false, protocol: 'http', resourceServer: null, requireCardSignature: false, cardSigner: null },
    // An A2A route is not a resource server unless it says so.
    { prefix: '/agent', upstream: 'http://agent', mode: null, caseInsensitive: false, caseSensitive: false, headersWithUnderscores: 'drop', hideDenyReason: false, protocol: 'a2a', resourceServer: null, requireCardSignature: false, cardSigner: null },
    { prefix: '/signed', upstream: 'http://signed', mode: null, caseInsensitive: false, caseSensitive: false, headersWithUnderscores: 'drop', hideDenyReason: false, protocol: 'a2a', resourceServer: null, requireCardSignature: true, cardSigner: null },
    { prefix: '/pinned', upstream: 'http://pinned', mode: null, caseInsensitive: false, caseSensitive: false, headersWithUnderscores: 'drop', hideDenyReason: false, protocol: 'a2a', resourceServer: null, requireCardSignature: true, cardSigner: 'did:web:agents.example.com:echo' },
  ])
  for (const mode of ['EM-OBSERVE', 'EM-GUARD', 'EM-DELEGATE', 'EM-STRICT']) {
    t.equal(parseRoutes(text({ routes: [{ prefix: '/', upstream: 'http://a', mode }] }), 'x', PUBLIC)[0]!.mode, mode)
  }
})

t.test('document-level problems', async (t) => {
  t.match(problemsOf('{"routes": ['), [/not valid JSON/])
  t.match(problemsOf('[]'), [/JSON object/])
  t.match(problemsOf('null'), [/JSON object/])
  t.match(problemsOf({}), ['"routes" must be an array'])
  t.match(problemsOf({ routes: {} }), ['"routes" must be an array'])
  t.match(problemsOf({ routes: [] }), ['"routes" must list at least one route'])
  t.same(problemsOf({ routes: [{ prefix: '/', upstream: 'http://a' }], extra: 1 }), ['unknown member "extra"'])
})

t.test('each route rule', async (t) => {
  const one = (route: unknown): readonly string[] => problemsOf({ routes: [route] })
  t.same(one('x'), ['routes[0]: must be an object'])
  t.same(one({ prefix: '/', upstream: 'http://a', protocol: 'grpc' }), ['routes[0].protocol: must be one of http, mcp, a2a (got "grpc")'])
  t.same(one({ prefix: '/', upstream: 'http://a', protocol: 'MCP' }), ['routes[0].protocol: must be one of http, mcp, a2a (got "MCP")'])
  t.same(one({ upstream: 'http://a' }), ['routes[0].prefix: is required'])
  t.same(one({ prefix: '/' }), ['routes[0].upstream: is required'])
  t.same(one({ prefix: 7, upstream: 'http://a' }), ['routes[0].prefix: must be a string'])
  t.match(one({ prefix: 'api', upstream: 'http://a' }), [/^routes\[0\]\.prefix: must start with "\/"/])
  t.match(one({ prefix: '/a?b', upstream: 'http://a' }), [/prefix: must not contain "\?" or "#"/])
  t.match(one({ prefix: '/a#b', upstream: 'http://a' }), [/prefix: must not contain "\?" or "#"/])
  t.match(one({ prefix: '/a b', upstream: 'http://a' }), [/prefix: must not contain whitespace/])
  t.same(one({ prefix: '/', upstream: 5 }), ['routes[0].upstream: must be a string'])
  t.match(one({ prefix: '/', upstream: 'not a url' }), [/upstream: is not a valid URL/])
  t.match(one({ prefix: '/', upstream: 'ftp://a' }), [/upstream: must be an http or https URL/])
  t.match(one({ prefix: '/', upstream: 'http://a/?q=1' }), [/upstream: must not carry a query/])
  t.match(one({ prefix: '/', upstream: 'http://a/?' }), [/upstream: must not carry a query/], 'an empty query counts')
  t.match(one({ prefix: '/', upstream: 'http://a/#f' }), [/upstream: must not carry a fragment/])
  t.match(one({ prefix: '/', upstream: 'http://u:p@a/' }), [/upstream: must not carry credentials/])
  t.match(one({ prefix: '/', upstream: 'http://a', mode: 'EM-LOOSE' }), [/mode: must be one of EM-OBSERVE, EM-GUARD, EM-DELEGATE, EM-STRICT/])
  t.match(one({ prefix: '/', upstream: 'http://a', mode: 3 }), [/mode: must be one of/])
  t.same(one({ prefix: '/', upstream: 'http://a', timeout: 5 }), ['routes[0]: unknown member "timeout"'])
  t.match(one({ prefix: '/', upstream: 'http://a', caseInsensitive: 'yes' }), [/caseInsensitive: must be true or false/])
  t.match(one({ prefix: '/', upstream: 'http://a', caseInsensitive: true, caseSensitive: true }), [/cannot be both caseSensitive and caseInsensitive/])
  t.match(one({ prefix: '/', upstream: 'http://a', headersWithUnderscores: 'keep' }), [/headersWithUnderscores: must be one of drop, reject, allow/])
  t.same(one({ prefix: '/', upstream: 'http://a', hideDenyReason: 'true' }), ['routes[0].hideDenyReason: must be true or false (got "true")'])
  t.same(one({ prefix: '/', upstream: 'http://a', hideDenyReason: null }), ['routes[0].hideDenyReason: must be true or false (got null)'])
  t.same(one({ prefix: '/', upstream: 'http://a', protocol: 'a2a', requireCardSignature: 'yes' }), ['routes[0].requireCardSignature: must be true or false (got "yes")'])
  t.same(one({ prefix: '/', upstream: 'http://a', protocol: 'mcp', requireCardSignature: false }), ['routes[0].requireCardSignature: only an a2a route serves an agent card'])
  t.same(one({ prefix: '/', upstream: 'http://a', protocol: 'a2a', requireCardSignature: true, cardSigner: 'agent-1' }), ['routes[0].cardSigner: must be a DID (got "agent-1")'])
  t.same(one({ prefix: '/', upstream: 'http://a', protocol: 'a2a', cardSigner: 'did:key:z6Mk' }), ['routes[0].cardSigner: needs "requireCardSignature": true'])
})

t.test('a prefix must be in the canonical form requests are matched in', async (t) => {
  const one = (prefix: string): readonly string[] => problemsOf({ routes: [{ prefix, upstream: 'http://a' }] })
  t.match(one('/a/../b'), [/prefix: must be in canonical form \("\/b"\)/])
  t.match(one('/a//b'), [/canonical form \("\/a\/b"\)/])
  t.match(one('/%61pi'), [/canonical form \("\/api"\)/])
  t.match(one('/a;b'), [/prefix: ";" path parameter/])
  t.match(one('/a%2fb'), [/prefix: encoded "\/"/])
  t.match(one('/a\\b'), [/prefix: backslash/])
})

t.test('resource servers: by protocol unless said otherwise, the resource defaulting to the public URL and prefix', async (t) => {
  const parse = (routes: unknown[], publicUrl: string | null = PUBLIC): RouteDefinition[] => parseRoutes(text({ routes }), 'r.json', publicUrl)
  const [mcp, plain, opted, optedOut, root, slash, own, strict] = parse([
    { prefix: '/mcp', upstream: 'http://a', protocol: 'mcp' },
    { prefix: '/api', upstream: 'http://a' },
    { prefix: '/rs', upstream: 'http://a', resourceServer: true },
    { prefix: '/tools', upstream: 'http://a', protocol: 'mcp', resourceServer: false },
    { prefix: '/', upstream: 'http://a', resourceServer: true },
    { prefix: '/dir/', upstream: 'http://a', resourceServer: true },
    { prefix: '/own', upstream: 'http://a', protocol: 'mcp', resource: 'https://api.example.com/tools/' },
    { prefix: '/strict', upstream: 'http://a', resourceServer: true, requireAudience: true },
  ])
  t.same(mcp!.resourceServer, { resource: 'https://gw.example.com/mcp', requireAudience: false }, 'an MCP route is one by default')
  t.equal(plain!.resourceServer, null, 'an HTTP route is not')
  t.same(opted!.resourceServer, { resource: 'https://gw.example.com/rs', requireAudience: false }, 'an HTTP route can be')
  t.equal(optedOut!.resourceServer, null, 'an MCP route can opt out')
  t.same(root!.resourceServer, { resource: 'https://gw.example.com', requireAudience: false }, 'prefix "/": the public URL itself')
  t.same(slash!.resourceServer, { resource: 'https://gw.example.com/dir', requireAudience: false }, 'the prefix\'s trailing "/" is left out')
  t.same(own!.resourceServer, { resource: 'https://api.example.com/tools/', requireAudience: false }, 'a resource of its own, as written')
  t.same(strict!.resourceServer, { resource: 'https://gw.example.com/strict', requireAudience: true })
  t.same(parse([{ prefix: '/mcp', upstream: 'http://a', protocol: 'mcp' }], 'http://localhost:8000/gw')[0]!.resourceServer,
    { resource: 'http://localhost:8000/gw/mcp', requireAudience: false }, 'a public URL with a path')
})

t.test('resource-server members: every defect is reported', async (t) => {
  const one = (route: Record<string, unknown>, publicUrl: string | null = PUBLIC): readonly string[] => {
    try {
      parseRoutes(text({ routes: [{ prefix: '/x', upstream: 'http://a', ...route }] }), 'r.json', publicUrl)
    } catch (err) {
      if (err instanceof RoutesFileError) return err.problems
      throw err
    }
    return []
  }
  t.same(one({ resourceServer: 'yes' }), ['routes[0].resourceServer: must be true or false (got "yes")'])
  t.same(one({ resource: 'https://gw.example.com/x' }), ['routes[0].resource: only for a resource server (resourceServer: true)'])
  t.same(one({ requireAudience: false }), ['routes[0].requireAudience: only for a resource server (resourceServer: true)'])
  t.same(one({ protocol: 'mcp', resourceServer: false, resource: 'https://a/x', requireAudience: true }), [
    'routes[0].resource: only for a resource server (resourceServer: true)',
    'routes[0].requireAudience: only for a resource server (resourceServer: true)',
  ])
  t.same(one({ resourceServer: true, requireAudience: 'true' }), ['routes[0].requireAudience: must be true or false (got "true")'])
  t.same(one({ resourceServer: true, resource: 7 }), ['routes[0].resource: must be a string'])
  t.match(one({ resourceServer: true, resource: '/x' }), [/resource: is not a valid URL/], 'a relative reference')
  t.match(one({ resourceServer: true, resource: 'urn:x:y' }), [/resource: must be an http or https URL/])
  t.match(one({ resourceServer: true, resource: 'https://a/x?y=1' }), [/resource: must not carry a query/])
  t.match(one({ resourceServer: true, resource: 'https://a/x?' }), [/resource: must not carry a query/], 'an empty query counts')
  t.match(one({ resourceServer: true, resource: 'https://a/x#f' }), [/resource: must not carry a fragment/])
  t.match(one({ resourceServer: true, resource: 'https://u:p@a/x' }), [/resource: must not carry credentials/])
  t.match(one({ resourceServer: true, resource: 'https://a/x;y' }), [/resource: its metadata path .* cannot be served/], 'a path the gateway never matches')
  t.match(one({ resourceServer: true, resource: 'https://a/x//y' }), [/resource: its metadata path .* is not in canonical form/])
  t.same(one({ resourceServer: true }, null), ['routes[0]: a resource server needs SERVICE_GATEWAY_PUBLIC_URL when ENVIRONMENT=production'])
  t.same(one({ protocol: 'mcp', resource: 'https://a/x' }, null), ['routes[0]: a resource server needs SERVICE_GATEWAY_PUBLIC_URL when ENVIRONMENT=production'], 'even with a resource of its own')
  t.same(one({ protocol: 'mcp', resourceServer: false }, null), [], 'production without a public URL is fine with no resource server')
})

t.test('two resource servers cannot share a metadata path; problems come together', async (t) => {
  const problems = problemsOf({
    routes: [
      { prefix: '/a', upstream: 'http://a', protocol: 'mcp' },
      { prefix: '/a/', upstream: 'http://a', protocol: 'mcp' },
      { prefix: '/b', upstream: 'http://a', protocol: 'mcp', resource: 'https://other.example.com/a/' },
      { prefix: 'bad', upstream: 'http://a', protocol: 'mcp', resource: 'https://a/x#y', requireAudience: 1 },
    ],
  })
  t.same(problems, [
    'routes[1].resource: its metadata path "/.well-known/oauth-protected-resource/a" is routes[0]\'s too',
    'routes[2].resource: its metadata path "/.well-known/oauth-protected-resource/a" is routes[0]\'s too',
    'routes[3].prefix: must start with "/" (got "bad")',
    'routes[3].resource: must not carry a fragment',
    'routes[3].requireAudience: must be true or false (got 1)',
  ])
})

t.test('a case-insensitive entry matches any case of its prefix', async (t) => {
  const table = new RouteTable([
    { prefix: '/Files', value: 'files', caseInsensitive: true },
    { prefix: '/api', value: 'api' },
  ])
  t.equal(table.match('/files/x')?.value, 'files')
  t.equal(table.match('/FILES')?.value, 'files')
  t.equal(table.match('/filesx'), null, 'still at a "/" boundary')
  t.equal(table.match('/API'), null, 'other entries stay case-sensitive')
  t.equal(table.match('/api/x')?.value, 'api')
})

t.test('all problems are reported together', async (t) => {
  const problems = problemsOf({
    routes: [
      { prefix: '/api', upstream: 'http://a' },
      { prefix: 'nope', upstream: 'ftp://b', mode: 'X' },
      { prefix: '/api', upstream: 'http://c?x' },
      { prefix: '/ok', upstream: 'http://d', extra: true },
    ],
    version: 2,
  })
  t.match(problems, [
    'unknown member "version"',
    /routes\[1\]\.prefix: must start with/,
    /routes\[1\]\.upstream: must be an http or https URL/,
    /routes\[1\]\.mode: must be one of/,
    /routes\[2\]\.upstream: must not carry a query/,
    'routes[2].prefix: duplicates routes[0].prefix "/api"',
    'routes[3]: unknown member "extra"',
  ])
  t.equal(problems.length, 7, 'no problem is lost and none is invented')
})

t.test('the error message names the source and lists every problem', async (t) => {
  const error = errorOf({ routes: [{ prefix: 'a', upstream: 'ftp://b' }] }, '/etc/service/routes.json')
  t.equal(error.name, 'RoutesFileError')
  t.equal(error.source, '/etc/service/routes.json')
  t.match(error.message, /^Invalid routes file \/etc\/service\/routes\.json:/)
  t.equal(error.problems.length, 2)
  for (const problem of error.problems) t.ok(error.message.includes(problem), `the message lists "${problem}"`)
})

t.test('loadRoutesFile reads a file and names it in errors', async (t) => {
  const dir = await mkdtemp(path.join(tmpdir(), 'routes-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const good = path.join(dir, 'good.json')
  await writeFile(good, text({ routes: [{ prefix: '/x', upstream: 'http://127.0.0.1:1' }] }))
  t.same(await loadRoutesFile(good, PUBLIC), [{ prefix: '/x', upstream: 'http://127.0.0.1:1', mode: null, caseInsensitive: false, caseSensitive: false, headersWithUnderscores: 'drop', hideDenyReason: false, protocol: 'http', resourceServer: null, requireCardSignature: false, cardSigner: null }])
  const bad = path.join(dir, 'bad.json')
  await writeFile(bad, text({ routes: [{ prefix: 'x', upstream: 'http://a' }] }))
  const badError = await loadRoutesFile(bad, PUBLIC).then(() => null, (err: unknown) => err)
  t.type(badError, RoutesFileError)
  t.match((badError as Error).message, bad, 'the message names the file')
  const missing = path.join(dir, 'missing.json')
  const missingError = await loadRoutesFile(missing, PUBLIC).then(() => null, (err: unknown) => err)
  t.type(missingError, RoutesFileError)
  t.match((missingError as Error).message, /missing\.json:\n  - cannot be read \(ENOENT\)/)
})

t.test('the shipped example routes file is valid', async (t) => {
  const routes = await loadRoutesFile(projectPath('config', 'routes.example.json'), PUBLIC)
  t.ok(routes.length > 0)
  const table = new RouteTable(routes.map((r) => ({ prefix: r.prefix, value: r })))
  t.equal(table.match('/api/admin/users')?.value.mode, 'EM-STRICT', 'the more specific route wins')
  t.equal(table.match('/api/items')?.value.mode, 'EM-GUARD')
  t.equal(table.match('/elsewhere')?.value.mode, 'EM-OBSERVE')
})

t.test('RouteTable: longest prefix at a "/" boundary', async (t) => {
  const table = new RouteTable([
    { prefix: '/', value: 'root' },
    { prefix: '/api', value: 'api' },
    { prefix: '/api/v2', value: 'v2' },
    { prefix: '/static/', value: 'static' },
  ])
  t.equal(table.size, 4)
  const cases: [string, string | null][] = [
    ['/api', 'api'],
    ['/api/', 'api'],
    ['/api/x', 'api'],
    ['/api?q=1', 'api'],
    ['/apix', 'root'],
    ['/api/v2', 'v2'],
    ['/api/v2/users', 'v2'],
    ['/api/v2?x', 'v2'],
    ['/api/v20', 'api'],
    ['/static/a.css', 'static'],
    ['/static', 'root'],
    ['/', 'root'],
    ['/anything', 'root'],
    ['*', null],
    ['http://h/api', null],
  ]
  for (const [input, wanted] of cases) t.equal(table.match(input)?.value ?? null, wanted, `${input} → ${wanted}`)
  t.equal(table.match('/api/v2/x')?.prefix, '/api/v2', 'the matched prefix is reported')
})

t.test('RouteTable: no root route means no match outside the prefixes', async (t) => {
  const table = new RouteTable([{ prefix: '/a', value: 1 }, { prefix: '/ab', value: 2 }])
  t.equal(table.match('/b'), null)
  t.equal(table.match('/'), null)
  t.equal(table.match('/abc'), null, '/abc is neither /a nor /ab at a boundary')
  t.equal(table.match('/ab/c')?.value, 2)
  t.equal(table.match('/a/bc')?.value, 1)
})

t.test('RouteTable: the order of definition does not matter, results are preallocated', async (t) => {
  const forward = new RouteTable([{ prefix: '/a', value: 'a' }, { prefix: '/a/b', value: 'ab' }, { prefix: '/a/b/c', value: 'abc' }])
  const backward = new RouteTable([{ prefix: '/a/b/c', value: 'abc' }, { prefix: '/a/b', value: 'ab' }, { prefix: '/a', value: 'a' }])
  for (const p of ['/a/b/c/d', '/a/b/x', '/a/z', '/a']) t.equal(forward.match(p)?.value, backward.match(p)?.value, p)
  const first = forward.match('/a/b/x')
  t.equal(forward.match('/a/b/y'), first, 'the same entry object is returned for every hit')
  t.ok(Object.isFrozen(first), 'a caller cannot alter the shared entry')
})

t.test('RouteTable: refuses bad tables at construction', async (t) => {
  t.throws(() => new RouteTable([{ prefix: 'a', value: 1 }]), /must start with "\/"/)
  t.throws(() => new RouteTable([{ prefix: '/a', value: 1 }, { prefix: '/a', value: 2 }]), /duplicate/)
})

/** An IncomingMessage-shaped object carrying only what framingProblem reads. */
function message(rawHeaders: string[], version = '1.1'): IncomingMessage {
  const [major, minor] = version.split('.').map(Number)
  const headers: Record<string, string> = {}
  for (let i = 0; i < rawHeaders.length; i += 2) headers[rawHeaders[i]!.toLowerCase()] = rawHeaders[i + 1]!
  return { rawHeaders, headers, httpVersion: version, httpVersionMajor: major, httpVersionMinor: minor } as unknown as IncomingMessage
}

t.test('framingProblem accepts ordinary requests', async (t) => {
  t.equal(framingProblem(message(['Host', 'x'])), null)
  t.equal(framingProblem(message(['Host', 'x', 'Content-Length', '5'])), null)
  t.equal(framingProblem(message(['Host', 'x', 'Content-Length', '0'])), null)
  t.equal(framingProblem(message(['Host', 'x', 'Transfer-Encoding', 'chunked'])), null)
  t.equal(framingProblem(message(['Host', 'x', 'transfer-encoding', ' CHUNKED '])), null, 'case-insensitive and trimmed')
  t.equal(framingProblem(message(['Host', 'x', 'Content-Length', '5'], '1.0')), null)
  t.equal(framingProblem(message(['X-Custom_Name', 'a "quoted" value; with=params', 'Cookie', 'a=b'])), null)
})

t.test('framingProblem refuses smuggling shapes', async (t) => {
  const cases: [string, string[], RegExp, string?][] = [
    ['CL + TE', ['Content-Length', '5', 'Transfer-Encoding', 'chunked'], /both Content-Length and Transfer-Encoding/],
    ['TE + CL', ['transfer-encoding', 'chunked', 'content-length', '0'], /both Content-Length and Transfer-Encoding/],
    ['two equal CLs', ['Content-Length', '5', 'Content-Length', '5'], /more than one Content-Length/],
    ['two different CLs', ['Content-Length', '5', 'content-length', '6'], /more than one Content-Length/],
    ['CL list', ['Content-Length', '5, 5'], /not a decimal number/],
    ['CL with sign', ['Content-Length', '+5'], /not a decimal number/],
    ['CL hex', ['Content-Length', '0x5'], /not a decimal number/],
    ['CL empty', ['Content-Length', ''], /not a decimal number/],
    ['CL huge', ['Content-Length', '99999999999999999999'], /too large/],
    ['TE xchunked', ['Transfer-Encoding', 'xchunked'], /other than a single "chunked"/],
    ['TE chunked, identity', ['Transfer-Encoding', 'chunked, identity'], /other than a single "chunked"/],
    ['TE gzip, chunked', ['Transfer-Encoding', 'gzip, chunked'], /other than a single "chunked"/],
    ['TE chunked, chunked', ['Transfer-Encoding', 'chunked, chunked'], /other than a single "chunked"/],
    ['TE identity', ['Transfer-Encoding', 'identity'], /other than a single "chunked"/],
    ['TE empty', ['Transfer-Encoding', ''], /other than a single "chunked"/],
    ['TE with parameter', ['Transfer-Encoding', 'chunked;q=1'], /other than a single "chunked"/],
    ['two TE headers', ['Transfer-Encoding', 'chunked', 'Transfer-Encoding', 'chunked'], /more than one Transfer-Encoding/],
    ['TE on HTTP/1.0', ['Transfer-Encoding', 'chunked'], /HTTP\/1\.0/, '1.0'],
    ['space before colon', ['Transfer-Encoding ', 'chunked'], /header name/],
    ['tab in name', ['Transfer-Encoding\t', 'chunked'], /header name/],
    ['space inside name', ['Content Length', '5'], /header name/],
    ['empty name', ['', 'x'], /header name/],
    ['CR in value', ['X-A', 'a\rb'], /CR, LF or NUL/],
    ['LF in value (obs-fold left in)', ['Transfer-Encoding', 'chunked\n identity'], /CR, LF or NUL/],
    ['NUL in value', ['X-A', 'a\0b'], /CR, LF or NUL/],
  ]
  for (const [label, raw, reason, version] of cases) {
    t.match(framingProblem(message(['Host', 'x', ...raw], version)), reason, label)
  }
})
