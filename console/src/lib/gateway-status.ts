/**
 * What the console says about the gateways (no DOM): the words of the Keys & operations status box, the
 * Policies page's "what is enforced" line and the Gateways page's cells, from `GET /v1/gateway/status` and
 * `GET /v1/gateways`. Unit-tested in test/unit/console/gateway-status.test.ts.
 */
import { formatDuration } from './format.js'

/** `GET /v1/gateway/status` (docs/api.md §4.5.1). */
export interface GatewayStatusView {
  gateway: boolean
  source: 'local' | 'report' | 'none'
  gateway_id: string | null
  reporting: number
  note: string | null
  ready: boolean
  bundle_revision: string | null
  bundle_age_seconds: number | null
  bundle_state: 'fresh' | 'stale' | 'none'
  stale: boolean
  mode: string | null
  route_modes: string[]
  pdp: string
  workspace: string | null
  registry_revision: string | null
  in_sync: boolean | null
}

/** One entry of `GET /v1/gateways`. */
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

/** The sentence shown wherever no gateway runs here and none reports. */
export const NO_GATEWAY = 'No gateway reports to this control plane'

/** Where the status comes from; an answer without `source` (an older appliance) is read from `gateway`. */
export function statusSource(s: Partial<GatewayStatusView>): 'local' | 'report' | 'none' {
  if (s.source === 'local' || s.source === 'report' || s.source === 'none') return s.source
  return s.gateway === true ? 'local' : 'none'
}

/** The PDP kind in words: `none` is a badge-only gateway, not a missing value. */
export function pdpLabel(pdp: string | null | undefined): string {
  switch (pdp) {
    case 'embedded': return 'embedded'
    case 'http': return 'HTTP PDP'
    case 'opa': return 'OPA'
    case 'none': return 'none (badge-only)'
    case null: case undefined: case '': case 'unknown': return 'unknown'
    default: return pdp
  }
}

/** The modes the routes enforce, one each, in the order given; the default mode when no route names one. */
export function routeModesLabel(s: Pick<GatewayStatusView, 'route_modes' | 'mode'>): string {
  const modes = [...new Set(s.route_modes ?? [])]
  if (modes.length > 0) return modes.join(', ')
  return s.mode ?? '—'
}

/** The bundle as the status box shows it: its revision, its state, or why there is none. */
export interface BundleSummary {
  /** `fresh` and `stale` only for a bundle there is; `none` otherwise. */
  state: 'fresh' | 'stale' | 'none'
  revision: string | null
  /** `confirmed 8s ago`, or empty when the age is unknown. */
  confirmed: string
  text: string
}

export function bundleSummary(s: Pick<GatewayStatusView, 'bundle_state' | 'bundle_revision' | 'bundle_age_seconds' | 'pdp' | 'ready'>): BundleSummary {
  const revision = s.bundle_revision === null || s.bundle_revision === undefined ? null : String(s.bundle_revision)
  if (revision === null || s.bundle_state === 'none' || s.bundle_state === undefined) {
    let text: string
    if (s.pdp === 'embedded') text = s.ready ? 'none' : 'none yet: waiting for the first bundle'
    else if (s.pdp === 'none') text = 'none: a badge-only gateway holds no bundle'
    else if (s.pdp === 'http' || s.pdp === 'opa') text = `none: its PDP (${pdpLabel(s.pdp)}) holds the policies`
    else text = 'none'
    return { state: 'none', revision: null, confirmed: '', text }
  }
  const state = s.bundle_state === 'stale' ? 'stale' : 'fresh'
  const confirmed = s.bundle_age_seconds === null || s.bundle_age_seconds === undefined ? '' : `confirmed ${formatDuration(s.bundle_age_seconds)} ago`
  return { state, revision, confirmed, text: confirmed === '' ? state : `${state}, ${confirmed}` }
}

/** "1 gateway reporting", "3 gateways reporting". */
export function reportingLabel(count: number | null | undefined): string {
  const n = typeof count === 'number' && Number.isFinite(count) ? count : 0
  return `${n} gateway${n === 1 ? '' : 's'} reporting`
}

/** Who the status describes: this process's gateway, or the one whose heartbeat arrived last. */
export function gatewayLabel(s: Pick<GatewayStatusView, 'source' | 'gateway_id'>): string {
  const id = s.gateway_id ?? null
  if (statusSource(s) === 'local') return id === null ? 'this appliance\'s gateway' : `${id} (this appliance's gateway)`
  return id === null ? 'a reporting gateway' : id
}

/**
 * The Policies page's line: whether the policies shown are those a gateway enforces. `elsewhere` is a
 * gateway that does not enforce this organization's bundle (another PDP, another workspace, or badge-only);
 * `pending` one that will, once its first bundle is loaded.
 */
export type Enforcement =
  | { kind: 'none' }
  | { kind: 'elsewhere'; who: string; pdp: string }
  | { kind: 'pending'; who: string }
  | { kind: 'enforced'; who: string; revision: string; ageSeconds: number | null; inSync: boolean; registryRevision: string | null; stale: boolean }

export function enforcement(s: GatewayStatusView, orgId: string): Enforcement {
  if (statusSource(s) === 'none') return { kind: 'none' }
  const who = gatewayLabel(s)
  if (s.pdp !== 'embedded' || s.workspace === null || s.workspace !== orgId.toLowerCase()) {
    const why = s.pdp === 'none' ? 'badge-only'
      : s.pdp === 'embedded' ? 'it enforces another organization\'s bundle'
        : s.pdp === 'http' ? 'its PDP is an HTTP PDP' : s.pdp === 'opa' ? 'its PDP is OPA' : `PDP: ${pdpLabel(s.pdp)}`
    return { kind: 'elsewhere', who, pdp: why }
  }
  if (s.bundle_revision === null) return { kind: 'pending', who }
  return {
    kind: 'enforced', who, revision: String(s.bundle_revision), ageSeconds: s.bundle_age_seconds, inSync: s.in_sync === true,
    registryRevision: s.registry_revision, stale: s.bundle_state === 'stale',
  }
}

/** Milliseconds as `300ms`, else as formatDuration words (`10s`, `1m 0s`). */
export function formatMs(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return '—'
  if (ms < 1000) return `${Math.max(0, Math.round(ms))}ms`
  return formatDuration(ms / 1000)
}

/** How long ago an ISO time was, from `now` (ms): `4s ago`; `—` for nothing unparsable. */
export function sinceLabel(iso: string | null | undefined, now: number): string {
  if (iso === null || iso === undefined) return '—'
  const then = Date.parse(iso)
  if (Number.isNaN(then)) return '—'
  return `${formatDuration(Math.max(0, (now - then) / 1000))} ago`
}
