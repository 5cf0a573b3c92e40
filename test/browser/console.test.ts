/**
 * The operator console in a real browser (Debian's chromium driven by playwright-core) against an
 * appliance started as users start it (`agent-trust serve` with a gateway in front of a recording
 * upstream): the acceptance flow of docs/console.md, step by step.
 *
 *  1. the sign-in page loads, with nothing from another origin and no inline script or style refused,
 *     and without a failed request or console error (no session is a 200 answer, not a 401)
 *  2. sign in with an API key: a session cookie (HttpOnly, SameSite=Strict), the key kept nowhere
 *  3. create an agent; agents of one name are  6. a DENY through the gateway shows in the live view
 *     told apart (domain, short id) in the list and the dropdowns
 *  4. issue a badge and revoke it             7. the keys & operations page
 *  5. propose a policy, see its diff,         8. a member sees no write controls; the API refuses anyway
 *     simulate (operation, MCP, A2A), approve 9. a forged CSRF write is refused
 *                                            10. sign-out ends the session
 *                                            11. a dashboard user signs in with an identity-provider token
 *
 * Steps that need a console session say so when there is none, instead of timing out one by one.
 * Screenshots of the main pages (1280x800) go to test-output/screenshots/ (gitignored).
 * Without /usr/bin/chromium the test is skipped with that reason; CI installs chromium (.ci/run).
 */
