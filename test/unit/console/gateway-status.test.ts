/** What the console says about the gateways (console/src/lib/gateway-status.ts). */
import t from 'tap'
import {
  bundleSummary, enforcement, formatMs, gatewayLabel, pdpLabel, reportingLabel, routeModesLabel, sinceLabel, statusSource, type GatewayStatusView,
} from '../../../console/src/lib/gateway-status.js'

const NONE: GatewayStatusView = {
  gateway: false, source: 'none', gateway_id: null, reporting: 0, note: 'no gateway reports', ready: false,
  bundle_revision: null, bundle_age_seconds: null, bundle_state: 'none', stale: false, mode: null, route_modes: [], pdp: 'unknown',
  workspace: null, registry_revision: null, in_sync: null,
}
const ORG = '0F3A0000-0000-4000-8000-000000000001'
const REPORTED: GatewayStatusView = {
  ...NONE, source: 'report', gateway_id: 'gw-3f9a0c1d2e4b', reporting: 2, note: null, ready: true, bundle_revision: 'ab'.repeat(32),
  bundle_age_seconds: 8, bundle_state: 'fresh', mode: 'EM-OBSERVE', route_modes: ['EM-GUARD'], pdp: 'embedded',
  workspace: ORG.toLowerCase(), registry_revision: 'ab'.repeat(32), in_sync: true,
}

t.test('no gateway: no bundle, no mode, no "fresh", the sentence instead', async (t) => {
  t.equal(statusSource(NONE), 'none')
  t.same(bundleSummary(NONE), { state: 'none', revision: null, confirmed: '', text: 'none' })
  t.equal(pdpLabel(NONE.pdp), 'unknown')
  t.equal(pdpLabel(null), 'unknown', 'a null PDP is never shown as null')
  t.equal(routeModesLabel(NONE), '—')
  t.same(enforcement(NONE, ORG), { kind: 'none' })
})

t.test('an answer without source is read from gateway', async (t) => {
  t.equal(statusSource({ gateway: true }), 'local')
  t.equal(statusSource({ gateway: false }), 'none')
})

t.test('a reported gateway: its id, the routes\' modes apart from the default, its bundle', async (t) => {
  t.equal(gatewayLabel(REPORTED), 'gw-3f9a0c1d2e4b')
  t.equal(gatewayLabel({ source: 'local', gateway_id: 'gw-a' }), "gw-a (this appliance's gateway)")
  t.equal(routeModesLabel(REPORTED), 'EM-GUARD', 'what the routes enforce, not the default')
  t.equal(routeModesLabel({ route_modes: ['EM-GUARD', 'EM-STRICT', 'EM-GUARD'], mode: 'EM-OBSERVE' }), 'EM-GUARD, EM-STRICT')
  t.same(bundleSummary(REPORTED), { state: 'fresh', revision: 'ab'.repeat(32), confirmed: 'confirmed 8s ago', text: 'fresh, confirmed 8s ago' })
  t.equal(bundleSummary({ ...REPORTED, bundle_state: 'stale', bundle_age_seconds: 400 }).text, 'stale, confirmed 6m 40s ago')
  t.equal(reportingLabel(1), '1 gateway reporting')
  t.equal(reportingLabel(2), '2 gateways reporting')
  t.equal(reportingLabel(undefined), '0 gateways reporting')
})

t.test('never "fresh" without a bundle, whatever the state field says', async (t) => {
  for (const pdp of ['none', 'http', 'opa', 'embedded']) {
    const summary = bundleSummary({ ...REPORTED, pdp, bundle_revision: null, bundle_state: 'fresh' })
    t.equal(summary.state, 'none', `${pdp}: no bundle is no fresh bundle`)
    t.notMatch(summary.text, /fresh|null/, `${pdp}: ${summary.text}`)
  }
  t.match(bundleSummary({ ...REPORTED, pdp: 'none', bundle_revision: null }).text, /badge-only/)
  t.match(bundleSummary({ ...REPORTED, pdp: 'embedded', bundle_revision: null, ready: false }).text, /waiting for the first bundle/)
  t.equal(pdpLabel('none'), 'none (badge-only)')
})

t.test('the Policies line: which gateway enforces this organization\'s bundle', async (t) => {
  t.match(enforcement(REPORTED, ORG), { kind: 'enforced', who: 'gw-3f9a0c1d2e4b', inSync: true, stale: false })
  t.match(enforcement({ ...REPORTED, in_sync: false }, ORG), { kind: 'enforced', inSync: false })
  t.match(enforcement({ ...REPORTED, workspace: null }, ORG), { kind: 'elsewhere', pdp: "it enforces another organization's bundle" })
  t.match(enforcement({ ...REPORTED, pdp: 'none', bundle_revision: null, workspace: null }, ORG), { kind: 'elsewhere', pdp: 'badge-only' })
  t.match(enforcement({ ...REPORTED, pdp: 'http', bundle_revision: null, workspace: null }, ORG), { kind: 'elsewhere', pdp: 'its PDP is an HTTP PDP' })
  t.match(enforcement({ ...REPORTED, bundle_revision: null }, ORG), { kind: 'pending', who: 'gw-3f9a0c1d2e4b' })
})

t.test('times: milliseconds and "ago"', async (t) => {
  t.equal(formatMs(300), '300ms')
  t.equal(formatMs(10_000), '10s')
  t.equal(formatMs(null), '—')
  t.equal(sinceLabel('2026-01-01T00:00:00.000Z', Date.parse('2026-01-01T00:00:04.000Z')), '4s ago')
  t.equal(sinceLabel('soon', 0), '—')
})
