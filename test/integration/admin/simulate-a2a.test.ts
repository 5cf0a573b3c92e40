/**
 * Simulation of an A2A call: the decision the gateway would make for it on an A2A route (docs/a2a.md), from
 * the method of either version, the task or context id and the skill, through the gateway's own classifier.
 */
import t from 'tap'
import { stringify } from 'yaml'
import { createOrg, startTestAdmin } from '../../helpers/admin.js'

t.test('simulate takes an A2A call', async (t) => {
  const admin = await startTestAdmin(t)
  const org = await createOrg(admin, 'a2a-simulate')
  const agent = (await admin.request('POST', '/v1/agents', { key: org.key, body: { name: 'messenger' } })).body.data
  const base = `/v1/orgs/${org.orgId}/policy`
  const yaml = stringify({
    version: '1',
    operations: [
      { pattern: 'a2a.message.*', min_trust_level: 'OV' },
      { pattern: 'a2a.tasks.cancel', allowed_dids: [] },
      { pattern: 'POST /private/**', allowed_dids: [] },
    ],
  })
  const proposal = await admin.request('POST', `${base}/org`, { key: org.key, body: { yaml_content: yaml } })
  t.equal((await admin.request('POST', `${base}/proposals/${proposal.body.id}/approve`, { key: org.key })).status, 200)
  const simulate = (body: Record<string, unknown>, trust = 'DV'): ReturnType<typeof admin.request> =>
    admin.request('POST', `${base}/agents/${agent.id}/simulate`, { key: org.key, body: { subject: { trust_level: trust }, ...body } })

  for (const method of ['message/send', 'SendMessage', 'message/stream', 'SendStreamingMessage']) {
    t.match((await simulate({ a2a: { method, skill: 'refunds' } })).body, { decision: 'DENY', reason: 'trust_level_below_minimum' }, `${method} below OV`)
    t.match((await simulate({ a2a: { method, skill: 'refunds' } }, 'OV')).body, { decision: 'ALLOW' }, `${method} at OV`)
  }
  for (const method of ['tasks/get', 'GetTask']) {
    t.match((await simulate({ a2a: { method, task_id: 't-1' } })).body, { decision: 'ALLOW' }, `${method} is not a message`)
  }
  for (const method of ['tasks/cancel', 'CancelTask']) {
    t.match((await simulate({ a2a: { method, task_id: 't-1' } }, 'EV')).body, { decision: 'DENY', reason: 'operation_not_in_allow_list' }, method)
  }
  t.match((await simulate({ a2a: { method: 'tasks/get', task_id: 't-1', path: '/private/agent' } })).body, { decision: 'DENY', reason: 'operation_not_in_allow_list' }, 'the route path\'s rules apply')
  t.match((await simulate({ a2a: { method: 'NoSuchMethod' } })).body, { decision: 'ALLOW' }, 'an unknown method is a2a.method.other')

  for (const [name, body] of [
    ['both an action and an A2A call', { action: { operation: 'agent.invoke' }, a2a: { method: 'tasks/get' } }],
    ['both an MCP message and an A2A call', { mcp: { method: 'ping' }, a2a: { method: 'tasks/get' } }],
  ] as const) {
    const refused = await simulate(body)
    t.equal(refused.status, 400, name)
    t.equal(refused.body.error, 'simulate_request_invalid', name)
  }
  for (const [name, a2a] of [
    ['a method missing', {}],
    ['a skill too long', { method: 'message/send', skill: 's'.repeat(129) }],
    ['a task id too long', { method: 'tasks/get', task_id: 't'.repeat(257) }],
    ['an unknown member', { method: 'tasks/get', tenant: 'x' }],
  ] as const) {
    t.equal((await simulate({ a2a })).status, 400, name)
  }
})
