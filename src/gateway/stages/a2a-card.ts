/**
 * The public agent card on an A2A route (docs/a2a.md, "The public card"): anonymous, as A2A clients fetch it,
 * so no badge and no decision. The gateway fetches it itself, reads it whole and strict, moves the interface
 * URLs that name the upstream to its own public address, countersigns it and answers with that; the agent
 * sees an anonymous request carrying only the client's A2A-Version. What was served is kept for the card's
 * lifetime (a2a/card-cache.ts), so anonymous callers cannot make the gateway fetch and sign at their pace.
 */
import { a2aBindingOf, a2aCardPath, classifyA2a, headerVersion } from '../../core/a2a-methods.js'
import { canonicalCardPayload, countersignCard, verifyCardSignatures } from '../../core/card-signatures.js'
import { MODE_STRICTNESS } from '../../core/enforcement-mode.js'
import { isRecord } from '../../core/json-objects.js'
import { parseStrictJson, StrictJsonError, type JsonValue } from '../../core/strict-json.js'
import { cardLifetimeSeconds, type CardOutcome, type LoadedCard } from '../a2a/card-cache.js'
import { A2aExchange } from '../a2a/exchange.js'
import { gatewayAddressOf, rewriteCardUrls, type UpstreamAddress } from '../a2a/card-rewrite.js'
import type { GatewayContext, RouteTarget } from '../context.js'
import { ANSWERED, RESUMES, type Step } from '../pipeline.js'
import type { RequestScope } from '../request-scope.js'
import type { GatewaySnapshot } from '../snapshot/snapshot.js'
import { CLIENT_CLOSED_STATUS, type WholeAnswer } from '../upstream/upstream.js'
import { fail, refuse } from './refuse.js'

/** The largest card the gateway reads (as the registry's signed-card limit, core/card-signatures.ts). */
export const MAX_PUBLIC_CARD_BYTES = 256 * 1024

/** A GET or HEAD of the well-known card path (either name) relative to an A2A route's prefix. */
export function isPublicCardRequest(scope: RequestScope): boolean {
  return scope.operationMethod === 'GET' && a2aBindingOf('GET', relativePath(scope)) === 'card'
}

function relativePath(scope: RequestScope): string {
  return scope.path.slice(scope.routePrefixLength) || '/'
}

export function enterPublicCard(ctx: GatewayContext, scope: RequestScope): Step {
  const exchange = new A2aExchange('card')
  const version = scope.req.headers['a2a-version']
  const versionHeader = typeof version === 'string' ? version : undefined
  // Every spelling of the card (case, a trailing slash) is the one card: fetched, keyed and served as such.
  const path = a2aCardPath(relativePath(scope)) as string
  exchange.call = classifyA2a({ httpMethod: 'GET', path, versionHeader, body: undefined })
  scope.a2a = exchange
  // One served card per path, version as read, mode and trusted keys: anything else the caller sends (a
  // query, another spelling of the version) neither reaches the agent nor makes another entry.
  const snapshot = scope.snapshot as GatewaySnapshot
  const key = `${path} ${exchange.call.version} ${scope.mode} ${snapshot.keysVersion} ${ctx.cardAuthority?.signingKey().kid ?? ''}`
  const upstreamPath = scope.path.slice(0, scope.routePrefixLength) + path
  const outcome = ctx.publicCards.get(scope.route as RouteTarget, key, scope.nowMs, () => loadCard(ctx, scope, upstreamPath, versionHeader))
  if (!(outcome instanceof Promise)) {
    deliver(ctx, scope, outcome)
    return ANSWERED
  }
  outcome.then((settled) => deliver(ctx, scope, settled)).catch((error: unknown) => fail(ctx, scope, error))
  return RESUMES
}

