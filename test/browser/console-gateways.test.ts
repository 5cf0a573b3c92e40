/**
 * The console against a control plane whose only gateway is a separate process, in a real browser
 * (Debian's chromium driven by playwright-core): an appliance composed in this process (the admin plane,
 * no gateway of its own) on the test database, and one `agent-trust gateway` process with its own
 * routes, in front of a recording upstream, reporting every 300 ms.
 *
 *  1. before the gateway starts: the Keys & operations status box says that no gateway reports (no raw
 *     null, no "fresh" bundle), the Gateways page says none reports, the Policies page says so too
 *  2. the gateway starts: the status box shows what it reports (its id, PDP, the routes' mode beside the
 *     default mode, its bundle, fresh); the Gateways page lists it with its id, routes and PDP; the
 *     Policies page names it as enforcing the registry's current bundle
 *  3. allowed and denied requests sent through it with a badge fill the Live decisions page
 *  4. the gateway stops: the Gateways page shows it stale, and the status box says no gateway reports
 *
 * Screenshots (1280x800) go to test-output/screenshots/ (gitignored). Without /usr/bin/chromium the test is
 * skipped with that reason.
 */
import t from 'tap'
import { existsSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { chromium, type Browser } from 'playwright-core'
import { projectPath } from '../../src/core/paths.js'
import { agentWithBadge, startService, type RunningService } from '../helpers/appliance.js'
import { startTestAdmin } from '../helpers/admin.js'
import { startUpstream } from '../helpers/upstream-server.js'

const CHROMIUM = '/usr/bin/chromium'
const SHOTS = projectPath('test-output', 'screenshots')
const WAIT = { timeout: 15_000 }
const ISSUER = 'http://registry.test:8080'
const GATEWAY_ID = 'gw-browser-fleet'

const POLICY = `version: "1"
min_trust_level: REG
operations:
  - pattern: "GET /forecasts/**"
    min_trust_level: REG
  - pattern: "* /admin/**"
    min_trust_level: DV
`

t.setTimeout(180_000)

const noChromium = existsSync(CHROMIUM) ? false : `${CHROMIUM} is not installed (apt-get install -y chromium); the console browser test needs it`

t.test('the console shows a gateway-only process: status, Gateways page, live decisions', { skip: noChromium }, async (t) => {
  mkdirSync(SHOTS, { recursive: true })
  const admin = await startTestAdmin(t, { CA_ISSUER_URL: ISSUER, SERVICE_RATE_LIMIT_PER_MINUTE: '100000' })
  const origin = admin.url
  const me = await admin.request('GET', '/v1/me')
  const orgId = String(me.body.data.org_id)
  // The policy is approved before the gateway starts, so its first bundle already denies /admin to REG.
  const proposed = await admin.request('POST', `/v1/orgs/${orgId}/policy/org`, { body: { yaml_content: POLICY } })
  t.equal(proposed.status, 201, 'a policy proposed')
  const approved = await admin.request('POST', `/v1/orgs/${orgId}/policy/proposals/${String(proposed.body.id)}/approve`)
  t.equal(approved.status, 200, 'and approved')
  const agent = await agentWithBadge(origin, admin.operatorKey, 'fleet-browser-bot')
  const upstream = await startUpstream(t)
  const dir = mkdtempSync(path.join(tmpdir(), 'svc-browser-gateways-'))
  // As the walkthrough's routes file: every route enforces EM-GUARD while the default mode stays EM-OBSERVE.
  const routesFile = path.join(dir, 'routes.json')
  writeFileSync(routesFile, JSON.stringify({
    routes: [
      { prefix: '/', upstream: upstream.url, mode: 'EM-GUARD' },
      { prefix: '/mcp', upstream: upstream.url, protocol: 'mcp', mode: 'EM-GUARD' },
    ],
  }))

  const browser: Browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run'],
  })
  t.teardown(() => browser.close())
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } })
  const page = await context.newPage()
  const pageErrors: string[] = []
  page.on('pageerror', (error) => pageErrors.push(error.message))

  await page.goto(`${origin}/console/`)
  await page.fill('#api-key', admin.operatorKey)
  await page.click('button[type=submit]')
  if (!(await page.locator('#sign-out').waitFor(WAIT).then(() => true, () => false))) {
    t.fail('the console did not sign in (POST /v1/console/session)')
    return
  }

  /** The status box's text after a fresh load of the Keys & operations page. */
  const statusBox = async (): Promise<string> => {
    await page.goto(`${origin}/console/keys`)
    await page.locator('#gateway-status').waitFor(WAIT)
    return page.locator('#gateway-status').innerText()
  }

  await t.test('1. no gateway reports yet', async (t) => {
    const box = await statusBox()
    t.match(box, /No gateway reports to this control plane/, `the status box says no gateway reports (${box})`)
    t.notMatch(box, /\bnull\b|undefined|\[object/, 'no raw null')
    t.notMatch(box, /fresh/i, 'no "fresh" bundle without a gateway')
    t.notMatch(box, /EM-OBSERVE|EM-GUARD/, 'no mode of a gateway that does not exist')
    await page.screenshot({ path: path.join(SHOTS, 'console-gateways-status-none.png') })
    await page.goto(`${origin}/console/gateways`)
    await page.locator('#no-gateways').waitFor(WAIT).then(() => t.pass('the Gateways page says none reports'), () => t.fail('the Gateways page says none reports'))
    await page.goto(`${origin}/console/policies`)
    const line = await page.locator('#enforced-by').waitFor(WAIT).then(() => page.locator('#enforced-by').innerText(), () => '')
    t.match(line, /No gateway reports/, `the Policies page says no gateway enforces the policies yet (${line})`)
  })

  let gateway: RunningService | null = null
  // The gateway outlives the step that starts it: its teardown belongs to the whole test.
  const whole = t
  await t.test('2. a gateway-only process reports', async (t) => {
    gateway = await startService(whole, {
      SERVICE_REGISTRY_URL: origin,
      SERVICE_REGISTRY_KEY: admin.operatorKey,
      SERVICE_ROUTES_FILE: routesFile,
      CA_ISSUER_URL: ISSUER,
      SERVICE_EMBEDDED_PDP: 'true',
      SERVICE_WORKSPACE: orgId,
      SERVICE_PEP_ID: GATEWAY_ID,
      SERVICE_GATEWAY_HEARTBEAT_INTERVAL: '300ms',
    }, { command: 'gateway', timeoutMs: 60_000 })
    let box = ''
    for (let i = 0; i < 20 && !box.includes(GATEWAY_ID); i++) {
      box = await statusBox()
      if (!box.includes(GATEWAY_ID)) await new Promise((r) => setTimeout(r, 250))
    }
    t.match(box, GATEWAY_ID, `the status box names the gateway (${box})`)
    t.notMatch(box, /\bnull\b|undefined|\[object/, 'no raw null')
    t.notMatch(box, /No gateway reports/, 'and no longer says none reports')
    t.match(await page.locator('#gs-pdp').innerText(), /embedded/, 'the PDP it reports')
    t.match(await page.locator('#gs-modes').innerText(), /EM-GUARD/, 'the mode its routes enforce')
    t.match(await page.locator('#gs-default-mode').innerText(), /EM-OBSERVE/, 'beside the default mode, named as such')
    const bundle = await page.locator('#gs-bundle').innerText()
    t.match(bundle, /fresh/, `its bundle is fresh (${bundle})`)
    t.match(bundle, /[0-9a-f]{12}/, 'with its revision')
    t.match(await page.locator('#gs-reporting').innerText(), /1 gateway reporting/, 'one gateway reports')
    await page.screenshot({ path: path.join(SHOTS, 'console-gateways-status.png') })

    await page.goto(`${origin}/console/gateways`)
    const row = page.locator(`#gateway-table tr[data-gateway="${GATEWAY_ID}"]`)
    const listed = await row.waitFor(WAIT).then(() => true, () => false)
    t.ok(listed, 'the Gateways page lists the gateway-only process')
    if (listed) {
      const text = await row.innerText()
      t.match(text, GATEWAY_ID, 'with its id')
      t.match(text, /reporting/, 'reporting')
      t.match(await row.locator('td.routes').innerText(), /\/mcp[\s\S]*mcp[\s\S]*EM-GUARD/, 'its routes with protocol and mode')
      t.match(await row.locator('td.pdp').innerText(), /embedded/, 'its PDP')
      t.match(await row.locator('td.bundle').innerText(), /current/, "the registry's current bundle")
      t.notMatch(text, /\bnull\b|undefined|NaN/, 'no raw null')
      const width = await page.evaluate(() => {
        const d = (globalThis as unknown as { document: { documentElement: { scrollWidth: number; clientWidth: number } } }).document
        return { scroll: d.documentElement.scrollWidth, client: d.documentElement.clientWidth }
      })
      t.ok(width.scroll <= width.client, `readable at 1280 px: no horizontal scrolling (${width.scroll} > ${width.client})`)
    }
    await page.screenshot({ path: path.join(SHOTS, 'console-gateways.png') })

    await page.goto(`${origin}/console/policies`)
    let line = ''
    for (let i = 0; i < 20 && !line.includes("the registry's current policies"); i++) {
      if (i > 0) await page.reload()
      line = await page.locator('#enforced-by').waitFor(WAIT).then(() => page.locator('#enforced-by').innerText(), () => '')
    }
    t.match(line, GATEWAY_ID, `the Policies page names the gateway that enforces the bundle (${line})`)
    t.match(line, "the registry's current policies", 'and says it has the current bundle')
  })

  await t.test('3. the live decisions of the gateway-only process', async (t) => {
    if (gateway === null) return t.fail('needs the gateway of step 2')
    const gw = (gateway as RunningService).gatewayUrl as string
    await page.goto(`${origin}/console/live`)
    await page.locator('#stream-state', { hasText: 'live' }).waitFor(WAIT).then(() => t.pass('the stream is live'), () => t.fail('the stream is live'))
    const send = async (urlPath: string): Promise<number> => {
      const res = await fetch(`${gw}${urlPath}`, { headers: { authorization: `Bearer ${agent.token}` } })
      await res.arrayBuffer()
      return res.status
    }
    t.equal(await send('/forecasts/today'), 200, 'an allowed request through the gateway')
    t.equal(await send('/admin/users'), 403, 'a denied one')
    const allowed = page.locator('#decisions-table tr[data-decision=ALLOW]', { hasText: '/forecasts/today' }).first()
    const denied = page.locator('#decisions-table tr[data-decision=DENY]', { hasText: '/admin/users' }).first()
    await allowed.waitFor(WAIT).then(() => t.pass('the ALLOW appears on the live page'), () => t.fail('the ALLOW appears on the live page'))
    await denied.waitFor(WAIT).then(() => t.pass('the DENY appears on the live page'), () => t.fail('the DENY appears on the live page'))
    if (await denied.count() > 0) t.match(await denied.innerText(), GATEWAY_ID, 'naming the gateway that decided')
    t.equal(await page.locator('#decisions-table td', { hasText: 'No decisions yet' }).count(), 0, 'no "No decisions yet"')
    // Decisions a gateway lost before reporting them reach the page as a gap naming the gateway.
    const lossy = {
      gateway_id: 'gw-lossy', version: '0.1.0', sent_at: new Date().toISOString(), events: [], dropped: { count: 7, from_seq: 3, to_seq: 9 },
    }
    t.equal((await admin.request('POST', '/v1/gateway/reports', { body: lossy })).status, 202)
    await page.locator('#gaps', { hasText: 'gw-lossy lost 7 decisions' }).waitFor(WAIT)
      .then(() => t.pass('the gap is shown'), () => t.fail('the gap is shown'))
    await page.screenshot({ path: path.join(SHOTS, 'console-gateways-live.png') })
  })

  await t.test('4. the gateway stops: stale on the Gateways page, none reporting in the status box', async (t) => {
    if (gateway === null) return t.fail('needs the gateway of step 2')
    t.equal(await (gateway as RunningService).stop(), 0, 'the gateway stops cleanly')
    await page.goto(`${origin}/console/gateways`)
    const row = page.locator(`#gateway-table tr[data-gateway="${GATEWAY_ID}"]`)
    let stale = false
    for (let i = 0; i < 30 && !stale; i++) {
      await page.click('#gateways-refresh')
      stale = await row.locator('td.state', { hasText: 'stale' }).waitFor({ timeout: 500 }).then(() => true, () => false)
    }
    t.ok(stale, 'the stopped gateway shows stale (three missed heartbeats)')
    await page.screenshot({ path: path.join(SHOTS, 'console-gateways-stale.png') })
    const box = await statusBox()
    t.match(box, /No gateway reports to this control plane/, `the status box says none reports now (${box})`)
    t.notMatch(box, /fresh/i, 'and shows no fresh bundle')
  })

  t.same(pageErrors, [], 'no uncaught script error')
  await browser.close()
})
