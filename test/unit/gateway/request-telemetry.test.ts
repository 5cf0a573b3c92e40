/**
 * The request's telemetry: one log line per request with the fields the stages set, a second finish
 * writing nothing, and the counts handed to prom-client when metrics are collected.
 */
import t from 'tap'
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
