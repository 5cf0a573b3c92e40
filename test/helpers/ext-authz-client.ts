/**
 * The Envoy side of the gRPC check: a @grpc/grpc-js client built from the same proto definitions as the
 * service, a reader of the raw CheckResponse bytes by field number (independent of those definitions, so a
 * wrong number on both sides still fails), and what Envoy's ext_authz filter does with the answer.
 */
import * as grpc from '@grpc/grpc-js'
import * as protoLoader from '@grpc/proto-loader'
import { EXT_AUTHZ_PROTO, PROTO_OPTIONS } from '../../src/gateway/check/grpc.js'

const CHECK_PATH = '/envoy.service.auth.v3.Authorization/Check'

export interface CheckHttp {
  method: string
  path: string
  host?: string
  headers: Record<string, string>
  body?: Buffer
}

/** A field of a protobuf message on the wire: a varint or a length-delimited value. */
type WireValue = number | Buffer

/** Decodes a message into its fields by number (varint and length-delimited wire types only). */
export function wireFields(buf: Buffer): Map<number, WireValue[]> {
  const fields = new Map<number, WireValue[]>()
  let at = 0
  const varint = (): number => {
    let result = 0
    let shift = 0
    for (;;) {
      const byte = buf[at++]!
      result += (byte & 0x7f) * 2 ** shift
      if ((byte & 0x80) === 0) return result
      shift += 7
    }
  }
  while (at < buf.length) {
    const tag = varint()
    const field = Math.floor(tag / 8)
    const wire = tag & 7
    let value: WireValue
    if (wire === 0) value = varint()
    else if (wire === 2) {
      const length = varint()
      value = buf.subarray(at, at + length)
      at += length
    } else throw new Error(`wire type ${wire} not expected in a CheckResponse`)
    fields.set(field, [...(fields.get(field) ?? []), value])
  }
  return fields
}

const first = (fields: Map<number, WireValue[]>, n: number): WireValue | undefined => fields.get(n)?.[0]
const text = (value: WireValue | undefined): string => (value instanceof Buffer ? value.toString('utf8') : '')
const sub = (value: WireValue | undefined): Map<number, WireValue[]> => (value instanceof Buffer ? wireFields(value) : new Map())

interface HeaderOption { key: string; value: string; appendAction: number }

function headerOptions(values: WireValue[] | undefined): HeaderOption[] {
  return (values ?? []).map((value) => {
    const option = sub(value)
    const header = sub(first(option, 1))
    return { key: text(first(header, 1)), value: text(first(header, 2)), appendAction: Number(first(option, 3) ?? 0) }
  })
}

/** What Envoy makes of a CheckResponse: the request it forwards, or the answer it sends the client. */
export type EnvoyOutcome =
  | { allowed: true; grpcCode: 0; upstreamHeaders: Record<string, string>; responseHeaders: Record<string, string> }
  | { allowed: false; grpcCode: number; status: number; headers: Record<string, string>; body: string }

export function envoyApply(raw: Buffer, request: Record<string, string>): EnvoyOutcome {
  const response = wireFields(raw)
  const grpcCode = Number(first(sub(first(response, 1)), 1) ?? 0)
  if (grpcCode === 0) {
    const ok = sub(first(response, 3))
    const upstream: Record<string, string> = { ...request }
    for (const option of headerOptions(ok.get(2))) {
      // OVERWRITE_IF_EXISTS_OR_ADD replaces; the default appends, as Envoy would.
      upstream[option.key] = option.appendAction === 2 || upstream[option.key] === undefined ? option.value : `${upstream[option.key]},${option.value}`
    }
    for (const name of (ok.get(5) ?? []).map(text)) if (!name.startsWith(':') && name !== 'host') delete upstream[name]
    const responseHeaders: Record<string, string> = {}
    for (const option of headerOptions(ok.get(6))) responseHeaders[option.key] = option.value
    return { allowed: true, grpcCode: 0, upstreamHeaders: upstream, responseHeaders }
  }
  const denied = sub(first(response, 2))
  const status = Number(first(sub(first(denied, 1)), 1) ?? 0)
  const headers: Record<string, string> = {}
  for (const option of headerOptions(denied.get(2))) headers[option.key] = option.value
  // Envoy answers 403 when the denial names no status.
  return { allowed: false, grpcCode, status: status === 0 ? 403 : status, headers, body: text(first(denied, 3)) }
}

export interface ExtAuthzClient {
  /** The decoded answer (through the proto definitions) and the raw bytes. */
  check(http: CheckHttp): Promise<{ decoded: any; raw: Buffer }>
  close(): void
}

export function extAuthzClient(address: string): ExtAuthzClient {
  const root = grpc.loadPackageDefinition(protoLoader.loadSync(EXT_AUTHZ_PROTO, PROTO_OPTIONS)) as any
  const Authorization = root.envoy.service.auth.v3.Authorization as grpc.ServiceClientConstructor
  const definition = Authorization.service.Check!
  const raw = new grpc.Client(address, grpc.credentials.createInsecure())
  return {
    check(http) {
      const request = { attributes: { request: { http: { method: http.method, path: http.path, host: http.host ?? 'gateway.test', headers: http.headers, ...(http.body === undefined ? {} : { raw_body: http.body }) } } } }
      // One call: the raw bytes, decoded afterwards with the same definitions as a generated client would.
      return new Promise((resolve, reject) => raw.makeUnaryRequest(
        CHECK_PATH, definition.requestSerialize, (b: Buffer) => b, request,
        (error, answer) => (error === null || error === undefined ? resolve({ decoded: definition.responseDeserialize(answer as Buffer), raw: answer as Buffer }) : reject(error)),
      ))
    },
    close() {
      raw.close()
    },
  }
}
