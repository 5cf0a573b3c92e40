import t from 'tap'
import fc from 'fast-check'
import { batchesAllowed, decodeHeaderValue, headersMatchBody, readMcpHeaders, type McpRequestHeaders } from '../../../../src/gateway/mcp/headers.js'
import { describeMessage, type McpMessageInfo } from '../../../../src/gateway/mcp/methods.js'
import type { JsonRpcMessage } from '../../../../src/core/json-rpc.js'
import { propertyRuns } from '../../../helpers/property-runs.js'

const empty = (): McpRequestHeaders => ({
  contentType: undefined, contentEncoding: undefined, mcpMethod: undefined, mcpName: undefined, protocolVersion: undefined, sessionId: undefined,
})

function read(raw: string[]): { code: string | null; headers: McpRequestHeaders } {
  const headers = empty()
  return { code: readMcpHeaders(raw, headers), headers }
}

t.test('content type and encoding', async (t) => {
  for (const type of ['application/json', 'Application/JSON', 'application/json; charset=utf-8', 'application/json;charset="UTF-8"', ' application/json ']) {
    t.equal(read(['Content-Type', type]).code, null, `${type} is JSON`)
  }
  for (const type of ['text/plain', 'application/json; charset=latin1', 'application/jsonx', 'application/json-rpc', 'application/json; boundary=x', '']) {
    t.equal(read(['Content-Type', type]).code, 'MCP_CONTENT_TYPE_UNSUPPORTED', `${JSON.stringify(type)} is refused`)
  }
  t.equal(read([]).code, 'MCP_CONTENT_TYPE_UNSUPPORTED', 'a missing content type is refused')
  t.equal(read(['content-type', 'application/json', 'Content-Type', 'application/json']).code, 'MCP_CONTENT_TYPE_UNSUPPORTED', 'two content types are refused')
  t.equal(read(['content-type', 'application/json', 'Content-Encoding', 'identity']).code, null)
  for (const coding of ['gzip', 'br', 'deflate', 'identity, gzip']) {
    t.equal(read(['content-type', 'application/json', 'Content-Encoding', coding]).code, 'MCP_CONTENT_ENCODING_UNSUPPORTED', coding)
  }
  for (const name of ['Mcp-Method', 'Mcp-Name', 'MCP-Protocol-Version', 'Mcp-Session-Id']) {
    t.equal(read(['content-type', 'application/json', name, 'a', name, 'a']).code, 'MCP_HEADER_MISMATCH', `a repeated ${name} is refused`)
  }
  const { headers } = read(['content-type', 'application/json', 'mcp-session-id', 's1', 'MCP-Protocol-Version', '2025-06-18'])
  t.equal(headers.sessionId, 's1')
  t.equal(headers.protocolVersion, '2025-06-18')
})

t.test('batches are allowed only in 2025-03-26 (or without the header)', async (t) => {
  t.ok(batchesAllowed(empty()))
  t.ok(batchesAllowed({ ...empty(), protocolVersion: '2025-03-26' }))
  for (const version of ['2025-06-18', '2025-11-25', '2024-11-05', 'garbage']) t.notOk(batchesAllowed({ ...empty(), protocolVersion: version }), version)
})

t.test('SEP-2243 header values', async (t) => {
  t.equal(decodeHeaderValue('search'), 'search')
  t.equal(decodeHeaderValue(`=?base64?${Buffer.from('café ☕').toString('base64')}?=`), 'café ☕')
  t.equal(decodeHeaderValue('=?base64?not base64?='), '=?base64?not base64?=', 'not the encoded form: taken as it is')
  t.equal(decodeHeaderValue('=?base64?QQ?='), null, 'unpadded base64 is refused')
  t.equal(decodeHeaderValue(`=?base64?${Buffer.from([0xff, 0xfe]).toString('base64')}?=`), null, 'invalid UTF-8 is refused')
  fc.assert(fc.property(fc.string({ unit: 'grapheme' }), (name) => {
    t.equal(decodeHeaderValue(`=?base64?${Buffer.from(name, 'utf8').toString('base64')}?=`), name)
  }), propertyRuns(200))
})

t.test('Mcp-Method and Mcp-Name against the body', async (t) => {
  const info = (message: JsonRpcMessage): McpMessageInfo => describeMessage(message) as McpMessageInfo
  const call = info({ kind: 'request', id: 1, method: 'tools/call', params: { name: 'search' } })
  const read_ = info({ kind: 'request', id: 2, method: 'resources/read', params: { uri: 'file:///a.md' } })
  const list = info({ kind: 'request', id: 3, method: 'tools/list', params: undefined })
  const match = (over: Partial<McpRequestHeaders>, messages: McpMessageInfo[], batch = false): boolean => headersMatchBody({ ...empty(), ...over }, messages, batch)
  t.ok(match({}, [call]), 'no headers: nothing to compare')
  t.ok(match({ mcpMethod: 'tools/call', mcpName: 'search' }, [call]))
  t.ok(match({ mcpMethod: 'resources/read', mcpName: 'file:///a.md' }, [read_]))
  t.ok(match({ mcpMethod: 'tools/list' }, [list]))
  t.notOk(match({ mcpMethod: 'tools/list' }, [call]), 'another method')
  t.notOk(match({ mcpName: 'delete' }, [call]), 'another name')
  t.notOk(match({ mcpName: 'search' }, [list]), 'a name for a method that names nothing')
  t.notOk(match({ mcpMethod: 'tools/call' }, [call, call], true), 'headers on a batch')
  t.notOk(match({ mcpMethod: 'TOOLS/CALL' }, [call]), 'methods compare exactly')
  t.notOk(match({ mcpName: `=?base64?${Buffer.from('search ').toString('base64')}?=` }, [call]), 'the decoded name must be exact')
})
