/**
 * Policies (docs/api.md §4.6): pick a scope (organization, group, agent); see its active document, its
 * history and its pending proposals as a line diff against the active text; propose, approve, reject
 * with a reason; the resolved policy of an agent with its lineage; and simulate a decision for an
 * operation, an MCP tool call or an A2A method.
 */
import type { JSX } from 'preact'
import { useState } from 'preact/hooks'
import { ApiError, api, apiData, apiPage, enc } from '../api.js'
import { ActionButton, Badge, ErrorBox, Json, Link, Section, decisionKind, useLoad, useSession } from '../components/ui.js'
import { diffStats, lineDiff } from '../lib/diff.js'
import { agentLabel, agentShortIds, formatObligations, formatTime, shorten } from '../lib/format.js'
import { enforcement, NO_GATEWAY, reportingLabel, type GatewayStatusView } from '../lib/gateway-status.js'
import type { Agent } from './Agents.js'

interface PolicyDocument {
  id: string
  org_id: string
  scope_type: 'org' | 'group' | 'agent'
  scope_id: string
  state: string
  version: number
  yaml_content: string
  content_hash: string
  created_by_user_id: string | null
  created_by_type: string | null
  approved_by_user_id: string | null
  rejection_reason: string | null
  created_at: string
  updated_at: string
  precedence?: number
}

interface Group { id: string; name: string; precedence: number }

/**
 * One line saying whether the policies shown here are the ones a gateway enforces: this appliance's
 * gateway, else the gateway whose heartbeat arrived last (GET /v1/gateway/status), else that none reports.
 */
