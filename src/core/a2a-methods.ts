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

/** One REST route of the SDKs' servers, in the order they try them; `{id}` is the task. */
interface RestRoute {
  readonly method: string
  readonly pattern: RegExp
  readonly operation: A2aOperation
}

/**
 * The REST routes as the SDKs' Express servers declare them, in their order: the 0.3 routes under `/v1`
 * (the 1.x server tries them first for a 0.3 caller, then falls through to its 1.0 routes; for a 1.0 caller
 * the 1.0 routes alone name the same operation or none), then each 1.0 route bare and under one tenant
 * segment. Express matches case-insensitively and ignores one trailing slash, and the first route that
 * matches wins (`/tasks/extendedAgentCard` is the extended card of tenant `tasks`, not a task).
 */
const REST_ROUTES: readonly RestRoute[] = (() => {
  const routes: RestRoute[] = []
  const add = (method: string, literal: string, operation: A2aOperation, tenant: boolean): void => {
    const source = literal.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace('{id}', '([^/]+)').replace('{cid}', '[^/]+')
    routes.push({ method, pattern: new RegExp(`^${tenant ? '/[^/]+' : ''}${source}/?$`, 'i'), operation })
  }
  const legacy: readonly (readonly [string, string, A2aOperation])[] = [
    ['GET', '/v1/card', 'a2a.card.get_extended'],
    ['POST', '/v1/message:send', 'a2a.message.send'],
    ['POST', '/v1/message:stream', 'a2a.message.stream'],
    ['POST', '/v1/tasks/{id}:cancel', 'a2a.tasks.cancel'],
    ['GET', '/v1/tasks/{id}:subscribe', 'a2a.tasks.subscribe'],
    ['POST', '/v1/tasks/{id}:subscribe', 'a2a.tasks.subscribe'],
    ['GET', '/v1/tasks/{id}', 'a2a.tasks.get'],
    ['POST', '/v1/tasks/{id}/pushNotificationConfigs', 'a2a.push_config.set'],
    ['GET', '/v1/tasks/{id}/pushNotificationConfigs', 'a2a.push_config.list'],
    ['GET', '/v1/tasks/{id}/pushNotificationConfigs/{cid}', 'a2a.push_config.get'],
    ['DELETE', '/v1/tasks/{id}/pushNotificationConfigs/{cid}', 'a2a.push_config.delete'],
  ]
  for (const [method, literal, operation] of legacy) add(method, literal, operation, false)
  const current: readonly (readonly [string, string, A2aOperation])[] = [
    ['GET', '/extendedAgentCard', 'a2a.card.get_extended'],
    ['POST', '/message:send', 'a2a.message.send'],
    ['POST', '/message:stream', 'a2a.message.stream'],
    ['GET', '/tasks/{id}:subscribe', 'a2a.tasks.subscribe'],
    ['POST', '/tasks/{id}:subscribe', 'a2a.tasks.subscribe'],
    ['POST', '/tasks/{id}:cancel', 'a2a.tasks.cancel'],
    ['GET', '/tasks/{id}', 'a2a.tasks.get'],
    ['GET', '/tasks', 'a2a.tasks.list'],
    ['POST', '/tasks/{id}/pushNotificationConfigs', 'a2a.push_config.set'],
    ['GET', '/tasks/{id}/pushNotificationConfigs', 'a2a.push_config.list'],
    ['GET', '/tasks/{id}/pushNotificationConfigs/{cid}', 'a2a.push_config.get'],
    ['DELETE', '/tasks/{id}/pushNotificationConfigs/{cid}', 'a2a.push_config.delete'],
  ]
  for (const [method, literal, operation] of current) {
    add(method, literal, operation, false)
    add(method, literal, operation, true)
  }
  return routes
})()

const CARD_PATH = /^\/\.well-known\/(agent-card|agent)\.json\/?$/i
const CARD_METHOD = '.well-known/agent-card.json'
const OTHER_METHOD = 'other'
/** `:` percent-encoded: Express matches it as the three characters, servers that decode first as `:`. */
const ENCODED_COLON = /%3a/i

