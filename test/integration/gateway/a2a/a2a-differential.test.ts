/**
 * The real SDKs as the oracle of the gateway's A2A classifier: the gateway (EM-GUARD, embedded PDP) in front of
 * the @a2a-js/sdk 1.x agent (JSON-RPC and REST, 0.3 compatibility on) and of the 0.3 SDK's agent, whose request
 * handlers record what they were asked to execute (operation and task). Random spellings of paths (case, a
 * trailing slash, percent-encoding, dot segments, tenant and `/v1` prefixes, case-sensitive and case-insensitive
 * routes) and bodies (extra members, decoy ids, both envelopes at once) go through the gateway; for every one,
 * either the gateway refused it and the agent executed nothing, or what the agent executed is what the gateway
 * decided (its request log line). The policy denies cancels, and messages below OV, so a request read as one
 * operation and run as another would show.
 */
import t, { type Test } from 'tap'
import fc from 'fast-check'
import { randomUUID, generateKeyPairSync, type KeyObject } from 'node:crypto'
import type { Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import express from 'express'
import { request as httpRequest } from 'undici'
import { TaskState, type AgentCard } from 'a2a-sdk-v1'
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore, type AgentExecutor, type ExecutionEventBus, type RequestContext } from 'a2a-sdk-v1/server'
import { agentCardHandler, jsonRpcHandler, restHandler } from 'a2a-sdk-v1/server/express'
import { duplicateInterfacesForLegacy } from 'a2a-sdk-v1/compat/v0_3'
import * as V03Server from 'a2a-sdk-v0.3/server'
import * as V03Express from 'a2a-sdk-v0.3/server/express'
import type { TrustLevel } from '../../../../src/core/trust-level.js'
import { startProtocolGateway, type ProtocolGateway, authorityBadge } from '../../../helpers/protocol-gateway.js'
import { propertyRuns } from '../../../helpers/property-runs.js'

t.setTimeout(180_000)

const key = generateKeyPairSync('ed25519')
const REG: TrustLevel = '1'
const OV: TrustLevel = '3'

const badge = (level: TrustLevel): string => authorityBadge(key.privateKey as KeyObject, level)

/** Everything for REG but messages and the extended card (OV); cancels for no one. */
const POLICY = {
  min_trust_level: null, allowed_dids: null, denied_dids: [], rate_limits: [], mcp_tools: [], capability_classes: [],
  operations: [
    { pattern: 'a2a.message.*', min_trust_level: 'OV' },
    { pattern: 'a2a.card.get_extended', min_trust_level: 'OV' },
    { pattern: 'a2a.tasks.get', min_trust_level: 'REG' },
    { pattern: 'a2a.tasks.list', min_trust_level: 'REG' },
    { pattern: 'a2a.tasks.subscribe', min_trust_level: 'REG' },
    { pattern: 'a2a.push_config.*', min_trust_level: 'REG' },
  ],
}

interface Executed {
  readonly operation: string
  readonly taskId: string | undefined
}

type TaskOf = (params: Record<string, unknown> | undefined) => unknown

const messageTask: TaskOf = (params) => (params?.message as Record<string, unknown> | undefined)?.taskId
const idTask: TaskOf = (params) => params?.id
const taskIdTask: TaskOf = (params) => params?.taskId
const noTask: TaskOf = () => undefined

