/**
 * The PDP answer validator: each member's bounds and character set, the unknown-field policy, and two
 * properties over arbitrary documents (any JSON value, and valid answers with one member mutated): the
 * validator never throws, and what it lets through is safe to put in a header, a log line and the cache.
 */
import t from 'tap'
import fc from 'fast-check'
import {
  DECISION_ID_PATTERN, MAX_DECISION_ID_LENGTH, MAX_OBLIGATIONS, MAX_REASON_LENGTH, MAX_TTL_SECONDS,
  OBLIGATION_TYPE_PATTERN, PDP_UNAVAILABLE_REASONS, isValidDecisionId, statusReason, validatePdpDocument,
} from '../../../../src/gateway/pdp/pdp-answer.js'
import type { PdpAnswer } from '../../../../src/gateway/pdp/pdp.js'
import { propertyRuns } from '../../../helpers/property-runs.js'

const ok = { decision: 'ALLOW', decision_id: 'dec-1' }
const reasonOf = (answer: PdpAnswer): string | undefined => (answer.outcome === 'UNAVAILABLE' ? answer.reason : undefined)

t.test('decision_id: the characters a header and a log line take as they are', async (t) => {
  const bad: [string, string][] = [
    ['CR LF', 'a\r\nx-evil: 1'],
    ['LF', 'a\nb'],
    ['NUL', 'a\u0000b'],
    ['non-Latin-1', 'é€'],
    ['line separator', 'a\u2028b'],
    ['Latin-1 letter', 'café'],
    ['space', 'dec 1'],
    ['quote', 'dec"1'],
    ['backslash', 'dec\\1'],
    ['comma', 'a,b'],
    ['semicolon', 'a;b'],
    ['angle brackets', '<script>'],
    ['percent', 'a%0d%0a'],
    ['tab', 'a\tb'],
    ['lone surrogate', '\ud800'],
    ['emoji', '\u{1F600}'],
    ['too long', 'x'.repeat(MAX_DECISION_ID_LENGTH + 1)],
  ]
  for (const [label, id] of bad) {
    t.equal(reasonOf(validatePdpDocument({ decision: 'ALLOW', decision_id: id }, false)), 'invalid_decision_id', `service: ${label}`)
    t.equal(reasonOf(validatePdpDocument({ result: { decision: 'DENY' }, decision_id: id }, true)), 'invalid_decision_id', `opa: ${label}`)
  }
  const good = ['dec-1', '0190a5e2-7b6c-7def-8abc-0123456789ab', 'urn:uuid:0190a5e2', 'opa:x', 'a/b+c=d@e~f_g.h', 'x'.repeat(MAX_DECISION_ID_LENGTH)]
  for (const id of good) t.equal(validatePdpDocument({ decision: 'DENY', decision_id: id }, false).outcome, 'DENY', `accepted: ${id.slice(0, 40)}`)
  t.equal(reasonOf(validatePdpDocument({ decision: 'ALLOW', decision_id: ['dec'] }, false)), 'invalid_decision_id', 'an array')
  t.equal(reasonOf(validatePdpDocument({ decision: 'ALLOW', decision_id: {} }, false)), 'invalid_decision_id', 'an object')
})

