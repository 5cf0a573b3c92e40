/** Agents: search (`q`), cursor paging, and the create form for admins. */
import type { JSX } from 'preact'
import { useState } from 'preact/hooks'
import { apiData, apiPage } from '../api.js'
import { Badge, ErrorBox, Link, Section, useCursors, useLoad, useSession } from '../components/ui.js'
import { agentShortIds, formatTime, parseJsonObject, queryString, shorten, trustLabel } from '../lib/format.js'
import { navigate } from '../router.js'

export interface Agent {
  id: string
  name: string
  domain: string | null
  description: string | null
  did: string
  status: 'enabled' | 'disabled'
  trustLevel: string
  publicKeyJwk: Record<string, unknown> | null
  agent_card: Record<string, unknown> | null
  createdAt: string
  updatedAt: string
}

const PAGE_SIZE = 25

export function AgentsPage(): JSX.Element {
  const { canWrite } = useSession()
  const [query, setQuery] = useState('')
  const [search, setSearch] = useState('')
  const { cursor, pager, reset } = useCursors()
  const list = useLoad(() => apiPage<Agent>(`/v1/agents${queryString({ q: search, limit: PAGE_SIZE, cursor })}`), [search, cursor])
  const [creating, setCreating] = useState(false)
  const agents = list.data?.data ?? []
  const shortIds = agentShortIds(agents)

  return (
    <div>
      <div class="page-head">
        <h1>Agents</h1>
        {canWrite && <button type="button" class="primary" id="new-agent" onClick={() => setCreating(!creating)}>{creating ? 'Close' : 'New agent'}</button>}
      </div>
      {canWrite && creating && <CreateAgent onCreated={(agent) => navigate(`/agents/${agent.id}`)} />}
      <Section title="Registered agents">
        <form class="inline" role="search" onSubmit={(e) => { e.preventDefault(); reset(); setSearch(query.trim()) }}>
          <input id="agent-search" type="search" placeholder="Search name, DID or domain" maxLength={200} value={query}
            onInput={(e) => setQuery((e.target as HTMLInputElement).value)} />
          <button type="submit">Search</button>
          {search !== '' && <button type="button" class="link-button" onClick={() => { setQuery(''); setSearch(''); reset() }}>Clear</button>}
        </form>
        <ErrorBox error={list.error} />
        <table class="table" id="agents-table">
          <thead><tr><th>Name</th><th>DID</th><th>Domain</th><th>Status</th><th>Trust level</th><th>Created</th></tr></thead>
          <tbody>
            {agents.map((agent) => (
              <tr key={agent.id} data-agent-id={agent.id}>
                <td>
                  <Link href={`/agents/${agent.id}`}>{agent.name}</Link>
                  {' '}<span class="mono muted agent-short-id" title={agent.id}>{shortIds.get(agent.id)}</span>
                </td>
                <td class="mono" title={agent.did}>{shorten(agent.did, 48)}</td>
                <td>{agent.domain ?? '—'}</td>
                <td><Badge kind={agent.status === 'enabled' ? 'good' : 'bad'}>{agent.status}</Badge></td>
                <td>{trustLabel(agent.trustLevel)}</td>
                <td>{formatTime(agent.createdAt)}</td>
              </tr>
            ))}
            {!list.loading && list.data !== null && list.data.data.length === 0 && (
              <tr><td colSpan={6} class="muted">{search === '' ? 'No agents yet.' : `No agent matches “${search}”.`}</td></tr>
            )}
          </tbody>
        </table>
        {pager(list.data?.nextCursor, 'agents-next')}
      </Section>
    </div>
  )
}

function CreateAgent(props: { onCreated: (agent: Agent) => void }): JSX.Element {
  const [name, setName] = useState('')
  const [domain, setDomain] = useState('')
  const [description, setDescription] = useState('')
  const [did, setDid] = useState('')
  const [card, setCard] = useState('')
  const [error, setError] = useState<unknown>(null)
  const [busy, setBusy] = useState(false)

  const submit = async (event: Event): Promise<void> => {
    event.preventDefault()
    setError(null)
    const body: Record<string, unknown> = { name: name.trim() }
    if (domain.trim() !== '') body.domain = domain.trim()
    if (description.trim() !== '') body.description = description.trim()
    if (did.trim() !== '') body.did = did.trim()
    if (card.trim() !== '') {
      const parsed = parseJsonObject(card)
      if ('error' in parsed) {
        setError(new Error(`Agent Card: ${parsed.error}`))
        return
      }
      body.agent_card = parsed.value
    }
    setBusy(true)
    try {
      props.onCreated(await apiData<Agent>('POST', '/v1/agents', { body }))
    } catch (caught) {
      setError(caught)
    } finally {
      setBusy(false)
    }
  }

  return (
    <Section title="New agent">
      <form class="grid-form" id="create-agent" onSubmit={(e) => void submit(e)}>
        <label for="agent-name">Name</label>
        <input id="agent-name" required maxLength={200} value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
        <label for="agent-domain">Domain</label>
        <input id="agent-domain" placeholder="weather.example.com" value={domain} onInput={(e) => setDomain((e.target as HTMLInputElement).value)} />
        <label for="agent-description">Description</label>
        <input id="agent-description" maxLength={2000} value={description} onInput={(e) => setDescription((e.target as HTMLInputElement).value)} />
        <label for="agent-did">DID (optional)</label>
        <input id="agent-did" placeholder="default: this registry's did:web" value={did} onInput={(e) => setDid((e.target as HTMLInputElement).value)} />
        <label for="agent-card">Agent Card JSON (optional)</label>
        <textarea id="agent-card" rows={4} value={card} onInput={(e) => setCard((e.target as HTMLTextAreaElement).value)} />
        <span />
        <div><button type="submit" class="primary" disabled={busy}>Create agent</button></div>
      </form>
      <ErrorBox error={error} />
    </Section>
  )
}