/** The request handler methods of each SDK, the operation each executes and where its argument names the task. */
const V1_METHODS: Readonly<Record<string, readonly [string, TaskOf]>> = {
  sendMessage: ['a2a.message.send', messageTask],
  sendMessageStream: ['a2a.message.stream', messageTask],
  getTask: ['a2a.tasks.get', idTask],
  listTasks: ['a2a.tasks.list', noTask],
  cancelTask: ['a2a.tasks.cancel', idTask],
  resubscribe: ['a2a.tasks.subscribe', idTask],
  createTaskPushNotificationConfig: ['a2a.push_config.set', taskIdTask],
  getTaskPushNotificationConfig: ['a2a.push_config.get', taskIdTask],
  listTaskPushNotificationConfigs: ['a2a.push_config.list', taskIdTask],
  deleteTaskPushNotificationConfig: ['a2a.push_config.delete', taskIdTask],
  getAuthenticatedExtendedAgentCard: ['a2a.card.get_extended', noTask],
}
const V03_METHODS: Readonly<Record<string, readonly [string, TaskOf]>> = {
  sendMessage: ['a2a.message.send', messageTask],
  sendMessageStream: ['a2a.message.stream', messageTask],
  getTask: ['a2a.tasks.get', idTask],
  cancelTask: ['a2a.tasks.cancel', idTask],
  resubscribe: ['a2a.tasks.subscribe', idTask],
  setTaskPushNotificationConfig: ['a2a.push_config.set', taskIdTask],
  getTaskPushNotificationConfig: ['a2a.push_config.get', idTask],
  listTaskPushNotificationConfigs: ['a2a.push_config.list', idTask],
  deleteTaskPushNotificationConfig: ['a2a.push_config.delete', idTask],
  getAuthenticatedExtendedAgentCard: ['a2a.card.get_extended', noTask],
}

/** Replaces each of the handler's methods by one that first records what it is asked to execute. */
function record(handler: object, methods: Readonly<Record<string, readonly [string, TaskOf]>>, executed: Executed[]): void {
  const target = handler as Record<string, (...args: unknown[]) => unknown>
  for (const [name, [operation, taskOf]] of Object.entries(methods)) {
    const original = target[name]!.bind(handler)
    target[name] = (...args: unknown[]) => {
      const task = taskOf(args[0] as Record<string, unknown> | undefined)
      executed.push({ operation, taskId: typeof task === 'string' && task !== '' ? task : undefined })
      return original(...args)
    }
  }
}

class V1Executor implements AgentExecutor {
  async execute(context: RequestContext, bus: ExecutionEventBus): Promise<void> {
    const { taskId, contextId, userMessage, task } = context
    if (task === undefined) {
      bus.publish(AgentEvent.task({ id: taskId, contextId, status: { state: TaskState.TASK_STATE_SUBMITTED }, artifacts: [], history: [userMessage], metadata: {} } as never))
    }
    bus.publish(AgentEvent.statusUpdate({ taskId, contextId, status: { state: TaskState.TASK_STATE_COMPLETED }, metadata: {} } as never))
    bus.finished()
  }

  async cancelTask(): Promise<void> {}
}

class V03Executor {
  async execute(context: { taskId: string; contextId: string; userMessage: unknown; task?: unknown }, bus: { publish(event: unknown): void; finished(): void }): Promise<void> {
    const { taskId, contextId, userMessage, task } = context
    if (task === undefined) bus.publish({ kind: 'task', id: taskId, contextId, status: { state: 'submitted' }, history: [userMessage] })
    bus.publish({ kind: 'status-update', taskId, contextId, status: { state: 'completed' }, final: true })
    bus.finished()
  }

  async cancelTask(): Promise<void> {}
}

/** The agent's own prefixes: each is fronted by a case-sensitive and by a case-insensitive gateway route. */
const MOUNTS = ['/agent', '/ci/agent'] as const

function v1Card(base: string): AgentCard {
  const supportedInterfaces = duplicateInterfacesForLegacy([
    { url: `${base}/agent`, protocolBinding: 'JSONRPC', tenant: '', protocolVersion: '1.0' },
    { url: `${base}/agent/rest`, protocolBinding: 'HTTP+JSON', tenant: '', protocolVersion: '1.0' },
  ], ['JSONRPC', 'HTTP+JSON'])
  return {
    name: 'oracle', description: 'records', version: '1.0.0', supportedInterfaces,
    capabilities: { streaming: true, pushNotifications: true, extendedAgentCard: true, extensions: [] },
    securitySchemes: {}, securityRequirements: [], defaultInputModes: ['text/plain'], defaultOutputModes: ['text/plain'], skills: [], signatures: [],
  } as unknown as AgentCard
}

