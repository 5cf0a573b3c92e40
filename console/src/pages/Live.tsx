/**
 * Live decisions (docs/console.md "Live decisions"): the buffered events, then the server-sent stream.
 * EventSource reconnects by itself and sends Last-Event-ID, so the buffer fills any gap; events are kept
 * by `seq` without duplicates. A DENY row opens its detail with the PDP request.
 */
import type { JSX } from 'preact'
import { useEffect, useState } from 'preact/hooks'
import { apiData, enc } from '../api.js'
import { Badge, ErrorBox, Json, Section, decisionKind } from '../components/ui.js'
import { filterDecisions, formatClock, formatObligations, formatTime, mergeDecisions, shorten, type DecisionEvent, type DecisionFilter } from '../lib/format.js'

type StreamState = 'connecting' | 'live' | 'reconnecting' | 'closed'

/** Events lost: by a gateway before it reported them, or by the store before this page read them. */
interface Gap {
  readonly gateway_id?: string
  readonly dropped?: number
  readonly from_seq?: number
  readonly to_seq?: number
  readonly from?: number
  readonly to?: number
}

const GAPS_SHOWN = 20

function gapText(gap: Gap): string {
  if (gap.gateway_id !== undefined) {
    return `${gap.gateway_id} lost ${gap.dropped ?? '?'} decisions before it could report them (its events ${gap.from_seq ?? '?'}–${gap.to_seq ?? '?'})`
  }
  return `decisions ${gap.from ?? '?'}–${gap.to ?? '?'} left the store before this page read them`
}

export function LivePage(): JSX.Element {
  const [events, setEvents] = useState<DecisionEvent[]>([])
  const [stream, setStream] = useState<StreamState>('connecting')
  const [error, setError] = useState<unknown>(null)
  const [filter, setFilter] = useState<DecisionFilter>({ decision: '', agent: '', operation: '' })
  const [paused, setPaused] = useState(false)
  const [selected, setSelected] = useState<string | null>(null)
  const [gaps, setGaps] = useState<Gap[]>([])

  useEffect(() => {
    let closed = false
    apiData<DecisionEvent[]>('GET', '/v1/gateway/decisions?limit=1000').then(
      (initial) => { if (!closed) setEvents((current) => mergeDecisions(current, initial)) },
      (caught: unknown) => { if (!closed) setError(caught) },
    )
    // Same-origin: the session cookie goes along without withCredentials.
    const source = new EventSource('/v1/gateway/decisions/stream')
    source.onopen = () => setStream('live')
    source.onerror = () => setStream(source.readyState === EventSource.CLOSED ? 'closed' : 'reconnecting')
    source.addEventListener('decision', (message) => {
      try {
        const event = JSON.parse((message as MessageEvent<string>).data) as DecisionEvent
        setEvents((current) => mergeDecisions(current, [event]))
      } catch {
        // A malformed event is dropped; the next one still arrives.
      }
    })
    source.addEventListener('gap', (message) => {
      try {
        const gap = JSON.parse((message as MessageEvent<string>).data) as Gap
        setGaps((current) => [gap, ...current].slice(0, GAPS_SHOWN))
      } catch {
        // As for decisions.
      }
    })
    return () => {
      closed = true
      source.close()
    }
  }, [])

  const [frozen, setFrozen] = useState<DecisionEvent[] | null>(null)
  const shown = filterDecisions(paused && frozen !== null ? frozen : events, filter).slice().reverse()
  const set = (key: keyof DecisionFilter) => (e: Event): void => setFilter({ ...filter, [key]: (e.target as HTMLInputElement).value })

  return (
    <div>
      <div class="page-head">
        <h1>Live decisions</h1>
        <div class="actions">
          <Badge kind={stream === 'live' ? 'good' : stream === 'closed' ? 'bad' : 'neutral'}><span id="stream-state">{stream}</span></Badge>
          <button type="button" onClick={() => { setFrozen(paused ? null : events); setPaused(!paused) }}>{paused ? 'Resume' : 'Pause'}</button>
        </div>
      </div>
      <ErrorBox error={error} />
      {stream === 'closed' && <ErrorBox error={new Error('The decision stream closed; reload the page to reconnect.')} />}
      {gaps.length > 0 && (
        <div class="notice" role="status" id="gaps">
          <strong>Gaps in the record</strong>
          <ul>{gaps.map((gap, i) => <li key={i}>{gapText(gap)}</li>)}</ul>
        </div>
      )}
      {selected !== null && <DecisionDetail id={selected} onClose={() => setSelected(null)} />}
      <Section title={`Events (${shown.length} shown of ${events.length})`}>
        <form class="inline" onSubmit={(e) => e.preventDefault()}>
          <label for="filter-decision">Decision</label>
          <select id="filter-decision" value={filter.decision} onChange={set('decision')}>
            <option value="">any</option><option value="ALLOW">ALLOW</option><option value="DENY">DENY</option>
          </select>
          <label for="filter-agent">Agent</label>
          <input id="filter-agent" placeholder="DID contains" value={filter.agent} onInput={set('agent')} />
          <label for="filter-operation">Operation</label>
          <input id="filter-operation" placeholder="e.g. GET /admin" value={filter.operation} onInput={set('operation')} />
        </form>
        <div class="table-scroll">
        <table class="table compact" id="decisions-table">
          <thead><tr><th>Time (UTC)</th><th>Agent · gateway</th><th>Operation</th><th>Decision</th><th>Reason</th><th>Decision ID</th><th>Mode</th><th>Obligations</th><th>Break-glass</th></tr></thead>
          <tbody>
            {shown.map((e) => {
              const deny = e.decision === 'DENY' && e.decision_id !== null
              return (
                <tr key={e.seq} data-decision={e.decision} class={deny ? 'clickable' : ''} title={deny ? 'Open the decision' : undefined}
                  onClick={deny ? () => setSelected(e.decision_id) : undefined}>
                  <td title={formatTime(e.time)}>{formatClock(e.time)}</td>
                  <td class="mono" title={e.agent_did ?? ''}>
                    {shorten(e.agent_did, 24)}
                    {/* Several gateways report into one feed: each row names the one that decided. */}
                    <div class="muted gateway" title={e.gateway_id ?? ''}>{shorten(e.gateway_id, 24)}</div>
                  </td>
                  <td class="mono">{e.operation ?? `${e.method ?? ''} ${e.path ?? ''}`}</td>
                  <td><Badge kind={decisionKind(e.decision)}>{e.decision}</Badge></td>
                  <td class="reason">{e.reason ?? '—'}</td>
                  <td class="mono" title={e.decision_id ?? ''}>{shorten(e.decision_id, 14)}</td>
                  <td class="nowrap">{e.mode ?? '—'}</td>
                  <td>{formatObligations(e.obligations)}</td>
                  <td>{e.breakglass ? <Badge kind="bad">yes</Badge> : 'no'}</td>
                </tr>
              )
            })}
            {shown.length === 0 && <tr><td colSpan={9} class="muted">No decisions yet: requests through the gateway appear here as they are decided.</td></tr>}
          </tbody>
        </table>
        </div>
      </Section>
    </div>
  )
}

