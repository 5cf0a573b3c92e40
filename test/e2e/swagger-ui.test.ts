/**
 * The interactive API documentation works in a real browser (Debian's chromium driven by
 * playwright-core): /swagger/index.html loads /swagger/doc.json, lists the operations, and "Try it out"
 * then "Execute" on GET /healthz shows the live answer. Every request the page makes goes to the
 * appliance itself (no CDN: the machine may have no internet).
 */
import t from 'tap'
import { existsSync } from 'node:fs'
import { chromium, type Browser } from 'playwright-core'
import { closedPort, startService } from '../helpers/appliance.js'

const CHROMIUM = '/usr/bin/chromium'

t.setTimeout(180_000)

t.test('the UI at /swagger/index.html loads the API description and runs a request', async (t) => {
  // CI installs chromium (.ci/run); a missing browser is a broken set-up, not a reason to skip.
  t.ok(existsSync(CHROMIUM), `${CHROMIUM} exists (apt-get install -y chromium)`)
  if (!existsSync(CHROMIUM)) return

  // The default issuer is http://localhost:<PORT>, and the description's host comes from it.
  const port = await closedPort()
  const appliance = await startService(t, { PORT: String(port), CA_ISSUER_URL: `http://localhost:${port}` })
  const origin = `http://localhost:${port}`

  const browser: Browser = await chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run'],
  })
  t.teardown(() => browser.close())
  const page = await browser.newPage()
  const requested: string[] = []
  const failed: string[] = []
  page.on('request', (request) => { if (!request.url().startsWith('data:')) requested.push(request.url()) })
  page.on('requestfailed', (request) => { failed.push(`${request.url()} ${request.failure()?.errorText ?? ''}`) })
  const responses: { url: string; status: number }[] = []
  page.on('response', (response) => { responses.push({ url: response.url(), status: response.status() }) })

  const opened = await page.goto(`${origin}/swagger/index.html`)
  t.equal(opened?.status(), 200, 'the page is served')

  const healthz = page.locator('.opblock.opblock-get').filter({ has: page.locator('[data-path="/healthz"]') })
  await healthz.first().waitFor({ timeout: 30_000 }).catch(() => {})
  const pageText = await page.locator('body').innerText()
  t.notMatch(pageText, 'Failed to load API definition', 'the API definition loads')
  t.ok(responses.some((r) => r.url === `${origin}/swagger/doc.json` && r.status === 200), 'the page fetched /swagger/doc.json')
  t.equal(await healthz.count(), 1, 'an operation block for GET /healthz')
  t.ok(await page.locator('[data-path="/v1/agents"]').count() > 0, 'and for the /v1/agents operations')
  if (await healthz.count() !== 1) return

  await healthz.locator('.opblock-summary').first().click()
  await healthz.getByRole('button', { name: 'Try it out' }).click()
  await healthz.getByRole('button', { name: 'Execute' }).click()
  const liveResponse = healthz.locator('.live-responses-table .response').first()
  await liveResponse.waitFor({ timeout: 30_000 })
  t.equal((await liveResponse.locator('.response-col_status').innerText()).trim(), '200', 'the live response code is 200')
  t.match(await liveResponse.locator('.response-col_description').innerText(), '"status": "ok"', 'with the answer of /healthz')

  t.same(requested.filter((url) => !url.startsWith(`${origin}/`)), [], 'every request went to the appliance (no CDN)')
  t.same(failed, [], 'no request failed')
  await page.close()
  t.equal(await appliance.stop(), 0)
})