t.test('reason, ttl and obligations bounds', async (t) => {
  const cases: [string, unknown, string | undefined][] = [
    ['reason at the limit', { ...ok, reason: 'r'.repeat(MAX_REASON_LENGTH) }, undefined],
    ['reason too long', { ...ok, reason: 'r'.repeat(MAX_REASON_LENGTH + 1) }, 'invalid_reason'],
    ['reason with CR LF', { ...ok, reason: 'a\r\nb' }, 'invalid_reason'],
    ['reason with a C1 control', { ...ok, reason: 'a\u0085b' }, 'invalid_reason'],
    ['reason with a lone surrogate', { ...ok, reason: 'a\udc00' }, 'invalid_reason'],
    ['reason in another script', { ...ok, reason: 'refusé — 拒否 \u{1F6AB}' }, undefined],
    ['ttl object', { ...ok, ttl: {} }, 'invalid_ttl'],
    ['ttl NaN-like string', { ...ok, ttl: 'NaN' }, 'invalid_ttl'],
    ['ttl 2^53', { ...ok, ttl: 2 ** 53 }, 'invalid_ttl'],
    ['obligations at the limit', { ...ok, obligations: Array.from({ length: MAX_OBLIGATIONS }, () => ({ type: 'log.enhanced' })) }, undefined],
    ['too many obligations', { ...ok, obligations: Array.from({ length: MAX_OBLIGATIONS + 1 }, () => ({ type: 'log.enhanced' })) }, 'invalid_obligations'],
    ['type too long', { ...ok, obligations: [{ type: 'a'.repeat(65) }] }, 'invalid_obligations'],
    ['type with CR LF', { ...ok, obligations: [{ type: 'log.enhanced\r\nx' }] }, 'invalid_obligations'],
    ['type with a space', { ...ok, obligations: [{ type: 'log enhanced' }] }, 'invalid_obligations'],
    ['type non-ASCII', { ...ok, obligations: [{ type: 'lög' }] }, 'invalid_obligations'],
    ['params too deep', { ...ok, obligations: [{ type: 'x', params: { a: { b: { c: { d: {} } } } } }] }, 'invalid_obligations'],
    ['params at the depth limit', { ...ok, obligations: [{ type: 'x', params: { a: { b: { c: 1 } } } }] }, undefined],
    ['params with too many values', { ...ok, obligations: [{ type: 'x', params: { a: Array.from({ length: 64 }, (_, i) => i) } }] }, 'invalid_obligations'],
    ['params string too long', { ...ok, obligations: [{ type: 'x', params: { key: 'k'.repeat(1025) } }] }, 'invalid_obligations'],
    ['params key too long', { ...ok, obligations: [{ type: 'x', params: { ['k'.repeat(65)]: 1 } }] }, 'invalid_obligations'],
  ]
  for (const [label, document, reason] of cases) {
    const answer = validatePdpDocument(document, false)
    if (reason === undefined) t.not(answer.outcome, 'UNAVAILABLE', `${label}: accepted`)
    else t.equal(reasonOf(answer), reason, `${label} → ${reason}`)
  }
})

t.test('required_trust_level: one of the five trust codes, else the whole answer is invalid', async (t) => {
  const deny = { decision: 'DENY', decision_id: 'dec-1', reason: 'mcp_tool_trust_level_below_minimum' }
  for (const code of ['SS', 'REG', 'DV', 'OV', 'EV']) {
    t.match(validatePdpDocument({ ...deny, required_trust_level: code }, false), { outcome: 'DENY', requiredTrustLevel: code }, `${code}: kept`)
    t.match(validatePdpDocument({ result: { ...deny, required_trust_level: code }, decision_id: 'x' }, true), { requiredTrustLevel: code }, `${code}: kept from OPA`)
  }
  for (const absent of [undefined, null]) {
    t.notOk('requiredTrustLevel' in validatePdpDocument({ ...deny, required_trust_level: absent }, false), `${String(absent)}: absent`)
  }
  const bad: [string, unknown][] = [
    ['lower case', 'ov'], ['a level number', '3'], ['a number', 3], ['unknown code', 'GOLD'], ['empty', ''],
    ['a header injection', 'OV", scope="admin'], ['CR LF', 'OV\r\nx-evil: 1'], ['an array', ['OV']], ['an object', { code: 'OV' }], ['inherited name', 'constructor'],
  ]
  for (const [label, value] of bad) {
    t.equal(reasonOf(validatePdpDocument({ ...deny, required_trust_level: value }, false)), 'invalid_required_trust_level', `${label} → invalid_required_trust_level`)
    t.equal(reasonOf(validatePdpDocument({ result: { ...deny, required_trust_level: value } }, true)), 'invalid_required_trust_level', `OPA: ${label}`)
  }
  t.ok(PDP_UNAVAILABLE_REASONS.includes('invalid_required_trust_level'), 'a label of the closed set')
})

t.test('unknown members are ignored; only read members are kept', async (t) => {
  const answer = validatePdpDocument({
    ...ok, extra: { deep: [1, 2, 3] }, obligations: [{ type: 'log.enhanced', params: { level: 'info' }, note: 'dropped' }],
  }, false)
  t.same(answer, { outcome: 'ALLOW', decisionId: 'dec-1', obligations: [{ type: 'log.enhanced', params: { level: 'info' } }], ttl: 0 })
  const opa = validatePdpDocument({ result: { decision: 'DENY', whatever: 1 }, decision_id: 'x', metrics: {} }, true)
  t.same(opa, { outcome: 'DENY', decisionId: 'x', obligations: [], ttl: 0 })
})