/** Fetches, checks, rewrites and signs the card for the request that found none stored. */
async function loadCard(ctx: GatewayContext, scope: RequestScope, upstreamPath: string, versionHeader: string | undefined): Promise<LoadedCard> {
  const headers: Record<string, string> = { accept: 'application/json' }
  // The version as the gateway read it (and keyed the card on): 1.0 said so, 0.3 is the header's absence.
  if (headerVersion(versionHeader) === '1.0') headers['a2a-version'] = '1.0'
  if (scope.txnId !== undefined) headers['x-service-txn'] = scope.txnId
  const answer = await (scope.route as RouteTarget).upstream.fetchWhole(upstreamPath, headers, MAX_PUBLIC_CARD_BYTES)
  const outcome = await answered(ctx, scope, answer)
  const lifetimeSeconds = outcome.kind === 'answer' && outcome.status === 200
    ? cardLifetimeSeconds(outcome.cacheControl, ctx.config.a2aCardCacheSeconds, ctx.config.a2aCardCacheSeconds)
    : 0
  return { outcome, lifetimeSeconds }
}

async function answered(ctx: GatewayContext, scope: RequestScope, answer: WholeAnswer): Promise<CardOutcome> {
  if (!answer.ok) {
    if (answer.code !== null) return { kind: 'refusal', code: answer.code }
    return refusedCard(ctx, scope, `the card is larger than ${MAX_PUBLIC_CARD_BYTES} bytes`)
  }
  // Anything but a card (404, a redirect, the agent's own error) is relayed as it came, bounded as a card is.
  if (answer.status !== 200) return { kind: 'answer', status: answer.status, body: answer.body, contentType: contentTypeOf(answer), cacheControl: undefined }
  let card: JsonValue
  try {
    card = parseStrictJson(answer.body)
  } catch (error) {
    if (!(error instanceof StrictJsonError)) throw error
    return refusedCard(ctx, scope, `not strict JSON: ${error.message}`)
  }
  if (!isRecord(card)) return refusedCard(ctx, scope, 'not a JSON object')
  return served(ctx, scope, card, headerOf(answer, 'cache-control'))
}

async function served(ctx: GatewayContext, scope: RequestScope, card: Record<string, unknown>, cacheControl: string | undefined): Promise<CardOutcome> {
  if ((scope.route as RouteTarget).requireCardSignature === true) {
    const problem = await signatureProblem(ctx, scope, card)
    if (problem !== null) {
      if (MODE_STRICTNESS[scope.mode] >= MODE_STRICTNESS['EM-GUARD']) {
        ctx.logger.warn({ request_id: scope.requestId, reason: problem }, 'gateway refused the upstream agent card')
        return { kind: 'refusal', code: 'A2A_CARD_SIGNATURE_INVALID' }
      }
      ctx.logger.warn({ request_id: scope.requestId, reason: problem }, 'agent card signature not verified (EM-OBSERVE: card served)')
    }
  }
  const answer = await cardAsServed(ctx, scope, card)
  return { kind: 'answer', status: 200, body: Buffer.from(JSON.stringify(answer)), contentType: 'application/json', cacheControl }
}

/** A card as the gateway serves it, public or extended: its interface URLs moved to the gateway, then signed. */
export function cardAsServed(ctx: GatewayContext, scope: RequestScope, card: Record<string, unknown>): Promise<Record<string, unknown>> {
  return signed(ctx, scope, card, rewriteCard(ctx, scope, card))
}

/**
 * Why the agent's card is not signed by a key the operator trusts, or null when one signature verifies: the
 * authority's keys, did:key, and did:web through the gateway's resolver (a registered agent's DID inside the
 * appliance), limited to the route's `cardSigner` DID when it names one. A `jku` the card names is never fetched.
 */
async function signatureProblem(ctx: GatewayContext, scope: RequestScope, card: Record<string, unknown>): Promise<string | null> {
  const authorityKeys = (scope.snapshot as GatewaySnapshot).keys
  const signer = (scope.route as RouteTarget).cardSigner
  const result = await verifyCardSignatures(card, (kid) => {
    const authority = authorityKeys.get(kid)
    if (authority !== undefined) return authority
    // A pinned signer: another DID's key proves nothing about this agent, however well it resolves.
    return signer === undefined || kid.startsWith(`${signer}#`) ? ctx.chains.keyOf(kid) : null
  })
  if (result.valid) return null
  if (!('signatures' in result)) return result.message
  if (result.signatures.length === 0) return 'the card has no signatures'
  return result.signatures.map((check) => (check.valid ? '' : check.message)).filter((m) => m !== '').join('; ')
}

