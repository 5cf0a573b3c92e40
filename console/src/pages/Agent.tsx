/**
 * One agent: identity, status, trust level and how it was earned, its Agent Card (validation errors by
 * JSON path, signature status), its DID document, badges (issue, revoke with a reason) and groups.
 */
import type { JSX } from 'preact'
import { useState } from 'preact/hooks'
import { ApiError, api, apiData, apiPage, enc } from '../api.js'
import { ActionButton, Badge, ErrorBox, Json, Link, Notice, Section, useLoad, useSession } from '../components/ui.js'
import { formatTime, trustEarned, trustLabel } from '../lib/format.js'
import type { Agent } from './Agents.js'

interface BadgeRecord {
  jti: string
  subject: string
  trustLevel: string
  ial: string
  issuedAt: string
  expiresAt: string
  revoked: boolean
  revokedAt: string | null
  reason: string | null
}

interface Group { id: string; name: string; precedence: number }

interface CardIssue { code: string; path: string; message: string }

export function AgentPage(props: { id: string }): JSX.Element {
  const { canWrite, principal } = useSession()
  const agent = useLoad(() => apiData<Agent>('GET', `/v1/agents/${enc(props.id)}`), [props.id])
  const [error, setError] = useState<unknown>(null)

  if (agent.error !== null) return <div><h1>Agent</h1><ErrorBox error={agent.error} /><Link href="/agents">Back to agents</Link></div>
  if (agent.data === null) return <div class="muted">Loading…</div>
  const a = agent.data

  const setStatus = async (action: 'enable' | 'disable'): Promise<void> => {
    setError(null)
    await apiData('POST', `/v1/agents/${enc(a.id)}/${action}`)
    agent.reload()
  }

  return (
    <div>
      <div class="page-head">
        <h1><Link href="/agents">Agents</Link> / <span id="agent-name-title">{a.name}</span></h1>
        <div class="actions">
          <Badge kind={a.status === 'enabled' ? 'good' : 'bad'}><span id="agent-status">{a.status}</span></Badge>
          {canWrite && (a.status === 'enabled'
            ? <ActionButton name="disable" onClick={() => setStatus('disable')} onError={setError} confirm="Disable this agent? It gets no new badges.">Disable</ActionButton>
            : <ActionButton name="enable" onClick={() => setStatus('enable')} onError={setError}>Enable</ActionButton>)}
        </div>
      </div>
      <ErrorBox error={error} />
      <div class="two-col">
        <Section title="Identity">
          <dl class="facts">
            <dt>ID</dt><dd class="mono">{a.id}</dd>
            <dt>DID</dt><dd class="mono" id="agent-did-value">{a.did}</dd>
            <dt>Domain</dt><dd>{a.domain ?? '—'}</dd>
            <dt>Description</dt><dd>{a.description ?? '—'}</dd>
            <dt>Public key</dt><dd class="mono">{a.publicKeyJwk === null ? 'none registered' : String(a.publicKeyJwk.x ?? 'JWK')}</dd>
            <dt>Created</dt><dd>{formatTime(a.createdAt)}</dd>
            <dt>Updated</dt><dd>{formatTime(a.updatedAt)}</dd>
          </dl>
        </Section>
        <TrustSection agent={a} canWrite={canWrite} operator={principal.operator} onChanged={agent.reload} />
      </div>
      <BadgesSection agent={a} canWrite={canWrite} />
      <CardSection agent={a} />
      <div class="two-col">
        <GroupsSection agent={a} canWrite={canWrite} orgId={principal.org_id} />
        <DidDocumentSection agent={a} />
      </div>
    </div>
  )
}