interface RestMatch {
  readonly operation: A2aOperation
  /** The task id as the path spells it (still percent-encoded). */
  readonly rawId: string | undefined
}

function matchRest(method: string, path: string): RestMatch | null {
  for (const route of REST_ROUTES) {
    if (route.method !== method) continue
    const found = route.pattern.exec(path)
    if (found !== null) return { operation: route.operation, rawId: found[1] }
  }
  return null
}

/** A path id decoded as Express decodes a route parameter; null when it is not valid percent-encoded UTF-8. */
function decodeId(raw: string): string | null {
  if (!raw.includes('%')) return raw
  try {
    return decodeURIComponent(raw)
  } catch {
    return null
  }
}

/** What a REST path names, read both as Express reads it and as a server that decodes `%3A` first would. */
interface RestRead {
  readonly match: RestMatch | null
  /** The two readings name different operations or tasks. */
  readonly ambiguous: boolean
}

const NO_ROUTE: RestRead = Object.freeze({ match: null, ambiguous: false })

function readRest(method: string, path: string): RestRead {
  const raw = matchRest(method, path)
  if (!ENCODED_COLON.test(path)) return raw === null ? NO_ROUTE : { match: raw, ambiguous: false }
  const decoded = matchRest(method, path.replace(/%3a/gi, ':'))
  if (raw === null) return decoded === null ? NO_ROUTE : { match: decoded, ambiguous: false }
  const same = decoded !== null && decoded.operation === raw.operation
    && (raw.rawId === undefined ? decoded.rawId === undefined : decoded.rawId !== undefined && decodeId(raw.rawId) === decodeId(decoded.rawId))
  return { match: raw, ambiguous: !same }
}

/** The well-known card path a path spells (case, one trailing slash), in its one spelling; null if none. */
export function a2aCardPath(path: string): string | null {
  const found = CARD_PATH.exec(path)
  if (found === null) return null
  return found[1]!.toLowerCase() === 'agent' ? '/.well-known/agent.json' : '/.well-known/agent-card.json'
}

