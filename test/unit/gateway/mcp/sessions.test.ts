/**
 * The bounded table of MCP session owners (docs/mcp.md, "Sessions"): a binding is its subject's, the least
 * recently used one goes past the bound, an idle one expires, an ended one is unknown; and what the
 * watch of an upstream answer's head binds or ends.
 */
import t from 'tap'
import { McpSessions, MCP_SESSION_ID_MAX_CHARS, requestSessionId, SessionWatch } from '../../../../src/gateway/mcp/sessions.js'

const head = (...pairs: string[]): Buffer[] => pairs.map((value) => Buffer.from(value, 'latin1'))

t.test('a session is its subject\'s; unknown, evicted, expired and ended ones are unknown', async (t) => {
  const sessions = new McpSessions({ max: 2, idleMs: 40 })
  sessions.bind('s1', 'alice')
  t.equal(sessions.check('s1', 'alice'), null)
  t.equal(sessions.check('s1', 'bob'), 'MCP_SESSION_FORBIDDEN')
  t.equal(sessions.check('nope', 'alice'), 'MCP_SESSION_UNKNOWN')
  sessions.bind('s2', 'bob')
  sessions.check('s1', 'alice')
  sessions.bind('s3', 'carol')
  t.equal(sessions.size, 2, 'bounded')
  t.equal(sessions.check('s2', 'bob'), 'MCP_SESSION_UNKNOWN', 'the least recently used binding went')
  t.equal(sessions.check('s1', 'alice'), null, 'a used one stayed')
  sessions.end('s1')
  t.equal(sessions.check('s1', 'alice'), 'MCP_SESSION_UNKNOWN', 'an ended session is unknown')
  await new Promise((resolve) => setTimeout(resolve, 80))
  t.equal(sessions.check('s3', 'carol'), 'MCP_SESSION_UNKNOWN', 'an idle binding expires')
  sessions.bind('x'.repeat(MCP_SESSION_ID_MAX_CHARS + 1), 'alice')
  sessions.bind('', 'alice')
  t.equal(sessions.size, 0, 'an empty or overlong id is never bound')
})

t.test('the watch binds the session an initialize answer opens, and ends it on an accepted DELETE', async (t) => {
  const sessions = new McpSessions()
  t.equal(new SessionWatch(sessions, { bindTo: 'alice' }).filterFor(200, 'application/json', undefined, head('Content-Type', 'application/json', 'MCP-Session-ID', 's1')), null, 'the body is not touched')
  t.equal(sessions.check('s1', 'alice'), null)
  new SessionWatch(sessions, { bindTo: 'bob' }).filterFor(400, 'application/json', undefined, head('mcp-session-id', 's2'))
  t.equal(sessions.check('s2', 'bob'), 'MCP_SESSION_UNKNOWN', 'a refused initialize binds nothing')
  new SessionWatch(sessions, { end: 's1' }).filterFor(405, undefined, undefined, head())
  t.equal(sessions.check('s1', 'alice'), null, 'a DELETE the upstream refused leaves the session')
  new SessionWatch(sessions, { end: 's1' }).filterFor(200, undefined, undefined, head())
  t.equal(sessions.check('s1', 'alice'), 'MCP_SESSION_UNKNOWN', 'an accepted DELETE ends it')
})

t.test('the request\'s session id: absent, one, or refused when repeated', async (t) => {
  t.equal(requestSessionId({ rawHeaders: ['Host', 'x'] } as never), undefined)
  t.equal(requestSessionId({ rawHeaders: ['Mcp-Session-Id', 's1'] } as never), 's1')
  t.equal(requestSessionId({ rawHeaders: ['mcp-session-id', 's1', 'MCP-SESSION-ID', 's1'] } as never), null)
})