function DecisionDetail(props: { id: string; onClose: () => void }): JSX.Element {
  const [detail, setDetail] = useState<(DecisionEvent & { pdp_request?: unknown }) | null>(null)
  const [error, setError] = useState<unknown>(null)
  useEffect(() => {
    setDetail(null)
    setError(null)
    apiData<DecisionEvent & { pdp_request?: unknown }>('GET', `/v1/gateway/decisions/${enc(props.id)}`).then(setDetail, setError)
  }, [props.id])
  return (
    <Section title="Decision" id="decision-detail" actions={<button type="button" onClick={props.onClose}>Close</button>}>
      <ErrorBox error={error} />
      {detail !== null && (
        <div class="two-col">
          <dl class="facts">
            <dt>Decision</dt><dd><Badge kind={decisionKind(detail.decision)}>{detail.decision}</Badge></dd>
            <dt>Reason</dt><dd id="detail-reason">{detail.reason ?? '—'}</dd>
            <dt>Decision ID</dt><dd class="mono">{detail.decision_id}</dd>
            <dt>Time</dt><dd>{formatTime(detail.time)}</dd>
            <dt>Agent</dt><dd class="mono">{detail.agent_did ?? '—'}</dd>
            <dt>Request</dt><dd class="mono">{detail.method} {detail.path} → {detail.status ?? '—'}</dd>
            <dt>Operation</dt><dd class="mono">{detail.operation ?? '—'}</dd>
            <dt>Mode</dt><dd>{detail.mode ?? '—'}</dd>
            <dt>Protocol</dt><dd>{detail.protocol ?? '—'}</dd>
            <dt>Gateway</dt><dd class="mono">{detail.gateway_id ?? '—'}</dd>
            <dt>Request ID</dt><dd class="mono">{detail.request_id ?? '—'}</dd>
          </dl>
          <div><h3>PDP request</h3>{detail.pdp_request === undefined ? <p class="muted">Not kept for this decision.</p> : <Json value={detail.pdp_request} />}</div>
        </div>
      )}
    </Section>
  )
}