/** Which binding a request uses, known from its method and path alone (so the body is read the right way). */
export function a2aBindingOf(httpMethod: string, path: string): A2aBinding {
  const method = httpMethod === 'HEAD' ? 'GET' : httpMethod
  if (method === 'GET' && a2aCardPath(path) !== null) return 'card'
  // A path that names a REST route is REST, whatever the body says.
  if (method === 'POST' && readRest(method, path).match === null) return 'jsonrpc'
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

/**
 * Where a call's params name its task and context, per operation and dialect, as the SDKs read them:
 * `acted` in the order the SDK prefers them (the 1.0 proto JSON reader takes `taskId`, else `task_id`),
 * `decoys` members the SDK ignores for this call. `M.` is the message (`message`, or on REST 0.3 proto's `request`),
 * `P.` the params; `N.` a resource name (`tasks/{id}/…`) whose task the 0.3 REST servers act on.
 */
interface IdFields {
  readonly task: readonly string[]
  readonly taskDecoys: readonly string[]
  readonly context: readonly string[]
  readonly contextDecoys: readonly string[]
}

/** The JSON-RPC dialect of a 0.3 method, of a 1.0 method, and a REST body (0.3 and 1.0 proto JSON). */
type Dialect = 'rpc03' | 'rpc10' | 'rest'

const NONE: readonly string[] = Object.freeze([])
const fields = (task: readonly string[], taskDecoys: readonly string[], context: readonly string[] = NONE, contextDecoys: readonly string[] = NONE): IdFields =>
  Object.freeze({ task, taskDecoys, context, contextDecoys })
const NO_FIELDS = fields(NONE, NONE)

function idFields(operation: A2aOperation, dialect: Dialect): IdFields {
  switch (operation) {
    case 'a2a.message.send':
    case 'a2a.message.stream':
      return dialect === 'rpc03'
        ? fields(['M.taskId'], ['M.task_id', 'P.id', 'P.taskId', 'P.task_id'], ['M.contextId'], ['M.context_id', 'P.contextId', 'P.context_id'])
        : fields(['M.taskId', 'M.task_id'], ['P.id', 'P.taskId', 'P.task_id'], ['M.contextId', 'M.context_id'], ['P.contextId', 'P.context_id'])
    case 'a2a.tasks.get':
    case 'a2a.tasks.cancel':
    case 'a2a.tasks.subscribe':
      return dialect === 'rest' ? fields(['path'], ['P.id', 'P.taskId', 'P.task_id']) : fields(['P.id'], ['P.taskId', 'P.task_id'])
    case 'a2a.tasks.list':
      return dialect === 'rpc10' ? fields(NONE, NONE, ['P.contextId', 'P.context_id']) : NO_FIELDS
    case 'a2a.push_config.set':
      if (dialect === 'rest') return fields(['path'], ['P.taskId', 'P.task_id', 'N.name', 'N.parent', 'N.config.name'])
      return dialect === 'rpc03' ? fields(['P.taskId'], ['P.id', 'P.task_id']) : fields(['P.taskId', 'P.task_id'], NONE)
    case 'a2a.push_config.get':
    case 'a2a.push_config.list':
    case 'a2a.push_config.delete':
      // 0.3 names the task `id` here; 1.0 names the configuration `id`.
      if (dialect === 'rest') return fields(['path'], ['P.taskId', 'P.task_id'])
      return dialect === 'rpc03' ? fields(['P.id'], ['P.taskId', 'P.task_id']) : fields(['P.taskId', 'P.task_id'], NONE)
    default:
      return NO_FIELDS
  }
}

/** The task a resource name (`tasks/{id}` or `tasks/{id}/…`) names, as the 0.3 REST servers extract it. */
const TASK_NAME = /^tasks\/([^/]+)(?:\/|$)/

/** The message of a call's params: `message`, or on REST the 0.3 proto JSON's `request` (JSON-RPC reads `message` only). */
function messageOf(params: JsonValue | undefined, dialect: Dialect, found: Found): JsonValue | undefined {
  const message = member(params, 'message')
  if (dialect !== 'rest') return message
  const request = member(params, 'request')
  if (message !== undefined && message !== null && request !== undefined && request !== null) {
    found.problem ??= 'params.message and params.request are two messages'
  }
  return message === undefined || message === null ? request : message
}

/** Collects the ids and skill, each checked; the first problem wins. */
class Found {
  taskId: string | undefined = undefined
  contextId: string | undefined = undefined
  skill: string | undefined = undefined
  problem: string | undefined = undefined

  /** The one id the call acts on; another spelling of it that differs, or a decoy naming another, is a problem. */
  settle(field: 'taskId' | 'contextId', acted: readonly string[], decoys: readonly string[], read: (where: string) => JsonValue | undefined): void {
    let decided: string | undefined
    let decidedAt = ''
    for (const where of acted) {
      const value = this.#checked(where, read(where))
      if (value === undefined) continue
      if (decided === undefined) {
        decided = value
        decidedAt = where
      } else if (value !== decided) {
        this.problem ??= `${label(where)} and ${label(decidedAt)} name different ids`
      }
    }
    for (const where of decoys) {
      const value = this.#checked(where, read(where))
      if (value === undefined || value === '' || value === decided) continue
      this.problem ??= decided === undefined
        ? `${label(where)} names an id the agent does not act on`
        : `${label(where)} and ${label(decidedAt)} name different ids`
    }
    if (decided !== undefined && decided !== '') this[field] = decided
  }

  #checked(where: string, value: JsonValue | undefined): string | undefined {
    if (value === undefined) return undefined
    if (typeof value !== 'string' || value.length > MAX_A2A_ID_CHARS) {
      this.problem ??= `${label(where)} must be a string of at most ${MAX_A2A_ID_CHARS} characters`
      return undefined
    }
    return value
  }
}

function label(where: string): string {
  if (where === 'path') return 'the task id of the path'
  if (where.startsWith('M.')) return `params.message.${where.slice(2)}`
  return `params.${where.slice(2)}`
}

