/**
 * Formatting and small pure helpers of the console (no DOM): times, trust levels, agent labels,
 * obligations, API errors, query strings and the live-decision filter. Unit-tested in test/unit/console/format.test.ts.
 */

/** `2026-05-01T10:00:00.000Z` → `2026-05-01 10:00:00 UTC`; anything unparsable is shown as given. */
export function formatTime(value: string | number | null | undefined): string {
  if (value === null || value === undefined || value === '') return '—'
  const date = typeof value === 'number' ? new Date(value) : new Date(value)
  if (Number.isNaN(date.getTime())) return String(value)
  return `${date.toISOString().slice(0, 19).replace('T', ' ')} UTC`
}

/** The time of day in UTC, `10:00:00`, for dense tables (the full time goes in a tooltip). */
export function formatClock(value: string | number | null | undefined): string {
  if (value === null || value === undefined || value === '') return '—'
  const date = new Date(value)
  if (Number.isNaN(date.getTime())) return String(value)
  return date.toISOString().slice(11, 19)
}

/** Seconds as `45s`, `3m 20s`, `2h 5m`, `3d 4h`. */
export function formatDuration(seconds: number | null | undefined): string {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return '—'
  const s = Math.max(0, Math.round(seconds))
  if (s < 60) return `${s}s`
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`
}

export const TRUST_CODES: Readonly<Record<string, string>> = { 0: 'SS', 1: 'REG', 2: 'DV', 3: 'OV', 4: 'EV' }

/** `"2"` → `2 (DV)`. */
export function trustLabel(level: string | number | null | undefined): string {
  if (level === null || level === undefined) return '—'
  const code = TRUST_CODES[String(level)]
  return code === undefined ? String(level) : `${level} (${code})`
}

/** How an agent earned its level (docs/api.md §2.3). */
export function trustEarned(level: string | number | null | undefined): string {
  switch (String(level)) {
    case '1': return 'Registered: every agent starts at level 1.'
    case '2': return 'Domain verified: the DNS TXT check of its domain passed.'
    case '3': return 'Operator decision: an operator set level 3 (OV).'
    case '4': return 'Operator decision: an operator set level 4 (EV).'
    default: return 'Unknown level.'
  }
}

/** Obligations (an object, an array or null) as one short line. */
export function formatObligations(obligations: unknown): string {
  if (obligations === null || obligations === undefined) return '—'
  if (Array.isArray(obligations)) return obligations.length === 0 ? '—' : obligations.map((o) => typeof o === 'string' ? o : JSON.stringify(o)).join(', ')
  if (typeof obligations === 'object') {
    const entries = Object.entries(obligations as Record<string, unknown>)
    if (entries.length === 0) return '—'
    return entries.map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`).join(', ')
  }
  return String(obligations)
}

/** Shortens a long identifier for a table cell: the start and the end, with an ellipsis between. */
export function shorten(value: string | null | undefined, max = 40): string {
  if (value === null || value === undefined) return '—'
  if (value.length <= max) return value
  const head = Math.ceil((max - 1) * 0.6)
  const tail = max - 1 - head
  return `${value.slice(0, head)}…${value.slice(value.length - tail)}`
}

/** The fewest characters of an agent's id the console shows: 8 hex digits of a random UUID, 32 bits. */
export const AGENT_SHORT_ID = 8

/**
 * The short id of each agent of a list: the first AGENT_SHORT_ID characters of its id, longer for agents
 * whose ids start alike, so that no two agents of the list are shown the same.
 */
export function agentShortIds(agents: readonly { id: string }[]): Map<string, string> {
  const ids = [...new Set(agents.map((a) => a.id))].sort()
  const common = (a: string | undefined, b: string): number => {
    if (a === undefined) return 0
    let n = 0
    while (n < a.length && n < b.length && a[n] === b[n]) n++
    return n
  }
  const out = new Map<string, string>()
  ids.forEach((id, i) => {
    // In sorted order the longest shared start is with a neighbour.
    const shared = Math.max(common(ids[i - 1], id), common(ids[i + 1], id))
    out.set(id, id.slice(0, Math.max(AGENT_SHORT_ID, shared + 1)))
  })
  return out
}

