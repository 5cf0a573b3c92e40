// The A2A operations a request asks for, whatever its protocol version (0.3 or 1.0) and binding (JSON-RPC,
// REST or the agent card), as the PDP decides on them (docs/a2a.md, "Operations"). Pure: no I/O, never throws.
import type { JsonObject, JsonValue } from './strict-json.js'

export const A2A_OPERATIONS = [
  'a2a.message.send', 'a2a.message.stream', 'a2a.tasks.get', 'a2a.tasks.list', 'a2a.tasks.cancel', 'a2a.tasks.subscribe',
  'a2a.push_config.set', 'a2a.push_config.get', 'a2a.push_config.list', 'a2a.push_config.delete',
  'a2a.card.get', 'a2a.card.get_extended', 'a2a.method.other',
] as const

export type A2aOperation = (typeof A2A_OPERATIONS)[number]
export type A2aVersion = '0.3' | '1.0'
export type A2aBinding = 'jsonrpc' | 'rest' | 'card'

/** What one request is, in the PDP's words. */
export interface A2aCall {
  readonly operation: A2aOperation
  readonly version: A2aVersion
  readonly binding: A2aBinding
  /** The method: a JSON-RPC method as sent; for REST the JSON-RPC name of the same operation in `version`. */
  readonly method: string
  readonly taskId?: string
  readonly contextId?: string
  /** `message.metadata.skill`: the gateway's convention, since A2A has no skill field. */
  readonly skill?: string
  /** The answer is an event stream. */
  readonly streaming: boolean
  readonly extendedCard: boolean
  /** Why the request cannot be decided as it stands (an id or skill of the wrong type or length); refused as invalid params. */
  readonly problem?: string
}

export interface A2aRequest {
  /** HEAD is classified as GET. */
  readonly httpMethod: string
  /** The path relative to the route prefix, starting with `/`, without the query. */
  readonly path: string
  /** The `A2A-Version` request header. */
  readonly versionHeader: string | undefined
  /** The parsed JSON-RPC request of a JSON-RPC POST, or a REST body; undefined without a body. */
  readonly body: JsonValue | undefined
}

/** The longest task or context id the gateway decides on; a longer one is refused. */
export const MAX_A2A_ID_CHARS = 256
/** The longest skill name the convention accepts. */
export const MAX_A2A_SKILL_CHARS = 128

/** The operation's JSON-RPC method in 0.3 and in 1.0 (null: the version has none). */
const METHOD_NAMES: Readonly<Record<A2aOperation, readonly [string | null, string | null]>> = {
  'a2a.message.send': ['message/send', 'SendMessage'],
  'a2a.message.stream': ['message/stream', 'SendStreamingMessage'],
  'a2a.tasks.get': ['tasks/get', 'GetTask'],
  'a2a.tasks.list': [null, 'ListTasks'],
  'a2a.tasks.cancel': ['tasks/cancel', 'CancelTask'],
  'a2a.tasks.subscribe': ['tasks/resubscribe', 'SubscribeToTask'],
  'a2a.push_config.set': ['tasks/pushNotificationConfig/set', 'CreateTaskPushNotificationConfig'],
  'a2a.push_config.get': ['tasks/pushNotificationConfig/get', 'GetTaskPushNotificationConfig'],
  'a2a.push_config.list': ['tasks/pushNotificationConfig/list', 'ListTaskPushNotificationConfigs'],
  'a2a.push_config.delete': ['tasks/pushNotificationConfig/delete', 'DeleteTaskPushNotificationConfig'],
  'a2a.card.get': [null, null],
  'a2a.card.get_extended': ['agent/getAuthenticatedExtendedCard', 'GetExtendedAgentCard'],
  'a2a.method.other': [null, null],
}

const JSON_RPC_METHODS: ReadonlyMap<string, readonly [A2aOperation, A2aVersion]> = (() => {
  const methods = new Map<string, readonly [A2aOperation, A2aVersion]>()
  for (const operation of A2A_OPERATIONS) {
    const [v03, v10] = METHOD_NAMES[operation]
    if (v03 !== null) methods.set(v03, [operation, '0.3'])
    if (v10 !== null) methods.set(v10, [operation, '1.0'])
  }
  return methods
})()

