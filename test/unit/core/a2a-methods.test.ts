/**
 * The A2A classifier (docs/a2a.md, "Operations"): every row of the operations table in both protocol versions
 * and every binding, the ids and skill it reads, and for any method, path and body an operation of the table.
 */
import t from 'tap'
import fc from 'fast-check'
import { A2A_OPERATIONS, a2aBindingOf, classifyA2a, headerVersion, MAX_A2A_ID_CHARS, type A2aOperation } from '../../../src/core/a2a-methods.js'
import type { JsonValue } from '../../../src/core/strict-json.js'
import { propertyRuns } from '../../helpers/property-runs.js'

const rpc = (method: string, params?: JsonValue): JsonValue => (params === undefined ? { jsonrpc: '2.0', id: 1, method } : { jsonrpc: '2.0', id: 1, method, params })

// [operation, 0.3 method, 1.0 method, params, expected task id]
const JSON_RPC_ROWS: readonly (readonly [A2aOperation, string | null, string, JsonValue | undefined, string | undefined])[] = [
  ['a2a.message.send', 'message/send', 'SendMessage', { message: { taskId: 't1', contextId: 'c1', messageId: 'm', parts: [] } }, 't1'],
  ['a2a.message.stream', 'message/stream', 'SendStreamingMessage', { message: { messageId: 'm', contextId: 'c1', parts: [] } }, undefined],
  ['a2a.tasks.get', 'tasks/get', 'GetTask', { id: 't1', historyLength: 1 }, 't1'],
  ['a2a.tasks.list', null, 'ListTasks', { contextId: 'c1' }, undefined],
  ['a2a.tasks.cancel', 'tasks/cancel', 'CancelTask', { id: 't1' }, 't1'],
  ['a2a.tasks.subscribe', 'tasks/resubscribe', 'SubscribeToTask', { id: 't1' }, 't1'],
  ['a2a.push_config.set', 'tasks/pushNotificationConfig/set', 'CreateTaskPushNotificationConfig', { taskId: 't1', id: 'cfg', url: 'https://x' }, 't1'],
  ['a2a.push_config.get', 'tasks/pushNotificationConfig/get', 'GetTaskPushNotificationConfig', { taskId: 't1', id: 'cfg' }, 't1'],
  ['a2a.push_config.list', 'tasks/pushNotificationConfig/list', 'ListTaskPushNotificationConfigs', { taskId: 't1' }, 't1'],
  ['a2a.push_config.delete', 'tasks/pushNotificationConfig/delete', 'DeleteTaskPushNotificationConfig', { taskId: 't1', id: 'cfg' }, 't1'],
  ['a2a.card.get_extended', 'agent/getAuthenticatedExtendedCard', 'GetExtendedAgentCard', undefined, undefined],
]

t.test('JSON-RPC: each method of each version is its operation, in its own version whatever the header says', async (t) => {
  for (const [operation, v03, v10, params, taskId] of JSON_RPC_ROWS) {
    for (const [method, version] of [[v03, '0.3'], [v10, '1.0']] as const) {
      if (method === null) continue
      for (const header of [undefined, '0.3', '1.0']) {
        const found = classifyA2a({ httpMethod: 'POST', path: '/', versionHeader: header, body: rpc(method, params) })
        t.equal(found.operation, operation, `${method} (A2A-Version ${String(header)})`)
        t.equal(found.version, version, `${method} is ${version}`)
        t.equal(found.binding, 'jsonrpc')
        t.equal(found.method, method)
        t.equal(found.taskId, taskId, `${method} task id`)
        t.equal(found.streaming, operation === 'a2a.message.stream' || operation === 'a2a.tasks.subscribe')
        t.equal(found.extendedCard, operation === 'a2a.card.get_extended')
        t.equal(found.problem, undefined)
      }
    }
  }
  t.equal(classifyA2a({ httpMethod: 'POST', path: '/', versionHeader: undefined, body: rpc('message/send', { message: { contextId: 'c1' } }) }).contextId, 'c1')
  t.equal(classifyA2a({ httpMethod: 'POST', path: '/', versionHeader: '1.0', body: rpc('ListTasks', { contextId: 'c2' }) }).contextId, 'c2')
})

