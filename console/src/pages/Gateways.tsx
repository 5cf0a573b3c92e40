/**
 * Gateways: every gateway that reported to the control plane (the appliance's own and each `agent-trust
 * gateway` process), with its routes, PDP, bundle and heartbeat; members see the gateways deciding for their
 * organization, operators all (docs/console.md, "Gateways"). Refreshed every ten seconds, the default
 * heartbeat interval, so a gateway that stops turns stale here without a reload.
 */
import type { JSX } from 'preact'
import { useEffect } from 'preact/hooks'
import { apiData } from '../api.js'
import { Badge, ErrorBox, Section, useLoad } from '../components/ui.js'
import { formatDuration, formatTime } from '../lib/format.js'

export interface GatewayEntry {
  gateway_id: string
  version: string
  org_id: string | null
  routes: { prefix: string; mode: string; protocol: string }[]
  default_mode: string
  pdp: string
  workspace: string | null
  bundle_revision: string | null
  bundle_current: boolean | null
  snapshot_age_ms: number | null
  last_heartbeat: string
  heartbeat_interval_ms: number
  stale: boolean
  events_dropped: number
}

const REFRESH_MS = 10_000

/** The bundle a gateway enforces against the registry's current one for its workspace. */
function bundleCell(entry: GatewayEntry): JSX.Element {
  if (entry.bundle_revision === null) return <span class="muted">{entry.pdp === 'embedded' ? 'none yet' : 'none (no embedded PDP)'}</span>
  return (
    <span>
      <span class="mono" title={entry.bundle_revision}>{entry.bundle_revision.slice(0, 12)}</span>{' '}
      {entry.bundle_current === true ? <Badge kind="good">current</Badge> : entry.bundle_current === false ? <Badge kind="bad">behind</Badge> : null}
    </span>
  )
}

export function GatewaysPage(): JSX.Element {
  const gateways = useLoad(() => apiData<GatewayEntry[]>('GET', '/v1/gateways'), [])
  useEffect(() => {
    const timer = setInterval(gateways.reload, REFRESH_MS)
    return () => clearInterval(timer)
  }, [gateways.reload])
  const list = gateways.data ?? []
  return (
    <div>
      <div class="page-head">
        <h1>Gateways</h1>
        <div class="actions"><button type="button" onClick={gateways.reload}>Refresh</button></div>
      </div>
      <Section title="Reporting to this control plane" id="gateways">
        <ErrorBox error={gateways.error} />
        {gateways.data !== null && list.length === 0 && (
          <p class="muted" id="no-gateways">No gateway reports to this control plane yet: start one (<code>agent-trust gateway</code>) with this registry's URL and a key of your organization.</p>
        )}
        {list.length > 0 && (
          <table class="table" id="gateway-table">
            <thead>
              <tr><th>Gateway</th><th>State</th><th>Routes</th><th>PDP</th><th>Bundle</th><th>Snapshot age</th><th>Last heartbeat</th><th>Dropped</th></tr>
            </thead>
            <tbody>
              {list.map((g) => (
                <tr key={g.gateway_id} data-gateway={g.gateway_id}>
                  <td><span class="mono">{g.gateway_id}</span><div class="muted">v{g.version}</div></td>
                  <td>{g.stale ? <Badge kind="bad">stale</Badge> : <Badge kind="good">reporting</Badge>}</td>
                  <td>
                    {g.routes.map((r) => <div key={r.prefix}><span class="mono">{r.prefix}</span> {r.protocol} · {r.mode}</div>)}
                    <div class="muted">default {g.default_mode}</div>
                  </td>
                  <td>{g.pdp}</td>
                  <td>{bundleCell(g)}</td>
                  <td>{g.snapshot_age_ms === null ? '—' : formatDuration(Math.round(g.snapshot_age_ms / 1000))}</td>
                  <td>{formatTime(g.last_heartbeat)}</td>
                  <td>{g.events_dropped > 0 ? <Badge kind="bad">{g.events_dropped}</Badge> : '0'}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </Section>
    </div>
  )
}
