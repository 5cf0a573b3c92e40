/**
 * sendGatewayError never throws, whatever it is handed: header values that Node refuses (CR LF,
 * characters above U+00FF, NUL), hostile header names, codes outside the catalogue. The answer still
 * goes out in the documented shape, with the catalogue's status, without the offending header.
 * Responses are written to an in-memory socket and parsed back.
 */
import t from 'tap'
import fc from 'fast-check'
import { IncomingMessage, ServerResponse } from 'node:http'
import { Socket } from 'node:net'
import { PassThrough } from 'node:stream'
import { GATEWAY_ERROR_CODES, GATEWAY_ERRORS, type GatewayErrorCode } from '../../../src/core/gateway-errors.js'
import { sendGatewayError } from '../../../src/gateway/respond.js'
import { propertyRuns } from '../../helpers/property-runs.js'

interface Written {
  status: number
  headers: Map<string, string>
  body: unknown
  raw: string
}

/** A response on an in-memory socket, and a way to read back what was written. */
function response(): { res: ServerResponse; written: () => Promise<Written | null> } {
  const req = new IncomingMessage(new Socket())
  const res = new ServerResponse(req)
  const socket = new PassThrough()
  const chunks: Buffer[] = []
  socket.on('data', (chunk: Buffer) => chunks.push(chunk))
  res.assignSocket(socket as unknown as Socket)
  return {
    res,
    written: async () => {
      await new Promise((resolve) => setImmediate(resolve))
      const raw = Buffer.concat(chunks).toString('latin1')
      if (raw === '') return null
      const [head, body] = raw.split('\r\n\r\n') as [string, string]
      const [statusLine, ...lines] = head.split('\r\n')
      const headers = new Map<string, string>()
      for (const line of lines) {
        const colon = line.indexOf(':')
        headers.set(line.slice(0, colon).toLowerCase(), line.slice(colon + 1).trim())
      }
      return { status: Number(statusLine!.split(' ')[1]), headers, body: JSON.parse(body), raw }
    },
  }
}

t.test('a decision id Node would refuse is left out; the error still goes out', async (t) => {
  for (const [label, value] of [['CR LF', 'd\r\nx-evil: 1'], ['non-Latin-1', 'é€'], ['U+2028', 'a\u2028b'], ['NUL', 'a\u0000b']] as const) {
    const { res, written } = response()
    t.doesNotThrow(() => sendGatewayError(res, 'PDP_UNAVAILABLE', { 'x-service-txn': 'txn-1', 'x-service-decision-id': value }), `${label}: no throw`)
    const out = await written()
    t.equal(out?.status, 503, `${label}: status`)
    t.same(out?.body, { error: 'PDP_UNAVAILABLE', message: 'The policy decision point is unavailable.' }, `${label}: documented shape`)
    t.equal(out?.headers.get('x-service-txn'), 'txn-1', `${label}: the other headers are kept`)
    t.notOk(out?.headers.has('x-service-decision-id'), `${label}: the offending header is left out`)
    t.notOk(out?.headers.has('x-evil'), `${label}: nothing injected`)
    t.equal(out?.headers.get('x-service-gateway'), 'error', `${label}: marked as gateway-made`)
  }
})

t.test('hostile names and codes', async (t) => {
  const { res, written } = response()
  const status = sendGatewayError(res, 'not a code\r\n' as GatewayErrorCode, { 'bad name': 'v', '__proto__': 'x', 'content-length': '0', 'x-ok': 'yes' })
  const out = await written()
  t.equal(out?.status, 500, 'a code outside the catalogue is a 500')
  t.equal(status, 500, 'and says so')
  t.same(out?.body, { error: 'GATEWAY_ERROR', message: 'The gateway failed to handle the request.' }, 'a code that is not code-shaped becomes GATEWAY_ERROR')
  t.equal(out?.headers.get('x-ok'), 'yes', 'a good extra header is written')
  t.notOk(out?.headers.has('bad name'), 'a name with a space is left out')
  t.not(out?.headers.get('content-length'), '0', 'content-length is the gateway\'s own')
})

