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
import { formatTime, shorten } from '../lib/format.js'
import { formatMs, pdpLabel, sinceLabel, type GatewayEntry } from '../lib/gateway-status.js'

const REFRESH_MS = 10_000

/** The bundle a gateway enforces against the registry's current one for its workspace. */
function bundleCell(entry: GatewayEntry): JSX.Element {
  if (entry.bundle_revision === null) {
    const why = entry.pdp === 'embedded' ? 'none yet' : entry.pdp === 'none' ? 'none (badge-only)' : 'none (its PDP holds the policies)'
    return <span class="muted">{why}</span>
  }
  return (
    <span>
      <span class="mono" title={entry.bundle_revision}>{entry.bundle_revision.slice(0, 12)}</span>{' '}
      {entry.bundle_current === true ? <Badge kind="good">current</Badge> : entry.bundle_current === false ? <Badge kind="warn">behind</Badge> : null}
      {entry.snapshot_age_ms !== null && <div class="muted" title="the snapshot's age at the gateway's last heartbeat">snapshot {formatMs(entry.snapshot_age_ms)} old</div>}
    </span>
  )
}

export function GatewaysPage(): JSX.Element {
  const gateways = useLoad(() => apiData<GatewayEntry[]>('GET', '/v1/gateways'), [])
  useEffect(() => {
    const timer = setInterval(gateways.reload, REFRESH_MS)
    return () => clearInterval(timer)
  }, [gateways.reload])
  const list = Array.isArray(gateways.data) ? gateways.data : []
  const now = Date.now()
  const live = list.filter((g) => !g.stale).length
  return (
    <div>
      <div class="page-head">
        <h1>Gateways</h1>
        <div class="actions"><button type="button" id="gateways-refresh" onClick={gateways.reload}>Refresh</button></div>
      </div>
      <Section title="Reporting to this control plane" id="gateways">
        <ErrorBox error={gateways.error} />
        {gateways.data !== null && list.length === 0 && (
          <p class="muted" id="no-gateways">
            No gateway reports to this control plane yet: start one (<code>agent-trust gateway</code>) with this registry's URL
            and a key of your organization; it is listed here after its first heartbeat.
          </p>
        )}
        {list.length > 0 && (
          <p class="muted" id="gateways-summary">
            {live} of {list.length} reporting. A gateway reports at least once per heartbeat interval and is stale after
            three intervals without a report; one silent for a day is no longer listed.
          </p>
        )}
        {list.length > 0 && (
          <table class="table gateways" id="gateway-table">
            <thead>
              <tr><th>Gateway</th><th>State</th><th>Routes</th><th>PDP</th><th>Bundle</th><th>Last heartbeat</th><th>Dropped</th></tr>
            </thead>
            <tbody>
              {list.map((g) => (
                <tr key={g.gateway_id} data-gateway={g.gateway_id} class={g.stale ? 'stale' : ''}>
                  <td class="gateway-id"><span class="mono">{g.gateway_id}</span><div class="muted">v{g.version}</div></td>
                  <td class="state">{g.stale ? <Badge kind="bad">stale</Badge> : <Badge kind="good">reporting</Badge>}</td>
                  <td class="routes">
                    {g.routes.map((r) => (
                      <div key={r.prefix}><span class="mono">{r.prefix}</span> <span class="muted">{r.protocol}</span> <span class="nowrap">{r.mode}</span></div>
                    ))}
                    <div class="muted">default mode {g.default_mode}</div>
                  </td>
                  <td class="pdp">
                    {pdpLabel(g.pdp)}
                    {g.workspace !== null && <div class="muted" title={g.workspace}>workspace <span class="mono">{shorten(g.workspace, 13)}</span></div>}
                  </td>
                  <td class="bundle">{bundleCell(g)}</td>
                  <td class="heartbeat" title={formatTime(g.last_heartbeat)}>
                    {sinceLabel(g.last_heartbeat, now)}
                    <div class="muted">every {formatMs(g.heartbeat_interval_ms)}</div>
                  </td>
                  <td class="dropped">{g.events_dropped > 0 ? <Badge kind="bad">{g.events_dropped}</Badge> : '0'}</td>
                </tr>
              ))}
            </tbody>
          </table>
        )}
      </Section>
    </div>
  )
}
