/**
 * Keys & operations: the organization's API keys (create with the secret shown once, delete), the
 * authority's signing keys, the revocation list, the gateways' status and break-glass uses.
 */
import type { JSX } from 'preact'
import { useState } from 'preact/hooks'
import { api, apiData, apiPage, enc } from '../api.js'
import { ActionButton, Badge, ErrorBox, Link, Section, ShownOnce, useCursors, useLoad, useSession } from '../components/ui.js'
import { formatTime, queryString, shorten } from '../lib/format.js'
import { bundleSummary, gatewayLabel, NO_GATEWAY, pdpLabel, reportingLabel, routeModesLabel, statusSource, type GatewayStatusView } from '../lib/gateway-status.js'

interface ApiKey {
  id: string
  name: string
  role: string
  createdAt: string
  createdByType?: string | null
  revokedAt?: string | null
}

interface AuthorityKey { kid: string; state: string; createdAt: string; activatedAt: string | null; retiresAt: string | null }
interface Revocation { jti: string; revokedAt: string; reason?: string | null }
interface BreakGlassUse { time: string; jti: string; operator: string; reason: string; agent_did: string | null; path: string }

export function KeysPage(): JSX.Element {
  const { canWrite, principal } = useSession()
  return (
    <div>
      <div class="page-head"><h1>Keys & operations</h1></div>
      <ApiKeys canWrite={canWrite} operator={principal.operator} ownKeyId={principal.key_id} />
      <Organizations operator={principal.operator} />
      <div class="two-col">
        <GatewayStatusSection />
        <AuthorityKeys />
      </div>
      <div class="two-col">
        <Revocations />
        {canWrite ? <BreakGlass /> : <Section title="Break-glass uses"><p class="muted">Admins only.</p></Section>}
      </div>
    </div>
  )
}

function ApiKeys(props: { canWrite: boolean; operator: boolean; ownKeyId: string | null }): JSX.Element {
  const { cursor, pager } = useCursors()
  const keys = useLoad(() => apiPage<ApiKey>(`/v1/keys${queryString({ limit: 50, cursor })}`), [cursor])
  const [name, setName] = useState('')
  const [role, setRole] = useState<'member' | 'admin'>('member')
  const [created, setCreated] = useState<(ApiKey & { key: string }) | null>(null)
  const [error, setError] = useState<unknown>(null)

  const create = async (event: Event): Promise<void> => {
    event.preventDefault()
    setError(null)
    setCreated(null)
    try {
      setCreated(await apiData<ApiKey & { key: string }>('POST', '/v1/keys', { body: { name: name.trim(), role } }))
      setName('')
      keys.reload()
    } catch (caught) {
      setError(caught)
    }
  }

  return (
    <Section title="API keys" id="api-keys">
      {props.canWrite && (
        <form class="inline" id="create-key" onSubmit={(e) => void create(e)}>
          <label for="key-name">Name</label>
          <input id="key-name" required maxLength={200} value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
          <label for="key-role">Role</label>
          <select id="key-role" value={role} onChange={(e) => setRole((e.target as HTMLSelectElement).value as 'member' | 'admin')}>
            <option value="member">member</option>
            <option value="admin">admin</option>
          </select>
          <button type="submit" class="primary">Create key</button>
        </form>
      )}
      {created !== null && (
        <ShownOnce id="created-key-secret" secret={created.key} onDone={() => setCreated(null)}>Key <strong>{created.name}</strong> created.</ShownOnce>
      )}
      <ErrorBox error={error ?? keys.error} />
      <table class="table" id="keys-table">
        <thead><tr><th>Name</th><th>Role</th><th>ID</th><th>Created</th><th>Created by</th>{props.canWrite && <th />}</tr></thead>
        <tbody>
          {(keys.data?.data ?? []).map((k) => (
            <tr key={k.id}>
              <td>{k.name}{k.id === props.ownKeyId ? ' (this session)' : ''}</td>
              <td>{k.role}</td>
              <td class="mono">{shorten(k.id, 14)}</td>
              <td>{formatTime(k.createdAt)}</td>
              <td>{k.createdByType ?? '—'}</td>
              {props.canWrite && (
                <td>
                  <ActionButton class="danger small" name="delete-key" confirm={`Delete the key “${k.name}”? Clients using it stop working.`}
                    onClick={async () => { setError(null); await api('DELETE', `/v1/keys/${enc(k.id)}`); keys.reload() }} onError={setError}>Delete</ActionButton>
                </td>
              )}
            </tr>
          ))}
        </tbody>
      </table>
      {pager(keys.data?.nextCursor)}
    </Section>
  )
}