/**
 * How the console names an agent wherever it lists or offers one: names are not unique within an
 * organization, so the name comes with the domain (when it has one) and the short id:
 * `weather-bot (weather.example.com · 3f2a9c1e)`, `weather-bot (3f2a9c1e)`.
 */
export function agentLabel(agent: { id: string; name: string; domain: string | null }, shortId?: string): string {
  const id = shortId ?? agent.id.slice(0, AGENT_SHORT_ID)
  return agent.domain === null || agent.domain === '' ? `${agent.name} (${id})` : `${agent.name} (${agent.domain} · ${id})`
}

/** The error text of an API answer: `{error, message}` (docs/api.md §7), else the HTTP status. */
export function errorText(status: number, body: unknown): string {
  if (body !== null && typeof body === 'object') {
    const { error, message, error_description: description } = body as Record<string, unknown>
    const text = typeof message === 'string' ? message : typeof description === 'string' ? description : ''
    if (typeof error === 'string') return text === '' ? `${error} (HTTP ${status})` : `${error}: ${text} (HTTP ${status})`
  }
  return `HTTP ${status}`
}

/** A query string from the defined, non-empty values, with a leading `?` (or nothing). */
export function queryString(params: Readonly<Record<string, string | number | undefined | null>>): string {
  const parts: string[] = []
  for (const [key, value] of Object.entries(params)) {
    if (value === undefined || value === null || value === '') continue
    parts.push(`${encodeURIComponent(key)}=${encodeURIComponent(String(value))}`)
  }
  return parts.length === 0 ? '' : `?${parts.join('&')}`
}

/** A live decision event (docs/console.md "Live decisions"). */
export interface DecisionEvent {
  seq: number
  time: string
  request_id?: string
  txn_id?: string
  org_id?: string
  agent_did: string | null
  method?: string
  path?: string
  operation: string | null
  decision: string
  reason: string | null
  decision_id: string | null
  mode: string | null
  obligations: unknown
  breakglass: boolean | null
  status?: number
  protocol?: string
  /** The gateway that decided (SERVICE_PEP_ID, or the id it made at start). */
  gateway_id?: string | null
}

export interface DecisionFilter {
  decision: string
  agent: string
  operation: string
}

/** The events a filter keeps: decision exactly (any when empty), agent and operation as substrings, case-insensitive. */
export function filterDecisions(events: readonly DecisionEvent[], filter: DecisionFilter): DecisionEvent[] {
  const agent = filter.agent.trim().toLowerCase()
  const operation = filter.operation.trim().toLowerCase()
  return events.filter((event) => (filter.decision === '' || event.decision === filter.decision)
    && (agent === '' || (event.agent_did ?? '').toLowerCase().includes(agent))
    && (operation === '' || (event.operation ?? '').toLowerCase().includes(operation)))
}

/** Adds events to a list kept in `seq` order without duplicates, keeping at most `max` (the newest). */
export function mergeDecisions(current: readonly DecisionEvent[], incoming: readonly DecisionEvent[], max = 1000): DecisionEvent[] {
  const bySeq = new Map<number, DecisionEvent>()
  for (const event of current) bySeq.set(event.seq, event)
  for (const event of incoming) bySeq.set(event.seq, event)
  const merged = [...bySeq.values()].sort((x, y) => x.seq - y.seq)
  return merged.length > max ? merged.slice(merged.length - max) : merged
}

/** Whether a text is a JSON object; returns it or an error message. */
export function parseJsonObject(text: string): { value: Record<string, unknown> } | { error: string } {
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch (error) {
    return { error: `Not valid JSON: ${(error as Error).message}` }
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return { error: 'A JSON object is expected.' }
  return { value: value as Record<string, unknown> }
}