function TrustSection(props: { agent: Agent; canWrite: boolean; operator: boolean; onChanged: () => void }): JSX.Element {
  const { agent } = props
  const [challenge, setChallenge] = useState<{ record_name: string; record_value: string; status: string; domain?: string } | null>(null)
  const [error, setError] = useState<unknown>(null)
  const [level, setLevel] = useState(agent.trustLevel)

  const verify = async (): Promise<void> => {
    setError(null)
    const result = await apiData<{ record_name: string; record_value: string; status: string }>('POST', `/v1/agents/${enc(agent.id)}/verify-domain`, { body: {} })
    setChallenge(result)
    if (result.status === 'verified') props.onChanged()
  }
  const setTrust = async (): Promise<void> => {
    setError(null)
    await apiData('PUT', `/v1/agents/${enc(agent.id)}/trust-level`, { body: { trustLevel: level } })
    props.onChanged()
  }

  return (
    <Section title="Trust level">
      <p class="big" id="trust-level">{trustLabel(agent.trustLevel)}</p>
      <p>{trustEarned(agent.trustLevel)}</p>
      <dl class="facts">
        <dt>Domain verification</dt>
        <dd id="domain-verification">
          {agent.domain === null
            ? 'no domain registered'
            : Number(agent.trustLevel) >= 2 && challenge === null
              ? 'verified (or above: an operator decision)'
              : challenge === null ? 'not verified' : challenge.status}
        </dd>
        <dt>Operator decision</dt>
        <dd>{Number(agent.trustLevel) >= 3 ? `level ${agent.trustLevel} set by an operator` : 'none'}</dd>
      </dl>
      {challenge !== null && challenge.status !== 'verified' && (
        <Notice>Publish a TXT record <code>{challenge.record_name}</code> with the value <code>{challenge.record_value}</code>, then check again.</Notice>
      )}
      {props.canWrite && agent.domain !== null && (
        <ActionButton onClick={verify} onError={setError}>{challenge === null ? 'Start / check domain verification' : 'Check again'}</ActionButton>
      )}
      {props.operator && (
        <form class="inline" onSubmit={(e) => { e.preventDefault(); void setTrust().catch(setError) }}>
          <label for="trust-select">Set level (operator)</label>
          <select id="trust-select" value={level} onChange={(e) => setLevel((e.target as HTMLSelectElement).value)}>
            {['1', '2', '3', '4'].map((l) => <option key={l} value={l}>{trustLabel(l)}</option>)}
          </select>
          <button type="submit">Set</button>
        </form>
      )}
      <ErrorBox error={error} />
    </Section>
  )
}

