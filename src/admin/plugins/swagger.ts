/**
 * Swagger 2.0 (docs/api.md §9) generated from the route schemas, at `/swagger/doc.json`, and the interactive
 * UI at `/swagger/index.html`. The UI's assets are swagger-ui's own files, served by the appliance from
 * @fastify/swagger-ui (no CDN).
 */
import swagger from '@fastify/swagger'
import swaggerUi from '@fastify/swagger-ui'
import type { FastifyInstance } from 'fastify'

/**
 * The page at /swagger/index.html. The plugin's own page derives the description's address from the
 * page's (`<page>/json`), which is wrong for a page named index.html, so this page brings its own
 * initializer; relative links keep it working behind a reverse proxy that adds a path prefix.
 */
const INDEX_HTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<title>Agent trust service API</title>
<link rel="stylesheet" type="text/css" href="static/swagger-ui.css" />
<link rel="stylesheet" type="text/css" href="static/index.css" />
<link rel="icon" type="image/png" href="static/favicon-32x32.png" sizes="32x32" />
<link rel="icon" type="image/png" href="static/favicon-16x16.png" sizes="16x16" />
</head>
<body>
<div id="swagger-ui"></div>
<script src="static/swagger-ui-bundle.js" charset="UTF-8"></script>
<script src="static/swagger-ui-standalone-preset.js" charset="UTF-8"></script>
<script src="index.js" charset="UTF-8"></script>
</body>
</html>
`

const INDEX_JS = `window.onload = function () {
  window.ui = SwaggerUIBundle({
    url: new URL('doc.json', window.location.href).href,
    dom_id: '#swagger-ui',
    deepLinking: true,
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset],
    plugins: [SwaggerUIBundle.plugins.DownloadUrl],
    layout: 'StandaloneLayout',
    validatorUrl: null,
  })
}
`

export async function registerSwagger(app: FastifyInstance, options: { version: string; host: string }): Promise<void> {
  await app.register(swagger, {
    swagger: {
      info: {
        title: 'Agent trust service',
        description: 'Registry, badge authority and policy service for AI agents.',
        version: options.version,
      },
      host: options.host,
      schemes: ['http', 'https'],
      consumes: ['application/json'],
      produces: ['application/json'],
      securityDefinitions: {
        bearer: { type: 'apiKey', name: 'Authorization', in: 'header', description: 'Bearer <API key or session token>' },
        registryKey: { type: 'apiKey', name: 'X-Service-Registry-Key', in: 'header' },
      },
      security: [{ bearer: [] }, { registryKey: [] }],
    },
  })
  // The documentation is public: mark every route the UI plugin adds, before it adds them.
  app.addHook('onRoute', (route) => {
    if (route.url.startsWith('/swagger')) route.config = { ...route.config, auth: 'public' }
  })
  await app.register(swaggerUi, { routePrefix: '/swagger' })
  const documentation = { schema: { hide: true }, config: { auth: 'public' } } as const
  app.get('/swagger/doc.json', documentation, async () => app.swagger())
  app.get('/swagger/index.html', documentation, async (_request, reply) => reply.type('text/html; charset=utf-8').send(INDEX_HTML))
  app.get('/swagger/index.js', documentation, async (_request, reply) => reply.type('application/javascript; charset=utf-8').send(INDEX_JS))
}
