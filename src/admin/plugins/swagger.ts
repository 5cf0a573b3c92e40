/**
 * Swagger 2.0 (spec §9) generated from the route schemas, at `/swagger/doc.json`, and the interactive
 * UI at `/swagger/index.html`.
 */
import swagger from '@fastify/swagger'
import swaggerUi from '@fastify/swagger-ui'
import type { FastifyInstance } from 'fastify'

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
  await app.register(swaggerUi, { routePrefix: '/swagger', uiConfig: { url: '/swagger/doc.json' } })
  app.get('/swagger/doc.json', { schema: { hide: true }, config: { auth: 'public' } }, async () => app.swagger())
  // The UI plugin serves its page at /swagger; spec §4.8 names /swagger/index.html. For a URL without a
  // trailing slash the page links its assets absolutely, so the same HTML works at both addresses.
  let indexHtml: string | null = null
  app.get('/swagger/index.html', { schema: { hide: true }, config: { auth: 'public' } }, async (_request, reply) => {
    indexHtml ??= (await app.inject({ method: 'GET', url: '/swagger' })).body
    return reply.type('text/html; charset=utf-8').send(indexHtml)
  })
}
