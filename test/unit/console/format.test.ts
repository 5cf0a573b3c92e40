/** The console's formatting and filtering helpers (console/src/lib/format.ts). */
import t from 'tap'
import {
  agentLabel, agentShortIds, errorText, filterDecisions, formatClock, formatDuration, formatObligations, formatTime, mergeDecisions, parseJsonObject,
  queryString, shorten, trustEarned, trustLabel, type DecisionEvent,
} from '../../../console/src/lib/format.js'

t.test('formatTime: UTC to the second, placeholders for nothing, garbage as given', async (t) => {
  t.equal(formatTime('2026-05-01T10:00:00.123Z'), '2026-05-01 10:00:00 UTC')
  t.equal(formatTime(Date.UTC(2026, 0, 2, 3, 4, 5)), '2026-01-02 03:04:05 UTC')
  t.equal(formatTime(null), '—')
  t.equal(formatTime(''), '—')
  t.equal(formatTime('soon'), 'soon')
})

t.test('formatClock: the UTC time of day', async (t) => {
  t.equal(formatClock('2026-05-01T10:00:09.900Z'), '10:00:09')
  t.equal(formatClock(undefined), '—')
  t.equal(formatClock('later'), 'later')
})

t.test('formatDuration', async (t) => {
  t.equal(formatDuration(0), '0s')
  t.equal(formatDuration(59.6), '1m 0s')
  t.equal(formatDuration(200), '3m 20s')
  t.equal(formatDuration(7500), '2h 5m')
  t.equal(formatDuration(3 * 86400 + 4 * 3600), '3d 4h')
  t.equal(formatDuration(null), '—')
  t.equal(formatDuration(Number.NaN), '—')
})

t.test('trust levels: label with the code, and how the level is earned (docs/api.md §2.3)', async (t) => {
  t.equal(trustLabel('1'), '1 (REG)')
  t.equal(trustLabel(2), '2 (DV)')
  t.equal(trustLabel('4'), '4 (EV)')
  t.equal(trustLabel('9'), '9')
  t.equal(trustLabel(null), '—')
  t.match(trustEarned('1'), /Registered/)
  t.match(trustEarned('2'), /DNS TXT/)
  t.match(trustEarned('3'), /Operator decision/)
  t.match(trustEarned('4'), /Operator decision/)
})

t.test('formatObligations', async (t) => {
  t.equal(formatObligations(null), '—')
  t.equal(formatObligations({}), '—')
  t.equal(formatObligations([]), '—')
  t.equal(formatObligations({ log: 'enhanced', rate: 5 }), 'log=enhanced, rate=5')
  t.equal(formatObligations(['redact', { a: 1 }]), 'redact, {"a":1}')
})

t.test('shorten keeps both ends', async (t) => {
  t.equal(shorten('short'), 'short')
  const did = 'did:web:registry.example.com:agents:0b6f5a7e-1c2d-4e5f-8a9b-0c1d2e3f4a5b'
  const out = shorten(did, 30)
  t.equal(out.length, 30)
  t.ok(out.startsWith('did:web:'))
  t.ok(out.endsWith('4a5b'))
  t.equal(shorten(null), '—')
})

t.test('errorText: the API error shape, the OAuth shape, else the status', async (t) => {
  t.equal(errorText(403, { error: 'forbidden', message: 'Admins only.' }), 'forbidden: Admins only. (HTTP 403)')
  t.equal(errorText(400, { error: 'invalid_scope', error_description: 'nope' }), 'invalid_scope: nope (HTTP 400)')
  t.equal(errorText(404, { error: 'not_found' }), 'not_found (HTTP 404)')
  t.equal(errorText(502, undefined), 'HTTP 502')
  t.equal(errorText(500, 'text'), 'HTTP 500')
})

t.test('queryString drops empty values and encodes', async (t) => {
  t.equal(queryString({}), '')
  t.equal(queryString({ q: '', cursor: null, limit: undefined }), '')
  t.equal(queryString({ q: 'a b&c', limit: 25 }), '?q=a%20b%26c&limit=25')
})

