/**
 * JSON-RPC 2.0 message classification, with MCP's narrowing of the base protocol: request ids are never
 * null, `params` is an object. The gateway decides on what this reads, so every message must have one
 * reading only: a member that would make another reader see a different kind of message, a different
 * id or a different method is refused rather than ignored.
 */
import type { JsonObject, JsonValue } from './strict-json.js'

export type JsonRpcId = string | number

export type JsonRpcMessage =
  | { readonly kind: 'request'; readonly id: JsonRpcId; readonly method: string; readonly params: JsonObject | undefined }
  | { readonly kind: 'notification'; readonly method: string; readonly params: JsonObject | undefined }
  | { readonly kind: 'response'; readonly id: JsonRpcId | null; readonly result: JsonValue | undefined; readonly error: JsonObject | undefined }

export interface JsonRpcBody {
  readonly batch: boolean
  readonly messages: readonly JsonRpcMessage[]
}

export interface JsonRpcProblem {
  readonly problem: 'not_jsonrpc' | 'empty_batch' | 'batch_too_large'
  /** A short sentence naming the batch element and the member at fault. */
  readonly detail: string
}

export interface JsonRpcOptions {
  /** The most messages one batch may hold; default 100. */
  readonly maxBatch?: number
}

const DEFAULT_MAX_BATCH = 100
const MAX_METHOD_LENGTH = 256
const MAX_ID_LENGTH = 256

/** Reads a parsed body as one JSON-RPC message or a batch of them; the first bad element decides the problem. */
export function readJsonRpc(value: JsonValue, options?: JsonRpcOptions): JsonRpcBody | JsonRpcProblem {
  const maxBatch = options?.maxBatch ?? DEFAULT_MAX_BATCH
  if (!Array.isArray(value)) {
    const message = readMessage(value)
    if (typeof message === 'string') return { problem: 'not_jsonrpc', detail: message }
    return { batch: false, messages: [message] }
  }
  if (value.length === 0) return { problem: 'empty_batch', detail: 'a batch must hold at least one message' }
  if (value.length > maxBatch) {
    return { problem: 'batch_too_large', detail: `a batch holds ${value.length} messages, more than ${maxBatch}` }
  }
  const messages: JsonRpcMessage[] = []
  for (let i = 0; i < value.length; i++) {
    const message = readMessage(value[i]!)
    if (typeof message === 'string') return { problem: 'not_jsonrpc', detail: `element ${i}: ${message}` }
    messages.push(message)
  }
  return { batch: true, messages }
}

/** Whether a body read by {@link readJsonRpc} was refused. */
export function isJsonRpcProblem(read: JsonRpcBody | JsonRpcProblem): read is JsonRpcProblem {
  return 'problem' in read
}

// Own members only: a value from JSON.parse has Object.prototype behind it, which may have been polluted.
const hasOwn = Object.prototype.hasOwnProperty

/** The message, or why it is not one. */
function readMessage(value: JsonValue): JsonRpcMessage | string {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return 'a message must be an object'
  const message = value as JsonObject
  if (!hasOwn.call(message, 'jsonrpc') || message.jsonrpc !== '2.0') return '"jsonrpc" must be "2.0"'
  const hasResult = hasOwn.call(message, 'result')
  const hasError = hasOwn.call(message, 'error')
  if (hasOwn.call(message, 'method')) {
    const method = message.method
    if (typeof method !== 'string' || method.length === 0 || method.length > MAX_METHOD_LENGTH) {
      return `"method" must be a non-empty string of at most ${MAX_METHOD_LENGTH} characters`
    }
    if (hasResult || hasError) return 'a request or notification must not have "result" or "error"'
    const params = hasOwn.call(message, 'params') ? message.params : undefined
    if (params !== undefined && !isObject(params)) return '"params" must be an object'
    if (!hasOwn.call(message, 'id')) return { kind: 'notification', method, params }
    const id = message.id
    if (!isId(id)) return `"id" of a request must be a string of at most ${MAX_ID_LENGTH} characters or a safe integer`
    return { kind: 'request', id, method, params }
  }
  if (!hasOwn.call(message, 'id')) return 'a message must have "method" (a request or notification) or "id" (a response)'
  const id = message.id
  if (id !== null && !isId(id)) return `"id" of a response must be null, a string of at most ${MAX_ID_LENGTH} characters or a safe integer`
  if (hasResult === hasError) return 'a response must have exactly one of "result" and "error"'
  if (hasResult) return { kind: 'response', id, result: message.result, error: undefined }
  const error = message.error
  if (!isObject(error)) return '"error" must be an object'
  if (!hasOwn.call(error, 'code') || !Number.isSafeInteger(error.code)) return '"error.code" must be an integer'
  if (!hasOwn.call(error, 'message') || typeof error.message !== 'string') return '"error.message" must be a string'
  return { kind: 'response', id, result: undefined, error }
}

function isObject(value: JsonValue | undefined): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

// Fractions and integers past 2^53 are refused: parsers round them differently, so one id could match two.
function isId(value: JsonValue | undefined): value is JsonRpcId {
  if (typeof value === 'string') return value.length <= MAX_ID_LENGTH
  return Number.isSafeInteger(value)
}

/** A complete error response; `JSON.stringify` does the escaping, and `data` is left out when undefined. */
export function jsonRpcErrorResponse(id: JsonRpcId | null, code: number, message: string, data?: Readonly<Record<string, unknown>>): string {
  return JSON.stringify({ jsonrpc: '2.0', id, error: { code, message, data } })
}

/** A map key for an id that keeps 1 and "1" apart. */
export function jsonRpcIdKey(id: JsonRpcId | null): string {
  if (id === null) return 'null'
  return typeof id === 'number' ? `n:${id}` : `s:${id}`
}