function v03Card(base: string): Record<string, unknown> {
  return {
    name: 'oracle', description: 'records', version: '1.0.0', protocolVersion: '0.3.0', url: `${base}/agent`, preferredTransport: 'JSONRPC',
    additionalInterfaces: [{ url: `${base}/agent/rest`, transport: 'HTTP+JSON' }],
    capabilities: { streaming: true, pushNotifications: true }, supportsAuthenticatedExtendedCard: true,
    defaultInputModes: ['text/plain'], defaultOutputModes: ['text/plain'], skills: [],
  }
}

async function listen(t: Test, app: ReturnType<typeof express>): Promise<string> {
  const server = app.listen(0, '127.0.0.1') as Server
  await new Promise<void>((resolve) => server.once('listening', resolve))
  t.teardown(() => {
    server.closeAllConnections()
    server.close()
  })
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

interface Oracle {
  readonly gateway: ProtocolGateway
  readonly executed: Executed[]
  /** Tasks that exist at the agent. */
  readonly tasks: readonly string[]
}

const userBuilder = async () => ({ isAuthenticated: true, userName: 'caller' })

async function v1Oracle(t: Test): Promise<Oracle> {
  const executed: Executed[] = []
  const card = v1Card('http://agent.invalid')
  const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), new V1Executor(), undefined, undefined, undefined, { ...card, name: 'oracle-extended' } as AgentCard)
  const app = express()
  const legacyCompat = { enabled: true }
  for (const mount of MOUNTS) {
    app.use(`${mount}/.well-known/agent-card.json`, agentCardHandler({ agentCardProvider: handler, legacyCompat }))
    app.use(`${mount}/rest`, restHandler({ requestHandler: handler, userBuilder, legacyCompat } as never))
    app.use(mount, jsonRpcHandler({ requestHandler: handler, userBuilder, legacyCompat } as never))
  }
  const url = await listen(t, app)
  const tasks: string[] = []
  for (let i = 0; i < 2; i++) {
    const answer = await httpRequest(`${url}/agent/rest/message:send`, {
      method: 'POST', headers: { 'content-type': 'application/json', 'a2a-version': '1.0' },
      body: JSON.stringify({ message: { role: 'ROLE_USER', messageId: randomUUID(), parts: [{ text: 'seed' }] } }),
    })
    tasks.push(((await answer.body.json()) as { task: { id: string } }).task.id)
  }
  record(handler, V1_METHODS, executed)
  return { gateway: await gatewayFor(t, url), executed, tasks }
}

async function v03Oracle(t: Test): Promise<Oracle> {
  const executed: Executed[] = []
  const card = v03Card('http://agent.invalid')
  const handler = new V03Server.DefaultRequestHandler(card as never, new V03Server.InMemoryTaskStore(), new V03Executor() as never, undefined, undefined, undefined, { ...card, name: 'oracle-extended' } as never)
  const app = express()
  for (const mount of MOUNTS) {
    app.use(`${mount}/rest`, V03Express.restHandler({ requestHandler: handler, userBuilder: userBuilder as never }))
    new V03Express.A2AExpressApp(handler, userBuilder as never).setupRoutes(app as never, mount)
  }
  const url = await listen(t, app)
  const tasks: string[] = []
  for (let i = 0; i < 2; i++) {
    const answer = await httpRequest(`${url}/agent`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'message/send', params: { message: { kind: 'message', role: 'user', messageId: randomUUID(), parts: [{ kind: 'text', text: 'seed' }] } } }),
    })
    tasks.push(((await answer.body.json()) as { result: { id: string } }).result.id)
  }
  record(handler, V03_METHODS, executed)
  return { gateway: await gatewayFor(t, url), executed, tasks }
}

