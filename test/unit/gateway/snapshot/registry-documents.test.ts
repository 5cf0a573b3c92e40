/**
 * The watch stream's events as the gateway reads them (src/gateway/snapshot/registry-documents.ts,
 * docs/peer-input-validation.md, "The watch stream"): known kinds in shape, unknown kinds and comments
 * ignored, a known kind out of shape refused.
 */
import t from 'tap'
import { parseWatchEvent } from '../../../../src/gateway/snapshot/registry-documents.js'

const ORG = '0190a5e2-7b6c-7def-8abc-0123456789ab'

t.test('known events in shape', async (t) => {
  t.same(parseWatchEvent('ready', '{"heartbeat_ms":15000}'), { kind: 'ready', heartbeatMs: 15000 })
  t.same(parseWatchEvent('policy', JSON.stringify({ org_id: ORG.toUpperCase() })), { kind: 'policy', orgId: ORG }, 'the org id, lower case')
  t.same(parseWatchEvent('revoked', '{"jti":"0190a5e2-jti"}'), { kind: 'revoked', jti: '0190a5e2-jti' })
  t.same(parseWatchEvent('keys', '{}'), { kind: 'keys' })
  t.same(parseWatchEvent('resync', '{"extra":1}'), { kind: 'resync' }, 'members a gateway does not read are ignored')
})

t.test('comments and unknown kinds are ignored', async (t) => {
  t.equal(parseWatchEvent(undefined, undefined), null, 'a comment block')
  t.equal(parseWatchEvent('ready', undefined), null, 'an event without data is not dispatched (SSE)')
  t.equal(parseWatchEvent('someday', '{"x":1}'), null)
  t.equal(parseWatchEvent(undefined, 'just data'), null, 'the default "message" kind')
  t.equal(parseWatchEvent('__proto__', '{}'), null)
})

t.test('known kinds out of shape are refused', async (t) => {
  const cases: [string, string, RegExp][] = [
    ['ready', '{}', /heartbeat_ms/],
    ['ready', '{"heartbeat_ms":99}', /heartbeat_ms/],
    ['ready', '{"heartbeat_ms":300001}', /heartbeat_ms/],
    ['ready', '{"heartbeat_ms":1000.5}', /heartbeat_ms/],
    ['ready', '{"heartbeat_ms":"1000"}', /heartbeat_ms/],
    ['policy', '{"org_id":"not-a-uuid"}', /org_id/],
    ['policy', `{"org_id":"${ORG} "}`, /org_id/],
    ['policy', '[]', /not a JSON object/],
    ['revoked', '{"jti":""}', /jti/],
    ['revoked', `{"jti":"${'a'.repeat(257)}"}`, /jti/],
    ['revoked', '{"jti":"a b"}', /jti/],
    ['revoked', '{"jti":"é"}', /jti/],
    ['revoked', '{"jti":["a"]}', /jti/],
    ['keys', 'null', /not a JSON object/],
    ['keys', '{', /not JSON/],
    ['resync', '"x"', /not a JSON object/],
  ]
  for (const [kind, data, message] of cases) t.throws(() => parseWatchEvent(kind, data), message, `${kind} ${data.slice(0, 40)}`)
})