t.test('JSON-RPC: 0.3 names the task of a push config `id`; tasks/list and unknown methods are other, in the header\'s version', async (t) => {
  const get03 = classifyA2a({ httpMethod: 'POST', path: '/', versionHeader: undefined, body: rpc('tasks/pushNotificationConfig/get', { id: 't9', pushNotificationConfigId: 'c' }) })
  t.equal(get03.taskId, 't9')
  for (const [method, header, version] of [['tasks/list', undefined, '0.3'], ['tasks/list', '1.0', '1.0'], ['Frobnicate', '1.0', '1.0'], ['x/y', '0.3', '0.3']] as const) {
    const found = classifyA2a({ httpMethod: 'POST', path: '/', versionHeader: header, body: rpc(method) })
    t.same([found.operation, found.version, found.method], ['a2a.method.other', version, method], method)
  }
  t.equal(classifyA2a({ httpMethod: 'POST', path: '/', versionHeader: undefined, body: { jsonrpc: '2.0', id: 1 } }).operation, 'a2a.method.other')
})

// [HTTP method, path after the prefix, operation, task id]
const REST_ROWS: readonly (readonly [string, string, A2aOperation, string | undefined])[] = [
  ['POST', '/message:send', 'a2a.message.send', undefined],
  ['POST', '/message:stream', 'a2a.message.stream', undefined],
  ['GET', '/tasks/t1', 'a2a.tasks.get', 't1'],
  ['GET', '/tasks', 'a2a.tasks.list', undefined],
  ['POST', '/tasks/t1:cancel', 'a2a.tasks.cancel', 't1'],
  ['POST', '/tasks/t1:subscribe', 'a2a.tasks.subscribe', 't1'],
  ['GET', '/tasks/t1:subscribe', 'a2a.tasks.subscribe', 't1'],
  ['POST', '/tasks/t1/pushNotificationConfigs', 'a2a.push_config.set', 't1'],
  ['GET', '/tasks/t1/pushNotificationConfigs/cfg', 'a2a.push_config.get', 't1'],
  ['GET', '/tasks/t1/pushNotificationConfigs', 'a2a.push_config.list', 't1'],
  ['DELETE', '/tasks/t1/pushNotificationConfigs/cfg', 'a2a.push_config.delete', 't1'],
]

t.test('REST: 0.3 under /v1, 1.0 bare and under a tenant, the extended card at /v1/card and /extendedAgentCard', async (t) => {
  for (const [method, path, operation, taskId] of REST_ROWS) {
    for (const [prefix, header, version] of [['/v1', undefined, '0.3'], ['/v1', '0.3', '0.3'], ['', '1.0', '1.0'], ['/acme', '1.0', '1.0']] as const) {
      const found = classifyA2a({ httpMethod: method, path: prefix + path, versionHeader: header, body: undefined })
      t.same([found.operation, found.version, found.binding, found.taskId], [operation, version, 'rest', taskId], `${method} ${prefix}${path} (${String(header)})`)
    }
  }
  for (const [path, header, version, method] of [['/v1/card', undefined, '0.3', 'agent/getAuthenticatedExtendedCard'], ['/extendedAgentCard', '1.0', '1.0', 'GetExtendedAgentCard'], ['/acme/extendedAgentCard', '1.0', '1.0', 'GetExtendedAgentCard']] as const) {
    const found = classifyA2a({ httpMethod: 'GET', path, versionHeader: header, body: undefined })
    t.same([found.operation, found.version, found.binding, found.extendedCard, found.method], ['a2a.card.get_extended', version, 'rest', true, method], path)
  }
  t.equal(classifyA2a({ httpMethod: 'HEAD', path: '/tasks/t1', versionHeader: '1.0', body: undefined }).operation, 'a2a.tasks.get', 'HEAD is GET')
  for (const [method, path] of [['GET', '/message:send'], ['PUT', '/tasks/t1'], ['GET', '/a/b/tasks'], ['DELETE', '/tasks/t1']]) {
    const found = classifyA2a({ httpMethod: method!, path: path!, versionHeader: '1.0', body: undefined })
    t.same([found.operation, found.binding], ['a2a.method.other', 'rest'], `${method} ${path}`)
  }
})

t.test('REST bodies: the message\'s task, context and skill (0.3 proto JSON and 1.0 alike)', async (t) => {
  const body = { message: { messageId: 'm', taskId: 't7', contextId: 'c7', role: 'ROLE_USER', content: [{ text: 'hi' }], metadata: { skill: 'translate' } } }
  const found = classifyA2a({ httpMethod: 'POST', path: '/v1/message:send', versionHeader: undefined, body })
  t.same([found.taskId, found.contextId, found.skill, found.method], ['t7', 'c7', 'translate', 'message/send'])
  const pathWins = classifyA2a({ httpMethod: 'POST', path: '/tasks/from-path:cancel', versionHeader: '1.0', body: { id: 'from-body' } })
  t.equal(pathWins.taskId, 'from-path', 'the path names the task')
})

