/**
 * Serves the operator console built by scripts/build-console.mjs (docs/console.md): `/console` redirects
 * to `/console/`, every other `/console/*` path answers index.html (the console routes on the client),
 * and `/console/assets/<name>` the content-hashed bundle and stylesheet. The pages are public (the
 * console signs in through the API); every answer carries the console's security headers. When the
 * console was not built (`dist/console` absent) the routes answer 404 with a message saying so.
 */
import type { FastifyInstance, FastifyReply } from 'fastify'
import { readFile } from 'node:fs/promises'
import path from 'node:path'
import { projectPath } from '../../core/paths.js'

/** docs/console.md "Security headers". */
export const CONSOLE_CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ')

const SECURITY_HEADERS: Readonly<Record<string, string>> = {
  'content-security-policy': CONSOLE_CSP,
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cross-origin-opener-policy': 'same-origin',
  'cross-origin-resource-policy': 'same-origin',
}

/** The bundle's file names: esbuild's `[name]-[hash].ext`; nothing else (no dot segments, no slashes). */
const ASSET_NAME = /^[A-Za-z0-9_-]{1,100}\.(js|css)$/
const CONTENT_TYPES: Readonly<Record<string, string>> = {
  js: 'text/javascript; charset=utf-8',
  css: 'text/css; charset=utf-8',
}

export interface ConsolePagesOptions {
  /** Where the built console is; default `dist/console` of the project. */
  readonly directory?: string
}

export function consolePageRoutes(app: FastifyInstance, options: ConsolePagesOptions = {}): void {
  const directory = options.directory ?? projectPath('dist', 'console')
  const assets = path.join(directory, 'assets')
  // Public pages, like /swagger: the console authenticates through the API.
  const tags = ['console']
  const html = { description: 'the console page (text/html)', type: 'string' }
  const missing = { description: 'not found (or the console is not built)', type: 'object', properties: { error: { type: 'string' }, message: { type: 'string' } } }
  const page = {
    config: { auth: 'public' as const },
    schema: { tags, summary: 'The operator console page (docs/console.md)', produces: ['text/html'], response: { 200: html, 404: missing } },
  }
  const assetRoute = {
    config: { auth: 'public' as const },
    schema: {
      tags,
      summary: 'A content-hashed console asset (JS or CSS)',
      produces: ['text/javascript', 'text/css'],
      params: { type: 'object', required: ['name'], properties: { name: { type: 'string', maxLength: 200 } } },
      response: { 200: { description: 'the asset', type: 'string' }, 404: missing },
    },
  }
  const redirect = {
    config: { auth: 'public' as const },
    schema: { tags, summary: 'Redirects to /console/', response: { 301: { description: 'to /console/', type: 'null' } } },
  }

  const secure = (reply: FastifyReply): FastifyReply => reply.headers(SECURITY_HEADERS)

  const notBuilt = (reply: FastifyReply): FastifyReply => secure(reply).code(404).header('cache-control', 'no-store').send({
    error: 'not_found',
    message: 'The operator console is not built on this appliance: run `npm run build` (it writes dist/console).',
  })

  // index.html is small and read per request: a rebuild is served without a restart, and a missing build
  // is reported rather than cached.
  const index = async (reply: FastifyReply): Promise<FastifyReply> => {
    let html: Buffer
    try {
      html = await readFile(path.join(directory, 'index.html'))
    } catch {
      return notBuilt(reply)
    }
    return secure(reply).header('cache-control', 'no-store').type('text/html; charset=utf-8').send(html)
  }

  app.get('/console', redirect, async (_request, reply) => secure(reply).header('cache-control', 'no-store').redirect('/console/', 301))
  app.get('/console/', page, async (_request, reply) => index(reply))

  app.get<{ Params: { name: string } }>('/console/assets/:name', assetRoute, async (request, reply) => {
    const { name } = request.params
    const match = ASSET_NAME.exec(name)
    if (match === null) return unknownAsset(reply)
    let body: Buffer
    try {
      body = await readFile(path.join(assets, name))
    } catch {
      return unknownAsset(reply)
    }
    return secure(reply)
      .header('cache-control', 'public, max-age=31536000, immutable')
      .type(CONTENT_TYPES[match[1] as string] as string)
      .send(body)
  })

  const unknownAsset = (reply: FastifyReply): FastifyReply => secure(reply).code(404).header('cache-control', 'no-store')
    .send({ error: 'not_found', message: 'No such console asset.' })

  // Client-side routes (/console/agents/…): the same page. Anything under assets/ was handled above.
  app.get('/console/*', page, async (request, reply) => {
    if (request.url.startsWith('/console/assets/')) return unknownAsset(reply)
    return index(reply)
  })
}
