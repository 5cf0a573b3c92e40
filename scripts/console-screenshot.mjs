#!/usr/bin/env node
// Regenerates the README's console screenshots from a walkthrough run (docs/console.md "Using the
// console"): signs in to the running appliance's console with the operator key, opens the walkthrough's
// denied request on the Live decisions page and saves it, then saves the Gateways page. It needs only the
// running appliance, its key file and a chromium; it sends nothing through a gateway, so what it shows is
// what the walkthrough did.
//
// Usage: node scripts/console-screenshot.mjs [--url http://localhost:8080] [--key-file data/bootstrap-api-key]
//          [--out docs/images] [--operation "GET /admin/users"]
// CHROMIUM names the browser binary (default /usr/bin/chromium).
import { readFileSync, mkdirSync } from 'node:fs'
import path from 'node:path'
import { parseArgs } from 'node:util'
import { chromium } from 'playwright-core'

const WAIT = { timeout: 15_000 }

/** What stops the script: printed as one line saying what is missing, instead of a stack trace. */
class Stop extends Error {}
function fail(message) {
  throw new Stop(message)
}

let options
let origin
try {
  try {
    options = parseArgs({
      options: {
        url: { type: 'string', default: 'http://localhost:8080' },
        'key-file': { type: 'string', default: 'data/bootstrap-api-key' },
        out: { type: 'string', default: 'docs/images' },
        operation: { type: 'string', default: 'GET /admin/users' },
      },
    }).values
  } catch (error) {
    fail(error.message)
  }
  origin = options.url.replace(/\/+$/, '')
  await main()
} catch (error) {
  if (!(error instanceof Stop)) throw error
  console.error(`console-screenshot: ${error.message}`)
  process.exitCode = 1
}

async function main() {
  let key
  try {
    key = readFileSync(options['key-file'], 'utf8').trim()
  } catch (error) {
    fail(`cannot read the operator key from ${options['key-file']} (${error.code ?? error.message}): run it from the directory of \`npm start\`, or pass --key-file`)
  }
  if (key === '') fail(`${options['key-file']} is empty`)
  mkdirSync(options.out, { recursive: true })
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--no-first-run'],
  }).catch((error) => fail(`cannot start chromium: ${error.message.split('\n')[0]}`))
  try {
    await shoot(browser, key)
  } finally {
    await browser.close()
  }
}

async function shoot(browser, key) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } })
  const page = await context.newPage()
  await page.goto(`${origin}/console/`).catch((error) => fail(`cannot open ${origin}/console/ (${error.message.split('\n')[0]}): is the appliance running?`))
  await page.fill('#api-key', key)
  await page.click('button[type=submit]')
  const signedIn = await page.locator('#sign-out').waitFor(WAIT).then(() => true, () => false)
  if (!signedIn) fail(`the console did not sign in: ${(await page.locator('.error').allInnerTexts()).join(' | ') || 'no error shown'}`)

  // The Live decisions page, its stream live, with the walkthrough's denial opened (step 5).
  await page.goto(`${origin}/console/live`)
  await page.locator('#stream-state', { hasText: 'live' }).waitFor(WAIT)
  const row = page.locator('#decisions-table tr[data-decision=DENY]', { hasText: options.operation }).first()
  if (!await row.waitFor(WAIT).then(() => true, () => false)) {
    fail(`no DENY of "${options.operation}" on the Live decisions page: run the README walkthrough to step 5 first`)
  }
  await row.click()
  await page.locator('#decision-detail #detail-reason').waitFor(WAIT)
  await page.locator('#decision-detail', { hasText: 'pip_version' }).waitFor(WAIT)
  const live = path.join(options.out, 'console-live.png')
  await page.screenshot({ path: live })
  console.log(`wrote ${live}`)

  // The Gateways page, once the walkthrough's gateway is listed.
  await page.goto(`${origin}/console/gateways`)
  if (!await page.locator('#gateway-table tbody tr').first().waitFor(WAIT).then(() => true, () => false)) {
    fail('no gateway on the Gateways page: start the walkthrough\'s gateway (step 4) first')
  }
  const gateways = path.join(options.out, 'console-gateways.png')
  await page.screenshot({ path: gateways })
  console.log(`wrote ${gateways}`)

  // Ends the console session server-side rather than leaving it to the idle limit.
  await page.click('#sign-out')
  await page.locator('#api-key').waitFor(WAIT)
}
