/**
 * The appliance's admin plane as users run it: composed by main.ts's `composeAppliance` (key file watch,
 * bootstrap, Redis, bundle cache, readiness, the admin plane, the challenge sweep) on a real socket (port
 * 0) and a real database, with a known bootstrap operator key and the log captured. Everything is closed
 * in teardown.
 */
import { Writable } from 'node:stream'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { generateApiKeySecret } from '../../src/core/api-key.js'
import { loadConfig, type Config } from '../../src/config/index.js'
import type { BundleCache } from '../../src/bundles/cache.js'
import { KeyRing } from '../../src/authority/key-ring.js'
import { composeAppliance } from '../../src/main.js'
import { createLogger } from '../../src/telemetry/logger.js'
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
  /** The bundle cache `/v1/bundles` serves, which an appliance's gateway snapshot shares. */
  readonly bundles: BundleCache
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

/** How long a test admin with REDIS_URL waits for Redis before it serves (the rate limiter counts locally until then). */
const REDIS_READY_TIMEOUT_MS = 5_000

/**
 * `env` overrides configuration variables (REDIS_URL connects Redis as in main.ts, and the helper waits
 * until it is ready). `options.database` lets several instances share one database, as a scaled-out
 * deployment; `options.bundles` gives the app a bundle cache the test made (to count builds).
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
  const logs: string[] = []
  const sink = new Writable({
    write(chunk, _encoding, callback) {
      logs.push(String(chunk))
      callback()
    },
  })
  const keyRing = await KeyRing.open(config.caKeyPath)
  const parts = await composeAppliance(config, {
    db: database.db,
    keyRing,
    logger: createLogger(config.logLevel, sink),
    ...(options.bundles === undefined ? {} : { bundles: options.bundles }),
  }).catch((error: unknown) => {
    keyRing.close()
    throw error
  })
  const app = parts.admin
  t.teardown(async () => {
    await app.close()
    await parts.close()
    keyRing.close()
  })
  const redis = parts.redis
  if (redis !== null) {
    const deadline = Date.now() + REDIS_READY_TIMEOUT_MS
    while (redis.state() !== 'ready' && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20))
  }
  await app.listen({ port: 0, host: '127.0.0.1' })
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
  return { url, config, database, operatorKey, logs, keyRing, bundles: parts.bundles, request }
}

/** Creates an organization through the API (operator only) and returns its admin key. */
export async function createOrg(admin: TestAdmin, name: string): Promise<{ orgId: string; key: string }> {
  const res = await admin.request('POST', '/v1/orgs', { body: { name } })
  if (res.status !== 201) throw new Error(`org creation failed: ${res.status} ${res.text}`)
  return { orgId: res.body.data.org.id, key: res.body.data.apiKey.key }
}

/** Waits until every pending audit record is chained (the chainer runs right after each write). */
export async function auditSettled(admin: TestAdmin): Promise<void> {
  for (let i = 0; i < 500; i++) {
    const [row] = await admin.database.db.query<{ n: number }>('SELECT count(*)::int AS n FROM audit_pending')
    if (row?.n === 0) return
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  throw new Error('audit records stayed pending')
}
