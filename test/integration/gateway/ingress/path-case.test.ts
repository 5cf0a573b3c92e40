/**
 * Path case on routes that do not declare it: the gateway in front of real case-insensitive upstreams (Express
 * 5 and Fastify with `caseSensitive: false`, the defaults of the A2A SDK and of many agents), whose handlers
 * record which one ran. A policy denies `* /admin/**`, `GET /secret` and, written with capitals,
 * `GET /Reports/**`. On an undeclared route every case spelling of a denied path is denied and runs no
 * protected handler; a route declared `caseSensitive` decides as sent; one declared `caseInsensitive`
 * lower-cases.
 */
import t from 'tap'
import fc from 'fast-check'
import express from 'express'
import Fastify from 'fastify'
import { generateKeyPairSync } from 'node:crypto'
import type { Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { loadConfig } from '../../../../src/config/index.js'
import { buildBadgeClaims, signBadge } from '../../../../src/core/badge.js'
import type { ResolvedPolicy } from '../../../../src/core/policy/types.js'
import { RouteTable } from '../../../../src/gateway/ingress/routes.js'
import { createEmbeddedPdp } from '../../../../src/gateway/pdp/embedded-pdp.js'
import { createGateway, type RouteTarget } from '../../../../src/gateway/server.js'
import { SnapshotHolder } from '../../../../src/gateway/snapshot/snapshot.js'
import { Upstream } from '../../../../src/gateway/upstream/upstream.js'
import { createLogger } from '../../../../src/telemetry/logger.js'
import { createMetrics } from '../../../../src/telemetry/metrics.js'
import { propertyRuns } from '../../../helpers/property-runs.js'

const ISSUER = 'https://registry.test'
const SUBJECT = 'did:web:agents.example.com:alpha'
const PROTECTED = new Set(['admin', 'secret', 'reports'])
t.setTimeout(120_000)

/** What each upstream's handlers ran, in order. */
const ran: string[] = []

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => server.close(() => resolve())))
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

async function expressUpstream(): Promise<string> {
  const app = express()
  for (const [path, name] of [['/admin/x', 'admin'], ['/secret', 'secret'], ['/reports/q', 'reports'], ['/forecasts/today', 'forecasts']] as const) {
    app.get(path, (_req: unknown, res: { json(body: unknown): void }) => {
      ran.push(name)
      res.json({ handler: name })
    })
  }
  return listen(app.listen(0, '127.0.0.1'))
}

async function fastifyUpstream(): Promise<string> {
  const app = Fastify({ routerOptions: { caseSensitive: false } })
  for (const [path, name] of [['/admin/x', 'admin'], ['/secret', 'secret'], ['/reports/q', 'reports'], ['/forecasts/today', 'forecasts']] as const) {
    app.get(path, async () => {
      ran.push(name)
      return { handler: name }
    })
  }
  await app.listen({ port: 0, host: '127.0.0.1' })
  t.teardown(() => app.close())
  return `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`
}

const signing = generateKeyPairSync('ed25519')
const now = Math.floor(Date.now() / 1000)
const token = signBadge(buildBadgeClaims({
  jti: 'jti-case', issuer: ISSUER, subject: SUBJECT, issuedAt: now - 10, expiresAt: now + 3600, ial: '1', level: '2', domain: 'agents.example.com',
}), { kid: 'k1', privateKey: signing.privateKey })

const policy: ResolvedPolicy = {
  min_trust_level: null, allowed_dids: null, denied_dids: [], rate_limits: [],
  operations: [
    { pattern: '* /admin/**', allowed_dids: [] },
    { pattern: 'GET /secret', allowed_dids: [] },
    { pattern: 'GET /Reports/**', allowed_dids: [] },
  ],
  mcp_tools: [], capability_classes: [],
}
const holder = new SnapshotHolder()
holder.swap({
  issuer: ISSUER, keys: new Map([['k1', signing.publicKey]]), keysVersion: 'k1', revoked: new Set(),
  bundle: { revision: 'rev-1', data: { config: policy }, confirmedAt: Date.now() },
})
const config = loadConfig({ DATABASE_URL: 'memory://', CA_ISSUER_URL: ISSUER, SERVICE_UPSTREAM_URL: 'http://127.0.0.1:1', SERVICE_ENFORCEMENT_MODE: 'EM-GUARD' }).gateway