/** The ids a request's params (a JSON-RPC `params` or a REST body) name, and the skill of its message. */
function readParams(operation: A2aOperation, dialect: Dialect, params: JsonValue | undefined, pathId: string | undefined, found: Found): void {
  const ids = idFields(operation, dialect)
  const message = operation === 'a2a.message.send' || operation === 'a2a.message.stream' ? messageOf(params, dialect, found) : undefined
  const read = (where: string): JsonValue | undefined => {
    if (where === 'path') return pathId
    const [root, ...names] = where.split('.')
    let value: JsonValue | undefined = root === 'M' ? message : params
    for (const name of names) value = member(value, name)
    if (root !== 'N') return value
    const task = typeof value === 'string' ? TASK_NAME.exec(value) : null
    return task === null ? undefined : task[1]
  }
  found.settle('taskId', ids.task, ids.taskDecoys, read)
  found.settle('contextId', ids.context, ids.contextDecoys, read)
  const skill = member(member(message, 'metadata'), 'skill')
  if (skill === undefined) return
  if (typeof skill !== 'string' || skill === '' || skill.length > MAX_A2A_SKILL_CHARS) {
    found.problem ??= `params.message.metadata.skill must be a non-empty string of at most ${MAX_A2A_SKILL_CHARS} characters`
  } else {
    found.skill = skill
  }
}

/**
 * The params of a JSON-RPC call to `method` naming `taskId`, `contextId` and `skill` where the SDKs read
 * them, so that a question asked without a request (policy simulation) is the one the gateway would ask.
 */
export function a2aParamsFor(method: string, ids: { taskId?: string; contextId?: string; skill?: string }): JsonObject {
  const [operation, version] = JSON_RPC_METHODS.get(method) ?? ['a2a.method.other', '0.3']
  const fieldsOf = idFields(operation, version === '0.3' ? 'rpc03' : 'rpc10')
  const params: Record<string, JsonValue> = {}
  const message: Record<string, JsonValue> = {}
  const place = (where: string | undefined, value: string | undefined): void => {
    if (where === undefined || value === undefined) return
    const into = where.startsWith('M.') ? message : params
    into[where.slice(2)] = value
  }
  place(fieldsOf.task[0], ids.taskId)
  place(fieldsOf.context[0], ids.contextId)
  if (ids.skill !== undefined) message.metadata = { skill: ids.skill }
  if (operation === 'a2a.message.send' || operation === 'a2a.message.stream' || ids.skill !== undefined) params.message = message
  return params
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
  if (method === 'GET' && a2aCardPath(path) !== null) return call('a2a.card.get', version, 'card', CARD_METHOD, null)
  const rest = method === 'POST' || method === 'GET' || method === 'DELETE' ? readRest(method, path) : NO_ROUTE
  const found = new Found()
  if (method === 'POST' && rest.match === null) {
    const rpcMethod = member(request.body, 'method')
    if (typeof rpcMethod !== 'string') return call('a2a.method.other', version, 'jsonrpc', OTHER_METHOD, null)
    const known = JSON_RPC_METHODS.get(rpcMethod)
    if (known === undefined) return call('a2a.method.other', version, 'jsonrpc', rpcMethod, null)
    // The method's own dialect decides the version when the header says another one.
    const [operation, methodVersion] = known
    readParams(operation, methodVersion === '0.3' ? 'rpc03' : 'rpc10', member(request.body, 'params'), undefined, found)
    return call(operation, methodVersion, 'jsonrpc', rpcMethod, found)
  }
  const route = rest.match
  if (route === null) return call('a2a.method.other', version, 'rest', OTHER_METHOD, null)
  if (rest.ambiguous) found.problem = 'the path names one REST route as sent and another with "%3A" read as ":"'
  let pathId: string | undefined
  if (route.rawId !== undefined) {
    const decoded = decodeId(route.rawId)
    if (decoded === null) found.problem ??= 'the task id of the path is not valid percent-encoded UTF-8'
    else pathId = decoded
  }
  // A REST body that is also a JSON-RPC request is two requests; which one the agent runs depends on its routing.
  if (member(request.body, 'jsonrpc') !== undefined || member(request.body, 'method') !== undefined) {
    found.problem ??= 'a REST body must not be a JSON-RPC request too'
  }
  readParams(route.operation, 'rest', request.body, pathId, found)
  return call(route.operation, version, 'rest', methodNameOf(route.operation, version), found)
}
