/**
 * The console's audit trail page in a real browser (Debian's chromium driven by playwright-core): an
 * operator signs in (the sign-in itself is a record), sees the records of both organizations newest
 * first, filters by an action family and by target, and has the export link; an organization's member sees
 * only that organization's records and no export link. Screenshots go to test-output/screenshots/.
 */
import t from 'tap'
import { existsSync, mkdirSync } from 'node:fs'
import path from 'node:path'
import { chromium, type Browser, type Page } from 'playwright-core'
import { projectPath } from '../../src/core/paths.js'
import { auditSettled as settled, createOrg, startTestAdmin } from '../helpers/admin.js'

const CHROMIUM = '/usr/bin/chromium'
const SHOTS = projectPath('test-output', 'screenshots')
const WAIT = { timeout: 15_000 }

t.setTimeout(120_000)

const noChromium = existsSync(CHROMIUM) ? false : `${CHROMIUM} is not installed (apt-get install -y chromium); the console browser test needs it`


/** Re-reads the table until `ok` holds for its rows (the page reloads after a filter), or gives up. */
async function rowsWhen(page: Page, ok: (rows: { action: string; org: string; text: string }[]) => boolean): Promise<{ action: string; org: string; text: string }[]> {
  let current: { action: string; org: string; text: string }[] = []
  for (let i = 0; i < 150; i++) {
    current = await rows(page).catch(() => [])
    if (ok(current)) return current
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  return current
}

async function signIn(page: Page, origin: string, key: string): Promise<boolean> {
  await page.goto(`${origin}/console/`)
  await page.fill('#api-key', key)
  await page.click('button[type=submit]')
  return page.locator('#sign-out').waitFor(WAIT).then(() => true, () => false)
}

async function rows(page: Page): Promise<{ action: string; org: string; text: string }[]> {
  const locator = page.locator('#audit-table tbody tr')
  const out: { action: string; org: string; text: string }[] = []
  for (let i = 0; i < await locator.count(); i++) {
    const row = locator.nth(i)
    out.push({ action: (await row.getAttribute('data-action')) ?? '', org: (await row.getAttribute('data-org')) ?? '', text: await row.innerText() })
  }
  return out
}

t.test('the audit trail page: records, filters, export link; a member sees only its organization', { skip: noChromium }, async (t) => {
  mkdirSync(SHOTS, { recursive: true })
  const admin = await startTestAdmin(t, { SERVICE_RATE_LIMIT_PER_MINUTE: '100000' })
  const origin = admin.url
  const a = await createOrg(admin, 'audit-browser-a')
  const b = await createOrg(admin, 'audit-browser-b')
  const agentA = (await admin.request('POST', '/v1/agents', { key: a.key, body: { name: 'browser-audited-a' } })).body.data
  await admin.request('POST', '/v1/agents', { key: b.key, body: { name: 'browser-audited-b' } })
  const memberA = (await admin.request('POST', '/v1/keys', { key: a.key, body: { name: 'member a', role: 'member' } })).body.data.key as string

  const browser: Browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run'],
  })
  t.teardown(() => browser.close())
  const pageErrors: string[] = []

  await t.test('an operator sees every record and can export', async (t) => {
    const page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage()
    page.on('pageerror', (error) => pageErrors.push(error.message))
    t.ok(await signIn(page, origin, admin.operatorKey), 'signed in')
    await settled(admin)
    await page.click('nav.sidebar a:has-text("Audit trail")')
    await page.locator('#audit-table tbody tr').first().waitFor(WAIT)
    const all = await rows(page)
    t.equal(all[0]?.action, 'console.sign_in', 'the newest record is this sign-in')
    const [signInRecord] = await admin.database.db.query<{ target: string | null; actor_id: string | null }>(`SELECT target, actor_id FROM audit_records WHERE action = 'console.sign_in' ORDER BY seq DESC LIMIT 1`)
    const [session] = await admin.database.db.query<{ id: string }>('SELECT id FROM console_sessions LIMIT 1')
    t.ok(signInRecord?.target !== null && signInRecord?.target === signInRecord?.actor_id, 'its target is the key that signed in')
    t.not(signInRecord?.target, session?.id, 'not the session\'s row id')
    t.ok(all.some((r) => r.action === 'organization.create'), 'organizations created')
    t.same(all.filter((r) => r.action === 'agent.create').map((r) => r.org).sort(), [a.orgId, b.orgId].sort(), 'both organizations\' agents')
    t.ok(await page.locator('#audit-export').isVisible(), 'the export link')
    await page.screenshot({ path: path.join(SHOTS, 'console-audit.png') })

    await page.fill('#audit-action', 'agent.*')
    await page.click('#audit-filters button[type=submit]')
    const family = await rowsWhen(page, (r) => r.length > 0 && r.every((row) => row.action.startsWith('agent.')))
    t.same(family.map((r) => r.action), ['agent.create', 'agent.create'], 'the action family filter')
    await page.fill('#audit-action', '')
    await page.fill('#audit-target', agentA.id)
    await page.click('#audit-filters button[type=submit]')
    const targeted = await rowsWhen(page, (r) => r.length === 1)
    t.match(targeted[0]?.text ?? '', /agent\.create/, 'the target filter finds the agent\'s record')
    await page.fill('#audit-target', 'nothing-like-this')
    await page.click('#audit-filters button[type=submit]')
    await page.locator('#audit-empty').waitFor(WAIT).then(() => t.pass('an empty result says so'), () => t.fail('an empty result says so'))
  })

  await t.test('a member sees its organization\'s records only, without the export', async (t) => {
    const page = await (await browser.newContext({ viewport: { width: 1280, height: 800 } })).newPage()
    page.on('pageerror', (error) => pageErrors.push(error.message))
    t.ok(await signIn(page, origin, memberA), 'signed in')
    await settled(admin)
    await page.goto(`${origin}/console/audit`)
    await page.locator('#audit-table tbody tr').first().waitFor(WAIT)
    const mine = await rows(page)
    t.ok(mine.some((r) => r.action === 'agent.create'), 'org A\'s agent')
    t.ok(mine.every((r) => r.org === a.orgId), 'every record is org A\'s')
    const agents = mine.filter((r) => r.action === 'agent.create')
    t.equal(agents.length, 1, 'one agent record: org A\'s')
    t.equal(await page.locator('#audit-export').count(), 0, 'no export link')
    await page.screenshot({ path: path.join(SHOTS, 'console-audit-member.png') })
  })
  t.same(pageErrors, [], 'no script errors')
})