const event = (seq: number, decision: string, agent: string | null, operation: string | null): DecisionEvent => ({
  seq, time: '2026-05-01T10:00:00Z', agent_did: agent, operation, decision, reason: null, decision_id: `d${seq}`,
  mode: 'EM-STRICT', obligations: null, breakglass: false,
})

t.test('filterDecisions: decision exact, agent and operation as case-insensitive substrings', async (t) => {
  const events = [
    event(1, 'ALLOW', 'did:web:x:agents:alpha', 'GET /forecasts/today'),
    event(2, 'DENY', 'did:web:x:agents:alpha', 'GET /admin/users'),
    event(3, 'DENY', 'did:key:z6MkBeta', 'tools/call'),
    event(4, 'ALLOW', null, null),
  ]
  const seqs = (f: { decision: string; agent: string; operation: string }): number[] => filterDecisions(events, f).map((e) => e.seq)
  t.same(seqs({ decision: '', agent: '', operation: '' }), [1, 2, 3, 4])
  t.same(seqs({ decision: 'DENY', agent: '', operation: '' }), [2, 3])
  t.same(seqs({ decision: '', agent: 'ALPHA', operation: '' }), [1, 2])
  t.same(seqs({ decision: '', agent: '', operation: ' /admin ' }), [2])
  t.same(seqs({ decision: 'ALLOW', agent: 'beta', operation: '' }), [])
})

t.test('mergeDecisions: ordered by seq, no duplicates, the newest kept', async (t) => {
  const merged = mergeDecisions([event(2, 'ALLOW', 'a', 'x'), event(1, 'ALLOW', 'a', 'x')], [event(3, 'DENY', 'a', 'x'), event(2, 'DENY', 'a', 'x')])
  t.same(merged.map((e) => e.seq), [1, 2, 3])
  t.equal(merged[1]?.decision, 'DENY', 'a repeated seq (a resumed stream) replaces the old copy')
  t.same(mergeDecisions([], [1, 2, 3, 4, 5].map((n) => event(n, 'ALLOW', 'a', 'x')), 3).map((e) => e.seq), [3, 4, 5])
})

t.test('parseJsonObject', async (t) => {
  t.same(parseJsonObject('{"name":"x"}'), { value: { name: 'x' } })
  t.match(parseJsonObject('{'), { error: /Not valid JSON/ })
  t.match(parseJsonObject('[1]'), { error: /JSON object/ })
  t.match(parseJsonObject('null'), { error: /JSON object/ })
})

t.test('agents are told apart by domain and short id, the id growing where two start alike', async (t) => {
  const a = { id: '3f2a9c1e-0000-4000-8000-000000000001', name: 'weather-bot', domain: 'weather.example.com' }
  const b = { id: '3f2a9c1e-0000-4000-8000-000000000002', name: 'weather-bot', domain: null }
  const c = { id: '77aa0011-1111-4111-8111-111111111111', name: 'weather-bot', domain: '' }
  t.equal(agentLabel(a), 'weather-bot (weather.example.com · 3f2a9c1e)')
  t.equal(agentLabel(c), 'weather-bot (77aa0011)', 'an empty domain is no domain')
  const ids = agentShortIds([a, b, c])
  t.equal(ids.get(c.id), '77aa0011', 'eight characters when they suffice')
  t.equal(ids.get(a.id), a.id, 'ids that differ only at the end are shown whole')
  t.equal(ids.get(b.id), b.id)
  const labels = [a, b, c].map((x) => agentLabel(x, ids.get(x.id)))
  t.equal(new Set(labels).size, 3, 'three agents of one name, three labels')
  const near = agentShortIds([{ id: 'abcdef0123' }, { id: 'abcdef0199' }, { id: 'ffff' }])
  t.same([...near.values()].sort(), ['abcdef012', 'abcdef019', 'ffff'], 'one character past the shared start; a short id whole')
  t.same([...agentShortIds([a, a]).entries()], [[a.id, '3f2a9c1e']], 'the same agent twice is one agent')
  t.equal(agentShortIds([]).size, 0)
})
