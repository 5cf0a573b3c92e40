/**
 * The audit trail (docs/audit.md): who changed what and when, and every gateway refusal, newest first,
 * filtered by action, actor, target and time. Members see their organization's records, operators every
 * record; operators can download the signed export that `agent-trust audit verify --file` checks.
 */
import type { JSX } from 'preact'
import { useState } from 'preact/hooks'
import { apiPage } from '../api.js'
import { ErrorBox, Section, useCursors, useLoad, useSession } from '../components/ui.js'
import { formatTime, queryString, shorten } from '../lib/format.js'

interface AuditRecord {
  seq: number
  time: string
  actorType: string
  actorId: string | null
  orgId: string | null
  action: string
  target: string | null
  outcome: string
  requestId: string | null
  hash: string
}

interface Filters { action: string; actor: string; target: string; since: string }
const EMPTY: Filters = { action: '', actor: '', target: '', since: '' }

export function AuditPage(): JSX.Element {
  const { principal } = useSession()
  const { cursor, pager, reset } = useCursors()
  const [draft, setDraft] = useState<Filters>(EMPTY)
  const [filters, setFilters] = useState<Filters>(EMPTY)
  const records = useLoad(() => apiPage<AuditRecord>(`/v1/audit${queryString({
    limit: 50, cursor,
    action: filters.action.trim() || undefined, actor: filters.actor.trim() || undefined,
    target: filters.target.trim() || undefined, since: filters.since || undefined,
  })}`), [cursor, filters])
  const field = (name: keyof Filters) => (e: Event): void => setDraft({ ...draft, [name]: (e.target as HTMLInputElement).value })
  const apply = (event: Event): void => {
    event.preventDefault()
    reset()
    setFilters(draft)
  }
  return (
    <div>
      <div class="page-head">
        <h1>Audit trail</h1>
        {principal.operator && <a class="button" id="audit-export" href="/v1/audit/export" download>Download signed export</a>}
      </div>
      <Section title={principal.operator ? 'Every record' : 'Your organization\'s records'}>
        <form class="inline" id="audit-filters" onSubmit={apply}>
          <label for="audit-action">Action</label>
          <input id="audit-action" placeholder="agent.*" maxLength={100} value={draft.action} onInput={field('action')} />
          <label for="audit-actor">Actor</label>
          <input id="audit-actor" maxLength={200} value={draft.actor} onInput={field('actor')} />
          <label for="audit-target">Target</label>
          <input id="audit-target" maxLength={2048} value={draft.target} onInput={field('target')} />
          <label for="audit-since">Since</label>
          <input id="audit-since" type="date" value={draft.since} onInput={field('since')} />
          <button type="submit" class="primary">Filter</button>
        </form>
        <ErrorBox error={records.error} />
        <table class="table" id="audit-table">
          <thead><tr><th>#</th><th>Time</th><th>Actor</th><th>Action</th><th>Target</th><th>Outcome</th><th>Request</th><th>Hash</th></tr></thead>
          <tbody>
            {(records.data?.data ?? []).map((r) => (
              <tr key={r.seq} data-action={r.action} data-org={r.orgId ?? ""}>
                <td class="mono">{r.seq}</td>
                <td>{formatTime(r.time)}</td>
                <td>{r.actorType}{r.actorId === null ? '' : <span class="mono"> {shorten(r.actorId, 18)}</span>}</td>
                <td class="mono">{r.action}</td>
                <td class="mono">{r.target === null ? '—' : shorten(r.target, 28)}</td>
                <td>{r.outcome}</td>
                <td class="mono">{r.requestId === null ? '—' : shorten(r.requestId, 14)}</td>
                <td class="mono" title={r.hash}>{shorten(r.hash, 12)}</td>
              </tr>
            ))}
          </tbody>
        </table>
        {records.data !== null && records.data.data.length === 0 && <p class="muted" id="audit-empty">No records match.</p>}
        {pager(records.data?.nextCursor)}
      </Section>
    </div>
  )
}