interface Organization { id: string; name: string; createdAt: string }

/** GET /v1/orgs: a member sees its own organization; an operator sees all and creates them (the first admin key shown once). */
function Organizations(props: { operator: boolean }): JSX.Element {
  const { cursor, pager } = useCursors()
  const orgs = useLoad(() => apiPage<Organization>(`/v1/orgs${queryString({ limit: 50, cursor })}`), [cursor])
  const [name, setName] = useState('')
  const [created, setCreated] = useState<{ org: Organization; apiKey: { key: string } } | null>(null)
  const [error, setError] = useState<unknown>(null)

  const create = async (event: Event): Promise<void> => {
    event.preventDefault()
    setError(null)
    setCreated(null)
    try {
      setCreated(await apiData<{ org: Organization; apiKey: { key: string } }>('POST', '/v1/orgs', { body: { name: name.trim() } }))
      setName('')
      orgs.reload()
    } catch (caught) {
      setError(caught)
    }
  }

  return (
    <Section title="Organizations" id="organizations">
      {props.operator && (
        <form class="inline" id="create-org" onSubmit={(e) => void create(e)}>
          <label for="org-name">Name</label>
          <input id="org-name" required maxLength={200} value={name} onInput={(e) => setName((e.target as HTMLInputElement).value)} />
          <button type="submit" class="primary">Create organization</button>
        </form>
      )}
      {created !== null && (
        <ShownOnce id="created-org-key" secret={created.apiKey.key} onDone={() => setCreated(null)}>
          Organization <strong>{created.org.name}</strong> created with its first admin key.
        </ShownOnce>
      )}
      <ErrorBox error={error ?? orgs.error} />
      <table class="table" id="orgs-table">
        <thead><tr><th>Name</th><th>ID</th><th>Created</th></tr></thead>
        <tbody>
          {(orgs.data?.data ?? []).map((o) => (
            <tr key={o.id} data-org={o.id}><td>{o.name}</td><td class="mono">{o.id}</td><td>{formatTime(o.createdAt)}</td></tr>
          ))}
        </tbody>
      </table>
      {pager(orgs.data?.nextCursor)}
    </Section>
  )
}

/**
 * What the gateways report: this process's gateway, else the one whose heartbeat arrived last, else a
 * sentence saying that no gateway reports (never a bare null, never a "fresh" bundle without a gateway).
 */
function GatewayStatusSection(): JSX.Element {
  const status = useLoad(() => apiData<GatewayStatusView>('GET', '/v1/gateway/status'), [])
  const s = status.data
  return (
    <Section title="Gateway status" actions={<button type="button" id="gateway-status-refresh" onClick={status.reload}>Refresh</button>}>
      <ErrorBox error={status.error} />
      {s !== null && (statusSource(s) === 'none' ? (
        <div id="gateway-status">
          <p id="gateway-status-none">
            <Badge kind="neutral">none</Badge> {NO_GATEWAY}: none runs in this process and none has sent a heartbeat lately.
          </p>
          <p class="muted">
            Start one with <code>agent-trust gateway</code>, <code>SERVICE_REGISTRY_URL</code> set to this appliance and{' '}
            <code>SERVICE_REGISTRY_KEY</code> to a key of your organization; it shows here and on the <Link href="/gateways">Gateways</Link> page
            after its first heartbeat.
          </p>
        </div>
      ) : (
        <dl class="facts" id="gateway-status">
          <dt>Gateway</dt>
          <dd id="gs-gateway"><span class="mono">{gatewayLabel(s)}</span>{statusSource(s) === 'report' && <span class="muted"> (reports to this control plane)</span>}</dd>
          <dt>Reporting</dt>
          <dd id="gs-reporting">{reportingLabel(s.reporting)} · <Link href="/gateways">all gateways</Link></dd>
          <dt>PDP</dt><dd id="gs-pdp">{pdpLabel(s.pdp)}</dd>
          <dt>Routes enforce</dt><dd id="gs-modes">{routeModesLabel(s)}</dd>
          <dt>Default mode</dt><dd id="gs-default-mode">{s.mode ?? '—'} <span class="muted">(for routes without a mode of their own)</span></dd>
          <dt>Bundle</dt><dd id="gs-bundle"><BundleFacts status={s} /></dd>
          {!s.ready && <><dt>Ready</dt><dd id="gs-ready"><Badge kind="warn">not ready</Badge> waiting for its first snapshot</dd></>}
        </dl>
      ))}
    </Section>
  )
}