/** One REST route: the HTTP method, the path after any `/v1` or tenant prefix, and whether `{id}` is the task. */
interface RestRoute {
  readonly methods: readonly string[]
  readonly pattern: RegExp
  readonly operation: A2aOperation
}

const ID = '([^/]+?)'
const REST_ROUTES: readonly RestRoute[] = [
  { methods: ['POST'], pattern: /^\/message:send$/, operation: 'a2a.message.send' },
  { methods: ['POST'], pattern: /^\/message:stream$/, operation: 'a2a.message.stream' },
  { methods: ['POST'], pattern: new RegExp(`^/tasks/${ID}:cancel$`), operation: 'a2a.tasks.cancel' },
  { methods: ['POST', 'GET'], pattern: new RegExp(`^/tasks/${ID}:subscribe$`), operation: 'a2a.tasks.subscribe' },
  { methods: ['POST'], pattern: new RegExp(`^/tasks/${ID}/pushNotificationConfigs$`), operation: 'a2a.push_config.set' },
  { methods: ['GET'], pattern: new RegExp(`^/tasks/${ID}/pushNotificationConfigs$`), operation: 'a2a.push_config.list' },
  { methods: ['GET'], pattern: new RegExp(`^/tasks/${ID}/pushNotificationConfigs/[^/]+$`), operation: 'a2a.push_config.get' },
  { methods: ['DELETE'], pattern: new RegExp(`^/tasks/${ID}/pushNotificationConfigs/[^/]+$`), operation: 'a2a.push_config.delete' },
  { methods: ['GET'], pattern: new RegExp(`^/tasks/${ID}$`), operation: 'a2a.tasks.get' },
  { methods: ['GET'], pattern: /^\/tasks$/, operation: 'a2a.tasks.list' },
  { methods: ['GET'], pattern: /^\/card$/, operation: 'a2a.card.get_extended' },
  { methods: ['GET'], pattern: /^\/extendedAgentCard$/, operation: 'a2a.card.get_extended' },
]

const CARD_PATHS: ReadonlySet<string> = new Set(['/.well-known/agent-card.json', '/.well-known/agent.json'])
const CARD_METHOD = '.well-known/agent-card.json'
const OTHER_METHOD = 'other'

interface RestMatch {
  readonly operation: A2aOperation
  readonly taskId: string | undefined
}

function matchRest(method: string, path: string): RestMatch | null {
  for (const route of REST_ROUTES) {
    if (!route.methods.includes(method)) continue
    const found = route.pattern.exec(path)
    if (found !== null) return { operation: route.operation, taskId: found[1] }
  }
  return null
}

/** The REST route of a request: as is, else after one leading segment (0.3's `/v1`, or a 1.0 tenant). */
function restRoute(method: string, path: string): RestMatch | null {
  const direct = matchRest(method, path)
  if (direct !== null) return direct
  const second = path.indexOf('/', 1)
  return second > 1 ? matchRest(method, path.slice(second)) : null
}

/** Which binding a request uses, known from its method and path alone (so the body is read the right way). */
export function a2aBindingOf(httpMethod: string, path: string): A2aBinding {
  const method = httpMethod === 'HEAD' ? 'GET' : httpMethod
  if (method === 'GET' && CARD_PATHS.has(path)) return 'card'
  if (method === 'POST' && restRoute(method, path) === null) return 'jsonrpc'
  return 'rest'
}

/** `A2A-Version: 1` or `1.x` is 1.0; absent or anything else is 0.3 (the spec's default). */
export function headerVersion(header: string | undefined): A2aVersion {
  return header !== undefined && /^[ \t]*1(?:\.\d{1,4})?[ \t]*$/.test(header) ? '1.0' : '0.3'
}

function isObject(value: JsonValue | undefined): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

const hasOwn = Object.prototype.hasOwnProperty
const member = (object: JsonValue | undefined, name: string): JsonValue | undefined =>
  isObject(object) && hasOwn.call(object, name) ? object[name] : undefined

