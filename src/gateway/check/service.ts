/**
 * The check services (docs/ext-authz.md): Envoy's ext_authz over gRPC, and one HTTP endpoint family for Envoy's
 * HTTP mode, nginx `auth_request` and Traefik ForwardAuth. Each proxy's request description is read from the
 * headers that proxy sets, on its own path and only when SERVICE_CHECK_HTTP_PROXIES names it; who may ask at
 * all is SERVICE_CHECK_PEERS. Every check then runs the gateway's own pipeline (check.ts).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import * as grpc from '@grpc/grpc-js'
import type { CheckHttpProxy } from '../../config/index.js'
import { gatewayError, type GatewayErrorCode } from '../../core/gateway-errors.js'
import type { GatewayContext } from '../context.js'
import { STRICT_PARSER } from '../ingress/framing.js'
import { trustedPeerCheck } from '../ingress/trusted-peers.js'
import { sendGatewayError } from '../respond.js'
import { runCheck } from './check.js'
import type { CheckInput, CheckProxy, CheckVerdict } from './exchange.js'
import { authorizationService, checkInputOf, checkResponseOf, loadExtAuthzDefinition, malformedVerdict, peerAddress, type CheckRequestMessage } from './grpc.js'

export interface CheckService {
  /** Binds the configured listeners; the ports they got (0 asks the system for one). */
  listen(host: string): Promise<{ readonly grpc: number | null; readonly http: number | null }>
  close(): Promise<void>
}

const PARTIAL_BODY = 'x-envoy-auth-partial-body'
const NGINX_HEADERS = new Set(['x-original-uri', 'x-original-method'])
const TRAEFIK_HEADERS = new Set(['x-forwarded-method', 'x-forwarded-uri', 'x-forwarded-host', 'x-forwarded-proto'])

export function createCheckService(ctx: GatewayContext): CheckService | null {
  const config = ctx.config.check
  if (config.grpcPort === null && config.httpPort === null) return null
  const allowedPeer = trustedPeerCheck(config.peers)
  let grpcServer: grpc.Server | null = null
  let httpServer: Server | null = null

  async function listenGrpc(host: string, port: number): Promise<number> {
    const server = new grpc.Server({ 'grpc.max_receive_message_length': ctx.config.mcpMaxBodyBytes + ctx.config.maxHeadBytes })
    server.addService(authorizationService(loadExtAuthzDefinition()), {
      Check: (call: grpc.ServerUnaryCall<CheckRequestMessage, object>, callback: grpc.sendUnaryData<object>) => {
        const address = peerAddress(call.getPeer())
        if (!allowedPeer(address)) {
          callback({ code: grpc.status.PERMISSION_DENIED, details: gatewayError('CHECK_PEER_NOT_ALLOWED').message })
          return
        }
        const input = checkInputOf(call.request, address)
        if (typeof input === 'string') {
          ctx.logger.warn({ reason: input, proxy: 'envoy-grpc' }, 'check refused: unreadable CheckRequest')
          callback(null, checkResponseOf(malformedVerdict()))
          return
        }
        void runCheck(ctx, input).then((verdict) => callback(null, checkResponseOf(verdict)))
      },
    })
    grpcServer = server
    return new Promise((resolve, reject) => {
      server.bindAsync(`${host.includes(':') ? `[${host}]` : host}:${port}`, grpc.ServerCredentials.createInsecure(), (error, bound) => (error === null ? resolve(bound) : reject(error)))
    })
  }

  async function listenHttp(host: string, port: number): Promise<number> {
    const server = createServer({ keepAlive: true, maxHeaderSize: ctx.config.maxHeadBytes, ...STRICT_PARSER }, (req, res) => {
      try {
        handleHttpCheck(ctx, config.httpProxies, config.envoyPathPrefix, allowedPeer, req, res)
      } catch (error) {
        ctx.logger.error({ err: error }, 'check request failed')
        if (!res.headersSent) sendGatewayError(res, 'GATEWAY_ERROR')
      }
    })
    httpServer = server
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject)
      server.listen(port, host, () => {
        server.off('error', reject)
        resolve()
      })
    })
    return (server.address() as AddressInfo).port
  }

  return {
    async listen(host) {
      const grpcPort = config.grpcPort === null ? null : await listenGrpc(host, config.grpcPort)
      const httpPort = config.httpPort === null ? null : await listenHttp(host, config.httpPort)
      ctx.logger.info({ grpc: grpcPort, http: httpPort, http_proxies: config.httpProxies }, 'check services listening')
      return { grpc: grpcPort, http: httpPort }
    },
    async close() {
      const closing: Promise<void>[] = []
      if (grpcServer !== null) {
        const server = grpcServer
        closing.push(new Promise((resolve) => server.tryShutdown(() => resolve())))
        setTimeout(() => server.forceShutdown(), 2_000).unref()
      }
      if (httpServer !== null) {
        const server = httpServer
        closing.push(new Promise((resolve) => server.close(() => resolve())))
        server.closeIdleConnections()
      }
      await Promise.all(closing)
    },
  }
}

function refuseCheck(res: ServerResponse, code: GatewayErrorCode): void {
  sendGatewayError(res, code)
}