function BadgesSection(props: { agent: Agent; canWrite: boolean }): JSX.Element {
  const { agent } = props
  const badges = useLoad(() => apiPage<BadgeRecord>(`/v1/agents/${enc(agent.id)}/badges?limit=50`), [agent.id])
  const [domain, setDomain] = useState(agent.domain ?? '')
  const [ttl, setTtl] = useState('3600')
  const [audience, setAudience] = useState('')
  const [issued, setIssued] = useState<{ token: string; jti: string; expiresAt: string } | null>(null)
  const [revoking, setRevoking] = useState<string | null>(null)
  const [reason, setReason] = useState('')
  const [error, setError] = useState<unknown>(null)

  const issue = async (event: Event): Promise<void> => {
    event.preventDefault()
    setError(null)
    setIssued(null)
    const body: Record<string, unknown> = { domain: domain.trim(), ttl: Number(ttl) }
    const aud = audience.split(',').map((s) => s.trim()).filter(Boolean)
    if (aud.length > 0) body.audience = aud
    try {
      setIssued(await apiData<{ token: string; jti: string; expiresAt: string }>('POST', `/v1/agents/${enc(agent.id)}/badge`, { body }))
      badges.reload()
    } catch (caught) {
      setError(caught)
    }
  }
  const revoke = async (event: Event): Promise<void> => {
    event.preventDefault()
    if (revoking === null) return
    setError(null)
    try {
      await apiData('POST', `/v1/badges/${enc(revoking)}/revoke`, { body: reason.trim() === '' ? {} : { reason: reason.trim() } })
      setRevoking(null)
      setReason('')
      badges.reload()
    } catch (caught) {
      setError(caught)
    }
  }

  return (
    <Section title="Badges" id="badges">
      {props.canWrite && (
        <form class="inline" id="issue-badge" onSubmit={(e) => void issue(e)}>
          <label for="badge-domain">Domain</label>
          <input id="badge-domain" required value={domain} onInput={(e) => setDomain((e.target as HTMLInputElement).value)} />
          <label for="badge-ttl">TTL (s)</label>
          <input id="badge-ttl" type="number" min={60} max={3600} class="narrow" value={ttl} onInput={(e) => setTtl((e.target as HTMLInputElement).value)} />
          <label for="badge-audience">Audience</label>
          <input id="badge-audience" placeholder="optional, comma-separated" value={audience} onInput={(e) => setAudience((e.target as HTMLInputElement).value)} />
          <button type="submit" class="primary">Issue badge</button>
        </form>
      )}
      {issued !== null && (
        <Notice>
          Badge <span class="mono" id="issued-jti">{issued.jti}</span> issued, expires {formatTime(issued.expiresAt)}. The token is shown once:
          <textarea readOnly rows={3} class="mono secret" id="issued-token" value={issued.token} />
        </Notice>
      )}
      <ErrorBox error={error ?? badges.error} />
      {revoking !== null && (
        <form class="inline" id="revoke-form" onSubmit={(e) => void revoke(e)}>
          <span>Revoke <span class="mono">{revoking}</span></span>
          <label for="revoke-reason">Reason</label>
          <input id="revoke-reason" required maxLength={500} value={reason} onInput={(e) => setReason((e.target as HTMLInputElement).value)} />
          <button type="submit" class="danger">Revoke</button>
          <button type="button" class="link-button" onClick={() => setRevoking(null)}>Cancel</button>
        </form>
      )}
      <table class="table" id="badges-table">
        <thead><tr><th>JTI</th><th>Level</th><th>IAL</th><th>Issued</th><th>Expires</th><th>State</th>{props.canWrite && <th />}</tr></thead>
        <tbody>
          {(badges.data?.data ?? []).map((b) => (
            <tr key={b.jti} data-jti={b.jti}>
              <td class="mono">{b.jti}</td>
              <td>{trustLabel(b.trustLevel)}</td>
              <td>{b.ial}</td>
              <td>{formatTime(b.issuedAt)}</td>
              <td>{formatTime(b.expiresAt)}</td>
              <td>{b.revoked
                ? <span><Badge kind="bad">revoked</Badge> {formatTime(b.revokedAt)}{b.reason ? ` — ${b.reason}` : ''}</span>
                : Date.parse(b.expiresAt) < Date.now() ? <Badge kind="neutral">expired</Badge> : <Badge kind="good">valid</Badge>}</td>
              {props.canWrite && <td>{!b.revoked && <button type="button" class="danger small" name="revoke" onClick={() => { setRevoking(b.jti); setReason('') }}>Revoke</button>}</td>}
            </tr>
          ))}
          {badges.data !== null && badges.data.data.length === 0 && <tr><td colSpan={7} class="muted">No badges.</td></tr>}
        </tbody>
      </table>
    </Section>
  )
}

function CardSection(props: { agent: Agent }): JSX.Element {
  const card = props.agent.agent_card
  const validation = useLoad(async () => card === null
    ? null
    : apiData<{ valid: boolean; errors: CardIssue[]; warnings: CardIssue[] }>('POST', '/v1/agent-cards/validate', { body: { card } }), [props.agent.updatedAt])
  const signed = card !== null && Array.isArray(card.signatures) && card.signatures.length > 0
  const verification = useLoad(async () => !signed
    ? null
    : apiData<{ valid: boolean; kid?: string; error?: string; message?: string; signatures?: { index: number; valid: boolean; kid?: string; error?: string }[] }>(
      'POST', '/v1/agent-cards/verify', { body: { card } }), [props.agent.updatedAt])

  if (card === null) return <Section title="Agent Card"><p class="muted">No Agent Card registered.</p></Section>
  const v = validation.data
  return (
    <Section title="Agent Card" id="agent-card-section">
      <div class="two-col">
        <div>
          <h3>Validation</h3>
          <ErrorBox error={validation.error} />
          {v !== null && (
            <div>
              <p>{v.valid ? <Badge kind="good">valid</Badge> : <Badge kind="bad">invalid</Badge>}</p>
              {v.errors.length > 0 && <IssueTable title="Errors" issues={v.errors} />}
              {v.warnings.length > 0 && <IssueTable title="Warnings" issues={v.warnings} />}
            </div>
          )}
          <h3>Signature</h3>
          <ErrorBox error={verification.error} />
          {!signed && <p class="muted">Unsigned card.</p>}
          {verification.data !== null && (
            <div>
              <p>{verification.data.valid
                ? <span><Badge kind="good">signature valid</Badge> kid <span class="mono">{verification.data.kid}</span></span>
                : <span><Badge kind="bad">not verified</Badge> {verification.data.error}: {verification.data.message}</span>}</p>
              {(verification.data.signatures ?? []).length > 0 && (
                <table class="table">
                  <thead><tr><th>#</th><th>kid</th><th>Result</th></tr></thead>
                  <tbody>{verification.data.signatures!.map((s) => <tr key={s.index}><td>{s.index}</td><td class="mono">{s.kid ?? '—'}</td><td>{s.valid ? 'valid' : s.error}</td></tr>)}</tbody>
                </table>
              )}
            </div>
          )}
        </div>
        <div><h3>Card</h3><Json value={card} /></div>
      </div>
    </Section>
  )
}

