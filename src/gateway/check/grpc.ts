/**
 * Envoy's ext_authz v3 over gRPC (docs/ext-authz.md): `envoy.service.auth.v3.Authorization/Check`, from the
 * hand-written subset of the published definitions in proto/. The RPC itself always succeeds for a peer that
 * may ask: the decision is in the CheckResponse, so a refusal is never mistaken for a failure of the service
 * (which `failure_mode_allow` could turn into an allow).
 */
import * as grpc from '@grpc/grpc-js'
import * as protoLoader from '@grpc/proto-loader'
import { gatewayError } from '../../core/gateway-errors.js'
import { projectPath } from '../../core/paths.js'
import type { CheckInput, CheckVerdict } from './exchange.js'

export const EXT_AUTHZ_PROTO = 'envoy/service/auth/v3/external_auth.proto'

/** How the definitions are read, by the service and by the tests' client alike. */
export const PROTO_OPTIONS: protoLoader.Options = Object.freeze({
  keepCase: true, longs: String, enums: Number, defaults: false, oneofs: true, includeDirs: [projectPath('proto')],
})

/** gRPC status codes (google.rpc.Code) a CheckResponse carries. */
export const GRPC_OK = 0
export const GRPC_PERMISSION_DENIED = 7
export const GRPC_UNAUTHENTICATED = 16
const OVERWRITE_IF_EXISTS_OR_ADD = 2

export function loadExtAuthzDefinition(): grpc.GrpcObject {
  return grpc.loadPackageDefinition(protoLoader.loadSync(EXT_AUTHZ_PROTO, PROTO_OPTIONS))
}

/** The Authorization service's definition, as grpc-js registers it. */
export function authorizationService(root: grpc.GrpcObject): grpc.ServiceDefinition {
  const envoy = root.envoy as grpc.GrpcObject
  const auth = ((envoy.service as grpc.GrpcObject).auth as grpc.GrpcObject).v3 as grpc.GrpcObject
  return (auth.Authorization as grpc.ServiceClientConstructor).service
}

interface HeaderValueMessage {
  readonly key?: string
  readonly value?: string
  readonly raw_value?: Buffer
}

interface HttpRequestMessage {
  readonly method?: string
  readonly headers?: Record<string, string>
  readonly header_map?: { readonly headers?: readonly HeaderValueMessage[] }
  readonly path?: string
  readonly host?: string
  readonly body?: string
  readonly raw_body?: Buffer
}

export interface CheckRequestMessage {
  readonly attributes?: { readonly request?: { readonly http?: HttpRequestMessage } }
}

const PARTIAL_BODY = 'x-envoy-auth-partial-body'

/** The request Envoy will forward, or a reason it cannot be read. */
export function checkInputOf(message: CheckRequestMessage, remoteAddress: string | undefined): CheckInput | string {
  const http = message?.attributes?.request?.http
  if (http === undefined || http === null) return 'no attributes.request.http'
  const method = http.method ?? ''
  const path = http.path ?? ''
  if (!/^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/.test(method)) return 'no HTTP method'
  if (path === '') return 'no path'
  const rawHeaders: string[] = []
  let partialBody = false
  const add = (name: string, value: string): void => {
    const lower = name.toLowerCase()
    // Pseudo-headers are the method, path and authority given above; the partial-body flag is Envoy's own.
    if (lower.startsWith(':')) return
    if (lower === PARTIAL_BODY) {
      partialBody = value.trim().toLowerCase() === 'true'
      return
    }
    rawHeaders.push(lower, value)
  }
  const listed = http.header_map?.headers
  if (listed !== undefined && listed.length > 0) {
    for (const header of listed) add(header.key ?? '', header.value !== undefined && header.value !== '' ? header.value : (header.raw_value ?? Buffer.alloc(0)).toString('latin1'))
  } else {
    const headers = http.headers ?? {}
    for (const name of Object.keys(headers)) add(name, headers[name] ?? '')
  }
  const raw = http.raw_body !== undefined && http.raw_body.length > 0 ? http.raw_body : http.body !== undefined && http.body !== '' ? Buffer.from(http.body, 'utf8') : null
  return { proxy: 'envoy-grpc', method, target: path, host: http.host, rawHeaders, body: raw, partialBody, remoteAddress }
}

function headerOptions(pairs: readonly string[]): { header: { key: string; value: string }; append_action: number }[] {
  const options = []
  for (let i = 0; i + 1 < pairs.length; i += 2) options.push({ header: { key: pairs[i]!, value: pairs[i + 1]! }, append_action: OVERWRITE_IF_EXISTS_OR_ADD })
  return options
}

/** The CheckResponse of a verdict: an OkHttpResponse, or a DeniedHttpResponse with the gateway's answer. */
export function checkResponseOf(verdict: CheckVerdict): object {
  if (verdict.allowed) {
    return {
      status: { code: GRPC_OK },
      ok_response: { headers: headerOptions(verdict.set), headers_to_remove: verdict.remove, response_headers_to_add: headerOptions(verdict.responseHeaders) },
    }
  }
  return {
    status: { code: verdict.status === 401 ? GRPC_UNAUTHENTICATED : GRPC_PERMISSION_DENIED, message: verdict.code },
    denied_response: { status: { code: verdict.status }, headers: headerOptions(verdict.headers), body: verdict.body },
  }
}

/** A refusal made before any pipeline ran (an unreadable check). */
export function malformedVerdict(): CheckVerdict {
  const { code, status, message } = gatewayError('REQUEST_MALFORMED')
  return { allowed: false, status, code, headers: ['content-type', 'application/json; charset=utf-8', 'cache-control', 'no-store', 'x-service-gateway', 'error'], body: JSON.stringify({ error: code, message }) }
}

/** `ipv4:127.0.0.1:5000`, `[::1]:5000` or `127.0.0.1:5000` → the address. */
export function peerAddress(peer: string): string | undefined {
  const bare = peer.replace(/^ipv[46]:/, '')
  if (bare.startsWith('[')) return bare.slice(1, bare.indexOf(']'))
  const colon = bare.lastIndexOf(':')
  return colon < 0 ? bare : bare.slice(0, colon)
}