function gatewayFor(t: Test, upstreamUrl: string): Promise<ProtocolGateway> {
  return startProtocolGateway(t, {
    upstreamUrl, authorityKey: key.publicKey, policy: POLICY, env: { SERVICE_ENFORCEMENT_MODE: 'EM-GUARD', SERVICE_MCP_MAX_BODY_BYTES: '65536' }, ownPublicUrl: true,
    routes: (pool) => {
      const exact = { upstream: pool, mode: null, protocol: 'a2a' } as const
      const anyCase = { ...exact, caseInsensitive: true } as const
      return [
        { prefix: '/agent', value: exact }, { prefix: '/agent/rest', value: exact },
        { prefix: '/ci/agent', value: anyCase, caseInsensitive: true }, { prefix: '/ci/agent/rest', value: anyCase, caseInsensitive: true },
      ] as never
    },
  })
}

// ---- what callers send ----

/** [HTTP method, REST path, operation]; `{id}` the task, `{cid}` a configuration. */
const REST_TEMPLATES: readonly (readonly [string, string])[] = [
  ['POST', '/message:send'], ['POST', '/message:stream'], ['GET', '/tasks/{id}'], ['GET', '/tasks'], ['POST', '/tasks/{id}:cancel'],
  ['GET', '/tasks/{id}:subscribe'], ['POST', '/tasks/{id}:subscribe'], ['POST', '/tasks/{id}/pushNotificationConfigs'],
  ['GET', '/tasks/{id}/pushNotificationConfigs'], ['GET', '/tasks/{id}/pushNotificationConfigs/{cid}'], ['DELETE', '/tasks/{id}/pushNotificationConfigs/{cid}'],
  ['GET', '/extendedAgentCard'], ['GET', '/card'], ['GET', '/nothing'], ['PUT', '/tasks/{id}'], ['GET', '/.well-known/agent-card.json'],
]

const RPC_METHODS = [
  'message/send', 'message/stream', 'tasks/get', 'tasks/cancel', 'tasks/resubscribe', 'tasks/pushNotificationConfig/set', 'tasks/pushNotificationConfig/get',
  'tasks/pushNotificationConfig/list', 'tasks/pushNotificationConfig/delete', 'agent/getAuthenticatedExtendedCard',
  'SendMessage', 'SendStreamingMessage', 'GetTask', 'ListTasks', 'CancelTask', 'SubscribeToTask', 'CreateTaskPushNotificationConfig',
  'GetTaskPushNotificationConfig', 'ListTaskPushNotificationConfigs', 'DeleteTaskPushNotificationConfig', 'GetExtendedAgentCard', 'tasks/frobnicate',
] as const

interface Spelling {
  /** One mask bit per character: upper case. */
  readonly caseMask: readonly boolean[]
  readonly trailingSlash: boolean
  readonly prefix: string
  /** How `:` is sent: as is, `%3A` or `%3a`. */
  readonly colon: string
  /** Percent-encode the first letter of a literal segment (the gateway decodes unreserved escapes). */
  readonly encodeLetter: boolean
  readonly dotSegment: '' | '/.' | '/x/..'
  readonly doubleSlash: boolean
}

/** The 0.3 agent serves REST under `/v1` only, so its callers mostly spell that. */
const spellingFor = (dialect: '0.3' | '1.0'): fc.Arbitrary<Spelling> => fc.record({
  caseMask: fc.array(fc.boolean(), { minLength: 1, maxLength: 24 }),
  trailingSlash: fc.boolean(),
  prefix: dialect === '0.3' ? fc.constantFrom('/v1', '/v1', '/V1', '', '/tasks') : fc.constantFrom('', '', '/v1', '/V1', '/acme', '/tasks', '/message:send'),
  colon: fc.constantFrom(':', ':', '%3A', '%3a'),
  encodeLetter: fc.boolean(),
  dotSegment: fc.constantFrom('', '', '/.', '/x/..'),
  doubleSlash: fc.boolean(),
})