/** Collects the ids and skill, each checked; the first problem wins. */
class Found {
  taskId: string | undefined = undefined
  contextId: string | undefined = undefined
  skill: string | undefined = undefined
  problem: string | undefined = undefined

  take(field: 'taskId' | 'contextId', where: string, value: JsonValue | undefined): void {
    if (value === undefined || this[field] !== undefined) return
    if (typeof value !== 'string' || value.length > MAX_A2A_ID_CHARS) {
      this.problem ??= `${where} must be a string of at most ${MAX_A2A_ID_CHARS} characters`
      return
    }
    if (value !== '') this[field] = value
  }
}

/** The ids a request's params (a JSON-RPC `params` or a REST body) name, and the skill of its message. */
function readParams(operation: A2aOperation, params: JsonValue | undefined, found: Found): void {
  const message = member(params, 'message')
  // A push config's own `id` (1.0) is not the task's; 0.3 named the task `id` there.
  if (operation.startsWith('a2a.push_config.')) {
    found.take('taskId', 'params.taskId', member(params, 'taskId'))
    found.take('taskId', 'params.id', member(params, 'id'))
  } else {
    found.take('taskId', 'params.id', member(params, 'id'))
    found.take('taskId', 'params.taskId', member(params, 'taskId'))
  }
  found.take('taskId', 'params.message.taskId', member(message, 'taskId'))
  found.take('contextId', 'params.message.contextId', member(message, 'contextId'))
  found.take('contextId', 'params.contextId', member(params, 'contextId'))
  const skill = member(member(message, 'metadata'), 'skill')
  if (skill === undefined) return
  if (typeof skill !== 'string' || skill === '' || skill.length > MAX_A2A_SKILL_CHARS) {
    found.problem ??= `params.message.metadata.skill must be a non-empty string of at most ${MAX_A2A_SKILL_CHARS} characters`
  } else {
    found.skill = skill
  }
}

function call(operation: A2aOperation, version: A2aVersion, binding: A2aBinding, method: string, found: Found | null): A2aCall {
  const result: { -readonly [K in keyof A2aCall]: A2aCall[K] } = {
    operation, version, binding, method,
    streaming: operation === 'a2a.message.stream' || operation === 'a2a.tasks.subscribe',
    extendedCard: operation === 'a2a.card.get_extended',
  }
  if (found !== null) {
    if (found.taskId !== undefined) result.taskId = found.taskId
    if (found.contextId !== undefined) result.contextId = found.contextId
    if (found.skill !== undefined) result.skill = found.skill
    if (found.problem !== undefined) result.problem = found.problem
  }
  return result
}

/** The JSON-RPC name of an operation in a version, for REST calls' `a2a.method.name`. */
function methodNameOf(operation: A2aOperation, version: A2aVersion): string {
  const names = METHOD_NAMES[operation]
  return names[version === '0.3' ? 0 : 1] ?? names[1] ?? OTHER_METHOD
}

export function classifyA2a(request: A2aRequest): A2aCall {
  const method = request.httpMethod === 'HEAD' ? 'GET' : request.httpMethod
  const path = request.path
  const version = headerVersion(request.versionHeader)
  const binding = a2aBindingOf(method, path)
  if (binding === 'card') return call('a2a.card.get', version, 'card', CARD_METHOD, null)
  const found = new Found()
  if (binding === 'jsonrpc') {
    const rpcMethod = member(request.body, 'method')
    if (typeof rpcMethod !== 'string') return call('a2a.method.other', version, binding, OTHER_METHOD, null)
    const known = JSON_RPC_METHODS.get(rpcMethod)
    // The method's own dialect decides the version when the header says another one.
    const [operation, methodVersion] = known ?? ['a2a.method.other', version]
    readParams(operation, member(request.body, 'params'), found)
    return call(operation, methodVersion, binding, rpcMethod, found)
  }
  const route = restRoute(method, path)
  if (route === null) return call('a2a.method.other', version, binding, OTHER_METHOD, null)
  found.take('taskId', 'the task id of the path', route.taskId)
  readParams(route.operation, request.body, found)
  return call(route.operation, version, binding, methodNameOf(route.operation, version), found)
}
