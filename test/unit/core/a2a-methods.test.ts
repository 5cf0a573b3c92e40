/**
 * The A2A classifier (docs/a2a.md, "Operations"): every row of the operations table in both protocol versions
 * and every binding, the ids and skill it reads, and for any method, path and body an operation of the table.
 */
import t from 'tap'
import fc from 'fast-check'
import { A2A_OPERATIONS, a2aBindingOf, a2aCardPath, a2aParamsFor, classifyA2a, headerVersion, MAX_A2A_ID_CHARS, type A2aOperation } from '../../../src/core/a2a-methods.js'
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

/** 0.3's params where they differ from 1.0's: a push configuration's task is `id` (`taskId` when setting one). */
const PARAMS_03: Partial<Record<A2aOperation, JsonValue>> = {
  'a2a.push_config.set': { taskId: 't1', pushNotificationConfig: { id: 'cfg', url: 'https://x' } },
  'a2a.push_config.get': { id: 't1', pushNotificationConfigId: 'cfg' },
  'a2a.push_config.list': { id: 't1' },
  'a2a.push_config.delete': { id: 't1', pushNotificationConfigId: 'cfg' },
}

t.test('JSON-RPC: each method of each version is its operation, in its own version whatever the header says', async (t) => {
  for (const [operation, v03, v10, params, taskId] of JSON_RPC_ROWS) {
    for (const [method, version] of [[v03, '0.3'], [v10, '1.0']] as const) {
      if (method === null) continue
      for (const header of [undefined, '0.3', '1.0']) {
        const sent = version === '0.3' ? PARAMS_03[operation] ?? params : params
        const found = classifyA2a({ httpMethod: 'POST', path: '/', versionHeader: header, body: rpc(method, sent) })
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
  const twoTasks = classifyA2a({ httpMethod: 'POST', path: '/tasks/from-path:cancel', versionHeader: '1.0', body: { id: 'from-body' } })
  t.same([twoTasks.taskId, typeof twoTasks.problem], ['from-path', 'string'], 'the path names the task, and a body naming another is a problem')
  const same = classifyA2a({ httpMethod: 'POST', path: '/tasks/t1:cancel', versionHeader: '1.0', body: { id: 't1' } })
  t.same([same.taskId, same.problem], ['t1', undefined], 'a body naming the same task is not')
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

t.test('REST spellings: what the SDKs\' Express servers route alike is one operation (case, one trailing slash, tenant, first route wins)', async (t) => {
  const rows: readonly (readonly [string, string, A2aOperation, string | undefined])[] = [
    ['POST', '/message:send/', 'a2a.message.send', undefined],
    ['POST', '/Message:Send', 'a2a.message.send', undefined],
    ['POST', '/v1/MESSAGE:SEND/', 'a2a.message.send', undefined],
    ['POST', '/acme/Message:send', 'a2a.message.send', undefined],
    ['POST', '/message%3Asend', 'a2a.message.send', undefined],
    ['POST', '/TASKS/AbC:CANCEL/', 'a2a.tasks.cancel', 'AbC'],
    ['GET', '/extendedAgentCard/', 'a2a.card.get_extended', undefined],
    ['GET', '/EXTENDEDAGENTCARD', 'a2a.card.get_extended', undefined],
    ['GET', '/V1/Card/', 'a2a.card.get_extended', undefined],
    // The tenant route of the extended card comes before the task route.
    ['GET', '/tasks/extendedAgentCard', 'a2a.card.get_extended', undefined],
    // ... and the tenant route of a task before the configurations' routes.
    ['GET', '/tasks/tasks/pushNotificationConfigs', 'a2a.tasks.get', 'pushNotificationConfigs'],
    ['GET', '/tasks/x/PushNotificationConfigs/c/', 'a2a.push_config.get', 'x'],
    ['GET', '/tasks/a%20b', 'a2a.tasks.get', 'a b'],
    ['GET', '/tasks/a%3Ab', 'a2a.tasks.get', 'a:b'],
    ['GET', '/tasks/a:cancel', 'a2a.tasks.get', 'a:cancel'],
    ['POST', '/tasks/a:subscribe:cancel', 'a2a.tasks.cancel', 'a:subscribe'],
  ]
  for (const [method, path, operation, taskId] of rows) {
    const found = classifyA2a({ httpMethod: method, path, versionHeader: '1.0', body: undefined })
    t.same([found.operation, found.binding, found.taskId, found.problem], [operation, 'rest', taskId, undefined], `${method} ${path}`)
    t.equal(a2aBindingOf(method, path), 'rest', `${method} ${path} is REST whatever its body`)
  }
  for (const path of ['/.well-known/agent-card.json/', '/.WELL-KNOWN/Agent-Card.JSON', '/.well-known/AGENT.json/']) {
    t.equal(classifyA2a({ httpMethod: 'GET', path, versionHeader: undefined, body: undefined }).operation, 'a2a.card.get', path)
  }
  t.equal(a2aCardPath('/.Well-Known/Agent-Card.json/'), '/.well-known/agent-card.json')
  t.equal(a2aCardPath('/.well-known/agent.JSON'), '/.well-known/agent.json')
  t.equal(a2aCardPath('/x/.well-known/agent-card.json'), null)
})

t.test('REST refusals: a body that is a JSON-RPC request too, a path read two ways, an id that does not decode', async (t) => {
  const envelope = { jsonrpc: '2.0', id: 1, method: 'GetTask', params: { id: 't' }, message: { role: 'ROLE_USER', messageId: 'm', parts: [] } }
  for (const path of ['/message:send', '/message:send/', '/Message:Send', '/v1/MESSAGE:SEND/', '/acme/Message:send']) {
    const found = classifyA2a({ httpMethod: 'POST', path, versionHeader: '1.0', body: envelope })
    t.same([found.operation, found.binding, typeof found.problem], ['a2a.message.send', 'rest', 'string'], path)
  }
  t.type(classifyA2a({ httpMethod: 'POST', path: '/message:send', versionHeader: '1.0', body: { method: 'x', message: {} } }).problem, 'string', 'a method member alone')
  // Express reads the first as a task id "a:subscribe"; a server decoding first reads a subscription.
  t.type(classifyA2a({ httpMethod: 'GET', path: '/tasks/a%3Asubscribe', versionHeader: '1.0', body: undefined }).problem, 'string')
  t.type(classifyA2a({ httpMethod: 'GET', path: '/tasks/%FF', versionHeader: '1.0', body: undefined }).problem, 'string')
})

t.test('ids: the field the SDK acts on is decided; a message whose ids disagree is a problem', async (t) => {
  const rpcCall = (method: string, params: JsonValue) => classifyA2a({ httpMethod: 'POST', path: '/', versionHeader: undefined, body: rpc(method, params) })
  const rest = (path: string, body: JsonValue) => classifyA2a({ httpMethod: 'POST', path, versionHeader: '1.0', body })
  const problems: readonly (readonly [string, ReturnType<typeof classifyA2a>])[] = [
    ['SendMessage params.id beside message.taskId', rpcCall('SendMessage', { id: 'decoy', message: { taskId: 'real' } })],
    ['message/send params.taskId beside message.taskId', rpcCall('message/send', { taskId: 'decoy', message: { taskId: 'real' } })],
    ['message/send params.id alone: the agent starts a new task', rpcCall('message/send', { id: 'decoy', message: {} })],
    ['message/send: 0.3 reads no task_id', rpcCall('message/send', { message: { task_id: 'decoy' } })],
    ['SendMessage: taskId and task_id differ', rpcCall('SendMessage', { message: { taskId: '', task_id: 'other' } })],
    ['SendMessage: contextId beside message.contextId', rpcCall('SendMessage', { contextId: 'decoy', message: { contextId: 'real' } })],
    ['GetTask: taskId beside id', rpcCall('GetTask', { id: 'real', taskId: 'decoy' })],
    ['tasks/pushNotificationConfig/get: 0.3 acts on id', rpcCall('tasks/pushNotificationConfig/get', { id: 'real', taskId: 'decoy' })],
    ['tasks/pushNotificationConfig/set: 0.3 acts on taskId', rpcCall('tasks/pushNotificationConfig/set', { taskId: 'real', id: 'decoy' })],
    ['REST message: params.taskId beside message.taskId', rest('/message:send', { taskId: 'decoy', message: { taskId: 'real' } })],
    ['REST message: message and request', rest('/v1/message:send', { message: { taskId: 'a' }, request: { taskId: 'b' } })],
    ['REST 0.3 push config: the body\'s name is another task', rest('/v1/tasks/real/pushNotificationConfigs', { name: 'tasks/decoy/pushNotificationConfigs/c', pushNotificationConfig: { url: 'https://x' } })],
    ['REST 0.3 push config: the body\'s parent is another task', rest('/v1/tasks/real/pushNotificationConfigs', { parent: 'tasks/decoy', config: { pushNotificationConfig: { url: 'https://x' } } })],
  ]
  for (const [name, found] of problems) t.type(found.problem, 'string', name)
  const decided: readonly (readonly [string, ReturnType<typeof classifyA2a>, string | undefined, string | undefined])[] = [
    ['SendMessage reads task_id (1.0 proto JSON)', rpcCall('SendMessage', { message: { task_id: 'real', context_id: 'c' } }), 'real', 'c'],
    ['GetTaskPushNotificationConfig: 1.0 names the configuration id', rpcCall('GetTaskPushNotificationConfig', { taskId: 'real', id: 'cfg' }), 'real', undefined],
    ['tasks/pushNotificationConfig/get: 0.3', rpcCall('tasks/pushNotificationConfig/get', { id: 'real', pushNotificationConfigId: 'cfg' }), 'real', undefined],
    ['REST 0.3 message under request', rest('/v1/message:send', { request: { taskId: 'real', contextId: 'c' } }), 'real', 'c'],
    ['REST 0.3 push config naming its own task', rest('/v1/tasks/real/pushNotificationConfigs', { name: 'tasks/real/pushNotificationConfigs/c' }), 'real', undefined],
    ['an empty decoy asks nothing', rpcCall('SendMessage', { id: '', message: { taskId: 'real' } }), 'real', undefined],
    ['tasks/get reads no context', rpcCall('tasks/get', { id: 'real', contextId: 'c' }), 'real', undefined],
  ]
  for (const [name, found, taskId, contextId] of decided) t.same([found.taskId, found.contextId, found.problem], [taskId, contextId, undefined], name)
})

t.test('a2aParamsFor puts the ids where the classifier reads them, for every method', async (t) => {
  for (const [, v03, v10] of JSON_RPC_ROWS) {
    for (const method of [v03, v10]) {
      if (method === null) continue
      const found = classifyA2a({ httpMethod: 'POST', path: '/', versionHeader: undefined, body: rpc(method, a2aParamsFor(method, { taskId: 't1', contextId: 'c1', skill: 's' })) })
      t.equal(found.problem, undefined, method)
      if (found.operation !== 'a2a.card.get_extended' && found.operation !== 'a2a.tasks.list') t.equal(found.taskId, 't1', method)
    }
  }
})

t.test('property: every spelling of a REST path the SDKs route alike is the same operation and task', async () => {
  const routes = REST_ROWS.filter(([, path]) => path !== '/tasks')
  const flip = (text: string, mask: number[]) => [...text].map((c, i) => (mask[i % mask.length]! % 2 === 1 ? c.toUpperCase() : c.toLowerCase())).join('')
  fc.assert(fc.property(
    fc.constantFrom(...routes), fc.constantFrom('', '/v1', '/acme'), fc.array(fc.nat(1), { minLength: 1, maxLength: 16 }), fc.boolean(), fc.boolean(),
    ([method, path, operation], prefix, mask, slash, encodeColon) => {
      const literal = flip(prefix + path.replace('t1', '\u0000'), mask).replace('\u0000', 't1')
      // An encoded ":" in the route's own literal is read as ":" by a server that decodes first; the JS SDK answers 404.
      const spelt = (encodeColon ? literal.replace(/:(?=[a-z]+$)/i, '%3A') : literal) + (slash ? '/' : '')
      const found = classifyA2a({ httpMethod: method, path: spelt, versionHeader: '1.0', body: undefined })
      // Except where Express reads the encoded spelling as another route: `GET /tasks/t1%3Asubscribe` is task "t1:subscribe" there.
      if (encodeColon && method === 'GET' && path.endsWith(':subscribe')) return found.problem !== undefined
      return found.operation === operation && found.taskId === (path.includes('t1') ? 't1' : undefined) && found.problem === undefined
    },
  ), propertyRuns(500))
})