function IssueTable(props: { title: string; issues: CardIssue[] }): JSX.Element {
  return (
    <table class="table">
      <caption>{props.title}</caption>
      <thead><tr><th>Path</th><th>Code</th><th>Message</th></tr></thead>
      <tbody>{props.issues.map((i, n) => <tr key={n}><td class="mono">{i.path}</td><td>{i.code}</td><td>{i.message}</td></tr>)}</tbody>
    </table>
  )
}

function DidDocumentSection(props: { agent: Agent }): JSX.Element {
  const doc = useLoad(() => api<unknown>('GET', `/agents/${enc(props.agent.id)}/did.json`), [props.agent.id, props.agent.updatedAt])
  return (
    <Section title="DID document">
      {doc.error instanceof ApiError && doc.error.status === 404
        ? <p class="muted">No did:web document here (the agent has an explicit DID).</p>
        : <ErrorBox error={doc.error} />}
      {doc.data !== null && <Json value={doc.data} />}
    </Section>
  )
}

function GroupsSection(props: { agent: Agent; canWrite: boolean; orgId: string }): JSX.Element {
  const groups = useLoad(() => api<Group[]>('GET', `/v1/agents/${enc(props.agent.id)}/groups`), [props.agent.id])
  const all = useLoad(async () => props.canWrite ? api<Group[]>('GET', `/v1/orgs/${enc(props.orgId)}/groups`) : [], [props.orgId, props.canWrite])
  const [pick, setPick] = useState('')
  const [error, setError] = useState<unknown>(null)
  const member = new Set((groups.data ?? []).map((g) => g.id))
  const change = async (method: 'PUT' | 'DELETE', groupId: string): Promise<void> => {
    setError(null)
    await api(method, `/v1/orgs/${enc(props.orgId)}/groups/${enc(groupId)}/agents/${enc(props.agent.id)}`)
    groups.reload()
  }
  return (
    <Section title="Groups">
      <ErrorBox error={error ?? groups.error} />
      <table class="table">
        <thead><tr><th>Group</th><th>Precedence</th>{props.canWrite && <th />}</tr></thead>
        <tbody>
          {(groups.data ?? []).map((g) => (
            <tr key={g.id}><td>{g.name}</td><td>{g.precedence}</td>
              {props.canWrite && <td><ActionButton class="small" onClick={() => change('DELETE', g.id)} onError={setError}>Remove</ActionButton></td>}</tr>
          ))}
          {groups.data !== null && groups.data.length === 0 && <tr><td colSpan={3} class="muted">In no group.</td></tr>}
        </tbody>
      </table>
      {props.canWrite && (all.data ?? []).some((g) => !member.has(g.id)) && (
        <form class="inline" onSubmit={(e) => { e.preventDefault(); if (pick !== '') void change('PUT', pick).catch(setError) }}>
          <select value={pick} onChange={(e) => setPick((e.target as HTMLSelectElement).value)} aria-label="Group">
            <option value="">Add to group…</option>
            {(all.data ?? []).filter((g) => !member.has(g.id)).map((g) => <option key={g.id} value={g.id}>{g.name}</option>)}
          </select>
          <button type="submit">Add</button>
        </form>
      )}
    </Section>
  )
}
