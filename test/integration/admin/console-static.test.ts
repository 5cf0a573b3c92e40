/**
 * The admin plane serves the operator console (docs/console.md "Security headers"): /console redirects,
 * /console/ and client-side routes answer index.html, the hashed assets load, every answer carries the
 * console's headers, the CSP allows no inline script or style, the page holds no secret, an unknown asset
 * is 404, and a missing build is a clear 404 rather than a crash. Needs `npm run build` (dist/console).
 */
import Fastify from 'fastify'
import t, { type Test } from 'tap'
import { existsSync, mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { CONSOLE_CSP, consolePageRoutes } from '../../../src/admin/routes/console-pages.js'
import { projectPath } from '../../../src/core/paths.js'
import { startTestAdmin } from '../../helpers/admin.js'

const EXPECTED_CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
  + "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

function checkSecurityHeaders(t: Test, headers: Headers, what: string): void {
  t.equal(headers.get('content-security-policy'), EXPECTED_CSP, `${what}: the console CSP`)
  t.equal(headers.get('x-content-type-options'), 'nosniff', `${what}: nosniff`)
  t.equal(headers.get('x-frame-options'), 'DENY', `${what}: X-Frame-Options DENY`)
  t.equal(headers.get('referrer-policy'), 'no-referrer', `${what}: Referrer-Policy no-referrer`)
}

t.test('the admin plane serves the built console with its security headers', async (t) => {
  t.ok(existsSync(projectPath('dist', 'console', 'index.html')), 'dist/console/index.html exists (npm run build writes it)')
  const admin = await startTestAdmin(t)
  const get = (urlPath: string): Promise<Response> => fetch(`${admin.url}${urlPath}`, { redirect: 'manual' })

  t.equal(CONSOLE_CSP, EXPECTED_CSP, 'the exported policy is the documented one')
  t.notMatch(CONSOLE_CSP, /unsafe-inline|unsafe-eval|\*/, 'no unsafe-inline, unsafe-eval or wildcard')
  t.match(CONSOLE_CSP, /frame-ancestors 'none'/)

  const redirect = await get('/console')
  t.equal(redirect.status, 301, '/console redirects')
  t.equal(redirect.headers.get('location'), '/console/')
  checkSecurityHeaders(t, redirect.headers, '/console')

  const index = await get('/console/')
  t.equal(index.status, 200, '/console/ answers')
  t.match(index.headers.get('content-type'), /^text\/html; charset=utf-8/)
  t.equal(index.headers.get('cache-control'), 'no-store', 'the HTML is never cached')
  checkSecurityHeaders(t, index.headers, '/console/')
  const html = await index.text()

  // No inline script or style: every <script> has a src, no <style> element, no style or on* attributes.
  const scripts = [...html.matchAll(/<script\b([^>]*)>([\s\S]*?)<\/script>/gi)]
  t.equal(scripts.length, 1, 'one script element')
  for (const script of scripts) {
    t.match(script[1], /\bsrc="\/console\/assets\/[A-Za-z0-9_-]+\.js"/, 'the script is the hashed bundle')
    t.equal((script[2] as string).trim(), '', 'with no inline code')
  }
  t.notMatch(html, /<style\b/i, 'no <style> element')
  t.notMatch(html, /\sstyle\s*=/i, 'no style attribute')
  t.notMatch(html, /\son[a-z]+\s*=/i, 'no inline event handler')
  t.notMatch(html, /https?:\/\//i, 'nothing from another origin (no CDN, no external font)')
  // No secret: neither this appliance's operator key nor any key-shaped or token-shaped string.
  t.notOk(html.includes(admin.operatorKey), 'the operator key is not in the page')
  t.notMatch(html, /sk_[A-Za-z0-9_-]{20,}/, 'no API key in the page')
  t.notMatch(html, /eyJ[A-Za-z0-9_-]{10,}\./, 'no JWT in the page')

  const assetPaths = [...html.matchAll(/(?:src|href)="(\/console\/assets\/[^"]+)"/g)].map((m) => m[1] as string)
  t.equal(assetPaths.length, 2, 'the page names one script and one stylesheet')
  for (const assetPath of assetPaths) {
    const asset = await get(assetPath)
    t.equal(asset.status, 200, `${assetPath} loads`)
    t.match(asset.headers.get('content-type'), assetPath.endsWith('.js') ? /^text\/javascript/ : /^text\/css/, 'with its type')
    t.match(asset.headers.get('cache-control'), /max-age=31536000/, 'hashed assets are cached long')
    t.match(asset.headers.get('cache-control'), /immutable/)
    checkSecurityHeaders(t, asset.headers, assetPath)
    const body = await asset.text()
    t.ok(body.length > 100, 'with content')
    t.notOk(body.includes(admin.operatorKey), 'no secret in the asset')
    if (assetPath.endsWith('.css')) t.notMatch(body, /@import|url\(\s*['"]?https?:/i, 'the stylesheet loads nothing else')
  }

  for (const route of ['/console/agents', '/console/agents/3d0f2f52-1111-4222-8333-444455556666', '/console/policies', '/console/live', '/console/keys']) {
    const page = await get(route)
    t.equal(page.status, 200, `${route} answers the page (client-side route)`)
    t.equal(await page.text(), html, 'the same index.html')
    checkSecurityHeaders(t, page.headers, route)
  }

  for (const unknown of ['/console/assets/app-NOPE0000.js', '/console/assets/index.html', '/console/assets/..%2f..%2fpackage.json',
    '/console/assets/%2e%2e%2findex.html', '/console/assets/sub/app.js', '/console/assets/app.map', '/console/assets/']) {
    const res = await get(unknown)
    t.equal(res.status, 404, `${unknown} is 404`)
    const body = await res.json() as { error?: string }
    t.equal(body.error, 'not_found', 'with the error shape')
    t.equal(res.headers.get('content-security-policy'), EXPECTED_CSP, 'and the CSP')
  }

  const head = await fetch(`${admin.url}/console/`, { method: 'HEAD' })
  t.equal(head.status, 200, 'HEAD works')
  const post = await fetch(`${admin.url}/console/`, { method: 'POST' })
  t.equal(post.status, 404, 'nothing but GET and HEAD')
})

t.test('without a build the console routes answer 404 with a clear message', async (t) => {
  const app = Fastify()
  t.teardown(() => app.close())
  consolePageRoutes(app, { directory: path.join(mkdtempSync(path.join(tmpdir(), 'console-missing-')), 'console') })
  for (const url of ['/console/', '/console/agents']) {
    const res = await app.inject({ method: 'GET', url })
    t.equal(res.statusCode, 404, `${url}: 404`)
    t.match(res.json(), { error: 'not_found', message: /console is not built.*npm run build/ })
    t.equal(res.headers['content-security-policy'], EXPECTED_CSP)
    t.equal(res.headers['cache-control'], 'no-store')
  }
  const asset = await app.inject({ method: 'GET', url: '/console/assets/app-ABC.js' })
  t.equal(asset.statusCode, 404)
  const redirect = await app.inject({ method: 'GET', url: '/console' })
  t.equal(redirect.statusCode, 301, 'the redirect needs no build')
})