import t, { type Test } from 'tap'
import { existsSync, mkdirSync, mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core'
import { projectPath } from '../../src/core/paths.js'
import { generateApiKeySecret } from '../../src/core/api-key.js'
import { adminCall, startService } from '../helpers/appliance.js'
import { clerkEvents, startIdentityProvider, TEST_ISSUER } from '../helpers/identity-provider.js'
import { prepareWorkspace } from '../helpers/workspace.js'
import { startUpstream } from '../helpers/upstream-server.js'

const CHROMIUM = '/usr/bin/chromium'
const SHOTS = projectPath('test-output', 'screenshots')
const WAIT = { timeout: 15_000 }
const COOKIE = 'agent_trust_console'

const POLICY = `version: "1"
min_trust_level: REG
operations:
  - pattern: "GET /forecasts/**"
    min_trust_level: REG
  - pattern: "* /admin/**"
    min_trust_level: DV
mcp_tools:
  - tool: "delete_*"
    allowed_dids: []
`

t.setTimeout(300_000)

const noChromium = existsSync(CHROMIUM) ? false : `${CHROMIUM} is not installed (apt-get install -y chromium); the console browser test needs it`

t.test('the operator console in headless Chromium', { skip: noChromium }, async (t) => {
  mkdirSync(SHOTS, { recursive: true })
  // The embedded PDP decides for one workspace, known before the start (as in test/e2e/gateway-embedded).
  const dataDir = mkdtempSync(path.join(tmpdir(), 'svc-browser-console-'))
  const operatorKey = generateApiKeySecret()
  const { orgId, databaseEnv } = await prepareWorkspace(t, dataDir, operatorKey)
  const upstream = await startUpstream(t)
  const idp = await startIdentityProvider(t)
  const appliance = await startService(t, {
    SERVICE_AUTH_JWKS_URL: idp.jwksUrl,
    SERVICE_AUTH_ISSUER: TEST_ISSUER,
    CLERK_WEBHOOK_SECRET: idp.webhookSecret,
    ...databaseEnv,
    SERVICE_DATA_DIR: dataDir,
    SERVICE_BOOTSTRAP_API_KEY: operatorKey,
    SERVICE_UPSTREAM_URL: upstream.url,
    SERVICE_EMBEDDED_PDP: 'true',
    SERVICE_WORKSPACE: orgId,
    SERVICE_ENFORCEMENT_MODE: 'EM-STRICT',
  }, { timeoutMs: 120_000 })
  const origin = appliance.adminUrl
  const browser: Browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run'],
  })
  t.teardown(() => browser.close())

  const admin = await watchedPage(browser, origin)
  const page = admin.page
  const state: { signedIn: boolean; agentId: string | null; agentName: string; gatewayToken: string | null } = {
    signedIn: false, agentId: null, agentName: `console-agent-${Date.now()}`, gatewayToken: null,
  }

  /** A step that needs the admin session: without one it fails at once with the reason. */
  const needsSession = (t: Test): boolean => {
    if (!state.signedIn) t.fail('needs a console session: sign-in (POST /v1/console/session) did not succeed')
    return state.signedIn
  }

  await t.test('1. the sign-in page', async (t) => {
    const probe = page.waitForResponse((r) => r.url() === `${origin}/v1/console/session` && r.request().method() === 'GET', WAIT)
    const response = await page.goto(`${origin}/console/`)
    t.equal(response?.status(), 200)
    const answer = await probe
    t.equal(answer.status(), 200, 'the session probe is answered 200 before sign-in')
    t.same(await answer.json(), { success: true, data: null }, 'with data null: no session')
    await page.locator('#api-key').waitFor(WAIT)
    t.equal(await page.locator('#api-key').getAttribute('type'), 'password', 'the key field is a password field')
    t.same(admin.failures(), [], 'the page load logs no failed request and no console error')
    await page.screenshot({ path: path.join(SHOTS, 'console-sign-in.png') })
  })

  await t.test('2. signing in with an API key', async (t) => {
    await page.fill('#api-key', appliance.operatorKey)
    await page.click('button[type=submit]')
    const signedIn = await page.locator('#sign-out').waitFor(WAIT).then(() => true, () => false)
    if (!signedIn) {
      const shown = await page.locator('.error').allInnerTexts().catch(() => [])
      t.fail(`the console did not sign in (POST /v1/console/session): ${shown.join(' | ') || 'no error shown'}`)
      return
    }
    state.signedIn = true
    t.match(page.url(), `${origin}/console/agents`, 'the agents page after sign-in')
    t.notMatch(page.url(), appliance.operatorKey, 'the key is not in the URL')
    // The callback runs in the page (this file is compiled without the DOM library, hence `globalThis`).
    const storage = await page.evaluate(() => {
      const w = globalThis as unknown as { localStorage: object; sessionStorage: object; document: { cookie: string } }
      return JSON.stringify({ local: { ...w.localStorage }, session: { ...w.sessionStorage }, cookie: w.document.cookie })
    })
    t.notMatch(storage, appliance.operatorKey, 'nor in localStorage, sessionStorage or a script-readable cookie')
    t.notMatch(storage, COOKIE, 'the session cookie is not readable by scripts')
    const cookie = (await admin.context.cookies(origin)).find((c) => c.name === COOKIE)
    t.ok(cookie, `the ${COOKIE} cookie is set`)
    t.equal(cookie?.httpOnly, true, 'HttpOnly')
    t.equal(cookie?.sameSite, 'Strict', 'SameSite=Strict')
    t.equal(cookie?.path, '/', 'Path=/')
    t.equal(await page.locator('[data-testid=role]').innerText(), 'admin', 'the principal is shown')
  })

  await t.test('3. creating an agent', async (t) => {
    if (!needsSession(t)) return
    await page.locator('#agents-table').waitFor(WAIT)
    await page.screenshot({ path: path.join(SHOTS, 'console-agents.png') })
    await page.click('#new-agent')
    await page.fill('#agent-name', state.agentName)
    await page.fill('#agent-domain', 'weather.example.com')
    await page.fill('#agent-description', 'Created by the console browser test')
    await page.click('#create-agent button[type=submit]')
    await page.waitForURL(/\/console\/agents\/[0-9a-f-]{36}$/, WAIT).catch(() => {})
    const match = /\/console\/agents\/([0-9a-f-]{36})$/.exec(page.url())
    t.ok(match, 'the new agent\'s page opens')
    if (match === null) return
    state.agentId = match[1] as string
    t.equal(await page.locator('#agent-name-title').innerText(), state.agentName)
    t.equal(await page.locator('#agent-status').innerText(), 'enabled')
    t.match(await page.locator('#trust-level').innerText(), '1 (REG)')
    const stored = await adminCall(origin, appliance.operatorKey, 'GET', `/v1/agents/${state.agentId}`)
    t.equal(stored.body?.data?.name, state.agentName, 'the agent is in the registry')
    // The search box (`q`) finds it.
    await page.goto(`${origin}/console/agents`)
    await page.fill('#agent-search', state.agentName.slice(-8))
    await page.press('#agent-search', 'Enter')
    await page.locator('#agents-table tbody tr', { hasText: state.agentName }).waitFor(WAIT).then(
      () => t.pass('the search finds it'), () => t.fail('the search (GET /v1/agents?q=) finds it'))
  })

  await t.test('3b. agents of one name are told apart wherever the console lists or offers them', async (t) => {
    if (!needsSession(t)) return
    if (state.agentId === null) return t.fail('needs the agent of step 3')
    const twins: { id: string; domain: string | null }[] = [{ id: state.agentId, domain: 'weather.example.com' }]
    for (const domain of ['other.example.com', null]) {
      const made = await adminCall(origin, appliance.operatorKey, 'POST', '/v1/agents', { name: state.agentName, ...(domain === null ? {} : { domain }) })
      t.equal(made.status, 201, `the API accepts the name again (${domain ?? 'no domain'})`)
      twins.push({ id: made.body.data.id as string, domain })
    }
    await page.goto(`${origin}/console/agents`)
    await page.fill('#agent-search', state.agentName)
    await page.press('#agent-search', 'Enter')
    const rows = page.locator('#agents-table tbody tr', { hasText: state.agentName })
    await rows.nth(2).waitFor(WAIT).catch(() => {})
    const listed = await rows.evaluateAll((trs) => trs.map((tr) => ({
      id: tr.getAttribute('data-agent-id'), shortId: tr.querySelector('.agent-short-id')?.textContent ?? '', text: (tr as unknown as { innerText: string }).innerText,
    })))
    t.equal(listed.length, 3, 'three agents of the name are listed')
    for (const twin of twins) {
      const row = listed.find((r) => r.id === twin.id)
      t.ok(row !== undefined && row.shortId.length >= 8 && twin.id.startsWith(row.shortId), `the list shows the start of ${twin.id}`)
    }
    t.equal(new Set(listed.map((r) => r.text)).size, 3, 'no two rows read the same')
    await page.screenshot({ path: path.join(SHOTS, 'console-agents-same-name.png') })

    await page.goto(`${origin}/console/policies`)
    await page.locator('#scope-type').waitFor(WAIT)
    await page.selectOption('#scope-type', 'agent')
    for (const select of ['#scope-agent', '#resolved-agent', '#sim-agent']) {
      await page.locator(`${select} option[value="${twins[2]!.id}"]`).waitFor({ state: 'attached', ...WAIT }).catch(() => {})
      const options = await page.locator(`${select} option`).evaluateAll((os) => os.map((o) => ({ value: o.getAttribute('value'), text: o.textContent ?? '' })))
      const offered = twins.map((twin) => options.find((o) => o.value === twin.id)?.text ?? '')
      t.equal(new Set(offered).size, 3, `${select}: three different entries (${offered.join(' | ')})`)
      twins.forEach((twin, i) => {
        t.ok(offered[i]!.startsWith(state.agentName) && offered[i]!.includes(twin.id.slice(0, 8)), `${select}: the name and the short id`)
        if (twin.domain !== null) t.ok(offered[i]!.includes(twin.domain), `${select}: and the domain ${twin.domain}`)
      })
    }
  })

  await t.test('4. issuing and revoking a badge', async (t) => {
    if (!needsSession(t)) return
    if (state.agentId === null) return t.fail('needs the agent of step 3')
    await page.goto(`${origin}/console/agents/${state.agentId}`)
    await page.locator('#issue-badge').waitFor(WAIT)
    // One badge to revoke, one for the gateway in step 6.
    const issue = async (previous: string | null): Promise<{ jti: string; token: string }> => {
      await page.fill('#badge-ttl', '3600')
      await page.click('#issue-badge button[type=submit]')
      // The notice of the previous badge is replaced: wait for a new jti, not just a notice.
      await (previous === null ? page.locator('#issued-jti') : page.locator('#issued-jti', { hasNotText: previous })).waitFor(WAIT)
      return { jti: await page.locator('#issued-jti').innerText(), token: await page.locator('#issued-token').inputValue() }
    }
    const first = await issue(null)
    t.match(first.token, /^eyJ/, 'the badge token is shown once')
    const second = await issue(first.jti)
    t.not(second.jti, first.jti, 'a second badge')
    state.gatewayToken = second.token
    const row = page.locator(`#badges-table tr[data-jti="${first.jti}"]`)
    const listed = await row.waitFor(WAIT).then(() => true, () => false)
    t.ok(listed, 'the badge is listed (GET /v1/agents/{id}/badges)')
    if (!listed) return
    await row.locator('button[name=revoke]').click()
    await page.fill('#revoke-reason', 'rotated by the console test')
    await page.click('#revoke-form button[type=submit]')
    await row.locator('text=revoked').waitFor(WAIT).then(() => t.pass('the row says revoked'), () => t.fail('the row says revoked'))
    t.match(await row.innerText(), 'rotated by the console test', 'with the reason')
    const status = await fetch(`${origin}/v1/badges/${first.jti}/status`).then((r) => r.json()) as { revoked?: boolean; reason?: string; data?: { revoked?: boolean; reason?: string } }
    const s = status.data ?? status
    t.equal(s.revoked, true, 'the badge status says revoked')
    t.equal(s.reason, 'rotated by the console test')
    await page.screenshot({ path: path.join(SHOTS, 'console-agent.png'), fullPage: false })
  })

  await t.test('5. proposing a policy, its diff, simulation and approval', async (t) => {
    if (!needsSession(t)) return
    if (state.agentId === null) return t.fail('needs the agent of step 3')
    await page.goto(`${origin}/console/policies`)
    await page.locator('#policy-yaml').waitFor(WAIT)
    await page.fill('#policy-yaml', POLICY)
    await page.click('#propose-form button[type=submit]')
    const proposal = page.locator('#proposals .proposal').first()
    await proposal.waitFor(WAIT)
    const added = await proposal.locator('.diff-add').allInnerTexts()
    t.ok(added.some((line) => line.includes('pattern: "* /admin/**"')), 'the diff shows the added admin rule')
    t.ok(added.some((line) => line.includes('tool: "delete_*"')), 'and the MCP tool rule')
    await page.screenshot({ path: path.join(SHOTS, 'console-policies.png') })

    // Simulate with the proposal before approving: an HTTP operation, an MCP tool, an A2A method.
    await proposal.locator('text=Simulate with this proposal').click()
    await page.selectOption('#sim-agent', state.agentId)
    const simulate = async (): Promise<{ decision: string; reason: string }> => {
      await page.click('#simulate-form button[type=submit]')
      await page.locator('#sim-decision').waitFor(WAIT)
      return { decision: await page.locator('#sim-decision').innerText(), reason: await page.locator('#sim-reason').innerText() }
    }
    await page.selectOption('#sim-kind', 'operation')
    await page.fill('#sim-operation', 'GET /admin/users')
    const denied = await simulate()
    t.equal(denied.decision, 'DENY', 'REG may not reach /admin with the proposal')
    t.not(denied.reason, '—', `a reason is shown (${denied.reason})`)
    await page.fill('#sim-operation', 'GET /forecasts/today')
    t.equal((await simulate()).decision, 'ALLOW', 'forecasts are open')
    await page.selectOption('#sim-kind', 'mcp')
    await page.fill('#sim-tool', 'delete_everything')
    t.equal((await simulate()).decision, 'DENY', 'MCP tools/call delete_* is refused')
    await page.selectOption('#sim-kind', 'a2a')
    await page.fill('#sim-a2a-method', 'message/send')
    t.match((await simulate()).decision, /^(ALLOW|DENY)$/, 'an A2A method is decided')

    await proposal.locator('button[name=approve]').click()
    await page.locator('#active-policy pre', { hasText: '* /admin/**' }).waitFor(WAIT).then(
      () => t.pass('the approved text is the active document'), () => t.fail('the approved text is the active document'))
    await page.locator('#proposals .proposal').first().waitFor({ state: 'detached', ...WAIT }).then(
      () => t.pass('no proposal left pending'), () => t.fail('no proposal left pending'))
    await page.locator('#policy-history td', { hasText: 'active' }).first().waitFor(WAIT).then(
      () => t.pass('history lists the active version'), () => t.fail('history lists the active version'))
    // What the console shows is what the gateway enforces: the bundle revision it has, against the registry's.
    let inSync = false
    for (let i = 0; i < 25 && !inSync; i++) {
      await page.reload()
      inSync = await page.locator('#enforced-by', { hasText: "the registry's current policies" }).waitFor({ timeout: 2000 }).then(() => true, () => false)
    }
    t.ok(inSync, "the policies page says the gateway enforces the registry's current bundle")
  })

  await t.test('6. a DENY through the gateway shows in the live view with its reason', async (t) => {
    if (!needsSession(t)) return
    if (state.gatewayToken === null) return t.fail('needs the badge of step 4')
    await page.goto(`${origin}/console/live`)
    await page.locator('#stream-state', { hasText: 'live' }).waitFor(WAIT).then(
      () => t.pass('the decision stream is live (GET /v1/gateway/decisions/stream)'), () => t.fail('the decision stream is live (GET /v1/gateway/decisions/stream)'))
    // The approval reaches the gateway by NOTIFY; ask until the gateway refuses.
    let status = 0
    for (let i = 0; i < 50 && status !== 403; i++) {
      const res = await fetch(`${appliance.gatewayUrl}/admin/console-test`, { headers: { authorization: `Bearer ${state.gatewayToken}` } })
      status = res.status
      await res.arrayBuffer()
      if (status !== 403) await new Promise((r) => setTimeout(r, 200))
    }
    t.equal(status, 403, 'the gateway refuses GET /admin/console-test')
    const row = page.locator('#decisions-table tr[data-decision=DENY]', { hasText: '/admin/console-test' }).first()
    const shown = await row.waitFor(WAIT).then(() => true, () => false)
    t.ok(shown, 'the DENY appears in the live table')
    if (!shown) return
    const reason = (await row.locator('td.reason').innerText()).trim()
    t.ok(reason !== '' && reason !== '—', `with its reason (${reason})`)
    await page.selectOption('#filter-decision', 'ALLOW')
    await page.locator('#decisions-table tr[data-decision=DENY]').first().waitFor({ state: 'detached', ...WAIT }).then(
      () => t.pass('the decision filter hides it'), () => t.fail('the decision filter hides it'))
    await page.selectOption('#filter-decision', 'DENY')
    await row.click()
    await page.locator('#decision-detail #detail-reason').waitFor(WAIT)
    t.equal((await page.locator('#detail-reason').innerText()).trim(), reason, 'the detail has the same reason')
    t.match(await page.locator('#decision-detail').innerText(), /pip_version/, 'and the PDP request (GET /v1/gateway/decisions/{id})')
    await page.screenshot({ path: path.join(SHOTS, 'console-live.png') })
  })

  await t.test('7. keys and operations', async (t) => {
    if (!needsSession(t)) return
    await page.goto(`${origin}/console/keys`)
    await page.locator('#keys-table tbody tr').first().waitFor(WAIT)
    t.ok(await page.locator('#keys-table tbody tr').count() >= 1, 'the API keys are listed')
    await page.fill('#key-name', 'console-test-key')
    await page.click('#create-key button[type=submit]')
    await page.locator('#created-key-secret').waitFor(WAIT)
    t.match(await page.locator('#created-key-secret').inputValue(), /^sk_/, 'a new key\'s secret is shown once')
    await page.locator('#gateway-status').waitFor(WAIT).then(() => t.pass('gateway status (GET /v1/gateway/status)'), () => t.fail('gateway status (GET /v1/gateway/status)'))
    await page.screenshot({ path: path.join(SHOTS, 'console-keys.png') })
    await page.reload()
    await page.locator('#keys-table').waitFor(WAIT)
    t.equal(await page.locator('#created-key-secret').count(), 0, 'the secret is gone after a reload')

    // An operator's console reaches across organizations as the API does: it lists them all and creates one.
    await page.fill('#org-name', 'console-created-org')
    await page.click('#create-org button[type=submit]')
    await page.locator('#created-org-key').waitFor(WAIT)
    const orgKey = await page.locator('#created-org-key').inputValue()
    t.match(orgKey, /^sk_/, "the new organization's first admin key is shown once")
    await page.locator('#orgs-table td', { hasText: 'console-created-org' }).waitFor(WAIT).then(
      () => t.pass('the new organization is listed'), () => t.fail('the new organization is listed'))
    const me = await fetch(`${origin}/v1/me`, { headers: { authorization: `Bearer ${orgKey}` } }).then((r) => r.json()) as { data: { org_name: string; role: string } }
    t.match(me.data, { org_name: 'console-created-org', role: 'admin' }, 'and its key works')
  })

  await t.test('8. a member sees no write controls and the API refuses the write anyway', async (t) => {
    const created = await adminCall(origin, appliance.operatorKey, 'POST', '/v1/keys', { name: 'console-member', role: 'member' })
    t.equal(created.status, 201, 'a member key (API, header credential)')
    const member = await watchedPage(browser, origin)
    t.teardown(() => member.context.close())
    await member.page.goto(`${origin}/console/`)
    await member.page.fill('#api-key', created.body.data.key as string)
    await member.page.click('button[type=submit]')
    const signedIn = await member.page.locator('#sign-out').waitFor(WAIT).then(() => true, () => false)
    if (!signedIn) return t.fail('needs a member console session: sign-in (POST /v1/console/session) did not succeed')
    t.equal(await member.page.locator('[data-testid=role]').innerText(), 'member')
    await member.page.locator('#agents-table').waitFor(WAIT)
    t.equal(await member.page.locator('#new-agent').count(), 0, 'no "New agent"')
    if (state.agentId !== null) {
      await member.page.goto(`${origin}/console/agents/${state.agentId}`)
      await member.page.locator('#badges-table').waitFor(WAIT)
      t.equal(await member.page.locator('#issue-badge, button[name=disable], button[name=enable], button[name=revoke]').count(), 0, 'no badge or status controls')
    }
    await member.page.goto(`${origin}/console/policies`)
    await member.page.locator('#policy-history').waitFor(WAIT)
    t.equal(await member.page.locator('#propose-form, button[name=approve], button[name=reject]').count(), 0, 'no propose, approve or reject')
    await member.page.goto(`${origin}/console/keys`)
    await member.page.locator('#keys-table').waitFor(WAIT)
    t.equal(await member.page.locator('#create-key, button[name=delete-key], #create-org').count(), 0, 'no key or organization controls')
    await member.page.locator('#orgs-table tbody tr').first().waitFor(WAIT)
    t.same(await member.page.locator('#orgs-table tbody tr td:first-child').allInnerTexts(), ['default'], 'a member sees its own organization only')
    await member.page.screenshot({ path: path.join(SHOTS, 'console-member-keys.png') })
    // The same write the hidden button would send, with the member's valid CSRF token: refused by role.
    const refused = await member.page.evaluate(async () => {
      const session = await fetch('/v1/console/session', { credentials: 'same-origin' }).then((r) => r.json()) as { data: { csrf_token: string } }
      const res = await fetch('/v1/agents', {
        method: 'POST', credentials: 'same-origin',
        headers: { 'content-type': 'application/json', 'x-csrf-token': session.data.csrf_token },
        body: JSON.stringify({ name: 'member-write' }),
      })
      return { status: res.status, body: await res.json() as { error?: string } }
    })
    t.equal(refused.status, 403, 'POST /v1/agents as a member is 403')
    t.equal(refused.body.error, 'forbidden')
  })

  await t.test('9. a forged CSRF write is refused', async (t) => {
    if (!needsSession(t)) return
    const attempts = await page.evaluate(async () => {
      const post = async (headers: Record<string, string>): Promise<{ status: number; error?: string }> => {
        const res = await fetch('/v1/agents', {
          method: 'POST', credentials: 'same-origin',
          headers: { 'content-type': 'application/json', ...headers },
          body: JSON.stringify({ name: 'forged-by-csrf' }),
        })
        return { status: res.status, error: (await res.json().catch(() => ({})) as { error?: string }).error }
      }
      return { forged: await post({ 'x-csrf-token': 'forged-token' }), missing: await post({}) }
    })
    t.same(attempts.forged, { status: 403, error: 'csrf_failed' }, 'a wrong X-CSRF-Token is 403 csrf_failed')
    t.same(attempts.missing, { status: 403, error: 'csrf_failed' }, 'no X-CSRF-Token is 403 csrf_failed')
    const agents = await adminCall(origin, appliance.operatorKey, 'GET', '/v1/agents?limit=500')
    t.notOk((agents.body?.data as { name: string }[] | undefined ?? []).some((a) => a.name === 'forged-by-csrf'), 'nothing was created')
  })

  await t.test('10. sign-out ends the session', async (t) => {
    if (!needsSession(t)) return
    const before = (await admin.context.cookies(origin)).find((c) => c.name === COOKIE)
    await page.goto(`${origin}/console/agents`)
    await page.click('#sign-out')
    await page.locator('#api-key').waitFor(WAIT).then(() => t.pass('back to sign-in'), () => t.fail('back to sign-in'))
    const after = await page.evaluate(async () => {
      const res = await fetch('/v1/console/session', { credentials: 'same-origin' })
      return { status: res.status, body: await res.json() as unknown }
    })
    t.same(after, { status: 200, body: { success: true, data: null } }, 'GET /v1/console/session answers no session after sign-out')
    t.notOk((await admin.context.cookies(origin)).some((c) => c.name === COOKIE && c.value !== ''), 'the cookie is cleared')
    if (before !== undefined) {
      const replay = await fetch(`${origin}/v1/me`, { headers: { cookie: `${COOKIE}=${before.value}` } })
      t.equal(replay.status, 401, 'the old cookie no longer authenticates (deleted server-side)')
      // A browser that still holds an ended session's cookie loads the sign-in page just as quietly.
      await admin.context.addCookies([before])
      const seen = admin.failures().length
      await page.goto(`${origin}/console/agents`)
      await page.locator('#api-key').waitFor(WAIT).then(() => t.pass('an ended session\'s cookie: the sign-in page'), () => t.fail('an ended session\'s cookie: the sign-in page'))
      t.same(admin.failures().slice(seen), [], 'with no failed request and no console error')
      t.notOk((await admin.context.cookies(origin)).some((c) => c.name === COOKIE && c.value !== ''), 'and the ended cookie is cleared')
    }
  })

  await t.test('11. a dashboard user signs in with an identity-provider session token', async (t) => {
    // The identity provider's webhook makes the organization, the user and the membership (docs/api.md §5).
    for (const event of [
      clerkEvents.organization('organization.created', 'org_console', 'IdP org'),
      clerkEvents.user('user.created', 'user_console', 'ada@example.com', 'Ada', 'L'),
      clerkEvents.membership('organizationMembership.created', 'org_console', 'user_console', 'org:admin', 'IdP org'),
    ]) {
      const delivery = idp.signWebhook(event)
      const res = await fetch(`${origin}/v1/webhooks/identity`, { method: 'POST', headers: { 'content-type': 'application/json', ...delivery.headers }, body: delivery.body })
      t.equal(res.status, 200, `webhook ${event.type}`)
    }
    const user = await watchedPage(browser, origin)
    t.teardown(() => user.context.close())
    await user.page.goto(`${origin}/console/`)
    await user.page.selectOption('#credential-kind', 'session_token')
    await user.page.fill('#api-key', await idp.signSession({ sub: 'user_console', org_id: 'org_console' }))
    await user.page.click('button[type=submit]')
    const signedIn = await user.page.locator('#sign-out').waitFor(WAIT).then(() => true, () => false)
    t.ok(signedIn, 'signed in with the token')
    if (!signedIn) return
    t.equal(await user.page.locator('[data-testid=role]').innerText(), 'admin', 'with the role the membership gives')
    t.match(await user.page.locator('nav, aside').first().innerText(), /IdP org/, 'in the organization of the membership')
    t.notOk((await user.context.cookies(origin)).some((c) => c.value.startsWith('eyJ')), 'the token itself is in no cookie')
    t.same(user.pageErrors(), [], 'no uncaught script error')
  })

  t.same(admin.foreign(), [], 'every request went to the appliance (no CDN, no external font)')
  t.same(admin.cspViolations(), [], 'no CSP violation (no inline script or style)')
  t.same(admin.pageErrors(), [], 'no uncaught script error')
  await browser.close()
  t.equal(await appliance.stop(), 0, 'the appliance stops cleanly')
})