t.test('the agent card: both well-known paths, any version', async (t) => {
  for (const path of ['/.well-known/agent-card.json', '/.well-known/agent.json']) {
    for (const header of [undefined, '1.0']) {
      const found = classifyA2a({ httpMethod: 'GET', path, versionHeader: header, body: undefined })
      t.same([found.operation, found.binding, found.extendedCard, found.streaming], ['a2a.card.get', 'card', false, false], path)
      t.equal(found.version, header === undefined ? '0.3' : '1.0')
    }
  }
  t.equal(a2aBindingOf('POST', '/.well-known/agent-card.json'), 'jsonrpc', 'a POST is never the card')
})

t.test('the version header', async (t) => {
  for (const [header, version] of [[undefined, '0.3'], ['0.3', '0.3'], ['1.0', '1.0'], ['1', '1.0'], [' 1.1 ', '1.0'], ['0.5', '0.3'], ['10', '0.3'], ['1.0, 0.3', '0.3']] as const) {
    t.equal(headerVersion(header), version, String(header))
  }
})

t.test('ids and skills of the wrong type or length are a problem, never a guess', async (t) => {
  const long = 'x'.repeat(MAX_A2A_ID_CHARS + 1)
  for (const params of [{ id: 5 }, { id: long }, { message: { taskId: ['a'] } }, { message: { contextId: {} } }, { message: { metadata: { skill: 7 } } }, { message: { metadata: { skill: 's'.repeat(129) } } }, { message: { metadata: { skill: '' } } }]) {
    const found = classifyA2a({ httpMethod: 'POST', path: '/', versionHeader: undefined, body: rpc('message/send', params as unknown as JsonValue) })
    t.type(found.problem, 'string', JSON.stringify(params).slice(0, 60))
    t.equal(found.operation, 'a2a.message.send')
  }
  const restLong = classifyA2a({ httpMethod: 'GET', path: `/tasks/${long}`, versionHeader: '1.0', body: undefined })
  t.type(restLong.problem, 'string', 'an over-long task id in the path')
  const ok = classifyA2a({ httpMethod: 'POST', path: '/', versionHeader: undefined, body: rpc('message/send', { message: { metadata: { skill: 'echo', other: 1 } } }) })
  t.same([ok.skill, ok.problem], ['echo', undefined])
})

t.test('property: any method, path, header and body is classified without throwing, as an operation of the table', async () => {
  const segment = fc.oneof(fc.constantFrom('v1', 'tasks', 'message:send', 'message:stream', 'x:cancel', 'x:subscribe', 'pushNotificationConfigs', 'card', 'extendedAgentCard', '.well-known', 'agent-card.json', ''), fc.string({ maxLength: 12 }))
  const path = fc.array(segment, { maxLength: 5 }).map((parts) => '/' + parts.join('/'))
  const method = fc.oneof(fc.constantFrom('GET', 'HEAD', 'POST', 'DELETE', 'PUT', 'PATCH', 'OPTIONS'), fc.string({ maxLength: 8 }))
  const knownMethod = fc.constantFrom(...JSON_RPC_ROWS.flatMap(([, a, b]) => [a, b]).filter((m): m is string => m !== null))
  const body = fc.oneof(
    fc.constant(undefined),
    fc.jsonValue() as fc.Arbitrary<JsonValue>,
    fc.record({ jsonrpc: fc.constant('2.0'), id: fc.integer(), method: fc.oneof(knownMethod, fc.string()), params: fc.jsonValue() }) as fc.Arbitrary<JsonValue>,
    fc.record({ message: fc.record({ taskId: fc.jsonValue(), contextId: fc.jsonValue(), metadata: fc.record({ skill: fc.jsonValue() }) }) }) as fc.Arbitrary<JsonValue>,
  )
  const header = fc.option(fc.oneof(fc.constantFrom('0.3', '1.0', '1'), fc.string({ maxLength: 6 })), { nil: undefined })
  const operations: ReadonlySet<string> = new Set(A2A_OPERATIONS)
  fc.assert(fc.property(method, path, header, body, (httpMethod, p, versionHeader, b) => {
    const found = classifyA2a({ httpMethod, path: p, versionHeader, body: b })
    if (!operations.has(found.operation)) return false
    if (found.version !== '0.3' && found.version !== '1.0') return false
    if (found.taskId !== undefined && (typeof found.taskId !== 'string' || found.taskId.length > MAX_A2A_ID_CHARS)) return false
    return found.binding === a2aBindingOf(httpMethod, p)
  }), propertyRuns(2000))
})
