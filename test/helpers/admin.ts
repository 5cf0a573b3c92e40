/**
 * Builds the admin plane exactly as main.ts does, on a real socket (port 0) and a real database, with
 * a known bootstrap operator key. Everything is closed in teardown.
 */
import { Redis } from 'ioredis'
import { Writable } from 'node:stream'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { generateApiKeySecret } from '../../src/core/api-key.js'
import { loadConfig, type Config } from '../../src/config/index.js'
import { buildAdminApp } from '../../src/admin/app.js'
import type { BundleCache } from '../../src/bundles/cache.js'
import { KeyRing } from '../../src/authority/key-ring.js'
import { bootstrap, bootstrapKeyFile } from '../../src/admin/services/credentials.js'
import { createLogger } from '../../src/telemetry/logger.js'
import { createMetrics } from '../../src/telemetry/metrics.js'
import { createTestDatabase, type TestDatabase } from './database.js'

export interface TestAdmin {
  readonly url: string
  readonly config: Config
  readonly database: TestDatabase
  /** The operator key of the `default` organization. */
  readonly operatorKey: string
  /** Every log line the app wrote, for assertions that secrets never reach the log. */
  readonly logs: string[]
  readonly keyRing: KeyRing
  request(method: string, path: string, options?: RequestOptions): Promise<TestResponse>
}

export interface RequestOptions {
  key?: string | null
  body?: unknown
  /** Raw body text, sent as-is (for malformed JSON and size tests). */
  rawBody?: string | Buffer
  headers?: Record<string, string>
}

export interface TestResponse {
  status: number
  headers: Headers
  body: any
  text: string
}

interface Tap {
  teardown(fn: () => unknown): void
}

/**
 * `env` overrides configuration variables; with REDIS_URL set the app gets a real Redis client (as in
 * main.ts). `options.database` lets several instances share one database, as a scaled-out deployment;
 * `options.bundles` gives the app a bundle cache shared with a gateway snapshot, as in the appliance.
 */
export async function startTestAdmin(
  t: Tap, env: Record<string, string> = {}, options: { database?: TestDatabase; bundles?: BundleCache } = {},
): Promise<TestAdmin> {
  const database = options.database ?? (await createTestDatabase(t))
  const dataDir = mkdtempSync(path.join(tmpdir(), 'svc-test-'))
  const operatorKey = env.SERVICE_BOOTSTRAP_API_KEY ?? generateApiKeySecret()
  const config = loadConfig({
    DATABASE_URL: 'memory://',
    SERVICE_DATA_DIR: dataDir,
    SERVICE_LOG_LEVEL: 'info',
    PORT: '0',
    SERVICE_HOST: '127.0.0.1',
    CA_ISSUER_URL: 'http://registry.test:8080',
    SERVICE_BOOTSTRAP_API_KEY: operatorKey,
    ...env,
  })
  await bootstrap(database.db, { configuredKey: operatorKey, keyFile: bootstrapKeyFile(dataDir, config.database) })
  const logs: string[] = []
  const sink = new Writable({
    write(chunk, _encoding, callback) {
      logs.push(String(chunk))
      callback()
    },
  })
  let redis: Redis | null = null
  if (config.redisUrl !== null) {
    redis = new Redis(config.redisUrl, { maxRetriesPerRequest: 1, enableOfflineQueue: false, lazyConnect: true })
    await redis.connect()
    const client = redis
    t.teardown(() => client.quit())
  }
  const keyRing = await KeyRing.open(config.caKeyPath)
  t.teardown(() => keyRing.close())
  const app = await buildAdminApp({
    keyRing,
    config,
    db: database.db,
    logger: createLogger('info', sink),
    metrics: createMetrics(),
    redis,
    readiness: async () => ({ ready: true, checks: { database: true } }),
    ...(options.bundles === undefined ? {} : { bundles: options.bundles }),
  })
  await app.listen({ port: 0, host: '127.0.0.1' })
  t.teardown(() => app.close())
  const address = app.server.address()
  const url = `http://127.0.0.1:${typeof address === 'object' && address !== null ? address.port : 0}`

  const request = async (method: string, urlPath: string, options: RequestOptions = {}): Promise<TestResponse> => {
    const headers: Record<string, string> = { ...options.headers }
    const key = options.key === undefined ? operatorKey : options.key
    if (key !== null) headers.authorization = `Bearer ${key}`
    let body: string | Buffer | undefined
    if (options.rawBody !== undefined) body = options.rawBody
    else if (options.body !== undefined) body = JSON.stringify(options.body)
    if (body !== undefined && headers['content-type'] === undefined) headers['content-type'] = 'application/json'
    const response = await fetch(`${url}${urlPath}`, { method, headers, ...(body === undefined ? {} : { body }) })
    const text = await response.text()
    let parsed: unknown = undefined
    try {
      parsed = text === '' ? undefined : JSON.parse(text)
    } catch {
      parsed = undefined
    }
    return { status: response.status, headers: response.headers, body: parsed, text }
  }
  return { url, config, database, operatorKey, logs, keyRing, request }
}

/** Creates an organization through the API (operator only) and returns its admin key. */
export async function createOrg(admin: TestAdmin, name: string): Promise<{ orgId: string; key: string }> {
  const res = await admin.request('POST', '/v1/orgs', { body: { name } })
  if (res.status !== 201) throw new Error(`org creation failed: ${res.status} ${res.text}`)
  return { orgId: res.body.data.org.id, key: res.body.data.apiKey.key }
}