function EnforcedBy(props: { orgId: string; tick: number }): JSX.Element {
  const status = useLoad(() => apiData<GatewayStatusView>('GET', '/v1/gateway/status'), [props.tick])
  const s = status.data
  if (s === null) return <ErrorBox error={status.error} />
  const e = enforcement(s, props.orgId)
  const others = s.reporting > 1 ? <span> ({reportingLabel(s.reporting)}: <Link href="/gateways">each one's bundle</Link>)</span> : null
  let text: JSX.Element
  if (e.kind === 'none') {
    text = <span>{NO_GATEWAY}: the policies below take effect in the gateways that pull this organization's bundle, once one runs (<Link href="/gateways">Gateways</Link>).</span>
  } else if (e.kind === 'elsewhere') {
    text = <span>The gateway <code>{e.who}</code> does not enforce this organization's bundle ({e.pdp}).{others}</span>
  } else if (e.kind === 'pending') {
    text = <span>The gateway <code>{e.who}</code> enforces this organization's bundle once it has loaded its first one.{others}</span>
  } else {
    text = (
      <span>
        The gateway <code>{e.who}</code> enforces bundle revision <code>{shorten(e.revision, 12)}</code>
        {e.ageSeconds !== null && <span>, confirmed {e.ageSeconds} s ago</span>}:{' '}
        {e.inSync
          ? <Badge kind="good">the registry's current policies</Badge>
          : <span><Badge kind="warn">behind the registry</Badge> (current <code>{shorten(e.registryRevision ?? '', 12)}</code>; it follows at its next pull)</span>}
        {e.stale && <span> <Badge kind="bad">stale</Badge></span>}
        {others}
      </span>
    )
  }
  return <p id="enforced-by" class="muted">{text}</p>
}

type ScopeType = 'org' | 'group' | 'agent'

const TEMPLATE = `version: "1"
min_trust_level: REG
operations:
  - pattern: "GET /**"
    min_trust_level: REG
`

function scopePath(orgId: string, type: ScopeType, id: string): string {
  const base = `/v1/orgs/${enc(orgId)}/policy`
  if (type === 'org') return `${base}/org`
  return type === 'group' ? `${base}/groups/${enc(id)}` : `${base}/agents/${enc(id)}`
}

export function PoliciesPage(): JSX.Element {
  const { principal, canWrite } = useSession()
  const orgId = principal.org_id
  const [type, setType] = useState<ScopeType>('org')
  const [scopeId, setScopeId] = useState('')
  const [simProposal, setSimProposal] = useState<string>('')
  const [tick, setTick] = useState(0)
  const refresh = (): void => setTick((n) => n + 1)

  const groups = useLoad(() => api<Group[]>('GET', `/v1/orgs/${enc(orgId)}/groups`), [orgId])
  const agents = useLoad(() => apiPage<Agent>('/v1/agents?limit=500'), [orgId])
  const agentList = agents.data?.data ?? []
  const shortIds = agentShortIds(agentList)
  const nameOf = (agent: Agent): string => agentLabel(agent, shortIds.get(agent.id))
  const effectiveId = type === 'org' ? orgId : scopeId
  const ready = type === 'org' || scopeId !== ''
  const path = scopePath(orgId, type, effectiveId)

  const active = useLoad(async () => {
    if (!ready) return null
    try {
      return await api<PolicyDocument>('GET', path)
    } catch (error) {
      if (error instanceof ApiError && error.status === 404 && error.code === 'policy_not_found') return null
      throw error
    }
  }, [path, ready, tick])
  const history = useLoad(async () => ready ? api<PolicyDocument[]>('GET', `${path}/history`) : [], [path, ready, tick])
  const proposals = useLoad(() => api<PolicyDocument[]>('GET', `/v1/orgs/${enc(orgId)}/policy/proposals`), [orgId, tick])

  const scopeName = (doc: Pick<PolicyDocument, 'scope_type' | 'scope_id'>): string => {
    if (doc.scope_type === 'org') return 'organization'
    if (doc.scope_type === 'group') return `group ${(groups.data ?? []).find((g) => g.id === doc.scope_id)?.name ?? doc.scope_id}`
    const agent = agentList.find((a) => a.id === doc.scope_id)
    return `agent ${agent === undefined ? doc.scope_id : nameOf(agent)}`
  }
  const here = (proposals.data ?? []).filter((p) => p.scope_type === type && (type === 'org' || p.scope_id === scopeId))
  const elsewhere = (proposals.data ?? []).filter((p) => !here.includes(p))

  return (
    <div>
      <div class="page-head"><h1>Policies</h1></div>
      <Section title="Scope">
        <form class="inline" onSubmit={(e) => e.preventDefault()}>
          <label for="scope-type">Scope</label>
          <select id="scope-type" value={type} onChange={(e) => { setType((e.target as HTMLSelectElement).value as ScopeType); setScopeId('') }}>
            <option value="org">Organization</option>
            <option value="group">Group</option>
            <option value="agent">Agent</option>
          </select>
          {type === 'group' && (
            <select id="scope-group" aria-label="Group" value={scopeId} onChange={(e) => setScopeId((e.target as HTMLSelectElement).value)}>
              <option value="">Choose a group…</option>
              {(groups.data ?? []).map((g) => <option key={g.id} value={g.id}>{g.name} (precedence {g.precedence})</option>)}
            </select>
          )}
          {type === 'agent' && (
            <select id="scope-agent" aria-label="Agent" value={scopeId} onChange={(e) => setScopeId((e.target as HTMLSelectElement).value)}>
              <option value="">Choose an agent…</option>
              {agentList.map((a) => <option key={a.id} value={a.id}>{nameOf(a)}</option>)}
            </select>
          )}
          <span class="muted">{principal.org_name ?? orgId}</span>
        </form>
        <EnforcedBy orgId={orgId} tick={tick} />
        <ErrorBox error={groups.error ?? agents.error} />
        {elsewhere.length > 0 && (
          <p class="muted">
            Pending elsewhere: {elsewhere.map((p, i) => (
              <span key={p.id}>{i > 0 && ', '}
                <button type="button" class="link-button" onClick={() => { setType(p.scope_type); setScopeId(p.scope_type === 'org' ? '' : p.scope_id) }}>
                  v{p.version} for {scopeName(p)}
                </button>
              </span>
            ))}
          </p>
        )}
      </Section>

      {ready && (
        <div>
          <div class="two-col">
            <Section title="Active document" id="active-policy">
              <ErrorBox error={active.error} />
              {active.data === null && !active.loading && active.error === null && <p class="muted">No active policy for this scope.</p>}
              {active.data !== null && (
                <div>
                  <p class="muted">Version {active.data.version} · {active.data.content_hash.slice(0, 19)}… · approved {formatTime(active.data.updated_at)}</p>
                  <pre class="code">{active.data.yaml_content}</pre>
                </div>
              )}
            </Section>
            <Section title="Pending proposals" id="proposals">
              <ErrorBox error={proposals.error} />
              {here.length === 0 && <p class="muted">None for this scope.</p>}
              {here.map((p) => (
                <Proposal key={p.id} proposal={p} activeText={active.data?.yaml_content ?? ''} canWrite={canWrite} orgId={orgId}
                  onDone={refresh} onSimulate={() => setSimProposal(p.id)} />
              ))}
            </Section>
          </div>
          {canWrite && <ProposeForm key={`${path}:${active.data?.id ?? ''}`} path={path} initial={active.data?.yaml_content ?? TEMPLATE} onProposed={refresh} />}
          <Section title="History">
            <ErrorBox error={history.error} />
            <table class="table" id="policy-history">
              <thead><tr><th>Version</th><th>State</th><th>Hash</th><th>Proposed by</th><th>Created</th><th>Updated</th><th>Rejection reason</th></tr></thead>
              <tbody>
                {(history.data ?? []).map((d) => (
                  <tr key={d.id}>
                    <td>{d.version}</td>
                    <td><Badge kind={d.state === 'active' ? 'good' : d.state === 'rejected' ? 'bad' : 'neutral'}>{d.state}</Badge></td>
                    <td class="mono">{d.content_hash.slice(7, 19)}</td>
                    <td>{d.created_by_type ?? '—'} {shorten(d.created_by_user_id, 16)}</td>
                    <td>{formatTime(d.created_at)}</td>
                    <td>{formatTime(d.updated_at)}</td>
                    <td>{d.rejection_reason ?? ''}</td>
                  </tr>
                ))}
                {history.data !== null && history.data.length === 0 && <tr><td colSpan={7} class="muted">No history.</td></tr>}
              </tbody>
            </table>
          </Section>
        </div>
      )}

      <div class="two-col">
        <ResolvedSection orgId={orgId} agents={agentList} nameOf={nameOf} initialAgent={type === 'agent' ? scopeId : ''} tick={tick} />
        <SimulateSection orgId={orgId} agents={agentList} nameOf={nameOf} proposals={proposals.data ?? []} proposalId={simProposal}
          onProposal={setSimProposal} scopeName={scopeName} />
      </div>
    </div>
  )
}

function Proposal(props: {
  proposal: PolicyDocument; activeText: string; canWrite: boolean; orgId: string; onDone: () => void; onSimulate: () => void
}): JSX.Element {
  const { proposal } = props
  const diff = lineDiff(props.activeText, proposal.yaml_content)
  const stats = diffStats(diff)
  const [rejecting, setRejecting] = useState(false)
  const [reason, setReason] = useState('')
  const [error, setError] = useState<unknown>(null)
  const base = `/v1/orgs/${enc(props.orgId)}/policy/proposals/${enc(proposal.id)}`

  const reject = async (event: Event): Promise<void> => {
    event.preventDefault()
    setError(null)
    try {
      await api('POST', `${base}/reject`, { body: { reason: reason.trim() } })
      props.onDone()
    } catch (caught) {
      setError(caught)
    }
  }

  return (
    <div class="proposal" data-proposal={proposal.id}>
      <p>
        <strong>Version {proposal.version}</strong> proposed {formatTime(proposal.created_at)} by {proposal.created_by_type ?? '?'}{' '}
        <span class="diffstat"><span class="add">+{stats.added}</span> <span class="del">−{stats.removed}</span></span>
      </p>
      <pre class="diff" aria-label="Diff against the active document">
        {diff.map((line, i) => (
          <div key={i} class={`diff-${line.op}`}><span class="gutter">{line.op === 'add' ? '+' : line.op === 'del' ? '-' : ' '}</span>{line.text}</div>
        ))}
      </pre>
      <div class="actions">
        <button type="button" onClick={props.onSimulate}>Simulate with this proposal</button>
        {props.canWrite && (
          <>
            <ActionButton class="primary" name="approve" onClick={async () => { setError(null); await api('POST', `${base}/approve`); props.onDone() }} onError={setError}>Approve</ActionButton>
            <button type="button" class="danger" name="reject" onClick={() => setRejecting(!rejecting)}>Reject…</button>
          </>
        )}
      </div>
      {rejecting && (
        <form class="inline" onSubmit={(e) => void reject(e)}>
          <label for={`reason-${proposal.id}`}>Reason</label>
          <input id={`reason-${proposal.id}`} required maxLength={1000} value={reason} onInput={(e) => setReason((e.target as HTMLInputElement).value)} />
          <button type="submit" class="danger">Reject</button>
        </form>
      )}
      <ErrorBox error={error} />
    </div>
  )
}

function ProposeForm(props: { path: string; initial: string; onProposed: () => void }): JSX.Element {
  const [text, setText] = useState(props.initial)
  const [error, setError] = useState<unknown>(null)
  const [busy, setBusy] = useState(false)
  const submit = async (event: Event): Promise<void> => {
    event.preventDefault()
    setError(null)
    setBusy(true)
    try {
      await api('POST', props.path, { body: { yaml_content: text } })
      props.onProposed()
    } catch (caught) {
      setError(caught)
    } finally {
      setBusy(false)
    }
  }
  return (
    <Section title="Propose a new version">
      <form id="propose-form" onSubmit={(e) => void submit(e)}>
        <textarea id="policy-yaml" class="code" rows={12} spellcheck={false} value={text} onInput={(e) => setText((e.target as HTMLTextAreaElement).value)} />
        <div class="actions"><button type="submit" class="primary" disabled={busy}>Propose</button></div>
      </form>
      <ErrorBox error={error} />
    </Section>
  )
}

function ResolvedSection(props: { orgId: string; agents: Agent[]; nameOf: (agent: Agent) => string; initialAgent: string; tick: number }): JSX.Element {
  const [agentId, setAgentId] = useState(props.initialAgent)
  const chosen = agentId !== '' ? agentId : props.initialAgent
  const base = `/v1/orgs/${enc(props.orgId)}/policy/agents/${enc(chosen)}`
  const resolved = useLoad(async () => chosen === '' ? null : api<unknown>('GET', `${base}/resolved`), [base, props.tick])
  const lineage = useLoad(async () => chosen === '' ? [] : api<PolicyDocument[]>('GET', `${base}/lineage`), [base, props.tick])
  return (
    <Section title="Resolved policy">
      <form class="inline" onSubmit={(e) => e.preventDefault()}>
        <select aria-label="Agent" id="resolved-agent" value={chosen} onChange={(e) => setAgentId((e.target as HTMLSelectElement).value)}>
          <option value="">Choose an agent…</option>
          {props.agents.map((a) => <option key={a.id} value={a.id}>{props.nameOf(a)}</option>)}
        </select>
      </form>
      <ErrorBox error={resolved.error ?? lineage.error} />
      {(lineage.data ?? []).length > 0 && (
        <ol class="lineage">
          {lineage.data!.map((d) => <li key={d.id}>{d.scope_type} {d.scope_type === 'org' ? '' : shorten(d.scope_id, 14)} v{d.version}{d.precedence !== undefined ? ` (precedence ${d.precedence})` : ''}</li>)}
        </ol>
      )}
      {chosen !== '' && lineage.data !== null && lineage.data.length === 0 && <p class="muted">No active document applies: the defaults.</p>}
      {resolved.data !== null && <Json value={resolved.data} />}
    </Section>
  )
}

type SimKind = 'operation' | 'mcp' | 'a2a'

interface Decision { decision: string; decision_id: string; reason: string | null; obligations: unknown; ttl?: number }

function SimulateSection(props: {
  orgId: string; agents: Agent[]; nameOf: (agent: Agent) => string; proposals: PolicyDocument[]; proposalId: string; onProposal: (id: string) => void
  scopeName: (d: PolicyDocument) => string
}): JSX.Element {
  const [agentId, setAgentId] = useState('')
  const [kind, setKind] = useState<SimKind>('operation')
  const [operation, setOperation] = useState('GET /forecasts/today')
  const [tool, setTool] = useState('')
  const [a2aMethod, setA2aMethod] = useState('message/send')
  const [skill, setSkill] = useState('')
  const [result, setResult] = useState<Decision | null>(null)
  const [error, setError] = useState<unknown>(null)

  const submit = async (event: Event): Promise<void> => {
    event.preventDefault()
    setError(null)
    setResult(null)
    if (agentId === '') {
      setError(new Error('Choose an agent.'))
      return
    }
    const body: Record<string, unknown> = {}
    if (kind === 'operation') body.action = { operation: operation.trim() }
    else if (kind === 'mcp') body.mcp = { method: 'tools/call', name: tool.trim() }
    else body.a2a = skill.trim() === '' ? { method: a2aMethod.trim() } : { method: a2aMethod.trim(), skill: skill.trim() }
    if (props.proposalId !== '') body.proposal_id = props.proposalId
    try {
      setResult(await api<Decision>('POST', `/v1/orgs/${enc(props.orgId)}/policy/agents/${enc(agentId)}/simulate`, { body }))
    } catch (caught) {
      setError(caught)
    }
  }

  return (
    <Section title="Simulate" id="simulate">
      <form class="grid-form" id="simulate-form" onSubmit={(e) => void submit(e)}>
        <label for="sim-agent">Agent</label>
        <select id="sim-agent" value={agentId} onChange={(e) => setAgentId((e.target as HTMLSelectElement).value)}>
          <option value="">Choose an agent…</option>
          {props.agents.map((a) => <option key={a.id} value={a.id}>{props.nameOf(a)}</option>)}
        </select>
        <label for="sim-kind">Request</label>
        <select id="sim-kind" value={kind} onChange={(e) => setKind((e.target as HTMLSelectElement).value as SimKind)}>
          <option value="operation">HTTP operation</option>
          <option value="mcp">MCP tool call</option>
          <option value="a2a">A2A method</option>
        </select>
        {kind === 'operation' && <>
          <label for="sim-operation">Operation</label>
          <input id="sim-operation" placeholder="GET /forecasts/today" value={operation} onInput={(e) => setOperation((e.target as HTMLInputElement).value)} />
        </>}
        {kind === 'mcp' && <>
          <label for="sim-tool">MCP tool</label>
          <input id="sim-tool" placeholder="pay" value={tool} onInput={(e) => setTool((e.target as HTMLInputElement).value)} />
        </>}
        {kind === 'a2a' && <>
          <label for="sim-a2a-method">A2A method</label>
          <input id="sim-a2a-method" placeholder="message/send" value={a2aMethod} onInput={(e) => setA2aMethod((e.target as HTMLInputElement).value)} />
          <label for="sim-skill">Skill (optional)</label>
          <input id="sim-skill" value={skill} onInput={(e) => setSkill((e.target as HTMLInputElement).value)} />
        </>}
        <label for="sim-proposal">Policy</label>
        <select id="sim-proposal" value={props.proposalId} onChange={(e) => props.onProposal((e.target as HTMLSelectElement).value)}>
          <option value="">Active documents</option>
          {props.proposals.map((p) => <option key={p.id} value={p.id}>With proposal v{p.version} for {props.scopeName(p)}</option>)}
        </select>
        <span />
        <div><button type="submit" class="primary">Simulate</button></div>
      </form>
      <ErrorBox error={error} />
      {result !== null && (
        <dl class="facts" id="sim-result">
          <dt>Decision</dt><dd><Badge kind={decisionKind(result.decision)}><span id="sim-decision">{result.decision}</span></Badge></dd>
          <dt>Reason</dt><dd id="sim-reason">{result.reason ?? '—'}</dd>
          <dt>Decision ID</dt><dd class="mono">{result.decision_id}</dd>
          <dt>Obligations</dt><dd>{formatObligations(result.obligations)}</dd>
        </dl>
      )}
    </Section>
  )
}