function spell(template: string, s: Spelling, taskId: string, configId: string): string {
  const segments = (s.prefix + template).split('/').slice(1)
  let bit = 0
  const spelt = segments.map((segment, index) => {
    if (segment === '{id}' || segment.startsWith('{id}')) {
      return encodeURIComponent(taskId).replace(/%3A/g, ':') + segment.slice(4).replace(/:/g, s.colon)
    }
    if (segment === '{cid}') return encodeURIComponent(configId)
    let text = [...segment].map((c) => (s.caseMask[bit++ % s.caseMask.length] ? c.toUpperCase() : c.toLowerCase())).join('')
    text = text.replace(/:/g, s.colon)
    if (s.encodeLetter && index === 0 && /^[a-z]/i.test(text)) text = `%${text.charCodeAt(0).toString(16)}${text.slice(1)}`
    return text
  })
  const joined = spelt.length === 0 ? '' : '/' + spelt.join(s.doubleSlash ? '//' : '/')
  return s.dotSegment + joined + (s.trailingSlash ? '/' : '')
}

/** The ids a body may name, anywhere: real tasks, strangers, and ids that look like route literals. */
const idPool = (tasks: readonly string[]) => fc.constantFrom(...tasks, ...tasks, 'no-such-task', 'extendedAgentCard', 'tasks', 'a b', 'a:b', 'Mixed-Case')

type IdMember = 'id' | 'taskId' | 'task_id' | 'contextId' | 'context_id' | 'name' | 'parent'
type MessageIdMember = 'taskId' | 'task_id' | 'contextId'

interface BodyPlan {
  readonly idMembers: Partial<Record<IdMember | 'pushNotificationConfigId', string>>
  readonly messageIds: Partial<Record<MessageIdMember, string>>
  readonly messageUnder: 'message' | 'request' | 'none'
  readonly envelopeToo: boolean
  readonly extraTopLevel: boolean
}

const ID_MEMBERS: readonly IdMember[] = ['id', 'taskId', 'task_id', 'contextId', 'context_id', 'name', 'parent']
const MESSAGE_ID_MEMBERS: readonly MessageIdMember[] = ['taskId', 'task_id', 'contextId']

/** A few id members, as often naming one id (the agreeing case) as several (decoys). */
const bodyPlan = (tasks: readonly string[]): fc.Arbitrary<BodyPlan> => {
  const id = idPool(tasks)
  const rare = fc.integer({ min: 0, max: 5 }).map((n) => n === 0)
  return fc.record({
    members: fc.subarray([...ID_MEMBERS], { maxLength: 2 }), inMessage: fc.subarray([...MESSAGE_ID_MEMBERS], { maxLength: 2 }),
    ids: fc.array(id, { minLength: 4, maxLength: 4 }), agree: fc.boolean(), configId: fc.boolean(),
    messageUnder: fc.constantFrom('message', 'message', 'message', 'request', 'none'), envelopeToo: rare, extraTopLevel: rare,
  }).map(({ members, inMessage, ids, agree, configId, messageUnder, envelopeToo, extraTopLevel }) => {
    const value = (i: number, member: string) => {
      const task = agree ? ids[0]! : ids[i % ids.length]!
      if (member === 'name') return `tasks/${task}/pushNotificationConfigs/cfg`
      return member === 'parent' ? `tasks/${task}` : task
    }
    const idMembers: BodyPlan['idMembers'] = Object.fromEntries(members.map((member, i) => [member, value(i, member)]))
    if (configId) (idMembers as Record<string, string>).pushNotificationConfigId = 'cfg'
    const messageIds: BodyPlan['messageIds'] = Object.fromEntries(inMessage.map((member, i) => [member, value(i + 2, member)]))
    return { idMembers, messageIds, messageUnder, envelopeToo, extraTopLevel }
  })
}

function messageOf(version: '0.3' | '1.0', ids: BodyPlan['messageIds']): Record<string, unknown> {
  const base = version === '0.3'
    ? { kind: 'message', role: 'user', messageId: randomUUID(), parts: [{ kind: 'text', text: 'hi' }] }
    : { role: 'ROLE_USER', messageId: randomUUID(), parts: [{ text: 'hi' }] }
  return { ...base, ...ids }
}