/**
 * The card as served: a signature covers the canonical content, so when the rewrite changed it no earlier
 * signature can verify and all are dropped; inside the appliance the authority then countersigns it.
 */
async function signed(ctx: GatewayContext, scope: RequestScope, original: Record<string, unknown>, rewritten: Record<string, unknown>): Promise<Record<string, unknown>> {
  const before = canonicalCardPayload(original)
  const after = canonicalCardPayload(rewritten)
  const unchanged = before.ok && after.ok && before.canonical === after.canonical
  const card = unchanged ? rewritten : withoutSignatures(rewritten)
  const authority = ctx.cardAuthority
  if (authority === null) return card
  const { privateKey, kid } = authority.signingKey()
  const signer = { privateKey, kid, issuer: (scope.snapshot as GatewaySnapshot).issuer }
  let result = await countersignCard(card, signer)
  // The agent's malformed signature list cannot stand beside the authority's: it is dropped.
  if (!result.ok && result.error === 'SIGNATURES_MALFORMED') result = await countersignCard(withoutSignatures(card), signer)
  if (result.ok) return result.card
  ctx.logger.warn({ request_id: scope.requestId, reason: result.message }, 'agent card served without the authority countersignature')
  return card
}

function withoutSignatures(card: Record<string, unknown>): Record<string, unknown> {
  const { signatures: _dropped, ...rest } = card
  void _dropped
  return rest
}

function rewriteCard(ctx: GatewayContext, scope: RequestScope, card: Record<string, unknown>): Record<string, unknown> {
  const publicUrl = ctx.config.publicUrl
  if (publicUrl === null) return card
  const upstream = addressOf((scope.route as RouteTarget).upstream)
  return rewriteCardUrls(card, (url) => {
    const moved = gatewayAddressOf(url, upstream, publicUrl)
    if (moved === null) return null
    // Only where the gateway would send the client back to this same upstream is the new URL the old one.
    const route = ctx.routes.match(moved.path)
    if (route === null || !sameAddress(addressOf(route.value.upstream), upstream)) return null
    return moved.url
  }).card
}

function addressOf(upstream: UpstreamAddress): UpstreamAddress {
  return { origin: upstream.origin, basePath: upstream.basePath }
}

function sameAddress(a: UpstreamAddress, b: UpstreamAddress): boolean {
  return a.origin === b.origin && a.basePath === b.basePath
}

function refusedCard(ctx: GatewayContext, scope: RequestScope, reason: string): CardOutcome {
  ctx.logger.warn({ request_id: scope.requestId, reason }, 'gateway refused the upstream agent card')
  return { kind: 'refusal', code: 'A2A_CARD_INVALID' }
}

function headerOf(answer: WholeAnswer & { ok: true }, name: string): string | undefined {
  const value = answer.headers[name]
  return typeof value === 'string' ? value : undefined
}

function contentTypeOf(answer: WholeAnswer & { ok: true }): string | undefined {
  return headerOf(answer, 'content-type')
}

function deliver(ctx: GatewayContext, scope: RequestScope, outcome: CardOutcome): Step | void {
  if (outcome.kind === 'refusal') return refuse(ctx, scope, outcome.code)
  const { status, body, contentType, cacheControl } = outcome
  const res = scope.res
  if (res.destroyed) {
    // The client left while the card was fetched: the log line says so, as for a forwarded request.
    scope.status = CLIENT_CLOSED_STATUS
    return ctx.telemetry.finish(scope)
  }
  const headers: Record<string, string> = { vary: 'A2A-Version', 'content-length': String(body.length) }
  if (contentType !== undefined) headers['content-type'] = contentType
  if (cacheControl !== undefined) headers['cache-control'] = cacheControl
  if (scope.txnId !== undefined) headers['x-service-txn'] = scope.txnId
  try {
    res.writeHead(status, headers)
  } catch {
    // A header value Node refuses (the agent's own): nothing was written yet.
    res.removeHeader('content-type')
    res.removeHeader('cache-control')
    ctx.logger.warn({ request_id: scope.requestId, reason: 'a header the gateway cannot relay' }, 'gateway refused the upstream agent card')
    return refuse(ctx, scope, 'A2A_CARD_INVALID')
  }
  res.end(body)
  scope.status = status
  ctx.telemetry.finish(scope)
}
