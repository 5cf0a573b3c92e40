/**
 * Small assertion helpers shared by the integration tests: the error body `{error, message}` of
 * docs/wire-contract.md §3, the success envelope `{success, data}` of docs/api.md §2.1, and direct database reads used
 * to prove that a rejected request wrote nothing.
 */
import type { TestAdmin, TestResponse } from './admin.js'

/** Extra options of a tap assertion (only the ones these helpers pass through). */
export interface AssertExtra {
  todo?: string | boolean
}

/** The subset of a tap test object the helpers use. */
export interface Asserts {
  equal(found: unknown, wanted: unknown, ...rest: [message: string, extra: AssertExtra]): boolean
  ok(value: unknown, ...rest: [message: string, extra: AssertExtra]): boolean
  notOk(value: unknown, ...rest: [message: string, extra: AssertExtra]): boolean
}

const ERROR_BODY_KEYS = new Set(['error', 'message', 'errors'])
const LOWER_SNAKE = /^[a-z][a-z0-9]*(?:_[a-z0-9]+)*$/

/** True when the text looks like it carries a stack trace, SQL or server file paths. */
export function leaksInternals(text: string): boolean {
  return /"stack"|\n\s+at |\bat [\w.<>]+ \(|node_modules|\/src\/|\.js:\d+|\bSELECT\b|\bINSERT INTO\b|\bUPDATE agents\b|syntax for type/i.test(text)
}

/**
 * Asserts an error response: the status, the exact lower-snake code, a string message, only the
 * documented members, and nothing internal in the text.
 */
export function expectError(t: Asserts, res: TestResponse, status: number, code: string, label: string, extra: AssertExtra = {}): void {
  t.equal(res.status, status, `${label}: status ${status}`, extra)
  const body: unknown = res.body
  const isObject = typeof body === 'object' && body !== null && !Array.isArray(body)
  t.ok(isObject, `${label}: JSON object body`, extra)
  const record = (isObject ? body : {}) as Record<string, unknown>
  t.equal(record.error, code, `${label}: error code ${code}`, extra)
  t.ok(typeof record.error === 'string' && LOWER_SNAKE.test(record.error), `${label}: code is lower snake case`, extra)
  t.equal(typeof record.message, 'string', `${label}: message is a string`, extra)
  t.ok(Object.keys(record).every((k) => ERROR_BODY_KEYS.has(k)), `${label}: only error/message/errors members`, extra)
  t.notOk('success' in record, `${label}: no success member on an error`, extra)
  t.notOk(leaksInternals(res.text), `${label}: no stack, SQL or paths in the body`, extra)
}

/** Asserts a success envelope and returns `data`. */
export function expectEnvelope(t: Asserts, res: TestResponse, status: number, label: string): any {
  t.equal(res.status, status, `${label}: status ${status}`, {})
  t.equal(res.body?.success, true, `${label}: success is true`, {})
  t.ok(res.body !== undefined && 'data' in res.body, `${label}: has data`, {})
  return res.body?.data
}

export async function countRows(admin: TestAdmin, table: 'agents' | 'api_keys' | 'organizations' | 'users' | 'memberships'): Promise<number> {
  const rows = await admin.database.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${table}`)
  return Number(rows[0]?.n ?? -1)
}

/** The stored agent row as JSON text (every column, including updated_at), or null when absent. */
export async function agentRowSnapshot(admin: TestAdmin, id: string): Promise<string | null> {
  const rows = await admin.database.db.query('SELECT * FROM agents WHERE id = $1', [id])
  return rows[0] === undefined ? null : JSON.stringify(rows[0])
}

export const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i
export const ISO_UTC_RE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?Z$/

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}
