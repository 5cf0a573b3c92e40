/**
 * The request's telemetry: one log line per request with the fields the stages set, a second finish
 * writing nothing, and the counts handed to prom-client when metrics are collected.
 */
import t from 'tap'
import type { PdpRequest } from '../../../src/core/policy/types.js'
import { DecisionFeed, OverrideLog } from '../../../src/telemetry/decision-feed.js'
import { FEED_MAX_PATH } from '../../../src/gateway/request-telemetry.js'
import { CALLER, stageWorld, SUBJECT } from '../../helpers/gateway-stage.js'

t.test('finish writes one line, counts the request and is idempotent', async (t) => {
  const world = stageWorld()
  const { scope } = world.verified('HEAD', '/api/x')
  scope.status = 403
  scope.decision = 'DENY'
  scope.decisionId = 'dec-"1"'
  scope.errorCode = 'POLICY_DENIED'
  scope.policyReason = 'denied_did'
  scope.delegationDepth = 2
  world.ctx.telemetry.finish(scope)
  world.ctx.telemetry.finish(scope)
  const lines = world.requestLines()
  t.equal(lines.length, 1, 'one line per request')
  t.match(lines[0], {
    request_id: scope.requestId,
    txn_id: 'txn-stage',
    agent_did: SUBJECT,
    badge_jti: CALLER.jti,
    method: 'HEAD',
    status: 403,
    mode: 'EM-GUARD',
    'service.policy.decision': 'DENY',
    'service.policy.override': false,
    'service.policy.decision_id': 'dec-"1"',
    operation: 'GET /api/x',
    'service.policy.reason': 'denied_did',
    error_code: 'POLICY_DENIED',
    delegation_depth: 2,
  })
  t.type(lines[0]?.latency_ms, 'number')

  const unhook = world.ctx.telemetry.reportOnCollect(world.ctx.badges, world.ctx.decisions)
  t.teardown(unhook)
  const text = await world.metrics.registry.metrics()
  t.match(text, /service_gateway_requests_total\{decision="DENY",mode="EM-GUARD",status_class="4xx",error_code="POLICY_DENIED"\} 1/, 'counted once, labelled by its code')
  t.match(text, /service_gateway_cache_lookups_total\{cache="badge",result="miss"\} 1/, 'the badge lookup is reported')
  t.match(text, /service_gateway_cache_entries\{cache="badge"\} 1/, 'and the cache size')
})

t.test('the decision feed: decided requests and refusals after the badge, one record each, the PDP request of a denial', async (t) => {
  const feed = { decisions: new DecisionFeed(10), overrides: new OverrideLog() }
  const world = stageWorld({ feed })
  const asked = { pip_version: 'service.pip.v1' } as unknown as PdpRequest

  const denied = world.verified('GET', '/api/denied').scope
  denied.status = 403
  denied.decision = 'DENY'
  denied.decisionId = 'dec-deny'
  denied.policyReason = 'denied_did'
  denied.pdpRequest = asked
  world.ctx.telemetry.finish(denied)
  world.ctx.telemetry.finish(denied)

  const allowed = world.verified('GET', '/api/allowed').scope
  allowed.status = 200
  allowed.decision = 'ALLOW'
  allowed.pdpRequest = asked
  world.ctx.telemetry.finish(allowed)

  const chainRefused = world.verified('GET', '/api/chain').scope
  chainRefused.status = 403
  chainRefused.errorCode = 'CHAIN_INVALID' as never
  world.ctx.telemetry.finish(chainRefused)

  const noBadge = world.admitted('GET', '/api/anonymous').scope
  noBadge.status = 401
  noBadge.errorCode = 'BADGE_MISSING' as never
  world.ctx.telemetry.finish(noBadge)

  const records = feed.decisions.after(0).items
  t.same(records.map((r) => r.path), ['/api/denied', '/api/allowed', '/api/chain'], 'no record for a request without a verified badge; one per finish')
  t.same(records.map((r) => r.seq), [1, 2, 3])
  t.match(records[0], { decision: 'DENY', reason: 'denied_did', decisionId: 'dec-deny', agentDid: SUBJECT, txnId: 'txn-stage', status: 403, protocol: 'http' })
  t.equal(records[0]?.pdpRequest, asked, 'a denial keeps its PDP request (by reference)')
  t.equal(records[1]?.pdpRequest, null, 'an ALLOW does not')
  t.match(records[2], { decision: undefined, errorCode: 'CHAIN_INVALID' })
  t.notMatch(JSON.stringify(records), CALLER.token, 'the badge is not in a record')
})

t.test('an over-long path is kept as a bounded copy, without its PDP request', async (t) => {
  const feed = { decisions: new DecisionFeed(10), overrides: new OverrideLog() }
  const world = stageWorld({ feed })
  const long = '/api/' + 'a'.repeat(10_000)
  const scope = world.verified('GET', long).scope
  scope.status = 403
  scope.decision = 'DENY'
  scope.pdpRequest = { pip_version: 'service.pip.v1' } as unknown as PdpRequest
  world.ctx.telemetry.finish(scope)
  const record = feed.decisions.after(0).items[0]
  t.equal(record?.path.length, FEED_MAX_PATH + 1, 'the start of the path and an ellipsis')
  t.ok(record?.path.endsWith('…'))
  t.equal(record?.pdpRequest, null, 'the PDP request (which holds the target) is not kept')
})