/** A gateway with `/e` (Express) and `/f` (Fastify) routes of the given case declaration, prefixes stripped by the upstream paths. */
async function gatewayFor(upstreamUrl: string, declared: Pick<RouteTarget, 'caseInsensitive' | 'caseSensitive'>): Promise<string> {
  const pool = new Upstream(upstreamUrl, { timeoutMs: 5_000 })
  t.teardown(() => pool.close())
  const value: RouteTarget = { upstream: pool, mode: null, ...declared }
  const gateway = createGateway({
    config, holder, pdp: createEmbeddedPdp(), routes: new RouteTable<RouteTarget>([{ prefix: '/', value, caseInsensitive: declared.caseInsensitive === true }]),
    breakglassKey: null, logger: createLogger('silent'), metrics: createMetrics().gateway,
  })
  t.teardown(() => gateway.dispose())
  return listen(gateway.server)
}

const upstreams = { express: await expressUpstream(), fastify: await fastifyUpstream() }
const gateways = {
  express: await gatewayFor(upstreams.express, {}),
  fastify: await gatewayFor(upstreams.fastify, {}),
}

async function get(base: string, path: string): Promise<{ status: number; handler: string | null }> {
  const before = ran.length
  const res = await fetch(base + path, { headers: { authorization: `Bearer ${token}` } })
  await res.arrayBuffer()
  const handlers = ran.slice(before)
  return { status: res.status, handler: handlers[0] ?? null }
}

t.test('the upstreams really ignore case (the oracle)', async (t) => {
  for (const [name, base] of Object.entries(upstreams)) {
    const res = await fetch(base + '/ADMIN/X')
    t.equal(res.status, 200, `${name} serves /ADMIN/X`)
    t.match(await res.json(), { handler: 'admin' })
  }
})

t.test('an undeclared route: the review\'s spellings are denied and run no protected handler', async (t) => {
  for (const [name, base] of Object.entries(gateways)) {
    for (const path of ['/Admin/x', '/SECRET', '/ADMIN/X', '/sEcReT', '/reports/q', '/REPORTS/Q']) {
      const reply = await get(base, path)
      t.equal(reply.status, 403, `${name} ${path}: 403`)
      t.equal(reply.handler, null, `${name} ${path}: nothing ran`)
    }
    const open = await get(base, '/Forecasts/Today')
    t.equal(open.status, 200, `${name}: an allowed path in any case is forwarded as sent`)
    t.equal(open.handler, 'forecasts')
  }
})

t.test('declared routes: caseSensitive decides as sent, caseInsensitive lower-cases', async (t) => {
  const sensitive = await gatewayFor(upstreams.express, { caseSensitive: true })
  const told = await get(sensitive, '/Admin/x')
  t.equal(told.status, 200, 'the operator said the upstream is case-sensitive: /Admin/x is not /admin/x')
  t.equal((await get(sensitive, '/admin/x')).status, 403)
  const insensitive = await gatewayFor(upstreams.express, { caseInsensitive: true })
  const lowered = await get(insensitive, '/Admin/x')
  t.equal(lowered.status, 403)
  t.equal(lowered.handler, null)
})

t.test('property: no case spelling of a protected path runs its handler through an undeclared route', async (t) => {
  const spelling = (path: string) => fc.array(fc.boolean(), { minLength: path.length, maxLength: path.length })
    .map((upper) => [...path].map((c, i) => (upper[i] === true ? c.toUpperCase() : c)).join(''))
  const path = fc.constantFrom('/admin/x', '/secret', '/reports/q', '/forecasts/today').chain(spelling)
  await fc.assert(fc.asyncProperty(fc.constantFrom('express', 'fastify') as fc.Arbitrary<keyof typeof gateways>, path, async (which, sent) => {
    const reply = await get(gateways[which], sent)
    if (reply.handler !== null && PROTECTED.has(reply.handler)) return false
    return reply.status === 403 ? reply.handler === null : reply.handler === 'forecasts'
  }), propertyRuns(150))
  t.pass('no spelling reached a protected handler')
})
