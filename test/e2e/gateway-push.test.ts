/**
 * Acceptance of issue 33, point 1: changes reach every gateway-only process within a second, by push.
 * One appliance (`agent-trust serve` on PostgreSQL and Redis) and five gateway-only processes
 * (`agent-trust gateway`, embedded PDP on the appliance's workspace) with SERVICE_BUNDLE_POLL_INTERVAL=10m,
 * so that no poll can explain the speed. Fifty changes: policy approvals, agent disable and enable, agent
 * deletes, badge revocations, key rotations and retirements (`agent-trust keys rotate` / `keys retire`,
 * which edit the key file). Each is timed from the admin call's answer (the CLI's exit for keys) to the
 * first request each gateway decides on the new state, every gateway probed every 2 ms, all at once.
 * p99 under 1 s is asserted; the distribution is printed (docs/performance.md, "Propagation to
 * gateway-only processes"). Then: no gateway polls revocations while the stream is up.
 *
 * PGlite is a single-process database, so the file is skipped with SERVICE_TEST_DB=pglite.
 */
import t from 'tap'
import { spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { decodeProtectedHeader } from 'jose'
import { Redis } from 'ioredis'
import { generateApiKeySecret } from '../../src/core/api-key.js'
import { bootstrap, BOOTSTRAP_KEY_FILE } from '../../src/admin/services/credentials.js'
import { loadOrCreateKeyFile } from '../../src/authority/key-ring.js'
import { adminCall, agentWithBadge, CLI, exitSafeTeardown, SLOW_START, startService, type RunningService } from '../helpers/appliance.js'
import { BACKEND, createTestDatabase } from '../helpers/database.js'
import { startUpstream } from '../helpers/upstream-server.js'

t.setTimeout(900_000)

const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379'
const ISSUER = 'http://registry.test'
const GATEWAYS = 5
const CYCLES = Number(process.env.PUSH_TEST_CYCLES ?? 5)
/** A gateway that has not flipped after this long counts as a miss (and fails the p99). */
const GIVE_UP_MS = 10_000

type Kind = 'policy approval' | 'agent disable/enable' | 'agent delete' | 'badge revocation' | 'key rotation' | 'key retirement'

function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] as number
}

function distribution(samples: readonly number[]): string {
  const sorted = [...samples].sort((a, b) => a - b)
  const f = (p: number): string => String(Math.round(percentile(sorted, p)))
  return `n=${sorted.length} min=${Math.round(sorted[0] as number)} p50=${f(50)} p90=${f(90)} p99=${f(99)} max=${Math.round(sorted.at(-1) as number)}`
}