function BundleFacts(props: { status: GatewayStatusView }): JSX.Element {
  const bundle = bundleSummary(props.status)
  if (bundle.revision === null) return <span class="muted">{bundle.text}</span>
  const { in_sync: inSync } = props.status
  return (
    <span>
      <span class="mono" title={bundle.revision}>{bundle.revision.slice(0, 12)}</span>{' '}
      <Badge kind={bundle.state === 'fresh' ? 'good' : 'bad'}>{bundle.state}</Badge> {bundle.confirmed}
      {inSync === true && <div class="muted">the registry's current bundle</div>}
      {inSync === false && <div><Badge kind="warn">behind the registry</Badge> <span class="muted">it follows at its next pull</span></div>}
    </span>
  )
}

function AuthorityKeys(): JSX.Element {
  const keys = useLoad(() => apiData<AuthorityKey[]>('GET', '/v1/authority/keys'), [])
  return (
    <Section title="Authority keys">
      <ErrorBox error={keys.error} />
      <table class="table">
        <thead><tr><th>kid</th><th>State</th><th>Activated</th><th>Retires</th></tr></thead>
        <tbody>
          {(keys.data ?? []).map((k) => (
            <tr key={k.kid}>
              <td class="mono">{k.kid}</td>
              <td><Badge kind={k.state === 'active' ? 'good' : k.state === 'retired' ? 'bad' : 'neutral'}>{k.state}</Badge></td>
              <td>{formatTime(k.activatedAt)}</td>
              <td>{formatTime(k.retiresAt)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </Section>
  )
}

function Revocations(): JSX.Element {
  const { cursor, pager } = useCursors()
  const list = useLoad(() => apiData<{ revocations: Revocation[]; nextCursor: string | null; syncedAt?: string }>('GET', `/v1/revocations${queryString({ limit: 50, cursor })}`), [cursor])
  return (
    <Section title="Revocation list" id="revocations">
      <ErrorBox error={list.error} />
      <table class="table">
        <thead><tr><th>JTI</th><th>Revoked</th><th>Reason</th></tr></thead>
        <tbody>
          {(list.data?.revocations ?? []).map((r) => <tr key={r.jti}><td class="mono">{r.jti}</td><td>{formatTime(r.revokedAt)}</td><td>{r.reason ?? '—'}</td></tr>)}
          {list.data !== null && list.data.revocations.length === 0 && <tr><td colSpan={3} class="muted">No revoked badges.</td></tr>}
        </tbody>
      </table>
      {pager(list.data?.nextCursor)}
    </Section>
  )
}

function BreakGlass(): JSX.Element {
  const uses = useLoad(() => apiData<BreakGlassUse[]>('GET', '/v1/breakglass/uses?limit=100'), [])
  return (
    <Section title="Break-glass uses">
      <ErrorBox error={uses.error} />
      <table class="table">
        <thead><tr><th>Time</th><th>Operator</th><th>Reason</th><th>Agent</th><th>Path</th></tr></thead>
        <tbody>
          {(uses.data ?? []).map((u) => (
            <tr key={u.jti}><td>{formatTime(u.time)}</td><td>{u.operator}</td><td>{u.reason}</td><td class="mono">{shorten(u.agent_did, 28)}</td><td class="mono">{u.path}</td></tr>
          ))}
          {uses.data !== null && uses.data.length === 0 && <tr><td colSpan={5} class="muted">None seen by this process's gateway.</td></tr>}
        </tbody>
      </table>
    </Section>
  )
}