t.test('status reasons form a closed set', async (t) => {
  t.equal(statusReason(500), 'status_5xx')
  t.equal(statusReason(503), 'status_5xx')
  t.equal(statusReason(404), 'status_4xx')
  t.equal(statusReason(302), 'status_3xx')
  t.equal(statusReason(204), 'status_2xx')
  t.equal(statusReason(101), 'status_1xx')
  t.equal(statusReason(600), 'status_other')
  t.equal(statusReason(99), 'status_other')
  t.equal(statusReason(Number.NaN), 'status_other')
  const outside = Array.from({ length: 1000 }, (_, status) => status).filter((status) => !PDP_UNAVAILABLE_REASONS.includes(statusReason(status)))
  t.same(outside, [], 'every status 0-999 maps into the label set')
})

/** What the gateway relies on in a validated answer. */
function checkAnswer(answer: PdpAnswer): void {
  if (answer.outcome === 'UNAVAILABLE') {
    if (!PDP_UNAVAILABLE_REASONS.includes(answer.reason)) throw new Error(`reason outside the label set: ${answer.reason}`)
    return
  }
  if (answer.outcome !== 'ALLOW' && answer.outcome !== 'DENY') throw new Error('bad outcome')
  if (!isValidDecisionId(answer.decisionId) || !DECISION_ID_PATTERN.test(answer.decisionId)) throw new Error('bad decision id')
  if (!/^[\t\x20-\x7e\x80-\xff]*$/.test(answer.decisionId)) throw new Error('decision id not a header value')
  if (!Number.isSafeInteger(answer.ttl) || answer.ttl < 0 || answer.ttl > MAX_TTL_SECONDS) throw new Error('bad ttl')
  if (!Array.isArray(answer.obligations) || answer.obligations.length > MAX_OBLIGATIONS) throw new Error('bad obligations')
  for (const o of answer.obligations) {
    if (!OBLIGATION_TYPE_PATTERN.test(o.type)) throw new Error('bad obligation type')
    if (o.params !== undefined && (typeof o.params !== 'object' || o.params === null || Array.isArray(o.params))) throw new Error('bad params')
    if (JSON.stringify(o.params ?? {}).length > 64 * 1024) throw new Error('params too large')
  }
  if (answer.reason !== undefined && (typeof answer.reason !== 'string' || answer.reason.length > MAX_REASON_LENGTH)) throw new Error('bad reason')
  if (answer.requiredTrustLevel !== undefined && !['SS', 'REG', 'DV', 'OV', 'EV'].includes(answer.requiredTrustLevel)) throw new Error('bad required trust level')
}

t.test('property: any JSON value is a valid answer or UNAVAILABLE, never a throw', async (t) => {
  fc.assert(
    fc.property(fc.jsonValue(), fc.boolean(), (document, opa) => {
      checkAnswer(validatePdpDocument(document, opa))
      // the same value wrapped where a decision is looked for
      checkAnswer(validatePdpDocument({ result: document, decision_id: document }, opa))
    }),
    propertyRuns(500),
  )
  t.pass('held')
})

// A valid answer with members replaced by arbitrary values (any JSON, any string, any unicode).
const anyValue = fc.oneof(
  fc.jsonValue(),
  fc.string({ unit: 'binary', maxLength: 300 }),
  fc.constantFrom('ALLOW', 'DENY', '', '\r\n', 'é€', '\u2028', 'x'.repeat(300), -1, 1e300, 3601, null),
)
const member = fc.constantFrom('decision', 'decision_id', 'reason', 'ttl', 'required_trust_level', 'obligations', 'obligations.0', 'obligations.0.type', 'obligations.0.params', 'obligations.0.params.rpm')

function mutate(base: Record<string, any>, path: string, value: unknown): Record<string, any> {
  const copy = structuredClone(base)
  const keys = path.split('.')
  let target: any = copy
  for (const key of keys.slice(0, -1)) target = target[key]
  target[keys.at(-1)!] = value
  return copy
}

t.test('property: a valid answer with mutated members is a valid answer or UNAVAILABLE', async (t) => {
  const base = {
    decision: 'ALLOW', decision_id: 'dec-1', reason: 'allowed', ttl: 60, required_trust_level: 'OV', obligations: [{ type: 'rate_limit.apply', params: { rpm: 5, key: 'k' } }],
  }
  fc.assert(
    fc.property(fc.array(fc.tuple(member, anyValue), { minLength: 1, maxLength: 3 }), fc.boolean(), (mutations, opa) => {
      let document: Record<string, any> = base
      for (const [path, value] of mutations) {
        try {
          document = mutate(document, path, value)
        } catch {
          // the path no longer exists after an earlier mutation
        }
      }
      const answer = validatePdpDocument(opa ? { result: document, decision_id: document.decision_id } : document, opa)
      checkAnswer(answer)
    }),
    propertyRuns(1000),
  )
  t.pass('held')
})