if (BACKEND === 'pglite') {
  t.test('propagation to gateway-only processes', { skip: 'SERVICE_TEST_DB=pglite: an embedded PGlite database cannot be shared between processes' }, () => {})
} else {
  const teardown = exitSafeTeardown(t)
  const operatorKey = generateApiKeySecret()
  const dir = mkdtempSync(path.join(tmpdir(), 'svc-e2e-push-'))
  const prefix = `test-push-${randomBytes(4).toString('hex')}:`
  t.teardown(async () => {
    const redis = new Redis(REDIS_URL)
    const keys = await redis.keys(`${prefix}*`)
    if (keys.length > 0) await redis.del(...keys)
    await redis.quit()
  })
  const database = await createTestDatabase(t)
  await bootstrap(database.db, { configuredKey: operatorKey, keyFile: path.join(dir, BOOTSTRAP_KEY_FILE) })
  const caKeyPath = path.join(dir, 'ca-keys.json')
  await loadOrCreateKeyFile(caKeyPath)
  const upstream = await startUpstream(t)
  const appliance = await startService(teardown, {
    DATABASE_URL: database.url as string,
    REDIS_URL,
    SERVICE_DECISIONS_REDIS_PREFIX: prefix,
    SERVICE_BOOTSTRAP_API_KEY: operatorKey,
    CA_KEY_PATH: caKeyPath,
    CA_ISSUER_URL: ISSUER,
    SERVICE_RATE_LIMIT_PER_MINUTE: '100000',
  }, SLOW_START)
  const admin = appliance.adminUrl
  const call = async (method: string, urlPath: string, body?: unknown): Promise<any> => {
    const res = await adminCall(admin, operatorKey, method, urlPath, body)
    if (res.status >= 300) throw new Error(`${method} ${urlPath}: ${res.status} ${JSON.stringify(res.body)}`)
    return res.body
  }
  const orgId = (await call('GET', '/v1/me')).data.org_id as string
  const registryKey = (await call('POST', '/v1/keys', { name: 'push-gateways' })).data.key as string
  const gateways: RunningService[] = await Promise.all(Array.from({ length: GATEWAYS }, () => startService(teardown, {
    SERVICE_REGISTRY_URL: admin,
    SERVICE_REGISTRY_KEY: registryKey,
    SERVICE_UPSTREAM_URL: upstream.url,
    CA_ISSUER_URL: ISSUER,
    SERVICE_ENFORCEMENT_MODE: 'EM-GUARD',
    SERVICE_EMBEDDED_PDP: 'true',
    SERVICE_WORKSPACE: orgId,
    SERVICE_BUNDLE_POLL_INTERVAL: '10m',
    SERVICE_BUNDLE_STALENESS_THRESHOLD: '1h',
  }, { command: 'gateway', ...SLOW_START })))

  const status = async (gateway: RunningService, token: string): Promise<number> => {
    const res = await fetch(`${gateway.gatewayUrl}/push/probe`, { headers: { authorization: `Bearer ${token}` } })
    await res.arrayBuffer()
    return res.status
  }
  /** Polls every gateway until each answers `want`; the milliseconds from `since` per gateway. */
  const flips = (token: string, want: (status: number) => boolean, since: number): Promise<number[]> =>
    Promise.all(gateways.map(async (gateway) => {
      for (;;) {
        if (want(await status(gateway, token))) return Date.now() - since
        if (Date.now() - since > GIVE_UP_MS) return Number.POSITIVE_INFINITY
        // 2 ms between probes: five loops without a pause take a core from the processes they measure.
        await new Promise((r) => setTimeout(r, 2))
      }
    }))
  /** Setup, untimed: every gateway is in the state `want` before a change is made. */
  const settled = async (token: string, want: (status: number) => boolean, what: string): Promise<void> => {
    const times = await flips(token, want, Date.now())
    if (times.some((ms) => !Number.isFinite(ms))) throw new Error(`setup: the gateways never reached ${what}`)
  }
  const samples = new Map<Kind, number[]>()
  const record = (kind: Kind, times: number[]): void => {
    samples.set(kind, [...(samples.get(kind) ?? []), ...times])
    process.stderr.write(`# ${kind}: ${times.map((ms) => Math.round(ms)).join(' ')} ms\n`)
  }
  const allowed = (s: number): boolean => s === 200
  const denied = (s: number): boolean => s === 403
  const refused = (s: number): boolean => s === 401
  const proposeThenApprove = async (scope: string, yaml: string): Promise<number> => {
    const proposal = await call('POST', `/v1/orgs/${orgId}/policy/${scope}`, { yaml_content: yaml })
    await call('POST', `/v1/orgs/${orgId}/policy/proposals/${proposal.id}/approve`)
    return Date.now()
  }
  const cli = (...args: string[]): string => {
    const run = spawnSync(process.execPath, [CLI, ...args], {
      env: { PATH: process.env.PATH, HOME: process.env.HOME, CA_KEY_PATH: caKeyPath, DATABASE_URL: database.url as string, SERVICE_LOG_LEVEL: 'warn' },
      encoding: 'utf8', timeout: 60_000,
    })
    if (run.status !== 0) throw new Error(`agent-trust ${args.join(' ')}: ${run.stderr}`)
    return run.stdout
  }
  const badgeOf = async (agentId: string): Promise<string> => (await call('POST', `/v1/agents/${agentId}/badge`, { domain: 'example.com' })).data.token as string

  t.test('every gateway-only process is up on the push stream', async (t) => {
    for (const [i, gateway] of gateways.entries()) {
      let body: any
      const deadline = Date.now() + 30_000
      do {
        body = await (await fetch(`${gateway.adminUrl}/readyz`)).json()
        if (body.degraded?.push === undefined) break
        await new Promise((r) => setTimeout(r, 100))
      } while (Date.now() < deadline)
      t.match(body, { status: 'ready', degraded: {} }, `gateway ${i}: ready, nothing degraded`)
      t.notOk(body.degraded?.push, 'the push stream is up')
      t.match(await (await fetch(`${gateway.adminUrl}/metrics`)).text(), /^service_gateway_snapshot_push_connected 1$/m, 'and says so in its metrics')
    }
  })

  t.test(`${CYCLES * 10} changes reach all ${GATEWAYS} gateways: p99 under 1 s`, async (t) => {
    const policyAgent = await agentWithBadge(admin, operatorKey, 'push-policy')
    const statusAgent = await agentWithBadge(admin, operatorKey, 'push-status')
    const revokedAgent = await agentWithBadge(admin, operatorKey, 'push-revoked')
    const keyAgent = await agentWithBadge(admin, operatorKey, 'push-keys')
    const denyPolicy = `version: "1"\ndenied_dids: ["${policyAgent.did}"]\n`
    const allowPolicy = (n: number): string => `version: "1"\ndenied_dids: ["did:web:nobody-${n}.example"]\n`

    for (let cycle = 0; cycle < CYCLES; cycle++) {
      // Badges of the current signer: the last cycle retired the key of the earlier ones.
      const policyToken = await badgeOf(policyAgent.id)
      const statusToken = await badgeOf(statusAgent.id)
      await settled(policyToken, allowed, 'an allow for the policy probe')
      await settled(statusToken, allowed, 'an allow for the status probe')
      // Policy approvals: the org policy denies the probe agent, then no longer does.
      record('policy approval', await flips(policyToken, denied, await proposeThenApprove('org', denyPolicy)))
      record('policy approval', await flips(policyToken, allowed, await proposeThenApprove('org', allowPolicy(cycle))))

      await call('POST', `/v1/agents/${statusAgent.id}/disable`)
      record('agent disable/enable', await flips(statusToken, denied, Date.now()))
      await call('POST', `/v1/agents/${statusAgent.id}/enable`)
      record('agent disable/enable', await flips(statusToken, allowed, Date.now()))

      // Deleting an agent revokes its unexpired badges in the same transaction: its badge stops verifying.
      for (let i = 0; i < 2; i++) {
        const doomed = await agentWithBadge(admin, operatorKey, `push-doomed-${cycle}-${i}`)
        await settled(doomed.token, allowed, 'an allow for the agent\'s badge')
        await call('DELETE', `/v1/agents/${doomed.id}`)
        record('agent delete', await flips(doomed.token, refused, Date.now()))
      }

      for (let i = 0; i < 2; i++) {
        const issued = (await call('POST', `/v1/agents/${revokedAgent.id}/badge`, { domain: 'example.com' })).data
        await settled(issued.token, allowed, 'an allow for a new badge')
        await call('POST', `/v1/badges/${issued.jti}/revoke`, { reason: 'push test' })
        record('badge revocation', await flips(issued.token, refused, Date.now()))
      }

      // Rotation: from the CLI's exit, the admin plane notices the key file, issues with the new key,
      // and each gateway must accept a badge signed with it.
      const oldToken = await badgeOf(keyAgent.id)
      const oldKid = decodeProtectedHeader(oldToken).kid as string
      await settled(oldToken, allowed, 'an allow for a badge of the current key')
      const newKid = /new signing key (\S+);/.exec(cli('keys', 'rotate'))?.[1] as string
      const rotatedAt = Date.now()
      let newToken = await badgeOf(keyAgent.id)
      while (decodeProtectedHeader(newToken).kid !== newKid) {
        if (Date.now() - rotatedAt > GIVE_UP_MS) throw new Error('the admin plane never signed with the rotated key')
        newToken = await badgeOf(keyAgent.id)
      }
      record('key rotation', await flips(newToken, allowed, rotatedAt))
      // Retirement: the old key leaves the JWKS, and its badge is refused.
      cli('keys', 'retire', oldKid, '--force')
      record('key retirement', await flips(oldToken, refused, Date.now()))
    }

    const all = [...samples.values()].flat()
    t.equal(all.length, CYCLES * 10 * GATEWAYS, `${CYCLES * 10} changes × ${GATEWAYS} gateways`)
    const lines = ['kind | samples | min | p50 | p90 | p99 | max (ms)']
    for (const [kind, times] of samples) lines.push(`${kind}: ${distribution(times)}`)
    lines.push(`all: ${distribution(all)}`)
    t.comment(`propagation to gateway-only processes\n${lines.join('\n')}`)
    process.stdout.write(`# PROPAGATION ${JSON.stringify(Object.fromEntries([...samples].map(([k, v]) => [k, distribution(v)]).concat([['all', distribution(all)]])))}\n`)
    const sorted = [...all].sort((a, b) => a - b)
    t.ok(percentile(sorted, 99) < 1000, `p99 ${Math.round(percentile(sorted, 99))} ms < 1000 ms`)
    t.ok(sorted.every(Number.isFinite), 'every gateway reached every new state')
  })

  t.test('in steady state no gateway polls revocations', async (t) => {
    const revocationPolls = async (): Promise<number> => {
      const text = await (await fetch(`${admin}/metrics`)).text()
      let sum = 0
      for (const match of text.matchAll(/^service_admin_requests_total\{[^}]*route="\/v1\/revocations"[^}]*\} (\d+)/gm)) sum += Number(match[1])
      return sum
    }
    const before = await revocationPolls()
    await new Promise((r) => setTimeout(r, 5000))
    const after = await revocationPolls()
    t.equal(after - before, 0, `no revocation poll in 5 s from ${GATEWAYS} gateways (polling would make ${5 * GATEWAYS})`)
  })
}