/** A page in its own browser context (its own cookies), 1280x800, recording what goes wrong. */
async function watchedPage(browser: Browser, origin: string): Promise<{
  context: BrowserContext; page: Page; foreign(): string[]; cspViolations(): string[]; pageErrors(): string[]; failures(): string[]
}> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } })
  const page = await context.newPage()
  const foreign: string[] = []
  const csp: string[] = []
  const errors: string[] = []
  // What a user sees in the browser's console as a failure: error messages (every 4xx or 5xx answer is
  // one), answers of 400 and above, and requests that got no answer.
  const failures: string[] = []
  page.on('request', (request) => {
    const url = request.url()
    if (!url.startsWith(`${origin}/`) && !url.startsWith('data:')) foreign.push(url)
  })
  page.on('console', (message) => {
    if (/Content Security Policy/i.test(message.text())) csp.push(message.text())
    if (message.type() === 'error') failures.push(`console error: ${message.text()}`)
  })
  page.on('response', (response) => {
    if (response.status() >= 400) failures.push(`${response.request().method()} ${response.url()}: ${response.status()}`)
  })
  page.on('requestfailed', (request) => failures.push(`${request.method()} ${request.url()}: ${request.failure()?.errorText ?? 'failed'}`))
  page.on('pageerror', (error) => errors.push(error.message))
  return { context, page, foreign: () => foreign, cspViolations: () => csp, pageErrors: () => errors, failures: () => failures }
}