t.test('a denial\'s details follow error and message; only strings are written', async (t) => {
  const denied = response()
  sendGatewayError(denied.res, 'POLICY_DENIED', { 'x-service-decision-id': 'dec-1' }, { decision_id: 'dec-1', reason: 'not "today" \\ </script>' })
  const out = await denied.written()
  t.strictSame(out?.body, { error: 'POLICY_DENIED', message: 'The policy denies this request.', decision_id: 'dec-1', reason: 'not "today" \\ </script>' }, 'decision id and reason, escaped as JSON')
  t.same(Object.keys(out?.body as object), ['error', 'message', 'decision_id', 'reason'], 'in that order')
  t.equal(Number(out?.headers.get('content-length')), Buffer.byteLength(out?.raw.split('\r\n\r\n')[1] ?? ''), 'content-length counts the longer body')

  const hidden = response()
  sendGatewayError(hidden.res, 'POLICY_DENIED', {}, { decision_id: 'dec-2' })
  t.strictSame((await hidden.written())?.body, { error: 'POLICY_DENIED', message: 'The policy denies this request.', decision_id: 'dec-2' }, 'no reason member when none is given')

  const odd = response()
  t.doesNotThrow(() => sendGatewayError(odd.res, 'POLICY_DENIED', {}, { decision_id: 5, reason: { toJSON: () => 'x' }, error: 'X' } as never))
  t.strictSame((await odd.written())?.body, { error: 'POLICY_DENIED', message: 'The policy denies this request.' }, 'non-strings and other members are left out')
})

t.test('after the head went out, the connection is cut instead', async (t) => {
  const { res } = response()
  res.writeHead(200)
  res.write('partial')
  t.doesNotThrow(() => sendGatewayError(res, 'UPSTREAM_UNAVAILABLE'))
  t.ok(res.destroyed, 'destroyed')
})

t.test('every code answers with its catalogue status and message; anything else is GATEWAY_ERROR', async (t) => {
  for (const code of [...GATEWAY_ERROR_CODES, 'NOT_IN_THE_CATALOGUE', 'constructor', '__proto__', 'toString']) {
    const { res, written } = response()
    const status = sendGatewayError(res, code as GatewayErrorCode)
    const out = await written()
    const expected = Object.hasOwn(GATEWAY_ERRORS, code) ? GATEWAY_ERRORS[code as GatewayErrorCode] : GATEWAY_ERRORS.GATEWAY_ERROR
    t.equal(out?.status, expected.status, `${code}: status ${expected.status}`)
    t.equal(status, expected.status, `${code}: the status is returned`)
    t.strictSame(out?.body, { error: expected.code, message: expected.message }, `${code}: body`)
  }
})

t.test('property: any code and headers: no throw, the documented shape', async (t) => {
  const text = fc.oneof(fc.string({ unit: 'binary', maxLength: 40 }), fc.string({ maxLength: 40 }), fc.constantFrom('\r\n', 'é€', '\u2028', ''))
  await fc.assert(
    fc.asyncProperty(
      fc.oneof(text, fc.constantFrom(...GATEWAY_ERROR_CODES)),
      fc.dictionary(fc.oneof(text, fc.constantFrom('x-service-decision-id', 'retry-after')), text, { maxKeys: 5 }),
      async (code, headers) => {
        const { res, written } = response()
        sendGatewayError(res, code as GatewayErrorCode, headers)
        const out = await written()
        if (out === null) throw new Error('nothing written')
        if (!(out.status >= 400 && out.status <= 599)) throw new Error(`status ${out.status}`)
        const body = out.body as Record<string, unknown>
        if (typeof body.error !== 'string' || typeof body.message !== 'string' || Object.keys(body).length !== 2) throw new Error('shape')
        if (out.headers.get('content-type') !== 'application/json; charset=utf-8') throw new Error('content-type')
      },
    ),
    propertyRuns(300),
  )
  t.pass('held')
})