function restBody(plan: BodyPlan, version: '0.3' | '1.0'): Record<string, unknown> {
  const body: Record<string, unknown> = { ...plan.idMembers }
  if (plan.messageUnder !== 'none') body[plan.messageUnder] = messageOf(version, plan.messageIds)
  body.pushNotificationConfig = { url: 'http://127.0.0.1:9/hook' }
  if (plan.envelopeToo) Object.assign(body, { jsonrpc: '2.0', id: 1, method: 'GetTask', params: { id: 'x' } })
  return body
}

function rpcBody(method: string, plan: BodyPlan): Record<string, unknown> {
  const version = method.includes('/') ? '0.3' : '1.0'
  const params: Record<string, unknown> = { ...plan.idMembers, pushNotificationConfig: { url: 'http://127.0.0.1:9/hook' }, url: 'http://127.0.0.1:9/hook' }
  if (plan.messageUnder !== 'none') params[plan.messageUnder] = messageOf(version, plan.messageIds)
  const body: Record<string, unknown> = { jsonrpc: '2.0', id: 1, method, params }
  if (plan.extraTopLevel) body.message = messageOf(version, {})
  return body
}

interface Sent {
  readonly httpMethod: string
  readonly path: string
  readonly body: Record<string, unknown> | undefined
  readonly version: string | undefined
  readonly level: TrustLevel
}

const request = (tasks: readonly string[], dialect: '0.3' | '1.0'): fc.Arbitrary<Sent> => {
  const mount = fc.constantFrom(...MOUNTS)
  const version = dialect === '0.3' ? fc.constantFrom(undefined, '0.3', '1.0', undefined) : fc.constantFrom(undefined, '0.3', '1.0')
  const spelling = spellingFor(dialect)
  const level = fc.constantFrom(REG, OV)
  // The REST interface's own segment in another case is still that interface to the agent (Express ignores case).
  const restSegment = fc.constantFrom('/rest', '/rest', '/rest', '/REST', '/Rest')
  const rest = fc.record({ template: fc.constantFrom(...REST_TEMPLATES), spelling, task: idPool(tasks), plan: bodyPlan(tasks), withBody: fc.boolean(), head: fc.boolean(), mount, restSegment, version, level })
    .map(({ template: [httpMethod, template], spelling: s, task, plan, withBody, head, mount: m, restSegment: r, version: v, level: l }): Sent => ({
      // HEAD runs the GET route on Express and is decided as GET.
      httpMethod: httpMethod === 'GET' && head ? 'HEAD' : httpMethod,
      path: `${m}${r}${spell(template, s, task, 'cfg')}`,
      body: withBody && httpMethod !== 'GET' && httpMethod !== 'HEAD' ? restBody(plan, v === '1.0' ? '1.0' : '0.3') : undefined,
      version: v,
      level: l,
    }))
  const methods = dialect === '0.3' ? RPC_METHODS.filter((method) => method.includes('/')) : RPC_METHODS
  const rpc = fc.record({ method: fc.constantFrom(...methods), plan: bodyPlan(tasks), slash: fc.boolean(), mount, version, level })
    .map(({ method, plan, slash, mount: m, version: v, level: l }): Sent => ({ httpMethod: 'POST', path: m + (slash ? '/' : ''), body: rpcBody(method, plan), version: v, level: l }))
  return fc.oneof(rest, rpc)
}

interface Outcome {
  readonly status: number
  readonly gatewayMade: boolean
  readonly line: Record<string, unknown> | undefined
  readonly executed: readonly Executed[]
}