function handleHttpCheck(
  ctx: GatewayContext, proxies: readonly CheckHttpProxy[], envoyPrefix: string, allowedPeer: (address: string | undefined) => boolean,
  req: IncomingMessage, res: ServerResponse,
): void {
  if (!allowedPeer(req.socket.remoteAddress)) return refuseCheck(res, 'CHECK_PEER_NOT_ALLOWED')
  const url = req.url ?? '/'
  const path = url.split('?', 1)[0]!
  if (proxies.includes('envoy') && (url === envoyPrefix || url.startsWith(envoyPrefix + '/') || url.startsWith(envoyPrefix + '?'))) {
    const target = url.slice(envoyPrefix.length)
    return readCheckBody(ctx, req, (body, tooLarge) => {
      const partial = tooLarge || header(req, PARTIAL_BODY)?.trim().toLowerCase() === 'true'
      const input = described(req, 'envoy-http', req.method ?? 'GET', target.startsWith('/') ? target : '/' + target, req.headers.host, body, partial, new Set([PARTIAL_BODY]))
      answer(ctx, input, res)
    })
  }
  if (proxies.includes('nginx') && path === '/nginx') {
    const method = header(req, 'x-original-method')
    const target = header(req, 'x-original-uri')
    if (method === undefined || target === undefined) return refuseCheck(res, 'REQUEST_MALFORMED')
    // auth_request sends no body: a route that decides on it refuses in the enforcing modes.
    req.resume()
    return answer(ctx, described(req, 'nginx', method, target, req.headers.host, null, false, NGINX_HEADERS), res)
  }
  if (proxies.includes('traefik') && path === '/traefik') {
    const method = header(req, 'x-forwarded-method')
    const target = header(req, 'x-forwarded-uri')
    if (method === undefined || target === undefined) return refuseCheck(res, 'REQUEST_MALFORMED')
    return readCheckBody(ctx, req, (body, tooLarge) => {
      answer(ctx, described(req, 'traefik', method, target, header(req, 'x-forwarded-host') ?? req.headers.host, body, tooLarge, TRAEFIK_HEADERS), res)
    })
  }
  req.resume()
  refuseCheck(res, 'ROUTE_NOT_FOUND')
}

/** A header the proxy sets once; a repeated one is as good as none (the check cannot tell which it meant). */
function header(req: IncomingMessage, name: string): string | undefined {
  let found: string | undefined
  const raw = req.rawHeaders
  for (let i = 0; i < raw.length; i += 2) {
    if (raw[i]!.toLowerCase() !== name) continue
    if (found !== undefined) return undefined
    found = raw[i + 1]!
  }
  return found
}

/** The request being checked: the check request's own headers, less the ones that only describe it. */
function described(
  req: IncomingMessage, proxy: CheckProxy, method: string, target: string, host: string | undefined, body: Buffer | null, partialBody: boolean,
  describing: ReadonlySet<string>,
): CheckInput {
  const rawHeaders: string[] = []
  const raw = req.rawHeaders
  for (let i = 0; i < raw.length; i += 2) {
    const lower = raw[i]!.toLowerCase()
    if (describing.has(lower) || lower === 'host' || lower === 'connection' || lower === 'keep-alive') continue
    rawHeaders.push(raw[i]!, raw[i + 1]!)
  }
  return { proxy, method, target, host, rawHeaders, body: body !== null && body.length > 0 ? body : null, partialBody, remoteAddress: req.socket.remoteAddress }
}

/** The check request's body, at most SERVICE_MCP_MAX_BODY_BYTES (more is a part only). */
function readCheckBody(ctx: GatewayContext, req: IncomingMessage, done: (body: Buffer, tooLarge: boolean) => void): void {
  const max = ctx.config.mcpMaxBodyBytes
  const chunks: Buffer[] = []
  let size = 0
  let tooLarge = false
  req.on('data', (chunk: Buffer) => {
    if (tooLarge) return
    if (size + chunk.length > max) {
      tooLarge = true
      return
    }
    size += chunk.length
    chunks.push(chunk)
  })
  req.on('end', () => done(Buffer.concat(chunks, size), tooLarge))
}

function answer(ctx: GatewayContext, input: CheckInput, res: ServerResponse): void {
  void runCheck(ctx, input).then((verdict) => writeVerdict(res, input.proxy, verdict))
}

/**
 * An allow is a 200 carrying the headers to set (Envoy's HTTP mode also reads `x-envoy-auth-headers-to-remove`);
 * a refusal is the gateway's own answer, never a 2xx, which every HTTP mode reads as an allow. nginx relays
 * only 401 and 403 (anything else is its own 500), so its refusals are those two, with `X-Service-Status`.
 */
function writeVerdict(res: ServerResponse, proxy: CheckProxy, verdict: CheckVerdict): void {
  if (res.headersSent) return
  const headers: Record<string, string> = Object.create(null) as Record<string, string>
  if (verdict.allowed) {
    pairsInto(headers, verdict.set)
    pairsInto(headers, verdict.responseHeaders)
    if (proxy === 'envoy-http' && verdict.remove.length > 0) headers['x-envoy-auth-headers-to-remove'] = verdict.remove.join(', ')
    headers['cache-control'] = 'no-store'
    headers['content-length'] = '0'
    res.writeHead(200, headers)
    res.end()
    return
  }
  pairsInto(headers, verdict.headers)
  let status = verdict.status < 400 ? gatewayError(verdict.code).status : verdict.status
  if (proxy === 'nginx' && status !== 401 && status !== 403) {
    headers['x-service-status'] = String(status)
    status = 403
  }
  headers['x-service-error'] = verdict.code
  headers['content-length'] = String(Buffer.byteLength(verdict.body))
  res.writeHead(status, headers)
  res.end(verdict.body)
}

function pairsInto(headers: Record<string, string>, pairs: readonly string[]): void {
  for (let i = 0; i + 1 < pairs.length; i += 2) headers[pairs[i]!] = pairs[i + 1]!
}
