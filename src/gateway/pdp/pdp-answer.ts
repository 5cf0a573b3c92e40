// A remote PDP's members reach a header, log lines, the decision cache and obligation handlers, so each is
// checked here first: docs/peer-input-validation.md, "External PDP (HTTP and OPA protocols)".
import { randomUUID } from 'node:crypto'
import { isSafeText } from '../../core/safe-text.js'
import type { PdpObligation } from '../../core/enforcement.js'
import type { PdpAnswer } from './pdp.js'
import { isRecord } from '../../core/json-objects.js'
import { TRUST_RANK, type TrustCode } from '../../core/trust-level.js'

/** A closed set: each is a label value of `service_pdp_unavailable_total{reason}`. */
export const PDP_UNAVAILABLE_REASONS = [
  // transport
  'timeout', 'connect_failed', 'connection_lost', 'closed', 'request_failed', 'invalid_request',
  // the HTTP answer
  'status_1xx', 'status_2xx', 'status_3xx', 'status_4xx', 'status_5xx', 'status_other',
  'invalid_content_type', 'too_large', 'invalid_json', 'not_an_object', 'missing_result',
  // the decision document
  'invalid_decision', 'missing_decision_id', 'invalid_decision_id', 'invalid_obligations', 'invalid_ttl', 'invalid_reason',
  'invalid_required_trust_level',
  // the embedded PDP and the gateway itself
  'no_bundle', 'invalid_bundle', 'bundle_stale',
] as const

export type PdpUnavailableReason = (typeof PDP_UNAVAILABLE_REASONS)[number]

/** It is logged and echoed in `X-Service-Decision-Id`. */
export const MAX_DECISION_ID_LENGTH = 256

/** Copied into a header, a log line or a dashboard without any escaping. */
export const DECISION_ID_PATTERN = /^[A-Za-z0-9\-._~:/+=@]+$/

/** Decisions are cached at most this long whatever the PDP says, so a policy change takes effect. */
export const MAX_TTL_SECONDS = 3600

/** In UTF-16 code units. */
export const MAX_REASON_LENGTH = 512

/** The built-in set has two types. */
export const MAX_OBLIGATIONS = 16

export const OBLIGATION_TYPE_PATTERN = /^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,63}$/

/** Bounds of one obligation's `params` object: nesting depth, JSON values in total, string and key lengths. */
export const MAX_PARAMS_DEPTH = 4
export const MAX_PARAMS_NODES = 64
export const MAX_PARAMS_STRING_LENGTH = 1024
export const MAX_PARAMS_KEY_LENGTH = 64

// C0 and C1 controls, and DEL: a reason is free text, but one that could break a log line or a
// terminal is not a reason a PDP needs to give.
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/

function unavailable(reason: PdpUnavailableReason): PdpAnswer {
  return { outcome: 'UNAVAILABLE', reason }
}

export function isValidDecisionId(value: unknown): value is string {
  return typeof value === 'string' && value.length > 0 && value.length <= MAX_DECISION_ID_LENGTH && DECISION_ID_PATTERN.test(value)
}

/** OPA sends a `decision_id` only with decision logging on; without one the gateway makes up `opa:<uuid>`. */
export function validatePdpDocument(document: unknown, opa: boolean): PdpAnswer {
  if (!isRecord(document)) return unavailable('not_an_object')
  if (!opa) return toAnswer(document, document.decision_id, false)
  if (!isRecord(document.result)) return unavailable('missing_result')
  return toAnswer(document.result, document.decision_id, true)
}

/** A JSON `null` for an optional member counts as absent. */
function toAnswer(result: Record<string, unknown>, rawId: unknown, generateId: boolean): PdpAnswer {
  const decision = result.decision
  if (decision !== 'ALLOW' && decision !== 'DENY') return unavailable('invalid_decision')

  let decisionId: string
  if (rawId === undefined || rawId === null || rawId === '') {
    if (!generateId) return unavailable('missing_decision_id')
    decisionId = `opa:${randomUUID()}`
  } else if (isValidDecisionId(rawId)) {
    decisionId = rawId
  } else {
    return unavailable('invalid_decision_id')
  }

  const obligations = toObligations(result.obligations)
  if (obligations === null) return unavailable('invalid_obligations')

  let ttl = 0
  const rawTtl = result.ttl
  if (rawTtl !== undefined && rawTtl !== null) {
    if (typeof rawTtl !== 'number' || !Number.isSafeInteger(rawTtl) || rawTtl < 0) return unavailable('invalid_ttl')
    ttl = rawTtl > MAX_TTL_SECONDS ? MAX_TTL_SECONDS : rawTtl
  }

  const answer: PdpAnswer = { outcome: decision, decisionId, obligations, ttl }
  const reason = result.reason
  if (reason !== undefined && reason !== null) {
    if (!isValidReason(reason)) return unavailable('invalid_reason')
    answer.reason = reason
  }
  // It becomes part of a WWW-Authenticate header: only one of the five codes is ever copied there.
  const required = result.required_trust_level
  if (required !== undefined && required !== null) {
    if (typeof required !== 'string' || !TRUST_RANK.has(required)) return unavailable('invalid_required_trust_level')
    answer.requiredTrustLevel = required as TrustCode
  }
  return answer
}

/** A reason is logged and echoed to callers: bounded, no control character, no lone surrogate (safe-text.ts). */
function isValidReason(value: unknown): value is string {
  return typeof value === 'string' && value.length <= MAX_REASON_LENGTH && !CONTROL.test(value) && isSafeText(value)
}

/** Fresh `{type, params?}` objects: nothing else of the PDP's objects is kept. Null when malformed. */
function toObligations(raw: unknown): PdpObligation[] | null {
  if (raw === undefined || raw === null) return []
  if (!Array.isArray(raw) || raw.length > MAX_OBLIGATIONS) return null
  const obligations: PdpObligation[] = []
  for (const entry of raw as unknown[]) {
    if (!isRecord(entry)) return null
    const { type, params } = entry
    if (typeof type !== 'string' || !OBLIGATION_TYPE_PATTERN.test(type)) return null
    if (params === undefined || params === null) {
      obligations.push({ type })
      continue
    }
    if (!isRecord(params)) return null
    const budget = { nodes: MAX_PARAMS_NODES }
    if (!withinBounds(params, 1, budget)) return null
    obligations.push({ type, params })
  }
  return obligations
}

/** `budget.nodes` counts down every value visited, so the walk stops early on a large document. */
function withinBounds(value: unknown, depth: number, budget: { nodes: number }): boolean {
  if (--budget.nodes < 0) return false
  if (typeof value === 'string') return value.length <= MAX_PARAMS_STRING_LENGTH
  if (typeof value !== 'object' || value === null) return true
  if (depth > MAX_PARAMS_DEPTH) return false
  if (Array.isArray(value)) {
    for (const item of value) if (!withinBounds(item, depth + 1, budget)) return false
    return true
  }
  for (const key of Object.keys(value)) {
    if (key.length > MAX_PARAMS_KEY_LENGTH) return false
    if (!withinBounds((value as Record<string, unknown>)[key], depth + 1, budget)) return false
  }
  return true
}

/** The reason of a non-200 answer: its status class, so the label set stays closed. */
export function statusReason(status: number): PdpUnavailableReason {
  if (!Number.isInteger(status) || status < 100 || status > 599) return 'status_other'
  return (['status_1xx', 'status_2xx', 'status_3xx', 'status_4xx', 'status_5xx'] as const)[Math.floor(status / 100) - 1]!
}