async function send(oracle: Oracle, sent: Sent): Promise<Outcome> {
  const { gateway, executed } = oracle
  const linesBefore = requestLines(gateway).length
  const executedBefore = executed.length
  const headers: Record<string, string> = { authorization: `Bearer ${badge(sent.level)}` }
  if (sent.version !== undefined) headers['a2a-version'] = sent.version
  if (sent.body !== undefined) headers['content-type'] = 'application/json'
  let status = 0
  let gatewayMade = false
  try {
    const answer = await httpRequest(`${gateway.url}${sent.path}`, {
      method: sent.httpMethod, headers, body: sent.body === undefined ? undefined : JSON.stringify(sent.body), signal: AbortSignal.timeout(5000),
    })
    status = answer.statusCode
    gatewayMade = answer.headers['x-service-gateway'] === 'error'
    await answer.body.text()
  } catch (error) {
    if (!(error instanceof Error) || error.name !== 'TimeoutError') throw error
  }
  // The request log line is written when the answer is finished, a moment after the client has it.
  let lines = requestLines(gateway)
  for (let i = 0; i < 50 && lines.length === linesBefore; i++) {
    await new Promise((resolve) => setTimeout(resolve, 10))
    lines = requestLines(gateway)
  }
  return { status, gatewayMade, line: lines.at(-1), executed: executed.slice(executedBefore) }
}

const requestLines = (gateway: ProtocolGateway) => gateway.logLines().filter((entry) => entry.msg === 'gateway request')

/** Why the outcome breaks the rule, or null: refused and nothing ran, or what ran is what was decided. */
function broken(outcome: Outcome): string | null {
  const { line, executed } = outcome
  if (outcome.gatewayMade) {
    if (outcome.status >= 500) return `the gateway answered ${outcome.status}`
    return executed.length === 0 ? null : `refused (${outcome.status}) yet the agent executed ${JSON.stringify(executed)}`
  }
  if (executed.length === 0) return null
  if (line === undefined) return 'no request log line'
  if (line['service.policy.decision'] !== 'ALLOW') return `the agent executed ${JSON.stringify(executed)} on a ${String(line['service.policy.decision'])}`
  if (executed.length > 1) return `the agent executed ${JSON.stringify(executed)} for one request`
  const ran = executed[0]!
  if (ran.operation !== line['a2a.operation']) return `decided ${String(line['a2a.operation'])}, the agent executed ${ran.operation}`
  if (ran.taskId !== line['a2a.task.id']) return `decided on task ${JSON.stringify(line['a2a.task.id'])}, the agent acted on ${JSON.stringify(ran.taskId)}`
  return null
}

async function differential(t: Test, oracle: Oracle, dialect: '0.3' | '1.0', runs: number): Promise<void> {
  // The SDKs log every error they answer (unknown tasks, malformed params) to the console.
  const { error, warn } = console
  console.error = () => {}
  console.warn = () => {}
  t.teardown(() => {
    console.error = error
    console.warn = warn
  })
  let executedAny = 0
  let refusedAny = 0
  let sentAny = 0
  await fc.assert(fc.asyncProperty(request(oracle.tasks, dialect), async (sent) => {
    sentAny++
    const outcome = await send(oracle, sent)
    if (outcome.executed.length > 0) executedAny++
    if (outcome.gatewayMade) refusedAny++
    const problem = broken(outcome)
    if (problem !== null) throw new Error(`${sent.httpMethod} ${sent.path} ${JSON.stringify(sent.body)?.slice(0, 400)} (A2A-Version ${String(sent.version)}): ${problem}`)
  }), propertyRuns(runs))
  // A property that never reaches the agent, or never sees a refusal, proves nothing.
  t.ok(executedAny > sentAny / 10, `the agent executed something for ${executedAny} of ${sentAny} requests`)
  t.ok(refusedAny > sentAny / 10, `the gateway refused ${refusedAny} of ${sentAny} requests`)
}

t.test('the 1.x agent (JSON-RPC and REST, 0.3 compatibility): what it executes is what the gateway decided', async (t) => {
  const oracle = await v1Oracle(t)
  await differential(t, oracle, '1.0', 200)
})

t.test('the 0.3 agent: what it executes is what the gateway decided', async (t) => {
  const oracle = await v03Oracle(t)
  await differential(t, oracle, '0.3', 120)
})
