// Complete HTTP/1.1 answers for a socket without a response object (a refused parse, CONNECT, a time-out).
import { STATUS_CODES } from 'node:http'
import { gatewayError, type GatewayErrorCode } from '../core/gateway-errors.js'

/** A JSON answer with `Connection: close`; `extraHeaders` are whole `Name: value\r\n` lines. */
export function rawJsonResponse(status: number, body: object, extraHeaders = ''): string {
  const json = JSON.stringify(body)
  return `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\n` +
    'Content-Type: application/json; charset=utf-8\r\n' +
    `Content-Length: ${Buffer.byteLength(json)}\r\n` +
    'Cache-Control: no-store\r\n' +
    extraHeaders +
    'Connection: close\r\n' +
    '\r\n' +
    json
}

/** A gateway-made error from the catalogue, in the same shape and marking as one written through a response. */
export function rawGatewayError(code: GatewayErrorCode, extraHeaders = ''): string {
  const { status, message } = gatewayError(code)
  return rawJsonResponse(status, { error: code, message }, 'X-Service-Gateway: error\r\n' + extraHeaders)
}
